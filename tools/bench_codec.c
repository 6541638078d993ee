/*
 * bench_codec.c -- `attnkit bench --op convert|write|gather`: codec throughput through the public
 * API only (so the same cases run on CUDA). Bytes are counted as read + written.
 *
 * convert: every conversion of layouts.md 6.2 that ak_cache_convert implements, each from a source
 * pool of >= 1 GiB (about 32 MiB with --quick): C1, C2, C3, C5, FP8-PT -> BF16, 656 -> FP8-PT
 * (the FP8-PT writers also with a non-power-of-two k_scale), C8 (V4 256 -> 64 pages, touched-pages form with a random page permutation), C13 (656 re-page
 * into padded pages), C11 (MHA NHD -> HND) and C12 (MHA bf16 -> e4m3 and back).
 * write / gather: 262144 slots over a 1M-token pool (C2/C9/IDX132 writers; C3, C6 and C10
 * gathers), random distinct slots, and for the writers also whole pages in random page order; the
 * indexer's cases also with every slot of the pool (n = 1M).
 * Pools and input rows are filled with random normal values on the device.
 *
 * A case's pools are allocated and filled by its first (warm-up) call and freed by destroy; the
 * framework destroys each case after timing it, so only one case's pools exist at a time.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "common/internal.h"
#include "devmem.h"

#define GIB (1024.0 * 1024.0 * 1024.0)

typedef enum bkind { BK_CONVERT, BK_WRITE, BK_GATHER } bkind;

typedef struct bstate {
    bkind kind;
    uint64_t seed;
    ak_quant_rule rule;
    int32_t ready;
    /* descriptors; data pointers are set by setup */
    ak_cache src, dst;
    int32_t permute_pages;      /* convert: touched-pages form with a random page order */
    ak_dtype mha_dt;            /* MHA source element type */
    int64_t n;                  /* write / gather rows */
    int32_t raw;                /* gather: INDEXER_FP8 raw bytes + scales */
    int32_t page_runs;          /* write: slots fill whole pages, pages in random order */
    /* device buffers */
    void *mem[6];
    ak_tensor nope, rope, slots, out, out_scale, pages;
} bstate;

static void *dev_zeros(ak_context *ctx, bstate *s, int slot, int64_t bytes) {
    void *p = ak_dev_alloc(ctx, (size_t)(bytes > 0 ? bytes : 1));
    if (p != NULL && ak_dev_memset(ctx, p, 0, (size_t)(bytes > 0 ? bytes : 1)) != AK_OK) {
        ak_dev_free(ctx, p);
        p = NULL;
    }
    s->mem[slot] = p;
    return p;
}

static int is_mha(ak_layout l) { return l == AK_LAYOUT_MHA_NHD || l == AK_LAYOUT_MHA_HND; }

/* Row widths of the writer for a layout (nope, rope) or an MHA pool (K, V per token). */
static void row_widths(const ak_cache *c, int64_t *wn, int64_t *wr) {
    if (is_mha(c->layout)) {
        *wn = (int64_t)c->h_kv * c->head_dim;
        *wr = (int64_t)c->h_kv * c->head_dim_v;
        return;
    }
    ak_layout_traits t;
    ak_layout_traits_get(c->layout, &t);
    *wn = t.d_nope;
    *wr = t.d_rope;
}

/* Fills every slot of a pool with random rows through the writers, in chunks; the rows are
   generated on the device (ak_bench_fill_normal_bf16_dev), so 1 GiB pools fill in well under a
   second on a GPU. */
