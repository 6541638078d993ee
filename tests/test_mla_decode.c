/*
 * test_mla_decode.c -- CPU MLA decode (dense and sparse) against the double-precision oracle
 * (tests/oracle/oracle_mla.c), on every MLA layout, with NaN in every unused cache byte,
 * NaN-poisoned outputs, invalid indices of every kind, lengths, extra caches and sinks, a softmax far
 * from uniform (logits scaled up: sparse_sharp_softmax); bitwise
 * determinism across thread counts; rejection of bad arguments.
 *
 * Tolerances (CPU vs oracle, f32 output): both compute on the same dequantized values; the CPU's
 * only errors are fp32 rounding in the 576-term dot products (~1e-7 relative per logit), in exp and
 * in the fp32 P.V sums over at most a few hundred keys (~n * 2^-24). Outputs here are O(0.1-1), so
 * abs 2e-5 or rel 2e-4 is ~100x above the expected error and ~100x below the GPU tolerances of
 * semantics.md 14.2 (abs 1e-3, rel 2.01/128); a wrong mask or a missing key moves outputs by
 * O(1e-2) or more. lse: fp32 logits of magnitude < 10 carry ~1e-6 absolute error, so abs 2e-5.
 * bf16 output: one final rounding (at most 2^-9 relative) on top, so rel 2.01/256.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ak_test.h"
#include "attnkit.h"
#include "oracle.h"
#include "oracle_mla.h"

static const ak_tol k_tol_f32 = {2e-5, 2e-4, 1e-9, 1e-9};
static const ak_tol k_tol_bf16 = {1e-4, 2.01 / 256, 5e-6, 5e-5};
static const ak_tol k_tol_lse = {2e-5, 8.01 / 65536, -1, -1};

/* FlashMLA's invalid index set (semantics.md 1) plus the capacity itself. */
static int32_t invalid_index(ak_rng *r, int64_t cap) {
    static const int32_t set[] = {-1, INT32_MIN, -123456, 114514, 1919810, 2147480000, INT32_MAX};
    int64_t k = ak_rng_range(r, 0, 8);
    return k == 7 ? (int32_t)cap : set[k];
}

/* A test cache: every byte NaN (0xff) until a token is written; live[slot] marks written slots. */
typedef struct tcache {
    ak_cache c;
    orc_pool o;
    uint8_t *buf;
    uint8_t *live;
    int64_t cap;
} tcache;

static void tcache_make(tcache *t, ak_layout l, int32_t pages, int32_t P) {
    int64_t minb = 0;
    CHECK_STATUS(ak_layout_page_bytes(l, P, &minb), AK_OK);
    /* A page stride above the minimum catches stride bugs (a multiple of 576 for V4). */
    int64_t stride = minb + (l == AK_LAYOUT_DSV4_FP8_UE8M0 ? 576 : 656);
    t->buf = malloc((size_t)(pages * stride));
    memset(t->buf, 0xff, (size_t)(pages * stride));
    CHECK_STATUS(ak_cache_init(&t->c, l, t->buf, pages, P), AK_OK);
    t->c.page_stride = stride;
    if (l == AK_LAYOUT_MLA_FP8_PERTENSOR) t->c.k_scale = 0.25f;
    t->cap = (int64_t)pages * P;
    t->live = calloc((size_t)t->cap, 1);
    t->o.layout = (int32_t)l;
    t->o.data = t->buf;
    t->o.page_stride = stride;
    t->o.page_size = P;
    t->o.num_pages = pages;
    t->o.k_scale = l == AK_LAYOUT_MLA_FP8_PERTENSOR ? 0.25 : 1.0;
}

static void tcache_write(tcache *t, int64_t slot, uint64_t seed) {
    orc_mla_fill_token(t->buf, t->o.layout, t->o.page_stride, t->o.page_size, slot, seed);
    t->live[slot] = 1;
}

static void tcache_free(tcache *t) {
    free(t->buf);
    free(t->live);
}

static int32_t random_live(ak_rng *r, tcache *t) {
    for (;;) {
        int64_t s = ak_rng_range(r, 0, t->cap);
        if (t->live[s]) return (int32_t)s;
    }
}

static int32_t random_dead(ak_rng *r, tcache *t) {
    for (int k = 0; k < 64; k++) {
        int64_t s = ak_rng_range(r, 0, t->cap);
        if (!t->live[s]) return (int32_t)s;
    }
    return -1;
}

static void fill_q(ak_rng *r, uint16_t *q, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        q[i] = orc_bf16_bits(ak_rng_uniform(r) * 2.0 - 1.0);
}

static ak_context *cpu_ctx(int32_t threads) {
    ak_context_options o = {AK_BACKEND_CPU, threads, 0, NULL};
    ak_context *ctx = NULL;
    CHECK_STATUS(ak_context_create(&o, &ctx), AK_OK);
    return ctx;
}

