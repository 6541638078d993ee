/*
 * cpu/codec.c -- the CPU codecs: write (quantize and store), gather (dequantize by slot), convert
 * (layout to layout, keeping slot ids) and the cache audit. Quantization follows layouts.md
 * section 3 (rules Q656, Q584, Q132, F1, F2), dequantization section 4 through kv_access.h.
 *
 * Every op checks the values inside its tensors (slots, page ids, finiteness) in a first pass and
 * writes nothing when one is bad; the second pass runs in parallel over rows or source pages, and
 * each output byte has exactly one writer, so results do not depend on the thread count.
 * IEEE arithmetic is required (no -ffast-math): quotients and the e4m3 rounding trick rely on it.
 */
#include "common/internal.h"
#include "common/kv_access.h"
#include "cpu/cpu.h"

#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

/* Rows per parallel item for write and gather: enough work to amortize the claim. */
#define ROWS_PER_ITEM 32

/* ---- element access ---------------------------------------------------------------------------- */

/* Loops over n elements run in blocks of 16 with a fixed trip count, which -O2 vectorizes, then
   a scalar tail. Cache records are read and written with memcpy: AoS page strides may be odd, so
   16- and 32-bit fields need not be aligned. */

/* n bf16 bits at p (any alignment) -> dst[n] f32 */
static void bf16_load(const uint8_t *p, int64_t n, float *dst) {
    uint16_t h[16];
    int64_t i = 0;
    for (; i < (n & ~(int64_t)15); i += 16) {
        memcpy(h, p + 2 * i, 32);
        for (int k = 0; k < 16; k++) dst[i + k] = ak_bf16_to_f32(h[k]);
    }
    for (; i < n; i++) {
        memcpy(h, p + 2 * i, 2);
        dst[i] = ak_bf16_to_f32(h[0]);
    }
}

/* src[n] f32 -> n bf16 (RNE) at p (any alignment) */
static void bf16_store(uint8_t *p, int64_t n, const float *src) {
    uint16_t h[16];
    int64_t i = 0;
    for (; i < (n & ~(int64_t)15); i += 16) {
        for (int k = 0; k < 16; k++) h[k] = ak_f32_to_bf16(src[i + k]);
        memcpy(p + 2 * i, h, 32);
    }
    for (; i < n; i++) {
        h[0] = ak_f32_to_bf16(src[i]);
        memcpy(p + 2 * i, h, 2);
    }
}

/* n values of dtype dt (f32, bf16, f16) at element offset off -> dst[n] f32 */
static void load_f32(const void *base, ak_dtype dt, int64_t off, int32_t n, float *dst) {
    if (dt == AK_DTYPE_F32) {
        memcpy(dst, (const float *)base + off, (size_t)n * 4);
    } else if (dt == AK_DTYPE_BF16) {
        bf16_load((const uint8_t *)((const uint16_t *)base + off), n, dst);
    } else {
        const uint16_t *p = (const uint16_t *)base + off;
        for (int32_t i = 0; i < n; i++) dst[i] = ak_f16_to_f32(p[i]);
    }
}

/* src[n] f32 -> n values of dtype dt (f32, bf16, f16) at element offset off, rounded RNE */
static void store_f32(void *base, ak_dtype dt, int64_t off, int32_t n, const float *src) {
    if (dt == AK_DTYPE_F32) {
        memcpy((float *)base + off, src, (size_t)n * 4);
    } else if (dt == AK_DTYPE_BF16) {
        bf16_store((uint8_t *)((uint16_t *)base + off), n, src);
    } else {
        uint16_t *p = (uint16_t *)base + off;
        for (int32_t i = 0; i < n; i++) p[i] = ak_f32_to_f16(src[i]);
    }
}

/* 1 when all n values (f32, bf16 or f16) at element offset off are finite. The exponent field is
   all ones exactly when adding one unit to it carries into the sign position; OR-ing those sums
   is an integer reduction the vectorizer accepts. */
static int all_finite(const void *base, ak_dtype dt, int64_t off, int64_t n) {
    int64_t i = 0;
    if (dt == AK_DTYPE_F32) {
        const uint8_t *p = (const uint8_t *)base + 4 * off;
        uint32_t w[16], acc = 0;
        for (; i < (n & ~(int64_t)15); i += 16) {
            memcpy(w, p + 4 * i, 64);
            for (int k = 0; k < 16; k++) acc |= (w[k] & 0x7f800000u) + 0x00800000u;
        }
        for (; i < n; i++) {
            memcpy(w, p + 4 * i, 4);
            acc |= (w[0] & 0x7f800000u) + 0x00800000u;
        }
        return (acc & 0x80000000u) == 0;
    }
    const uint8_t *p = (const uint8_t *)base + 2 * off;
    uint16_t h[16];
    uint32_t acc = 0, m = dt == AK_DTYPE_BF16 ? 0x7f80u : 0x7c00u, one = m & (0u - m);
    for (; i < (n & ~(int64_t)15); i += 16) {
        memcpy(h, p + 2 * i, 32);
        for (int k = 0; k < 16; k++) acc |= ((uint32_t)h[k] & m) + one;
    }
    for (; i < n; i++) {
        memcpy(h, p + 2 * i, 2);
        acc |= ((uint32_t)h[0] & m) + one;
    }
    return (acc & 0x8000u) == 0;
}

/* Largest |x| of n finite values: a maximum over the magnitude bits (monotonic for floats >= 0),
   an integer reduction the vectorizer accepts. */
static float amax_of(const float *x, int32_t n) {
    int32_t m = 0;
    for (int32_t i = 0; i < n; i++) {
        int32_t a = (int32_t)(ak_f32_bits(x[i]) & 0x7fffffffu);
        m = a > m ? a : m;
    }
    return ak_f32_from_bits((uint32_t)m);
}

