/*
 * merge.c (CPU) -- combines partial attention states over disjoint key sets (semantics.md 7,
 * rules M1 and M2). One work item is one row (all heads); each output element is reduced by one
 * thread in partial order, so results do not depend on the thread count.
 */
#include "cpu/cpu.h"

#include "common/numeric.h"

#include <math.h>

typedef struct merge_job {
    const ak_tensor *outs, *lses, *sink;
    ak_tensor *out, *lse;
    ak_lse_base in_base, out_base;
} merge_job;

/* Element at offset off of an f32 or bf16 value tensor, as fp32. */
static float value_at(const ak_tensor *t, int64_t off) {
    if (t->dtype == AK_DTYPE_F32) return ((const float *)t->data)[off];
    return ak_bf16_to_f32(((const uint16_t *)t->data)[off]);
}

static void merge_row(void *arg, int64_t r, int32_t thread) {
    const merge_job *j = (const merge_job *)arg;
    const ak_tensor *outs = j->outs, *lses = j->lses;
    int64_t n = outs->shape[0], H = outs->shape[2], D = outs->shape[3];
    /* lse inputs in natural log: base 2 values times ln 2 */
    const double to_e = j->in_base == AK_LSE_BASE_2 ? 0.69314718055994530942 : 1.0;
    for (int64_t h = 0; h < H; h++) {
        /* M1: only finite partials carry weight (+-inf marks an empty partial; NaN never counts) */
        double mx = -INFINITY;
        for (int64_t p = 0; p < n; p++) {
            float v = ((const float *)lses->data)[p * lses->strides[0] + r * lses->strides[1] +
                                                  h * lses->strides[2]];
            if (ak_isfinite_f32(v) && v * to_e > mx) mx = v * to_e;
        }
        int64_t o_off = r * j->out->strides[0] + h * j->out->strides[1];
        double lse_e = INFINITY;
        float inv = 0.0f;
        if (mx > -INFINITY) {
            double sum = 0.0;
            for (int64_t p = 0; p < n; p++) {
                float v = ((const float *)lses->data)[p * lses->strides[0] + r * lses->strides[1] +
                                                      h * lses->strides[2]];
                if (ak_isfinite_f32(v)) sum += exp(v * to_e - mx);
            }
            lse_e = mx + log(sum);
            inv = 1.0f;
            if (j->sink != NULL) { /* M2: the sink once, on the merged state */
                double sigma = ((const float *)j->sink->data)[h * j->sink->strides[0]];
                inv = (float)(1.0 / (1.0 + exp(sigma - lse_e)));
            }
        }
        float acc[512];
        for (int64_t d0 = 0; d0 < D; d0 += 512) {
            int64_t w = D - d0 < 512 ? D - d0 : 512;
            for (int64_t d = 0; d < w; d++) acc[d] = 0.0f;
            for (int64_t p = 0; p < n && mx > -INFINITY; p++) {
                float v = ((const float *)lses->data)[p * lses->strides[0] + r * lses->strides[1] +
                                                      h * lses->strides[2]];
                if (!ak_isfinite_f32(v)) continue; /* selection: an empty partial's out is unread */
                float wgt = (float)exp(v * to_e - lse_e);
                int64_t off =
                    p * outs->strides[0] + r * outs->strides[1] + h * outs->strides[2] + d0;
                if (outs->dtype == AK_DTYPE_F32) {
                    const float *x = (const float *)outs->data + off;
                    for (int64_t d = 0; d < w; d++) acc[d] += wgt * x[d];
                } else {
                    for (int64_t d = 0; d < w; d++) acc[d] += wgt * value_at(outs, off + d);
                }
            }
            if (j->out->dtype == AK_DTYPE_F32) {
                float *dst = (float *)j->out->data + o_off + d0;
                for (int64_t d = 0; d < w; d++) dst[d] = acc[d] * inv;
            } else {
                uint16_t *dst = (uint16_t *)j->out->data + o_off + d0;
                for (int64_t d = 0; d < w; d++) dst[d] = ak_f32_to_bf16(acc[d] * inv);
            }
        }
        if (j->lse != NULL) {
            double v = j->out_base == AK_LSE_BASE_2 ? lse_e * 1.44269504088896340736 : lse_e;
            ((float *)j->lse->data)[r * j->lse->strides[0] + h * j->lse->strides[1]] = (float)v;
        }
    }
}

ak_status ak_cpu_merge_states(ak_context *ctx, const ak_tensor *outs, const ak_tensor *lses,
                              ak_lse_base in_base, const ak_tensor *attn_sink, ak_tensor *out,
                              ak_tensor *lse, ak_lse_base out_base) {
    merge_job j = {outs, lses, attn_sink, out, lse, in_base, out_base};
    ak_parallel_for(ctx, out->shape[0], merge_row, &j);
    return AK_OK;
}