/* Runs ak_mla_decode with poisoned outputs; returns out as f32 [n*512] and lse. */
static ak_status run_decode(ak_context *ctx, ak_mla_decode_args *a, float *out_f, float *lse_f) {
    size_t ws = 0;
    ak_status st = ak_mla_decode_workspace_size(ctx, a, &ws);
    if (st != AK_OK) return st;
    void *w = malloc(ws);
    int64_t n = ak_tensor_numel(a->out);
    size_t esz = a->out->dtype == AK_DTYPE_BF16 ? 2 : 4;
    ak_poison(a->out->data, (size_t)n * esz, a->out->dtype);
    ak_poison(a->lse->data, (size_t)ak_tensor_numel(a->lse) * 4, AK_DTYPE_F32);
    st = ak_mla_decode(ctx, a, w, ws);
    free(w);
    for (int64_t i = 0; i < n; i++)
        out_f[i] =
            esz == 2 ? (float)orc_bf16(((uint16_t *)a->out->data)[i]) : ((float *)a->out->data)[i];
    memcpy(lse_f, a->lse->data, (size_t)ak_tensor_numel(a->lse) * 4);
    return st;
}

typedef struct sparse_case {
    ak_layout layout;
    int32_t P, pages;
    int64_t b, s_q, h_q, topk;
    int len_mode;  /* 0: none, 1: [b], 2: [b, s_q] */
    int extra;     /* extra cache with its own page size */
    int sink_mode; /* 0: none, 1: finite, 2: finite, +inf and -inf mixed */
    int out_bf16;
    int all_invalid; /* every entry invalid */
    int lexp;        /* softmax scale times 2^lexp: logits spread over tens to hundreds, so that the
                        running max jumps and most weights underflow (0: the data's ~uniform softmax) */
} sparse_case;

