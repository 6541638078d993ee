/*
 * attn_row.h -- the per-row attention core shared by the CPU MLA decode and sparse prefill
 * (semantics.md 2): a group of G query heads attends to one list of keys, streamed in fixed chunks
 * of AK_ATTN_CHUNK decoded rows. Each key row is decoded once and used by all G heads.
 *
 * Precision: q and keys in fp32, logits are fp32 dot products (8 independent partial sums per
 * (head, key), added in a fixed tree, so the loops vectorize without -ffast-math), the softmax keeps
 * a running max per head and fp64 sums of exp, P.V accumulates in fp32 in key order. Chunk
 * boundaries depend only on the key list and a head's arithmetic does not depend on its group or
 * thread, so results are bitwise reproducible for any thread count.
 */
#ifndef AK_CPU_ATTN_ROW_H
#define AK_CPU_ATTN_ROW_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "common/internal.h"
#include "common/kv_access.h"
#include "common/numeric.h"

#define AK_ATTN_CHUNK 32  /* keys decoded per step: [32, 576] f32 = 72 KiB, stays in L2 */
#define AK_ATTN_MAX_G 128 /* query heads per work item */
#define AK_ATTN_DV 512    /* value width of every MLA layout */

/* Per-thread scratch of one work item, carved from the caller's workspace. */
typedef struct ak_attn_scratch {
    float *q;     /* [G, d_qk] f32 query rows of the group */
    float *keys;  /* [AK_ATTN_CHUNK, d_qk] f32 decoded key rows; V = dims 0..511 */
    float *logit; /* [G, AK_ATTN_CHUNK] f32 scaled logits, then probabilities */
    float *acc;   /* [G, 512] f32 unnormalized output */
    float *m;     /* [G] f32 running max */
    double *sum;  /* [G] f64 running sum of exp(s - m) */
    float *e4m3;  /* [256] f32 value of every e4m3 byte (table for the key decoder) */
    int32_t n;    /* keys in the current chunk */
} ak_attn_scratch;

/* Bytes of one thread's scratch (64-byte aligned pieces). */
static inline size_t ak_attn_scratch_bytes(int32_t g, int32_t d_qk) {
    size_t a = 64, n = 0;
    n += ((size_t)g * d_qk * 4 + a - 1) / a * a;
    n += ((size_t)AK_ATTN_CHUNK * d_qk * 4 + a - 1) / a * a;
    n += ((size_t)g * AK_ATTN_CHUNK * 4 + a - 1) / a * a;
    n += ((size_t)g * AK_ATTN_DV * 4 + a - 1) / a * a;
    n += ((size_t)g * 4 + a - 1) / a * a;
    n += ((size_t)g * 8 + a - 1) / a * a;
    n += 256 * 4;
    return n;
}

static inline ak_attn_scratch ak_attn_scratch_at(void *base, int32_t g, int32_t d_qk) {
    size_t a = 64;
    char *p = (char *)base;
    ak_attn_scratch s;
    s.q = (float *)p;
    p += ((size_t)g * d_qk * 4 + a - 1) / a * a;
    s.keys = (float *)p;
    p += ((size_t)AK_ATTN_CHUNK * d_qk * 4 + a - 1) / a * a;
    s.logit = (float *)p;
    p += ((size_t)g * AK_ATTN_CHUNK * 4 + a - 1) / a * a;
    s.acc = (float *)p;
    p += ((size_t)g * AK_ATTN_DV * 4 + a - 1) / a * a;
    s.m = (float *)p;
    p += ((size_t)g * 4 + a - 1) / a * a;
    s.sum = (double *)p;
    p += ((size_t)g * 8 + a - 1) / a * a;
    s.e4m3 = (float *)p;
    s.n = 0;
    return s;
}

/* Heads per work item: all of them (up to 128), so each key row is decoded once per query row,
   unless that leaves fewer than two items per thread; then the heads are split (down to 16 per
   item). Grouping never changes the arithmetic of a head, so results do not depend on it. */