/* ak_f32_to_e4m3 without branches, so the loops vectorize (RNE, saturating to +-448, NaN to
   0x7f); checked equal to it on every fp32 bit pattern. Normals round on the float bits;
   subnormals (below 2^-6) round |x| * 2^9 to an integer by adding 2^23 (exact: |x| * 2^9 <= 8,
   and the default rounding mode is to nearest-even). */
static inline uint8_t e4m3_enc(float x) {
    int32_t u = (int32_t)ak_f32_bits(x); /* signed lanes: SSE2 has no unsigned compares */
    int32_t sign = (u >> 24) & 0x80, a = u & 0x7fffffff;
    int32_t cn = ((a + 0x7ffff + ((a >> 20) & 1)) >> 20) - 960; /* (exp - 120) << 3 | mantissa */
    int32_t as = a < 0x3c800000 ? a : 0x3c800000; /* keeps the float path in [0, 8] */
    /* |x| 2^9 + 2^23 rounds to an integer (ulp 1); its low mantissa bits are that integer */
    int32_t cs = (int32_t)ak_f32_bits(ak_f32_from_bits((uint32_t)as) * 512.0f + 8388608.0f) - 0x4b000000;
    /* selects as masks: a branch would keep the float ops conditional, which -ftrapping-math
       forbids the vectorizer to speculate */
    int32_t sub = -(int32_t)(a < 0x3c800000), sat = -(int32_t)(a > 0x43e00000),
            nan = -(int32_t)(a > 0x7f800000);
    int32_t c = (cs & sub) | (cn & ~sub);
    c = (0x7e & sat) | (c & ~sat);
    c = (0x7f & nan) | (c & ~nan);
    return (uint8_t)(sign | c);
}

/* q = e4m3(x / s) with an IEEE fp32 quotient. For a power-of-two s the product x * (1/s) is the
   same correctly rounded value as x / s, and much cheaper. */
static void quant_e4m3(const float *x, int32_t n, float s, uint8_t *q) {
    uint32_t sb = ak_f32_bits(s);
    int pow2 = (sb & 0x7fffffu) == 0 && ((sb >> 23) & 0xffu) > 1u && ((sb >> 23) & 0xffu) < 253u;
    float inv = 1.0f / s;
    int32_t i = 0;
    /* blocks of 16 with a fixed trip count, which -O2 vectorizes */
    if (pow2) {
        for (; i < (n & ~(int64_t)15); i += 16)
            for (int32_t k = 0; k < 16; k++) q[i + k] = e4m3_enc(x[i + k] * inv);
    } else {
        for (; i < (n & ~(int64_t)15); i += 16)
            for (int32_t k = 0; k < 16; k++) q[i + k] = e4m3_enc(x[i + k] / s);
    }
    for (; i < n; i++) q[i] = e4m3_enc(pow2 ? x[i] * inv : x[i] / s);
}

static uint8_t ue8m0_clamp(int32_t k) { /* 2^k as a UE8M0 byte, kept in [1, 254] (rule F2) */
    int32_t e = k + 127;
    return (uint8_t)(e < 1 ? 1 : e > 254 ? 254 : e);
}

/* ---- per-token encoders (x holds the token's d_qk values in f32) -------------------------------- */

static void enc_mla_bf16(uint8_t *rec, const float *x) { /* 1152 B: 576 bf16 */
    bf16_store(rec, 576, x);
}

static void enc_mla_fp8pt(uint8_t *rec, const float *x, float k_scale) { /* 576 B */
    quant_e4m3(x, 576, k_scale, rec);
}

/* Rule Q656: per 128-dim tile, s = 2^ceil(log2(max(amax/448, 1e-4))) or unrounded (FP32). */
static float scale_656(float amax, ak_quant_rule rule) {
    if (rule == AK_QUANT_FP32) {
        float t = amax / 448.0f;
        return t >= 1e-4f ? t : 1e-4f;
    }
    return ak_pow2_f32(ak_scale_pow2_exp(amax));
}

static void enc_dsa656(uint8_t *rec, const float *x, ak_quant_rule rule) { /* 656 B */
    for (int i = 0; i < 4; i++) {
        float s = scale_656(amax_of(x + 128 * i, 128), rule);
        memcpy(rec + offsetof(ak_rec_dsa656, scale) + 4 * i, &s, 4);
        quant_e4m3(x + 128 * i, 128, s, rec + 128 * i);
    }
    bf16_store(rec + offsetof(ak_rec_dsa656, rope), 64, x + 512);
}

/* Rule Q584: per 64-dim tile a UE8M0 byte, FlashMLA's rule or SGLang's amax floor. */
static void enc_dsv4(uint8_t *data, uint8_t *scale, const float *x, ak_quant_rule rule) {
    ak_rec_dsv4_data *r = (ak_rec_dsv4_data *)data;
    ak_rec_dsv4_scale *s = (ak_rec_dsv4_scale *)scale;
    for (int j = 0; j < 7; j++) {
        float amax = amax_of(x + 64 * j, 64);
        int32_t k = rule == AK_QUANT_POW2_AMAX_FLOOR ? ak_scale_pow2_amax_floor_exp(amax)
                                                     : ak_scale_pow2_exp(amax);
        uint8_t e = ue8m0_clamp(k);
        s->e[j] = e;
        quant_e4m3(x + 64 * j, 64, ak_pow2_f32((int32_t)e - 127), r->nope + 64 * j);
    }
    s->pad = 0;
    bf16_store((uint8_t *)r->rope, 64, x + 448);
}

/* Rule Q132: s = max(amax, 1e-4)/448, or rounded up to a power of two (POW2). */
static void enc_idx_fp8(uint8_t *key, float *scale, const float *x, ak_quant_rule rule) {
    float a = amax_of(x, 128);
    a = a >= 1e-4f ? a : 1e-4f;
    float s = a / 448.0f;
    if (rule == AK_QUANT_POW2) s = ak_pow2_f32(ak_ceil_log2_f32(s));
    *scale = s;
    quant_e4m3(x, 128, s, key);
}