static ak_status fill_pool(ak_context *ctx, const ak_cache *c, uint64_t seed) {
    int64_t cap = (int64_t)c->num_pages * c->page_size, wn, wr;
    row_widths(c, &wn, &wr);
    const int64_t chunk = 262144, w = wn + wr;
    int32_t *hs = (int32_t *)malloc((size_t)chunk * 4);
    void *d = ak_dev_alloc(ctx, (size_t)(chunk * w) * 2), *ds = ak_dev_alloc(ctx, (size_t)chunk * 4);
    ak_status st = (hs && d && ds) ? AK_OK : AK_ERR_OUT_OF_MEMORY;
    for (int64_t b = 0; b < cap && st == AK_OK; b += chunk) {
        int64_t m = cap - b < chunk ? cap - b : chunk;
        st = ak_bench_fill_normal_bf16_dev(ctx, d, m * w, 1.0, 8.0, seed + (uint64_t)b);
        for (int64_t i = 0; i < m; i++) hs[i] = (int32_t)(b + i);
        if (st == AK_OK) st = ak_dev_upload(ctx, ds, hs, (size_t)m * 4);
        if (st != AK_OK) break;
        int64_t ss[1] = {m};
        ak_tensor ts = ak_dev_tensor(ctx, ds, AK_DTYPE_I32, 1, ss);
        if (is_mha(c->layout)) {
            int64_t sk[3] = {m, c->h_kv, c->head_dim}, sv[3] = {m, c->h_kv, c->head_dim_v};
            ak_tensor tk = ak_dev_tensor(ctx, d, AK_DTYPE_BF16, 3, sk);
            ak_tensor tv = ak_dev_tensor(ctx, (uint16_t *)d + wn, AK_DTYPE_BF16, 3, sv);
            tk.strides[0] = w;
            tv.strides[0] = w;
            st = ak_mha_cache_write(ctx, c, &tk, &tv, &ts);
        } else {
            int64_t sn[2] = {m, wn}, sr[2] = {m, wr};
            ak_tensor tn = ak_dev_tensor(ctx, d, AK_DTYPE_BF16, 2, sn);
            ak_tensor tr = ak_dev_tensor(ctx, (uint16_t *)d + wn, AK_DTYPE_BF16, 2, sr);
            tn.strides[0] = w;
            tr.strides[0] = w;
            st = ak_cache_write(ctx, c, &tn, wr ? &tr : NULL, &ts, AK_QUANT_DEFAULT);
        }
        /* the next chunk reuses d and ds */
        if (st == AK_OK) st = ak_context_synchronize(ctx);
    }
    free(hs);
    ak_dev_free(ctx, d);
    ak_dev_free(ctx, ds);
    return st;
}

/* Pool bytes (K and V) of a descriptor (strides were filled by ak_cache_init*). */
static int64_t pool_bytes(const ak_cache *c, int64_t *v) {
    *v = is_mha(c->layout) ? c->v_page_stride * c->num_pages : 0;
    return c->page_stride * c->num_pages;
}

/* Fisher-Yates shuffle of h[0, n) from a xorshift stream seeded with seed. */
static void shuffle_i32(int32_t *h, int64_t n, uint64_t seed) {
    uint64_t x = seed | 1;
    for (int64_t i = n - 1; i > 0; i--) {
        x ^= x << 13; x ^= x >> 7; x ^= x << 17;
        int64_t j = (int64_t)(x % (uint64_t)(i + 1));
        int32_t tmp = h[i]; h[i] = h[j]; h[j] = tmp;
    }
}

/* h[0, n) uploaded as an int32 tensor into mem[slot]; frees h. */
static ak_status upload_i32(ak_context *ctx, bstate *s, int slot, int32_t *h, int64_t n, ak_tensor *t) {
    void *d = ak_dev_clone(ctx, h, (size_t)n * 4);
    free(h);
    if (d == NULL) return AK_ERR_OUT_OF_MEMORY;
    s->mem[slot] = d;
    int64_t sh[1] = {n};
    *t = ak_dev_tensor(ctx, d, AK_DTYPE_I32, 1, sh);
    return AK_OK;
}

/* The first n of a random permutation of [0, range). */
static ak_status upload_perm(ak_context *ctx, bstate *s, int slot, int64_t n, int64_t range,
                             ak_tensor *t) {
    int32_t *h = (int32_t *)malloc((size_t)range * 4);
    if (h == NULL) return AK_ERR_OUT_OF_MEMORY;
    for (int64_t i = 0; i < range; i++) h[i] = (int32_t)i;
    shuffle_i32(h, range, s->seed);
    return upload_i32(ctx, s, slot, h, n, t);
}