static inline int32_t ak_attn_group(int64_t h_q, int64_t rows, int32_t threads) {
    int64_t g = h_q < AK_ATTN_MAX_G ? h_q : AK_ATTN_MAX_G;
    while (g > 16 && rows * ((h_q + g - 1) / g) < 2 * (int64_t)threads)
        g = (g + 1) / 2;
    return (int32_t)g;
}

/* Loads q rows [g, d_qk] bf16 (head stride hs elements) into s->q and clears the state. */
static inline void ak_attn_begin(ak_attn_scratch *s, const uint16_t *q, int64_t hs, int32_t g,
                                 int32_t d_qk) {
    for (int32_t h = 0; h < g; h++)
        for (int32_t d = 0; d < d_qk; d++)
            s->q[(size_t)h * d_qk + d] = ak_bf16_to_f32(q[h * hs + d]);
    memset(s->acc, 0, (size_t)g * AK_ATTN_DV * sizeof(float));
    for (int32_t h = 0; h < g; h++) {
        s->m[h] = -INFINITY;
        s->sum[h] = 0.0;
    }
    for (int32_t b = 0; b < 256; b++)
        s->e4m3[b] = ak_e4m3_to_f32((uint8_t)b);
    s->n = 0;
}

/* x86-64: an AVX2 clone of the hot loops, picked at load time; without FMA (and C11's default
   -ffp-contract=off in GCC) both clones round identically, so results do not depend on it. */
#if defined(__x86_64__) && defined(__linux__) && defined(__GNUC__) && !defined(__clang__)
#define AK_ATTN_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define AK_ATTN_CLONES
#endif

/* 8 fp32 lanes (GCC/Clang vector extension). Lane-wise arithmetic only, so the rounding is the
   same on every instruction set. ak_v8f_mem is the same vector at any alignment, for loads and
   stores; registers use ak_v8f. */
typedef float ak_v8f __attribute__((vector_size(32)));
typedef float ak_v8f_mem __attribute__((vector_size(32), aligned(4), may_alias));
#define AK_V8(p) (*(const ak_v8f_mem *)(p))

/* Sum of the 8 lanes in a fixed tree (8 -> 4 -> 2 -> 1). */
static inline __attribute__((always_inline)) float ak_v8_sum(const ak_v8f *t) {
    float l[8];
    memcpy(l, t, sizeof l);
    for (int32_t w = 4; w >= 1; w >>= 1)
        for (int32_t j = 0; j < w; j++)
            l[j] += l[j + w];
    return l[0];
}

/* Logits of nh (1 or 2) heads against 4 keys: 8 independent fp32 lanes per (head, key), each q and
   k segment loaded once for the block, then ak_v8_sum. The rounding of a (head, key) pair does not
   depend on nh. */
static inline __attribute__((always_inline)) void
ak_attn_dots(const float *q, int32_t nh, const float *k, int32_t d_qk, float *res0, float *res1) {
    const ak_v8f z = {0, 0, 0, 0, 0, 0, 0, 0};
    ak_v8f a0 = z, a1 = z, a2 = z, a3 = z, b0 = z, b1 = z, b2 = z, b3 = z;
    const float *k1 = k + d_qk, *k2 = k1 + d_qk, *k3 = k2 + d_qk, *q1 = q + d_qk;
    for (int32_t d = 0; d < d_qk; d += 8) {
        ak_v8f x0 = AK_V8(k + d), x1 = AK_V8(k1 + d), x2 = AK_V8(k2 + d), x3 = AK_V8(k3 + d);
        ak_v8f qa = AK_V8(q + d);
        a0 += qa * x0;
        a1 += qa * x1;
        a2 += qa * x2;
        a3 += qa * x3;
        if (nh == 2) {
            ak_v8f qb = AK_V8(q1 + d);
            b0 += qb * x0;
            b1 += qb * x1;
            b2 += qb * x2;
            b3 += qb * x3;
        }
    }
    res0[0] = ak_v8_sum(&a0);
    res0[1] = ak_v8_sum(&a1);
    res0[2] = ak_v8_sum(&a2);
    res0[3] = ak_v8_sum(&a3);
    if (nh == 2) {
        res1[0] = ak_v8_sum(&b0);
        res1[1] = ak_v8_sum(&b1);
        res1[2] = ak_v8_sum(&b2);
        res1[3] = ak_v8_sum(&b3);
    }
}

