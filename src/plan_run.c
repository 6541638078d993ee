/*
 * plan_run.c -- executes a plan: every step goes through a public op (ak_cache_convert,
 * ak_cache_gather, ak_indexer_logits_paged, ak_topk, ak_topk_transform, ak_dsv4_swa_indices,
 * ak_mla_decode, ak_sparse_prefill, ak_mha). Per-call metadata (row lengths, cu_seqlens, slot
 * lists) is written into the caller's workspace; nothing is allocated.
 */
#include "plan_internal.h"

#include <string.h>

/* ---- workspace carving ------------------------------------------------------------------------
 */

typedef struct arena {
    char *base;
    size_t used, cap;
} arena;

static void *take(arena *a, size_t bytes) {
    size_t at = (a->used + 63) & ~(size_t)63;
    if (at + bytes > a->cap) return NULL;
    a->used = at + bytes;
    return a->base + at;
}

/* ---- tensor views ------------------------------------------------------------------------------
 */

static ak_tensor mk(void *data, ak_device dev, ak_dtype dt, int32_t ndim, const int64_t *shape) {
    return ak_tensor_make_on(data, dev, dt, ndim, shape);
}

/* Rows [r0, r0 + n) of dim 0. */
static ak_tensor rows_of(const ak_tensor *t, int64_t r0, int64_t n) {
    ak_tensor v = *t;
    v.data = (char *)t->data + r0 * t->strides[0] * ak_dtype_size(t->dtype);
    v.shape[0] = n;
    return v;
}

/* Rows of a [T, ...] tensor seen as [b, s, ...] (b * s rows, row stride kept). */
static ak_tensor split_rows(const ak_tensor *t, int64_t b, int64_t s) {
    ak_tensor v = *t;
    v.ndim = t->ndim + 1;
    v.shape[0] = b;
    v.shape[1] = s;
    v.strides[0] = s * t->strides[0];
    v.strides[1] = t->strides[0];
    for (int32_t i = 1; i < t->ndim; i++) {
        v.shape[i + 1] = t->shape[i];
        v.strides[i + 1] = t->strides[i];
    }
    return v;
}

static int32_t *i32_buf(arena *a, int64_t n) {
    return (int32_t *)take(a, (size_t)(n > 0 ? n : 1) * 4);
}

/* ---- the per-call context ----------------------------------------------------------------------
 */

typedef struct call {
    const ak_plan *p;
    ak_context *ctx;
    const ak_plan_io *io;
    const ak_plan_seg *s;
    const ak_cache *cache; /* main cache as read by this segment (converted or not) */
    ak_device dev;
    int32_t b, sq;    /* requests and rows per request of this call */
    int32_t r;        /* first request */
    int64_t row0;     /* first query row */
    int32_t *seq;     /* [b] kv length as seen by the call's last row + 1 */
    int32_t *row_ctx; /* [b * sq] causal length of each row */
    int32_t *cu_q;    /* [b + 1] */
} call;

static ak_status no_space(const char *what) {
    return ak_fail(AK_ERR_WORKSPACE_TOO_SMALL,
                   "ak_plan_run: workspace too small for %s; use ak_plan_workspace_size", what);
}

/* Fills the call's metadata: request r0 + i has rows [first, first + sq) of its q_len rows. */
static ak_status call_meta(call *c, arena *a, int64_t first) {
    const int32_t *seq_lens = (const int32_t *)c->io->seq_lens->data;
    int64_t st = c->io->seq_lens->strides[0];
    c->seq = i32_buf(a, c->b);
    c->row_ctx = i32_buf(a, (int64_t)c->b * c->sq);
    c->cu_q = i32_buf(a, c->b + 1);
    if (c->seq == NULL || c->row_ctx == NULL || c->cu_q == NULL) return no_space("row metadata");
    for (int32_t i = 0; i < c->b; i++) {
        int32_t r = c->r + i, q = c->p->q_lens[r];
        int64_t kv = seq_lens[r * st]; /* q <= kv <= planned kv (check_io) */
        c->seq[i] = (int32_t)(kv - q + first + c->sq);
        c->cu_q[i] = i * c->sq;
        for (int32_t j = 0; j < c->sq; j++)
            c->row_ctx[(int64_t)i * c->sq + j] = (int32_t)(kv - q + first + j + 1);
    }
    c->cu_q[c->b] = c->b * c->sq;
    return AK_OK;
}

static ak_tensor tbl(const call *c) {
    const ak_tensor *bt = c->io->block_table;
    return rows_of(bt, c->r, c->b);
}

static ak_tensor vec(const call *c, int32_t *data, int64_t n) {
    int64_t sh[1] = {n};
    return mk(data, c->dev, AK_DTYPE_I32, 1, sh);
}

/* Indexer logits and top-k for the call's rows; out [b * sq, k] int32 with transform tf. div is
   1 (DSA) or the V4 compress ratio (row lengths are causal length / div). */
