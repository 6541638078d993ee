/*
 * bench_mla.c -- `attnkit bench` cases for MLA decode (sparse and dense) and sparse prefill, with
 * the shapes of targets.md 2 and 5 (FlashMLA's anchor harness): sparse decode picks topk distinct
 * random tokens of a 32k-token context per request and query row; dense decode reads s_k tokens
 * through a random page permutation; sparse prefill gathers from a flat bf16 KV. Data follow the
 * anchor harness (targets.md 2 and 6.4: random normal values, scaled and clamped, the caches
 * quantized by the layouts' writer rules), generated on the host and uploaded, so the same cases
 * run on every backend; the card's clock under its power cap depends on the values (docs/perf.md,
 * session 48), so only like data make figures comparable with the anchors. The CPU backend is far
 * slower, so on it batches (and prefill query counts) are scaled down; the shape text says so.
 * FLOPs and bytes follow targets.md 3.1 and 3.2.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "devmem.h"
#include "mla_data.h"

#define MLA_TRY(expr)                                                                              \
    do {                                                                                           \
        ak_status mla_try_s_ = (expr);                                                             \
        if (mla_try_s_ != AK_OK) return mla_try_s_;                                                \
    } while (0)

/* Index sets of a cold sparse decode case (AK_BENCH_COLD): one per call of the replayed graph (20
   back-to-back calls, targets.md 5.0), so that one replay touches 20 sets' records. */
#define MLA_COLD_SETS 20

typedef struct mla_bench {
    void *q, *pool, *idx, *extra_pool, *extra_idx, *out, *lse, *ml, *bt, *seq, *kv, *len, *sink, *ws;
    ak_tensor tq, tidx, textra_idx, tout, tlse, tml, tbt, tseq, tkv, tlen, tsink;
    ak_tensor tcold[MLA_COLD_SETS]; /* [b, s_q, topk] i32 each: call n takes set n % nset */
    int nset, call;
    ak_cache cache, extra;
    ak_mla_decode_args dec;
    ak_sparse_prefill_args pre;
    size_t ws_bytes;
    int balance, made; /* AK_BENCH_BALANCE: 1 every call makes its schedule, 2 only the first (then reuse) */
} mla_bench;

static void mla_bench_destroy(ak_context *ctx, void *state) {
    mla_bench *s = (mla_bench *)state;
    if (s == NULL) return;
    void *bufs[] = {s->q,   s->pool, s->idx, s->extra_pool, s->extra_idx, s->out,
                    s->lse, s->ml,   s->bt,  s->seq,        s->kv,        s->len, s->sink, s->ws};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        ak_dev_free(ctx, bufs[i]);
    free(s);
}

static ak_status run_decode(ak_context *ctx, void *state) {
    mla_bench *s = (mla_bench *)state;
    if (s->balance) s->dec.balance = s->balance == 2 && s->made ? AK_BALANCE_REUSE : AK_BALANCE_MAKE;
    s->made = 1;
    if (s->nset > 1) s->dec.indices = &s->tcold[s->call++ % s->nset];
    return ak_mla_decode(ctx, &s->dec, s->ws, s->ws_bytes);
}

static ak_status run_prefill(ak_context *ctx, void *state) {
    mla_bench *s = (mla_bench *)state;
    return ak_sparse_prefill(ctx, &s->pre, s->ws, s->ws_bytes);
}

/* Device copy of host data; NULL (and AK_ERR_OUT_OF_MEMORY) on failure. */
static void *upload(ak_context *ctx, const void *host, size_t bytes, ak_status *st) {
    void *p = ak_dev_clone(ctx, host, bytes);
    if (p == NULL && *st == AK_OK) *st = AK_ERR_OUT_OF_MEMORY;
    return p;
}

static void *alloc_dev(ak_context *ctx, size_t bytes, ak_status *st) {
    void *p = ak_dev_alloc(ctx, bytes > 0 ? bytes : 64);
    if (p == NULL && *st == AK_OK) *st = AK_ERR_OUT_OF_MEMORY;
    return p;
}

