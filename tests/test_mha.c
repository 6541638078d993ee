/*
 * test_mha.c -- paged MHA/GQA on the CPU backend against the double-precision oracle
 * (tests/oracle/oracle_mha.c). Caches are built byte by byte here (no library writer): every pool
 * starts as NaN, only the slots of live positions are written, unused page-table entries are
 * 2147480000, outputs are NaN-poisoned before each run.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ak_test.h"
#include "oracle.h"
#include "oracle_mha.h"

#define MAXB 8
#define UNUSED_ENTRY 2147480000

/* FlashMLA's invalid index values (semantics.md 1); "BOUND" is replaced by the pool bound. */
#define BOUND_MARK 0x7ffffff0
static const int32_t k_invalid[] = {INT32_MIN, -123456, -1, BOUND_MARK, 114514, 1919810,
                                    2147480000, INT32_MAX};

typedef struct mha_case {
    const char *name;
    ak_layout layout;
    ak_dtype elem;
    int32_t P, h_q, h_kv, dqk, dv;
    int32_t B;
    int32_t kv[MAXB], ql[MAXB];
    int32_t form;       /* ORC_PT_BLOCK / TOKEN / CSR */
    int32_t ragged;     /* 0: uniform [B, q_len] (all ql equal) */
    int32_t pad_rows;   /* ragged: rows after cu_seqlens_q[B] that belong to no request */
    int32_t causal, window;
    int32_t sink;       /* 0 none, 1 finite, 2 mixed +inf / -inf / finite */
    int32_t invalid;    /* 0 none, 1 some table entries in range invalid, 2 request 0 all invalid */
    int32_t out_f32, with_lse, extra_stride;
    float k_scale, v_scale;
    int32_t scale_ptr; /* pass the scales through k_scale_ptr / v_scale_ptr (floats set wrong) */
} mha_case;

typedef struct mha_built {
    mha_case c;
    uint8_t *kpool, *vpool;
    uint16_t *q;
    int32_t *table, *seq_lens, *indptr, *indices, *last, *cu, *q_start;
    float *sink;
    float scales[2]; /* targets of k_scale_ptr / v_scale_ptr */
    int64_t total_q, width, nnz;
    int32_t num_pages;
    ak_tensor tq, tcu, tbt, tsl, tip, tix, tlp, tsink, tout, tlse;
    ak_cache cache;
    ak_mha_args args;
    orc_mha_problem prob;
    size_t out_bytes, lse_bytes;
} mha_built;

static int32_t esize(ak_dtype t) { return t == AK_DTYPE_E4M3 ? 1 : 2; }

/* A random stored element: bf16 near N(0,1); f16 and e4m3 drawn as codes of moderate magnitude
   (no NaN codes), since the oracle decodes whatever bits are stored. */
static void put_elem(uint8_t *pool, int64_t off, ak_dtype t, ak_rng *r) {
    if (t == AK_DTYPE_E4M3) {
        uint8_t e = (uint8_t)ak_rng_range(r, 4, 10), m = (uint8_t)ak_rng_range(r, 0, 8);
        pool[off] = (uint8_t)((ak_rng_range(r, 0, 2) << 7) | (e << 3) | m);
        return;
    }
    uint16_t bits;
    if (t == AK_DTYPE_F16)
        bits = (uint16_t)((ak_rng_range(r, 0, 2) << 15) | (ak_rng_range(r, 12, 17) << 10) |
                          ak_rng_range(r, 0, 1024));
    else
        bits = orc_bf16_bits(ak_rng_normal(r));
    pool[2 * off] = (uint8_t)bits;
    pool[2 * off + 1] = (uint8_t)(bits >> 8);
}

static void fill_nan(uint8_t *p, size_t bytes, ak_dtype t) {
    if (t == AK_DTYPE_E4M3) memset(p, 0x7f, bytes);
    else ak_poison(p, bytes, t);
}

static int32_t invalid_value(ak_rng *r, int32_t bound) {
    int32_t v = k_invalid[ak_rng_range(r, 0, (int64_t)(sizeof k_invalid / sizeof k_invalid[0]))];
    return v == BOUND_MARK ? bound : v;
}

static int32_t cdiv(int32_t a, int32_t b) { return (a + b - 1) / b; }

static int64_t elem_off(const mha_case *c, int64_t page_elems, int32_t page, int32_t t, int32_t h,
                        int32_t D) {
    int64_t in = c->layout == AK_LAYOUT_MHA_HND ? ((int64_t)h * c->P + t) * D
                                                : ((int64_t)t * c->h_kv + h) * D;
    return (int64_t)page * page_elems + in;
}