static ak_status index_topk(call *c, arena *a, int32_t div, const ak_transform *tf, int32_t *out) {
    const ak_plan_desc *d = &c->p->d;
    int64_t R = (int64_t)c->b * c->sq, width = c->s->width > 0 ? c->s->width : 1;
    int32_t *lens = i32_buf(a, R);
    float *logits = (float *)take(a, (size_t)(R * width) * 4);
    if (lens == NULL || logits == NULL) return no_space("indexer logits");
    for (int64_t t = 0; t < R; t++)
        lens[t] = c->row_ctx[t] / div;
    ak_tensor iq = rows_of(c->io->index_q, c->row0, R);
    iq = split_rows(&iq, c->b, c->sq);
    ak_tensor w = rows_of(c->io->index_weights, c->row0, R);
    ak_tensor bt = tbl(c);
    int64_t sh2[2] = {c->b, c->sq};
    ak_tensor cl = mk(lens, c->dev, AK_DTYPE_I32, 2, sh2);
    int64_t shl[2] = {R, width};
    ak_tensor lg = mk(logits, c->dev, AK_DTYPE_F32, 2, shl);
    AK_TRY(ak_indexer_logits_paged(c->ctx, &iq, &w, c->io->index_cache, &bt, &cl, 1, &lg));
    ak_tensor ln = vec(c, lens, R);
    int64_t sho[2] = {R, d->topk};
    ak_tensor o = mk(out, c->dev, AK_DTYPE_I32, 2, sho);
    return ak_topk(c->ctx, &lg, &ln, NULL, d->topk, 1, tf, &o);
}

static void set_out(const call *c, int64_t R, ak_tensor *out, ak_tensor *lse, int split) {
    *out = rows_of(c->io->out, c->row0, R);
    if (split) *out = split_rows(out, c->b, c->sq);
    if (c->io->lse != NULL) {
        *lse = rows_of(c->io->lse, c->row0, R);
        if (split) *lse = split_rows(lse, c->b, c->sq);
    }
}

static ak_status scratch(arena *a, void **ws, size_t *bytes) {
    size_t at = (a->used + 63) & ~(size_t)63;
    *ws = at < a->cap ? a->base + at : NULL;
    *bytes = at < a->cap ? a->cap - at : 0;
    return AK_OK;
}

/* DeepSeek V4 index lists of the call's rows: the window as main-cache slots (newest first) and
   the compressed list as extra-cache slots (C4: indexer + top-k PAGED; C128: every visible entry).
 */
typedef struct v4_lists {
    int32_t *swa, *swl; /* [R, window], [R] */
    int32_t *ext;       /* [R, extk] or NULL (SWA-only layer) */
    int64_t extk;
} v4_lists;

static ak_status v4_build_lists(call *c, arena *a, v4_lists *l) {
    const ak_plan_desc *d = &c->p->d;
    int64_t R = (int64_t)c->b * c->sq;
    memset(l, 0, sizeof *l);
    l->swa = i32_buf(a, R * d->window);
    l->swl = i32_buf(a, R);
    if (l->swa == NULL || l->swl == NULL) return no_space("window indices");
    ak_tensor cu = vec(c, c->cu_q, c->b + 1), bt = tbl(c), seq = vec(c, c->seq, c->b);
    if (d->compress_ratio != 0) {
        ak_transform tf;
        memset(&tf, 0, sizeof tf);
        tf.kind = AK_TRANSFORM_PAGED;
        tf.table = &bt;
        tf.page_size = d->extra_page_size;
        tf.cu_seqlens_q = &cu;
        if (d->compress_ratio == 4) {
            l->extk = d->topk;
            l->ext = i32_buf(a, R * l->extk);
            if (l->ext == NULL) return no_space("compressed indices");
            AK_TRY(index_topk(c, a, 4, &tf, l->ext));
        } else {
            /* C128 is dense over the visible compressed entries. */
            l->extk = c->s->width > 0 ? c->s->width : 1;
            l->ext = i32_buf(a, R * l->extk);
            if (l->ext == NULL) return no_space("compressed indices");
            for (int64_t t = 0; t < R; t++) {
                int64_t n = c->row_ctx[t] / 128;
                for (int64_t j = 0; j < l->extk; j++)
                    l->ext[t * l->extk + j] = j < n ? (int32_t)j : -1;
            }
            int64_t she[2] = {R, l->extk};
            ak_tensor e = mk(l->ext, c->dev, AK_DTYPE_I32, 2, she);
            AK_TRY(ak_topk_transform(c->ctx, &tf, &e, &e));
        }
    }
    int64_t shw[2] = {R, d->window};
    ak_tensor wi = mk(l->swa, c->dev, AK_DTYPE_I32, 2, shw), wl = vec(c, l->swl, R);
    return ak_dsv4_swa_indices(c->ctx, &seq, &cu, &bt, d->page_size, d->window, &wi, &wl);
}

/* DeepSeek V4 prefill rows as two paged sparse prefills, one per pool (they cannot share one
   softmax call: each reads its own cache), merged by ak_merge_states, which applies the sink once
   (rule M2). An SWA-only layer is a single call with the sink. */
