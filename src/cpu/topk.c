/*
 * cpu/topk.c -- exact top-k over fp32 logit rows (semantics.md 9.1, rule T1) with the index
 * transform fused in. One row per work item; per row a radix select over an order-preserving
 * uint32 key finds the k-th largest key in three histogram passes (11 + 11 + 10 bits), then one
 * positional scan emits every key above the threshold and the first threshold-equal keys. The
 * result is deterministic in both modes: ties go to the smaller position and the output is sorted
 * ascending by position. O(len) per row, 32 KiB of stack, nothing written into the logits.
 */
#include <string.h>

#include "cpu/cpu.h"

#define TOPK_DIGIT_BITS 11
#define TOPK_BINS (1 << TOPK_DIGIT_BITS)

/* Order-preserving key: larger float -> larger key; every NaN -> 0, below -inf (0x007fffff);
   -0 and +0 share one key so they tie. Branch-free: the signs of logits are random. */
static inline uint32_t topk_key(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    u = u == 0x80000000u ? 0u : u;
    uint32_t flip = (uint32_t)((int32_t)u >> 31) | 0x80000000u;
    uint32_t key = u ^ flip;
    return (u & 0x7fffffffu) > 0x7f800000u ? 0u : key;
}

/* Writes the k positions of the largest keys of x[0..len) (len > k), ascending, into out.
   Four interleaved histograms break the store-to-load chains on hot bins. */
static void topk_select(const float *x, int64_t len, int32_t k, int32_t *out) {
    static const int shifts[3] = {21, 10, 0};
    static const uint32_t dmasks[3] = {0x7ffu, 0x7ffu, 0x3ffu};
    uint32_t hist[4][TOPK_BINS];
    uint32_t prefix = 0, mask = 0;
    int64_t need = k; /* how many of the keys matching `prefix` still have to be taken */
    for (int pass = 0; pass < 3; pass++) {
        int sh = shifts[pass];
        uint32_t dm = dmasks[pass];
        memset(hist, 0, sizeof hist);
        int64_t i = 0;
        for (; i + 4 <= len; i += 4)
            for (int l = 0; l < 4; l++) {
                uint32_t key = topk_key(x[i + l]);
                hist[l][(key >> sh) & dm] += (key & mask) == prefix;
            }
        for (; i < len; i++) {
            uint32_t key = topk_key(x[i]);
            hist[0][(key >> sh) & dm] += (key & mask) == prefix;
        }
        int64_t above = 0;
        uint32_t d = dm;
        for (;; d--) { /* the digit holding the need-th largest key */
            int64_t h = (int64_t)hist[0][d] + hist[1][d] + hist[2][d] + hist[3][d];
            if (above + h >= need || d == 0) break;
            above += h;
        }
        need -= above;
        prefix |= d << sh;
        mask |= dm << sh;
    }
    /* prefix is the k-th largest key; `need` of its copies are taken, by smaller position */
    int32_t n = 0;
    for (int64_t i = 0; i < len && n < k; i++) {
        uint32_t key = topk_key(x[i]);
        if (key >= prefix) {
            if (key == prefix) {
                if (need == 0) continue;
                need--;
            }
            out[n++] = (int32_t)i;
        }
    }
}

typedef struct topk_job {
    const ak_tensor *logits;     /* [rows, width] f32 */
    const ak_tensor *lengths;    /* [rows] int32 */
    const ak_tensor *row_starts; /* [rows] int32 or NULL */
    int32_t k;
    const ak_cpu_tf *plan;
    ak_tensor *out; /* [rows, k] int32 */
} topk_job;

static void topk_item(void *arg, int64_t t, int32_t thread) {
    topk_job *j = (topk_job *)arg;
    int64_t width = j->logits->shape[1];
    int64_t start = j->row_starts ? ak_i32_at(j->row_starts, t) : 0;
    int64_t len = ak_i32_at(j->lengths, t);
    if (len < 0) len = 0;
    if (len > width - start) len = width - start; /* clamped to the row window */
    int32_t *out = (int32_t *)j->out->data + t * j->out->strides[0];
    if (len <= j->k) {
        for (int32_t i = 0; i < j->k; i++)
            out[i] = i < len ? i : -1;
    } else {
        const float *x = (const float *)j->logits->data + t * j->logits->strides[0] + start;
        topk_select(x, len, j->k, out);
    }
    if (j->plan->kind != AK_TRANSFORM_NONE || j->plan->cu_q != NULL)
        ak_cpu_transform_row(j->plan, t, out, out, j->k);
}

ak_status ak_cpu_topk(ak_context *ctx, const ak_tensor *logits, const ak_tensor *lengths,
                      const ak_tensor *row_starts, int32_t k, int32_t deterministic,
                      const ak_transform *tf, ak_tensor *out) {
    const char *fn = "ak_topk";
    int64_t rows = logits->shape[0], width = logits->shape[1];
    for (int64_t t = 0; row_starts != NULL && t < rows; t++) {
        int64_t s = ak_i32_at(row_starts, t);
        if (s < 0 || s > width)
            return ak_fail(AK_ERR_INVALID_ARGUMENT,
                           "%s: row_starts[%lld] is %lld, expected 0..%lld (logits width)", fn,
                           (long long)t, (long long)s, (long long)width);
    }
    ak_cpu_tf plan;
    AK_TRY(ak_cpu_transform_prepare(fn, tf, &plan));
    topk_job j = {logits, lengths, row_starts, k, &plan, out};
    ak_parallel_for(ctx, rows, topk_item, &j);
    return AK_OK;
}
