/*
 * sparse_prefill.c -- CPU sparse prefill (semantics.md 5): flat bf16 KV addressed by row numbers,
 * or any paged MLA cache addressed by slot ids and dequantized on the fly. One work item is
 * (query token, group of up to 64 heads); each selected key is decoded once for the group.
 */
#include "cpu/attn_row.h"
#include "cpu/cpu.h"

typedef struct sp_job {
    const ak_sparse_prefill_args *a;
    int64_t h_q;
    int32_t d_qk, g, ngroups;
    int64_t stride;
    char *ws;
    size_t ws_per_thread;
} sp_job;

static void sp_item(void *arg, int64_t item, int32_t thread) {
    const sp_job *j = (const sp_job *)arg;
    const ak_sparse_prefill_args *a = j->a;
    int64_t grp = item % j->ngroups, t = item / j->ngroups;
    int64_t h0 = grp * j->g;
    int32_t g = (int32_t)(j->h_q - h0 < j->g ? j->h_q - h0 : j->g);
    int32_t d_qk = j->d_qk;
    float scale = a->softmax_scale;
    ak_attn_scratch s = ak_attn_scratch_at(j->ws + (size_t)thread * j->ws_per_thread, j->g, d_qk);

    const ak_tensor *q = a->q;
    const uint16_t *qp = (const uint16_t *)q->data + t * q->strides[0] + h0 * q->strides[1];
    ak_attn_begin(&s, qp, q->strides[1], g, d_qk);

    const ak_tensor *idx = a->indices;
    int64_t width = idx->shape[1], n = width;
    if (a->topk_length != NULL) {
        int64_t v = ak_i32_at(a->topk_length, t);
        n = v < 0 ? 0 : (v > width ? width : v);
    }
    const int32_t *row = (const int32_t *)idx->data + t * idx->strides[0];
    if (a->kv != NULL) {
        uint64_t s_kv = (uint64_t)a->kv->shape[0];
        const uint16_t *kv = (const uint16_t *)a->kv->data;
        int64_t ks = a->kv->strides[0];
        for (int64_t k = 0; k < n; k++) {
            int32_t id = row[k];
            if ((uint64_t)(int64_t)id >= s_kv) continue; /* rule I1 */
            ak_attn_key_bf16(ak_attn_next_key(&s, g, d_qk, scale), kv + (int64_t)id * ks, d_qk);
        }
    } else {
        uint64_t cap = (uint64_t)ak_cache_capacity(a->cache);
        for (int64_t k = 0; k < n; k++) {
            int32_t slot = row[k];
            if ((uint64_t)(int64_t)slot >= cap) continue; /* rule I1 */
            ak_attn_decode_key(&s, a->cache, j->stride, slot, ak_attn_next_key(&s, g, d_qk, scale));
        }
    }

    ak_attn_dst o;
    const ak_tensor *out = a->out;
    o.out_bf16 = out->dtype == AK_DTYPE_BF16;
    int64_t ooff = t * out->strides[0] + h0 * out->strides[1];
    o.out =
        o.out_bf16 ? (void *)((uint16_t *)out->data + ooff) : (void *)((float *)out->data + ooff);
    o.out_hs = out->strides[1];
    o.lse = NULL;
    o.lse_hs = 0;
    if (a->lse != NULL) {
        o.lse = (float *)a->lse->data + t * a->lse->strides[0] + h0 * a->lse->strides[1];
        o.lse_hs = a->lse->strides[1];
    }
    o.max_logits = NULL;
    o.ml_hs = 0;
    if (a->max_logits != NULL) {
        o.max_logits = (float *)a->max_logits->data + t * a->max_logits->strides[0] +
                       h0 * a->max_logits->strides[1];
        o.ml_hs = a->max_logits->strides[1];
    }
    o.sink = NULL;
    o.sink_hs = 0;
    if (a->attn_sink != NULL) {
        o.sink = (const float *)a->attn_sink->data + h0 * a->attn_sink->strides[0];
        o.sink_hs = a->attn_sink->strides[0];
    }
    ak_attn_end(&s, g, d_qk, scale, &o);
}

static int32_t sp_group(ak_context *ctx, const ak_sparse_prefill_args *a) {
    return ak_attn_group(a->q->shape[1], a->q->shape[0], ak_context_num_threads(ctx));
}

static size_t per_thread_bytes(ak_context *ctx, const ak_sparse_prefill_args *a) {
    size_t n = ak_attn_scratch_bytes(sp_group(ctx, a), (int32_t)a->q->shape[2]);
    return (n + 63) / 64 * 64;
}

ak_status ak_cpu_sparse_prefill_workspace_size(ak_context *ctx, const ak_sparse_prefill_args *args,
                                               size_t *bytes) {
    /* + 64: the caller's pointer need not be aligned. */
    *bytes = per_thread_bytes(ctx, args) * (size_t)ak_context_num_threads(ctx) + 64;
    return AK_OK;
}

ak_status ak_cpu_sparse_prefill(ak_context *ctx, const ak_sparse_prefill_args *a, void *workspace,
                                size_t workspace_bytes) {
    size_t need;
    AK_TRY(ak_cpu_sparse_prefill_workspace_size(ctx, a, &need));
    if (workspace_bytes < need || workspace == NULL)
        return ak_fail(AK_ERR_WORKSPACE_TOO_SMALL,
                       "ak_sparse_prefill: workspace_bytes is %zu, "
                       "ak_sparse_prefill_workspace_size gives %zu",
                       workspace_bytes, need);
    sp_job j;
    j.a = a;
    j.h_q = a->q->shape[1];
    j.d_qk = (int32_t)a->q->shape[2];
    j.g = sp_group(ctx, a);
    j.ngroups = (int32_t)((j.h_q + j.g - 1) / j.g);
    j.stride = a->cache != NULL ? ak_cache_stride(a->cache) : 0;
    j.ws = (char *)(((uintptr_t)workspace + 63) & ~(uintptr_t)63);
    j.ws_per_thread = per_thread_bytes(ctx, a);
    int64_t items = a->q->shape[0] * j.ngroups;
    if (items > 0) ak_parallel_for(ctx, items, sp_item, &j);
    return AK_OK;
}
