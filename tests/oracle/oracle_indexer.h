/*
 * oracle_indexer.h -- double-precision references for the lightning indexer logits and an exact
 * sort-based top-k (semantics.md 8, 9.1), independent of the library.
 */
#ifndef AK_ORACLE_INDEXER_H
#define AK_ORACLE_INDEXER_H

#include <stdint.h>

/* One logit: q [h, 128] e4m3 bytes (row stride 128), w [h], k [128] e4m3 bytes, key scale. */
double orc_indexer_logit(const uint8_t *q, const float *w, int32_t h, const uint8_t *k,
                         double k_scale);

/* Deterministic top-k of x[0..len) (rule T1): len <= k gives 0..len-1 then -1; otherwise the k
   largest (NaN lowest, ties to the smaller position), written ascending by position. */
void orc_topk(const float *x, int64_t len, int32_t k, int32_t *out);

#endif