/* Slots of n tokens (a multiple of P) filling n / P whole pages of `pages`, the pages in random
   order: how a prefill's new tokens land in a paged pool. */
static ak_status upload_page_runs(ak_context *ctx, bstate *s, int slot, int64_t n, int64_t pages, int32_t P,
                                  ak_tensor *t) {
    int32_t *perm = (int32_t *)malloc((size_t)pages * 4), *h = (int32_t *)malloc((size_t)n * 4);
    if (perm == NULL || h == NULL) {
        free(perm);
        free(h);
        return AK_ERR_OUT_OF_MEMORY;
    }
    for (int64_t i = 0; i < pages; i++) perm[i] = (int32_t)i;
    shuffle_i32(perm, pages, s->seed);
    for (int64_t i = 0; i < n; i++) h[i] = perm[i / P] * P + (int32_t)(i % P);
    free(perm);
    return upload_i32(ctx, s, slot, h, n, t);
}

static ak_status setup(ak_context *ctx, bstate *s) {
    int64_t kb, vb;
    kb = pool_bytes(&s->src, &vb);
    if (dev_zeros(ctx, s, 0, kb) == NULL) return AK_ERR_OUT_OF_MEMORY;
    s->src.data = s->mem[0];
    if (is_mha(s->src.layout)) {
        if (dev_zeros(ctx, s, 1, vb) == NULL) return AK_ERR_OUT_OF_MEMORY;
        s->src.v_data = s->mem[1];
    }
    if (s->kind == BK_CONVERT) {
        kb = pool_bytes(&s->dst, &vb);
        if (dev_zeros(ctx, s, 2, kb) == NULL) return AK_ERR_OUT_OF_MEMORY;
        s->dst.data = s->mem[2];
        if (is_mha(s->dst.layout)) {
            if (dev_zeros(ctx, s, 3, vb) == NULL) return AK_ERR_OUT_OF_MEMORY;
            s->dst.v_data = s->mem[3];
        }
        AK_TRY(fill_pool(ctx, &s->src, s->seed));
        if (s->permute_pages)
            AK_TRY(upload_perm(ctx, s, 4, s->src.num_pages, s->src.num_pages, &s->pages));
        return AK_OK;
    }
    int64_t cap = (int64_t)s->src.num_pages * s->src.page_size;
    if (s->page_runs) AK_TRY(upload_page_runs(ctx, s, 4, s->n, s->src.num_pages, s->src.page_size, &s->slots));
    else AK_TRY(upload_perm(ctx, s, 4, s->n, cap, &s->slots));
    int64_t wn, wr;
    row_widths(&s->src, &wn, &wr);
    if (s->kind == BK_WRITE) {
        s->mem[5] = ak_dev_alloc(ctx, (size_t)(s->n * (wn + wr)) * 2);
        if (s->mem[5] == NULL) return AK_ERR_OUT_OF_MEMORY;
        AK_TRY(ak_bench_fill_normal_bf16_dev(ctx, s->mem[5], s->n * (wn + wr), 1.0, 8.0, s->seed));
        int64_t sn[2] = {s->n, wn}, sr[2] = {s->n, wr};
        s->nope = ak_dev_tensor(ctx, s->mem[5], AK_DTYPE_BF16, 2, sn);
        s->rope = ak_dev_tensor(ctx, (uint16_t *)s->mem[5] + wn, AK_DTYPE_BF16, 2, sr);
        s->nope.strides[0] = wn + wr;
        s->rope.strides[0] = wn + wr;
        return AK_OK;
    }
    AK_TRY(fill_pool(ctx, &s->src, s->seed));
    ak_layout_traits t;
    ak_layout_traits_get(s->src.layout, &t);
    int64_t so[2] = {s->n, t.d_qk};
    if (s->raw) {
        if (dev_zeros(ctx, s, 5, s->n * (t.d_qk + 4)) == NULL) return AK_ERR_OUT_OF_MEMORY;
        int64_t sc[1] = {s->n};
        s->out = ak_dev_tensor(ctx, s->mem[5], AK_DTYPE_E4M3, 2, so);
        s->out_scale = ak_dev_tensor(ctx, (uint8_t *)s->mem[5] + s->n * t.d_qk, AK_DTYPE_F32, 1, sc);
    } else {
        if (dev_zeros(ctx, s, 5, s->n * t.d_qk * 2) == NULL) return AK_ERR_OUT_OF_MEMORY;
        s->out = ak_dev_tensor(ctx, s->mem[5], AK_DTYPE_BF16, 2, so);
    }
    return AK_OK;
}