/* FP4 indexer: per 32 values s = round_up_pow2(max(amax/6, 1e-4)) as UE8M0, e2m1 codes packed
   low nibble first. */
static void enc_idx_fp4(uint8_t *key, uint8_t *scale, const float *x) {
    for (int g = 0; g < 4; g++) {
        float t = amax_of(x + 32 * g, 32) / 6.0f;
        t = t >= 1e-4f ? t : 1e-4f;
        uint8_t e = ue8m0_clamp(ak_ceil_log2_f32(t));
        float s = ak_pow2_f32((int32_t)e - 127);
        scale[g] = e;
        for (int i = 0; i < 16; i++) {
            uint8_t lo = ak_f32_to_e2m1(x[32 * g + 2 * i] / s);
            uint8_t hi = ak_f32_to_e2m1(x[32 * g + 2 * i + 1] / s);
            key[16 * g + i] = (uint8_t)(lo | (hi << 4));
        }
    }
}

/* ---- token addressing ---------------------------------------------------------------------------- */

static uint8_t *page_ptr(const ak_cache *c, int64_t stride, int32_t slot, int32_t *t) {
    int32_t page = slot / c->page_size;
    *t = slot - page * c->page_size;
    return (uint8_t *)c->data + (int64_t)page * stride;
}

/* The byte pieces of one token of a non-MHA layout: AoS records are one piece; SoA layouts have a
   payload row and a scale row. Returns the piece count. */
static int token_pieces(const ak_cache *c, int64_t stride, int32_t slot, uint8_t *p[2],
                        int32_t len[2]) {
    int32_t t;
    uint8_t *page = page_ptr(c, stride, slot, &t);
    int64_t P = c->page_size;
    switch (c->layout) {
    case AK_LAYOUT_MLA_BF16: p[0] = page + (int64_t)t * 1152; len[0] = 1152; return 1;
    case AK_LAYOUT_MLA_FP8_PERTENSOR: p[0] = page + (int64_t)t * 576; len[0] = 576; return 1;
    case AK_LAYOUT_DSA_FP8_BLOCKSCALE: p[0] = page + (int64_t)t * 656; len[0] = 656; return 1;
    case AK_LAYOUT_DSV4_FP8_UE8M0:
        p[0] = page + (int64_t)t * AK_DSV4_DATA_BYTES;
        len[0] = AK_DSV4_DATA_BYTES;
        p[1] = page + P * AK_DSV4_DATA_BYTES + (int64_t)t * AK_DSV4_SCALE_BYTES;
        len[1] = AK_DSV4_SCALE_BYTES;
        return 2;
    case AK_LAYOUT_INDEXER_FP8:
        p[0] = page + (int64_t)t * 128; len[0] = 128;
        p[1] = page + 64 * 128 + (int64_t)t * 4; len[1] = 4;
        return 2;
    case AK_LAYOUT_INDEXER_FP4:
        p[0] = page + (int64_t)t * 64; len[0] = 64;
        p[1] = page + 64 * 64 + (int64_t)t * 4; len[1] = 4;
        return 2;
    default: return 0;
    }
}

/* Bytes of a non-MHA page that belong to tokens; the rest up to the stride is padding. */
static int64_t payload_bytes(const ak_cache *c) {
    switch (c->layout) {
    case AK_LAYOUT_MLA_BF16: return (int64_t)c->page_size * 1152;
    case AK_LAYOUT_MLA_FP8_PERTENSOR: return (int64_t)c->page_size * 576;
    case AK_LAYOUT_DSA_FP8_BLOCKSCALE: return (int64_t)c->page_size * 656;
    case AK_LAYOUT_DSV4_FP8_UE8M0: return (int64_t)c->page_size * 584;
    case AK_LAYOUT_INDEXER_FP8: return 8448;
    case AK_LAYOUT_INDEXER_FP4: return 4352;
    default: return 0;
    }
}

static int is_mha(ak_layout l) { return l == AK_LAYOUT_MHA_NHD || l == AK_LAYOUT_MHA_HND; }

static void e4m3_table(float *lut) {
    for (int b = 0; b < 256; b++) lut[b] = ak_e4m3_to_f32((uint8_t)b);
}

/* ---- write ------------------------------------------------------------------------------------------ */

typedef struct write_job {
    const ak_cache *c;
    int64_t stride;
    const ak_tensor *nope, *rope, *slots;
    int32_t w_nope, w_rope;
    ak_quant_rule rule;
    float k_scale;
    int64_t n;
} write_job;

static void write_rows(void *arg, int64_t item, int32_t thread) {
    const write_job *j = (const write_job *)arg;
    float x[576];
    int64_t r1 = (item + 1) * ROWS_PER_ITEM < j->n ? (item + 1) * ROWS_PER_ITEM : j->n;
    for (int64_t r = item * ROWS_PER_ITEM; r < r1; r++) {
        int32_t slot = ak_i32_at(j->slots, r);
        if (slot < 0) continue; /* -1: padding row (others were rejected) */
        load_f32(j->nope->data, j->nope->dtype, r * j->nope->strides[0], j->w_nope, x);
        if (j->w_rope > 0)
            load_f32(j->rope->data, j->rope->dtype, r * j->rope->strides[0], j->w_rope,
                     x + j->w_nope);
        uint8_t *p[2];
        int32_t len[2];
        token_pieces(j->c, j->stride, slot, p, len);
        switch (j->c->layout) {
        case AK_LAYOUT_MLA_BF16: enc_mla_bf16(p[0], x); break;
        case AK_LAYOUT_MLA_FP8_PERTENSOR: enc_mla_fp8pt(p[0], x, j->k_scale); break;
        case AK_LAYOUT_DSA_FP8_BLOCKSCALE: enc_dsa656(p[0], x, j->rule); break;
        case AK_LAYOUT_DSV4_FP8_UE8M0: enc_dsv4(p[0], p[1], x, j->rule); break;
        case AK_LAYOUT_INDEXER_FP8: {
            float s;
            enc_idx_fp8(p[0], &s, x, j->rule);
            memcpy(p[1], &s, 4);
            break;
        }
        case AK_LAYOUT_INDEXER_FP4: enc_idx_fp4(p[0], p[1], x); break;
        default: break;
        }
    }
}

