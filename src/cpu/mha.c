/*
 * mha.c (CPU) -- paged MHA/GQA attention: prefill, extend, decode and speculative verify.
 *
 * One work item is (request, q-row tile, kv head). Its rows are (query i, head of the group) pairs,
 * at most MHA_ROW_TILE of them; the item walks the keys its rows can see in chunks of MHA_KV_TILE
 * positions, dequantizes each chunk of K and V once into fp32 scratch and runs an online softmax
 * (fp32 logits and running max, fp64 sum, fp32 output accumulators). Every row's reduction stays
 * inside one item and runs in a fixed key order, so results do not depend on the thread count.
 */
#include "cpu/cpu.h"

#include "common/kv_access.h"

#include <math.h>
#include <string.h>

enum { MHA_KV_TILE = 64, MHA_ROW_TILE = 64, MHA_ALIGN = 64 };

typedef enum mha_form { MHA_BLOCK = 0, MHA_TOKEN = 1, MHA_CSR = 2 } mha_form;

typedef struct mha_job {
    const ak_mha_args *a;
    const ak_cache *c;
    mha_form form;
    int ragged;
    int32_t B, q_len;           /* q_len: the uniform form's per-request length */
    int32_t h_q, h_kv, group, d_qk, d_v;
    int64_t k_stride, v_stride; /* page strides in bytes */
    float k_scale, v_scale;
    const int64_t *tile_start;  /* [B+1] first tile of each request */
    uint8_t *scratch;
    size_t per_thread;
} mha_job;

static size_t align_up(size_t x) { return (x + MHA_ALIGN - 1) / MHA_ALIGN * MHA_ALIGN; }

/* Per-thread scratch, in order: q [R, d_qk] f32 | acc [R, d_v] f32 | k transposed [d_qk, T] f32 |
   one decoded k row [d_qk] f32 | v [T, d_v] f32 | s [T] f32 | key_ok [T] u8 | m [R] f32 |
   l [R] f64 | lo, hi [R] i32. */
static size_t thread_bytes(int32_t d_qk, int32_t d_v) {
    size_t R = MHA_ROW_TILE, T = MHA_KV_TILE;
    return align_up(R * d_qk * 4) + align_up(R * d_v * 4) + align_up(T * d_qk * 4) +
           align_up((size_t)d_qk * 4) + align_up(T * d_v * 4) + align_up(T * 4) + align_up(T) +
           align_up(R * 4) + align_up(R * 8) + 2 * align_up(R * 4);
}

static int32_t mha_batch(const ak_mha_args *a) {
    return (int32_t)(a->cu_seqlens_q != NULL ? a->cu_seqlens_q->shape[0] - 1 : a->q->shape[0]);
}

ak_status ak_cpu_mha_workspace_size(ak_context *ctx, const ak_mha_args *a, size_t *bytes) {
    /* MHA_ALIGN bytes of slack let the caller's pointer have any alignment */
    size_t head = MHA_ALIGN + align_up(((size_t)mha_batch(a) + 1) * sizeof(int64_t));
    *bytes = head + (size_t)ak_context_num_threads(ctx) *
                        thread_bytes(a->cache->head_dim, a->cache->head_dim_v);
    return AK_OK;
}

/* ---- per-request geometry ------------------------------------------------------------------ */

static int32_t i32_2d(const ak_tensor *t, int64_t r, int64_t c) {
    return ((const int32_t *)t->data)[r * t->strides[0] + c * t->strides[1]];
}

/* kv length of request b (negative seq_lens count as 0; CSR per semantics.md 6). */
static int64_t kv_len_of(const mha_job *j, int32_t b) {
    const ak_mha_args *a = j->a;
    if (j->form != MHA_CSR) {
        int32_t n = ak_i32_at(a->seq_lens, b);
        return n > 0 ? n : 0;
    }
    int64_t n = (int64_t)ak_i32_at(a->kv_indptr, b + 1) - ak_i32_at(a->kv_indptr, b);
    if (n <= 0) return 0;
    return (int64_t)j->c->page_size * (n - 1) + ak_i32_at(a->kv_last_page_len, b);
}