ak_status ak_bench_mla_pool(ak_context *ctx, ak_layout l, int32_t num_pages, int32_t P, uint64_t seed,
                            void **dev, ak_cache *c) {
    int64_t stride = 0;
    ak_status st = ak_layout_page_bytes(l, P, &stride);
    if (st != AK_OK) return st;
    int32_t tile = num_pages < 64 ? num_pages : 64;
    uint8_t *img = calloc((size_t)(tile * stride), 1);
    if (img == NULL) return AK_ERR_OUT_OF_MEMORY;
    ak_mla_data_pool_anchor(img, l, stride, P, tile, seed, AK_BENCH_FP8_KSCALE);
    *dev = ak_dev_alloc(ctx, (size_t)(num_pages * stride));
    if (*dev == NULL) st = AK_ERR_OUT_OF_MEMORY;
    for (int32_t p = 0; p < num_pages && st == AK_OK; p += tile) {
        int32_t n = num_pages - p < tile ? num_pages - p : tile;
        st = ak_dev_upload(ctx, (uint8_t *)*dev + (int64_t)p * stride, img, (size_t)(n * stride));
    }
    free(img);
    if (st != AK_OK) return st;
    st = ak_cache_init(c, l, *dev, num_pages, P);
    c->device = ak_context_device(ctx);
    c->k_scale = AK_BENCH_FP8_KSCALE; /* read by MLA_FP8_PERTENSOR only */
    return st;
}

/* Queries the workspace, allocates it and hands the case to the list; a backend without a kernel
   for the case (AK_ERR_UNSUPPORTED) drops it. */
static ak_status finish_case(ak_context *ctx, ak_bench_list *out, ak_bench_case *bc, mla_bench *s,
                             int decode) {
    ak_status st = decode ? ak_mla_decode_workspace_size(ctx, &s->dec, &s->ws_bytes)
                          : ak_sparse_prefill_workspace_size(ctx, &s->pre, &s->ws_bytes);
    if (st == AK_ERR_UNSUPPORTED) {
        mla_bench_destroy(ctx, s);
        return AK_OK;
    }
    if (st == AK_OK) s->ws = alloc_dev(ctx, s->ws_bytes, &st);
    if (st != AK_OK) {
        mla_bench_destroy(ctx, s);
        return st;
    }
    bc->state = s;
    bc->destroy = mla_bench_destroy;
    bc->run = decode ? run_decode : run_prefill;
    bc->graph = decode;
    st = ak_bench_add(out, bc);
    if (st != AK_OK) mla_bench_destroy(ctx, s);
    return st;
}

typedef struct sparse_shape {
    int64_t b, s_q, h_q;
} sparse_shape;

/* Sparse decode: main list of topk tokens (V3.2: random distinct among 32k per request; V4: the
   128-token window, newest first, of a request's two 256-token SWA pages) plus, for V4, the C4
   list of extra_topk random distinct compressed tokens (8k per request on 64-token pages). */