/* acc_h += p_h[c] v_c for nh (1 or 2) heads and 4 keys, added in key order. */
static inline __attribute__((always_inline)) void ak_attn_pv(float *acc0, float *acc1, int32_t nh,
                                                             const float *p0, const float *p1,
                                                             const float *v, int32_t d_qk) {
    const float *v1 = v + d_qk, *v2 = v1 + d_qk, *v3 = v2 + d_qk;
    for (int32_t d = 0; d < AK_ATTN_DV; d += 8) {
        ak_v8f x0 = AK_V8(v + d), x1 = AK_V8(v1 + d), x2 = AK_V8(v2 + d), x3 = AK_V8(v3 + d);
        ak_v8f_mem *o0 = (ak_v8f_mem *)(acc0 + d);
        *o0 = (((*o0 + p0[0] * x0) + p0[1] * x1) + p0[2] * x2) + p0[3] * x3;
        if (nh == 2) {
            ak_v8f_mem *o1 = (ak_v8f_mem *)(acc1 + d);
            *o1 = (((*o1 + p1[0] * x0) + p1[1] * x1) + p1[2] * x2) + p1[3] * x3;
        }
    }
}

/* Folds the s->n decoded keys into the state of every head, then empties the chunk. Keys are
   taken 4 at a time; a partial chunk is padded with copies of its last key whose probabilities
   are set to 0 (the copies are real, finite rows, so 0 * v is 0). */
static AK_ATTN_CLONES void ak_attn_flush_impl(ak_attn_scratch *s, int32_t g, int32_t d_qk,
                                              float scale) {
    int32_t n = s->n, n4 = (n + 3) & ~3;
    for (int32_t c = n; c < n4; c++)
        memcpy(s->keys + (size_t)c * d_qk, s->keys + (size_t)(n - 1) * d_qk,
               (size_t)d_qk * sizeof(float));
    /* logits, two heads at a time */
    for (int32_t h = 0; h < g; h += 2) {
        float *lg = s->logit + (size_t)h * AK_ATTN_CHUNK;
        const float *qh = s->q + (size_t)h * d_qk;
        /* one loop per case rather than a test per step keeps the accumulators in registers */
        if (h + 1 < g) {
            for (int32_t c = 0; c < n4; c += 4)
                ak_attn_dots(qh, 2, s->keys + (size_t)c * d_qk, d_qk, lg + c,
                             lg + AK_ATTN_CHUNK + c);
        } else {
            for (int32_t c = 0; c < n4; c += 4)
                ak_attn_dots(qh, 1, s->keys + (size_t)c * d_qk, d_qk, lg + c, NULL);
        }
    }
    /* online softmax per head: running max, fp64 sums of exp */
    for (int32_t h = 0; h < g; h++) {
        float *lg = s->logit + (size_t)h * AK_ATTN_CHUNK;
        float mx = s->m[h];
        for (int32_t c = 0; c < n; c++) {
            lg[c] *= scale;
            mx = lg[c] > mx ? lg[c] : mx;
        }
        if (mx > s->m[h]) {
            /* A new max rescales what was accumulated (nothing yet when the old max is -inf). */
            float alpha = s->m[h] == -INFINITY ? 0.0f : (float)exp((double)s->m[h] - (double)mx);
            float *acc = s->acc + (size_t)h * AK_ATTN_DV;
            s->sum[h] *= (double)alpha;
            for (int32_t d = 0; d < AK_ATTN_DV; d++)
                acc[d] *= alpha;
            s->m[h] = mx;
        }
        double sum = 0.0;
        for (int32_t c = 0; c < n; c++) {
            double p = exp((double)lg[c] - (double)mx);
            sum += p;
            lg[c] = (float)p;
        }
        for (int32_t c = n; c < n4; c++)
            lg[c] = 0.0f;
        s->sum[h] += sum;
    }
    /* P.V, two heads at a time */
    for (int32_t h = 0; h < g; h += 2) {
        float *acc = s->acc + (size_t)h * AK_ATTN_DV;
        const float *lg = s->logit + (size_t)h * AK_ATTN_CHUNK;
        if (h + 1 < g) {
            for (int32_t c = 0; c < n4; c += 4)
                ak_attn_pv(acc, acc + AK_ATTN_DV, 2, lg + c, lg + AK_ATTN_CHUNK + c,
                           s->keys + (size_t)c * d_qk, d_qk);
        } else {
            for (int32_t c = 0; c < n4; c += 4)
                ak_attn_pv(acc, NULL, 1, lg + c, NULL, s->keys + (size_t)c * d_qk, d_qk);
        }
    }
    s->n = 0;
}

