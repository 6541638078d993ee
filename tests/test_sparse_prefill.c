/*
 * test_sparse_prefill.c -- CPU sparse prefill, flat bf16 KV and paged caches of every MLA layout,
 * against the double-precision oracle (tests/oracle/oracle_mla.c); the paged form must equal the
 * flat form run on the dequantized cache bit for bit (semantics.md 5.2); corner cases (empty rows,
 * invalid indices of every kind, lengths, sinks of +-inf), determinism, bad arguments.
 *
 * Tolerances as in test_mla_decode.c and for the same reasons (both sides see the same dequantized
 * values; the CPU's error is fp32 rounding in 576-term dots and P.V sums over <= ~100 keys, about
 * 100x below the abs 2e-5 / rel 2e-4 used, and 100x below the GPU tolerances of semantics.md 14.2).
 * max_logits is a single fp32 dot product times the scale: abs 1e-5.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ak_test.h"
#include "attnkit.h"
#include "oracle.h"
#include "oracle_mla.h"

static const ak_tol k_tol_f32 = {2e-5, 2e-4, 1e-9, 1e-9};
static const ak_tol k_tol_bf16 = {1e-4, 2.01 / 256, 7e-6, 5e-5};
static const ak_tol k_tol_lse = {2e-5, 2.01 / 65536, -1, -1};
static const ak_tol k_tol_max = {1e-5, 2.01 / 65536, -1, -1};

static int32_t invalid_index(ak_rng *r, int64_t bound) {
    static const int32_t set[] = {-1, INT32_MIN, -123456, 114514, 1919810, 2147480000, INT32_MAX};
    int64_t k = ak_rng_range(r, 0, 8);
    return k == 7 ? (int32_t)bound : set[k];
}

static ak_context *cpu_ctx(int32_t threads) {
    ak_context_options o = {AK_BACKEND_CPU, threads, 0, NULL};
    ak_context *ctx = NULL;
    CHECK_STATUS(ak_context_create(&o, &ctx), AK_OK);
    return ctx;
}

typedef struct sp_case {
    ak_layout layout; /* AK_LAYOUT_INVALID: flat form with d_qk */
    int32_t d_qk, P, pages;
    int64_t s_q, h_q, topk, s_kv;
    int use_len, sink_mode, out_bf16, all_invalid;
} sp_case;

typedef struct sp_result {
    float *out, *max_logits, *lse;
} sp_result;

static ak_status run_prefill(ak_context *ctx, ak_sparse_prefill_args *a, sp_result *res) {
    int64_t n = ak_tensor_numel(a->out), rows = ak_tensor_numel(a->lse);
    size_t esz = a->out->dtype == AK_DTYPE_BF16 ? 2 : 4;
    ak_poison(a->out->data, (size_t)n * esz, a->out->dtype);
    ak_poison(a->lse->data, (size_t)rows * 4, AK_DTYPE_F32);
    ak_poison(a->max_logits->data, (size_t)rows * 4, AK_DTYPE_F32);
    size_t ws = 0;
    ak_status st = ak_sparse_prefill_workspace_size(ctx, a, &ws);
    if (st != AK_OK) return st;
    void *w = malloc(ws);
    st = ak_sparse_prefill(ctx, a, w, ws);
    free(w);
    for (int64_t i = 0; i < n; i++)
        res->out[i] =
            esz == 2 ? (float)orc_bf16(((uint16_t *)a->out->data)[i]) : ((float *)a->out->data)[i];
    memcpy(res->lse, a->lse->data, (size_t)rows * 4);
    memcpy(res->max_logits, a->max_logits->data, (size_t)rows * 4);
    return st;
}