static ak_status add_sparse_decode(ak_context *ctx, const ak_bench_opts *o, ak_bench_list *out,
                                   const ak_model *m, sparse_shape sh, const char *note) {
    ak_status st = AK_OK;
    int v4 = m->kind == AK_MODEL_DSV4;
    int64_t b = sh.b, s_q = sh.s_q, h_q = sh.h_q, rows = b * s_q;
    int32_t d_qk = m->d_qk, P = m->page_size;
    int32_t topk = v4 ? m->window : m->topk, extra_topk = v4 ? m->topk : 0;
    int32_t ctx_tokens = v4 ? 2 * P : 32768, extra_ctx = 32768 / 4;
    /* AK_BENCH_SHARED_CTX=1 (V3.2 only): every request picks its keys in request 0's context, so the
       records (21.5 MB at 656 bytes) stay in L2 and the call runs without the DRAM bound: what a
       kernel would do on a card with more bandwidth per SM (a proxy, named in the shape). */
    const char *shared_env = getenv("AK_BENCH_SHARED_CTX");
    int shared = !v4 && shared_env != NULL && atoi(shared_env) != 0;
    /* AK_BENCH_COLD=1 (V3.2 only, not with a shared context): each of the graph's 20 calls takes
       its own index set, so that a replay's records do not fit L2 and come from DRAM, as a layer's
       do in a server, where the other layers run between two of its calls (with one set, the
       replays of a small call read the same few MB from L2). Up to b 16 every set also has its own
       contexts (the pool 20 times larger), so that even b 1 touches more than L2 holds. */
    const char *cold_env = getenv("AK_BENCH_COLD");
    const int nset = !v4 && !shared && cold_env != NULL && atoi(cold_env) != 0 ? MLA_COLD_SETS : 1;
    const int64_t cset = nset > 1 && b <= 16 ? nset : 1; /* context groups of b requests */
    /* AK_BENCH_ROW_GROUPS=g (V3.2 only, warm, 1 <= g < b): request r takes request r % g's
       lengths and index rows (its keys in that request's context), so that b / g CTAs of a split
       read each record at once, as the head tiles of a many-head call do: a proxy (named in the
       shape) for what that sharing costs with everything else of the call unchanged (its byte
       counts stay those of the call with distinct rows) */
    const char *grp_env = getenv("AK_BENCH_ROW_GROUPS");
    int64_t groups = !v4 && nset == 1 && grp_env != NULL ? atoll(grp_env) : 0;
    groups = groups >= 1 && groups < b ? groups : 0;
    /* AK_BENCH_INVALID=n (V3.2 only, 0..100): the last n% of every index row are -1, as an engine
       pads the top-k list of a request shorter than top-k when it passes no topk_length */
    const char *inv_env = getenv("AK_BENCH_INVALID");
    int inv_pct = !v4 && inv_env != NULL ? atoi(inv_env) : 0;
    inv_pct = inv_pct < 0 ? 0 : inv_pct > 100 ? 100 : inv_pct;
    int32_t n_valid = topk - (int32_t)((int64_t)topk * inv_pct / 100);
    /* AK_BENCH_RAGGED=1 (V3.2 only): topk_length per request, uniform in 1..topk (a batch of mixed
       context lengths below top-k); 2 and 3: the same spread, falling or rising with the request;
       4: every length top-k (passed, nothing ragged); 5: every tenth request top-k, the others
       1..topk / 8 (a few long contexts among short ones) */
    const char *rag_env = getenv("AK_BENCH_RAGGED");
    int ragged = !v4 && rag_env != NULL ? atoi(rag_env) : 0;
    /* AK_BENCH_BALANCE=1: every call balances the rows by their lengths (AK_BALANCE_MAKE); 2: the
       first call makes the schedule and the timed ones reuse it (AK_BALANCE_REUSE), as the layers
       after a step's first do */
    const char *bal_env = getenv("AK_BENCH_BALANCE");
    const int balance = bal_env != NULL ? atoi(bal_env) : 0;
    /* AK_BENCH_SINK=1 (V4 only): an attention sink per head, as the V4 model passes one */
    const char *sink_env = getenv("AK_BENCH_SINK");
    const int sink = v4 && sink_env != NULL && atoi(sink_env) != 0;
    char inv_note[64] = "";
    snprintf(inv_note, sizeof inv_note, "%s",
             ragged == 1   ? " ragged"
             : ragged == 2 ? " ragged falling"
             : ragged == 3 ? " ragged rising"
             : ragged == 4 ? " lengths full"
             : ragged == 5 ? " ragged skewed"
                           : "");
    if (inv_pct > 0)
        snprintf(inv_note + strlen(inv_note), sizeof inv_note - strlen(inv_note), " invalid %d%%", inv_pct);
    if (balance == 1 || balance == 2)
        snprintf(inv_note + strlen(inv_note), sizeof inv_note - strlen(inv_note), " balanced%s",
                 balance == 2 ? " reused" : "");
    if (sink) snprintf(inv_note + strlen(inv_note), sizeof inv_note - strlen(inv_note), " sink");
    uint64_t seed = o->seed ^ 0x6d6c61ull, rs = seed;
    char shape[200];
    ak_layout_traits lt;
    ak_layout_traits_get(m->layout, &lt);
    if (v4)
        snprintf(shape, sizeof shape,
                 "%s b %lld s_q %lld h_q %lld window %d (P %d) + extra %d (P %d)%s %s%s", m->name,
                 (long long)b, (long long)s_q, (long long)h_q, topk, P, extra_topk,
                 m->extra_page_size, inv_note, lt.name, note);
    else
        snprintf(shape, sizeof shape,
                 "%s b %lld s_q %lld h_q %lld topk %d ctx 32k%s%s (P %d) %s%s", m->name, (long long)b,
                 (long long)s_q, (long long)h_q, topk,
                 shared ? " shared" : nset > 1 ? " cold" : "", inv_note, P, lt.name, note);
    if (groups > 0)
        snprintf(shape + strlen(shape), sizeof shape - strlen(shape), " rows/%lld",
                 (long long)groups);
    if (ak_bench_skip(shape)) return AK_OK;
    mla_bench *s = calloc(1, sizeof *s);
    if (s == NULL) return AK_ERR_OUT_OF_MEMORY;
    s->balance = balance == 1 || balance == 2 ? balance : 0;

    s->nset = nset;
    st = ak_bench_mla_pool(ctx, m->layout, (int32_t)(cset * b * ctx_tokens / P), P, seed, &s->pool,
                   &s->cache);
    if (st == AK_OK && v4)
        st = ak_bench_mla_pool(ctx, m->extra_layout, (int32_t)(b * extra_ctx / m->extra_page_size),
                       m->extra_page_size, seed + 1, &s->extra_pool, &s->extra);
    int32_t *idx = malloc((size_t)(nset * rows * topk) * 4); /* [nset][b, s_q, topk] */
    int32_t *eidx = malloc((size_t)(rows * (extra_topk > 0 ? extra_topk : 1)) * 4);
    int32_t *perm = malloc((size_t)32768 * 4);
    uint8_t *seen = calloc((size_t)32768, 1);
    uint16_t *q = malloc((size_t)(rows * h_q * d_qk) * 2);
    int32_t *len = malloc((size_t)b * 4);
    double unique = 0, keys = 0;
    if (idx == NULL || eidx == NULL || perm == NULL || seen == NULL || q == NULL || len == NULL)
        st = AK_ERR_OUT_OF_MEMORY;
    uint64_t rl = seed + 3;
    const uint64_t short_max = topk / 8 > 0 ? (uint64_t)(topk / 8) : 1; /* mode 5's short requests */
    for (int64_t r = 0; r < b && st == AK_OK; r++) {
        const int32_t lin = (int32_t)((int64_t)(topk - 1) * r / (b > 1 ? b - 1 : 1));
        len[r] = ragged == 2   ? topk - lin
                 : ragged == 3 ? 1 + lin
                 : ragged == 4 ? topk
                 : ragged == 5 ? (r % 10 == 0 ? topk : 1 + (int32_t)(ak_mla_rand(&rl) % short_max))
                 : ragged      ? 1 + (int32_t)(ak_mla_rand(&rl) % (uint64_t)topk)
                               : topk;
        memset(seen, 0, 32768);
        int32_t start = (int32_t)(ak_mla_rand(&rs) % (uint64_t)ctx_tokens);
        for (int64_t i = 0; i < s_q; i++) {
            int32_t *row = idx + (r * s_q + i) * topk;
            if (v4) /* window: newest first, inside the request's pages */
                for (int32_t j = 0; j < topk; j++)
                    row[j] = (int32_t)(r * ctx_tokens) +
                             (start + ctx_tokens - j + (int32_t)i) % ctx_tokens;
            else
                ak_mla_data_distinct(row, topk, ctx_tokens, perm, &rs);
            for (int32_t j = 0; j < topk; j++) {
                int32_t pos = v4 ? row[j] - (int32_t)(r * ctx_tokens) : row[j];
                if (j >= n_valid) {
                    row[j] = -1;
                    continue;
                }
                if (!v4 && !shared) row[j] += (int32_t)(r * ctx_tokens);
                if (j >= len[r]) continue;
                keys += 1;
                unique += !seen[pos];
                seen[pos] = 1;
            }
        }
        if (v4) {
            memset(seen, 0, 32768);
            for (int64_t i = 0; i < s_q; i++) {
                int32_t *row = eidx + (r * s_q + i) * extra_topk;
                ak_mla_data_distinct(row, extra_topk, extra_ctx, perm, &rs);
                for (int32_t j = 0; j < extra_topk; j++) {
                    keys += 1;
                    unique += !seen[row[j]];
                    seen[row[j]] = 1;
                    row[j] += (int32_t)(r * extra_ctx);
                }
            }
        }
    }
    for (int64_t r = groups; r < b && groups > 0 && st == AK_OK; r++) { /* the row groups' copies */
        len[r] = len[r % groups];
        memcpy(idx + r * s_q * topk, idx + (r % groups) * s_q * topk, (size_t)(s_q * topk) * 4);
    }
    /* the other sets of a cold case: the same lengths and invalid tail, new keys, set k's requests
       in context group k % cset (set 0 above is group 0) */
    for (int k = 1; k < nset && st == AK_OK; k++)
        for (int64_t r = 0; r < b; r++)
            for (int64_t i = 0; i < s_q; i++) {
                int32_t *row = idx + ((int64_t)k * rows + r * s_q + i) * topk;
                ak_mla_data_distinct(row, topk, ctx_tokens, perm, &rs);
                const int32_t base = (int32_t)(((k % cset) * b + r) * ctx_tokens);
                for (int32_t j = 0; j < topk; j++) row[j] = j >= n_valid ? -1 : row[j] + base;
            }
    if (st == AK_OK) {
        ak_bench_fill_normal_bf16(q, rows * h_q * d_qk, 1.0, 1.0, seed + 2);
        s->q = upload(ctx, q, (size_t)(rows * h_q * d_qk) * 2, &st);
        s->idx = upload(ctx, idx, (size_t)(nset * rows * topk) * 4, &st);
        if (v4) s->extra_idx = upload(ctx, eidx, (size_t)(rows * extra_topk) * 4, &st);
        s->out = alloc_dev(ctx, (size_t)(rows * h_q * 512) * 2, &st);
        s->lse = alloc_dev(ctx, (size_t)(rows * h_q) * 4, &st);
        if (ragged) s->len = upload(ctx, len, (size_t)b * 4, &st);
        if (sink && st == AK_OK) { /* logits in [-2, 2): comparable to a row's lse */
            float *sk = malloc((size_t)h_q * 4);
            uint64_t ss = seed + 4;
            if (sk == NULL) st = AK_ERR_OUT_OF_MEMORY;
            for (int64_t h = 0; sk != NULL && h < h_q; h++) sk[h] = (float)(ak_mla_rand(&ss) % 4096) / 1024.0f - 2.0f;
            if (sk != NULL) s->sink = upload(ctx, sk, (size_t)h_q * 4, &st);
            free(sk);
        }
    }
    free(idx);
    free(eidx);
    free(perm);
    free(seen);
    free(q);
    free(len);
    if (st != AK_OK) {
        mla_bench_destroy(ctx, s);
        return st;
    }
    int64_t shq[4] = {b, s_q, h_q, d_qk}, shi[3] = {b, s_q, topk}, she[3] = {b, s_q, extra_topk};
    int64_t sho[4] = {b, s_q, h_q, 512};
    s->tq = ak_dev_tensor(ctx, s->q, AK_DTYPE_BF16, 4, shq);
    s->tidx = ak_dev_tensor(ctx, s->idx, AK_DTYPE_I32, 3, shi);
    for (int k = 0; k < nset; k++)
        s->tcold[k] =
            ak_dev_tensor(ctx, (int32_t *)s->idx + (int64_t)k * rows * topk, AK_DTYPE_I32, 3, shi);
    s->textra_idx = ak_dev_tensor(ctx, s->extra_idx, AK_DTYPE_I32, 3, she);
    s->tout = ak_dev_tensor(ctx, s->out, AK_DTYPE_BF16, 4, sho);
    s->tlse = ak_dev_tensor(ctx, s->lse, AK_DTYPE_F32, 3, sho);
    s->dec.q = &s->tq;
    s->dec.cache = &s->cache;
    s->dec.softmax_scale = m->softmax_scale;
    s->dec.indices = &s->tidx;
    if (ragged) {
        int64_t shl[1] = {b};
        s->tlen = ak_dev_tensor(ctx, s->len, AK_DTYPE_I32, 1, shl);
        s->dec.topk_length = &s->tlen;
    }
    if (v4) {
        s->dec.extra_cache = &s->extra;
        s->dec.extra_indices = &s->textra_idx;
    }
    if (sink) {
        int64_t shs[1] = {h_q};
        s->tsink = ak_dev_tensor(ctx, s->sink, AK_DTYPE_F32, 1, shs);
        s->dec.attn_sink = &s->tsink;
    }
    s->dec.out = &s->tout;
    s->dec.lse = &s->tlse;
    if (s->balance) s->dec.balance = AK_BALANCE_MAKE; /* the workspace asked for a balanced call */

    ak_bench_case bc;
    memset(&bc, 0, sizeof bc);
    snprintf(bc.op, sizeof bc.op, "mla_decode_sparse");
    memcpy(bc.shape, shape, sizeof bc.shape);
    bc.flops = 2.0 * (double)h_q * keys * (d_qk + 512);
    bc.bytes_kv = keys * lt.bytes_per_token;
    bc.bytes_total =
        unique * lt.bytes_per_token + (double)rows * h_q * (d_qk * 2 + 512 * 2 + 4) + keys * 4;
    return finish_case(ctx, out, &bc, s, 1);
}

