/*
 * cpu/indexer.c -- the DSA lightning indexer logits on the CPU (semantics.md 8):
 *   L[i, j] = k_scale[j] * sum_h w[i, h] * relu(sum_d q8[i, h, d] * k8[j, d])
 * in fp32. The dot product runs in 16 fixed lanes reduced by a fixed tree, so the compiler can
 * vectorize it and the rounding never depends on the thread count. Work items are (query row,
 * chunk of output columns); every logit is computed whole by one item.
 */
#include <math.h>

#include "common/kv_access.h"
#include "cpu/cpu.h"

#define IDX_D 128 /* index_head_dim */
#define IDX_MAX_HEADS 64
#define IDX_CHUNK 1024 /* output columns per work item */
#define IDX_LANES 16

/* sum_d q[d] * k[d] over 128 dims in IDX_LANES lanes, then a fixed pairwise tree. */
static inline float idx_dot(const float *q, const float *k) {
    float lane[IDX_LANES] = {0};
    for (int d = 0; d < IDX_D; d += IDX_LANES)
        for (int l = 0; l < IDX_LANES; l++)
            lane[l] += q[d + l] * k[d + l];
    for (int w = IDX_LANES / 2; w > 0; w /= 2)
        for (int l = 0; l < w; l++)
            lane[l] += lane[l + w];
    return lane[0];
}

/* One logit: q [H, 128] f32 (decoded), w [H] f32, k [128] f32 (decoded), its scale. */
static inline float idx_logit(const float *q, const float *w, int32_t h, const float *k,
                              float scale) {
    float acc = 0.0f;
    for (int32_t i = 0; i < h; i++) {
        float s = idx_dot(q + (int64_t)i * IDX_D, k);
        acc += w[i] * (s < 0.0f ? 0.0f : s); /* relu that keeps a NaN visible */
    }
    return scale * acc;
}

/* Decoded query row: e4m3 q (rows of 128 at stride qs_h), weights (stride 1). */
static void idx_load_q(const uint8_t *q, int64_t qs_h, const float *w, int32_t h, float *qf,
                       float *wf) {
    for (int32_t i = 0; i < h; i++) {
        for (int d = 0; d < IDX_D; d++)
            qf[i * IDX_D + d] = ak_e4m3_to_f32(q[i * qs_h + d]);
        wf[i] = w[i];
    }
}

static inline void idx_decode_k(const uint8_t *k, float *kf) {
    for (int d = 0; d < IDX_D; d++)
        kf[d] = ak_e4m3_to_f32(k[d]);
}

/* ---- ragged --------------------------------------------------------------------------------- */

typedef struct ragged_job {
    const ak_tensor *q, *weights, *k, *k_scale, *ks, *ke;
    int32_t compressed, clean;
    ak_tensor *logits; /* [S, width] f32 */
    int64_t chunks;    /* column chunks per row */
} ragged_job;

static void ragged_item(void *arg, int64_t item, int32_t thread) {
    ragged_job *j = (ragged_job *)arg;
    int64_t i = item / j->chunks, c0 = (item % j->chunks) * IDX_CHUNK;
    int64_t width = j->logits->shape[1];
    int64_t c1 = c0 + IDX_CHUNK < width ? c0 + IDX_CHUNK : width;
    int32_t h = (int32_t)j->q->shape[1];
    float qf[IDX_MAX_HEADS * IDX_D], wf[IDX_MAX_HEADS], kf[IDX_D];
    idx_load_q((const uint8_t *)j->q->data + i * j->q->strides[0], j->q->strides[1],
               (const float *)j->weights->data + i * j->weights->strides[0], h, qf, wf);
    int64_t ks = ak_i32_at(j->ks, i), ke = ak_i32_at(j->ke, i);
    float *row = (float *)j->logits->data + i * j->logits->strides[0];
    const uint8_t *kb = (const uint8_t *)j->k->data;
    const float *sc = (const float *)j->k_scale->data;
    for (int64_t c = c0; c < c1; c++) {
        int64_t key = j->compressed ? ks + c : c;
        if (key >= ks && key < ke) {
            idx_decode_k(kb + key * j->k->strides[0], kf);
            row[c] = idx_logit(qf, wf, h, kf, sc[key * j->k_scale->strides[0]]);
        } else if (j->clean) {
            row[c] = -INFINITY;
        }
    }
}