static void run_sparse_case(ak_context *ctx, const sparse_case *sc, ak_rng *r) {
    char what[256];
    snprintf(
        what, sizeof what,
        "sparse layout %d P %d b %lld s_q %lld h_q %lld topk %lld len %d extra %d sink %d bf16 %d lexp %d",
        (int)sc->layout, (int)sc->P, (long long)sc->b, (long long)sc->s_q, (long long)sc->h_q,
        (long long)sc->topk, sc->len_mode, sc->extra, sc->sink_mode, sc->out_bf16, sc->lexp);
    uint64_t seed = ak_rng_u64(r);
    tcache main_c, extra_c;
    tcache_make(&main_c, sc->layout, sc->pages, sc->P);
    for (int64_t s = 0; s < main_c.cap; s++)
        if (ak_rng_uniform(r) < 0.6) tcache_write(&main_c, s, seed);
    if (!main_c.live[0]) tcache_write(&main_c, 0, seed);
    int64_t etopk = 24;
    if (sc->extra) {
        tcache_make(&extra_c, sc->layout, 5, 4);
        for (int64_t s = 0; s < extra_c.cap; s++)
            if (ak_rng_uniform(r) < 0.6) tcache_write(&extra_c, s, seed + 1);
        if (!extra_c.live[1]) tcache_write(&extra_c, 1, seed + 1);
    }
    int32_t d_qk = orc_mla_d_qk((int32_t)sc->layout);
    int64_t b = sc->b, s_q = sc->s_q, h_q = sc->h_q, rows = b * s_q;
    uint16_t *q = malloc((size_t)(rows * h_q * d_qk) * 2);
    fill_q(r, q, rows * h_q * d_qk);
    int32_t *idx = malloc((size_t)(rows * sc->topk) * 4);
    int32_t *len = malloc((size_t)rows * 4);
    int32_t *eidx = malloc((size_t)(rows * etopk) * 4);
    int32_t *elen = malloc((size_t)rows * 4);
    int64_t nlen = sc->len_mode == 1 ? b : rows;
    for (int64_t k = 0; k < nlen; k++) {
        int64_t u = ak_rng_range(r, 0, 10);
        /* negative, zero, short, full, above the width */
        len[k] = u == 0   ? -3
                 : u == 1 ? 0
                 : u == 2 ? (int32_t)sc->topk + 5
                          : (int32_t)ak_rng_range(r, 1, sc->topk + 1);
        elen[k] = (int32_t)ak_rng_range(r, -1, etopk + 3);
    }
    for (int64_t t = 0; t < rows; t++) {
        int64_t lim = sc->topk;
        if (sc->len_mode) {
            int64_t v = len[sc->len_mode == 1 ? t / s_q : t];
            lim = v < 0 ? 0 : v;
        }
        for (int64_t j = 0; j < sc->topk; j++) {
            int32_t v;
            if (sc->all_invalid || ak_rng_uniform(r) < 0.15)
                v = invalid_index(r, main_c.cap);
            else if (j >= lim)
                v = random_dead(r, &main_c); /* past the length: NaN bytes */
            else
                v = random_live(r, &main_c);
            idx[t * sc->topk + j] = v;
        }
        for (int64_t j = 0; j < etopk && sc->extra; j++) {
            int32_t v;
            if (sc->all_invalid || ak_rng_uniform(r) < 0.15)
                v = invalid_index(r, extra_c.cap);
            else
                v = random_live(r, &extra_c);
            eidx[t * etopk + j] = v;
        }
    }
    float *sink = malloc((size_t)h_q * 4);
    for (int64_t h = 0; h < h_q; h++) {
        sink[h] = (float)(ak_rng_uniform(r) * 4.0 - 2.0);
        if (sc->sink_mode == 2 && h % 3 == 1) sink[h] = INFINITY;
        if (sc->sink_mode == 2 && h % 3 == 2) sink[h] = -INFINITY;
    }

    int64_t sh_q[4] = {b, s_q, h_q, d_qk}, sh_i[3] = {b, s_q, sc->topk}, sh_l[2] = {b, s_q};
    int64_t sh_e[3] = {b, s_q, etopk}, sh_o[4] = {b, s_q, h_q, 512}, sh_s[1] = {h_q};
    ak_tensor tq = ak_tensor_make(q, AK_DTYPE_BF16, 4, sh_q);
    ak_tensor ti = ak_tensor_make(idx, AK_DTYPE_I32, 3, sh_i);
    ak_tensor tl = ak_tensor_make(len, AK_DTYPE_I32, sc->len_mode == 1 ? 1 : 2, sh_l);
    ak_tensor tei = ak_tensor_make(eidx, AK_DTYPE_I32, 3, sh_e);
    ak_tensor tel = ak_tensor_make(elen, AK_DTYPE_I32, 2, sh_l);
    ak_tensor tsink = ak_tensor_make(sink, AK_DTYPE_F32, 1, sh_s);
    void *out = malloc((size_t)(rows * h_q * 512) * 4);
    float *lse = malloc((size_t)(rows * h_q) * 4);
    ak_tensor to = ak_tensor_make(out, sc->out_bf16 ? AK_DTYPE_BF16 : AK_DTYPE_F32, 4, sh_o);
    ak_tensor tlse = ak_tensor_make(lse, AK_DTYPE_F32, 3, sh_o);

    ak_mla_decode_args a;
    memset(&a, 0, sizeof a);
    a.q = &tq;
    a.cache = &main_c.c;
    a.softmax_scale = (float)ldexp(pow((double)d_qk, -0.55), sc->lexp);
    a.indices = &ti;
    a.topk_length = sc->len_mode ? &tl : NULL;
    if (sc->extra) {
        a.extra_cache = &extra_c.c;
        a.extra_indices = &tei;
        a.extra_topk_length = &tel;
    }
    a.attn_sink = sc->sink_mode ? &tsink : NULL;
    a.out = &to;
    a.lse = &tlse;
    float *got = malloc((size_t)(rows * h_q * 512) * 4),
          *got_lse = malloc((size_t)(rows * h_q) * 4);
    CHECK_STATUS(run_decode(ctx, &a, got, got_lse), AK_OK);

    orc_mla_decode_in in;
    memset(&in, 0, sizeof in);
    in.b = b;
    in.s_q = s_q;
    in.h_q = h_q;
    in.q = q;
    in.cache = &main_c.o;
    in.scale = a.softmax_scale;
    in.indices = idx;
    in.topk = sc->topk;
    in.topk_length = sc->len_mode ? len : NULL;
    in.len_per_row = sc->len_mode == 2;
    if (sc->extra) {
        in.extra = &extra_c.o;
        in.extra_indices = eidx;
        in.extra_topk = etopk;
        in.extra_length = elen;
        in.extra_len_per_row = 1;
    }
    in.sink = sc->sink_mode ? sink : NULL;
    double *ref = malloc((size_t)(rows * h_q * 512) * 8),
           *ref_lse = malloc((size_t)(rows * h_q) * 8);
    orc_mla_decode(&in, ref, ref_lse);
    char w2[300];
    snprintf(w2, sizeof w2, "%s: out", what);
    ak_compare(w2, got, ref, rows * h_q * 512, sc->out_bf16 ? k_tol_bf16 : k_tol_f32);
    snprintf(w2, sizeof w2, "%s: lse", what);
    ak_tol lt = k_tol_lse; /* logits 2^lexp times the data's: so is their fp32 error */
    lt.abs = ldexp(lt.abs, sc->lexp);
    ak_compare(w2, got_lse, ref_lse, rows * h_q, lt);
    if (sc->all_invalid) {
        for (int64_t k = 0; k < rows * h_q; k++)
            CHECK_MSG(got_lse[k] == INFINITY, "%s: lse[%lld] %g, expected +inf", what, (long long)k,
                      (double)got_lse[k]);
    }
    free(got);
    free(got_lse);
    free(ref);
    free(ref_lse);
    free(out);
    free(lse);
    free(sink);
    free(q);
    free(idx);
    free(len);
    free(eidx);
    free(elen);
    tcache_free(&main_c);
    if (sc->extra) tcache_free(&extra_c);
}