/* Builds the cache, page table, q and the oracle problem for a case. */
static void mha_build(mha_built *m, const mha_case *c, ak_rng *r) {
    memset(m, 0, sizeof *m);
    m->c = *c;
    int32_t P = c->P, B = c->B, maxkv = 1, pages_needed = 0;
    for (int32_t b = 0; b < B; b++) {
        if (c->kv[b] > maxkv) maxkv = c->kv[b];
        pages_needed += cdiv(c->kv[b], P);
    }
    /* token table: one slot per position anywhere in the pool; paged: whole pages */
    if (c->form == ORC_PT_TOKEN) {
        int32_t tok = 0;
        for (int32_t b = 0; b < B; b++) tok += c->kv[b];
        m->num_pages = cdiv(tok + 5, P) + 1;
    } else {
        m->num_pages = pages_needed + 3;
    }
    int64_t kpage = (int64_t)P * c->h_kv * c->dqk * esize(c->elem) + c->extra_stride;
    int64_t vpage = (int64_t)P * c->h_kv * c->dv * esize(c->elem) + c->extra_stride;
    m->kpool = (uint8_t *)malloc((size_t)(kpage * m->num_pages));
    m->vpool = (uint8_t *)malloc((size_t)(vpage * m->num_pages));
    fill_nan(m->kpool, (size_t)(kpage * m->num_pages), c->elem);
    fill_nan(m->vpool, (size_t)(vpage * m->num_pages), c->elem);
    memset(&m->cache, 0, sizeof m->cache);
    m->cache.layout = c->layout;
    m->cache.device.type = AK_DEVICE_CPU;
    m->cache.data = m->kpool;
    m->cache.v_data = m->vpool;
    m->cache.num_pages = m->num_pages;
    m->cache.page_size = P;
    m->cache.page_stride = c->extra_stride ? kpage : 0;
    m->cache.v_page_stride = c->extra_stride ? vpage : 0;
    m->cache.elem_dtype = c->elem;
    m->cache.h_kv = c->h_kv;
    m->cache.head_dim = c->dqk;
    m->cache.head_dim_v = c->dv;
    m->cache.k_scale = c->k_scale;
    m->cache.v_scale = c->v_scale;
    if (c->scale_ptr) { /* the pointers override the floats */
        m->scales[0] = c->k_scale;
        m->scales[1] = c->v_scale;
        m->cache.k_scale_ptr = &m->scales[0];
        m->cache.v_scale_ptr = &m->scales[1];
        m->cache.k_scale = 3.0f;
        m->cache.v_scale = 5.0f;
    }

    /* a random permutation of pages (or of slots, for the token table) */
    int32_t cap = m->num_pages * P, nperm = c->form == ORC_PT_TOKEN ? cap : m->num_pages;
    int32_t *perm = (int32_t *)malloc(sizeof(int32_t) * (size_t)nperm);
    for (int32_t i = 0; i < nperm; i++) perm[i] = i;
    for (int32_t i = nperm - 1; i > 0; i--) {
        int32_t k = (int32_t)ak_rng_range(r, 0, i + 1), t = perm[i];
        perm[i] = perm[k];
        perm[k] = t;
    }
    m->seq_lens = (int32_t *)malloc(sizeof(int32_t) * MAXB);
    m->last = (int32_t *)malloc(sizeof(int32_t) * MAXB);
    m->indptr = (int32_t *)malloc(sizeof(int32_t) * (MAXB + 1));
    int32_t next = 0;
    if (c->form == ORC_PT_CSR) {
        m->nnz = pages_needed + 2;
        m->indices = (int32_t *)malloc(sizeof(int32_t) * (size_t)m->nnz);
        for (int64_t i = 0; i < m->nnz; i++) m->indices[i] = UNUSED_ENTRY;
        m->indptr[0] = 0;
        for (int32_t b = 0; b < B; b++) {
            int32_t n = cdiv(c->kv[b], P);
            for (int32_t p = 0; p < n; p++) m->indices[m->indptr[b] + p] = perm[next++];
            m->indptr[b + 1] = m->indptr[b] + n;
            m->last[b] = n > 0 ? c->kv[b] - (n - 1) * P : 7; /* ignored when n = 0 */
            if (c->invalid == 1 && n >= 2)
                m->indices[m->indptr[b] + 1] = invalid_value(r, m->num_pages);
            if (c->invalid == 2 && b == 0)
                for (int32_t p = 0; p < n; p++)
                    m->indices[m->indptr[b] + p] = invalid_value(r, m->num_pages);
        }
    } else {
        m->width = c->form == ORC_PT_TOKEN ? maxkv + 3 : cdiv(maxkv, P) + 2;
        m->table = (int32_t *)malloc(sizeof(int32_t) * (size_t)(B * m->width));
        for (int64_t i = 0; i < B * m->width; i++) m->table[i] = UNUSED_ENTRY;
        for (int32_t b = 0; b < B; b++) {
            int32_t *row = m->table + (int64_t)b * m->width;
            int32_t n = c->form == ORC_PT_TOKEN ? c->kv[b] : cdiv(c->kv[b], P);
            int32_t bound = c->form == ORC_PT_TOKEN ? cap : m->num_pages;
            for (int32_t p = 0; p < n; p++) row[p] = perm[next++];
            if (c->invalid == 1 && n >= 2) {
                row[1] = invalid_value(r, bound);
                if (c->form == ORC_PT_TOKEN)
                    for (int32_t p = 3; p < n; p += 5) row[p] = invalid_value(r, bound);
            }
            if (c->invalid == 2 && b == 0)
                for (int32_t p = 0; p < n; p++) row[p] = invalid_value(r, bound);
            m->seq_lens[b] = c->kv[b];
        }
    }
    free(perm);

    /* q rows and the ragged offsets */
    m->cu = (int32_t *)malloc(sizeof(int32_t) * (MAXB + 1));
    m->q_start = (int32_t *)malloc(sizeof(int32_t) * MAXB);
    m->cu[0] = 0;
    for (int32_t b = 0; b < B; b++) {
        m->cu[b + 1] = m->cu[b] + c->ql[b];
        m->q_start[b] = m->cu[b];
    }
    m->total_q = m->cu[B] + (c->ragged ? c->pad_rows : 0);
    int64_t qn = m->total_q * c->h_q * c->dqk;
    m->q = (uint16_t *)malloc(sizeof(uint16_t) * (size_t)(qn > 0 ? qn : 1));
    for (int64_t i = 0; i < qn; i++) m->q[i] = orc_bf16_bits(ak_rng_normal(r));
    m->sink = (float *)malloc(sizeof(float) * (size_t)c->h_q);
    for (int32_t h = 0; h < c->h_q; h++) {
        float s = (float)(ak_rng_normal(r) * 2.0);
        if (c->sink == 2) s = h % 3 == 0 ? INFINITY : h % 3 == 1 ? -INFINITY : s;
        m->sink[h] = s;
    }

    /* tensors and args */
    int32_t qh = c->ragged ? 3 : 4;
    int64_t qshape[4], oshape[4];
    if (c->ragged) {
        int64_t s3[3] = {m->total_q, c->h_q, c->dqk};
        memcpy(qshape, s3, sizeof s3);
    } else {
        int64_t s4[4] = {B, c->ql[0], c->h_q, c->dqk};
        memcpy(qshape, s4, sizeof s4);
    }
    memcpy(oshape, qshape, sizeof qshape);
    oshape[qh - 1] = c->dv;
    m->tq = ak_tensor_make(m->q, AK_DTYPE_BF16, qh, qshape);
    ak_dtype od = c->out_f32 ? AK_DTYPE_F32 : AK_DTYPE_BF16;
    m->out_bytes = (size_t)(m->total_q * c->h_q * c->dv) * (size_t)ak_dtype_size(od);
    m->lse_bytes = (size_t)(m->total_q * c->h_q) * sizeof(float);
    m->tout = ak_tensor_make(malloc(m->out_bytes + 4), od, qh, oshape);
    m->tlse = ak_tensor_make(malloc(m->lse_bytes + 4), AK_DTYPE_F32, qh - 1, qshape);
    int64_t b1 = B + 1, bb = B, hq = c->h_q;
    m->tcu = ak_tensor_make(m->cu, AK_DTYPE_I32, 1, &b1);
    m->tsink = ak_tensor_make(m->sink, AK_DTYPE_F32, 1, &hq);
    memset(&m->args, 0, sizeof m->args);
    ak_mha_args *a = &m->args;
    a->q = &m->tq;
    a->cu_seqlens_q = c->ragged ? &m->tcu : NULL;
    a->cache = &m->cache;
    if (c->form == ORC_PT_CSR) {
        m->tip = ak_tensor_make(m->indptr, AK_DTYPE_I32, 1, &b1);
        m->tix = ak_tensor_make(m->indices, AK_DTYPE_I32, 1, &m->nnz);
        m->tlp = ak_tensor_make(m->last, AK_DTYPE_I32, 1, &bb);
        a->kv_indptr = &m->tip;
        a->kv_indices = &m->tix;
        a->kv_last_page_len = &m->tlp;
    } else {
        int64_t bs[2] = {B, m->width};
        m->tbt = ak_tensor_make(m->table, AK_DTYPE_I32, 2, bs);
        m->tsl = ak_tensor_make(m->seq_lens, AK_DTYPE_I32, 1, &bb);
        a->block_table = &m->tbt;
        a->seq_lens = &m->tsl;
        a->token_table = c->form == ORC_PT_TOKEN;
    }
    a->softmax_scale = (float)pow((double)c->dqk, -0.55); /* not d^-0.5: catches an ignored scale */
    a->causal = c->causal;
    a->window_left = c->window;
    a->attn_sink = c->sink ? &m->tsink : NULL;
    a->out = &m->tout;
    a->lse = c->with_lse ? &m->tlse : NULL;

    /* write K and V of every live position (slots resolved independently of the library) */
    int64_t kpe = kpage / esize(c->elem), vpe = vpage / esize(c->elem);
    for (int32_t b = 0; b < B; b++) {
        for (int32_t j = 0; j < c->kv[b]; j++) {
            int32_t page, t;
            if (c->form == ORC_PT_TOKEN) {
                int32_t s = m->table[(int64_t)b * m->width + j];
                if (s < 0 || s >= cap) continue;
                page = s / P;
                t = s % P;
            } else {
                page = c->form == ORC_PT_CSR ? m->indices[m->indptr[b] + j / P]
                                             : m->table[(int64_t)b * m->width + j / P];
                if (page < 0 || page >= m->num_pages) continue;
                t = j % P;
            }
            for (int32_t h = 0; h < c->h_kv; h++) {
                for (int32_t d = 0; d < c->dqk; d++)
                    put_elem(m->kpool, elem_off(c, kpe, page, t, h, c->dqk) + d, c->elem, r);
                for (int32_t d = 0; d < c->dv; d++)
                    put_elem(m->vpool, elem_off(c, vpe, page, t, h, c->dv) + d, c->elem, r);
            }
        }
    }

    orc_mha_problem *p = &m->prob;
    p->k_pool = m->kpool;
    p->v_pool = m->vpool;
    p->k_page_bytes = kpage;
    p->v_page_bytes = vpage;
    p->hnd = c->layout == AK_LAYOUT_MHA_HND;
    p->elem = c->elem == AK_DTYPE_E4M3  ? ORC_KV_E4M3
              : c->elem == AK_DTYPE_F16 ? ORC_KV_F16
                                        : ORC_KV_BF16;
    p->num_pages = m->num_pages;
    p->page_size = P;
    p->h_kv = c->h_kv;
    p->d_qk = c->dqk;
    p->d_v = c->dv;
    p->k_scale = c->k_scale > 0 ? c->k_scale : 1.0;
    p->v_scale = c->v_scale > 0 ? c->v_scale : 1.0;
    p->q = m->q;
    p->total_q = m->total_q;
    p->h_q = c->h_q;
    p->B = B;
    p->q_start = m->q_start;
    p->q_len = c->ql;
    p->form = c->form;
    p->table = m->table;
    p->width = (int32_t)m->width;
    p->seq_lens = m->seq_lens;
    p->indptr = m->indptr;
    p->indices = m->indices;
    p->last_page_len = m->last;
    p->softmax_scale = a->softmax_scale;
    p->causal = c->causal;
    p->window_left = c->window;
    p->sink = c->sink ? m->sink : NULL;
}