/* First q row (in the q tensor's row numbering) and q length of request b. */
static void q_rows_of(const mha_job *j, int32_t b, int64_t *row0, int32_t *len) {
    if (j->ragged) {
        *row0 = ak_i32_at(j->a->cu_seqlens_q, b);
        *len = ak_i32_at(j->a->cu_seqlens_q, b + 1) - (int32_t)*row0;
    } else {
        *row0 = (int64_t)b * j->q_len;
        *len = j->q_len;
    }
}

/* Slot of position p of request b, or -1 when its page id / slot id is invalid (rules I1, I2). */
static int32_t slot_of(const mha_job *j, int32_t b, int64_t p) {
    const ak_mha_args *a = j->a;
    int32_t P = j->c->page_size, page;
    switch (j->form) {
    case MHA_TOKEN: {
        int32_t s = i32_2d(a->block_table, b, p);
        return (uint32_t)s < (uint32_t)ak_cache_capacity(j->c) ? s : -1;
    }
    case MHA_BLOCK: page = i32_2d(a->block_table, b, p / P); break;
    default: page = ak_i32_at(a->kv_indices, ak_i32_at(a->kv_indptr, b) + p / P); break;
    }
    if ((uint32_t)page >= (uint32_t)j->c->num_pages) return -1;
    return page * P + (int32_t)(p % P);
}

/* Element offset of row (t, h) of q, out or lse (the two q forms share a row numbering t). */
static int64_t row_off(const ak_tensor *t, int ragged, int32_t q_len, int64_t row, int32_t h) {
    if (ragged) return row * t->strides[0] + (int64_t)h * t->strides[1];
    return (row / q_len) * t->strides[0] + (row % q_len) * t->strides[1] +
           (int64_t)h * t->strides[2];
}

/* ---- math kernels (plain loops the compiler vectorizes) ----------------------------------- */

/* Head dims are multiples of 16 (64, 128, 192, 256): every loop below runs whole blocks of 16
   lanes, which the compiler turns into vector code without a scalar epilogue even at -O2. */
enum { MHA_LANES = 16 };

/* Unscaled logits of one q row against a whole K chunk stored transposed (kt [d_qk, T]): each
   s[t] is a plain fp32 sum over d in order, and the loop over t runs across vector lanes. */
static void logits_f32(const float *restrict q, const float *restrict kt, int32_t n,
                       float *restrict s) {
    for (int32_t t = 0; t < MHA_KV_TILE; t++) s[t] = 0.0f;
    for (int32_t d = 0; d < n; d++) {
        float qd = q[d];
        const float *row = kt + (size_t)d * MHA_KV_TILE;
        for (int32_t t = 0; t < MHA_KV_TILE; t++) s[t] += qd * row[t];
    }
}

static void axpy_f32(float *restrict acc, float p, const float *restrict v, int32_t n) {
    for (int32_t d = 0; d < n; d += MHA_LANES)
        for (int32_t k = 0; k < MHA_LANES; k++) acc[d + k] += p * v[d + k];
}

static void scale_f32(float *restrict x, float s, int32_t n) {
    for (int32_t d = 0; d < n; d += MHA_LANES)
        for (int32_t k = 0; k < MHA_LANES; k++) x[d + k] *= s;
}

/* Dequantizes n elements of a pool from element offset off, exactly as ak_kv_mha_elem does
   (fp8: float(q) * scale); the dtype switch sits outside the loops so they vectorize. */