ak_status ak_cpu_indexer_logits_ragged(ak_context *ctx, const ak_tensor *q,
                                       const ak_tensor *weights, const ak_tensor *k,
                                       const ak_tensor *k_scale, const ak_tensor *ks,
                                       const ak_tensor *ke, int32_t compressed,
                                       int32_t clean_logits, ak_tensor *logits) {
    const char *fn = "ak_indexer_logits_ragged";
    int64_t s = q->shape[0], skv = k->shape[0], width = logits->shape[1];
    for (int64_t i = 0; i < s; i++) {
        int64_t a = ak_i32_at(ks, i), e = ak_i32_at(ke, i);
        if (a < 0 || a > skv)
            return ak_fail(AK_ERR_INVALID_ARGUMENT, "%s: ks[%lld] is %lld, expected 0..%lld (S_kv)",
                           fn, (long long)i, (long long)a, (long long)skv);
        if (e > skv)
            return ak_fail(AK_ERR_INVALID_ARGUMENT, "%s: ke[%lld] is %lld, expected <= %lld (S_kv)",
                           fn, (long long)i, (long long)e, (long long)skv);
        if (compressed && e - a > width)
            return ak_fail(AK_ERR_INVALID_ARGUMENT,
                           "%s: ke[%lld] - ks[%lld] = %lld is wider than the compressed logits "
                           "width %lld",
                           fn, (long long)i, (long long)i, (long long)(e - a), (long long)width);
    }
    ragged_job j = {q,          weights,
                    k,          k_scale,
                    ks,         ke,
                    compressed, clean_logits,
                    logits,     (width + IDX_CHUNK - 1) / IDX_CHUNK};
    ak_parallel_for(ctx, s * j.chunks, ragged_item, &j);
    return AK_OK;
}

/* ---- paged ---------------------------------------------------------------------------------- */

typedef struct paged_job {
    const ak_tensor *q;            /* [B, next_n, H, 128] e4m3 */
    const ak_tensor *weights;      /* [B * next_n, H] f32 */
    const ak_cache *cache;         /* INDEXER_FP8, 64-token pages */
    int64_t stride;                /* page stride in bytes */
    const ak_tensor *block_table;  /* [B, max_pages] int32 */
    const ak_tensor *context_lens; /* [B] or [B, next_n] int32 */
    int32_t clean;
    ak_tensor *logits; /* [B * next_n, width] f32 */
    int64_t chunks;
} paged_job;

static void paged_item(void *arg, int64_t item, int32_t thread) {
    paged_job *j = (paged_job *)arg;
    int64_t r = item / j->chunks, c0 = (item % j->chunks) * IDX_CHUNK;
    int64_t next_n = j->q->shape[1], b = r / next_n, i = r % next_n;
    int64_t width = j->logits->shape[1];
    int64_t c1 = c0 + IDX_CHUNK < width ? c0 + IDX_CHUNK : width;
    int32_t h = (int32_t)j->q->shape[2], P = j->cache->page_size;
    float qf[IDX_MAX_HEADS * IDX_D], wf[IDX_MAX_HEADS], kf[IDX_D];
    idx_load_q((const uint8_t *)j->q->data + b * j->q->strides[0] + i * j->q->strides[1],
               j->q->strides[2], (const float *)j->weights->data + r * j->weights->strides[0], h,
               qf, wf);
    const ak_tensor *cl = j->context_lens;
    int64_t len =
        cl->ndim == 1 ? ak_i32_at(cl, b) : ((const int32_t *)cl->data)[b * cl->strides[0] + i];
    if (len < 0) len = 0;
    if (len > width) len = width; /* a length above the row width is clamped */
    const int32_t *bt = (const int32_t *)j->block_table->data + b * j->block_table->strides[0];
    int64_t max_pages = j->block_table->shape[1];
    float *row = (float *)j->logits->data + r * j->logits->strides[0];
    for (int64_t p = c0; p < c1; p++) {
        if (p >= len) {
            if (j->clean) row[p] = -INFINITY;
            continue;
        }
        int64_t pg = p / P;
        /* rule I2: a missing or invalid page masks the positions it covers */
        if (pg >= max_pages || (uint32_t)bt[pg] >= (uint32_t)j->cache->num_pages) {
            row[p] = -INFINITY;
            continue;
        }
        float scale;
        const uint8_t *kb =
            ak_kv_indexer_fp8(j->cache, j->stride, (int32_t)(bt[pg] * P + p % P), &scale);
        idx_decode_k(kb, kf);
        row[p] = idx_logit(qf, wf, h, kf, scale);
    }
}

ak_status ak_cpu_indexer_logits_paged(ak_context *ctx, const ak_tensor *q, const ak_tensor *weights,
                                      const ak_cache *cache, const ak_tensor *block_table,
                                      const ak_tensor *context_lens, int32_t clean_logits,
                                      ak_tensor *logits) {
    int64_t width = logits->shape[1];
    paged_job j = {q,
                   weights,
                   cache,
                   ak_cache_stride(cache),
                   block_table,
                   context_lens,
                   clean_logits,
                   logits,
                   (width + IDX_CHUNK - 1) / IDX_CHUNK};
    ak_parallel_for(ctx, logits->shape[0] * j.chunks, paged_item, &j);
    return AK_OK;
}
