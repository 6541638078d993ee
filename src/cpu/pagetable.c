/*
 * cpu/pagetable.c -- CPU backend of the page-table builders, the index transforms and the
 * DeepSeek V4 index lists (semantics.md 9.2-9.3, 10.2, 10.5, 11). Each call first checks every
 * value it will use (request ids, ranges, page contiguity, cu_seqlens) and only then writes, so a
 * failing call leaves its outputs untouched. Work is split over requests or rows; every output
 * element is a pure function of the inputs, so results do not depend on the thread count.
 */
#include <stdatomic.h>

#include "cpu/cpu.h"

static inline int32_t i32_at2(const ak_tensor *t, int64_t i, int64_t j) {
    return ((const int32_t *)t->data)[i * t->strides[0] + j];
}
static inline int32_t *i32_row(ak_tensor *t, int64_t i) {
    return (int32_t *)t->data + i * t->strides[0];
}

/* ---- token table views ------------------------------------------------------------------------
 */

typedef struct tt_view {
    const ak_tensor *r2t;      /* [pool_rows, max_ctx] int32 slot ids */
    const ak_tensor *req_ids;  /* [B] int32 or NULL */
    const ak_tensor *kv_start; /* [B] int32 or NULL */
    const ak_tensor *seq_lens; /* [B] int32 */
    int32_t page_size;
    int64_t max_pages; /* block table width; -1 for the CSR builder */
} tt_view;

static int32_t tt_len(const tt_view *v, int64_t b) {
    int32_t len = ak_i32_at(v->seq_lens, b);
    return len > 0 ? len : 0; /* a negative length is an empty request */
}
static int64_t tt_pages(const tt_view *v, int64_t b) {
    return ((int64_t)tt_len(v, b) + v->page_size - 1) / v->page_size;
}
/* Start of request b's used token ids (valid once tt_check passed). */
static const int32_t *tt_tokens(const tt_view *v, int64_t b) {
    int64_t r = v->req_ids ? ak_i32_at(v->req_ids, b) : b;
    int64_t s = v->kv_start ? ak_i32_at(v->kv_start, b) : 0;
    return (const int32_t *)v->r2t->data + r * v->r2t->strides[0] + s;
}

/* Checks request b: its row, its range and that every used page is allocated contiguously and
   page-aligned. With `fn` NULL (worker threads) it only returns the status. */
static ak_status tt_check(const tt_view *v, int64_t b, const char *fn) {
    int32_t len = tt_len(v, b);
    if (len == 0) return AK_OK; /* nothing is read for an empty request */
    int64_t rows = v->r2t->shape[0], max_ctx = v->r2t->shape[1];
    int64_t r = v->req_ids ? ak_i32_at(v->req_ids, b) : b;
    if (r < 0 || r >= rows) {
        if (fn == NULL) return AK_ERR_INVALID_ARGUMENT;
        if (v->req_ids == NULL)
            return ak_fail(AK_ERR_INVALID_ARGUMENT,
                           "%s: req_to_token has %lld rows; with req_ids NULL request %lld reads "
                           "row %lld (pass req_ids or more rows)",
                           fn, (long long)rows, (long long)b, (long long)b);
        return ak_fail(AK_ERR_INVALID_ARGUMENT,
                       "%s: req_ids[%lld] is %lld, expected 0..%lld (req_to_token rows)", fn,
                       (long long)b, (long long)r, (long long)rows - 1);
    }
    int64_t s = v->kv_start ? ak_i32_at(v->kv_start, b) : 0;
    if (s < 0 || s + len > max_ctx)
        return fn ? ak_fail(AK_ERR_INVALID_ARGUMENT,
                            "%s: kv_start[%lld] = %lld with seq_lens[%lld] = %d passes the "
                            "req_to_token width %lld",
                            fn, (long long)b, (long long)s, (long long)b, (int)len,
                            (long long)max_ctx)
                  : AK_ERR_INVALID_ARGUMENT;
    int64_t pages = tt_pages(v, b);
    if (v->max_pages >= 0 && pages > v->max_pages)
        return fn ? ak_fail(AK_ERR_INVALID_ARGUMENT,
                            "%s: seq_lens[%lld] = %d needs %lld pages of %d, block_table has "
                            "max_pages %lld",
                            fn, (long long)b, (int)len, (long long)pages, (int)v->page_size,
                            (long long)v->max_pages)
                  : AK_ERR_INVALID_ARGUMENT;
    const int32_t *tok = tt_tokens(v, b);
    int32_t P = v->page_size;
    for (int64_t p = 0; p < pages; p++) {
        const int32_t *pt = tok + p * P;
        int64_t first = pt[0];
        int64_t used = len - p * P < P ? len - p * P : P;
        int bad = first < 0 || first % P != 0;
        for (int64_t o = 1; o < used && !bad; o++)
            bad = (int64_t)pt[o] != first + o;
        if (bad)
            return fn ? ak_fail(AK_ERR_BAD_PAGE_TABLE,
                                "%s: req_to_token: request %lld page %lld (tokens %lld..%lld) is "
                                "not one allocated, page-aligned page of %d slots (first slot "
                                "%lld)",
                                fn, (long long)b, (long long)p, (long long)(p * P),
                                (long long)(p * P + used - 1), (int)P, (long long)first)
                      : AK_ERR_BAD_PAGE_TABLE;
    }
    return AK_OK;
}