static ak_status run_v4_paged_merge(call *c, arena *a, const ak_tensor *q, ak_tensor *out,
                                    ak_tensor *lse) {
    const ak_plan_desc *d = &c->p->d;
    const ak_plan_io *io = c->io;
    int64_t R = c->sq, h = d->h_q, dv = d->d_v;
    v4_lists l;
    AK_TRY(v4_build_lists(c, a, &l));
    float *po = NULL, *pl = NULL;
    if (l.ext != NULL) {
        po = (float *)take(a, (size_t)(2 * R * h * dv) * 4);
        pl = (float *)take(a, (size_t)(2 * R * h) * 4);
        if (po == NULL || pl == NULL) return no_space("the partial states");
    }
    void *ws;
    size_t wsb;
    scratch(a, &ws, &wsb);
    int64_t shw[2] = {R, d->window};
    ak_tensor wi = mk(l.swa, c->dev, AK_DTYPE_I32, 2, shw), wl = vec(c, l.swl, R);
    ak_sparse_prefill_args sp;
    memset(&sp, 0, sizeof sp);
    sp.q = q;
    sp.cache = c->cache;
    sp.indices = &wi;
    sp.topk_length = &wl;
    sp.softmax_scale = d->softmax_scale;
    if (l.ext == NULL) {
        sp.attn_sink = io->attn_sink;
        sp.out = out;
        sp.lse = io->lse ? lse : NULL;
        return ak_sparse_prefill(c->ctx, &sp, ws, wsb);
    }
    int64_t sho[3] = {R, h, dv}, shl[2] = {R, h};
    ak_tensor o0 = mk(po, c->dev, AK_DTYPE_F32, 3, sho),
              o1 = mk(po + R * h * dv, c->dev, AK_DTYPE_F32, 3, sho);
    ak_tensor l0 = mk(pl, c->dev, AK_DTYPE_F32, 2, shl),
              l1 = mk(pl + R * h, c->dev, AK_DTYPE_F32, 2, shl);
    sp.out = &o0;
    sp.lse = &l0;
    AK_TRY(ak_sparse_prefill(c->ctx, &sp, ws, wsb));
    int64_t she[2] = {R, l.extk};
    ak_tensor ei = mk(l.ext, c->dev, AK_DTYPE_I32, 2, she);
    sp.cache = io->extra_cache;
    sp.indices = &ei;
    sp.topk_length = NULL;
    sp.out = &o1;
    sp.lse = &l1;
    AK_TRY(ak_sparse_prefill(c->ctx, &sp, ws, wsb));
    int64_t sh4[4] = {2, R, h, dv}, sh3[3] = {2, R, h};
    ak_tensor outs = mk(po, c->dev, AK_DTYPE_F32, 4, sh4),
              lses = mk(pl, c->dev, AK_DTYPE_F32, 3, sh3);
    return ak_merge_states(c->ctx, &outs, &lses, AK_LSE_BASE_E, io->attn_sink, out,
                           io->lse ? lse : NULL, AK_LSE_BASE_E);
}

/* DeepSeek V4 prefill rows through the flat sparse prefill (semantics.md 10.4-10.5): one request,
   rows c->sq ending at position c->seq[0] - 1. Workspace rows: the compressed region (c_max rows,
   entry c of the extra cache) then the window rows the chunk sees, dequantized to bf16. */
static ak_status run_v4_gather(call *c, arena *a, const ak_tensor *q, ak_tensor *out,
                               ak_tensor *lse) {
    const ak_plan_desc *d = &c->p->d;
    const ak_plan_io *io = c->io;
    int64_t R = c->sq, seqp = c->seq[0], ratio = d->compress_ratio;
    int64_t cmax = ratio ? (seqp / ratio > 1 ? seqp / ratio : 1) : 0;
    int64_t glen = seqp < R + d->window - 1 ? seqp : R + d->window - 1;
    int64_t nrows = cmax + glen, tk = ratio == 4 ? d->topk : cmax, W = tk + d->window;
    int32_t *slots = i32_buf(a, cmax > glen ? cmax : glen), *idx = i32_buf(a, R * W);
    int32_t *lens = i32_buf(a, R), *raw = ratio == 4 ? i32_buf(a, R * tk) : NULL;
    void *rows = take(a, (size_t)(nrows > 0 ? nrows : 1) * 512 * 2);
    if (slots == NULL || idx == NULL || lens == NULL || rows == NULL || (ratio == 4 && !raw))
        return no_space("the gathered V4 rows");
    ak_tensor bt = tbl(c);
    const int32_t *btd = (const int32_t *)bt.data;
    int64_t pages = bt.shape[1];
    if (cmax > 0) {
        int64_t ep = d->extra_page_size, visible = seqp / ratio;
        for (int64_t e = 0; e < cmax; e++) {
            int32_t pg = e / ep < pages ? btd[(e / ep) * bt.strides[1]] : -1;
            slots[e] = e < visible && pg >= 0 ? (int32_t)(pg * ep + e % ep) : -1;
        }
        ak_tensor sl = vec(c, slots, cmax);
        int64_t sh[2] = {cmax, 512};
        ak_tensor g = mk(rows, c->dev, AK_DTYPE_BF16, 2, sh);
        AK_TRY(ak_cache_gather(c->ctx, io->extra_cache, &sl, &g, NULL));
    }
    for (int64_t k = 0; k < glen; k++) {
        int64_t pos = seqp - glen + k, pg_i = pos / d->page_size;
        int32_t pg = pg_i < pages ? btd[pg_i * bt.strides[1]] : -1;
        slots[k] = pg >= 0 ? (int32_t)(pg * (int64_t)d->page_size + pos % d->page_size) : -1;
    }
    ak_tensor sl = vec(c, slots, glen);
    int64_t shs[2] = {glen, 512};
    ak_tensor gs = mk((char *)rows + cmax * 512 * 2, c->dev, AK_DTYPE_BF16, 2, shs);
    AK_TRY(ak_cache_gather(c->ctx, c->cache, &sl, &gs, NULL));
    ak_tensor rawt;
    if (raw != NULL) {
        AK_TRY(index_topk(c, a, 4, NULL, raw));
        int64_t shr[2] = {R, tk};
        rawt = mk(raw, c->dev, AK_DTYPE_I32, 2, shr);
    }
    ak_tensor seq = vec(c, c->seq, 1), cu = vec(c, c->cu_q, 2), lt = vec(c, lens, R);
    int64_t shi[2] = {R, W};
    ak_tensor it = mk(idx, c->dev, AK_DTYPE_I32, 2, shi);
    AK_TRY(ak_dsv4_combine_indices(c->ctx, raw ? &rawt : NULL, &seq, &cu, (int32_t)ratio,
                                   (int32_t)tk, (int32_t)cmax, d->window, &it, &lt, NULL));
    int64_t shk[2] = {nrows, 512};
    ak_tensor kv = mk(rows, c->dev, AK_DTYPE_BF16, 2, shk);
    ak_sparse_prefill_args sp;
    memset(&sp, 0, sizeof sp);
    sp.q = q;
    sp.kv = &kv;
    sp.indices = &it;
    sp.topk_length = &lt;
    sp.attn_sink = io->attn_sink;
    sp.softmax_scale = d->softmax_scale;
    sp.out = out;
    sp.lse = io->lse ? lse : NULL;
    void *ws;
    size_t wsb;
    scratch(a, &ws, &wsb);
    return ak_sparse_prefill(c->ctx, &sp, ws, wsb);
}