/* First pass of the writers: slot values (sequential, cheap), then the finiteness of the rows
   that will be stored (parallel over row chunks; each chunk reports its first bad row). */
typedef struct rowcheck_job {
    const ak_tensor *slots, *t[2];
    int64_t elems[2], n;
    int64_t *first_bad; /* [chunks] row * 2 + tensor, -1 = clean */
} rowcheck_job;

static void rowcheck_chunk(void *arg, int64_t item, int32_t thread) {
    const rowcheck_job *j = (const rowcheck_job *)arg;
    int64_t r1 = (item + 1) * ROWS_PER_ITEM < j->n ? (item + 1) * ROWS_PER_ITEM : j->n;
    j->first_bad[item] = -1;
    for (int64_t r = item * ROWS_PER_ITEM; r < r1; r++) {
        if (ak_i32_at(j->slots, r) == -1) continue;
        for (int k = 0; k < 2; k++) {
            const ak_tensor *t = j->t[k];
            if (t == NULL) continue;
            /* rows of 3-D MHA tensors are [h, D] blocks with their own head stride */
            int64_t heads = t->ndim == 3 ? t->shape[1] : 1, w = j->elems[k] / heads;
            for (int64_t h = 0; h < heads; h++) {
                int64_t off = r * t->strides[0] + (t->ndim == 3 ? h * t->strides[1] : 0);
                if (!all_finite(t->data, t->dtype, off, w)) {
                    j->first_bad[item] = 2 * r + k;
                    return;
                }
            }
        }
    }
}

static ak_status check_rows(ak_context *ctx, const char *fn, const ak_tensor *slots, int64_t cap,
                            const ak_tensor *a, const char *an, int64_t a_row_elems,
                            const ak_tensor *b, const char *bn, int64_t b_row_elems) {
    int64_t n = slots->shape[0];
    for (int64_t r = 0; r < n; r++) {
        int32_t s = ak_i32_at(slots, r);
        if (s == -1) continue;
        if ((uint64_t)(int64_t)s >= (uint64_t)cap)
            return ak_fail(AK_ERR_INVALID_ARGUMENT,
                           "%s: slots[%lld] is %d, outside [0, %lld) (capacity); -1 skips a row",
                           fn, (long long)r, (int)s, (long long)cap);
    }
    int64_t chunks = (n + ROWS_PER_ITEM - 1) / ROWS_PER_ITEM;
    rowcheck_job j = {slots, {a, b}, {a_row_elems, b_row_elems}, n, NULL};
    j.first_bad = (int64_t *)malloc((size_t)chunks * sizeof(int64_t));
    if (j.first_bad == NULL)
        return ak_fail(AK_ERR_OUT_OF_MEMORY, "%s: no memory for %lld row-check flags", fn,
                       (long long)chunks);
    ak_parallel_for(ctx, chunks, rowcheck_chunk, &j);
    int64_t bad = -1;
    for (int64_t i = 0; i < chunks && bad < 0; i++) bad = j.first_bad[i];
    free(j.first_bad);
    if (bad >= 0)
        return ak_fail(AK_ERR_NONFINITE, "%s: %s row %lld (slot %d) holds a non-finite value", fn,
                       (bad & 1) ? bn : an, (long long)(bad / 2), (int)ak_i32_at(slots, bad / 2));
    return AK_OK;
}

ak_status ak_cpu_cache_write(ak_context *ctx, const ak_cache *cache, const ak_tensor *nope,
                             const ak_tensor *rope, const ak_tensor *slots, ak_quant_rule rule) {
    write_job j;
    j.c = cache;
    j.stride = ak_cache_stride(cache);
    j.nope = nope;
    j.rope = rope;
    j.slots = slots;
    j.w_nope = (int32_t)nope->shape[1];
    j.w_rope = rope != NULL ? (int32_t)rope->shape[1] : 0;
    j.rule = rule;
    j.k_scale = ak_kv_k_scale(cache);
    j.n = slots->shape[0];
    AK_TRY(check_rows(ctx, "ak_cache_write", slots, ak_cache_capacity(cache), nope, "nope", j.w_nope,
                      rope, "rope", j.w_rope));
    ak_parallel_for(ctx, (j.n + ROWS_PER_ITEM - 1) / ROWS_PER_ITEM, write_rows, &j);
    return AK_OK;
}

/* ---- MHA write ------------------------------------------------------------------------------------- */

typedef struct mha_job {
    const ak_cache *c;
    const ak_tensor *k, *v, *slots;
    int64_t n;
} mha_job;

/* One head vector x[dim] f32 -> pool element type at element offset off. */
static void mha_store(const ak_cache *c, void *pool, int64_t off, int32_t dim, const float *x,
                      float scale) {
    if (c->elem_dtype == AK_DTYPE_E4M3) quant_e4m3(x, dim, scale, (uint8_t *)pool + off);
    else store_f32(pool, c->elem_dtype, off, dim, x);
}

static void mha_load(const ak_cache *c, const void *pool, int64_t off, int32_t dim, float *x,
                     float scale, const float *lut) {
    if (c->elem_dtype == AK_DTYPE_E4M3) {
        const uint8_t *q = (const uint8_t *)pool + off;
        for (int32_t d = 0; d < dim; d++) x[d] = lut[q[d]] * scale;
    } else {
        load_f32(pool, c->elem_dtype, off, dim, x);
    }
}