static const ak_layout k_layouts[4] = {AK_LAYOUT_MLA_BF16, AK_LAYOUT_MLA_FP8_PERTENSOR,
                                       AK_LAYOUT_DSA_FP8_BLOCKSCALE, AK_LAYOUT_DSV4_FP8_UE8M0};

AK_TEST(sparse_every_layout_and_head_count) {
    ak_rng r;
    ak_rng_init(&r, ak_test_seed());
    ak_context *ctx = cpu_ctx(2);
    static const int64_t heads[6] = {1, 8, 16, 32, 64, 128};
    for (int li = 0; li < 4; li++) {
        for (int hi = 0; hi < 6; hi++) {
            int k = li * 6 + hi;
            sparse_case sc = {k_layouts[li],
                              li == 3 ? 64 : 16,
                              6,
                              2,
                              1 + k % 3,
                              heads[hi],
                              40 + 8 * (k % 4),
                              k % 3,
                              k % 2,
                              k % 3,
                              (k / 2) % 2,
                              0};
            if (heads[hi] >= 64) sc.s_q = 1, sc.b = 2, sc.topk = 40; /* keep the oracle fast */
            run_sparse_case(ctx, &sc, &r);
        }
    }
    ak_context_destroy(ctx);
}

AK_TEST(sparse_corner_cases) {
    ak_rng r;
    ak_rng_init(&r, ak_test_seed() + 1);
    ak_context *ctx = cpu_ctx(3);
    for (int li = 0; li < 4; li++) {
        /* every entry invalid, with and without sinks and an extra cache */
        sparse_case a = {k_layouts[li], 8, 4, 2, 2, 8, 16, 1, 1, 2, 0, 1};
        run_sparse_case(ctx, &a, &r);
        /* s_q 8 (MTP), page size 1 and 2, non-multiple-of-64 head count */
        sparse_case b = {k_layouts[li], li == 3 ? 2 : 1, 64, 1, 8, 3, 33, 2, 1, 1, 1, 0};
        run_sparse_case(ctx, &b, &r);
        /* more than one 64-head group and a partial last group */
        sparse_case c = {k_layouts[li], 16, 8, 1, 1, 100, 70, 0, 0, 2, 0, 0};
        run_sparse_case(ctx, &c, &r);
    }
    ak_context_destroy(ctx);
}

/* A softmax far from uniform (the data's logits are ~0.25 apart; times 2^lexp they spread over
   ~100-200): each row's running max jumps many times, most weights underflow, and sinks matter
   only where they are +inf. The logits' fp32 error grows with them (~1e-5 raw per dot product,
   ~5e-5 after the scale at lexp 7), which moves a weight by ~5e-5 relative: outputs stay within
   abs 2e-5 or rel 2e-4 of the oracle; lse (up to ~100) within its relative 8.01/65536, or its
   absolute bound times 2^lexp where a short row's lse lies near 0. */
AK_TEST(sparse_sharp_softmax) {
    ak_rng r;
    ak_rng_init(&r, ak_test_seed() + 3);
    ak_context *ctx = cpu_ctx(3);
    for (int li = 0; li < 4; li++) {
        for (int k = 0; k < 2; k++) {
            sparse_case sc = {k_layouts[li], li == 3 ? 64 : 16, 6, 2, 2, 16, 96, 1 + k, 1, 2, k, 0, 6 + k};
            run_sparse_case(ctx, &sc, &r);
        }
    }
    ak_context_destroy(ctx);
}

typedef struct dense_case {
    ak_layout layout;
    int32_t P;
    int64_t b, s_q, h_q;
    int32_t causal, out_bf16, sink;
} dense_case;