/* One call of a path over c's rows. */
static ak_status run_call(call *c, arena *a, int64_t first) {
    const ak_plan_desc *d = &c->p->d;
    const ak_plan_io *io = c->io;
    int64_t R = (int64_t)c->b * c->sq;
    AK_TRY(call_meta(c, a, first));
    ak_tensor q = rows_of(io->q, c->row0, R), out, lse;
    set_out(c, R, &out, &lse,
            c->s->path != AK_PATH_DSA_PAGED && c->s->path != AK_PATH_DSA_GATHER &&
                c->s->path != AK_PATH_V4_GATHER && c->s->path != AK_PATH_V4_PAGED_MERGE);
    ak_tensor seq = vec(c, c->seq, c->b), bt = tbl(c);
    void *ws;
    size_t wsb;
    switch (c->s->path) {
    case AK_PATH_MLA_DENSE: {
        ak_tensor q4 = split_rows(&q, c->b, c->sq);
        ak_mla_decode_args m;
        memset(&m, 0, sizeof m);
        m.q = &q4;
        m.cache = c->cache;
        m.softmax_scale = d->softmax_scale;
        m.block_table = &bt;
        m.seq_lens = &seq;
        m.causal = 1;
        m.attn_sink = io->attn_sink;
        m.out = &out;
        m.lse = io->lse ? &lse : NULL;
        scratch(a, &ws, &wsb);
        return ak_mla_decode(c->ctx, &m, ws, wsb);
    }
    case AK_PATH_DSA_DECODE:
    case AK_PATH_DSA_PAGED: {
        int32_t *idx = i32_buf(a, R * d->topk);
        if (idx == NULL) return no_space("top-k indices");
        ak_tensor cu = vec(c, c->cu_q, c->b + 1);
        ak_transform tf;
        memset(&tf, 0, sizeof tf);
        tf.kind = AK_TRANSFORM_PAGED;
        tf.table = &bt;
        tf.page_size = d->page_size;
        tf.cu_seqlens_q = &cu;
        AK_TRY(index_topk(c, a, 1, &tf, idx));
        scratch(a, &ws, &wsb);
        if (c->s->path == AK_PATH_DSA_DECODE) {
            ak_tensor q4 = split_rows(&q, c->b, c->sq);
            int64_t shi[3] = {c->b, c->sq, d->topk};
            ak_tensor it = mk(idx, c->dev, AK_DTYPE_I32, 3, shi);
            ak_mla_decode_args m;
            memset(&m, 0, sizeof m);
            m.q = &q4;
            m.cache = c->cache;
            m.softmax_scale = d->softmax_scale;
            m.indices = &it;
            m.attn_sink = io->attn_sink;
            m.out = &out;
            m.lse = io->lse ? &lse : NULL;
            return ak_mla_decode(c->ctx, &m, ws, wsb);
        }
        int64_t shi[2] = {R, d->topk};
        ak_tensor it = mk(idx, c->dev, AK_DTYPE_I32, 2, shi);
        ak_sparse_prefill_args sp;
        memset(&sp, 0, sizeof sp);
        sp.q = &q;
        sp.cache = c->cache;
        sp.indices = &it;
        sp.attn_sink = io->attn_sink;
        sp.softmax_scale = d->softmax_scale;
        sp.out = &out;
        sp.lse = io->lse ? &lse : NULL;
        return ak_sparse_prefill(c->ctx, &sp, ws, wsb);
    }
    case AK_PATH_DSA_GATHER: {
        /* One request per call: its whole context is gathered to bf16 rows, indices are RAGGED
           offsets into them (cu_seqlens_k = {0, kv}). */
        int64_t kv = c->row_ctx[R - 1];
        int32_t *slots = i32_buf(a, kv), *cuk = i32_buf(a, 2), *idx = i32_buf(a, R * d->topk);
        void *rowsbuf = take(a, (size_t)(kv > 0 ? kv : 1) * (size_t)d->d_qk * 2);
        if (slots == NULL || cuk == NULL || idx == NULL || rowsbuf == NULL)
            return no_space("the gathered bf16 context");
        const int32_t *btd = (const int32_t *)bt.data;
        for (int64_t pos = 0; pos < kv; pos++) {
            int64_t pg = pos / d->page_size;
            int32_t page = pg < bt.shape[1] ? btd[pg * bt.strides[1]] : -1;
            slots[pos] =
                page < 0 ? -1 : (int32_t)((int64_t)page * d->page_size + pos % d->page_size);
        }
        ak_tensor sl = vec(c, slots, kv);
        int64_t shg[2] = {kv, d->d_qk};
        ak_tensor g = mk(rowsbuf, c->dev, AK_DTYPE_BF16, 2, shg);
        AK_TRY(ak_cache_gather(c->ctx, c->cache, &sl, &g, NULL));
        cuk[0] = 0;
        cuk[1] = (int32_t)kv;
        ak_tensor cu = vec(c, c->cu_q, 2), ck = vec(c, cuk, 2);
        ak_transform tf;
        memset(&tf, 0, sizeof tf);
        tf.kind = AK_TRANSFORM_RAGGED;
        tf.cu_seqlens_q = &cu;
        tf.cu_seqlens_k = &ck;
        AK_TRY(index_topk(c, a, 1, &tf, idx));
        int64_t shi[2] = {R, d->topk};
        ak_tensor it = mk(idx, c->dev, AK_DTYPE_I32, 2, shi);
        ak_sparse_prefill_args sp;
        memset(&sp, 0, sizeof sp);
        sp.q = &q;
        sp.kv = &g;
        sp.indices = &it;
        sp.attn_sink = io->attn_sink;
        sp.softmax_scale = d->softmax_scale;
        sp.out = &out;
        sp.lse = io->lse ? &lse : NULL;
        scratch(a, &ws, &wsb);
        return ak_sparse_prefill(c->ctx, &sp, ws, wsb);
    }
    case AK_PATH_V4_DECODE: {
        v4_lists l;
        AK_TRY(v4_build_lists(c, a, &l));
        ak_tensor q4 = split_rows(&q, c->b, c->sq);
        int64_t shi[3] = {c->b, c->sq, d->window}, shl[2] = {c->b, c->sq};
        ak_tensor it = mk(l.swa, c->dev, AK_DTYPE_I32, 3, shi),
                  tl = mk(l.swl, c->dev, AK_DTYPE_I32, 2, shl);
        int64_t she[3] = {c->b, c->sq, l.extk};
        ak_tensor et = mk(l.ext, c->dev, AK_DTYPE_I32, 3, she);
        ak_mla_decode_args m;
        memset(&m, 0, sizeof m);
        m.q = &q4;
        m.cache = c->cache;
        m.softmax_scale = d->softmax_scale;
        m.indices = &it;
        m.topk_length = &tl;
        if (l.ext != NULL) {
            m.extra_cache = io->extra_cache;
            m.extra_indices = &et;
        }
        m.attn_sink = io->attn_sink;
        m.out = &out;
        m.lse = io->lse ? &lse : NULL;
        scratch(a, &ws, &wsb);
        return ak_mla_decode(c->ctx, &m, ws, wsb);
    }
    case AK_PATH_V4_PAGED_MERGE: return run_v4_paged_merge(c, a, &q, &out, &lse);
    case AK_PATH_V4_GATHER: return run_v4_gather(c, a, &q, &out, &lse);
    case AK_PATH_MHA: break;
    }
    return AK_OK;
}