/* Dense decode over s_k tokens per request through a random page permutation (non-causal). */
static ak_status add_dense_decode(ak_context *ctx, const ak_bench_opts *o, ak_bench_list *out,
                                  const ak_model *m, sparse_shape sh, int32_t s_k,
                                  const char *note) {
    ak_status st = AK_OK;
    int64_t b = sh.b, s_q = sh.s_q, h_q = sh.h_q, rows = b * s_q;
    int32_t P = m->page_size, d_qk = m->d_qk, width = (s_k + P - 1) / P;
    int32_t pages = (int32_t)(b * width);
    uint64_t seed = o->seed ^ 0x64656eull, rs = seed;
    mla_bench *s = calloc(1, sizeof *s);
    if (s == NULL) return AK_ERR_OUT_OF_MEMORY;
    st = ak_bench_mla_pool(ctx, m->layout, pages, P, seed, &s->pool, &s->cache);
    int32_t *bt = malloc((size_t)pages * 4), *perm = malloc((size_t)pages * 4);
    int32_t *seq = malloc((size_t)b * 4);
    uint16_t *q = malloc((size_t)(rows * h_q * d_qk) * 2);
    if (bt == NULL || perm == NULL || seq == NULL || q == NULL) st = AK_ERR_OUT_OF_MEMORY;
    if (st == AK_OK) {
        ak_mla_data_distinct(bt, pages, pages, perm, &rs);
        for (int64_t r = 0; r < b; r++)
            seq[r] = s_k;
        ak_bench_fill_normal_bf16(q, rows * h_q * d_qk, 1.0, 1.0, seed + 2);
        s->q = upload(ctx, q, (size_t)(rows * h_q * d_qk) * 2, &st);
        s->bt = upload(ctx, bt, (size_t)pages * 4, &st);
        s->seq = upload(ctx, seq, (size_t)b * 4, &st);
        s->out = alloc_dev(ctx, (size_t)(rows * h_q * 512) * 2, &st);
        s->lse = alloc_dev(ctx, (size_t)(rows * h_q) * 4, &st);
    }
    free(bt);
    free(perm);
    free(seq);
    free(q);
    if (st != AK_OK) {
        mla_bench_destroy(ctx, s);
        return st;
    }
    int64_t shq[4] = {b, s_q, h_q, d_qk}, shb[2] = {b, width}, sho[4] = {b, s_q, h_q, 512};
    s->tq = ak_dev_tensor(ctx, s->q, AK_DTYPE_BF16, 4, shq);
    s->tbt = ak_dev_tensor(ctx, s->bt, AK_DTYPE_I32, 2, shb);
    s->tseq = ak_dev_tensor(ctx, s->seq, AK_DTYPE_I32, 1, shb);
    s->tout = ak_dev_tensor(ctx, s->out, AK_DTYPE_BF16, 4, sho);
    s->tlse = ak_dev_tensor(ctx, s->lse, AK_DTYPE_F32, 3, sho);
    s->dec.q = &s->tq;
    s->dec.cache = &s->cache;
    s->dec.softmax_scale = m->softmax_scale;
    s->dec.block_table = &s->tbt;
    s->dec.seq_lens = &s->tseq;
    s->dec.out = &s->tout;
    s->dec.lse = &s->tlse;

    ak_bench_case bc;
    memset(&bc, 0, sizeof bc);
    snprintf(bc.op, sizeof bc.op, "mla_decode_dense");
    ak_layout_traits lt;
    ak_layout_traits_get(m->layout, &lt);
    snprintf(bc.shape, sizeof bc.shape, "%s b %lld s_q %lld h_q %lld s_k %d (P %d) %s%s", m->name,
             (long long)b, (long long)s_q, (long long)h_q, s_k, P, lt.name, note);
    bc.flops = 2.0 * (double)h_q * (double)rows * s_k * (d_qk + 512);
    bc.bytes_kv = (double)b * s_k * lt.bytes_per_token;
    bc.bytes_total = bc.bytes_kv + (double)rows * h_q * (d_qk * 2 + 512 * 2 + 4) +
                     (double)pages * 4 + (double)b * 4;
    return finish_case(ctx, out, &bc, s, 1);
}