static void mha_write_rows(void *arg, int64_t item, int32_t thread) {
    const mha_job *j = (const mha_job *)arg;
    const ak_cache *c = j->c;
    float x[512];
    int64_t ks = ak_cache_stride(c), vs = ak_cache_v_stride(c);
    float sk = ak_kv_k_scale(c), sv = ak_kv_v_scale(c);
    int64_t r1 = (item + 1) * ROWS_PER_ITEM < j->n ? (item + 1) * ROWS_PER_ITEM : j->n;
    for (int64_t r = item * ROWS_PER_ITEM; r < r1; r++) {
        int32_t slot = ak_i32_at(j->slots, r);
        if (slot < 0) continue;
        for (int32_t h = 0; h < c->h_kv; h++) {
            load_f32(j->k->data, j->k->dtype, r * j->k->strides[0] + h * j->k->strides[1],
                     c->head_dim, x);
            mha_store(c, c->data, ak_kv_mha_offset(c, ks, c->head_dim, slot, h), c->head_dim, x,
                      sk);
            load_f32(j->v->data, j->v->dtype, r * j->v->strides[0] + h * j->v->strides[1],
                     c->head_dim_v, x);
            mha_store(c, c->v_data, ak_kv_mha_offset(c, vs, c->head_dim_v, slot, h),
                      c->head_dim_v, x, sv);
        }
    }
}

ak_status ak_cpu_mha_cache_write(ak_context *ctx, const ak_cache *cache, const ak_tensor *k,
                                 const ak_tensor *v, const ak_tensor *slots) {
    mha_job j = {cache, k, v, slots, slots->shape[0]};
    AK_TRY(check_rows(ctx, "ak_mha_cache_write", slots, ak_cache_capacity(cache), k, "k",
                      (int64_t)cache->h_kv * cache->head_dim, v, "v",
                      (int64_t)cache->h_kv * cache->head_dim_v));
    ak_parallel_for(ctx, (j.n + ROWS_PER_ITEM - 1) / ROWS_PER_ITEM, mha_write_rows, &j);
    return AK_OK;
}

/* ---- gather ---------------------------------------------------------------------------------------- */

typedef struct gather_job {
    const ak_cache *c;
    int64_t stride;
    const ak_tensor *slots, *out, *out_scale, *v_out;
    int64_t n, cap;
    float lut[256]; /* e4m3 byte -> f32 */
} gather_job;

static void gather_rows(void *arg, int64_t item, int32_t thread) {
    const gather_job *j = (const gather_job *)arg;
    const ak_cache *c = j->c;
    const ak_tensor *o = j->out;
    float x[576];
    int64_t r1 = (item + 1) * ROWS_PER_ITEM < j->n ? (item + 1) * ROWS_PER_ITEM : j->n;
    int32_t w = (int32_t)o->shape[1];
    for (int64_t r = item * ROWS_PER_ITEM; r < r1; r++) {
        int32_t slot = ak_i32_at(j->slots, r);
        int valid = (uint64_t)(int64_t)slot < (uint64_t)j->cap; /* rule I1 */
        int64_t off = r * o->strides[0];
        if (o->dtype == AK_DTYPE_E4M3) { /* INDEXER_FP8 raw bytes and scale (C10) */
            uint8_t *dst = (uint8_t *)o->data + off;
            float s = 0.0f;
            if (valid) memcpy(dst, ak_kv_indexer_fp8(c, j->stride, slot, &s), 128);
            else memset(dst, 0, 128);
            ((float *)j->out_scale->data)[r * j->out_scale->strides[0]] = s;
            continue;
        }
        if (!valid) {
            memset(x, 0, sizeof x);
        } else if (c->layout == AK_LAYOUT_INDEXER_FP8) {
            float s;
            const uint8_t *q = ak_kv_indexer_fp8(c, j->stride, slot, &s);
            for (int d = 0; d < 128; d++) x[d] = j->lut[q[d]] * s;
        } else if (c->layout == AK_LAYOUT_INDEXER_FP4) {
            uint8_t *p[2];
            int32_t len[2];
            token_pieces(c, j->stride, slot, p, len);
            for (int d = 0; d < 128; d++) {
                uint8_t b = p[0][d >> 1];
                x[d] = ak_e2m1_to_f32((d & 1) ? (uint8_t)(b >> 4) : (uint8_t)(b & 15u)) *
                       ak_ue8m0_to_f32(p[1][d >> 5]);
            }
        } else {
            ak_kv_decode_mla_lut(c, j->stride, slot, j->lut, x);
        }
        store_f32(o->data, o->dtype, off, w, x);
    }
}

static void mha_gather_rows(void *arg, int64_t item, int32_t thread) {
    const gather_job *j = (const gather_job *)arg;
    const ak_cache *c = j->c;
    float x[512];
    int64_t ks = ak_cache_stride(c), vs = ak_cache_v_stride(c);
    float sk = ak_kv_k_scale(c), sv = ak_kv_v_scale(c);
    int64_t r1 = (item + 1) * ROWS_PER_ITEM < j->n ? (item + 1) * ROWS_PER_ITEM : j->n;
    for (int64_t r = item * ROWS_PER_ITEM; r < r1; r++) {
        int32_t slot = ak_i32_at(j->slots, r);
        int valid = (uint64_t)(int64_t)slot < (uint64_t)j->cap;
        for (int32_t h = 0; h < c->h_kv; h++) {
            for (int pool = 0; pool < 2; pool++) {
                const ak_tensor *o = pool == 0 ? j->out : j->v_out;
                if (o == NULL) continue;
                int32_t dim = pool == 0 ? c->head_dim : c->head_dim_v;
                if (valid)
                    mha_load(c, pool == 0 ? c->data : c->v_data,
                             ak_kv_mha_offset(c, pool == 0 ? ks : vs, dim, slot, h), dim, x,
                             pool == 0 ? sk : sv, j->lut);
                else
                    memset(x, 0, sizeof(float) * (size_t)dim);
                store_f32(o->data, o->dtype, r * o->strides[0] + h * o->strides[1], dim, x);
            }
        }
    }
}