typedef struct tt_check_job {
    const tt_view *v;
    _Atomic int64_t first_bad; /* smallest failing request, or INT64_MAX */
} tt_check_job;

static void tt_check_item(void *arg, int64_t b, int32_t thread) {
    tt_check_job *j = (tt_check_job *)arg;
    if (tt_check(j->v, b, NULL) == AK_OK) return;
    int64_t cur = atomic_load(&j->first_bad);
    while (b < cur && !atomic_compare_exchange_weak(&j->first_bad, &cur, b)) {
    }
}

/* Checks every request in parallel; the detail line names the first failing one. */
static ak_status tt_check_all(ak_context *ctx, const tt_view *v, const char *fn) {
    tt_check_job j = {v, INT64_MAX};
    ak_parallel_for(ctx, v->seq_lens->shape[0], tt_check_item, &j);
    int64_t bad = atomic_load(&j.first_bad);
    return bad == INT64_MAX ? AK_OK : tt_check(v, bad, fn);
}

/* ---- block table -------------------------------------------------------------------------------
 */

typedef struct bt_job {
    const tt_view *v;
    ak_tensor *bt; /* [B, max_pages] int32 */
} bt_job;

static void bt_item(void *arg, int64_t b, int32_t thread) {
    bt_job *j = (bt_job *)arg;
    int32_t *row = i32_row(j->bt, b);
    int64_t pages = tt_pages(j->v, b), w = j->bt->shape[1];
    int32_t P = j->v->page_size;
    const int32_t *tok = pages ? tt_tokens(j->v, b) : NULL;
    for (int64_t p = 0; p < pages; p++)
        row[p] = tok[p * P] / P;
    for (int64_t p = pages; p < w; p++)
        row[p] = -1;
}

ak_status ak_cpu_block_table_build(ak_context *ctx, const ak_tensor *req_to_token,
                                   const ak_tensor *req_ids, const ak_tensor *kv_start,
                                   const ak_tensor *seq_lens, int32_t page_size,
                                   ak_tensor *block_table) {
    tt_view v = {req_to_token, req_ids, kv_start, seq_lens, page_size, block_table->shape[1]};
    AK_TRY(tt_check_all(ctx, &v, "ak_block_table_build"));
    bt_job j = {&v, block_table};
    ak_parallel_for(ctx, seq_lens->shape[0], bt_item, &j);
    return AK_OK;
}

/* ---- CSR ---------------------------------------------------------------------------------------
 */

typedef struct csr_job {
    const tt_view *v;
    const ak_tensor *indptr; /* [B+1] int32, already written */
    ak_tensor *indices;      /* [capacity] int32 */
    ak_tensor *last;         /* [B] int32 or NULL */
    int64_t nreq;
} csr_job;

static void csr_item(void *arg, int64_t b, int32_t thread) {
    csr_job *j = (csr_job *)arg;
    int32_t *out = (int32_t *)j->indices->data;
    int64_t cap = j->indices->shape[0];
    if (b == j->nreq) { /* the tail past kv_indptr[B] */
        for (int64_t i = ak_i32_at(j->indptr, j->nreq); i < cap; i++)
            out[i] = -1;
        return;
    }
    int32_t P = j->v->page_size, len = tt_len(j->v, b);
    int64_t at = ak_i32_at(j->indptr, b);
    const int32_t *tok = len ? tt_tokens(j->v, b) : NULL;
    if (P == 1) {
        for (int32_t i = 0; i < len; i++)
            out[at + i] = tok[i];
    } else {
        int64_t pages = tt_pages(j->v, b);
        for (int64_t p = 0; p < pages; p++)
            out[at + p] = tok[p * P] / P;
    }
    if (j->last != NULL) {
        int64_t pages = tt_pages(j->v, b);
        ((int32_t *)j->last->data)[b * j->last->strides[0]] =
            pages ? (int32_t)(len - (int64_t)P * (pages - 1)) : 0;
    }
}

