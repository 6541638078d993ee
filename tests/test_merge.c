/*
 * test_merge.c -- ak_merge_states on the CPU backend against the double-precision oracle
 * (orc_merge), plus an end-to-end check: paged MHA over two disjoint key sets, merged with the
 * sink applied once, equals one MHA call over all keys with the sink.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ak_test.h"
#include "oracle.h"
#include "oracle_mha.h"

static ak_context *cpu_ctx(int32_t threads) {
    ak_context_options o = {AK_BACKEND_CPU, threads, 0, NULL};
    ak_context *ctx = NULL;
    CHECK_STATUS(ak_context_create(&o, &ctx), AK_OK);
    return ctx;
}

typedef struct merge_case {
    int32_t n, rows, h, d;
    int32_t in_base2, out_base2;
    int32_t bf16_in, bf16_out;
    int32_t sink; /* 0 none, 1 finite, 2 mixed +-inf / finite */
} merge_case;

/* Random partials: lse in the input base; about one in four is empty (+inf or -inf), and row 0 is
   empty in every partial. An empty partial's out is NaN, which must not leak. */
static void merge_check(const merge_case *c, int32_t threads, ak_rng *r) {
    int64_t per = (int64_t)c->rows * c->h, nv = (int64_t)c->n * per * c->d;
    int32_t isz = c->bf16_in ? 2 : 4, osz = c->bf16_out ? 2 : 4;
    void *outs = malloc((size_t)(nv * isz + 4));
    float *lses = (float *)malloc(sizeof(float) * (size_t)(c->n * per + 1));
    double *douts = (double *)malloc(sizeof(double) * (size_t)(nv + 1));
    double *dlses = (double *)malloc(sizeof(double) * (size_t)(c->n * per + 1));
    for (int64_t k = 0; k < c->n * per; k++) {
        int64_t row = (k % per) / c->h;
        double u = ak_rng_uniform(r);
        float l = (float)(ak_rng_normal(r) * 4.0);
        if (row == 0 || u < 0.25) l = u < 0.125 ? INFINITY : -INFINITY;
        lses[k] = l;
        dlses[k] = l;
        for (int32_t e = 0; e < c->d; e++) {
            int64_t i = k * c->d + e;
            float v = isinf(l) ? NAN : (float)ak_rng_normal(r);
            if (c->bf16_in) {
                uint16_t b = isinf(l) ? 0x7fc0 : orc_bf16_bits(v);
                ((uint16_t *)outs)[i] = b;
                douts[i] = isinf(l) ? NAN : orc_bf16(b);
            } else {
                ((float *)outs)[i] = v;
                douts[i] = v;
            }
        }
    }
    float *sink = (float *)malloc(sizeof(float) * (size_t)c->h);
    for (int32_t k = 0; k < c->h; k++) {
        sink[k] = (float)ak_rng_normal(r);
        if (c->sink == 2 && k % 3 != 2) sink[k] = k % 3 == 0 ? INFINITY : -INFINITY;
    }
    int64_t so[4] = {c->n, c->rows, c->h, c->d}, sh = c->h;
    ak_tensor to = ak_tensor_make(outs, c->bf16_in ? AK_DTYPE_BF16 : AK_DTYPE_F32, 4, so);
    ak_tensor tl = ak_tensor_make(lses, AK_DTYPE_F32, 3, so);
    ak_tensor ts = ak_tensor_make(sink, AK_DTYPE_F32, 1, &sh);
    void *out = malloc((size_t)(per * c->d * osz + 4));
    float *lse = (float *)malloc(sizeof(float) * (size_t)(per + 1));
    ak_poison(out, (size_t)(per * c->d * osz), c->bf16_out ? AK_DTYPE_BF16 : AK_DTYPE_F32);
    ak_poison(lse, sizeof(float) * (size_t)per, AK_DTYPE_F32);
    ak_tensor tout = ak_tensor_make(out, c->bf16_out ? AK_DTYPE_BF16 : AK_DTYPE_F32, 3, so + 1);
    ak_tensor tlse = ak_tensor_make(lse, AK_DTYPE_F32, 2, so + 1);
    ak_context *ctx = cpu_ctx(threads);
    CHECK_STATUS(ak_merge_states(ctx, &to, &tl, c->in_base2 ? AK_LSE_BASE_2 : AK_LSE_BASE_E,
                                 c->sink ? &ts : NULL, &tout, &tlse,
                                 c->out_base2 ? AK_LSE_BASE_2 : AK_LSE_BASE_E),
                 AK_OK);
    ak_context_destroy(ctx);

    double *ro = (double *)malloc(sizeof(double) * (size_t)(per * c->d + 1));
    double *rl = (double *)malloc(sizeof(double) * (size_t)(per + 1));
    orc_merge(c->n, c->rows, c->h, c->d, douts, dlses, c->in_base2, c->sink ? sink : NULL, ro, rl,
              c->out_base2);
    float *got = (float *)malloc(sizeof(float) * (size_t)(per * c->d + 1));
    for (int64_t i = 0; i < per * c->d; i++)
        got[i] = c->bf16_out ? (float)orc_bf16(((uint16_t *)out)[i]) : ((float *)out)[i];
    char what[128];
    snprintf(what, sizeof what, "merge n %d h %d d %d base %d->%d bf16 %d/%d sink %d", (int)c->n,
             (int)c->h, (int)c->d, (int)c->in_base2, (int)c->out_base2, (int)c->bf16_in,
             (int)c->bf16_out, (int)c->sink);
    /* fp32 weights and accumulators against fp64: ~1e-6 relative; bf16 out adds 2^-9 */
    ak_tol to32 = {1e-5, 1e-4, -1, 1e-10}, to16 = {1e-3, 2.01 / 128, -1, 5e-5};
    ak_compare(what, got, ro, per * c->d, c->bf16_out ? to16 : to32);
    ak_tol tol = {1e-6, 2.01 / 65536, -1, -1}; /* fp64 math rounded once to fp32 */
    ak_compare(what, lse, rl, per, tol);
    free(outs);
    free(lses);
    free(douts);
    free(dlses);
    free(sink);
    free(out);
    free(lse);
    free(ro);
    free(rl);
    free(got);
}