static void mha_free(mha_built *m) {
    free(m->kpool);
    free(m->vpool);
    free(m->q);
    free(m->table);
    free(m->seq_lens);
    free(m->indptr);
    free(m->indices);
    free(m->last);
    free(m->cu);
    free(m->q_start);
    free(m->sink);
    free(m->tout.data);
    free(m->tlse.data);
}

static ak_context *cpu_ctx(int32_t threads) {
    ak_context_options o = {AK_BACKEND_CPU, threads, 0, NULL};
    ak_context *ctx = NULL;
    CHECK_STATUS(ak_context_create(&o, &ctx), AK_OK);
    return ctx;
}

/* Poisons the outputs and runs ak_mha with a workspace of exactly the queried size. */
static ak_status mha_run(ak_context *ctx, mha_built *m) {
    size_t ws = 0;
    ak_status s = ak_mha_workspace_size(ctx, &m->args, &ws);
    if (s != AK_OK) return s;
    void *w = malloc(ws > 0 ? ws : 1);
    ak_poison(m->tout.data, m->out_bytes, m->tout.dtype);
    ak_poison(m->tlse.data, m->lse_bytes, AK_DTYPE_F32);
    s = ak_mha(ctx, &m->args, w, ws);
    free(w);
    return s;
}

/* Runs a case on `threads` threads and compares with the oracle. */
static void mha_check(const mha_case *c, int32_t threads) {
    ak_rng r;
    ak_rng_init(&r, ak_test_seed() ^ (uint64_t)(uintptr_t)c->name ^ ((uint64_t)c->h_q << 40));
    mha_built m;
    mha_build(&m, c, &r);
    ak_context *ctx = cpu_ctx(threads);
    ak_status s = mha_run(ctx, &m);
    CHECK_MSG(s == AK_OK, "%s: ak_mha returned %s (%s)", c->name, ak_status_name(s),
              ak_last_error());
    if (s == AK_OK) {
        int64_t n = m.total_q * c->h_q;
        double *ro = (double *)malloc(sizeof(double) * (size_t)(n * c->dv + 1));
        double *rl = (double *)malloc(sizeof(double) * (size_t)(n + 1));
        orc_mha(&m.prob, ro, rl);
        float *got = (float *)malloc(sizeof(float) * (size_t)(n * c->dv + 1));
        for (int64_t i = 0; i < n * c->dv; i++)
            got[i] = c->out_f32 ? ((float *)m.tout.data)[i]
                                : (float)orc_bf16(((uint16_t *)m.tout.data)[i]);
        char what[160];
        snprintf(what, sizeof what, "%s h_q %d out (threads %d)", c->name, (int)c->h_q,
                 (int)threads);
        /* f32 out: fp32 logits/accumulators against fp64 differ by ~1e-6 of the row's scale;
           bf16 out adds one bf16 rounding (2^-9 relative): semantics.md 14.2 decode bounds. */
        ak_tol to_f32 = {1e-4, 1e-3, 1e-7, 1e-8};
        ak_tol to_bf16 = {1e-3, 2.01 / 128, 5e-6, 5e-4};
        ak_compare(what, got, ro, n * c->dv, c->out_f32 ? to_f32 : to_bf16);
        if (c->with_lse) {
            /* lse: fp32 logits carry ~1e-6 relative error; 8.01/65536 is the decode bound */
            ak_tol tl = {1e-5, 8.01 / 65536, -1, -1};
            snprintf(what, sizeof what, "%s h_q %d lse", c->name, (int)c->h_q);
            ak_compare(what, (const float *)m.tlse.data, rl, n, tl);
        }
        free(ro);
        free(rl);
        free(got);
    }
    ak_context_destroy(ctx);
    mha_free(&m);
}

