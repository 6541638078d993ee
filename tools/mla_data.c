/* mla_data.c -- see mla_data.h. */
#include "mla_data.h"

#include <math.h>
#include <string.h>

#include "common/numeric.h"

uint64_t ak_mla_rand(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static uint16_t rand_bf16(uint64_t *s) {
    /* sign, exponent 2^-8..2^-1, random mantissa: values in (-1, 1), never 0 or NaN */
    uint64_t r = ak_mla_rand(s);
    uint16_t e = (uint16_t)(119 + r % 8), m = (uint16_t)((r >> 8) & 0x7f);
    return (uint16_t)(((r >> 16) & 1) << 15 | e << 7 | m);
}

static uint8_t rand_e4m3(uint64_t *s) {
    uint64_t r = ak_mla_rand(s);
    if ((r & 31) == 0) return 0;
    uint8_t e = (uint8_t)(4 + (r >> 8) % 5), m = (uint8_t)((r >> 16) & 7);
    return (uint8_t)(((r >> 24) & 1) << 7 | e << 3 | m);
}

static void put16(uint8_t *p, uint16_t v) {
    memcpy(p, &v, 2);
}

void ak_mla_data_token(uint8_t *pool, ak_layout layout, int64_t page_stride, int32_t page_size,
                       int64_t slot, uint64_t seed) {
    uint64_t s = seed ^ ((uint64_t)slot * 0xd1b54a32d192ed03ull);
    int64_t page = slot / page_size, t = slot % page_size;
    uint8_t *base = pool + page * page_stride;
    switch (layout) {
    case AK_LAYOUT_MLA_BF16:
        for (int d = 0; d < 576; d++)
            put16(base + t * 1152 + 2 * d, rand_bf16(&s));
        break;
    case AK_LAYOUT_MLA_FP8_PERTENSOR:
        for (int d = 0; d < 576; d++)
            base[t * 576 + d] = rand_e4m3(&s);
        break;
    case AK_LAYOUT_DSA_FP8_BLOCKSCALE: {
        uint8_t *r = base + t * 656;
        for (int d = 0; d < 512; d++)
            r[d] = rand_e4m3(&s);
        for (int i = 0; i < 4; i++) {
            float f = 0.5f / (float)(1u << (ak_mla_rand(&s) % 3));
            memcpy(r + 512 + 4 * i, &f, 4);
        }
        for (int d = 0; d < 64; d++)
            put16(r + 528 + 2 * d, rand_bf16(&s));
        break;
    }
    case AK_LAYOUT_DSV4_FP8_UE8M0: {
        uint8_t *r = base + t * 576, *sc = base + (int64_t)page_size * 576 + t * 8;
        for (int d = 0; d < 448; d++)
            r[d] = rand_e4m3(&s);
        for (int d = 0; d < 64; d++)
            put16(r + 448 + 2 * d, rand_bf16(&s));
        for (int j = 0; j < 7; j++)
            sc[j] = (uint8_t)(126 - ak_mla_rand(&s) % 3);
        sc[7] = 0;
        break;
    }
    default: break;
    }
}

/* N(0, sd^2) clamped to +-1 and rounded to bf16 (Box-Muller on two uniforms in (0, 1]). */
static float anchor(uint64_t *s, double sd) {
    double u1 = ((double)(ak_mla_rand(s) >> 11) + 1.0) * 0x1.0p-53;
    double u2 = (double)(ak_mla_rand(s) >> 11) * 0x1.0p-53;
    double v = sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2) * sd;
    v = v > 1.0 ? 1.0 : v < -1.0 ? -1.0 : v;
    return ak_bf16_to_f32(ak_f32_to_bf16((float)v));
}

static float tile_scale(const float *x, int n, int pow2) {
    float amax = 0.0f;
    for (int d = 0; d < n; d++)
        amax = fmaxf(amax, fabsf(x[d]));
    float sc = fmaxf(amax / 448.0f, 1e-4f);
    return pow2 ? ak_pow2_f32(ak_ceil_log2_f32(sc)) : sc;
}