static void run_case(ak_context *ctx, const sp_case *c, ak_rng *r) {
    char what[256];
    snprintf(what, sizeof what,
             "prefill layout %d d_qk %d P %d s_q %lld h_q %lld topk %lld "
             "len %d sink %d bf16 %d",
             (int)c->layout, (int)c->d_qk, (int)c->P, (long long)c->s_q, (long long)c->h_q,
             (long long)c->topk, c->use_len, c->sink_mode, c->out_bf16);
    int paged = c->layout != AK_LAYOUT_INVALID;
    int32_t d_qk = paged ? orc_mla_d_qk((int32_t)c->layout) : c->d_qk;
    int64_t s_q = c->s_q, h_q = c->h_q, topk = c->topk;
    uint64_t seed = ak_rng_u64(r);

    /* KV source: every unused byte NaN (0xff) */
    int64_t bound, stride = 0;
    uint8_t *pool = NULL, *live = NULL;
    uint16_t *kv = NULL;
    ak_cache cache;
    orc_pool op;
    if (paged) {
        int64_t minb = 0;
        CHECK_STATUS(ak_layout_page_bytes(c->layout, c->P, &minb), AK_OK);
        stride = minb + (c->layout == AK_LAYOUT_DSV4_FP8_UE8M0 ? 576 : 656);
        pool = malloc((size_t)(stride * c->pages));
        memset(pool, 0xff, (size_t)(stride * c->pages));
        CHECK_STATUS(ak_cache_init(&cache, c->layout, pool, c->pages, c->P), AK_OK);
        cache.page_stride = stride;
        if (c->layout == AK_LAYOUT_MLA_FP8_PERTENSOR) cache.k_scale = 0.5f;
        op.layout = (int32_t)c->layout;
        op.data = pool;
        op.page_stride = stride;
        op.page_size = c->P;
        op.num_pages = c->pages;
        op.k_scale = c->layout == AK_LAYOUT_MLA_FP8_PERTENSOR ? 0.5 : 1.0;
        bound = (int64_t)c->pages * c->P;
    } else {
        bound = c->s_kv;
        kv = malloc((size_t)(bound * d_qk) * 2);
        memset(kv, 0xff, (size_t)(bound * d_qk) * 2);
    }
    live = calloc((size_t)bound, 1);
    for (int64_t s = 0; s < bound; s++) {
        if (s != 0 && ak_rng_uniform(r) >= 0.6) continue;
        live[s] = 1;
        if (paged)
            orc_mla_fill_token(pool, op.layout, stride, c->P, s, seed);
        else
            for (int d = 0; d < d_qk; d++)
                kv[s * d_qk + d] = orc_bf16_bits(ak_rng_uniform(r) * 2.0 - 1.0);
    }

    uint16_t *q = malloc((size_t)(s_q * h_q * d_qk) * 2);
    for (int64_t i = 0; i < s_q * h_q * d_qk; i++)
        q[i] = orc_bf16_bits(ak_rng_uniform(r) * 2.0 - 1.0);
    int32_t *idx = malloc((size_t)(s_q * topk) * 4), *len = malloc((size_t)s_q * 4);
    for (int64_t t = 0; t < s_q; t++) {
        int64_t u = ak_rng_range(r, 0, 8);
        len[t] = u == 0   ? -2
                 : u == 1 ? 0
                 : u == 2 ? (int32_t)topk + 9
                          : (int32_t)ak_rng_range(r, 1, topk + 1);
        int64_t lim = c->use_len ? (len[t] < 0 ? 0 : len[t]) : topk;
        for (int64_t j = 0; j < topk; j++) {
            int32_t v;
            if (c->all_invalid || ak_rng_uniform(r) < 0.15) {
                v = invalid_index(r, bound);
            } else {
                do
                    v = (int32_t)ak_rng_range(r, 0, bound);
                while (j < lim ? !live[v] : (live[v] && v != 0)); /* past the length: NaN rows */
            }
            idx[t * topk + j] = v;
        }
    }
    float *sink = malloc((size_t)h_q * 4);
    for (int64_t h = 0; h < h_q; h++) {
        sink[h] = (float)(ak_rng_uniform(r) * 4.0 - 2.0);
        if (c->sink_mode == 2 && h % 3 == 1) sink[h] = INFINITY;
        if (c->sink_mode == 2 && h % 3 == 2) sink[h] = -INFINITY;
    }

    int64_t sh_q[3] = {s_q, h_q, d_qk}, sh_kv[2] = {bound, d_qk}, sh_i[2] = {s_q, topk};
    int64_t sh_o[3] = {s_q, h_q, 512}, sh_s[1] = {h_q};
    ak_tensor tq = ak_tensor_make(q, AK_DTYPE_BF16, 3, sh_q);
    ak_tensor tkv = ak_tensor_make(kv, AK_DTYPE_BF16, 2, sh_kv);
    ak_tensor ti = ak_tensor_make(idx, AK_DTYPE_I32, 2, sh_i);
    ak_tensor tl = ak_tensor_make(len, AK_DTYPE_I32, 1, sh_i);
    ak_tensor tsink = ak_tensor_make(sink, AK_DTYPE_F32, 1, sh_s);
    void *out = malloc((size_t)(s_q * h_q * 512) * 4);
    float *lse = malloc((size_t)(s_q * h_q) * 4), *ml = malloc((size_t)(s_q * h_q) * 4);
    ak_tensor to = ak_tensor_make(out, c->out_bf16 ? AK_DTYPE_BF16 : AK_DTYPE_F32, 3, sh_o);
    ak_tensor tlse = ak_tensor_make(lse, AK_DTYPE_F32, 2, sh_o);
    ak_tensor tml = ak_tensor_make(ml, AK_DTYPE_F32, 2, sh_o);
    ak_sparse_prefill_args a;
    memset(&a, 0, sizeof a);
    a.q = &tq;
    a.kv = paged ? NULL : &tkv;
    a.cache = paged ? &cache : NULL;
    a.indices = &ti;
    a.topk_length = c->use_len ? &tl : NULL;
    a.attn_sink = c->sink_mode ? &tsink : NULL;
    a.softmax_scale = (float)pow((double)d_qk, -0.55);
    a.out = &to;
    a.max_logits = &tml;
    a.lse = &tlse;
    sp_result got;
    got.out = malloc((size_t)(s_q * h_q * 512) * 4);
    got.lse = malloc((size_t)(s_q * h_q) * 4);
    got.max_logits = malloc((size_t)(s_q * h_q) * 4);
    CHECK_STATUS(run_prefill(ctx, &a, &got), AK_OK);

    orc_sparse_prefill_in in;
    memset(&in, 0, sizeof in);
    in.s_q = s_q;
    in.h_q = h_q;
    in.d_qk = d_qk;
    in.q = q;
    in.kv = kv;
    in.s_kv = bound;
    in.cache = paged ? &op : NULL;
    in.indices = idx;
    in.topk = topk;
    in.topk_length = c->use_len ? len : NULL;
    in.sink = c->sink_mode ? sink : NULL;
    in.scale = a.softmax_scale;
    double *ref = malloc((size_t)(s_q * h_q * 512) * 8);
    double *ref_ml = malloc((size_t)(s_q * h_q) * 8), *ref_lse = malloc((size_t)(s_q * h_q) * 8);
    orc_sparse_prefill(&in, ref, ref_ml, ref_lse);
    char w2[320];
    snprintf(w2, sizeof w2, "%s: out", what);
    ak_compare(w2, got.out, ref, s_q * h_q * 512, c->out_bf16 ? k_tol_bf16 : k_tol_f32);
    snprintf(w2, sizeof w2, "%s: lse", what);
    ak_compare(w2, got.lse, ref_lse, s_q * h_q, k_tol_lse);
    snprintf(w2, sizeof w2, "%s: max_logits", what);
    ak_compare(w2, got.max_logits, ref_ml, s_q * h_q, k_tol_max);

    if (paged) {
        /* semantics.md 5.2: the paged form equals the flat form on the dequantized cache. Every
           layout here dequantizes exactly to bf16 (power-of-two scales). */
        uint16_t *flat = malloc((size_t)(bound * d_qk) * 2);
        double *row = malloc((size_t)d_qk * 8);
        for (int64_t s = 0; s < bound; s++) {
            if (orc_mla_token(&op, s, row) && live[s])
                for (int d = 0; d < d_qk; d++)
                    flat[s * d_qk + d] = orc_bf16_bits(row[d]);
            else
                for (int d = 0; d < d_qk; d++)
                    flat[s * d_qk + d] = 0xffff;
        }
        ak_tensor tflat = ak_tensor_make(flat, AK_DTYPE_BF16, 2, sh_kv);
        a.cache = NULL;
        a.kv = &tflat;
        sp_result f;
        f.out = malloc((size_t)(s_q * h_q * 512) * 4);
        f.lse = malloc((size_t)(s_q * h_q) * 4);
        f.max_logits = malloc((size_t)(s_q * h_q) * 4);
        CHECK_STATUS(run_prefill(ctx, &a, &f), AK_OK);
        CHECK_MSG(memcmp(f.out, got.out, (size_t)(s_q * h_q * 512) * 4) == 0 &&
                      memcmp(f.lse, got.lse, (size_t)(s_q * h_q) * 4) == 0 &&
                      memcmp(f.max_logits, got.max_logits, (size_t)(s_q * h_q) * 4) == 0,
                  "%s: paged and flat forms differ", what);
        free(f.out);
        free(f.lse);
        free(f.max_logits);
        free(flat);
        free(row);
    }
    free(got.out);
    free(got.lse);
    free(got.max_logits);
    free(ref);
    free(ref_ml);
    free(ref_lse);
    free(out);
    free(lse);
    free(ml);
    free(sink);
    free(idx);
    free(len);
    free(q);
    free(live);
    free(pool);
    free(kv);
}