/* ---- cases ------------------------------------------------------------------------------- */

AK_TEST(mha_prefill_causal_block_table) {
    mha_case c = {"prefill nhd bf16 P16", AK_LAYOUT_MHA_NHD, AK_DTYPE_BF16, 16, 8, 2, 128, 128, 5,
                  {37, 1, 16, 0, 65}, {37, 1, 16, 0, 65}, ORC_PT_BLOCK, 1, 0, 1, -1, 0, 0, 1, 1, 0};
    mha_check(&c, 2);
}

AK_TEST(mha_extend_hnd_f16_sink) {
    /* extend over a cached prefix; page 63 and a padded page stride */
    mha_case c = {"extend hnd f16 P63", AK_LAYOUT_MHA_HND, AK_DTYPE_F16, 63, 16, 4, 64, 64, 3,
                  {130, 3, 64}, {5, 0, 8}, ORC_PT_BLOCK, 1, 0, 1, -1, 1, 0, 1, 1, 64};
    mha_check(&c, 2);
}

AK_TEST(mha_decode_fp8_csr_sinks) {
    mha_case c = {"decode nhd e4m3 P64 csr", AK_LAYOUT_MHA_NHD, AK_DTYPE_E4M3, 64, 32, 8, 128, 128,
                  5, {1, 64, 65, 200, 0}, {1, 1, 1, 1, 1}, ORC_PT_CSR, 0, 0, 1, -1, 2, 0, 1, 1, 0,
                  0.75f, 1.5f};
    mha_check(&c, 2);
}