static ak_status run_case(ak_context *ctx, void *state) {
    bstate *s = (bstate *)state;
    if (!s->ready) {
        ak_status st = setup(ctx, s);
        if (st == AK_ERR_OUT_OF_MEMORY)
            return ak_fail(st, "bench codec: allocating the case's pools failed (%s -> %s)",
                           ak_layout_name(s->src.layout), ak_layout_name(s->dst.layout));
        if (st != AK_OK) return st;
        s->ready = 1;
    }
    switch (s->kind) {
    case BK_CONVERT:
        return ak_cache_convert(ctx, &s->src, &s->dst, s->permute_pages ? &s->pages : NULL, s->rule);
    case BK_WRITE:
        return ak_cache_write(ctx, &s->src, &s->nope, s->rope.shape[1] ? &s->rope : NULL, &s->slots,
                              s->rule);
    default:
        return ak_cache_gather(ctx, &s->src, &s->slots, &s->out, s->raw ? &s->out_scale : NULL);
    }
}

static void destroy_case(ak_context *ctx, void *state) {
    bstate *s = (bstate *)state;
    for (int i = 0; i < 6; i++) ak_dev_free(ctx, s->mem[i]);
    free(s);
}

static int64_t token_bytes(const ak_cache *c) {
    if (is_mha(c->layout))
        return (int64_t)c->h_kv * (c->head_dim + c->head_dim_v) * ak_dtype_size(c->elem_dtype);
    ak_layout_traits t;
    ak_layout_traits_get(c->layout, &t);
    return t.bytes_per_token;
}

/* A cache descriptor (data set later) of `pages` pages. */
static ak_cache mla_desc(ak_context *ctx, ak_layout l, int32_t pages, int32_t P, int64_t extra) {
    ak_cache c;
    ak_cache_init(&c, l, NULL, 0, P);
    c.num_pages = pages;
    c.page_stride += extra;
    c.device = ak_context_device(ctx);
    return c;
}

static ak_cache mha_desc(ak_context *ctx, ak_layout l, ak_dtype dt, int32_t pages) {
    ak_cache c;
    ak_cache_init_mha(&c, l, dt, NULL, NULL, 0, 16, 8, 128, 128);
    c.num_pages = pages;
    c.device = ak_context_device(ctx);
    return c;
}

static ak_status add_case(ak_bench_list *out, bstate *proto, const char *op, const char *shape,
                          double bytes) {
    bstate *s = (bstate *)malloc(sizeof *s);
    if (s == NULL) return AK_ERR_OUT_OF_MEMORY;
    *s = *proto;
    ak_bench_case c;
    memset(&c, 0, sizeof c);
    snprintf(c.op, sizeof c.op, "%s", op);
    snprintf(c.shape, sizeof c.shape, "%s", shape);
    c.bytes_total = bytes;
    c.bytes_kv = bytes;
    c.state = s;
    c.run = run_case;
    c.destroy = destroy_case;
    ak_status st = ak_bench_add(out, &c);
    if (st != AK_OK) free(s);
    return st;
}

/* Pages of page_size P so that the pool of layout l holds about `bytes`. */
static int32_t pages_for(ak_layout l, int32_t P, double bytes) {
    int64_t pb = 0;
    ak_layout_page_bytes(l, P, &pb);
    double p = bytes / (double)pb;
    return (int32_t)(p < 1 ? 1 : p + 0.999);
}