static ak_status run_mha(const ak_plan *p, ak_context *ctx, const ak_plan_io *io,
                         const ak_plan_seg *s, const ak_cache *cache, arena *a) {
    int32_t n = s->r1 - s->r0;
    int32_t *cu = i32_buf(a, n + 1);
    if (cu == NULL) return no_space("cu_seqlens_q");
    for (int32_t i = 0; i <= n; i++)
        cu[i] = (int32_t)(p->cu_q[s->r0 + i] - p->cu_q[s->r0]);
    int64_t shc[1] = {n + 1};
    ak_tensor cut = ak_tensor_make_on(cu, ak_ctx_device(ctx), AK_DTYPE_I32, 1, shc);
    ak_tensor q = rows_of(io->q, s->row0, s->rows), out = rows_of(io->out, s->row0, s->rows), lse;
    if (io->lse != NULL) lse = rows_of(io->lse, s->row0, s->rows);
    ak_tensor bt = rows_of(io->block_table, s->r0, n), seq = rows_of(io->seq_lens, s->r0, n);
    ak_mha_args m;
    memset(&m, 0, sizeof m);
    m.q = &q;
    m.cu_seqlens_q = &cut;
    m.cache = cache;
    m.block_table = &bt;
    m.seq_lens = &seq;
    m.softmax_scale = p->d.softmax_scale;
    m.causal = 1;
    m.window_left = p->d.window > 0 ? p->d.window - 1 : -1;
    m.attn_sink = io->attn_sink;
    m.out = &out;
    m.lse = io->lse ? &lse : NULL;
    void *ws;
    size_t wsb;
    scratch(a, &ws, &wsb);
    return ak_mha(ctx, &m, ws, wsb);
}