AK_TEST(mha_fp8_scale_pointers) {
    mha_case c = {"fp8 scale pointers", AK_LAYOUT_MHA_HND, AK_DTYPE_E4M3, 16, 8, 2, 64, 64, 2,
                  {33, 7}, {2, 2}, ORC_PT_BLOCK, 0, 0, 1, -1, 0, 0, 1, 1, 0, 0.375f, 2.5f, 1};
    mha_check(&c, 2);
}

AK_TEST(mha_verify_uniform_token_table_window) {
    mha_case c = {"verify hnd bf16 P65 token", AK_LAYOUT_MHA_HND, AK_DTYPE_BF16, 65, 8, 1, 128,
                  128, 3, {130, 4, 66}, {4, 4, 4}, ORC_PT_TOKEN, 0, 0, 1, 5, 0, 0, 1, 1, 0};
    mha_check(&c, 2);
}

AK_TEST(mha_verify_ragged_p1_d256) {
    mha_case c = {"verify ragged P1 d256 csr", AK_LAYOUT_MHA_NHD, AK_DTYPE_BF16, 1, 8, 2, 256, 256,
                  4, {20, 3, 9, 0}, {8, 3, 1, 0}, ORC_PT_CSR, 1, 2, 1, 7, 1, 0, 0, 1, 0};
    mha_check(&c, 2);
}

AK_TEST(mha_deepseek_192_128) {
    /* DeepSeek's non-absorbed prefill: qk 192, v 128, one kv head per query head */
    mha_case c = {"prefill 192/128 P64", AK_LAYOUT_MHA_NHD, AK_DTYPE_BF16, 64, 16, 16, 192, 128, 2,
                  {70, 33}, {70, 33}, ORC_PT_BLOCK, 1, 0, 1, -1, 0, 0, 1, 1, 0};
    mha_check(&c, 2);
    mha_case e = {"extend 192/128 hnd e4m3", AK_LAYOUT_MHA_HND, AK_DTYPE_E4M3, 16, 4, 4, 192, 128,
                  2, {40, 17}, {6, 17}, ORC_PT_CSR, 1, 0, 1, -1, 1, 0, 1, 1, 0, 0.5f, 2.0f};
    mha_check(&e, 2);
}

AK_TEST(mha_head_counts) {
    /* h_q in {1, 8, 16, 32, 64, 128}, GQA groups 1, 4, 8 and wider; s_q up to 8 */
    static const int32_t hq[] = {1, 8, 16, 32, 64, 128}, hkv[] = {1, 2, 4, 8, 8, 16};
    for (int32_t i = 0; i < 6; i++) {
        mha_case c = {"heads nhd bf16 P16", AK_LAYOUT_MHA_NHD, AK_DTYPE_BF16, 16, hq[i], hkv[i],
                      128, 128, 2, {33, 17}, {8, 2}, ORC_PT_BLOCK, 1, 0, 1, -1, 1, 0, 1, 1, 0};
        mha_check(&c, 2);
    }
    mha_case d = {"heads decode h128 g16 hnd", AK_LAYOUT_MHA_HND, AK_DTYPE_BF16, 16, 128, 8, 64,
                  64, 2, {40, 17}, {2, 2}, ORC_PT_TOKEN, 0, 0, 1, -1, 0, 0, 1, 1, 0};
    mha_check(&d, 2);
}

AK_TEST(mha_noncausal_window_short_kv) {
    /* non-causal with a window; request 1 has q_len > kv_len (rows sit before position 0) */
    mha_case c = {"noncausal window", AK_LAYOUT_MHA_NHD, AK_DTYPE_BF16, 16, 8, 4, 64, 64, 3,
                  {50, 3, 17}, {7, 5, 17}, ORC_PT_BLOCK, 1, 3, 0, 9, 1, 0, 1, 1, 0};
    mha_check(&c, 2);
    mha_case d = {"causal q_len > kv_len", AK_LAYOUT_MHA_HND, AK_DTYPE_F16, 64, 8, 4, 64, 64, 2,
                  {3, 65}, {6, 2}, ORC_PT_CSR, 1, 0, 1, 4, 2, 0, 1, 1, 0};
    mha_check(&d, 2);
}

