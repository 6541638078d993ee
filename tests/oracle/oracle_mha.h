/*
 * oracle_mha.h -- double-precision references for paged MHA/GQA attention and for merging
 * attention states. Written from semantics.md sections 1, 2, 6 and 7 and layouts.md 2.8; shares no
 * code with src/.
 */
#ifndef AK_ORACLE_MHA_H
#define AK_ORACLE_MHA_H

#include <stdint.h>

enum { ORC_KV_BF16 = 0, ORC_KV_F16 = 1, ORC_KV_E4M3 = 2 };
enum { ORC_PT_BLOCK = 0, ORC_PT_TOKEN = 1, ORC_PT_CSR = 2 };

typedef struct orc_mha_problem {
    /* cache: K pool and V pool, [pages, P, h_kv, D] (hnd = 0) or [pages, h_kv, P, D] (hnd = 1) */
    const void *k_pool, *v_pool;
    int64_t k_page_bytes, v_page_bytes; /* page strides */
    int32_t hnd, elem;                  /* elem: ORC_KV_* */
    int32_t num_pages, page_size, h_kv, d_qk, d_v;
    double k_scale, v_scale;            /* fp8 dequantization scales (ignored for bf16/f16) */
    /* queries: bf16 bits [total_q, h_q, d_qk] contiguous; request b owns rows
       q_start[b] .. q_start[b] + q_len[b] */
    const uint16_t *q;
    int64_t total_q;
    int32_t h_q, B;
    const int32_t *q_start, *q_len;
    /* page table (form ORC_PT_*): block/token: table [B, width] + seq_lens [B];
       CSR: indptr [B+1], indices, last_page_len [B] */
    int32_t form;
    const int32_t *table;
    int32_t width;
    const int32_t *seq_lens;
    const int32_t *indptr, *indices, *last_page_len;
    double softmax_scale;
    int32_t causal, window_left;
    const float *sink; /* [h_q] or NULL */
} orc_mha_problem;

/* out [total_q, h_q, d_v], lse [total_q, h_q] (natural log, without the sink). Rows of no
   request and empty rows: out 0, lse +inf. */
void orc_mha(const orc_mha_problem *p, double *out, double *lse);

/* Merge n partials: outs [n, rows, h, d], lses [n, rows, h] in base 2 when in_base2, else e;
   out [rows, h, d], lse [rows, h] in base 2 when out_base2. sink [h] or NULL. */
void orc_merge(int32_t n, int64_t rows, int32_t h, int32_t d, const double *outs,
               const double *lses, int in_base2, const float *sink, double *out, double *lse,
               int out_base2);

#endif