typedef struct prefill_shape {
    int64_t s_q, s_kv, h_q;
    int32_t topk;
} prefill_shape;

/* Sparse prefill, flat bf16 KV of s_kv rows, topk distinct random rows per query. */
static ak_status add_sparse_prefill(ak_context *ctx, const ak_bench_opts *o, ak_bench_list *out,
                                    const ak_model *m, prefill_shape sh, const char *note) {
    ak_status st = AK_OK;
    int64_t s_q = sh.s_q, s_kv = sh.s_kv, h_q = sh.h_q;
    int32_t d_qk = m->d_qk, topk = sh.topk;
    uint64_t seed = o->seed ^ 0x707265ull, rs = seed;
    mla_bench *s = calloc(1, sizeof *s);
    if (s == NULL) return AK_ERR_OUT_OF_MEMORY;
    uint16_t *kv = malloc((size_t)(s_kv * d_qk) * 2), *q = malloc((size_t)(s_q * h_q * d_qk) * 2);
    int32_t *idx = malloc((size_t)(s_q * topk) * 4), *perm = malloc((size_t)s_kv * 4);
    uint8_t *seen = calloc((size_t)s_kv, 1);
    double unique = 0;
    if (kv == NULL || q == NULL || idx == NULL || perm == NULL || seen == NULL)
        st = AK_ERR_OUT_OF_MEMORY;
    if (st == AK_OK) {
        ak_bench_fill_normal_bf16(kv, s_kv * d_qk, 0.1, 1.0, seed + 1); /* targets.md 2's prefill data */
        ak_bench_fill_normal_bf16(q, s_q * h_q * d_qk, 0.1, 1.0, seed + 2);
        for (int64_t t = 0; t < s_q; t++) {
            ak_mla_data_distinct(idx + t * topk, topk, (int32_t)s_kv, perm, &rs);
            for (int32_t j = 0; j < topk; j++) {
                unique += !seen[idx[t * topk + j]];
                seen[idx[t * topk + j]] = 1;
            }
        }
        s->kv = upload(ctx, kv, (size_t)(s_kv * d_qk) * 2, &st);
        s->q = upload(ctx, q, (size_t)(s_q * h_q * d_qk) * 2, &st);
        s->idx = upload(ctx, idx, (size_t)(s_q * topk) * 4, &st);
        s->out = alloc_dev(ctx, (size_t)(s_q * h_q * 512) * 2, &st);
        s->lse = alloc_dev(ctx, (size_t)(s_q * h_q) * 4, &st);
        s->ml = alloc_dev(ctx, (size_t)(s_q * h_q) * 4, &st);
    }
    free(kv);
    free(q);
    free(idx);
    free(perm);
    free(seen);
    if (st != AK_OK) {
        mla_bench_destroy(ctx, s);
        return st;
    }
    int64_t shq[3] = {s_q, h_q, d_qk}, shk[2] = {s_kv, d_qk}, shi[2] = {s_q, topk};
    int64_t sho[3] = {s_q, h_q, 512};
    s->tq = ak_dev_tensor(ctx, s->q, AK_DTYPE_BF16, 3, shq);
    s->tkv = ak_dev_tensor(ctx, s->kv, AK_DTYPE_BF16, 2, shk);
    s->tidx = ak_dev_tensor(ctx, s->idx, AK_DTYPE_I32, 2, shi);
    s->tout = ak_dev_tensor(ctx, s->out, AK_DTYPE_BF16, 3, sho);
    s->tlse = ak_dev_tensor(ctx, s->lse, AK_DTYPE_F32, 2, sho);
    s->tml = ak_dev_tensor(ctx, s->ml, AK_DTYPE_F32, 2, sho);
    s->pre.q = &s->tq;
    s->pre.kv = &s->tkv;
    s->pre.indices = &s->tidx;
    s->pre.softmax_scale = m->softmax_scale;
    s->pre.out = &s->tout;
    s->pre.lse = &s->tlse;
    s->pre.max_logits = &s->tml;

    ak_bench_case bc;
    memset(&bc, 0, sizeof bc);
    snprintf(bc.op, sizeof bc.op, "sparse_prefill");
    snprintf(bc.shape, sizeof bc.shape,
             "%s s_q %lld s_kv %lld h_q %lld topk %d d_qk %d flat bf16%s", m->name, (long long)s_q,
             (long long)s_kv, (long long)h_q, topk, d_qk, note);
    bc.flops = 2.0 * (double)h_q * (double)s_q * topk * (d_qk + 512);
    bc.bytes_kv = 0;
    bc.bytes_total =
        unique * d_qk * 2 + (double)s_q * h_q * (d_qk * 2 + 512 * 2 + 8) + (double)s_q * topk * 4;
    return finish_case(ctx, out, &bc, s, 0);
}