void ak_mla_data_token_anchor(uint8_t *pool, ak_layout layout, int64_t page_stride, int32_t page_size,
                              int64_t slot, uint64_t seed, float k_scale, ak_mla_scales scales) {
    uint64_t s = seed ^ ((uint64_t)slot * 0xd1b54a32d192ed03ull);
    int64_t page = slot / page_size, t = slot % page_size;
    uint8_t *base = pool + page * page_stride;
    float x[576];
    for (int d = 0; d < 576; d++)
        x[d] = anchor(&s, 0.1);
    switch (layout) {
    case AK_LAYOUT_MLA_BF16:
        for (int d = 0; d < 576; d++)
            put16(base + t * 1152 + 2 * d, ak_f32_to_bf16(x[d]));
        break;
    case AK_LAYOUT_MLA_FP8_PERTENSOR:
        for (int d = 0; d < 576; d++)
            base[t * 576 + d] = ak_f32_to_e4m3(x[d] / k_scale);
        break;
    case AK_LAYOUT_DSA_FP8_BLOCKSCALE: {
        uint8_t *r = base + t * 656;
        for (int i = 0; i < 4; i++) {
            float sc = tile_scale(x + 128 * i, 128, scales == AK_MLA_SCALES_POW2 || slot % 2 == 0);
            for (int d = 128 * i; d < 128 * i + 128; d++)
                r[d] = ak_f32_to_e4m3(x[d] / sc);
            memcpy(r + 512 + 4 * i, &sc, 4);
        }
        for (int d = 0; d < 64; d++)
            put16(r + 528 + 2 * d, ak_f32_to_bf16(x[512 + d]));
        break;
    }
    case AK_LAYOUT_DSV4_FP8_UE8M0: {
        uint8_t *r = base + t * 576, *sc = base + (int64_t)page_size * 576 + t * 8;
        for (int j = 0; j < 7; j++) {
            int32_t e = 127 + ak_ceil_log2_f32(tile_scale(x + 64 * j, 64, 1));
            e = e < 1 ? 1 : e > 254 ? 254 : e;
            sc[j] = (uint8_t)e;
            for (int d = 64 * j; d < 64 * j + 64; d++)
                r[d] = ak_f32_to_e4m3(x[d] / ak_pow2_f32(e - 127));
        }
        sc[7] = 0;
        for (int d = 0; d < 64; d++)
            put16(r + 448 + 2 * d, ak_f32_to_bf16(x[448 + d]));
        break;
    }
    default: break;
    }
}

void ak_mla_data_pool_anchor(uint8_t *img, ak_layout layout, int64_t page_stride, int32_t page_size,
                             int64_t pages, uint64_t seed, float k_scale) {
    for (int64_t s = 0; s < pages * page_size; s++)
        ak_mla_data_token_anchor(img, layout, page_stride, page_size, s, seed, k_scale, AK_MLA_SCALES_POW2);
}

void ak_mla_data_bf16_anchor(uint16_t *dst, int64_t n, uint64_t seed) {
    uint64_t s = seed;
    for (int64_t i = 0; i < n; i++)
        dst[i] = ak_f32_to_bf16(anchor(&s, 1.0));
}

void ak_mla_data_bf16(uint16_t *dst, int64_t n, uint64_t seed) {
    uint64_t s = seed;
    for (int64_t i = 0; i < n; i++)
        dst[i] = rand_bf16(&s);
}

void ak_mla_data_distinct(int32_t *out, int32_t k, int32_t n, int32_t *perm, uint64_t *state) {
    for (int32_t i = 0; i < n; i++)
        perm[i] = i;
    for (int32_t i = 0; i < k; i++) {
        int32_t j = i + (int32_t)(ak_mla_rand(state) % (uint64_t)(n - i)), t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
        out[i] = perm[i];
    }
}