ak_status ak_cpu_cache_gather(ak_context *ctx, const ak_cache *cache, const ak_tensor *slots,
                              ak_tensor *out, ak_tensor *out_scale) {
    gather_job j = {cache, ak_cache_stride(cache), slots, out, out_scale, NULL,
                    slots->shape[0], ak_cache_capacity(cache), {0}};
    e4m3_table(j.lut);
    int64_t items = (j.n + ROWS_PER_ITEM - 1) / ROWS_PER_ITEM;
    ak_parallel_for(ctx, items, is_mha(cache->layout) ? mha_gather_rows : gather_rows, &j);
    return AK_OK;
}

ak_status ak_cpu_mha_cache_gather(ak_context *ctx, const ak_cache *cache, const ak_tensor *slots,
                                  ak_tensor *k_out, ak_tensor *v_out) {
    gather_job j = {cache, ak_cache_stride(cache), slots, k_out, NULL, v_out,
                    slots->shape[0], ak_cache_capacity(cache), {0}};
    e4m3_table(j.lut);
    ak_parallel_for(ctx, (j.n + ROWS_PER_ITEM - 1) / ROWS_PER_ITEM, mha_gather_rows, &j);
    return AK_OK;
}

/* ---- convert --------------------------------------------------------------------------------------- */

typedef enum conv_kind {
    CONV_COPY,      /* same non-MHA layout: token bytes copied (re-page, restride) */
    CONV_FP8PT_656, /* C1: NoPE bytes kept, scales = k_scale, RoPE -> bf16 */
    CONV_MLA,       /* dequantize to f32, encode in the destination layout */
    CONV_MHA        /* per head vector: bytes copied (same dtype) or decoded and re-encoded */
} conv_kind;

typedef struct conv_job {
    const ak_cache *src, *dst;
    int64_t s_stride, d_stride, d_vstride;
    const ak_tensor *pages; /* NULL: every source page */
    conv_kind kind;
    ak_quant_rule rule;
    int64_t *first_bad;     /* [items] first non-finite slot per item, -1 = none */
    float lut[256];         /* e4m3 byte -> f32 */
} conv_job;

static int32_t job_page(const conv_job *j, int64_t item) {
    return j->pages == NULL ? (int32_t)item : ak_i32_at(j->pages, item);
}

/* Destination padding of page q: the bytes past the token payload up to the page stride. */
static void zero_padding(const conv_job *j, int64_t q) {
    const ak_cache *d = j->dst;
    if (is_mha(d->layout)) {
        int64_t esz = ak_dtype_size(d->elem_dtype);
        int64_t kmin = (int64_t)d->page_size * d->h_kv * d->head_dim * esz;
        int64_t vmin = (int64_t)d->page_size * d->h_kv * d->head_dim_v * esz;
        memset((uint8_t *)d->data + q * j->d_stride + kmin, 0, (size_t)(j->d_stride - kmin));
        memset((uint8_t *)d->v_data + q * j->d_vstride + vmin, 0, (size_t)(j->d_vstride - vmin));
        return;
    }
    int64_t pay = payload_bytes(d);
    memset((uint8_t *)d->data + q * j->d_stride + pay, 0, (size_t)(j->d_stride - pay));
}

/* Whether the token's source values are finite (only asked for quantizing conversions). */
static int src_token_finite(const conv_job *j, int32_t slot) {
    const ak_cache *s = j->src;
    if (is_mha(s->layout)) {
        int64_t vs = ak_cache_v_stride(s);
        for (int32_t h = 0; h < s->h_kv; h++) {
            if (!all_finite(s->data, s->elem_dtype, ak_kv_mha_offset(s, j->s_stride, s->head_dim, slot, h), s->head_dim) ||
                !all_finite(s->v_data, s->elem_dtype, ak_kv_mha_offset(s, vs, s->head_dim_v, slot, h), s->head_dim_v))
                return 0;
        }
        return 1;
    }
    uint8_t *p[2];
    int32_t len[2];
    token_pieces(s, j->s_stride, slot, p, len);
    if (s->layout == AK_LAYOUT_MLA_BF16) return all_finite(p[0], AK_DTYPE_BF16, 0, 576);
    /* e4m3 payloads: NaN bytes 0x7f / 0xff; 656 also needs finite scales and RoPE */
    int32_t nq = s->layout == AK_LAYOUT_DSA_FP8_BLOCKSCALE ? 512 : 576;
    uint32_t bad = 0;
    for (int32_t i = 0; i < nq; i++) bad |= (p[0][i] & 0x7fu) == 0x7fu;
    if (s->layout == AK_LAYOUT_DSA_FP8_BLOCKSCALE)
        bad |= !all_finite(p[0] + 512, AK_DTYPE_F32, 0, 4) || !all_finite(p[0] + 528, AK_DTYPE_BF16, 0, 64);
    return bad == 0;
}

/* Pass 1 of quantizing conversions: first non-finite source token of the item's page. */
static void conv_check_page(void *arg, int64_t item, int32_t thread) {
    const conv_job *j = (const conv_job *)arg;
    int32_t p = job_page(j, item);
    j->first_bad[item] = -1;
    if (p < 0) return;
    int64_t s0 = (int64_t)p * j->src->page_size;
    for (int64_t s = s0; s < s0 + j->src->page_size; s++) {
        if (!src_token_finite(j, (int32_t)s)) {
            j->first_bad[item] = s;
            return;
        }
    }
}

