/* oracle_pagetable.c -- naive page-table and index-list references (see oracle_pagetable.h). */
#include "oracle_pagetable.h"

static int64_t pages_of(int64_t len, int32_t p) {
    return len <= 0 ? 0 : (len + p - 1) / p;
}

/* Checks request i; returns ORC_PT_* and the address of its token ids. */
static int req_tokens(const int32_t *r2t, int64_t pool_rows, int64_t max_ctx,
                      const int32_t *req_ids, const int32_t *kv_start, const int32_t *seq_lens,
                      int64_t i, int32_t p, const int32_t **tok) {
    int64_t len = seq_lens[i] < 0 ? 0 : seq_lens[i];
    *tok = 0;
    if (len == 0) return ORC_PT_OK;
    int64_t row = req_ids ? req_ids[i] : i, start = kv_start ? kv_start[i] : 0;
    if (row < 0 || row >= pool_rows || start < 0 || start + len > max_ctx) return ORC_PT_BAD_ARG;
    *tok = r2t + row * max_ctx + start;
    for (int64_t pos = 0; pos < len; pos++) {
        int64_t first = (*tok)[pos - pos % p];
        if (first < 0 || first % p != 0 || (*tok)[pos] != first + pos % p) return ORC_PT_BAD_PAGES;
    }
    return ORC_PT_OK;
}

int orc_block_table(const int32_t *r2t, int64_t pool_rows, int64_t max_ctx, const int32_t *req_ids,
                    const int32_t *kv_start, const int32_t *seq_lens, int64_t b, int32_t page_size,
                    int32_t *block_table, int64_t max_pages) {
    int worst = ORC_PT_OK;
    for (int64_t i = 0; i < b && worst == ORC_PT_OK; i++) {
        const int32_t *tok;
        worst =
            req_tokens(r2t, pool_rows, max_ctx, req_ids, kv_start, seq_lens, i, page_size, &tok);
        if (worst == ORC_PT_OK && pages_of(seq_lens[i], page_size) > max_pages)
            worst = ORC_PT_BAD_ARG;
    }
    if (worst != ORC_PT_OK) return worst;
    for (int64_t i = 0; i < b; i++) {
        const int32_t *tok;
        req_tokens(r2t, pool_rows, max_ctx, req_ids, kv_start, seq_lens, i, page_size, &tok);
        int64_t n = pages_of(seq_lens[i], page_size);
        for (int64_t j = 0; j < max_pages; j++)
            block_table[i * max_pages + j] = j < n ? tok[j * page_size] / page_size : -1;
    }
    return ORC_PT_OK;
}

int orc_csr(const int32_t *r2t, int64_t pool_rows, int64_t max_ctx, const int32_t *req_ids,
            const int32_t *kv_start, const int32_t *seq_lens, int64_t b, int32_t page_size,
            int32_t *kv_indptr, int32_t *kv_indices, int64_t cap, int32_t *last) {
    int64_t total = 0;
    for (int64_t i = 0; i < b; i++)
        total += pages_of(seq_lens[i], page_size);
    if (total > cap) return ORC_PT_BAD_ARG;
    for (int64_t i = 0; i < b; i++) {
        const int32_t *tok;
        int r =
            req_tokens(r2t, pool_rows, max_ctx, req_ids, kv_start, seq_lens, i, page_size, &tok);
        if (r != ORC_PT_OK) return r;
    }
    int64_t at = 0;
    for (int64_t i = 0; i < b; i++) {
        const int32_t *tok;
        req_tokens(r2t, pool_rows, max_ctx, req_ids, kv_start, seq_lens, i, page_size, &tok);
        kv_indptr[i] = (int32_t)at;
        int64_t n = pages_of(seq_lens[i], page_size);
        for (int64_t j = 0; j < n; j++)
            kv_indices[at++] = tok[j * page_size] / page_size;
        if (last) last[i] = n == 0 ? 0 : (int32_t)(seq_lens[i] - (n - 1) * page_size);
    }
    kv_indptr[b] = (int32_t)at;
    while (at < cap)
        kv_indices[at++] = -1;
    return ORC_PT_OK;
}

int32_t orc_paged_slot(const int32_t *row, int64_t width, int32_t page_size, int64_t pos) {
    if (pos < 0 || pos / page_size >= width) return -1;
    int64_t e = row[pos / page_size];
    if (e < 0) return -1;
    int64_t slot = e * page_size + pos % page_size;
    return slot > 2147483647LL ? -1 : (int32_t)slot;
}