ak_status ak_cpu_csr_build(ak_context *ctx, const ak_tensor *req_to_token, const ak_tensor *req_ids,
                           const ak_tensor *kv_start, const ak_tensor *seq_lens, int32_t page_size,
                           ak_tensor *kv_indptr, ak_tensor *kv_indices,
                           ak_tensor *kv_last_page_len) {
    const char *fn = "ak_csr_build";
    tt_view v = {req_to_token, req_ids, kv_start, seq_lens, page_size, -1};
    int64_t nreq = seq_lens->shape[0], cap = kv_indices->shape[0], total = 0;
    for (int64_t b = 0; b < nreq; b++)
        total += tt_pages(&v, b); /* <= 2^31 * 2^31: no overflow */
    if (total > cap || total > INT32_MAX)
        return ak_fail(AK_ERR_INVALID_ARGUMENT,
                       "%s: kv_indices: the requests need %lld entries, capacity is %lld", fn,
                       (long long)total, (long long)cap);
    AK_TRY(tt_check_all(ctx, &v, fn));
    int32_t *ip = (int32_t *)kv_indptr->data;
    int64_t acc = 0;
    for (int64_t b = 0; b <= nreq; b++) {
        ip[b * kv_indptr->strides[0]] = (int32_t)acc;
        if (b < nreq) acc += tt_pages(&v, b);
    }
    csr_job j = {&v, kv_indptr, kv_indices, kv_last_page_len, nreq};
    ak_parallel_for(ctx, nreq + 1, csr_item, &j);
    return AK_OK;
}

/* ---- transforms --------------------------------------------------------------------------------
 */

/* cu [n] int32 must start >= 0 and never decrease. */
static ak_status check_cumulative(const char *fn, const char *arg, const ak_tensor *cu) {
    int64_t n = cu->shape[0];
    int64_t prev = 0;
    for (int64_t i = 0; i < n; i++) {
        int64_t x = ak_i32_at(cu, i);
        if (x < prev)
            return ak_fail(AK_ERR_INVALID_ARGUMENT,
                           "%s: %s[%lld] is %lld, expected >= %lld (non-negative, non-decreasing)",
                           fn, arg, (long long)i, (long long)x, (long long)prev);
        prev = x;
    }
    return AK_OK;
}

ak_status ak_cpu_transform_prepare(const char *fn, const ak_transform *tf, ak_cpu_tf *plan) {
    ak_cpu_tf p = {AK_TRANSFORM_NONE, NULL, 0, 0, 1, NULL, NULL, -1};
    if (tf == NULL) {
        *plan = p;
        return AK_OK;
    }
    p.kind = tf->kind;
    p.cu_q = tf->cu_seqlens_q;
    if (tf->kind == AK_TRANSFORM_PAGED) {
        p.table = (const int32_t *)tf->table->data;
        p.table_stride = tf->table->strides[0];
        p.width = tf->table->shape[1];
        p.page_size = tf->page_size;
        p.nreq = tf->table->shape[0];
    } else if (tf->kind == AK_TRANSFORM_RAGGED) {
        AK_TRY(check_cumulative(fn, "tf->cu_seqlens_k", tf->cu_seqlens_k));
        p.cu_k = tf->cu_seqlens_k;
        p.nreq = tf->cu_seqlens_k->shape[0] - 1;
    }
    if (p.cu_q != NULL) {
        AK_TRY(check_cumulative(fn, "tf->cu_seqlens_q", p.cu_q));
        p.nreq = p.cu_q->shape[0] - 1;
    }
    *plan = p;
    return AK_OK;
}