AK_TEST(mha_invalid_entries_masked) {
    /* invalid page ids / slots inside the needed range are masked keys (rules I1, I2) and their
       NaN bytes never leak; request 0 of the second set has no valid key at all */
    static const int32_t forms[] = {ORC_PT_BLOCK, ORC_PT_TOKEN, ORC_PT_CSR};
    for (int32_t f = 0; f < 3; f++) {
        for (int32_t inv = 1; inv <= 2; inv++) {
            mha_case c = {"invalid entries", f == 1 ? AK_LAYOUT_MHA_HND : AK_LAYOUT_MHA_NHD,
                          AK_DTYPE_BF16, 16, 8, 2, 64, 64, 3, {40, 70, 20}, {3, 4, 20},
                          forms[f], 1, 0, 1, -1, inv == 2 ? 2 : 0, inv, 1, 1, 0};
            mha_check(&c, 2);
        }
    }
}

AK_TEST(mha_page_sizes) {
    static const int32_t ps[] = {1, 16, 63, 64, 65};
    for (int32_t i = 0; i < 5; i++) {
        mha_case c = {"page sizes", i % 2 ? AK_LAYOUT_MHA_HND : AK_LAYOUT_MHA_NHD,
                      i == 2 ? AK_DTYPE_E4M3 : AK_DTYPE_BF16, ps[i], 8, 2, 128, 128, 3,
                      {130, 64, 65}, {2, 2, 2}, i == 4 ? ORC_PT_CSR : ORC_PT_BLOCK, 0, 0, 1, -1, 0,
                      0, 1, 1, 0, 1.25f, 0.5f};
        mha_check(&c, 2);
    }
}

AK_TEST(mha_bitwise_across_threads) {
    mha_case c = {"bitwise", AK_LAYOUT_MHA_NHD, AK_DTYPE_BF16, 16, 16, 4, 128, 128, 4,
                  {90, 1, 0, 64}, {90, 1, 0, 7}, ORC_PT_BLOCK, 1, 1, 1, 40, 1, 1, 1, 1, 0};
    ak_rng r;
    ak_rng_init(&r, ak_test_seed());
    mha_built m;
    mha_build(&m, &c, &r);
    uint8_t *ref_o = (uint8_t *)malloc(m.out_bytes), *ref_l = (uint8_t *)malloc(m.lse_bytes);
    static const int32_t threads[] = {1, 1, 2, 3, 4};
    for (int32_t i = 0; i < 5; i++) {
        ak_context *ctx = cpu_ctx(threads[i]);
        CHECK_STATUS(mha_run(ctx, &m), AK_OK);
        if (i == 0) {
            memcpy(ref_o, m.tout.data, m.out_bytes);
            memcpy(ref_l, m.tlse.data, m.lse_bytes);
        } else {
            CHECK_MSG(memcmp(ref_o, m.tout.data, m.out_bytes) == 0 &&
                          memcmp(ref_l, m.tlse.data, m.lse_bytes) == 0,
                      "bitwise: out/lse differ between 1 thread and %d threads", (int)threads[i]);
        }
        ak_context_destroy(ctx);
    }
    free(ref_o);
    free(ref_l);
    mha_free(&m);
}

AK_TEST(mha_random_configs) {
    /* random draws over the whole parameter space, each against the oracle */
    static const int32_t ps[] = {1, 2, 16, 63, 64, 65}, dq[] = {64, 128, 256, 192},
                         dvv[] = {64, 128, 256, 128}, wins[] = {-1, -1, 0, 3, 40};
    static const ak_dtype el[] = {AK_DTYPE_BF16, AK_DTYPE_F16, AK_DTYPE_E4M3};
    ak_rng r;
    ak_rng_init(&r, ak_test_seed() ^ 0x5eedu);
    for (int32_t it = 0; it < 40 && ak_test_failures() == 0; it++) {
        mha_case c;
        memset(&c, 0, sizeof c);
        c.name = "random";
        c.layout = ak_rng_range(&r, 0, 2) ? AK_LAYOUT_MHA_HND : AK_LAYOUT_MHA_NHD;
        c.elem = el[ak_rng_range(&r, 0, 3)];
        c.P = ps[ak_rng_range(&r, 0, 6)];
        c.h_kv = (int32_t)(1 << ak_rng_range(&r, 0, 3));
        c.h_q = c.h_kv * (int32_t)(1 << ak_rng_range(&r, 0, 4));
        int32_t hd = (int32_t)ak_rng_range(&r, 0, 4);
        c.dqk = dq[hd];
        c.dv = dvv[hd];
        c.B = (int32_t)ak_rng_range(&r, 1, 5);
        c.form = (int32_t)ak_rng_range(&r, 0, 3);
        c.ragged = (int32_t)ak_rng_range(&r, 0, 2);
        int32_t uq = (int32_t)ak_rng_range(&r, 1, 9);
        for (int32_t b = 0; b < c.B; b++) {
            c.kv[b] = (int32_t)ak_rng_range(&r, 0, 150);
            c.ql[b] = c.ragged ? (int32_t)ak_rng_range(&r, 0, 9) : uq;
            if (c.ragged && ak_rng_range(&r, 0, 4) == 0) c.ql[b] = c.kv[b]; /* prefill */
        }
        c.pad_rows = c.ragged ? (int32_t)ak_rng_range(&r, 0, 3) : 0;
        c.causal = ak_rng_range(&r, 0, 4) != 0;
        c.window = wins[ak_rng_range(&r, 0, 5)];
        c.sink = (int32_t)ak_rng_range(&r, 0, 3);
        c.invalid = (int32_t)ak_rng_range(&r, 0, 3);
        c.out_f32 = (int32_t)ak_rng_range(&r, 0, 2);
        c.with_lse = 1;
        c.extra_stride = ak_rng_range(&r, 0, 4) == 0 ? 32 : 0;
        c.k_scale = 0.5f;
        c.v_scale = 1.75f;
        mha_check(&c, (int32_t)ak_rng_range(&r, 1, 4));
        if (ak_test_failures())
            ak_test_fail_at(__FILE__, __LINE__,
                            "random case %d: %s %s P%d h_q %d h_kv %d d %d/%d B %d form %d ragged "
                            "%d causal %d window %d sink %d invalid %d",
                            (int)it, c.layout == AK_LAYOUT_MHA_HND ? "HND" : "NHD",
                            ak_dtype_name(c.elem), (int)c.P, (int)c.h_q, (int)c.h_kv, (int)c.dqk,
                            (int)c.dv, (int)c.B, (int)c.form, (int)c.ragged, (int)c.causal,
                            (int)c.window, (int)c.sink, (int)c.invalid);
    }
}