static void run_dense_case(ak_context *ctx, const dense_case *dc, ak_rng *r) {
    char what[200];
    snprintf(what, sizeof what, "dense layout %d P %d b %lld s_q %lld h_q %lld causal %d",
             (int)dc->layout, (int)dc->P, (long long)dc->b, (long long)dc->s_q, (long long)dc->h_q,
             (int)dc->causal);
    uint64_t seed = ak_rng_u64(r);
    int64_t b = dc->b, s_q = dc->s_q, h_q = dc->h_q, rows = b * s_q;
    int32_t P = dc->P, max_len = 3 * P + 5;
    int32_t *seq = malloc((size_t)b * 4);
    int64_t need_pages = 0;
    for (int64_t k = 0; k < b; k++) {
        int64_t u = ak_rng_range(r, 0, 6);
        /* empty request, shorter than s_q (empty causal rows), exact page multiple, random */
        seq[k] = u == 0   ? 0
                 : u == 1 ? (int32_t)(s_q > 1 ? s_q - 1 : 1)
                 : u == 2 ? 2 * P
                          : (int32_t)ak_rng_range(r, 1, max_len + 1);
        need_pages += (seq[k] + P - 1) / P;
    }
    int64_t width = (max_len + P - 1) / P + 1;
    int32_t pages = (int32_t)need_pages + 3;
    tcache c;
    tcache_make(&c, dc->layout, pages, P);
    int32_t *perm = malloc((size_t)pages * 4);
    for (int32_t p = 0; p < pages; p++)
        perm[p] = p;
    for (int32_t p = pages - 1; p > 0; p--) {
        int32_t k = (int32_t)ak_rng_range(r, 0, p + 1), t = perm[p];
        perm[p] = perm[k];
        perm[k] = t;
    }
    int32_t *bt = malloc((size_t)(b * width) * 4);
    int32_t next = 0;
    for (int64_t k = 0; k < b; k++) {
        int64_t np = (seq[k] + P - 1) / P;
        for (int64_t p = 0; p < width; p++) {
            int32_t v = 2147480000; /* unused entries, as FlashMLA's tests */
            if (p < np) {
                v = perm[next++];
                if (ak_rng_uniform(r) < 0.1) v = invalid_index(r, pages); /* masked page (I2) */
            }
            bt[k * width + p] = v;
            if (p < np && v >= 0 && v < pages)
                for (int32_t o = 0; o < P && p * P + o < seq[k]; o++)
                    tcache_write(&c, (int64_t)v * P + o, seed);
        }
    }
    int32_t d_qk = orc_mla_d_qk((int32_t)dc->layout);
    uint16_t *q = malloc((size_t)(rows * h_q * d_qk) * 2);
    fill_q(r, q, rows * h_q * d_qk);
    float *sink = malloc((size_t)h_q * 4);
    for (int64_t h = 0; h < h_q; h++)
        sink[h] = (float)(ak_rng_uniform(r) * 2.0 - 1.0);
    int64_t sh_q[4] = {b, s_q, h_q, d_qk}, sh_bt[2] = {b, width}, sh_o[4] = {b, s_q, h_q, 512};
    int64_t sh_s[1] = {h_q};
    ak_tensor tq = ak_tensor_make(q, AK_DTYPE_BF16, 4, sh_q);
    ak_tensor tbt = ak_tensor_make(bt, AK_DTYPE_I32, 2, sh_bt);
    ak_tensor tseq = ak_tensor_make(seq, AK_DTYPE_I32, 1, sh_bt);
    ak_tensor tsink = ak_tensor_make(sink, AK_DTYPE_F32, 1, sh_s);
    void *out = malloc((size_t)(rows * h_q * 512) * 4);
    float *lse = malloc((size_t)(rows * h_q) * 4);
    ak_tensor to = ak_tensor_make(out, dc->out_bf16 ? AK_DTYPE_BF16 : AK_DTYPE_F32, 4, sh_o);
    ak_tensor tlse = ak_tensor_make(lse, AK_DTYPE_F32, 3, sh_o);
    ak_mla_decode_args a;
    memset(&a, 0, sizeof a);
    a.q = &tq;
    a.cache = &c.c;
    a.softmax_scale = (float)pow((double)d_qk, -0.55);
    a.block_table = &tbt;
    a.seq_lens = &tseq;
    a.causal = dc->causal;
    a.attn_sink = dc->sink ? &tsink : NULL;
    a.out = &to;
    a.lse = &tlse;
    float *got = malloc((size_t)(rows * h_q * 512) * 4),
          *got_lse = malloc((size_t)(rows * h_q) * 4);
    CHECK_STATUS(run_decode(ctx, &a, got, got_lse), AK_OK);

    orc_mla_decode_in in;
    memset(&in, 0, sizeof in);
    in.b = b;
    in.s_q = s_q;
    in.h_q = h_q;
    in.q = q;
    in.cache = &c.o;
    in.scale = a.softmax_scale;
    in.block_table = bt;
    in.max_pages = width;
    in.seq_lens = seq;
    in.causal = dc->causal;
    in.sink = dc->sink ? sink : NULL;
    double *ref = malloc((size_t)(rows * h_q * 512) * 8),
           *ref_lse = malloc((size_t)(rows * h_q) * 8);
    orc_mla_decode(&in, ref, ref_lse);
    char w2[300];
    snprintf(w2, sizeof w2, "%s: out", what);
    ak_compare(w2, got, ref, rows * h_q * 512, dc->out_bf16 ? k_tol_bf16 : k_tol_f32);
    snprintf(w2, sizeof w2, "%s: lse", what);
    ak_compare(w2, got_lse, ref_lse, rows * h_q, k_tol_lse);
    free(got);
    free(got_lse);
    free(ref);
    free(ref_lse);
    free(out);
    free(lse);
    free(sink);
    free(q);
    free(bt);
    free(perm);
    free(seq);
    tcache_free(&c);
}