/* Request of row t, or -1 for a row that belongs to none. */
static int64_t row_request(const ak_cpu_tf *p, int64_t t) {
    if (p->cu_q == NULL) return (p->nreq < 0 || t < p->nreq) ? t : -1;
    int64_t n = p->nreq;
    if (t < ak_i32_at(p->cu_q, 0) || t >= ak_i32_at(p->cu_q, n)) return -1;
    int64_t lo = 0, hi = n; /* cu[lo] <= t < cu[hi] */
    while (hi - lo > 1) {
        int64_t mid = lo + (hi - lo) / 2;
        if (ak_i32_at(p->cu_q, mid) <= t)
            lo = mid;
        else
            hi = mid;
    }
    return lo;
}

/* Slot of position pos of request b through a PAGED table (-1 when it has none). */
static inline int32_t paged_slot(const int32_t *row, int64_t width, int32_t P, int64_t pos) {
    if (pos < 0) return -1;
    if (P == 1) {
        if (pos >= width) return -1;
        return row[pos] < 0 ? -1 : row[pos];
    }
    int64_t pg = pos / P;
    if (pg >= width || row[pg] < 0) return -1;
    int64_t slot = (int64_t)row[pg] * P + pos % P;
    return slot > INT32_MAX ? -1 : (int32_t)slot;
}

void ak_cpu_transform_row(const ak_cpu_tf *p, int64_t t, const int32_t *in, int32_t *out,
                          int64_t n) {
    int64_t b = row_request(p, t);
    if (b < 0) {
        for (int64_t j = 0; j < n; j++)
            out[j] = -1;
        return;
    }
    switch (p->kind) {
    case AK_TRANSFORM_PAGED: {
        const int32_t *row = p->table + b * p->table_stride;
        for (int64_t j = 0; j < n; j++)
            out[j] = paged_slot(row, p->width, p->page_size, in[j]);
        break;
    }
    case AK_TRANSFORM_RAGGED: {
        /* a position past the request's keys would address the next request: -1 */
        int32_t off = ak_i32_at(p->cu_k, b), len = ak_i32_at(p->cu_k, b + 1) - off;
        for (int64_t j = 0; j < n; j++)
            out[j] = (uint32_t)in[j] < (uint32_t)len ? in[j] + off : -1;
        break;
    }
    default:
        for (int64_t j = 0; j < n; j++)
            out[j] = in[j] < 0 ? -1 : in[j];
        break;
    }
}

typedef struct tf_job {
    const ak_cpu_tf *plan;
    const ak_tensor *idx; /* [rows, k] int32 */
    ak_tensor *out;       /* [rows, k] int32 */
} tf_job;

static void tf_item(void *arg, int64_t t, int32_t thread) {
    tf_job *j = (tf_job *)arg;
    ak_cpu_transform_row(j->plan, t, (const int32_t *)j->idx->data + t * j->idx->strides[0],
                         i32_row(j->out, t), j->idx->shape[1]);
}

ak_status ak_cpu_topk_transform(ak_context *ctx, const ak_transform *tf, const ak_tensor *idx,
                                ak_tensor *out) {
    ak_cpu_tf plan;
    AK_TRY(ak_cpu_transform_prepare("ak_topk_transform", tf, &plan));
    tf_job j = {&plan, idx, out};
    ak_parallel_for(ctx, idx->shape[0], tf_item, &j);
    return AK_OK;
}

/* ---- DeepSeek V4 index lists -------------------------------------------------------------------
 */

/* Query rows of the V4 builders: request b owns rows [row0(b), row0(b) + q_len(b)). */
typedef struct v4_rows {
    const ak_tensor *seq_lens; /* [B] int32 */
    const ak_tensor *cu_q;     /* [B+1] int32 or NULL (one row per request) */
    int32_t base;              /* subtracted from cu_q (a global query_start_loc) */
    int64_t nreq;
} v4_rows;

static int64_t v4_row0(const v4_rows *r, int64_t b) {
    return r->cu_q ? (int64_t)ak_i32_at(r->cu_q, b) - r->base : b;
}
static int64_t v4_qlen(const v4_rows *r, int64_t b) {
    return r->cu_q ? (int64_t)ak_i32_at(r->cu_q, b + 1) - ak_i32_at(r->cu_q, b) : 1;
}

/* cu_seqlens_q non-decreasing, the rows fit in `rows`, and (need_len) seq_len >= q_len for every
   request. */