ak_status ak_bench_codec(ak_context *ctx, const ak_bench_opts *o, const char *op,
                         ak_bench_list *out) {
    double src_bytes = o->quick ? 32.0 * 1024 * 1024 : 1.0 * GIB;
    uint64_t seed = o->seed ? o->seed : 1234;
    char shape[200];
    if (ak_bench_wants(op, "convert")) {
        const ak_layout B = AK_LAYOUT_MLA_BF16, F = AK_LAYOUT_MLA_FP8_PERTENSOR,
                        D = AK_LAYOUT_DSA_FP8_BLOCKSCALE, V = AK_LAYOUT_DSV4_FP8_UE8M0;
        /* ks: the FP8-PT side's k_scale, 0 for the default 1.0 (SGLang's default); 8 / 448
           rounded is a calibrated-style scale that is not a power of two, so quotients are real
           divisions */
        const struct { const char *name; ak_layout s, d; int32_t ps, pd, extra, perm; float ks; } mla[] = {
            {"C1 FP8-PT->656", F, D, 64, 64, 0, 0, 0},  {"C2 BF16->656", B, D, 64, 64, 0, 0, 0},
            {"C3 656->BF16", D, B, 64, 64, 0, 0, 0},    {"C5 BF16->FP8-PT", B, F, 64, 64, 0, 0, 0},
            {"C5 BF16->FP8-PT k_scale 0.0179", B, F, 64, 64, 0, 0, 0.0179f},
            {"FP8-PT->BF16", F, B, 64, 64, 0, 0, 0},    {"656->FP8-PT", D, F, 64, 64, 0, 0, 0},
            {"656->FP8-PT k_scale 0.0179", D, F, 64, 64, 0, 0, 0.0179f},
            {"C8 V4 P256->64 perm", V, V, 256, 64, 0, 1, 0},
            {"C13 656 P64->P256 pad", D, D, 64, 256, 656, 0, 0},
        };
        for (size_t i = 0; i < sizeof mla / sizeof mla[0]; i++) {
            bstate s;
            memset(&s, 0, sizeof s);
            s.kind = BK_CONVERT;
            s.seed = seed + i;
            s.src = mla_desc(ctx, mla[i].s, pages_for(mla[i].s, mla[i].ps, src_bytes), mla[i].ps, 0);
            int64_t cap = (int64_t)s.src.num_pages * mla[i].ps;
            s.dst = mla_desc(ctx, mla[i].d, (int32_t)((cap + mla[i].pd - 1) / mla[i].pd), mla[i].pd,
                             mla[i].extra);
            if (mla[i].ks != 0.0f) s.dst.k_scale = mla[i].ks;
            s.permute_pages = mla[i].perm;
            int64_t sv, dv, sb = pool_bytes(&s.src, &sv), db = pool_bytes(&s.dst, &dv);
            snprintf(shape, sizeof shape, "%s %lld tok, %.2f GiB -> %.2f GiB", mla[i].name,
                     (long long)cap, sb / GIB, db / GIB);
            AK_TRY(add_case(out, &s, "convert", shape, (double)(sb + db)));
        }
        const struct { const char *name; ak_layout s, d; ak_dtype st, dt; } mha[] = {
            {"C11 MHA NHD->HND bf16", AK_LAYOUT_MHA_NHD, AK_LAYOUT_MHA_HND, AK_DTYPE_BF16, AK_DTYPE_BF16},
            {"C12 MHA bf16->e4m3", AK_LAYOUT_MHA_NHD, AK_LAYOUT_MHA_NHD, AK_DTYPE_BF16, AK_DTYPE_E4M3},
            {"C12 MHA e4m3->bf16", AK_LAYOUT_MHA_HND, AK_LAYOUT_MHA_NHD, AK_DTYPE_E4M3, AK_DTYPE_BF16},
        };
        for (size_t i = 0; i < sizeof mha / sizeof mha[0]; i++) {
            bstate s;
            memset(&s, 0, sizeof s);
            s.kind = BK_CONVERT;
            s.seed = seed + 100 + i;
            /* [P 16, h_kv 8, D 128] per pool; K + V of the source >= src_bytes */
            double page = 16.0 * 8 * 256 * ak_dtype_size(mha[i].st);
            int32_t pages = (int32_t)(src_bytes / page + 0.999);
            s.src = mha_desc(ctx, mha[i].s, mha[i].st, pages);
            s.dst = mha_desc(ctx, mha[i].d, mha[i].dt, pages);
            int64_t sv, dv, sb = pool_bytes(&s.src, &sv), db = pool_bytes(&s.dst, &dv);
            snprintf(shape, sizeof shape, "%s h8 d128 P16 %lld tok, %.2f GiB -> %.2f GiB",
                     mha[i].name, (long long)pages * 16, (sb + sv) / GIB, (db + dv) / GIB);
            AK_TRY(add_case(out, &s, "convert", shape, (double)(sb + sv + db + dv)));
        }
    }
    /* 1M-token pools (issue 5), n slots per call */
    int64_t n = o->quick ? 8192 : 262144, pool_tok = o->quick ? 4 * 8192 : 1048576;
    /* writes twice: random distinct slots (every token its own page, the worst case), and page
       runs (a prefill's tokens filling whole pages in random page order, how an engine's page
       allocator places them). The indexer cases also with n = the whole pool: at 262144 tokens
       they move only 66-97 MiB in all, where even a device memcpy of the same bytes reaches
       79-84% of the 2 GiB copy's rate (H100, docs/perf.md session 15) */
    const struct { const char *name; ak_layout l; int32_t P; int raw, whole; } rows[] = {
        {"C2 bf16 rows->656", AK_LAYOUT_DSA_FP8_BLOCKSCALE, 64, 0, 0},
        {"C9 bf16 rows->V4", AK_LAYOUT_DSV4_FP8_UE8M0, 64, 0, 0},
        {"bf16 rows->IDX132", AK_LAYOUT_INDEXER_FP8, 64, 0, 0},
        {"bf16 rows->IDX132", AK_LAYOUT_INDEXER_FP8, 64, 0, 1},
        {"C3 656->bf16 rows", AK_LAYOUT_DSA_FP8_BLOCKSCALE, 64, 0, 0},
        {"C6 V4->bf16 rows", AK_LAYOUT_DSV4_FP8_UE8M0, 256, 0, 0},
        {"C10 IDX132->e4m3+scale", AK_LAYOUT_INDEXER_FP8, 64, 1, 0},
        {"C10 IDX132->e4m3+scale", AK_LAYOUT_INDEXER_FP8, 64, 1, 1},
    };
    enum { NW = 4 }; /* the first NW rows are writers, the rest gathers */
    /* cases: the writers with random slots, the writers with page runs, the gathers */
    for (size_t c = 0; c < 2 * NW + (sizeof rows / sizeof rows[0] - NW); c++) {
        const size_t i = c < 2 * NW ? c % NW : c - NW;
        const bkind k = c < 2 * NW ? BK_WRITE : BK_GATHER;
        if (!ak_bench_wants(op, k == BK_WRITE ? "write" : "gather")) continue;
        bstate s;
        memset(&s, 0, sizeof s);
        s.kind = k;
        s.seed = seed + 200 + c;
        s.n = rows[i].whole ? pool_tok : n;
        s.raw = rows[i].raw;
        s.page_runs = c >= NW && c < 2 * NW;
        s.rule = AK_QUANT_DEFAULT;
        /* the slots scatter over a pool far larger than the caches */
        s.src = mla_desc(ctx, rows[i].l, (int32_t)(pool_tok / rows[i].P), rows[i].P, 0);
        ak_layout_traits t;
        ak_layout_traits_get(rows[i].l, &t);
        int64_t row = (int64_t)t.d_qk * (s.raw ? 1 : 2) + (s.raw ? 4 : 0);
        snprintf(shape, sizeof shape, "%s n %lld %s of %lld", rows[i].name, (long long)s.n,
                 s.page_runs ? "in random whole pages" : "random slots", (long long)pool_tok);
        AK_TRY(add_case(out, &s, k == BK_WRITE ? "write" : "gather", shape,
                        (double)s.n * (double)(token_bytes(&s.src) + row + 4)));
    }
    return AK_OK;
}

AK_BENCH_REGISTER(ak_bench_codec)
