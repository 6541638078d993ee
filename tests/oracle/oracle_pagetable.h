/*
 * oracle_pagetable.h -- naive references for the page-table builders, the index transforms and
 * the DeepSeek V4 index lists (semantics.md 9.2-9.3, 10.2, 10.5, 11). Plain loops over host
 * arrays, written from the definitions; they share no code with the library. Tables are dense
 * row-major int32 arrays.
 */
#ifndef AK_ORACLE_PAGETABLE_H
#define AK_ORACLE_PAGETABLE_H

#include <stdint.h>

/* Result of a builder reference: OK, or the request is rejected. */
enum { ORC_PT_OK = 0, ORC_PT_BAD_ARG = 1, ORC_PT_BAD_PAGES = 2 };

/* block_table [B, max_pages]; req_ids/kv_start may be NULL. Returns ORC_PT_*. */
int orc_block_table(const int32_t *r2t, int64_t pool_rows, int64_t max_ctx, const int32_t *req_ids,
                    const int32_t *kv_start, const int32_t *seq_lens, int64_t b, int32_t page_size,
                    int32_t *block_table, int64_t max_pages);

/* kv_indptr [B+1], kv_indices [cap] (-1 past the end), last [B] (may be NULL). */
int orc_csr(const int32_t *r2t, int64_t pool_rows, int64_t max_ctx, const int32_t *req_ids,
            const int32_t *kv_start, const int32_t *seq_lens, int64_t b, int32_t page_size,
            int32_t *kv_indptr, int32_t *kv_indices, int64_t cap, int32_t *last);

/* Transforms idx [rows, k] into out [rows, k]. kind 0 none, 1 paged (table [b, width], page_size),
   2 ragged (cu_k [b+1]). cu_q [b+1] or NULL (row t = request t, rows >= b are -1 unless kind 0
   without cu_q). */
void orc_transform(int kind, const int32_t *table, int64_t b, int64_t width, int32_t page_size,
                   const int32_t *cu_q, const int32_t *cu_k, const int32_t *idx, int64_t rows,
                   int64_t k, int32_t *out);

/* Slot of position pos through a paged table row (-1 when none). */
int32_t orc_paged_slot(const int32_t *row, int64_t width, int32_t page_size, int64_t pos);

/* V4 SWA lists: indices [rows, window], lengths [rows]. cu_q may be NULL. */
void orc_swa_indices(const int32_t *seq_lens, const int32_t *cu_q, int64_t b, const int32_t *table,
                     int64_t width, int32_t page_size, int32_t window, int32_t *indices,
                     int32_t *lengths, int64_t rows);

/* V4 combiner: raw [T, topk] or NULL, indices [T, w], lengths [T], swa_offsets [B+1]. */
void orc_combine(const int32_t *raw, const int32_t *seq_lens, const int32_t *cu_q, int64_t b,
                 int32_t ratio, int32_t topk, int32_t c_max, int32_t window, int32_t *indices,
                 int64_t w, int32_t *lengths, int64_t t_rows, int32_t *swa_offsets);

#endif