static ak_status v4_rows_check(const char *fn, const v4_rows *r, int64_t rows, int need_len) {
    if (r->cu_q != NULL) {
        int64_t prev = r->base;
        for (int64_t b = 0; b <= r->nreq; b++) {
            int64_t x = ak_i32_at(r->cu_q, b);
            if (x < prev)
                return ak_fail(AK_ERR_INVALID_ARGUMENT,
                               "%s: cu_seqlens_q[%lld] is %lld, expected >= %lld (non-decreasing)",
                               fn, (long long)b, (long long)x, (long long)prev);
            prev = x;
        }
    }
    int64_t need = r->cu_q ? v4_row0(r, r->nreq) : r->nreq;
    if (need > rows)
        return ak_fail(AK_ERR_INVALID_ARGUMENT,
                       "%s: the requests have %lld query rows, the output has only %lld", fn,
                       (long long)need, (long long)rows);
    for (int64_t b = 0; b < r->nreq && need_len; b++) {
        int64_t sl = ak_i32_at(r->seq_lens, b), ql = v4_qlen(r, b);
        if (sl < ql)
            return ak_fail(AK_ERR_INVALID_ARGUMENT,
                           "%s: seq_lens[%lld] is %lld, below the request's %lld query rows", fn,
                           (long long)b, (long long)sl, (long long)ql);
    }
    return AK_OK;
}

/* Request of output row t (-1: a padding row). */
static int64_t v4_request(const v4_rows *r, int64_t t) {
    if (r->cu_q == NULL) return t < r->nreq ? t : -1;
    if (t >= v4_row0(r, r->nreq)) return -1;
    int64_t lo = 0, hi = r->nreq;
    while (hi - lo > 1) {
        int64_t mid = lo + (hi - lo) / 2;
        if (v4_row0(r, mid) <= t)
            lo = mid;
        else
            hi = mid;
    }
    return lo;
}

typedef struct swa_job {
    v4_rows rows;
    const ak_tensor *table; /* [B, width] int32 */
    int32_t page_size, window;
    ak_tensor *indices; /* [rows, window] int32 */
    ak_tensor *lengths; /* [rows] int32 */
} swa_job;

static void swa_item(void *arg, int64_t t, int32_t thread) {
    swa_job *j = (swa_job *)arg;
    int32_t *out = i32_row(j->indices, t);
    int32_t *len = (int32_t *)j->lengths->data + t * j->lengths->strides[0];
    int64_t b = v4_request(&j->rows, t);
    if (b < 0) {
        for (int32_t k = 0; k < j->window; k++)
            out[k] = -1;
        *len = 0;
        return;
    }
    int64_t pos =
        ak_i32_at(j->rows.seq_lens, b) - v4_qlen(&j->rows, b) + (t - v4_row0(&j->rows, b));
    const int32_t *row = (const int32_t *)j->table->data + b * j->table->strides[0];
    for (int32_t k = 0; k < j->window; k++)
        out[k] = paged_slot(row, j->table->shape[1], j->page_size, pos - k);
    *len = (int32_t)(pos < 0 ? 0 : pos + 1 < j->window ? pos + 1 : j->window);
}

ak_status ak_cpu_dsv4_swa_indices(ak_context *ctx, const ak_tensor *seq_lens,
                                  const ak_tensor *cu_seqlens_q, const ak_tensor *table,
                                  int32_t page_size, int32_t window, ak_tensor *indices,
                                  ak_tensor *lengths) {
    swa_job j = {{seq_lens, cu_seqlens_q, 0, seq_lens->shape[0]},
                 table,
                 page_size,
                 window,
                 indices,
                 lengths};
    /* decode padding rows may have seq_len 0: a query row at pos < 0 sees nothing */
    AK_TRY(v4_rows_check("ak_dsv4_swa_indices", &j.rows, indices->shape[0], 0));
    ak_parallel_for(ctx, indices->shape[0], swa_item, &j);
    return AK_OK;
}

typedef struct comb_job {
    v4_rows rows;
    const ak_tensor *raw; /* [T, topk] int32 or NULL */
    int32_t ratio, topk, c_max, window;
    ak_tensor *indices; /* [T, W] int32 */
    ak_tensor *lengths; /* [T] int32 */
} comb_job;

static int64_t gather_len(const comb_job *j, int64_t b) {
    int64_t sl = ak_i32_at(j->rows.seq_lens, b), g = v4_qlen(&j->rows, b) + j->window - 1;
    return sl < g ? sl : g;
}