AK_TEST(flat_and_paged_every_layout) {
    ak_rng r;
    ak_rng_init(&r, ak_test_seed());
    ak_context *ctx = cpu_ctx(2);
    static const ak_layout layouts[6] = {AK_LAYOUT_INVALID,
                                         AK_LAYOUT_INVALID,
                                         AK_LAYOUT_MLA_BF16,
                                         AK_LAYOUT_MLA_FP8_PERTENSOR,
                                         AK_LAYOUT_DSA_FP8_BLOCKSCALE,
                                         AK_LAYOUT_DSV4_FP8_UE8M0};
    static const int64_t heads[6] = {1, 8, 16, 32, 64, 128};
    for (int li = 0; li < 6; li++) {
        for (int hi = 0; hi < 6; hi++) {
            int k = li * 6 + hi;
            sp_case c = {layouts[li],
                         li == 0 ? 576 : 512,
                         li == 5 ? 64 : 16,
                         6,
                         heads[hi] >= 64 ? 2 : 5,
                         heads[hi],
                         24 + 8 * (k % 5),
                         70,
                         k % 2,
                         k % 3,
                         (k / 2) % 2,
                         0};
            run_case(ctx, &c, &r);
        }
    }
    ak_context_destroy(ctx);
}

AK_TEST(corner_cases) {
    ak_rng r;
    ak_rng_init(&r, ak_test_seed() + 1);
    ak_context *ctx = cpu_ctx(3);
    /* all entries invalid, sinks of +-inf */
    sp_case a = {AK_LAYOUT_INVALID, 576, 0, 0, 4, 8, 16, 40, 1, 2, 0, 1};
    run_case(ctx, &a, &r);
    sp_case b = {AK_LAYOUT_DSA_FP8_BLOCKSCALE, 0, 3, 5, 3, 16, 16, 0, 1, 2, 1, 1};
    run_case(ctx, &b, &r);
    /* page size 1, partial last head group, topk not a multiple of anything */
    sp_case c = {AK_LAYOUT_DSV4_FP8_UE8M0, 0, 1, 90, 3, 100, 37, 0, 1, 2, 0, 0};
    run_case(ctx, &c, &r);
    sp_case d = {AK_LAYOUT_INVALID, 512, 0, 0, 6, 3, 65, 9, 1, 1, 1, 0};
    run_case(ctx, &d, &r);
    ak_context_destroy(ctx);
}