AK_TEST(dense_every_layout_causal_and_not) {
    ak_rng r;
    ak_rng_init(&r, ak_test_seed() + 2);
    ak_context *ctx = cpu_ctx(2);
    static const int64_t sq[4] = {1, 2, 4, 8};
    for (int li = 0; li < 4; li++) {
        for (int k = 0; k < 4; k++) {
            dense_case dc = {k_layouts[li],   k % 2 ? 16 : 7, 3,     sq[k],
                             k == 3 ? 16 : 8, k > 0,          k % 2, k >= 2};
            run_dense_case(ctx, &dc, &r);
        }
        dense_case big = {k_layouts[li], 64, 2, 1, 128, 0, 0, 0};
        run_dense_case(ctx, &big, &r);
        dense_case one = {k_layouts[li], 1, 2, 2, 1, 1, 1, 1};
        run_dense_case(ctx, &one, &r);
    }
    ak_context_destroy(ctx);
}

/* Same inputs, 1, 2 and 5 threads: bitwise identical outputs (no reduction is split). */
AK_TEST(bitwise_identical_across_thread_counts) {
    ak_rng r;
    ak_rng_init(&r, ak_test_seed() + 3);
    uint64_t seed = ak_rng_u64(&r);
    tcache c;
    tcache_make(&c, AK_LAYOUT_DSA_FP8_BLOCKSCALE, 8, 64);
    for (int64_t s = 0; s < c.cap; s++)
        tcache_write(&c, s, seed);
    int64_t b = 3, s_q = 2, h_q = 80, topk = 150;
    uint16_t *q = malloc((size_t)(b * s_q * h_q * 576) * 2);
    fill_q(&r, q, b * s_q * h_q * 576);
    int32_t *idx = malloc((size_t)(b * s_q * topk) * 4);
    for (int64_t k = 0; k < b * s_q * topk; k++)
        idx[k] = (int32_t)ak_rng_range(&r, -5, c.cap + 5);
    int64_t sh_q[4] = {b, s_q, h_q, 576}, sh_i[3] = {b, s_q, topk}, sh_o[4] = {b, s_q, h_q, 512};
    ak_tensor tq = ak_tensor_make(q, AK_DTYPE_BF16, 4, sh_q);
    ak_tensor ti = ak_tensor_make(idx, AK_DTYPE_I32, 3, sh_i);
    size_t n = (size_t)(b * s_q * h_q * 512);
    uint16_t *out[3];
    float *lse[3];
    static const int32_t threads[3] = {1, 2, 5};
    for (int k = 0; k < 3; k++) {
        ak_context *ctx = cpu_ctx(threads[k]);
        out[k] = malloc(n * 2);
        lse[k] = malloc((size_t)(b * s_q * h_q) * 4);
        ak_tensor to = ak_tensor_make(out[k], AK_DTYPE_BF16, 4, sh_o);
        ak_tensor tl = ak_tensor_make(lse[k], AK_DTYPE_F32, 3, sh_o);
        ak_mla_decode_args a;
        memset(&a, 0, sizeof a);
        a.q = &tq;
        a.cache = &c.c;
        a.softmax_scale = 0.04f;
        a.indices = &ti;
        a.out = &to;
        a.lse = &tl;
        float *tmp = malloc(n * 4), *tmpl = malloc((size_t)(b * s_q * h_q) * 4);
        CHECK_STATUS(run_decode(ctx, &a, tmp, tmpl), AK_OK);
        free(tmp);
        free(tmpl);
        ak_context_destroy(ctx);
    }
    for (int k = 1; k < 3; k++) {
        CHECK_MSG(memcmp(out[0], out[k], n * 2) == 0, "out differs between 1 and %d threads",
                  (int)threads[k]);
        CHECK_MSG(memcmp(lse[0], lse[k], (size_t)(b * s_q * h_q) * 4) == 0,
                  "lse differs between 1 and %d threads", (int)threads[k]);
    }
    for (int k = 0; k < 3; k++) {
        free(out[k]);
        free(lse[k]);
    }
    free(q);
    free(idx);
    tcache_free(&c);
}

