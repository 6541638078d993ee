/*
 * kv_access.h -- reading one token of a cache, for the CPU backend and simple CUDA kernels.
 * Dequantization follows layouts.md section 4 exactly, so every reader agrees bit for bit:
 *   MLA_BF16            stored bf16 values
 *   MLA_FP8_PERTENSOR   float(q) * k_scale (fp32)
 *   DSA_FP8_BLOCKSCALE  NoPE bf16_rn(float(q) * scale[i]); RoPE the stored bf16
 *   DSV4_FP8_UE8M0      NoPE float(q) * 2^(e - 127) (exact); RoPE the stored bf16
 * Callers check slot validity (rule I1) first; these functions trust the slot.
 */
#ifndef AK_KV_ACCESS_H
#define AK_KV_ACCESS_H

#include "attnkit.h"
#include "common/kv_records.h"
#include "common/numeric.h"

/* Per-tensor scale: a device/host pointer overrides the float; 0 means 1.0. */
AK_HD float ak_kv_k_scale(const ak_cache *c) {
    if (c->k_scale_ptr != NULL) return *c->k_scale_ptr;
    return c->k_scale > 0.0f ? c->k_scale : 1.0f;
}
AK_HD float ak_kv_v_scale(const ak_cache *c) {
    if (c->v_scale_ptr != NULL) return *c->v_scale_ptr;
    return c->v_scale > 0.0f ? c->v_scale : 1.0f;
}

/* Start of the page holding `slot` and the token's offset in it. `stride` is the page stride. */
AK_HD const uint8_t *ak_kv_page_of(const ak_cache *c, int64_t stride, int32_t slot, int32_t *t) {
    int32_t page = slot / c->page_size;
    *t = slot - page * c->page_size;
    return (const uint8_t *)c->data + (int64_t)page * stride;
}

/* Decodes token `slot` of an MLA layout (1-4) into out[d_qk] f32 (576, or 512 for DSV4). */
AK_HD void ak_kv_decode_mla(const ak_cache *c, int64_t stride, int32_t slot, float *out) {
    int32_t t;
    const uint8_t *page = ak_kv_page_of(c, stride, slot, &t);
    switch (c->layout) {
    case AK_LAYOUT_MLA_BF16: {
        const ak_rec_mla_bf16 *r = (const ak_rec_mla_bf16 *)(page + (int64_t)t * 1152);
        for (int d = 0; d < 512; d++) out[d] = ak_bf16_to_f32(r->nope[d]);
        for (int d = 0; d < 64; d++) out[512 + d] = ak_bf16_to_f32(r->rope[d]);
        break;
    }
    case AK_LAYOUT_MLA_FP8_PERTENSOR: {
        const ak_rec_mla_fp8pt *r = (const ak_rec_mla_fp8pt *)(page + (int64_t)t * 576);
        float s = ak_kv_k_scale(c);
        for (int d = 0; d < 512; d++) out[d] = ak_e4m3_to_f32(r->nope[d]) * s;
        for (int d = 0; d < 64; d++) out[512 + d] = ak_e4m3_to_f32(r->rope[d]) * s;
        break;
    }
    case AK_LAYOUT_DSA_FP8_BLOCKSCALE: {
        const ak_rec_dsa656 *r = (const ak_rec_dsa656 *)(page + (int64_t)t * 656);
        for (int d = 0; d < 512; d++)
            out[d] = ak_bf16_to_f32(ak_f32_to_bf16(ak_e4m3_to_f32(r->nope[d]) * r->scale[d >> 7]));
        for (int d = 0; d < 64; d++) out[512 + d] = ak_bf16_to_f32(r->rope[d]);
        break;
    }
    case AK_LAYOUT_DSV4_FP8_UE8M0: {
        const ak_rec_dsv4_data *r =
            (const ak_rec_dsv4_data *)(page + (int64_t)t * AK_DSV4_DATA_BYTES);
        const ak_rec_dsv4_scale *s =
            (const ak_rec_dsv4_scale *)(page + (int64_t)c->page_size * AK_DSV4_DATA_BYTES +
                                        (int64_t)t * AK_DSV4_SCALE_BYTES);
        for (int d = 0; d < 448; d++) out[d] = ak_e4m3_to_f32(r->nope[d]) * ak_ue8m0_to_f32(s->e[d >> 6]);
        for (int d = 0; d < 64; d++) out[448 + d] = ak_bf16_to_f32(r->rope[d]);
        break;
    }
    default:
        break;
    }
}

