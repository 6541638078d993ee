/*
 * mla_decode.c -- CPU MLA decode, dense and sparse (semantics.md 3, 4). One work item is
 * (request, query token, group of up to 64 heads); it builds its key list (positions through the
 * block table, or slot ids from the index lists, then the extra cache), decodes each valid key
 * once into fp32 and runs the shared row core of attn_row.h for all heads of the group.
 */
#include "cpu/attn_row.h"
#include "cpu/cpu.h"

typedef struct mla_job {
    const ak_mla_decode_args *a;
    int64_t b, s_q, h_q;
    int32_t d_qk, g, ngroups;
    int64_t main_stride, extra_stride;
    char *ws;
    size_t ws_per_thread;
} mla_job;

/* Length of row (r, i) from an optional [b] or [b, s_q] tensor: negative -> 0, above width
   clamped (semantics.md 1). */
static int64_t row_length(const ak_tensor *len, int64_t r, int64_t i, int64_t width) {
    if (len == NULL) return width;
    const int32_t *p = (const int32_t *)len->data;
    int64_t v =
        len->ndim == 1 ? p[r * len->strides[0]] : p[r * len->strides[0] + i * len->strides[1]];
    return v < 0 ? 0 : (v > width ? width : v);
}

/* Feeds the valid entries of row (r, i) of an index list into the chunk (rule I1). */
static void feed_indices(ak_attn_scratch *s, int32_t g, int32_t d_qk, const ak_cache *c,
                         int64_t stride, const ak_tensor *idx, const ak_tensor *len, int64_t r,
                         int64_t i, float scale) {
    int64_t width = idx->shape[2];
    int64_t n = row_length(len, r, i, width);
    uint64_t cap = (uint64_t)ak_cache_capacity(c);
    const int32_t *row = (const int32_t *)idx->data + r * idx->strides[0] + i * idx->strides[1];
    for (int64_t k = 0; k < n; k++) {
        int32_t slot = row[k];
        if ((uint64_t)(int64_t)slot >= cap) continue;
        ak_attn_decode_key(s, c, stride, slot, ak_attn_next_key(s, g, d_qk, scale));
    }
}

static void mla_item(void *arg, int64_t item, int32_t thread) {
    const mla_job *j = (const mla_job *)arg;
    const ak_mla_decode_args *a = j->a;
    int64_t grp = item % j->ngroups, ri = item / j->ngroups;
    int64_t i = ri % j->s_q, r = ri / j->s_q;
    int64_t h0 = grp * j->g;
    int32_t g = (int32_t)(j->h_q - h0 < j->g ? j->h_q - h0 : j->g);
    float scale = a->softmax_scale;
    ak_attn_scratch s =
        ak_attn_scratch_at(j->ws + (size_t)thread * j->ws_per_thread, j->g, j->d_qk);

    const ak_tensor *q = a->q;
    const uint16_t *qp =
        (const uint16_t *)q->data + r * q->strides[0] + i * q->strides[1] + h0 * q->strides[2];
    ak_attn_begin(&s, qp, q->strides[2], g, j->d_qk);

    if (a->block_table != NULL) {
        const ak_cache *c = a->cache;
        int64_t len = ak_i32_at(a->seq_lens, r);
        int64_t n = a->causal ? len - (j->s_q - 1 - i) : len; /* bottom-right aligned */
        const int32_t *bt = (const int32_t *)a->block_table->data + r * a->block_table->strides[0];
        int64_t bts = a->block_table->strides[1];
        int32_t P = c->page_size;
        for (int64_t p = 0; p < n; p++) {
            int32_t page = bt[(p / P) * bts];
            if ((uint32_t)page >= (uint32_t)c->num_pages) continue; /* rule I2 */
            int32_t slot = page * P + (int32_t)(p % P);
            ak_attn_decode_key(&s, c, j->main_stride, slot,
                               ak_attn_next_key(&s, g, j->d_qk, scale));
        }
    } else {
        feed_indices(&s, g, j->d_qk, a->cache, j->main_stride, a->indices, a->topk_length, r, i,
                     scale);
        if (a->extra_cache != NULL)
            feed_indices(&s, g, j->d_qk, a->extra_cache, j->extra_stride, a->extra_indices,
                         a->extra_topk_length, r, i, scale);
    }

    ak_attn_dst o;
    const ak_tensor *out = a->out;
    o.out_bf16 = out->dtype == AK_DTYPE_BF16;
    int64_t ooff = r * out->strides[0] + i * out->strides[1] + h0 * out->strides[2];
    o.out =
        o.out_bf16 ? (void *)((uint16_t *)out->data + ooff) : (void *)((float *)out->data + ooff);
    o.out_hs = out->strides[2];
    o.lse = NULL;
    o.lse_hs = 0;
    if (a->lse != NULL) {
        o.lse = (float *)a->lse->data + r * a->lse->strides[0] + i * a->lse->strides[1] +
                h0 * a->lse->strides[2];
        o.lse_hs = a->lse->strides[2];
    }
    o.max_logits = NULL;
    o.ml_hs = 0;
    o.sink = NULL;
    o.sink_hs = 0;
    if (a->attn_sink != NULL) {
        o.sink = (const float *)a->attn_sink->data + h0 * a->attn_sink->strides[0];
        o.sink_hs = a->attn_sink->strides[0];
    }
    ak_attn_end(&s, g, j->d_qk, scale, &o);
}

