/* mla_data.h -- random MLA cache records and index lists for `attnkit bench` and `attnkit check`
   (host images, uploaded with devmem.h). Written from layouts.md 2.1-2.4 without the cache writer,
   so the tools do not depend on it. */
#ifndef AK_TOOLS_MLA_DATA_H
#define AK_TOOLS_MLA_DATA_H

#include <stdint.h>

#include "attnkit.h"

/* Small deterministic generator (splitmix64). */
uint64_t ak_mla_rand(uint64_t *state);
/* Writes a random valid record for token `slot` of a host pool image: bf16 values in [-1, 1),
   e4m3 bytes of magnitude 2^-3..3.75 (never NaN), power-of-two scales 2^-1..2^-3. */
void ak_mla_data_token(uint8_t *pool, ak_layout layout, int64_t page_stride, int32_t page_size,
                       int64_t slot, uint64_t seed);
/* Which 656 records ak_mla_data_token_anchor scales by a power of two per 128 dims (the writers'
   rule, FlashMLA's reference quantizer, so the anchors' data): every record (benchmarks), or the
   even slots only, the odd ones taking the unrounded AK_SCALE_FP32 option (tests: both paths). */
typedef enum ak_mla_scales { AK_MLA_SCALES_POW2, AK_MLA_SCALES_MIXED } ak_mla_scales;
/* A record drawn from the anchor distribution of targets.md 2 (FlashMLA's test data): the latent
   ~ N(0, 0.1^2) clamped to +-1 in bf16, quantized with the codec rules of layouts.md 3 (656: a
   scale per 128 dims as `scales` says; 584: UE8M0 per 64; per-tensor: e4m3(x / k_scale)). */
void ak_mla_data_token_anchor(uint8_t *pool, ak_layout layout, int64_t page_stride, int32_t page_size,
                              int64_t slot, uint64_t seed, float k_scale, ak_mla_scales scales);
/* A pool image of `pages` pages of stride page_stride, every token's record as
   ak_mla_data_token_anchor writes it with power-of-two scales (the benchmarks' data). Bytes no
   record covers (V4's page padding) are left as they are: pass a zeroed image. */
void ak_mla_data_pool_anchor(uint8_t *img, ak_layout layout, int64_t page_stride, int32_t page_size,
                             int64_t pages, uint64_t seed, float k_scale);
/* Anchor-distribution queries: N(0, 1) clamped to +-1, in bf16. */
void ak_mla_data_bf16_anchor(uint16_t *dst, int64_t n, uint64_t seed);
/* Random bf16 values in [-1, 1). */
void ak_mla_data_bf16(uint16_t *dst, int64_t n, uint64_t seed);
/* k distinct random values of [0, n) into out (k <= n); perm [n] is scratch. */
void ak_mla_data_distinct(int32_t *out, int32_t k, int32_t n, int32_t *perm, uint64_t *state);

#endif
