/*
 * kv_records.h -- byte layouts of the cache records, read by both the C host code and nvcc.
 * Offsets and sizes follow layouts.md; every struct is followed by a size assertion so a layout
 * change cannot slip in unnoticed (bump AK_LAYOUT_FORMAT_VERSION when one is intended).
 */
#ifndef AK_KV_RECORDS_H
#define AK_KV_RECORDS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
#define AK_STATIC_ASSERT(c, m) static_assert(c, m)
#else
#define AK_STATIC_ASSERT(c, m) _Static_assert(c, m)
#endif

/* MLA_BF16: 1152 B per token, AoS. */
typedef struct ak_rec_mla_bf16 {
    uint16_t nope[512]; /* [512] bf16 latent c_kv, also V */
    uint16_t rope[64];  /* [64] bf16 k_pe */
} ak_rec_mla_bf16;
AK_STATIC_ASSERT(sizeof(ak_rec_mla_bf16) == 1152, "MLA_BF16 record is 1152 bytes");

/* MLA_FP8_PERTENSOR: 576 B per token, AoS, one out-of-band scale. */
typedef struct ak_rec_mla_fp8pt {
    uint8_t nope[512]; /* [512] e4m3 */
    uint8_t rope[64];  /* [64] e4m3 */
} ak_rec_mla_fp8pt;
AK_STATIC_ASSERT(sizeof(ak_rec_mla_fp8pt) == 576, "MLA_FP8_PERTENSOR record is 576 bytes");

/* DSA_FP8_BLOCKSCALE: 656 B per token, AoS; every field 16-byte aligned within the record. */
typedef struct ak_rec_dsa656 {
    uint8_t nope[512]; /* [512] e4m3 */
    float scale[4];    /* [4] fp32, scale[i] covers nope dims [128 i, 128 i + 128) */
    uint16_t rope[64]; /* [64] bf16, not quantized */
} ak_rec_dsa656;
AK_STATIC_ASSERT(sizeof(ak_rec_dsa656) == 656, "DSA_FP8_BLOCKSCALE record is 656 bytes");
AK_STATIC_ASSERT(offsetof(ak_rec_dsa656, scale) == 512, "656 scales at byte 512");
AK_STATIC_ASSERT(offsetof(ak_rec_dsa656, rope) == 528, "656 rope at byte 528");

/* DSV4_FP8_UE8M0: per-page SoA. Page of P tokens at byte B: data rows at B + t*576, scale rows
   at B + P*576 + t*8, zero padding up to the page stride (a multiple of 576). */
typedef struct ak_rec_dsv4_data {
    uint8_t nope[448]; /* [448] e4m3 */
    uint16_t rope[64]; /* [64] bf16 */
} ak_rec_dsv4_data;
AK_STATIC_ASSERT(sizeof(ak_rec_dsv4_data) == 576, "DSV4 data row is 576 bytes");
typedef struct ak_rec_dsv4_scale {
    uint8_t e[7]; /* [7] UE8M0, e[j] covers nope dims [64 j, 64 j + 64) */
    uint8_t pad;  /* written as 0 */
} ak_rec_dsv4_scale;
AK_STATIC_ASSERT(sizeof(ak_rec_dsv4_scale) == 8, "DSV4 scale row is 8 bytes");
#define AK_DSV4_DATA_BYTES 576
#define AK_DSV4_SCALE_BYTES 8
#define AK_DSV4_PAGE_ALIGN 576

/* INDEXER_FP8: one 64-token page = 64 keys of 128 e4m3, then 64 fp32 scales. */
#define AK_INDEXER_PAGE 64
typedef struct ak_page_indexer_fp8 {
    uint8_t k[64][128]; /* [64, 128] e4m3 */
    float scale[64];    /* [64] fp32 per token */
} ak_page_indexer_fp8;
AK_STATIC_ASSERT(sizeof(ak_page_indexer_fp8) == 8448, "INDEXER_FP8 page is 8448 bytes");

/* INDEXER_FP4: one 64-token page = 64 keys of 128 e2m1 (element 2i in the low nibble of byte i),
   then 64 x 4 UE8M0 scales (byte g covers elements [32 g, 32 g + 32)). */
typedef struct ak_page_indexer_fp4 {
    uint8_t k[64][64];    /* [64, 64] packed e2m1 pairs */
    uint8_t scale[64][4]; /* [64, 4] UE8M0 */
} ak_page_indexer_fp4;
AK_STATIC_ASSERT(sizeof(ak_page_indexer_fp4) == 4352, "INDEXER_FP4 page is 4352 bytes");

#endif /* AK_KV_RECORDS_H */