AK_TEST(bad_arguments_are_rejected) {
    ak_context *ctx = cpu_ctx(1);
    static uint16_t q[2 * 4 * 576], kv[8 * 576];
    static int32_t idx[2 * 4], len[2];
    static float out[2 * 4 * 512], lse[8], ml[8];
    static uint8_t pool[2 * 16 * 656];
    ak_cache c;
    CHECK_STATUS(ak_cache_init(&c, AK_LAYOUT_DSV4_FP8_UE8M0, pool, 1, 16), AK_OK);
    int64_t sh_q[3] = {2, 4, 576}, sh_kv[2] = {8, 576}, sh_i[2] = {2, 4}, sh_o[3] = {2, 4, 512};
    int64_t sh_i0[2] = {2, 0}, sh_kv5[2] = {8, 500};
    ak_tensor tq = ak_tensor_make(q, AK_DTYPE_BF16, 3, sh_q);
    ak_tensor tkv = ak_tensor_make(kv, AK_DTYPE_BF16, 2, sh_kv);
    ak_tensor tkv5 = ak_tensor_make(kv, AK_DTYPE_BF16, 2, sh_kv5);
    ak_tensor ti = ak_tensor_make(idx, AK_DTYPE_I32, 2, sh_i);
    ak_tensor ti0 = ak_tensor_make(idx, AK_DTYPE_I32, 2, sh_i0);
    ak_tensor tl = ak_tensor_make(len, AK_DTYPE_I32, 1, sh_i);
    ak_tensor to = ak_tensor_make(out, AK_DTYPE_F32, 3, sh_o);
    ak_tensor tlse = ak_tensor_make(lse, AK_DTYPE_F32, 2, sh_o);
    ak_tensor tml = ak_tensor_make(ml, AK_DTYPE_F32, 2, sh_o);
    ak_sparse_prefill_args base, a;
    memset(&base, 0, sizeof base);
    base.q = &tq;
    base.kv = &tkv;
    base.indices = &ti;
    base.topk_length = &tl;
    base.softmax_scale = 0.05f;
    base.out = &to;
    base.lse = &tlse;
    base.max_logits = &tml;
    static char ws[1 << 22];
    CHECK_STATUS(ak_sparse_prefill(ctx, &base, ws, sizeof ws), AK_OK);
    a = base;
    a.cache = &c; /* both forms */
    CHECK_REJECT(ak_sparse_prefill(ctx, &a, ws, sizeof ws), AK_ERR_INVALID_ARGUMENT, "cache");
    a.kv = NULL; /* q is 576 wide, the V4 layout reads 512 */
    CHECK_REJECT(ak_sparse_prefill(ctx, &a, ws, sizeof ws), AK_ERR_INVALID_ARGUMENT, "q");
    a = base;
    a.kv = &tkv5;
    CHECK_REJECT(ak_sparse_prefill(ctx, &a, ws, sizeof ws), AK_ERR_INVALID_ARGUMENT, "kv");
    a = base;
    a.indices = &ti0;
    CHECK_REJECT(ak_sparse_prefill(ctx, &a, ws, sizeof ws), AK_ERR_INVALID_ARGUMENT, "topk");
    a = base;
    a.out = NULL;
    CHECK_REJECT(ak_sparse_prefill(ctx, &a, ws, sizeof ws), AK_ERR_INVALID_ARGUMENT, "out");
    a = base;
    ak_tensor tl3 = tl;
    tl3.shape[0] = 3;
    a.topk_length = &tl3;
    CHECK_REJECT(ak_sparse_prefill(ctx, &a, ws, sizeof ws), AK_ERR_INVALID_ARGUMENT, "topk_length");
    a = base;
    ak_tensor tsink = ak_tensor_make(lse, AK_DTYPE_F32, 1, sh_i); /* [2], h_q is 4 */
    a.attn_sink = &tsink;
    CHECK_REJECT(ak_sparse_prefill(ctx, &a, ws, sizeof ws), AK_ERR_INVALID_ARGUMENT, "attn_sink");
    CHECK_REJECT(ak_sparse_prefill(ctx, &base, ws, 16), AK_ERR_WORKSPACE_TOO_SMALL, "workspace");
    size_t bytes;
    CHECK_REJECT(ak_sparse_prefill_workspace_size(ctx, &base, NULL), AK_ERR_INVALID_ARGUMENT,
                 "bytes");
    CHECK_REJECT(ak_sparse_prefill_workspace_size(ctx, NULL, &bytes), AK_ERR_INVALID_ARGUMENT,
                 "args");
    ak_context_destroy(ctx);
}