static void decode_row(ak_dtype dt, const void *pool, int64_t off, float scale,
                       float *restrict dst, int32_t n) {
    if (dt == AK_DTYPE_E4M3) {
        const uint8_t *src = (const uint8_t *)pool + off;
        for (int32_t d = 0; d < n; d += MHA_LANES)
            for (int32_t k = 0; k < MHA_LANES; k++) dst[d + k] = ak_e4m3_to_f32(src[d + k]) * scale;
        return;
    }
    const uint16_t *src = (const uint16_t *)pool + off;
    if (dt == AK_DTYPE_F16) {
        for (int32_t d = 0; d < n; d += MHA_LANES)
            for (int32_t k = 0; k < MHA_LANES; k++) dst[d + k] = ak_f16_to_f32(src[d + k]);
    } else {
        for (int32_t d = 0; d < n; d += MHA_LANES)
            for (int32_t k = 0; k < MHA_LANES; k++) dst[d + k] = ak_bf16_to_f32(src[d + k]);
    }
}

/* ---- the work item ------------------------------------------------------------------------- */

static void write_row(const mha_job *j, int64_t row, int32_t h, const float *acc, float inv,
                      float lse_val) {
    const ak_mha_args *a = j->a;
    int64_t o = row_off(a->out, j->ragged, j->q_len, row, h);
    if (a->out->dtype == AK_DTYPE_F32) {
        float *dst = (float *)a->out->data + o;
        for (int32_t d = 0; d < j->d_v; d++) dst[d] = acc != NULL ? acc[d] * inv : 0.0f;
    } else {
        uint16_t *dst = (uint16_t *)a->out->data + o;
        for (int32_t d = 0; d < j->d_v; d++)
            dst[d] = ak_f32_to_bf16(acc != NULL ? acc[d] * inv : 0.0f);
    }
    if (a->lse != NULL)
        ((float *)a->lse->data)[row_off(a->lse, j->ragged, j->q_len, row, h)] = lse_val;
}