/* ---- bad inputs ---------------------------------------------------------------------------- */

AK_TEST(mha_bad_inputs) {
    mha_case c = {"bad", AK_LAYOUT_MHA_NHD, AK_DTYPE_BF16, 16, 8, 2, 64, 64, 2, {20, 40},
                  {2, 3}, ORC_PT_BLOCK, 1, 0, 1, -1, 0, 0, 1, 1, 0};
    ak_rng r;
    ak_rng_init(&r, ak_test_seed());
    mha_built m;
    mha_build(&m, &c, &r);
    ak_context *ctx = cpu_ctx(2);
    size_t ws = 0;
    CHECK_STATUS(ak_mha_workspace_size(ctx, &m.args, &ws), AK_OK);
    void *w = malloc(ws);
    ak_mha_args a = m.args;
    CHECK_REJECT(ak_mha(ctx, NULL, w, ws), AK_ERR_INVALID_ARGUMENT, "args");
    CHECK_REJECT(ak_mha(NULL, &a, w, ws), AK_ERR_INVALID_ARGUMENT, NULL);
    CHECK_REJECT(ak_mha_workspace_size(ctx, &a, NULL), AK_ERR_INVALID_ARGUMENT, "bytes");
    a.out = NULL;
    CHECK_REJECT(ak_mha(ctx, &a, w, ws), AK_ERR_INVALID_ARGUMENT, "out");
    a = m.args;
    a.q = NULL;
    CHECK_REJECT(ak_mha(ctx, &a, w, ws), AK_ERR_INVALID_ARGUMENT, "q");
    a = m.args;
    CHECK_REJECT(ak_mha(ctx, &a, w, ws - 1), AK_ERR_WORKSPACE_TOO_SMALL, "workspace");
    CHECK_REJECT(ak_mha(ctx, &a, NULL, ws), AK_ERR_WORKSPACE_TOO_SMALL, "workspace");
    /* a workspace at an odd address is fine: the size query includes alignment slack */
    char *odd = (char *)malloc(ws + 3);
    CHECK_STATUS(ak_mha(ctx, &a, odd + 3, ws), AK_OK);
    free(odd);

    /* h_q not divisible by h_kv: q with 3 heads over 2 kv heads */
    ak_tensor q3 = m.tq;
    q3.shape[1] = 3;
    a.q = &q3;
    CHECK_REJECT(ak_mha(ctx, &a, w, ws), AK_ERR_INVALID_ARGUMENT, "h_q");
    a = m.args;
    ak_tensor qf = m.tq;
    qf.dtype = AK_DTYPE_F32;
    a.q = &qf;
    CHECK_REJECT(ak_mha(ctx, &a, w, ws), AK_ERR_INVALID_ARGUMENT, "q");
    a = m.args;
    ak_tensor qd = m.tq;
    qd.shape[2] = 128;
    a.q = &qd;
    CHECK_REJECT(ak_mha(ctx, &a, w, ws), AK_ERR_INVALID_ARGUMENT, "q");

    /* a block table shorter than seq_len (values are checked before anything is written) */
    a = m.args;
    m.seq_lens[1] = (int32_t)(m.width * c.P + 1);
    ak_poison(m.tout.data, m.out_bytes, m.tout.dtype);
    CHECK_REJECT(ak_mha(ctx, &a, w, ws), AK_ERR_INVALID_ARGUMENT, "seq_lens");
    CHECK(isnan(((float *)m.tout.data)[0])); /* nothing written */
    m.seq_lens[1] = c.kv[1];

    /* page table forms: none, both, token_table with CSR, bad token_table value */
    a.block_table = NULL;
    a.seq_lens = NULL;
    CHECK_REJECT(ak_mha(ctx, &a, w, ws), AK_ERR_INVALID_ARGUMENT, "page table");
    a = m.args;
    int64_t b1 = 3, two = 2;
    ak_tensor ip = ak_tensor_make(m.cu, AK_DTYPE_I32, 1, &b1);
    ak_tensor lp = ak_tensor_make(m.seq_lens, AK_DTYPE_I32, 1, &two);
    a.kv_indptr = &ip;
    a.kv_indices = &ip;
    a.kv_last_page_len = &lp;
    CHECK_REJECT(ak_mha(ctx, &a, w, ws), AK_ERR_INVALID_ARGUMENT, "page table");
    a.block_table = NULL;
    a.seq_lens = NULL;
    a.token_table = 1;
    CHECK_REJECT(ak_mha(ctx, &a, w, ws), AK_ERR_INVALID_ARGUMENT, "token_table");
    a = m.args;
    a.token_table = 2;
    CHECK_REJECT(ak_mha(ctx, &a, w, ws), AK_ERR_INVALID_ARGUMENT, "token_table");

    /* wrong shapes and dtypes of the side tensors */
    a = m.args;
    ak_tensor sl = m.tsl;
    sl.shape[0] = 3;
    a.seq_lens = &sl;
    CHECK_REJECT(ak_mha(ctx, &a, w, ws), AK_ERR_INVALID_ARGUMENT, "seq_lens");
    a = m.args;
    ak_tensor bt = m.tbt;
    bt.dtype = AK_DTYPE_I64;
    a.block_table = &bt;
    CHECK_REJECT(ak_mha(ctx, &a, w, ws), AK_ERR_INVALID_ARGUMENT, "block_table");
    a = m.args;
    ak_tensor lse = m.tlse;
    lse.shape[1] = 9;
    a.lse = &lse;
    CHECK_REJECT(ak_mha(ctx, &a, w, ws), AK_ERR_INVALID_ARGUMENT, "lse");
    a = m.args;
    ak_tensor sk = m.tsink;
    sk.shape[0] = 4;
    a.attn_sink = &sk;
    CHECK_REJECT(ak_mha(ctx, &a, w, ws), AK_ERR_INVALID_ARGUMENT, "attn_sink");
    a = m.args;
    ak_tensor ob = m.tout;
    ob.dtype = AK_DTYPE_F16;
    a.out = &ob;
    CHECK_REJECT(ak_mha(ctx, &a, w, ws), AK_ERR_INVALID_ARGUMENT, "out");
    a = m.args;
    a.window_left = -2;
    CHECK_REJECT(ak_mha(ctx, &a, w, ws), AK_ERR_INVALID_ARGUMENT, "window_left");
    a = m.args;
    a.softmax_scale = NAN;
    CHECK_REJECT(ak_mha(ctx, &a, w, ws), AK_ERR_INVALID_ARGUMENT, "softmax_scale");
    a = m.args;
    a.causal = 5;
    CHECK_REJECT(ak_mha(ctx, &a, w, ws), AK_ERR_INVALID_ARGUMENT, "causal");

    /* cu_seqlens_q decreasing or past the rows of q */
    a = m.args;
    int32_t saved = m.cu[1];
    m.cu[1] = m.cu[2] + 1;
    CHECK_REJECT(ak_mha(ctx, &a, w, ws), AK_ERR_INVALID_ARGUMENT, "cu_seqlens_q");
    m.cu[1] = saved;
    m.cu[2] = (int32_t)m.total_q + 1;
    CHECK_REJECT(ak_mha(ctx, &a, w, ws), AK_ERR_INVALID_ARGUMENT, "cu_seqlens_q");
    m.cu[2] = (int32_t)m.total_q;

    /* cache: unsupported head dims, wrong layout */
    ak_cache cc = m.cache;
    cc.head_dim = 96;
    cc.head_dim_v = 96;
    a.cache = &cc;
    CHECK_REJECT(ak_mha(ctx, &a, w, ws), AK_ERR_UNSUPPORTED, "head_dim");
    cc = m.cache;
    cc.layout = AK_LAYOUT_MLA_BF16;
    CHECK_REJECT(ak_mha(ctx, &a, w, ws), AK_ERR_UNSUPPORTED, "layout");
    a.cache = NULL;
    CHECK_REJECT(ak_mha(ctx, &a, w, ws), AK_ERR_INVALID_ARGUMENT, "cache");
    free(w);
    ak_context_destroy(ctx);
    mha_free(&m);
}