static void conv_token(const conv_job *j, int32_t slot) {
    const ak_cache *s = j->src, *d = j->dst;
    if (j->kind == CONV_MHA) {
        int64_t svs = ak_cache_v_stride(s);
        float ssk = ak_kv_k_scale(s), ssv = ak_kv_v_scale(s);
        float dsk = ak_kv_k_scale(d), dsv = ak_kv_v_scale(d);
        int64_t esz = ak_dtype_size(s->elem_dtype);
        float x[512];
        for (int32_t h = 0; h < s->h_kv; h++) {
            for (int pool = 0; pool < 2; pool++) {
                int32_t dim = pool == 0 ? s->head_dim : s->head_dim_v;
                const void *sp = pool == 0 ? s->data : s->v_data;
                void *dp = pool == 0 ? d->data : d->v_data;
                int64_t so = ak_kv_mha_offset(s, pool == 0 ? j->s_stride : svs, dim, slot, h);
                int64_t dof = ak_kv_mha_offset(d, pool == 0 ? j->d_stride : j->d_vstride, dim, slot, h);
                if (s->elem_dtype == d->elem_dtype) {
                    memcpy((uint8_t *)dp + dof * esz, (const uint8_t *)sp + so * esz,
                           (size_t)(dim * esz));
                } else {
                    mha_load(s, sp, so, dim, x, pool == 0 ? ssk : ssv, j->lut);
                    mha_store(d, dp, dof, dim, x, pool == 0 ? dsk : dsv);
                }
            }
        }
        return;
    }
    uint8_t *sp[2], *dp[2];
    int32_t slen[2], dlen[2];
    int np = token_pieces(s, j->s_stride, slot, sp, slen);
    token_pieces(d, j->d_stride, slot, dp, dlen);
    if (j->kind == CONV_COPY) {
        for (int i = 0; i < np; i++) memcpy(dp[i], sp[i], (size_t)slen[i]);
        return;
    }
    if (j->kind == CONV_FP8PT_656) {
        float ks = ak_kv_k_scale(s), rope[64];
        memcpy(dp[0], sp[0], 512);
        for (int i = 0; i < 4; i++) memcpy(dp[0] + offsetof(ak_rec_dsa656, scale) + 4 * i, &ks, 4);
        for (int k = 0; k < 64; k++) rope[k] = j->lut[sp[0][512 + k]] * ks;
        bf16_store(dp[0] + offsetof(ak_rec_dsa656, rope), 64, rope);
        return;
    }
    float x[576];
    ak_kv_decode_mla_lut(s, j->s_stride, slot, j->lut, x);
    switch (d->layout) {
    case AK_LAYOUT_MLA_BF16: enc_mla_bf16(dp[0], x); break;
    case AK_LAYOUT_MLA_FP8_PERTENSOR: enc_mla_fp8pt(dp[0], x, ak_kv_k_scale(d)); break;
    case AK_LAYOUT_DSA_FP8_BLOCKSCALE: enc_dsa656(dp[0], x, j->rule); break;
    default: break;
    }
}

/* Pass 2: converts the tokens of one source page and zeroes the padding of every destination
   page whose first slot lies in it (one owner per destination page). */
static void conv_page(void *arg, int64_t item, int32_t thread) {
    const conv_job *j = (const conv_job *)arg;
    int32_t p = job_page(j, item);
    if (p < 0) return;
    int64_t P = j->src->page_size, Pd = j->dst->page_size;
    int64_t s0 = (int64_t)p * P, s1 = s0 + P;
    for (int64_t s = s0; s < s1; s++) conv_token(j, (int32_t)s);
    for (int64_t q = (s0 + Pd - 1) / Pd; q * Pd < s1 && q < j->dst->num_pages; q++)
        zero_padding(j, q);
}

ak_status ak_cpu_cache_convert(ak_context *ctx, const ak_cache *src, const ak_cache *dst,
                               const ak_tensor *pages, ak_quant_rule rule) {
    const char *fn = "ak_cache_convert";
    conv_job j;
    j.src = src;
    j.dst = dst;
    j.s_stride = ak_cache_stride(src);
    j.d_stride = ak_cache_stride(dst);
    j.d_vstride = is_mha(dst->layout) ? ak_cache_v_stride(dst) : 0;
    j.pages = pages;
    j.rule = rule;
    j.first_bad = NULL;
    e4m3_table(j.lut);
    if (is_mha(src->layout)) j.kind = CONV_MHA;
    else if (src->layout == dst->layout) j.kind = CONV_COPY;
    else if (src->layout == AK_LAYOUT_MLA_FP8_PERTENSOR && dst->layout == AK_LAYOUT_DSA_FP8_BLOCKSCALE)
        j.kind = CONV_FP8PT_656;
    else j.kind = CONV_MLA;

    int64_t items = pages == NULL ? src->num_pages : pages->shape[0];
    int64_t dcap = ak_cache_capacity(dst);
    if (pages == NULL) {
        if (ak_cache_capacity(src) > dcap)
            return ak_fail(AK_ERR_INVALID_ARGUMENT,
                           "%s: dst capacity %lld tokens is below the src capacity %lld tokens", fn,
                           (long long)dcap, (long long)ak_cache_capacity(src));
    } else if (items > 0) {
        /* page ids: -1 skips, others in range, each at most once (one writer per byte) */
        uint8_t *seen = (uint8_t *)calloc((size_t)src->num_pages / 8 + 1, 1);
        if (seen == NULL) return ak_fail(AK_ERR_OUT_OF_MEMORY, "%s: no memory for the page set", fn);
        ak_status st = AK_OK;
        for (int64_t i = 0; i < items && st == AK_OK; i++) {
            int32_t p = ak_i32_at(pages, i);
            if (p == -1) continue;
            if ((uint32_t)p >= (uint32_t)src->num_pages)
                st = ak_fail(AK_ERR_INVALID_ARGUMENT,
                             "%s: pages[%lld] is %d, outside [0, %d) (src.num_pages); -1 skips",
                             fn, (long long)i, (int)p, (int)src->num_pages);
            else if (((int64_t)p + 1) * src->page_size > dcap)
                st = ak_fail(AK_ERR_INVALID_ARGUMENT,
                             "%s: pages[%lld] = %d holds slots up to %lld, past the dst capacity "
                             "%lld", fn, (long long)i, (int)p,
                             (long long)(((int64_t)p + 1) * src->page_size - 1), (long long)dcap);
            else if (seen[p >> 3] & (1u << (p & 7)))
                st = ak_fail(AK_ERR_INVALID_ARGUMENT, "%s: pages[%lld] = %d is listed twice", fn,
                             (long long)i, (int)p);
            else
                seen[p >> 3] |= (uint8_t)(1u << (p & 7));
        }
        free(seen);
        AK_TRY(st);
    }
    int quantizes = j.kind == CONV_MLA ? dst->layout != AK_LAYOUT_MLA_BF16
                                       : j.kind == CONV_MHA && dst->elem_dtype == AK_DTYPE_E4M3 &&
                                             src->elem_dtype != AK_DTYPE_E4M3;
    if (quantizes && items > 0) {
        j.first_bad = (int64_t *)malloc((size_t)items * sizeof(int64_t));
        if (j.first_bad == NULL)
            return ak_fail(AK_ERR_OUT_OF_MEMORY, "%s: no memory for %lld page flags", fn,
                           (long long)items);
        ak_parallel_for(ctx, items, conv_check_page, &j);
        for (int64_t i = 0; i < items; i++) {
            if (j.first_bad[i] >= 0) {
                int64_t s = j.first_bad[i];
                free(j.first_bad);
                return ak_fail(AK_ERR_NONFINITE,
                               "%s: src token at slot %lld (%s) holds a non-finite value; "
                               "quantizing it to %s would store garbage", fn, (long long)s,
                               ak_layout_name(src->layout), ak_layout_name(dst->layout));
            }
        }
        free(j.first_bad);
        j.first_bad = NULL;
    }
    ak_parallel_for(ctx, items, conv_page, &j);
    return AK_OK;
}

