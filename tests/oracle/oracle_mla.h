/*
 * oracle_mla.h -- double-precision references for MLA decode (dense and sparse) and sparse prefill
 * (semantics.md 2-5). Cache tokens are decoded from the byte layouts of layouts.md 2.1-2.4 with the
 * oracle.h number decoders; nothing is shared with src/. All arrays are contiguous row-major.
 */
#ifndef AK_ORACLE_MLA_H
#define AK_ORACLE_MLA_H

#include <stdint.h>

/* A paged MLA pool: layout codes as ak_layout (1 MLA_BF16, 2 MLA_FP8_PERTENSOR,
   3 DSA_FP8_BLOCKSCALE, 4 DSV4_FP8_UE8M0). */
typedef struct orc_pool {
    int32_t layout;
    const uint8_t *data;
    int64_t page_stride; /* bytes */
    int32_t page_size;
    int32_t num_pages;
    double k_scale; /* MLA_FP8_PERTENSOR */
} orc_pool;

/* 576, or 512 for DSV4_FP8_UE8M0. */
int32_t orc_mla_d_qk(int32_t layout);
/* Decodes token `slot` into out[d_qk]; returns 0 (out untouched) when slot is not in
   [0, capacity). */
int orc_mla_token(const orc_pool *p, int64_t slot, double *out);

/* One row of semantics.md 2: q [d_qk] against keys [n, d_qk] (V = dims 0..511); sink NULL = none.
   out [512]; lse (+inf when n == 0) and max_logit (-inf when n == 0). */
void orc_attend_row(const double *q, int32_t d_qk, const double *keys, int64_t n, double scale,
                    const double *sink, double *out, double *lse, double *max_logit);

/* MLA decode (semantics.md 3 and 4). q [b, s_q, h_q, d_qk] bf16 bits. */
typedef struct orc_mla_decode_in {
    int64_t b, s_q, h_q;
    const uint16_t *q;
    const orc_pool *cache;
    double scale;
    /* dense when block_table != NULL */
    const int32_t *block_table; /* [b, max_pages] */
    int64_t max_pages;
    const int32_t *seq_lens; /* [b] */
    int32_t causal;
    /* sparse */
    const int32_t *indices; /* [b, s_q, topk] */
    int64_t topk;
    const int32_t *topk_length; /* NULL, [b] (len_per_row 0) or [b, s_q] (len_per_row 1) */
    int32_t len_per_row;
    const orc_pool *extra; /* NULL = none */
    const int32_t *extra_indices;
    int64_t extra_topk;
    const int32_t *extra_length;
    int32_t extra_len_per_row;
    const float *sink; /* [h_q], NULL = none */
} orc_mla_decode_in;

/* out [b, s_q, h_q, 512], lse [b, s_q, h_q]. */
void orc_mla_decode(const orc_mla_decode_in *in, double *out, double *lse);

/* Sparse prefill (semantics.md 5): flat kv [s_kv, d_qk] bf16 bits, or a paged pool. */
typedef struct orc_sparse_prefill_in {
    int64_t s_q, h_q;
    int32_t d_qk;
    const uint16_t *q;  /* [s_q, h_q, d_qk] */
    const uint16_t *kv; /* [s_kv, d_qk], or NULL with cache set */
    int64_t s_kv;
    const orc_pool *cache;
    const int32_t *indices; /* [s_q, topk] */
    int64_t topk;
    const int32_t *topk_length; /* [s_q] or NULL */
    const float *sink;          /* [h_q] or NULL */
    double scale;
} orc_sparse_prefill_in;

/* out [s_q, h_q, 512], max_logits and lse [s_q, h_q]. */
void orc_sparse_prefill(const orc_sparse_prefill_in *in, double *out, double *max_logits,
                        double *lse);

/* Test-input builder (no library code): writes random valid bytes for token `slot` of a pool:
   bf16 values in [-1, 1); e4m3 bytes of magnitude 2^-3..3.75 (never the NaN code); power-of-two
   scales (656: fp32 2^-1..2^-3; 584: UE8M0 2^-1..2^-3, pad byte 0). */
void orc_mla_fill_token(uint8_t *data, int32_t layout, int64_t page_stride, int32_t page_size,
                        int64_t slot, uint64_t seed);

#endif