static int32_t mla_group(ak_context *ctx, const ak_mla_decode_args *a) {
    return ak_attn_group(a->q->shape[2], a->q->shape[0] * a->q->shape[1],
                         ak_context_num_threads(ctx));
}

static size_t per_thread_bytes(ak_context *ctx, const ak_mla_decode_args *a) {
    int32_t d_qk = (int32_t)a->q->shape[3];
    size_t n = ak_attn_scratch_bytes(mla_group(ctx, a), d_qk);
    return (n + 63) / 64 * 64;
}

ak_status ak_cpu_mla_decode_workspace_size(ak_context *ctx, const ak_mla_decode_args *args,
                                           size_t *bytes) {
    /* + 64: the caller's pointer need not be aligned. */
    *bytes = per_thread_bytes(ctx, args) * (size_t)ak_context_num_threads(ctx) + 64;
    return AK_OK;
}

ak_status ak_cpu_mla_decode(ak_context *ctx, const ak_mla_decode_args *a, void *workspace,
                            size_t workspace_bytes) {
    const char *fn = "ak_mla_decode";
    size_t need;
    AK_TRY(ak_cpu_mla_decode_workspace_size(ctx, a, &need));
    if (workspace_bytes < need || (workspace == NULL && need > 0))
        return ak_fail(AK_ERR_WORKSPACE_TOO_SMALL,
                       "%s: workspace_bytes is %zu, ak_mla_decode_workspace_size gives %zu", fn,
                       workspace_bytes, need);
    int64_t b = a->q->shape[0];
    if (a->block_table != NULL) {
        /* Values the dense path relies on, checked before anything is written. */
        int64_t width = a->block_table->shape[1];
        int32_t P = a->cache->page_size;
        for (int64_t r = 0; r < b; r++) {
            int64_t len = ak_i32_at(a->seq_lens, r);
            if (len < 0)
                return ak_fail(AK_ERR_INVALID_ARGUMENT, "%s: seq_lens[%lld] is %lld, expected >= 0",
                               fn, (long long)r, (long long)len);
            int64_t pages = (len + P - 1) / P;
            if (pages > width)
                return ak_fail(AK_ERR_INVALID_ARGUMENT,
                               "%s: block_table has %lld columns, request %lld needs %lld pages "
                               "(seq_lens %lld, page_size %d)",
                               fn, (long long)width, (long long)r, (long long)pages, (long long)len,
                               (int)P);
        }
    }
    mla_job j;
    j.a = a;
    j.b = b;
    j.s_q = a->q->shape[1];
    j.h_q = a->q->shape[2];
    j.d_qk = (int32_t)a->q->shape[3];
    j.g = mla_group(ctx, a);
    j.ngroups = (int32_t)((j.h_q + j.g - 1) / j.g);
    j.main_stride = ak_cache_stride(a->cache);
    j.extra_stride = a->extra_cache != NULL ? ak_cache_stride(a->extra_cache) : 0;
    j.ws = (char *)(((uintptr_t)workspace + 63) & ~(uintptr_t)63);
    j.ws_per_thread = per_thread_bytes(ctx, a);
    int64_t items = b * j.s_q * j.ngroups;
    if (items > 0) ak_parallel_for(ctx, items, mla_item, &j);
    return AK_OK;
}