/* Request of row t by a linear scan (-1: none). */
static int64_t owner(const int32_t *cu_q, int64_t b, int64_t t, int unbounded) {
    if (!cu_q) return (unbounded || t < b) ? t : -1;
    for (int64_t i = 0; i < b; i++)
        if (cu_q[i] <= t && t < cu_q[i + 1]) return i;
    return -1;
}

void orc_transform(int kind, const int32_t *table, int64_t b, int64_t width, int32_t page_size,
                   const int32_t *cu_q, const int32_t *cu_k, const int32_t *idx, int64_t rows,
                   int64_t k, int32_t *out) {
    for (int64_t t = 0; t < rows; t++) {
        int64_t r = owner(cu_q, b, t, kind == 0);
        for (int64_t j = 0; j < k; j++) {
            int64_t v = idx[t * k + j], o = -1;
            if (r >= 0 && v >= 0) {
                if (kind == 0)
                    o = v;
                else if (kind == 1)
                    o = orc_paged_slot(table + r * width, width, page_size, v);
                else if (v < (int64_t)cu_k[r + 1] - cu_k[r])
                    o = v + cu_k[r];
            }
            out[t * k + j] = (int32_t)o;
        }
    }
}

void orc_swa_indices(const int32_t *seq_lens, const int32_t *cu_q, int64_t b, const int32_t *table,
                     int64_t width, int32_t page_size, int32_t window, int32_t *indices,
                     int32_t *lengths, int64_t rows) {
    for (int64_t t = 0; t < rows; t++) {
        int64_t r = owner(cu_q, b, t, 0);
        int64_t pos = -1;
        if (r >= 0)
            pos = cu_q ? seq_lens[r] - (cu_q[r + 1] - cu_q[r]) + (t - cu_q[r]) : seq_lens[r] - 1;
        for (int64_t j = 0; j < window; j++)
            indices[t * window + j] =
                (r >= 0 && pos - j >= 0)
                    ? orc_paged_slot(table + r * width, width, page_size, pos - j)
                    : -1;
        lengths[t] = (r < 0 || pos < 0) ? 0 : (int32_t)(pos + 1 < window ? pos + 1 : window);
    }
}

void orc_combine(const int32_t *raw, const int32_t *seq_lens, const int32_t *cu_q, int64_t b,
                 int32_t ratio, int32_t topk, int32_t c_max, int32_t window, int32_t *indices,
                 int64_t w, int32_t *lengths, int64_t t_rows, int32_t *swa_offsets) {
    int64_t off = 0, base = cu_q ? cu_q[0] : 0;
    for (int64_t i = 0; i < t_rows; i++) {
        lengths[i] = 0;
        for (int64_t j = 0; j < w; j++)
            indices[i * w + j] = -1;
    }
    for (int64_t r = 0; r < b; r++) {
        int64_t q_len = cu_q ? cu_q[r + 1] - cu_q[r] : 1, row0 = cu_q ? cu_q[r] - base : r;
        int64_t sl = seq_lens[r];
        int64_t gather = sl < q_len + window - 1 ? sl : q_len + window - 1;
        int64_t gstart = sl - gather;
        int64_t swa_base = b * (int64_t)(ratio ? c_max : 0) + off;
        if (swa_offsets) swa_offsets[r] = (int32_t)off;
        for (int64_t i = 0; i < q_len; i++) {
            int64_t t = row0 + i, pos = sl - q_len + i, n = 0;
            int32_t *o = indices + t * w;
            if (ratio) {
                int64_t vis = (pos + 1) / ratio, tl = vis < topk ? vis : topk;
                for (int64_t j = 0; j < tl; j++) {
                    int64_t c = raw ? raw[t * topk + j] : j;
                    o[n++] = (c >= 0 && c < vis) ? (int32_t)(r * c_max + c) : -1;
                }
            }
            int64_t swa = pos + 1 < window ? pos + 1 : window;
            for (int64_t j = 0; j < swa; j++)
                o[n++] = (int32_t)(swa_base + pos - swa + 1 - gstart + j);
            lengths[t] = (int32_t)n;
        }
        off += gather;
    }
    if (swa_offsets) swa_offsets[b] = (int32_t)off;
}