/* The CONVERT step: the union of the pages the converted readers touch, converted once. */
static ak_status run_convert(const ak_plan *p, ak_context *ctx, const ak_plan_io *io, arena *a) {
    int32_t *pages = i32_buf(a, p->convert_pages);
    if (pages == NULL) return no_space("the conversion page list");
    const int32_t *sl = (const int32_t *)io->seq_lens->data;
    const ak_tensor *bt = io->block_table;
    const int32_t *btd = (const int32_t *)bt->data;
    int64_t n = 0;
    for (int32_t i = 0; i < p->nseg; i++) {
        if (!p->segs[i].converted) continue;
        for (int32_t r = p->segs[i].r0; r < p->segs[i].r1; r++) {
            int64_t kv = sl[r * io->seq_lens->strides[0]];
            int64_t np = (kv + p->d.page_size - 1) / p->d.page_size;
            if (np > bt->shape[1]) np = bt->shape[1];
            for (int64_t j = 0; j < np && n < p->convert_pages; j++) {
                int32_t pg = btd[r * bt->strides[0] + j * bt->strides[1]];
                int dup = 0; /* shared prefixes list a page once */
                for (int64_t k = 0; k < n && !dup; k++)
                    dup = pages[k] == pg;
                if (!dup && (uint32_t)pg < (uint32_t)io->cache->num_pages) pages[n++] = pg;
            }
        }
    }
    int64_t sh[1] = {n};
    ak_tensor pt = ak_tensor_make_on(pages, ak_ctx_device(ctx), AK_DTYPE_I32, 1, sh);
    return ak_cache_convert(ctx, io->cache, io->convert_cache, &pt, AK_QUANT_DEFAULT);
}

static ak_status check_io(const ak_plan *p, ak_context *ctx, const ak_plan_io *io) {
    const char *fn = "ak_plan_run";
    const ak_plan_desc *d = &p->d;
    if (io == NULL || io->q == NULL || io->cache == NULL || io->block_table == NULL ||
        io->seq_lens == NULL || io->out == NULL)
        return ak_fail(
            AK_ERR_INVALID_ARGUMENT,
            "%s: io, io.q, io.cache, io.block_table, io.seq_lens and io.out are required", fn);
    if (io->q->ndim != 3 || io->q->shape[0] != p->total_rows || io->out->ndim != 3 ||
        io->out->shape[0] != p->total_rows)
        return ak_fail(AK_ERR_INVALID_ARGUMENT,
                       "%s: io.q / io.out: expected [%lld, h, d] (the plan's query rows), got ndim "
                       "%d / %d with %lld / %lld rows",
                       fn, (long long)p->total_rows, (int)io->q->ndim, (int)io->out->ndim,
                       (long long)io->q->shape[0], (long long)io->out->shape[0]);
    if (io->block_table->ndim != 2 || io->block_table->shape[0] < d->num_requests ||
        io->seq_lens->ndim != 1 || io->seq_lens->shape[0] < d->num_requests ||
        io->block_table->dtype != AK_DTYPE_I32 || io->seq_lens->dtype != AK_DTYPE_I32)
        return ak_fail(AK_ERR_INVALID_ARGUMENT,
                       "%s: io.block_table [>= %d, max_pages] int32 and io.seq_lens [>= %d] int32 "
                       "expected",
                       fn, (int)d->num_requests, (int)d->num_requests);
    if (io->lse != NULL && (io->lse->ndim != 2 || io->lse->shape[0] != p->total_rows))
        return ak_fail(AK_ERR_INVALID_ARGUMENT, "%s: io.lse: expected [%lld, h_q] f32", fn,
                       (long long)p->total_rows);
    if (d->has_sink && io->attn_sink == NULL)
        return ak_fail(AK_ERR_INVALID_ARGUMENT, "%s: io.attn_sink is NULL but the plan has a sink",
                       fn);
    if (io->cache->layout != d->layout)
        return ak_fail(AK_ERR_INVALID_ARGUMENT, "%s: io.cache layout %s, the plan's is %s", fn,
                       ak_layout_name(io->cache->layout), ak_layout_name(d->layout));
    int needs_index = d->kind == AK_ATTN_DSA || (d->kind == AK_ATTN_DSV4 && d->compress_ratio == 4);
    for (int32_t i = 0; i < p->nseg && needs_index; i++) {
        ak_path pa = p->segs[i].path;
        if (pa == AK_PATH_MHA || pa == AK_PATH_MLA_DENSE) continue;
        if (pa == AK_PATH_V4_DECODE && d->compress_ratio != 4) continue;
        if (io->index_cache == NULL || io->index_q == NULL || io->index_weights == NULL ||
            io->index_q->ndim != 3 || io->index_q->shape[0] != p->total_rows ||
            io->index_weights->ndim != 2 || io->index_weights->shape[0] != p->total_rows)
            return ak_fail(
                AK_ERR_INVALID_ARGUMENT,
                "%s: the plan runs the indexer: io.index_cache, io.index_q [%lld, H, 128] "
                "and io.index_weights [%lld, H] are required",
                fn, (long long)p->total_rows, (long long)p->total_rows);
        break;
    }
    if (d->kind == AK_ATTN_DSV4 && d->compress_ratio != 0 && io->extra_cache == NULL)
        return ak_fail(AK_ERR_INVALID_ARGUMENT, "%s: io.extra_cache is NULL (compress ratio %d)",
                       fn, (int)d->compress_ratio);
    if (p->convert_to != AK_LAYOUT_INVALID &&
        (io->convert_cache == NULL || io->convert_cache->layout != p->convert_to))
        return ak_fail(AK_ERR_INVALID_ARGUMENT,
                       "%s: the plan converts to %s: io.convert_cache of that layout is required",
                       fn, ak_layout_name(p->convert_to));
    /* Values: every planned request's kv length within [q_len, planned kv_len], which sized the
       logits widths and workspaces (checked before any op runs, so nothing is written). */
    const int32_t *sl = (const int32_t *)io->seq_lens->data;
    for (int32_t r = 0; r < d->num_requests && ctx->backend == AK_BACKEND_CPU; r++) {
        int32_t v = sl[r * io->seq_lens->strides[0]];
        if (p->q_lens[r] > 0 && (v < p->q_lens[r] || v > p->kv_lens[r]))
            return ak_fail(
                AK_ERR_INVALID_ARGUMENT,
                "%s: io.seq_lens[%d] = %d, expected %d..%d (q_len .. the planned kv_len); "
                "plan again for longer contexts",
                fn, (int)r, (int)v, (int)p->q_lens[r], (int)p->kv_lens[r]);
    }
    if (ctx->backend != AK_BACKEND_CPU)
        return ak_fail(AK_ERR_MISUSE,
                       "%s: plan built for %s runs on a CPU context here; the CUDA run path "
                       "keeps per-call metadata on the device and is planned per kernel",
                       fn, p->backend == AK_BACKEND_CUDA ? "cuda" : "cpu");
    return AK_OK;
}