/* Same inputs on 1, 2 and 3 threads: bitwise identical outputs (no reduction is split; head
   groups differ with the thread count but never change a head's arithmetic). */
AK_TEST(bitwise_identical_across_thread_counts) {
    ak_rng r;
    ak_rng_init(&r, ak_test_seed() + 2);
    int64_t s_q = 3, h_q = 72, topk = 90, s_kv = 200, d_qk = 576;
    uint16_t *q = malloc((size_t)(s_q * h_q * d_qk) * 2), *kv = malloc((size_t)(s_kv * d_qk) * 2);
    int32_t *idx = malloc((size_t)(s_q * topk) * 4);
    for (int64_t i = 0; i < s_q * h_q * d_qk; i++)
        q[i] = orc_bf16_bits(ak_rng_uniform(&r) * 2.0 - 1.0);
    for (int64_t i = 0; i < s_kv * d_qk; i++)
        kv[i] = orc_bf16_bits(ak_rng_uniform(&r) * 2.0 - 1.0);
    for (int64_t i = 0; i < s_q * topk; i++)
        idx[i] = (int32_t)ak_rng_range(&r, -3, s_kv + 3);
    int64_t sh_q[3] = {s_q, h_q, d_qk}, sh_kv[2] = {s_kv, d_qk}, sh_i[2] = {s_q, topk};
    int64_t sh_o[3] = {s_q, h_q, 512};
    ak_tensor tq = ak_tensor_make(q, AK_DTYPE_BF16, 3, sh_q);
    ak_tensor tkv = ak_tensor_make(kv, AK_DTYPE_BF16, 2, sh_kv);
    ak_tensor ti = ak_tensor_make(idx, AK_DTYPE_I32, 2, sh_i);
    size_t n = (size_t)(s_q * h_q * 512), nr = (size_t)(s_q * h_q);
    uint16_t *out[3];
    float *lse[3], *ml[3];
    for (int k = 0; k < 3; k++) {
        ak_context *ctx = cpu_ctx(k + 1);
        out[k] = malloc(n * 2);
        lse[k] = malloc(nr * 4);
        ml[k] = malloc(nr * 4);
        ak_tensor to = ak_tensor_make(out[k], AK_DTYPE_BF16, 3, sh_o);
        ak_tensor tl = ak_tensor_make(lse[k], AK_DTYPE_F32, 2, sh_o);
        ak_tensor tm = ak_tensor_make(ml[k], AK_DTYPE_F32, 2, sh_o);
        ak_sparse_prefill_args a;
        memset(&a, 0, sizeof a);
        a.q = &tq;
        a.kv = &tkv;
        a.indices = &ti;
        a.softmax_scale = 0.04f;
        a.out = &to;
        a.lse = &tl;
        a.max_logits = &tm;
        sp_result res;
        res.out = malloc(n * 4);
        res.lse = malloc(nr * 4);
        res.max_logits = malloc(nr * 4);
        CHECK_STATUS(run_prefill(ctx, &a, &res), AK_OK);
        free(res.out);
        free(res.lse);
        free(res.max_logits);
        ak_context_destroy(ctx);
    }
    for (int k = 1; k < 3; k++)
        CHECK_MSG(memcmp(out[0], out[k], n * 2) == 0 && memcmp(lse[0], lse[k], nr * 4) == 0 &&
                      memcmp(ml[0], ml[k], nr * 4) == 0,
                  "outputs differ between 1 and %d threads", k + 1);
    for (int k = 0; k < 3; k++) {
        free(out[k]);
        free(lse[k]);
        free(ml[k]);
    }
    free(q);
    free(kv);
    free(idx);
}