/* ---- audit ------------------------------------------------------------------------------------------ */

static int e4m3_bad(const uint8_t *q, int32_t n) {
    uint32_t bad = 0;
    for (int32_t i = 0; i < n; i++) bad |= (q[i] & 0x7fu) == 0x7fu;
    return bad != 0;
}

static int scale_bad(const uint8_t *p) { /* fp32 scale must be finite and > 0 */
    float s;
    memcpy(&s, p, 4);
    return !(s > 0.0f) || !ak_isfinite_f32(s);
}

static int ue8m0_bad(const uint8_t *e, int32_t n) {
    for (int32_t i = 0; i < n; i++)
        if (e[i] == 0xffu) return 1;
    return 0;
}

static int token_bad(const ak_cache *c, int64_t stride, int32_t slot) {
    if (is_mha(c->layout)) {
        int64_t vs = ak_cache_v_stride(c);
        for (int32_t h = 0; h < c->h_kv; h++) {
            int64_t ko = ak_kv_mha_offset(c, stride, c->head_dim, slot, h);
            int64_t vo = ak_kv_mha_offset(c, vs, c->head_dim_v, slot, h);
            if (c->elem_dtype == AK_DTYPE_E4M3) {
                if (e4m3_bad((const uint8_t *)c->data + ko, c->head_dim) ||
                    e4m3_bad((const uint8_t *)c->v_data + vo, c->head_dim_v))
                    return 1;
            } else if (!all_finite(c->data, c->elem_dtype, ko, c->head_dim) ||
                       !all_finite(c->v_data, c->elem_dtype, vo, c->head_dim_v)) {
                return 1;
            }
        }
        return 0;
    }
    uint8_t *p[2];
    int32_t len[2];
    token_pieces(c, stride, slot, p, len);
    switch (c->layout) {
    case AK_LAYOUT_MLA_BF16: return !all_finite(p[0], AK_DTYPE_BF16, 0, 576);
    case AK_LAYOUT_MLA_FP8_PERTENSOR: return e4m3_bad(p[0], 576);
    case AK_LAYOUT_DSA_FP8_BLOCKSCALE:
        return e4m3_bad(p[0], 512) || scale_bad(p[0] + 512) || scale_bad(p[0] + 516) ||
               scale_bad(p[0] + 520) || scale_bad(p[0] + 524) ||
               !all_finite(p[0] + 528, AK_DTYPE_BF16, 0, 64);
    case AK_LAYOUT_DSV4_FP8_UE8M0:
        return e4m3_bad(p[0], 448) || !all_finite(p[0] + 448, AK_DTYPE_BF16, 0, 64) ||
               ue8m0_bad(p[1], 7);
    case AK_LAYOUT_INDEXER_FP8: return e4m3_bad(p[0], 128) || scale_bad(p[1]);
    case AK_LAYOUT_INDEXER_FP4: return ue8m0_bad(p[1], 4);
    default: return 0;
    }
}

ak_status ak_cpu_cache_audit(ak_context *ctx, const ak_cache *cache, int32_t first_page,
                             int32_t page_count, int64_t *bad_tokens) {
    int64_t stride = ak_cache_stride(cache), bad = 0, first_bad = -1;
    int64_t s0 = (int64_t)first_page * cache->page_size;
    int64_t s1 = ((int64_t)first_page + page_count) * cache->page_size;
    for (int64_t s = s0; s < s1; s++) {
        if (token_bad(cache, stride, (int32_t)s)) {
            if (first_bad < 0) first_bad = s;
            bad++;
        }
    }
    if (bad_tokens != NULL) *bad_tokens = bad;
    if (bad > 0)
        return ak_fail(AK_ERR_CORRUPT_CACHE,
                       "ak_cache_audit: cache (%s): %lld bad token(s) in pages [%d, %d); first at "
                       "slot %lld (page %lld, offset %lld): NaN payload, UE8M0 0xFF or a "
                       "non-positive / non-finite scale", ak_layout_name(cache->layout),
                       (long long)bad, (int)first_page, (int)(first_page + page_count),
                       (long long)first_bad, (long long)(first_bad / cache->page_size),
                       (long long)(first_bad % cache->page_size));
    return AK_OK;
}
