/*
 * attn_row.h -- the per-row attention core shared by the CPU MLA decode and sparse prefill
 * (semantics.md 2): a group of G query heads attends to one list of keys, streamed in fixed chunks
 * of AK_ATTN_CHUNK decoded rows. Each key row is decoded once and used by all G heads.
 *
 * Precision: q and keys in fp32, logits are fp32 dot products (16 independent partial sums, added
 * in a fixed order, so the loop vectorizes without -ffast-math and the result never depends on the
 * thread count), the softmax keeps a running max per head and fp64 sums of exp, P.V accumulates in
 * fp32. Chunk boundaries depend only on the key list, so results are bitwise reproducible.
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
#define AK_ATTN_MAX_G 64  /* query heads per work item */
#define AK_ATTN_DV 512    /* value width of every MLA layout */

/* Per-thread scratch of one work item, carved from the caller's workspace. */
typedef struct ak_attn_scratch {
    float *q;      /* [G, d_qk] f32 query rows of the group */
    float *keys;   /* [AK_ATTN_CHUNK, d_qk] f32 decoded key rows; V = dims 0..511 */
    float *logit;  /* [G, AK_ATTN_CHUNK] f32 scaled logits, then probabilities */
    float *acc;    /* [G, 512] f32 unnormalized output */
    float *m;      /* [G] f32 running max */
    double *sum;   /* [G] f64 running sum of exp(s - m) */
    int32_t n;     /* keys in the current chunk */
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
    s.n = 0;
    return s;
}

/* Group size for h_q heads: whole heads per item up to 64 (128 heads = two items, like the two
   64-head CTAs of FlashMLA). */
static inline int32_t ak_attn_group(int64_t h_q) {
    return h_q < AK_ATTN_MAX_G ? (int32_t)h_q : AK_ATTN_MAX_G;
}

/* Loads q rows [g, d_qk] bf16 (head stride hs elements) into s->q and clears the state. */
static inline void ak_attn_begin(ak_attn_scratch *s, const uint16_t *q, int64_t hs, int32_t g,
                                 int32_t d_qk) {
    for (int32_t h = 0; h < g; h++)
        for (int32_t d = 0; d < d_qk; d++) s->q[(size_t)h * d_qk + d] = ak_bf16_to_f32(q[h * hs + d]);
    memset(s->acc, 0, (size_t)g * AK_ATTN_DV * sizeof(float));
    for (int32_t h = 0; h < g; h++) {
        s->m[h] = -INFINITY;
        s->sum[h] = 0.0;
    }
    s->n = 0;
}

/* Fixed-order fp32 dot product: 16 independent lanes (vectorizable), then a fixed tree. */
static inline float ak_attn_dot(const float *a, const float *b, int32_t n) {
    float l[16] = {0};
    for (int32_t d = 0; d < n; d += 16)
        for (int32_t j = 0; j < 16; j++) l[j] += a[d + j] * b[d + j];
    for (int32_t w = 8; w >= 1; w >>= 1)
        for (int32_t j = 0; j < w; j++) l[j] += l[j + w];
    return l[0];
}

/* Folds the s->n decoded keys into the state of every head, then empties the chunk. */
static inline void ak_attn_flush(ak_attn_scratch *s, int32_t g, int32_t d_qk, float scale) {
    int32_t n = s->n;
    if (n == 0) return;
    for (int32_t h = 0; h < g; h++) {
        const float *qh = s->q + (size_t)h * d_qk;
        float *lg = s->logit + (size_t)h * AK_ATTN_CHUNK;
        float mx = s->m[h];
        for (int32_t c = 0; c < n; c++) {
            lg[c] = scale * ak_attn_dot(qh, s->keys + (size_t)c * d_qk, d_qk);
            mx = lg[c] > mx ? lg[c] : mx;
        }
        float *acc = s->acc + (size_t)h * AK_ATTN_DV;
        if (mx > s->m[h]) {
            /* A new max rescales what was accumulated (nothing yet when the old max is -inf). */
            float alpha = s->m[h] == -INFINITY ? 0.0f : (float)exp((double)s->m[h] - (double)mx);
            s->sum[h] *= (double)alpha;
            for (int32_t d = 0; d < AK_ATTN_DV; d++) acc[d] *= alpha;
            s->m[h] = mx;
        }
        double sum = 0.0;
        for (int32_t c = 0; c < n; c++) {
            double p = exp((double)lg[c] - (double)mx);
            sum += p;
            lg[c] = (float)p;
        }
        s->sum[h] += sum;
        for (int32_t c = 0; c < n; c++) {
            const float *v = s->keys + (size_t)c * d_qk;
            float p = lg[c];
            for (int32_t d = 0; d < AK_ATTN_DV; d++) acc[d] += p * v[d];
        }
    }
    s->n = 0;
}

/* Slot of the next key row in the chunk; flushes first when the chunk is full. */
static inline float *ak_attn_next_key(ak_attn_scratch *s, int32_t g, int32_t d_qk, float scale) {
    if (s->n == AK_ATTN_CHUNK) ak_attn_flush(s, g, d_qk, scale);
    return s->keys + (size_t)(s->n++) * d_qk;
}

/* Decodes a bf16 key row [d_qk]. */
static inline void ak_attn_key_bf16(float *dst, const uint16_t *src, int32_t d_qk) {
    for (int32_t d = 0; d < d_qk; d++) dst[d] = ak_bf16_to_f32(src[d]);
}

/* Where the results of one work item go. `sink` may be NULL. Element strides in elements. */
typedef struct ak_attn_dst {
    void *out;               /* first head's row of out, [g, 512] with head stride out_hs */
    int64_t out_hs;
    int32_t out_bf16;        /* 1: bf16, 0: f32 */
    float *lse;              /* first head's lse, head stride lse_hs; NULL = not wanted */
    int64_t lse_hs;
    float *max_logits;       /* as lse; NULL = not wanted */
    int64_t ml_hs;
    const float *sink;       /* first head's sink value, head stride sink_hs; NULL = none */
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
        /* out = acc / sum, then the sink: out / (1 + exp(sink - lse)) = acc / (sum + exp(sink - m)) */
        double denom = sum;
        if (!empty && o->sink != NULL) denom += exp((double)o->sink[h * o->sink_hs] - m);
        float inv = empty ? 0.0f : (float)(1.0 / denom);
        const float *acc = s->acc + (size_t)h * AK_ATTN_DV;
        if (o->out_bf16) {
            uint16_t *dst = (uint16_t *)o->out + h * o->out_hs;
            for (int32_t d = 0; d < AK_ATTN_DV; d++) dst[d] = ak_f32_to_bf16(acc[d] * inv);
        } else {
            float *dst = (float *)o->out + h * o->out_hs;
            for (int32_t d = 0; d < AK_ATTN_DV; d++) dst[d] = acc[d] * inv;
        }
        if (o->lse != NULL) o->lse[h * o->lse_hs] = (float)lse;
        if (o->max_logits != NULL) o->max_logits[h * o->ml_hs] = s->m[h];
    }
}

#endif /* AK_CPU_ATTN_ROW_H */