static void mha_item(void *arg, int64_t item, int32_t thread) {
    const mha_job *j = (const mha_job *)arg;
    const ak_mha_args *a = j->a;
    const ak_cache *c = j->c;
    const int32_t R = MHA_ROW_TILE, T = MHA_KV_TILE, dq = j->d_qk, dv = j->d_v;
    int32_t g = (int32_t)(item % j->h_kv);
    int64_t tile = item / j->h_kv;

    /* request b owns tiles tile_start[b] .. tile_start[b+1] */
    int32_t lo_b = 0, hi_b = j->B;
    while (hi_b - lo_b > 1) {
        int32_t mid = (lo_b + hi_b) / 2;
        if (j->tile_start[mid] <= tile) lo_b = mid; else hi_b = mid;
    }
    int32_t b = lo_b;
    int64_t row0;
    int32_t q_len;
    q_rows_of(j, b, &row0, &q_len);
    int64_t kv_len = kv_len_of(j, b);
    int64_t r_begin = (tile - j->tile_start[b]) * R;
    int64_t r_total = (int64_t)q_len * j->group;
    int32_t nr = (int32_t)(r_total - r_begin < R ? r_total - r_begin : R);

    uint8_t *sp = j->scratch + (size_t)thread * j->per_thread;
    float *qf = (float *)sp;                sp += align_up((size_t)R * dq * 4);
    float *acc = (float *)sp;               sp += align_up((size_t)R * dv * 4);
    float *kt = (float *)sp;                sp += align_up((size_t)T * dq * 4);
    float *krow = (float *)sp;              sp += align_up((size_t)dq * 4);
    float *vf = (float *)sp;                sp += align_up((size_t)T * dv * 4);
    float *s = (float *)sp;                 sp += align_up((size_t)T * 4);
    uint8_t *key_ok = sp;                   sp += align_up((size_t)T);
    float *m = (float *)sp;                 sp += align_up((size_t)R * 4);
    double *l = (double *)sp;               sp += align_up((size_t)R * 8);
    int32_t *lo = (int32_t *)sp;            sp += align_up((size_t)R * 4);
    int32_t *hi = (int32_t *)sp;

    /* rows: r -> query i = r / group, head h = g * group + r % group */
    int64_t k_lo = kv_len, k_hi = 0;
    for (int32_t r = 0; r < nr; r++) {
        int64_t rr = r_begin + r;
        int32_t i = (int32_t)(rr / j->group), h = g * j->group + (int32_t)(rr % j->group);
        const uint16_t *qs = (const uint16_t *)a->q->data + row_off(a->q, j->ragged, j->q_len,
                                                                    row0 + i, h);
        for (int32_t d = 0; d < dq; d++) qf[(size_t)r * dq + d] = ak_bf16_to_f32(qs[d]);
        memset(acc + (size_t)r * dv, 0, (size_t)dv * sizeof(float));
        m[r] = -INFINITY;
        l[r] = 0.0;
        /* bottom-right alignment: query i sits at pos = kv_len - q_len + i */
        int64_t pos = kv_len - q_len + i;
        int64_t rlo = 0, rhi = kv_len;
        if (a->causal && pos + 1 < rhi) rhi = pos + 1;
        if (a->window_left >= 0 && pos - a->window_left > rlo) rlo = pos - a->window_left;
        if (rhi < rlo) rhi = rlo;
        lo[r] = (int32_t)rlo;
        hi[r] = (int32_t)(rhi > 0 ? rhi : 0);
        if (rlo < rhi) {
            if (rlo < k_lo) k_lo = rlo;
            if (rhi > k_hi) k_hi = rhi;
        }
    }

    const void *kpool = c->data, *vpool = c->v_data;
    for (int64_t j0 = k_lo; j0 < k_hi; j0 += T) {
        int32_t n = (int32_t)(k_hi - j0 < T ? k_hi - j0 : T);
        for (int32_t t = 0; t < n; t++) {
            int32_t slot = slot_of(j, b, j0 + t);
            key_ok[t] = slot >= 0;
            if (slot < 0) { /* masked by selection: its bytes are never read */
                for (int32_t d = 0; d < dq; d++) kt[(size_t)d * T + t] = 0.0f;
                continue;
            }
            decode_row(c->elem_dtype, kpool, ak_kv_mha_offset(c, j->k_stride, dq, slot, g),
                       j->k_scale, krow, dq);
            for (int32_t d = 0; d < dq; d++) kt[(size_t)d * T + t] = krow[d];
            decode_row(c->elem_dtype, vpool, ak_kv_mha_offset(c, j->v_stride, dv, slot, g),
                       j->v_scale, vf + (size_t)t * dv, dv);
        }
        for (int32_t t = n; t < T; t++) /* a short last chunk: the unused columns are zero */
            for (int32_t d = 0; d < dq; d++) kt[(size_t)d * T + t] = 0.0f;
        for (int32_t r = 0; r < nr; r++) {
            int32_t t0 = lo[r] > j0 ? (int32_t)(lo[r] - j0) : 0;
            int32_t t1 = hi[r] < j0 + n ? (int32_t)(hi[r] - j0) : n;
            if (t0 >= t1) continue;
            logits_f32(qf + (size_t)r * dq, kt, dq, s);
            float cmax = -INFINITY;
            for (int32_t t = t0; t < t1; t++) {
                if (!key_ok[t]) continue;
                s[t] *= a->softmax_scale;
                if (s[t] > cmax) cmax = s[t];
            }
            if (cmax == -INFINITY) continue; /* no valid key in this chunk for this row */
            float *ar = acc + (size_t)r * dv;
            if (cmax > m[r]) {
                float alpha = expf(m[r] - cmax);
                l[r] *= alpha;
                scale_f32(ar, alpha, dv);
                m[r] = cmax;
            }
            for (int32_t t = t0; t < t1; t++) {
                if (!key_ok[t]) continue;
                float p = expf(s[t] - m[r]);
                l[r] += p;
                axpy_f32(ar, p, vf + (size_t)t * dv, dv);
            }
        }
    }

    for (int32_t r = 0; r < nr; r++) {
        int64_t rr = r_begin + r;
        int32_t i = (int32_t)(rr / j->group), h = g * j->group + (int32_t)(rr % j->group);
        if (l[r] <= 0.0) { /* empty row: out 0, lse +inf, with or without a sink */
            write_row(j, row0 + i, h, NULL, 0.0f, INFINITY);
            continue;
        }
        double lse = (double)m[r] + log(l[r]);
        double inv = 1.0 / l[r];
        if (a->attn_sink != NULL) { /* sink as a zero-valued virtual key (semantics.md 2.4) */
            const float *sink = (const float *)a->attn_sink->data;
            double sigma = sink[(int64_t)h * a->attn_sink->strides[0]];
            inv /= 1.0 + exp(sigma - lse);
        }
        write_row(j, row0 + i, h, acc + (size_t)r * dv, (float)inv, (float)lse);
    }
}