/* Rows per call and requests per call, as planned (decode: q_len rows of chunk requests). */
static int64_t call_rows(const ak_plan_seg *s) {
    return s->decode ? s->chunk * s->q_len : s->chunk;
}

ak_status ak_plan_workspace_size(const ak_plan *plan, size_t *bytes) {
    const char *fn = "ak_plan_workspace_size";
    if (plan == NULL || bytes == NULL)
        return ak_fail(AK_ERR_INVALID_ARGUMENT, "%s: plan %p, bytes %p: expected non-NULL", fn,
                       (const void *)plan, (void *)bytes);
    const ak_plan_desc *d = &plan->d;
    ak_context *ctx = plan->ctx;
    /* Op scratch depends on shapes only (head count, dims, threads): query it once with the
       largest call of the plan on descriptors whose data is never read. */
    static char dummy[64];
    ak_device dev = ak_ctx_device(ctx);
    size_t op = 0;
    int64_t maxr = 1;
    for (int32_t i = 0; i < plan->nseg; i++)
        if (call_rows(&plan->segs[i]) > maxr) maxr = call_rows(&plan->segs[i]);
    if (d->kind == AK_ATTN_MHA) {
        int64_t shq[3] = {maxr, d->h_q, d->d_qk}, sho[3] = {maxr, d->h_q, d->d_v}, sh1[1] = {2};
        int64_t shb[2] = {1, 1};
        ak_tensor q = mk(dummy, dev, AK_DTYPE_BF16, 3, shq),
                  o = mk(dummy, dev, AK_DTYPE_F32, 3, sho);
        ak_tensor cu = mk(dummy, dev, AK_DTYPE_I32, 1, sh1),
                  bt = mk(dummy, dev, AK_DTYPE_I32, 2, shb);
        ak_tensor sl = mk(dummy, dev, AK_DTYPE_I32, 1, sh1);
        sl.shape[0] = 1;
        ak_cache c;
        AK_TRY(ak_cache_init_mha(&c, d->layout, AK_DTYPE_BF16, dummy, dummy, 1, d->page_size,
                                 d->h_kv, d->d_qk, d->d_v));
        ak_mha_args m;
        memset(&m, 0, sizeof m);
        m.q = &q;
        m.cu_seqlens_q = &cu;
        m.cache = &c;
        m.block_table = &bt;
        m.seq_lens = &sl;
        m.softmax_scale = d->softmax_scale;
        m.causal = 1;
        m.window_left = -1;
        m.out = &o;
        AK_TRY(ak_mha_workspace_size(ctx, &m, &op));
    } else if (plan->nseg > 0) {
        int64_t shq[4] = {1, maxr, d->h_q, d->d_qk}, sho[4] = {1, maxr, d->h_q, d->d_v};
        int64_t shb[2] = {1, 1}, sh1[1] = {1}, shi[3] = {1, maxr, 1};
        ak_tensor q = mk(dummy, dev, AK_DTYPE_BF16, 4, shq),
                  o = mk(dummy, dev, AK_DTYPE_F32, 4, sho);
        ak_tensor bt = mk(dummy, dev, AK_DTYPE_I32, 2, shb),
                  sl = mk(dummy, dev, AK_DTYPE_I32, 1, sh1);
        ak_tensor it = mk(dummy, dev, AK_DTYPE_I32, 3, shi);
        ak_cache c;
        AK_TRY(ak_cache_init(&c, d->layout, dummy, 1, d->page_size));
        ak_mla_decode_args m;
        memset(&m, 0, sizeof m);
        m.q = &q;
        m.cache = &c;
        m.softmax_scale = d->softmax_scale;
        m.out = &o;
        if (d->kind == AK_ATTN_MLA) {
            m.block_table = &bt;
            m.seq_lens = &sl;
        } else {
            m.indices = &it;
        }
        AK_TRY(ak_mla_decode_workspace_size(ctx, &m, &op));
        int64_t shq3[3] = {maxr, d->h_q, d->d_qk}, sho3[3] = {maxr, d->h_q, d->d_v};
        int64_t shi2[2] = {maxr, 1};
        ak_tensor q3 = mk(dummy, dev, AK_DTYPE_BF16, 3, shq3),
                  o3 = mk(dummy, dev, AK_DTYPE_F32, 3, sho3);
        ak_tensor i2 = mk(dummy, dev, AK_DTYPE_I32, 2, shi2);
        if (d->kind == AK_ATTN_DSA || d->kind == AK_ATTN_DSV4) {
            int64_t shk[2] = {1, d->d_qk};
            ak_tensor kv = mk(dummy, dev, AK_DTYPE_BF16, 2, shk);
            ak_sparse_prefill_args sp;
            memset(&sp, 0, sizeof sp);
            sp.q = &q3;
            if (d->kind == AK_ATTN_DSA)
                sp.cache = &c;
            else
                sp.kv = &kv;
            sp.indices = &i2;
            sp.softmax_scale = d->softmax_scale;
            sp.out = &o3;
            size_t spb = 0;
            AK_TRY(ak_sparse_prefill_workspace_size(ctx, &sp, &spb));
            if (spb > op) op = spb;
        }
    }
    /* Per-call metadata (row lengths, per-request lengths, cu_seqlens) and the 64-byte
       alignment of each carved buffer. */
    int64_t maxreq = 1;
    for (int32_t i = 0; i < plan->nseg; i++)
        if (plan->segs[i].decode && plan->segs[i].chunk > maxreq) maxreq = plan->segs[i].chunk;
    int64_t meta = 4 * (3 * maxr + 2 * maxreq + 8) + 64 * 16;
    *bytes = (size_t)(plan->ws_bytes + meta) + op + 64 * 8;
    return AK_OK;
}