ak_status ak_bench_mla(ak_context *ctx, const ak_bench_opts *o, const char *op,
                       ak_bench_list *out) {
    int cpu = ak_context_backend(ctx) == AK_BACKEND_CPU;
    const char *cpu_note = cpu ? " (CPU: batch scaled down from the GPU shapes)" : "";
    const ak_model *models[3];
    int nm = 0;
    if (o->model != NULL) {
        models[nm++] = o->model;
    } else { /* default: V3.2 sparse decode and prefill, V3 dense decode, V4-Flash */
        models[nm++] = ak_model_find("dsv32");
        models[nm++] = ak_model_find("dsv3");
        models[nm++] = ak_model_find("dsv4-flash");
    }
    for (int k = 0; k < nm; k++) {
        const ak_model *m = models[k];
        if (m == NULL) continue;
        int sparse = m->kind == AK_MODEL_DSA || m->kind == AK_MODEL_DSV4;
        if (sparse && ak_bench_wants(op, "mla_decode_sparse")) {
            static const sparse_shape gpu_dsa[] = {
                {128, 1, 128}, {128, 1, 64}, {128, 1, 32}, {128, 1, 16}, {32, 1, 32}, {32, 1, 16},
                {8, 1, 16},    {8, 1, 128},  {1, 1, 128},  {1, 1, 16},   {128, 2, 128}};
            /* V4 also at tensor-parallel shards of its heads (V4-Flash 64 / 4 and / 2) */
            static const sparse_shape gpu_v4[] = {{128, 1, 0}, {128, 2, 0}, {8, 1, 0}, {1, 1, 0}, {128, 1, 16}, {128, 1, 32}};
            static const sparse_shape cpu_dsa[] = {{8, 1, 128}, {8, 1, 16}};
            static const sparse_shape cpu_v4[] = {{8, 1, 0}};
            static const sparse_shape quick[] = {{1, 1, 0}};
            int dsa = m->kind == AK_MODEL_DSA;
            const sparse_shape *list = dsa ? gpu_dsa : gpu_v4;
            size_t n = dsa ? sizeof gpu_dsa / sizeof gpu_dsa[0] : sizeof gpu_v4 / sizeof gpu_v4[0];
            if (cpu) {
                list = dsa ? cpu_dsa : cpu_v4;
                n = dsa ? 2 : 1;
            }
            if (o->quick) {
                list = quick;
                n = 1;
            }
            /* AK_BENCH_SHAPES=BxSxH,...: these (b, s_q, h_q) instead of the list (V3.2 and V4), to
               time a routing choice on the shapes it moves */
            int64_t env[AK_BENCH_MAX_SHAPES][3];
            sparse_shape own[AK_BENCH_MAX_SHAPES];
            int ne;
            MLA_TRY(ak_bench_env_shapes(env, &ne));
            if (ne > 0) {
                for (int e = 0; e < ne; e++) own[e].b = env[e][0], own[e].s_q = env[e][1], own[e].h_q = env[e][2];
                list = own;
                n = (size_t)ne;
            }
            for (size_t i = 0; i < n; i++) {
                sparse_shape sh = list[i];
                if (sh.h_q == 0) sh.h_q = m->h_q; /* the model's own head count */
                MLA_TRY(add_sparse_decode(ctx, o, out, m, sh, cpu_note));
            }
        }
        if (m->kind == AK_MODEL_MLA_DENSE && ak_bench_wants(op, "mla_decode_dense")) {
            static const sparse_shape gpu[] = {{128, 1, 128}, {128, 1, 16}, {64, 1, 32},
                                               {8, 1, 128},   {1, 1, 128},  {128, 2, 128}};
            static const sparse_shape cpu_list[] = {{2, 1, 128}, {2, 1, 16}};
            static const sparse_shape quick[] = {{1, 1, 128}};
            const sparse_shape *list = o->quick ? quick : cpu ? cpu_list : gpu;
            size_t n = o->quick ? 1 : cpu ? 2 : sizeof gpu / sizeof gpu[0];
            for (size_t i = 0; i < n; i++)
                MLA_TRY(
                    add_dense_decode(ctx, o, out, m, list[i], o->quick ? 1024 : 8192, cpu_note));
        }
        if (sparse && ak_bench_wants(op, "sparse_prefill")) {
            int v4 = m->kind == AK_MODEL_DSV4;
            /* GPU shapes of targets.md 5.1; the CPU keeps the KV size and top-k but few queries */
            prefill_shape gpu_dsa[] = {
                {4096, 32768, 128, 2048}, {4096, 8192, 128, 2048}, {4096, 32768, 16, 2048}};
            prefill_shape gpu_v4[] = {{4096, 32768, m->h_q, m->topk}};
            prefill_shape one = {o->quick ? 4 : 32, 32768, m->h_q, m->topk};
            const prefill_shape *list = cpu || o->quick ? &one : v4 ? gpu_v4 : gpu_dsa;
            size_t n = cpu || o->quick ? 1 : v4 ? 1 : 3;
            const char *pnote = cpu ? " (CPU: s_q scaled down from 4096)" : "";
            for (size_t i = 0; i < n; i++)
                MLA_TRY(add_sparse_prefill(ctx, o, out, m, list[i], pnote));
        }
    }
    return AK_OK;
}
AK_BENCH_REGISTER(ak_bench_mla)