/* ak_kv_decode_mla with e4m3 values read from lut[256] (lut[b] = ak_e4m3_to_f32(b)): the same
   arithmetic, in loops without per-byte conversions, for the CPU codec and attention. */
AK_HD void ak_kv_decode_mla_lut(const ak_cache *c, int64_t stride, int32_t slot, const float *lut,
                                float *out) {
    int32_t t;
    const uint8_t *page = ak_kv_page_of(c, stride, slot, &t);
    switch (c->layout) {
    case AK_LAYOUT_DSA_FP8_BLOCKSCALE: {
        const ak_rec_dsa656 *r = (const ak_rec_dsa656 *)(page + (int64_t)t * 656);
        for (int i = 0; i < 4; i++) {
            float sc = r->scale[i];
            for (int d = 128 * i; d < 128 * i + 128; d++)
                out[d] = ak_bf16_round_f32(lut[r->nope[d]] * sc);
        }
        for (int d = 0; d < 64; d++) out[512 + d] = ak_bf16_to_f32(r->rope[d]);
        break;
    }
    case AK_LAYOUT_DSV4_FP8_UE8M0: {
        const ak_rec_dsv4_data *r =
            (const ak_rec_dsv4_data *)(page + (int64_t)t * AK_DSV4_DATA_BYTES);
        const ak_rec_dsv4_scale *e =
            (const ak_rec_dsv4_scale *)(page + (int64_t)c->page_size * AK_DSV4_DATA_BYTES +
                                        (int64_t)t * AK_DSV4_SCALE_BYTES);
        for (int j = 0; j < 7; j++) {
            float sc = ak_ue8m0_to_f32(e->e[j]);
            for (int d = 64 * j; d < 64 * j + 64; d++) out[d] = lut[r->nope[d]] * sc;
        }
        for (int d = 0; d < 64; d++) out[448 + d] = ak_bf16_to_f32(r->rope[d]);
        break;
    }
    case AK_LAYOUT_MLA_FP8_PERTENSOR: {
        const ak_rec_mla_fp8pt *r = (const ak_rec_mla_fp8pt *)(page + (int64_t)t * 576);
        float sc = ak_kv_k_scale(c);
        for (int d = 0; d < 512; d++) out[d] = lut[r->nope[d]] * sc;
        for (int d = 0; d < 64; d++) out[512 + d] = lut[r->rope[d]] * sc;
        break;
    }
    default: ak_kv_decode_mla(c, stride, slot, out); break;
    }
}

/* INDEXER_FP8 token `slot`: its 128 e4m3 bytes and its fp32 scale. */
AK_HD const uint8_t *ak_kv_indexer_fp8(const ak_cache *c, int64_t stride, int32_t slot,
                                       float *scale) {
    int32_t t;
    const ak_page_indexer_fp8 *p = (const ak_page_indexer_fp8 *)ak_kv_page_of(c, stride, slot, &t);
    *scale = p->scale[t];
    return p->k[t];
}

/* MHA element offset (in elements) of (slot, head) for the K pool (dim = head_dim) or the V pool
   (dim = head_dim_v), with the pool's page stride in bytes. */
AK_HD int64_t ak_kv_mha_offset(const ak_cache *c, int64_t stride_bytes, int32_t dim, int32_t slot,
                               int32_t head) {
    int32_t page = slot / c->page_size, t = slot - page * c->page_size;
    int64_t esz = c->elem_dtype == AK_DTYPE_E4M3 ? 1 : 2;
    int64_t base = (int64_t)page * (stride_bytes / esz);
    if (c->layout == AK_LAYOUT_MHA_NHD) return base + ((int64_t)t * c->h_kv + head) * dim;
    return base + ((int64_t)head * c->page_size + t) * dim;
}

/* Decodes one MHA element at element offset `off` of a pool. */
AK_HD float ak_kv_mha_elem(const ak_cache *c, const void *pool, int64_t off, float scale) {
    switch (c->elem_dtype) {
    case AK_DTYPE_BF16: return ak_bf16_to_f32(((const uint16_t *)pool)[off]);
    case AK_DTYPE_F16: return ak_f16_to_f32(((const uint16_t *)pool)[off]);
    default: return ak_e4m3_to_f32(((const uint8_t *)pool)[off]) * scale;
    }
}

#endif /* AK_KV_ACCESS_H */