/* lse with FlashMLA's [b, h_q, s_q] order is a stride choice (semantics.md 3). */
AK_TEST(lse_with_transposed_strides) {
    ak_rng r;
    ak_rng_init(&r, ak_test_seed() + 4);
    ak_context *ctx = cpu_ctx(2);
    tcache c;
    tcache_make(&c, AK_LAYOUT_MLA_BF16, 4, 16);
    for (int64_t s = 0; s < c.cap; s++)
        tcache_write(&c, s, 7);
    int64_t b = 2, s_q = 3, h_q = 4, topk = 20;
    uint16_t q[2 * 3 * 4 * 576];
    fill_q(&r, q, b * s_q * h_q * 576);
    int32_t idx[2 * 3 * 20];
    for (int k = 0; k < 120; k++)
        idx[k] = (int32_t)ak_rng_range(&r, 0, c.cap);
    int64_t sh_q[4] = {b, s_q, h_q, 576}, sh_i[3] = {b, s_q, topk}, sh_o[4] = {b, s_q, h_q, 512};
    ak_tensor tq = ak_tensor_make(q, AK_DTYPE_BF16, 4, sh_q);
    ak_tensor ti = ak_tensor_make(idx, AK_DTYPE_I32, 3, sh_i);
    static float out[2 * 3 * 4 * 512], lse_a[24], lse_b[24];
    ak_tensor to = ak_tensor_make(out, AK_DTYPE_F32, 4, sh_o);
    ak_tensor tla = ak_tensor_make(lse_a, AK_DTYPE_F32, 3, sh_o);
    ak_tensor tlb = tla;
    tlb.data = lse_b;
    tlb.strides[0] = h_q * s_q;
    tlb.strides[1] = 1;
    tlb.strides[2] = s_q;
    ak_mla_decode_args a;
    memset(&a, 0, sizeof a);
    a.q = &tq;
    a.cache = &c.c;
    a.softmax_scale = 0.05f;
    a.indices = &ti;
    a.out = &to;
    a.lse = &tla;
    static char ws[1 << 22];
    size_t need = 0;
    CHECK_STATUS(ak_mla_decode_workspace_size(ctx, &a, &need), AK_OK);
    CHECK(need <= sizeof ws);
    CHECK_STATUS(ak_mla_decode(ctx, &a, ws, sizeof ws), AK_OK);
    a.lse = &tlb;
    CHECK_STATUS(ak_mla_decode(ctx, &a, ws, sizeof ws), AK_OK);
    for (int64_t rr = 0; rr < b; rr++)
        for (int64_t i = 0; i < s_q; i++)
            for (int64_t h = 0; h < h_q; h++)
                CHECK(lse_a[(rr * s_q + i) * h_q + h] == lse_b[(rr * h_q + h) * s_q + i]);
    CHECK_REJECT(ak_mla_decode(ctx, &a, ws, need - 1), AK_ERR_WORKSPACE_TOO_SMALL, "workspace");
    tcache_free(&c);
    ak_context_destroy(ctx);
}