/* ---- value checks, then the parallel run --------------------------------------------------- */

static ak_status check_values(const mha_job *j, int64_t total_q) {
    const ak_mha_args *a = j->a;
    const char *fn = "ak_mha";
    if (j->ragged) {
        const ak_tensor *cu = a->cu_seqlens_q;
        if (ak_i32_at(cu, 0) < 0)
            return ak_fail(AK_ERR_INVALID_ARGUMENT, "%s: cu_seqlens_q[0] is %d, expected >= 0",
                           fn, (int)ak_i32_at(cu, 0));
        for (int32_t b = 0; b < j->B; b++)
            if (ak_i32_at(cu, b + 1) < ak_i32_at(cu, b))
                return ak_fail(AK_ERR_INVALID_ARGUMENT,
                               "%s: cu_seqlens_q[%d] = %d is below cu_seqlens_q[%d] = %d, expected "
                               "non-decreasing",
                               fn, (int)b + 1, (int)ak_i32_at(cu, b + 1), (int)b,
                               (int)ak_i32_at(cu, b));
        if (ak_i32_at(cu, j->B) > total_q)
            return ak_fail(AK_ERR_INVALID_ARGUMENT,
                           "%s: cu_seqlens_q[%d] = %d exceeds the %lld rows of q", fn, (int)j->B,
                           (int)ak_i32_at(cu, j->B), (long long)total_q);
    }
    int32_t P = j->c->page_size;
    if (j->form == MHA_CSR) {
        const ak_tensor *ip = a->kv_indptr;
        int64_t nnz = a->kv_indices->shape[0];
        if (ak_i32_at(ip, 0) < 0)
            return ak_fail(AK_ERR_INVALID_ARGUMENT, "%s: kv_indptr[0] is %d, expected >= 0", fn,
                           (int)ak_i32_at(ip, 0));
        for (int32_t b = 0; b < j->B; b++) {
            int32_t p0 = ak_i32_at(ip, b), p1 = ak_i32_at(ip, b + 1);
            if (p1 < p0)
                return ak_fail(AK_ERR_INVALID_ARGUMENT,
                               "%s: kv_indptr[%d] = %d is below kv_indptr[%d] = %d, expected "
                               "non-decreasing",
                               fn, (int)b + 1, (int)p1, (int)b, (int)p0);
            if (p1 > nnz)
                return ak_fail(AK_ERR_INVALID_ARGUMENT,
                               "%s: kv_indptr[%d] = %d exceeds the %lld entries of kv_indices", fn,
                               (int)b + 1, (int)p1, (long long)nnz);
            int32_t last = ak_i32_at(a->kv_last_page_len, b);
            if (p1 > p0 && (last < 1 || last > P))
                return ak_fail(AK_ERR_INVALID_ARGUMENT,
                               "%s: kv_last_page_len[%d] is %d, expected 1..%d (page_size) for a "
                               "request with %d pages",
                               fn, (int)b, (int)last, (int)P, (int)(p1 - p0));
            if (kv_len_of(j, b) > INT32_MAX)
                return ak_fail(AK_ERR_INVALID_ARGUMENT,
                               "%s: request %d: kv length %lld exceeds 2^31-1", fn, (int)b,
                               (long long)kv_len_of(j, b));
        }
    } else {
        int64_t width = a->block_table->shape[1], reach = j->form == MHA_TOKEN ? width : width * P;
        for (int32_t b = 0; b < j->B; b++)
            if (kv_len_of(j, b) > reach)
                return ak_fail(AK_ERR_INVALID_ARGUMENT,
                               "%s: seq_lens[%d] = %lld exceeds what block_table covers (%lld "
                               "%s of %s)",
                               fn, (int)b, (long long)kv_len_of(j, b), (long long)width,
                               j->form == MHA_TOKEN ? "slots" : "pages",
                               j->form == MHA_TOKEN ? "1 token" : "page_size tokens");
    }
    return AK_OK;
}