static inline void ak_attn_flush(ak_attn_scratch *s, int32_t g, int32_t d_qk, float scale) {
    if (s->n > 0) ak_attn_flush_impl(s, g, d_qk, scale);
}

/* Slot of the next key row in the chunk; flushes first when the chunk is full. */
static inline float *ak_attn_next_key(ak_attn_scratch *s, int32_t g, int32_t d_qk, float scale) {
    if (s->n == AK_ATTN_CHUNK) ak_attn_flush(s, g, d_qk, scale);
    return s->keys + (size_t)(s->n++) * d_qk;
}

/* Decodes token `slot` into out[d_qk] with the work item's e4m3 table (kv_access.h).
   The caller applied rule I1. */
static inline void ak_attn_decode_key(const ak_attn_scratch *s, const ak_cache *c, int64_t stride,
                                      int32_t slot, float *out) {
    ak_kv_decode_mla_lut(c, stride, slot, s->e4m3, out);
}

/* Decodes a bf16 key row [d_qk]. */
static inline void ak_attn_key_bf16(float *dst, const uint16_t *src, int32_t d_qk) {
    for (int32_t d = 0; d < d_qk; d++)
        dst[d] = ak_bf16_to_f32(src[d]);
}

/* Where the results of one work item go. `sink` may be NULL. Element strides in elements. */
typedef struct ak_attn_dst {
    void *out; /* first head's row of out, [g, 512] with head stride out_hs */
    int64_t out_hs;
    int32_t out_bf16; /* 1: bf16, 0: f32 */
    float *lse;       /* first head's lse, head stride lse_hs; NULL = not wanted */
    int64_t lse_hs;
    float *max_logits; /* as lse; NULL = not wanted */
    int64_t ml_hs;
    const float *sink; /* first head's sink value, head stride sink_hs; NULL = none */
    int64_t sink_hs;
} ak_attn_dst;

/* Normalizes and writes every head of the group (semantics.md 2 steps 3-5). */
static inline void ak_attn_end(ak_attn_scratch *s, int32_t g, int32_t d_qk, float scale,
                               const ak_attn_dst *o) {
    ak_attn_flush(s, g, d_qk, scale);
    for (int32_t h = 0; h < g; h++) {
        int empty = s->m[h] == -INFINITY;
        double m = s->m[h], sum = s->sum[h];
        double lse = empty ? INFINITY : m + log(sum);
        /* out = acc / sum, then the sink: out / (1 + exp(sink - lse)) = acc / (sum + exp(sink - m))
         */
        double denom = sum;
        if (!empty && o->sink != NULL) denom += exp((double)o->sink[h * o->sink_hs] - m);
        float inv = empty ? 0.0f : (float)(1.0 / denom);
        const float *acc = s->acc + (size_t)h * AK_ATTN_DV;
        if (o->out_bf16) {
            uint16_t *dst = (uint16_t *)o->out + h * o->out_hs;
            for (int32_t d = 0; d < AK_ATTN_DV; d++)
                dst[d] = ak_f32_to_bf16(acc[d] * inv);
        } else {
            float *dst = (float *)o->out + h * o->out_hs;
            for (int32_t d = 0; d < AK_ATTN_DV; d++)
                dst[d] = acc[d] * inv;
        }
        if (o->lse != NULL) o->lse[h * o->lse_hs] = (float)lse;
        if (o->max_logits != NULL) o->max_logits[h * o->ml_hs] = s->m[h];
    }
}

#endif /* AK_CPU_ATTN_ROW_H */