AK_TEST(mha_bad_csr_values) {
    mha_case c = {"bad csr", AK_LAYOUT_MHA_NHD, AK_DTYPE_BF16, 16, 8, 2, 64, 64, 2, {20, 40},
                  {1, 1}, ORC_PT_CSR, 0, 0, 1, -1, 0, 0, 1, 1, 0};
    ak_rng r;
    ak_rng_init(&r, ak_test_seed());
    mha_built m;
    mha_build(&m, &c, &r);
    ak_context *ctx = cpu_ctx(2);
    size_t ws = 0;
    CHECK_STATUS(ak_mha_workspace_size(ctx, &m.args, &ws), AK_OK);
    void *w = malloc(ws);
    int32_t saved = m.last[1];
    m.last[1] = 0;
    CHECK_REJECT(ak_mha(ctx, &m.args, w, ws), AK_ERR_INVALID_ARGUMENT, "kv_last_page_len");
    m.last[1] = c.P + 1;
    CHECK_REJECT(ak_mha(ctx, &m.args, w, ws), AK_ERR_INVALID_ARGUMENT, "kv_last_page_len");
    m.last[1] = saved;
    m.indptr[2] = (int32_t)m.nnz + 1;
    CHECK_REJECT(ak_mha(ctx, &m.args, w, ws), AK_ERR_INVALID_ARGUMENT, "kv_indptr");
    m.indptr[2] = m.indptr[0] - 1;
    CHECK_REJECT(ak_mha(ctx, &m.args, w, ws), AK_ERR_INVALID_ARGUMENT, "kv_indptr");
    free(w);
    ak_context_destroy(ctx);
    mha_free(&m);
}