AK_TEST(merge_against_oracle) {
    ak_rng r;
    ak_rng_init(&r, ak_test_seed());
    static const merge_case cases[] = {
        {2, 9, 8, 128, 0, 0, 0, 0, 0}, {3, 5, 4, 64, 1, 1, 0, 0, 1}, {5, 4, 16, 128, 1, 0, 1, 0, 2},
        {1, 6, 2, 64, 0, 1, 0, 1, 1},  {4, 3, 3, 600, 0, 0, 1, 1, 2}, {2, 7, 1, 256, 1, 1, 1, 1, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) merge_check(&cases[i], 2, &r);
}

AK_TEST(merge_all_empty_and_zero_partials) {
    /* n = 0 and all-empty rows: out 0, lse +inf in either base, with a sink */
    int64_t s0[4] = {0, 2, 3, 64};
    float out[2 * 3 * 64], lse[6], sink[3] = {1.0f, INFINITY, -INFINITY};
    int64_t sh = 3;
    ak_tensor to = ak_tensor_make(NULL, AK_DTYPE_F32, 4, s0);
    ak_tensor tl = ak_tensor_make(NULL, AK_DTYPE_F32, 3, s0);
    ak_tensor tout = ak_tensor_make(out, AK_DTYPE_F32, 3, s0 + 1);
    ak_tensor tlse = ak_tensor_make(lse, AK_DTYPE_F32, 2, s0 + 1);
    ak_tensor ts = ak_tensor_make(sink, AK_DTYPE_F32, 1, &sh);
    ak_context *ctx = cpu_ctx(2);
    ak_poison(out, sizeof out, AK_DTYPE_F32);
    ak_poison(lse, sizeof lse, AK_DTYPE_F32);
    CHECK_STATUS(ak_merge_states(ctx, &to, &tl, AK_LSE_BASE_2, &ts, &tout, &tlse, AK_LSE_BASE_2),
                 AK_OK);
    int ok = 1;
    for (int i = 0; i < 2 * 3 * 64; i++) ok &= out[i] == 0.0f;
    for (int i = 0; i < 6; i++) ok &= isinf(lse[i]) && lse[i] > 0;
    CHECK_MSG(ok, "merge of zero partials: expected out 0 and lse +inf everywhere");
    ak_context_destroy(ctx);
}

AK_TEST(merge_bitwise_across_threads) {
    merge_case c = {4, 37, 8, 128, 1, 0, 0, 0, 1};
    ak_rng r;
    float *ref = NULL;
    for (int32_t t = 1; t <= 4; t++) {
        ak_rng_init(&r, ak_test_seed());
        int64_t per = (int64_t)c.rows * c.h, nv = c.n * per * c.d;
        float *outs = (float *)malloc(sizeof(float) * (size_t)nv);
        float *lses = (float *)malloc(sizeof(float) * (size_t)(c.n * per));
        for (int64_t i = 0; i < nv; i++) outs[i] = (float)ak_rng_normal(&r);
        for (int64_t i = 0; i < c.n * per; i++) lses[i] = (float)(ak_rng_normal(&r) * 3.0);
        float *out = (float *)malloc(sizeof(float) * (size_t)(per * c.d));
        int64_t so[4] = {c.n, c.rows, c.h, c.d};
        ak_tensor to = ak_tensor_make(outs, AK_DTYPE_F32, 4, so);
        ak_tensor tl = ak_tensor_make(lses, AK_DTYPE_F32, 3, so);
        ak_tensor tout = ak_tensor_make(out, AK_DTYPE_F32, 3, so + 1);
        ak_context *ctx = cpu_ctx(t);
        CHECK_STATUS(
            ak_merge_states(ctx, &to, &tl, AK_LSE_BASE_2, NULL, &tout, NULL, AK_LSE_BASE_E), AK_OK);
        ak_context_destroy(ctx);
        if (ref == NULL) {
            ref = out;
        } else {
            CHECK_MSG(memcmp(ref, out, sizeof(float) * (size_t)(per * c.d)) == 0,
                      "merge: %d threads differ from 1 thread", (int)t);
            free(out);
        }
        free(outs);
        free(lses);
    }
    free(ref);
}

/* Paged MHA over all keys with a sink equals MHA over the first and the second half of the pages
   (two requests sharing q, non-causal) merged with the sink applied once (rule M2). */
AK_TEST(merge_split_kv_equals_full) {
    enum { P = 16, HKV = 2, HQ = 8, D = 64, NP = 6 };
    ak_rng r;
    ak_rng_init(&r, ak_test_seed() + 1);
    uint16_t *kp = (uint16_t *)malloc(sizeof(uint16_t) * NP * P * HKV * D);
    uint16_t *vp = (uint16_t *)malloc(sizeof(uint16_t) * NP * P * HKV * D);
    for (int i = 0; i < NP * P * HKV * D; i++) {
        kp[i] = orc_bf16_bits(ak_rng_normal(&r));
        vp[i] = orc_bf16_bits(ak_rng_normal(&r));
    }
    uint16_t q1[HQ * D], q3[3 * HQ * D];
    for (int i = 0; i < HQ * D; i++) q1[i] = orc_bf16_bits(ak_rng_normal(&r));
    for (int b = 0; b < 3; b++) memcpy(q3 + b * HQ * D, q1, sizeof q1);
    float sink[HQ];
    for (int h = 0; h < HQ; h++) sink[h] = (float)ak_rng_normal(&r);
    /* request 0: all 6 pages (90 keys); 1: pages 0-2 (48 keys); 2: pages 3-5 (42 keys) */
    int32_t bt[3 * NP] = {5, 2, 0, 3, 1, 4, 5, 2, 0, -1, -1, -1, 3, 1, 4, -1, -1, -1};
    int32_t sl[3] = {90, 48, 42};
    ak_cache c;
    CHECK_STATUS(ak_cache_init_mha(&c, AK_LAYOUT_MHA_NHD, AK_DTYPE_BF16, kp, vp, NP, P, HKV, D, D),
                 AK_OK);
    int64_t qs[4] = {3, 1, HQ, D}, bs[2] = {3, NP}, b3 = 3, hq = HQ;
    float out[3 * HQ * D], lse[3 * HQ], outb[3 * HQ * D], lseb[3 * HQ];
    ak_tensor tq = ak_tensor_make(q3, AK_DTYPE_BF16, 4, qs),
              tbt = ak_tensor_make(bt, AK_DTYPE_I32, 2, bs);
    ak_tensor tsl = ak_tensor_make(sl, AK_DTYPE_I32, 1, &b3),
              tout = ak_tensor_make(out, AK_DTYPE_F32, 4, qs);
    ak_tensor tlse = ak_tensor_make(lse, AK_DTYPE_F32, 3, qs),
              tsink = ak_tensor_make(sink, AK_DTYPE_F32, 1, &hq);
    ak_mha_args a;
    memset(&a, 0, sizeof a);
    a.q = &tq;
    a.cache = &c;
    a.block_table = &tbt;
    a.seq_lens = &tsl;
    a.softmax_scale = 0.125f;
    a.window_left = -1;
    a.out = &tout;
    a.lse = &tlse;
    ak_context *ctx = cpu_ctx(2);
    size_t ws = 0;
    CHECK_STATUS(ak_mha_workspace_size(ctx, &a, &ws), AK_OK);
    void *w = malloc(ws);
    CHECK_STATUS(ak_mha(ctx, &a, w, ws), AK_OK); /* without the sink: partials for requests 1, 2 */
    memcpy(outb, out, sizeof out);
    memcpy(lseb, lse, sizeof lse);
    a.attn_sink = &tsink;
    CHECK_STATUS(ak_mha(ctx, &a, w, ws), AK_OK); /* request 0 with the sink: the reference */
    int64_t so[4] = {2, 1, HQ, D};
    ak_tensor to = ak_tensor_make(outb + HQ * D, AK_DTYPE_F32, 4, so);
    ak_tensor tl = ak_tensor_make(lseb + HQ, AK_DTYPE_F32, 3, so);
    float mo[HQ * D], ml[HQ];
    ak_tensor tmo = ak_tensor_make(mo, AK_DTYPE_F32, 3, so + 1),
              tml = ak_tensor_make(ml, AK_DTYPE_F32, 2, so + 1);
    CHECK_STATUS(ak_merge_states(ctx, &to, &tl, AK_LSE_BASE_E, &tsink, &tmo, &tml, AK_LSE_BASE_E),
                 AK_OK);
    double ref[HQ * D], refl[HQ];
    for (int i = 0; i < HQ * D; i++) ref[i] = out[i];
    for (int i = 0; i < HQ; i++) refl[i] = lse[i];
    /* two fp32 computations of the same quantity; each is within ~1e-6 of the exact value */
    ak_tol t = {1e-5, 1e-4, -1, 1e-10};
    ak_compare("split kv merged vs full", mo, ref, HQ * D, t);
    ak_compare("split kv merged lse vs full", ml, refl, HQ, t);
    free(w);
    free(kp);
    free(vp);
    ak_context_destroy(ctx);
}

AK_TEST(merge_bad_inputs) {
    float outs[2 * 3 * 4 * 16], lses[2 * 3 * 4], out[3 * 4 * 16], lse[3 * 4], sink[4] = {0};
    memset(outs, 0, sizeof outs);
    memset(lses, 0, sizeof lses);
    int64_t so[4] = {2, 3, 4, 16}, s4 = 4, bad[3] = {3, 5, 16};
    ak_tensor to = ak_tensor_make(outs, AK_DTYPE_F32, 4, so),
              tl = ak_tensor_make(lses, AK_DTYPE_F32, 3, so);
    ak_tensor tout = ak_tensor_make(out, AK_DTYPE_F32, 3, so + 1),
              tlse = ak_tensor_make(lse, AK_DTYPE_F32, 2, so + 1);
    ak_tensor ts = ak_tensor_make(sink, AK_DTYPE_F32, 1, &s4);
    ak_context *ctx = cpu_ctx(2);
    CHECK_STATUS(ak_merge_states(ctx, &to, &tl, AK_LSE_BASE_E, &ts, &tout, &tlse, AK_LSE_BASE_2),
                 AK_OK);
    CHECK_REJECT(ak_merge_states(NULL, &to, &tl, AK_LSE_BASE_E, NULL, &tout, NULL, AK_LSE_BASE_E),
                 AK_ERR_INVALID_ARGUMENT, "ctx");
    CHECK_REJECT(ak_merge_states(ctx, NULL, &tl, AK_LSE_BASE_E, NULL, &tout, NULL, AK_LSE_BASE_E),
                 AK_ERR_INVALID_ARGUMENT, "outs");
    CHECK_REJECT(ak_merge_states(ctx, &to, NULL, AK_LSE_BASE_E, NULL, &tout, NULL, AK_LSE_BASE_E),
                 AK_ERR_INVALID_ARGUMENT, "lses");
    CHECK_REJECT(ak_merge_states(ctx, &to, &tl, AK_LSE_BASE_E, NULL, NULL, NULL, AK_LSE_BASE_E),
                 AK_ERR_INVALID_ARGUMENT, "out");
    CHECK_REJECT(ak_merge_states(ctx, &to, &tl, (ak_lse_base)7, NULL, &tout, NULL, AK_LSE_BASE_E),
                 AK_ERR_INVALID_ARGUMENT, "in_base");
    CHECK_REJECT(ak_merge_states(ctx, &to, &tl, AK_LSE_BASE_E, NULL, &tout, NULL, (ak_lse_base)-1),
                 AK_ERR_INVALID_ARGUMENT, "out_base");
    ak_tensor tb = ak_tensor_make(out, AK_DTYPE_F32, 3, bad);
    CHECK_REJECT(ak_merge_states(ctx, &to, &tl, AK_LSE_BASE_E, NULL, &tb, NULL, AK_LSE_BASE_E),
                 AK_ERR_INVALID_ARGUMENT, "out");
    ak_tensor tlb = ak_tensor_make(lses, AK_DTYPE_F32, 3, bad);
    CHECK_REJECT(ak_merge_states(ctx, &to, &tlb, AK_LSE_BASE_E, NULL, &tout, NULL, AK_LSE_BASE_E),
                 AK_ERR_INVALID_ARGUMENT, "lses");
    ak_tensor tlh = tl;
    tlh.dtype = AK_DTYPE_BF16;
    CHECK_REJECT(ak_merge_states(ctx, &to, &tlh, AK_LSE_BASE_E, NULL, &tout, NULL, AK_LSE_BASE_E),
                 AK_ERR_INVALID_ARGUMENT, "lses");
    ak_tensor toh = to;
    toh.dtype = AK_DTYPE_F16;
    CHECK_REJECT(ak_merge_states(ctx, &toh, &tl, AK_LSE_BASE_E, NULL, &tout, NULL, AK_LSE_BASE_E),
                 AK_ERR_INVALID_ARGUMENT, "outs");
    int64_t s3 = 3;
    ak_tensor ts3 = ak_tensor_make(sink, AK_DTYPE_F32, 1, &s3);
    CHECK_REJECT(ak_merge_states(ctx, &to, &tl, AK_LSE_BASE_E, &ts3, &tout, NULL, AK_LSE_BASE_E),
                 AK_ERR_INVALID_ARGUMENT, "attn_sink");
    ak_tensor tlse_bad = ak_tensor_make(lse, AK_DTYPE_F32, 2, bad);
    CHECK_REJECT(
        ak_merge_states(ctx, &to, &tl, AK_LSE_BASE_E, NULL, &tout, &tlse_bad, AK_LSE_BASE_E),
        AK_ERR_INVALID_ARGUMENT, "lse");
    ak_context_destroy(ctx);
}