AK_TEST(bad_arguments_are_rejected) {
    ak_context *ctx = cpu_ctx(1);
    tcache c, c4;
    tcache_make(&c, AK_LAYOUT_DSA_FP8_BLOCKSCALE, 2, 16);
    tcache_make(&c4, AK_LAYOUT_DSV4_FP8_UE8M0, 2, 16);
    static uint16_t q[2 * 8 * 576];
    static int32_t idx[2 * 8], bt[2] = {0, 1}, seq[2] = {16, 17}, zero[2];
    static float out[2 * 8 * 512], lse[16];
    int64_t sh_q[4] = {2, 1, 8, 576}, sh_i[3] = {2, 1, 8}, sh_o[4] = {2, 1, 8, 512};
    int64_t sh_bt[2] = {2, 1}, sh_b[1] = {2}, sh_i0[3] = {2, 1, 0};
    ak_tensor tq = ak_tensor_make(q, AK_DTYPE_BF16, 4, sh_q);
    ak_tensor ti = ak_tensor_make(idx, AK_DTYPE_I32, 3, sh_i);
    ak_tensor ti0 = ak_tensor_make(zero, AK_DTYPE_I32, 3, sh_i0);
    ak_tensor tbt = ak_tensor_make(bt, AK_DTYPE_I32, 2, sh_bt);
    ak_tensor tseq = ak_tensor_make(seq, AK_DTYPE_I32, 1, sh_b);
    ak_tensor to = ak_tensor_make(out, AK_DTYPE_F32, 4, sh_o);
    ak_tensor tl = ak_tensor_make(lse, AK_DTYPE_F32, 3, sh_o);
    static char ws[1 << 22];
    ak_mla_decode_args a, base;
    memset(&base, 0, sizeof base);
    base.q = &tq;
    base.cache = &c.c;
    base.softmax_scale = 0.04f;
    base.indices = &ti;
    base.out = &to;
    base.lse = &tl;
    CHECK_STATUS(ak_mla_decode(ctx, &base, ws, sizeof ws), AK_OK);

    a = base;
    a.cache = &c4.c; /* q is 576 wide, the V4 layout reads 512 */
    CHECK_REJECT(ak_mla_decode(ctx, &a, ws, sizeof ws), AK_ERR_INVALID_ARGUMENT, "q");
    a = base;
    a.indices = &ti0;
    CHECK_REJECT(ak_mla_decode(ctx, &a, ws, sizeof ws), AK_ERR_INVALID_ARGUMENT, "topk");
    a = base;
    a.out = NULL;
    CHECK_REJECT(ak_mla_decode(ctx, &a, ws, sizeof ws), AK_ERR_INVALID_ARGUMENT, "out");
    a = base;
    a.balance = AK_BALANCE_MAKE; /* accepted and ignored by the CPU backend */
    CHECK_STATUS(ak_mla_decode(ctx, &a, ws, sizeof ws), AK_OK);
    a.balance = AK_BALANCE_REUSE;
    CHECK_STATUS(ak_mla_decode(ctx, &a, ws, sizeof ws), AK_OK);
    a.balance = (ak_balance)3;
    CHECK_REJECT(ak_mla_decode(ctx, &a, ws, sizeof ws), AK_ERR_INVALID_ARGUMENT, "balance");
    a.balance = (ak_balance)-1;
    CHECK_REJECT(ak_mla_decode(ctx, &a, ws, sizeof ws), AK_ERR_INVALID_ARGUMENT, "balance");
    a = base;
    a.indices = NULL;
    a.block_table = &tbt;
    a.seq_lens = &tseq;
    a.balance = AK_BALANCE_MAKE; /* a sparse-mode field in dense mode */
    CHECK_REJECT(ak_mla_decode(ctx, &a, ws, sizeof ws), AK_ERR_INVALID_ARGUMENT, "balance");
    a = base;
    a.block_table = &tbt; /* both modes */
    CHECK_REJECT(ak_mla_decode(ctx, &a, ws, sizeof ws), AK_ERR_INVALID_ARGUMENT, "block_table");
    a = base;
    a.indices = NULL; /* neither mode */
    CHECK_REJECT(ak_mla_decode(ctx, &a, ws, sizeof ws), AK_ERR_INVALID_ARGUMENT, "indices");
    a = base;
    a.indices = NULL;
    a.block_table = &tbt;
    a.seq_lens = &tseq; /* seq_lens 17 needs 2 pages of 16, the table has 1 column */
    CHECK_REJECT(ak_mla_decode(ctx, &a, ws, sizeof ws), AK_ERR_INVALID_ARGUMENT, "block_table");
    seq[1] = -1;
    CHECK_REJECT(ak_mla_decode(ctx, &a, ws, sizeof ws), AK_ERR_INVALID_ARGUMENT, "seq_lens");
    seq[1] = 16;
    a.seq_lens = NULL;
    CHECK_REJECT(ak_mla_decode(ctx, &a, ws, sizeof ws), AK_ERR_INVALID_ARGUMENT, "seq_lens");
    a = base;
    c.c.h_kv = 3; /* 8 heads over 3 kv heads */
    CHECK_REJECT(ak_mla_decode(ctx, &a, ws, sizeof ws), AK_ERR_INVALID_ARGUMENT, "h_kv");
    c.c.h_kv = 1;
    a = base;
    a.extra_cache = &c4.c; /* another record format */
    a.extra_indices = &ti;
    CHECK_REJECT(ak_mla_decode(ctx, &a, ws, sizeof ws), AK_ERR_INVALID_ARGUMENT, "extra_cache");
    a = base;
    a.extra_cache = &c.c; /* extra cache without indices */
    CHECK_REJECT(ak_mla_decode(ctx, &a, ws, sizeof ws), AK_ERR_INVALID_ARGUMENT, "extra_indices");
    a = base;
    a.softmax_scale = NAN;
    CHECK_REJECT(ak_mla_decode(ctx, &a, ws, sizeof ws), AK_ERR_INVALID_ARGUMENT, "softmax_scale");
    a = base;
    ak_tensor tqf = tq;
    tqf.dtype = AK_DTYPE_F32;
    a.q = &tqf;
    CHECK_REJECT(ak_mla_decode(ctx, &a, ws, sizeof ws), AK_ERR_INVALID_ARGUMENT, "q");
    a = base;
    ak_tensor tsink = ak_tensor_make(lse, AK_DTYPE_F32, 1, sh_b); /* [2], h_q is 8 */
    a.attn_sink = &tsink;
    CHECK_REJECT(ak_mla_decode(ctx, &a, ws, sizeof ws), AK_ERR_INVALID_ARGUMENT, "attn_sink");
    a = base;
    ak_tensor tlen = ak_tensor_make(seq, AK_DTYPE_I32, 1, sh_b);
    tlen.shape[0] = 3;
    a.topk_length = &tlen;
    CHECK_REJECT(ak_mla_decode(ctx, &a, ws, sizeof ws), AK_ERR_INVALID_ARGUMENT, "topk_length");
    /* an empty batch is valid and writes nothing */
    a = base;
    ak_tensor tq0 = tq, ti00 = ti, to0 = to, tl0 = tl;
    tq0.shape[0] = ti00.shape[0] = to0.shape[0] = tl0.shape[0] = 0;
    a.q = &tq0;
    a.indices = &ti00;
    a.out = &to0;
    a.lse = &tl0;
    CHECK_STATUS(ak_mla_decode(ctx, &a, ws, sizeof ws), AK_OK);
    size_t bytes;
    CHECK_REJECT(ak_mla_decode_workspace_size(ctx, &base, NULL), AK_ERR_INVALID_ARGUMENT, "bytes");
    CHECK_REJECT(ak_mla_decode_workspace_size(ctx, NULL, &bytes), AK_ERR_INVALID_ARGUMENT, "args");
    CHECK_REJECT(ak_mla_decode(NULL, &base, ws, sizeof ws), AK_ERR_INVALID_ARGUMENT, NULL);
    tcache_free(&c);
    tcache_free(&c4);
    ak_context_destroy(ctx);
}