ak_status ak_plan_run(ak_context *ctx, const ak_plan *plan, const ak_plan_io *io, void *workspace,
                      size_t workspace_bytes) {
    const char *fn = "ak_plan_run";
    AK_TRY(ak_check_context(ctx, fn));
    if (plan == NULL) return ak_fail(AK_ERR_INVALID_ARGUMENT, "%s: plan is NULL", fn);
    if (plan->ctx != ctx || plan->backend != ctx->backend)
        return ak_fail(
            AK_ERR_MISUSE,
            "%s: the plan was made for another context or for backend %s (explain only); "
            "plan on this context",
            fn, plan->backend == AK_BACKEND_CUDA ? "cuda" : "cpu");
    AK_TRY(check_io(plan, ctx, io));
    size_t need = 0;
    AK_TRY(ak_plan_workspace_size(plan, &need));
    if (workspace_bytes < need || (workspace == NULL && need > 0))
        return ak_fail(AK_ERR_WORKSPACE_TOO_SMALL,
                       "%s: workspace_bytes %zu, ak_plan_workspace_size gives %zu", fn,
                       workspace_bytes, need);
    arena a = {(char *)workspace, 0, workspace_bytes};
    if (plan->convert_to != AK_LAYOUT_INVALID) AK_TRY(run_convert(plan, ctx, io, &a));
    for (int32_t i = 0; i < plan->nseg; i++) {
        const ak_plan_seg *s = &plan->segs[i];
        const ak_cache *cache = s->converted ? io->convert_cache : io->cache;
        arena sa = a;
        if (s->path == AK_PATH_MHA) {
            AK_TRY(run_mha(plan, ctx, io, s, cache, &sa));
            continue;
        }
        call c;
        memset(&c, 0, sizeof c);
        c.p = plan;
        c.ctx = ctx;
        c.io = io;
        c.s = s;
        c.cache = cache;
        c.dev = ak_ctx_device(ctx);
        if (s->decode) {
            for (int32_t r = s->r0; r < s->r1; r += (int32_t)s->chunk) {
                arena ca = sa;
                c.r = r;
                c.b = (int32_t)(s->r1 - r < s->chunk ? s->r1 - r : s->chunk);
                c.sq = s->q_len;
                c.row0 = plan->cu_q[r];
                AK_TRY(run_call(&c, &ca, 0));
            }
            continue;
        }
        for (int32_t r = s->r0; r < s->r1; r++) {
            int32_t q = plan->q_lens[r];
            /* The gather path attends over the whole gathered context per call. */
            int64_t step = s->path == AK_PATH_MLA_DENSE ? q : s->chunk;
            for (int64_t f = 0; f < q; f += step) {
                arena ca = sa;
                c.r = r;
                c.b = 1;
                c.sq = (int32_t)(q - f < step ? q - f : step);
                c.row0 = plan->cu_q[r] + f;
                AK_TRY(run_call(&c, &ca, f));
            }
        }
    }
    return AK_OK;
}