ak_status ak_cpu_mha(ak_context *ctx, const ak_mha_args *a, void *workspace,
                     size_t workspace_bytes) {
    mha_job j;
    memset(&j, 0, sizeof j);
    j.a = a;
    j.c = a->cache;
    j.form = a->kv_indptr != NULL ? MHA_CSR : a->token_table ? MHA_TOKEN : MHA_BLOCK;
    j.ragged = a->cu_seqlens_q != NULL;
    j.B = mha_batch(a);
    j.q_len = j.ragged ? 0 : (int32_t)a->q->shape[1];
    j.h_q = (int32_t)a->q->shape[a->q->ndim - 2];
    j.h_kv = j.c->h_kv;
    j.group = j.h_q / j.h_kv;
    j.d_qk = j.c->head_dim;
    j.d_v = j.c->head_dim_v;
    j.k_stride = ak_cache_stride(j.c);
    j.v_stride = ak_cache_v_stride(j.c);
    j.k_scale = j.c->elem_dtype == AK_DTYPE_E4M3 ? ak_kv_k_scale(j.c) : 1.0f;
    j.v_scale = j.c->elem_dtype == AK_DTYPE_E4M3 ? ak_kv_v_scale(j.c) : 1.0f;
    int64_t total_q = j.ragged ? a->q->shape[0] : (int64_t)j.B * j.q_len;

    AK_TRY(check_values(&j, total_q));

    (void)workspace_bytes; /* the entry point compared it with the size query */
    uint8_t *ws = (uint8_t *)workspace + (MHA_ALIGN - (uintptr_t)workspace % MHA_ALIGN) % MHA_ALIGN;
    int64_t *tile_start = (int64_t *)ws;
    tile_start[0] = 0;
    for (int32_t b = 0; b < j.B; b++) {
        int64_t row0;
        int32_t len;
        q_rows_of(&j, b, &row0, &len);
        int64_t rows = (int64_t)len * j.group;
        tile_start[b + 1] = tile_start[b] + (rows + MHA_ROW_TILE - 1) / MHA_ROW_TILE;
    }
    j.tile_start = tile_start;
    j.scratch = ws + align_up(((size_t)j.B + 1) * sizeof(int64_t));
    j.per_thread = thread_bytes(j.d_qk, j.d_v);

    /* ragged rows outside [cu_seqlens_q[0], cu_seqlens_q[B]) belong to no request: empty rows */
    if (j.ragged) {
        int64_t first = ak_i32_at(a->cu_seqlens_q, 0), last = ak_i32_at(a->cu_seqlens_q, j.B);
        for (int64_t t = 0; t < total_q; t++) {
            if (t >= first && t < last) continue;
            for (int32_t h = 0; h < j.h_q; h++) write_row(&j, t, h, NULL, 0.0f, INFINITY);
        }
    }
    ak_parallel_for(ctx, tile_start[j.B] * j.h_kv, mha_item, &j);
    return AK_OK;
}