/* Row t of request b (b < 0: a padding row), whose SWA rows start at swa_base. */
static void comb_row(const comb_job *j, int64_t t, int64_t b, int64_t swa_base) {
    int32_t *out = i32_row(j->indices, t);
    int64_t w = j->indices->shape[1], n = 0;
    int32_t *len = (int32_t *)j->lengths->data + t * j->lengths->strides[0];
    if (b >= 0) {
        int64_t sl = ak_i32_at(j->rows.seq_lens, b);
        int64_t pos = sl - v4_qlen(&j->rows, b) + (t - v4_row0(&j->rows, b));
        if (j->ratio != 0) {
            int64_t visible = (pos + 1) / j->ratio;
            int64_t tl = visible < j->topk ? visible : j->topk;
            int64_t cbase = b * j->c_max;
            const int32_t *raw =
                j->raw ? (const int32_t *)j->raw->data + t * j->raw->strides[0] : NULL;
            /* a raw entry outside the causally visible entries is invalid: -1 */
            for (int64_t k = 0; k < tl; k++) {
                int64_t c = raw ? raw[k] : k;
                out[n++] = (c >= 0 && c < visible) ? (int32_t)(cbase + c) : -1;
            }
        }
        int64_t swa_len = pos + 1 < j->window ? pos + 1 : j->window;
        int64_t first = swa_base + (pos - swa_len + 1 - (sl - gather_len(j, b)));
        for (int64_t k = 0; k < swa_len; k++)
            out[n++] = (int32_t)(first + k);
    }
    *len = (int32_t)n;
    for (int64_t k = n; k < w; k++)
        out[k] = -1;
}

/* Item b < B: the rows of request b; item B: the padding rows after the last request. */
static void comb_item(void *arg, int64_t b, int32_t thread) {
    comb_job *j = (comb_job *)arg;
    if (b == j->rows.nreq) {
        for (int64_t t = v4_row0(&j->rows, b); t < j->indices->shape[0]; t++)
            comb_row(j, t, -1, 0);
        return;
    }
    /* the SWA base is a prefix sum; recomputing it per request keeps the call allocation-free */
    int64_t base = j->rows.nreq * (int64_t)(j->ratio ? j->c_max : 0);
    for (int64_t i = 0; i < b; i++)
        base += gather_len(j, i);
    int64_t r0 = v4_row0(&j->rows, b), ql = v4_qlen(&j->rows, b);
    for (int64_t t = r0; t < r0 + ql; t++)
        comb_row(j, t, b, base);
}

ak_status ak_cpu_dsv4_combine_indices(ak_context *ctx, const ak_tensor *raw_topk,
                                      const ak_tensor *seq_lens, const ak_tensor *cu_seqlens_q,
                                      int32_t ratio, int32_t topk, int32_t c_max, int32_t window,
                                      ak_tensor *indices, ak_tensor *lengths,
                                      ak_tensor *swa_offsets) {
    const char *fn = "ak_dsv4_combine_indices";
    int64_t nreq = seq_lens->shape[0];
    comb_job j = {{seq_lens, cu_seqlens_q, cu_seqlens_q ? ak_i32_at(cu_seqlens_q, 0) : 0, nreq},
                  raw_topk,
                  ratio,
                  topk,
                  c_max,
                  window,
                  indices,
                  lengths};
    AK_TRY(v4_rows_check(fn, &j.rows, indices->shape[0], 1));
    int64_t total = nreq * (int64_t)(ratio ? c_max : 0);
    for (int64_t b = 0; b < nreq; b++) {
        int64_t visible = ratio ? ak_i32_at(seq_lens, b) / ratio : 0;
        if (visible > c_max)
            return ak_fail(AK_ERR_INVALID_ARGUMENT,
                           "%s: c_max is %d, below seq_lens[%lld] / ratio = %lld compressed "
                           "entries",
                           fn, (int)c_max, (long long)b, (long long)visible);
        total += gather_len(&j, b);
    }
    if (total > INT32_MAX)
        return ak_fail(AK_ERR_INVALID_ARGUMENT,
                       "%s: the workspace would have %lld rows, above 2^31 - 1 (c_max %d)", fn,
                       (long long)total, (int)c_max);
    ak_parallel_for(ctx, nreq + 1, comb_item, &j);
    if (swa_offsets != NULL) {
        int64_t acc = 0;
        for (int64_t b = 0; b <= nreq; b++) {
            ((int32_t *)swa_offsets->data)[b * swa_offsets->strides[0]] = (int32_t)acc;
            if (b < nreq) acc += gather_len(&j, b);
        }
    }
    return AK_OK;
}
