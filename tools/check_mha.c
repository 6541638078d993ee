/*
 * check_mha.c -- `attnkit check` ops "mha" (paged MHA/GQA) and "merge" (ak_merge_states): seeded
 * random inputs over shapes that cross page boundaries, with empty requests, invalid page ids,
 * sinks of +-inf and NaN in every unused cache byte; the op runs on the reference and the test
 * context and the outputs are compared (bitwise for two CPU contexts, semantics.md 14.2 otherwise).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "devmem.h"

#define MAXB 4

/* xorshift64*: the tools' own seeded generator */
static uint64_t rnd_u64(uint64_t *s) {
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 2685821657736338717ull;
}
static double rnd_unit(uint64_t *s) {
    return (double)(rnd_u64(s) >> 11) * (1.0 / 9007199254740992.0);
}
static int32_t rnd_int(uint64_t *s, int32_t n) { return (int32_t)(rnd_u64(s) % (uint64_t)n); }
static uint16_t bf16_bits(double x) { /* bf16 nearest-even of a moderate finite value */
    float f = (float)x;
    uint32_t u;
    memcpy(&u, &f, 4);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}
static double rnd_normal(uint64_t *s) {
    double u = rnd_unit(s), v = rnd_unit(s);
    return sqrt(-2.0 * log(u + 1e-300)) * cos(6.283185307179586 * v);
}

typedef struct mha_shape {
    const char *name;
    ak_layout layout;
    ak_dtype elem;
    int32_t P, h_q, h_kv, dqk, dv, B;
    int32_t kv[MAXB], ql[MAXB];
    int32_t csr, ragged, causal, window, sink, bad_page, quick;
} mha_shape;

static const mha_shape k_shapes[] = {
    {"decode", AK_LAYOUT_MHA_NHD, AK_DTYPE_BF16, 16, 32, 8, 128, 128, 4, {1, 17, 100, 0},
     {1, 1, 1, 1}, 0, 0, 1, -1, 0, 0, 1},
    {"verify", AK_LAYOUT_MHA_HND, AK_DTYPE_E4M3, 64, 16, 2, 128, 128, 3, {130, 65, 4},
     {4, 4, 4}, 1, 0, 1, -1, 2, 1, 1},
    {"prefill", AK_LAYOUT_MHA_NHD, AK_DTYPE_BF16, 63, 8, 8, 192, 128, 3, {70, 1, 0},
     {70, 1, 0}, 0, 1, 1, -1, 0, 0, 0},
    {"extend", AK_LAYOUT_MHA_HND, AK_DTYPE_F16, 1, 16, 4, 64, 64, 3, {90, 5, 33}, {6, 0, 8},
     1, 1, 1, 16, 1, 1, 0},
    {"noncausal", AK_LAYOUT_MHA_NHD, AK_DTYPE_BF16, 65, 64, 8, 256, 256, 2, {140, 66}, {3, 66},
     0, 1, 0, 40, 2, 0, 0},
};

/* Host copies of one case's inputs. */
typedef struct mha_host {
    mha_shape s;
    int32_t num_pages;
    int64_t kbytes, vbytes, nnz, width, total_q, out_n;
    uint8_t *k, *v;
    uint16_t *q;
    int32_t *bt, *sl, *ip, *ix, *lp, *cu;
    float *sink;
} mha_host;

static void put_elem(uint8_t *pool, int64_t off, ak_dtype t, uint64_t *r) {
    if (t == AK_DTYPE_E4M3) {
        pool[off] = (uint8_t)((rnd_int(r, 2) << 7) | ((4 + rnd_int(r, 6)) << 3) | rnd_int(r, 8));
        return;
    }
    uint16_t b =
        t == AK_DTYPE_F16
            ? (uint16_t)((rnd_int(r, 2) << 15) | ((12 + rnd_int(r, 5)) << 10) | rnd_int(r, 1024))
            : bf16_bits(rnd_normal(r));
    memcpy(pool + 2 * off, &b, 2);
}

static int mha_host_build(mha_host *h, const mha_shape *s, uint64_t seed) {
    memset(h, 0, sizeof *h);
    h->s = *s;
    uint64_t r = seed | 1;
    int32_t P = s->P, esz = s->elem == AK_DTYPE_E4M3 ? 1 : 2, pages = 0, maxp = 1;
    for (int32_t b = 0; b < s->B; b++) {
        int32_t n = (s->kv[b] + P - 1) / P;
        pages += n;
        if (n > maxp) maxp = n;
    }
    h->num_pages = pages + 2;
    h->kbytes = (int64_t)h->num_pages * P * s->h_kv * s->dqk * esz;
    h->vbytes = (int64_t)h->num_pages * P * s->h_kv * s->dv * esz;
    h->width = maxp + 1;
    h->nnz = pages + 1;
    h->k = (uint8_t *)malloc((size_t)h->kbytes);
    h->v = (uint8_t *)malloc((size_t)h->vbytes);
    h->bt = (int32_t *)malloc(sizeof(int32_t) * (size_t)(s->B * h->width));
    h->ix = (int32_t *)malloc(sizeof(int32_t) * (size_t)h->nnz);
    h->sl = (int32_t *)calloc(MAXB, sizeof(int32_t));
    h->lp = (int32_t *)calloc(MAXB, sizeof(int32_t));
    h->ip = (int32_t *)calloc(MAXB + 1, sizeof(int32_t));
    h->cu = (int32_t *)calloc(MAXB + 1, sizeof(int32_t));
    h->sink = (float *)malloc(sizeof(float) * (size_t)s->h_q);
    if (!h->k || !h->v || !h->bt || !h->ix || !h->sl || !h->lp || !h->ip || !h->cu || !h->sink)
        return 0;
    /* NaN everywhere first: unused slots and pages must never be read */
    if (esz == 1) {
        memset(h->k, 0x7f, (size_t)h->kbytes);
        memset(h->v, 0x7f, (size_t)h->vbytes);
    } else {
        uint16_t nan = s->elem == AK_DTYPE_F16 ? 0x7e00 : 0x7fc0;
        for (int64_t i = 0; i < h->kbytes / 2; i++) memcpy(h->k + 2 * i, &nan, 2);
        for (int64_t i = 0; i < h->vbytes / 2; i++) memcpy(h->v + 2 * i, &nan, 2);
    }
    for (int64_t i = 0; i < s->B * h->width; i++) h->bt[i] = 2147480000;
    for (int64_t i = 0; i < h->nnz; i++) h->ix[i] = 2147480000;
    int32_t next = 1; /* page 0 stays unused (NaN) */
    for (int32_t b = 0; b < s->B; b++) {
        int32_t n = (s->kv[b] + P - 1) / P;
        h->ip[b + 1] = h->ip[b] + n;
        h->lp[b] = n > 0 ? s->kv[b] - (n - 1) * P : 0;
        h->sl[b] = s->kv[b];
        h->cu[b + 1] = h->cu[b] + s->ql[b];
        for (int32_t p = 0; p < n; p++) {
            int32_t page = next++;
            if (s->bad_page && b == 0 && p == 1) page = -1; /* rule I2: masked keys */
            h->bt[b * h->width + p] = page;
            h->ix[h->ip[b] + p] = page;
            if (page < 0) continue;
            for (int32_t t = 0; t < P && p * P + t < s->kv[b]; t++)
                for (int32_t kh = 0; kh < s->h_kv; kh++) {
                    int64_t kin = s->layout == AK_LAYOUT_MHA_HND ? ((int64_t)kh * P + t)
                                                                 : ((int64_t)t * s->h_kv + kh);
                    int64_t kbase = ((int64_t)page * P * s->h_kv + kin) * s->dqk;
                    int64_t vbase = ((int64_t)page * P * s->h_kv + kin) * s->dv;
                    for (int32_t d = 0; d < s->dqk; d++) put_elem(h->k, kbase + d, s->elem, &r);
                    for (int32_t d = 0; d < s->dv; d++) put_elem(h->v, vbase + d, s->elem, &r);
                }
        }
    }
    h->total_q = s->ragged ? h->cu[s->B] + 1 : (int64_t)s->B * s->ql[0]; /* one padding row */
    int64_t qn = h->total_q * s->h_q * s->dqk;
    h->q = (uint16_t *)calloc((size_t)qn + 1, sizeof(uint16_t));
    if (!h->q) return 0;
    for (int64_t i = 0; i < qn; i++) h->q[i] = bf16_bits(rnd_normal(&r));
    for (int32_t k = 0; k < s->h_q; k++) {
        h->sink[k] = (float)rnd_normal(&r);
        if (s->sink == 2 && k % 3 != 2) h->sink[k] = k % 3 ? -INFINITY : INFINITY;
    }
    h->out_n = h->total_q * s->h_q;
    return 1;
}

static void mha_host_free(mha_host *h) {
    free(h->k), free(h->v), free(h->q), free(h->bt), free(h->sl), free(h->ip), free(h->ix),
        free(h->lp), free(h->cu), free(h->sink);
}

/* Runs one case on ctx; out [rows * d_v] and lse [rows] come back as f32 host values. */
static ak_status mha_run_on(ak_context *ctx, const mha_host *h, int poison, float *out,
                            float *lse) {
    const mha_shape *s = &h->s;
    void *dk = ak_dev_clone(ctx, h->k, (size_t)h->kbytes),
         *dv = ak_dev_clone(ctx, h->v, (size_t)h->vbytes);
    void *dq =
        ak_dev_clone(ctx, h->q, sizeof(uint16_t) * (size_t)(h->total_q * s->h_q * s->dqk + 1));
    void *dbt = ak_dev_clone(ctx, h->bt, sizeof(int32_t) * (size_t)(s->B * h->width));
    void *dsl = ak_dev_clone(ctx, h->sl, sizeof(int32_t) * MAXB);
    void *dip = ak_dev_clone(ctx, h->ip, sizeof(int32_t) * (MAXB + 1));
    void *dix = ak_dev_clone(ctx, h->ix, sizeof(int32_t) * (size_t)h->nnz);
    void *dlp = ak_dev_clone(ctx, h->lp, sizeof(int32_t) * MAXB);
    void *dcu = ak_dev_clone(ctx, h->cu, sizeof(int32_t) * (MAXB + 1));
    void *dsk = ak_dev_clone(ctx, h->sink, sizeof(float) * (size_t)s->h_q);
    void *dout = ak_dev_alloc(ctx, sizeof(float) * (size_t)(h->out_n * s->dv + 1));
    void *dlse = ak_dev_alloc(ctx, sizeof(float) * (size_t)(h->out_n + 1));
    void *ws = NULL;
    ak_status st = AK_ERR_OUT_OF_MEMORY;
    if (!dk || !dv || !dq || !dbt || !dsl || !dip || !dix || !dlp || !dcu || !dsk || !dout || !dlse)
        goto done;
    ak_cache c;
    st = ak_cache_init_mha(&c, s->layout, s->elem, dk, dv, h->num_pages, s->P, s->h_kv, s->dqk,
                           s->dv);
    if (st != AK_OK) goto done;
    c.device = ak_context_device(ctx);
    if (s->elem == AK_DTYPE_E4M3) {
        c.k_scale = 0.75f;
        c.v_scale = 1.5f;
    }
    int32_t nd = s->ragged ? 3 : 4;
    int64_t qs[4], os[4], b1 = s->B + 1, bb = s->B, hq = s->h_q, bs[2] = {s->B, h->width};
    if (s->ragged) {
        int64_t t[4] = {h->total_q, s->h_q, s->dqk, 0};
        memcpy(qs, t, sizeof t);
    } else {
        int64_t t[4] = {s->B, s->ql[0], s->h_q, s->dqk};
        memcpy(qs, t, sizeof t);
    }
    memcpy(os, qs, sizeof qs);
    os[nd - 1] = s->dv;
    ak_tensor tq = ak_dev_tensor(ctx, dq, AK_DTYPE_BF16, nd, qs);
    ak_tensor tout = ak_dev_tensor(ctx, dout, AK_DTYPE_F32, nd, os);
    ak_tensor tlse = ak_dev_tensor(ctx, dlse, AK_DTYPE_F32, nd - 1, qs);
    ak_tensor tcu = ak_dev_tensor(ctx, dcu, AK_DTYPE_I32, 1, &b1);
    ak_tensor tbt = ak_dev_tensor(ctx, dbt, AK_DTYPE_I32, 2, bs);
    ak_tensor tsl = ak_dev_tensor(ctx, dsl, AK_DTYPE_I32, 1, &bb);
    ak_tensor tip = ak_dev_tensor(ctx, dip, AK_DTYPE_I32, 1, &b1);
    ak_tensor tix = ak_dev_tensor(ctx, dix, AK_DTYPE_I32, 1, &h->nnz);
    ak_tensor tlp = ak_dev_tensor(ctx, dlp, AK_DTYPE_I32, 1, &bb);
    ak_tensor tsk = ak_dev_tensor(ctx, dsk, AK_DTYPE_F32, 1, &hq);
    ak_mha_args a;
    memset(&a, 0, sizeof a);
    a.q = &tq;
    a.cu_seqlens_q = s->ragged ? &tcu : NULL;
    a.cache = &c;
    if (s->csr) {
        a.kv_indptr = &tip;
        a.kv_indices = &tix;
        a.kv_last_page_len = &tlp;
    } else {
        a.block_table = &tbt;
        a.seq_lens = &tsl;
    }
    a.softmax_scale = (float)pow((double)s->dqk, -0.55);
    a.causal = s->causal;
    a.window_left = s->window;
    a.attn_sink = s->sink ? &tsk : NULL;
    a.out = &tout;
    a.lse = &tlse;
    size_t wb = 0;
    st = ak_mha_workspace_size(ctx, &a, &wb);
    if (st != AK_OK) goto done;
    ws = ak_dev_alloc(ctx, wb > 0 ? wb : 1);
    if (ws == NULL) {
        st = AK_ERR_OUT_OF_MEMORY;
        goto done;
    }
    /* poisoned outputs (a different byte per side, so an unwritten element differs even in a
       bitwise comparison): every element must be written */
    st = ak_dev_memset(ctx, dout, poison, sizeof(float) * (size_t)(h->out_n * s->dv));
    if (st == AK_OK) st = ak_dev_memset(ctx, dlse, poison, sizeof(float) * (size_t)h->out_n);
    if (st == AK_OK) st = ak_mha(ctx, &a, ws, wb);
    if (st == AK_OK) st = ak_context_synchronize(ctx);
    if (st == AK_OK)
        st = ak_dev_download(ctx, out, dout, sizeof(float) * (size_t)(h->out_n * s->dv));
    if (st == AK_OK) st = ak_dev_download(ctx, lse, dlse, sizeof(float) * (size_t)h->out_n);
done:
    ak_dev_free(ctx, dk), ak_dev_free(ctx, dv), ak_dev_free(ctx, dq), ak_dev_free(ctx, dbt);
    ak_dev_free(ctx, dsl), ak_dev_free(ctx, dip), ak_dev_free(ctx, dix), ak_dev_free(ctx, dlp);
    ak_dev_free(ctx, dcu), ak_dev_free(ctx, dsk), ak_dev_free(ctx, dout), ak_dev_free(ctx, dlse);
    ak_dev_free(ctx, ws);
    return st;
}

static void describe(const mha_shape *s, char *buf, size_t n) {
    snprintf(buf, n, "%s %s %s P%d h_q %d h_kv %d d %d/%d B %d%s%s%s w %d sink %d", s->name,
             s->layout == AK_LAYOUT_MHA_HND ? "HND" : "NHD", ak_dtype_name(s->elem), (int)s->P,
             (int)s->h_q, (int)s->h_kv, (int)s->dqk, (int)s->dv, (int)s->B,
             s->csr ? " csr" : " block", s->ragged ? " ragged" : " uniform",
             s->causal ? " causal" : "", (int)s->window, (int)s->sink);
}

static void check_mha_op(ak_context *ref, ak_context *test, const ak_check_opts *o,
                         ak_check_report *rep) {
    for (size_t i = 0; i < sizeof k_shapes / sizeof k_shapes[0]; i++) {
        const mha_shape *s = &k_shapes[i];
        if (o->quick && !s->quick) continue;
        ak_check_result res;
        memset(&res, 0, sizeof res);
        snprintf(res.op, sizeof res.op, "mha");
        describe(s, res.shape, sizeof res.shape);
        mha_host h;
        float *ro = NULL, *to = NULL, *rl = NULL, *tl = NULL;
        if (!mha_host_build(&h, s, o->seed + 0x9e3779b97f4a7c15ull * (i + 1))) {
            snprintf(res.note, sizeof res.note, "host allocation failed");
            goto report;
        }
        ro = (float *)malloc(sizeof(float) * (size_t)(h.out_n * s->dv + 1));
        to = (float *)malloc(sizeof(float) * (size_t)(h.out_n * s->dv + 1));
        rl = (float *)malloc(sizeof(float) * (size_t)(h.out_n + 1));
        tl = (float *)malloc(sizeof(float) * (size_t)(h.out_n + 1));
        ak_status st;
        if (!ro || !to || !rl || !tl) {
            snprintf(res.note, sizeof res.note, "host allocation failed");
        } else if ((st = mha_run_on(ref, &h, 0xff, ro, rl)) != AK_OK) {
            snprintf(res.note, sizeof res.note, "reference: %s: %.150s", ak_status_name(st),
                     ak_last_error());
        } else if ((st = mha_run_on(test, &h, 0xfe, to, tl)) != AK_OK) {
            res.skipped = st == AK_ERR_UNSUPPORTED; /* no kernel on the test backend */
            snprintf(res.note, sizeof res.note, "test: %s: %.150s", ak_status_name(st),
                     ak_last_error());
        } else {
            /* semantics.md 14.2: out abs 1e-3 or rel 2.01/128 (3.01/128 prefill), NMSE 5e-4;
               lse abs 1e-6 or rel 8.01/65536 */
            int prefill = s->ql[0] > 8;
            ak_check_result rl_res = res;
            ak_check_compare_f32(to, ro, h.out_n * s->dv, 1e-3, (prefill ? 3.01 : 2.01) / 128,
                                 5e-4, o->bitwise, &res);
            ak_check_compare_f32(tl, rl, h.out_n, 1e-6, (prefill ? 2.01 : 8.01) / 65536, -1,
                                 o->bitwise, &rl_res);
            if (res.passed && !rl_res.passed) {
                res.passed = 0;
                snprintf(res.note, sizeof res.note, "lse: %.190s", rl_res.note);
            } else if (res.passed) {
                snprintf(res.note, sizeof res.note, "out + lse%s", o->bitwise ? ", bitwise" : "");
            }
        }
    report:
        ak_check_report_add(rep, &res);
        free(ro), free(to), free(rl), free(tl);
        mha_host_free(&h);
    }
}

/* ---- merge ---------------------------------------------------------------------------------- */

typedef struct merge_shape {
    int32_t n, rows, h, d, in2, out2, sink, bf16, quick;
} merge_shape;

static const merge_shape k_merge[] = {
    {2, 33, 32, 128, 0, 0, 0, 0, 1},
    {3, 17, 8, 512, 1, 0, 1, 1, 1},
    {5, 9, 16, 64, 1, 1, 2, 0, 0},
};

static ak_status merge_run_on(ak_context *ctx, const merge_shape *s, int poison, const float *outs,
                              const float *lses, const float *sink, float *out, float *lse) {
    int64_t nv = (int64_t)s->n * s->rows * s->h * s->d, nl = (int64_t)s->n * s->rows * s->h;
    int64_t per = (int64_t)s->rows * s->h;
    int64_t sh[4] = {s->n, s->rows, s->h, s->d}, hh = s->h;
    uint16_t *b16 = NULL;
    const void *src = outs;
    size_t vbytes = sizeof(float) * (size_t)nv;
    if (s->bf16) { /* bf16 partials */
        b16 = (uint16_t *)malloc(sizeof(uint16_t) * (size_t)nv);
        if (b16 == NULL) return AK_ERR_OUT_OF_MEMORY;
        for (int64_t i = 0; i < nv; i++) b16[i] = isnan(outs[i]) ? 0x7fc0 : bf16_bits(outs[i]);
        src = b16;
        vbytes = sizeof(uint16_t) * (size_t)nv;
    }
    void *dv = ak_dev_clone(ctx, src, vbytes);
    void *dl = ak_dev_clone(ctx, lses, sizeof(float) * (size_t)nl);
    void *ds = ak_dev_clone(ctx, sink, sizeof(float) * (size_t)s->h);
    void *dout = ak_dev_alloc(ctx, sizeof(float) * (size_t)(per * s->d));
    void *dlse = ak_dev_alloc(ctx, sizeof(float) * (size_t)per);
    free(b16);
    ak_status st = AK_ERR_OUT_OF_MEMORY;
    if (dv && dl && ds && dout && dlse) {
        ak_tensor to = ak_dev_tensor(ctx, dv, s->bf16 ? AK_DTYPE_BF16 : AK_DTYPE_F32, 4, sh);
        ak_tensor tl = ak_dev_tensor(ctx, dl, AK_DTYPE_F32, 3, sh);
        ak_tensor ts = ak_dev_tensor(ctx, ds, AK_DTYPE_F32, 1, &hh);
        ak_tensor tout = ak_dev_tensor(ctx, dout, AK_DTYPE_F32, 3, sh + 1);
        ak_tensor tlse = ak_dev_tensor(ctx, dlse, AK_DTYPE_F32, 2, sh + 1);
        st = ak_dev_memset(ctx, dout, poison, sizeof(float) * (size_t)(per * s->d));
        if (st == AK_OK) st = ak_dev_memset(ctx, dlse, poison, sizeof(float) * (size_t)per);
        if (st == AK_OK)
            st = ak_merge_states(ctx, &to, &tl, s->in2 ? AK_LSE_BASE_2 : AK_LSE_BASE_E,
                                 s->sink ? &ts : NULL, &tout, &tlse,
                                 s->out2 ? AK_LSE_BASE_2 : AK_LSE_BASE_E);
        if (st == AK_OK) st = ak_context_synchronize(ctx);
        if (st == AK_OK) st = ak_dev_download(ctx, out, dout, sizeof(float) * (size_t)(per * s->d));
        if (st == AK_OK) st = ak_dev_download(ctx, lse, dlse, sizeof(float) * (size_t)per);
    }
    ak_dev_free(ctx, dv), ak_dev_free(ctx, dl), ak_dev_free(ctx, ds), ak_dev_free(ctx, dout);
    ak_dev_free(ctx, dlse);
    return st;
}

static void check_merge_op(ak_context *ref, ak_context *test, const ak_check_opts *o,
                           ak_check_report *rep) {
    for (size_t i = 0; i < sizeof k_merge / sizeof k_merge[0]; i++) {
        const merge_shape *s = &k_merge[i];
        if (o->quick && !s->quick) continue;
        ak_check_result res;
        memset(&res, 0, sizeof res);
        snprintf(res.op, sizeof res.op, "merge");
        snprintf(res.shape, sizeof res.shape, "n %d rows %d h %d d %d base %s->%s sink %d %s",
                 (int)s->n, (int)s->rows, (int)s->h, (int)s->d, s->in2 ? "2" : "e",
                 s->out2 ? "2" : "e", (int)s->sink, s->bf16 ? "bf16" : "f32");
        int64_t nv = (int64_t)s->n * s->rows * s->h * s->d, nl = (int64_t)s->n * s->rows * s->h;
        int64_t per = (int64_t)s->rows * s->h;
        float *outs = (float *)malloc(sizeof(float) * (size_t)nv);
        float *lses = (float *)malloc(sizeof(float) * (size_t)nl);
        float *sink = (float *)malloc(sizeof(float) * (size_t)s->h);
        float *ro = (float *)malloc(sizeof(float) * (size_t)(per * s->d));
        float *to = (float *)malloc(sizeof(float) * (size_t)(per * s->d));
        float *rl = (float *)malloc(sizeof(float) * (size_t)per);
        float *tl = (float *)malloc(sizeof(float) * (size_t)per);
        if (!outs || !lses || !sink || !ro || !to || !rl || !tl) {
            snprintf(res.note, sizeof res.note, "host allocation failed");
        } else {
            uint64_t r = (o->seed ^ (0xabcdefull * (i + 1))) | 1;
            /* about one partial in four is empty (+inf or -inf lse, NaN out); row 0 entirely */
            for (int64_t k = 0; k < nl; k++) {
                double u = rnd_unit(&r);
                int empty = (k % per) / s->h == 0 || u < 0.25;
                lses[k] =
                    empty ? (u < 0.125 ? INFINITY : -INFINITY) : (float)(rnd_normal(&r) * 4.0);
                for (int32_t e = 0; e < s->d; e++)
                    outs[k * s->d + e] = empty ? NAN : (float)rnd_normal(&r);
            }
            for (int32_t k = 0; k < s->h; k++) {
                sink[k] = (float)rnd_normal(&r);
                if (s->sink == 2 && k % 3 != 2) sink[k] = k % 3 ? -INFINITY : INFINITY;
            }
            ak_status st;
            if ((st = merge_run_on(ref, s, 0xff, outs, lses, sink, ro, rl)) != AK_OK) {
                snprintf(res.note, sizeof res.note, "reference: %s: %.150s", ak_status_name(st),
                         ak_last_error());
            } else if ((st = merge_run_on(test, s, 0xfe, outs, lses, sink, to, tl)) != AK_OK) {
                res.skipped = st == AK_ERR_UNSUPPORTED;
                snprintf(res.note, sizeof res.note, "test: %s: %.150s", ak_status_name(st),
                         ak_last_error());
            } else {
                /* fp32 results of fp32 inputs: a few ulps apart across backends */
                ak_check_result lr = res;
                ak_check_compare_f32(to, ro, per * s->d, 1e-5, 1e-4, 1e-9, o->bitwise, &res);
                ak_check_compare_f32(tl, rl, per, 1e-6, 2.01 / 65536, -1, o->bitwise, &lr);
                if (res.passed && !lr.passed) {
                    res.passed = 0;
                    snprintf(res.note, sizeof res.note, "lse: %.190s", lr.note);
                } else if (res.passed) {
                    snprintf(res.note, sizeof res.note, "out + lse%s",
                             o->bitwise ? ", bitwise" : "");
                }
            }
        }
        ak_check_report_add(rep, &res);
        free(outs), free(lses), free(sink), free(ro), free(to), free(rl), free(tl);
    }
}

ak_status ak_check_mha(ak_context *ref, ak_context *test, const ak_check_opts *o,
                       ak_check_report *rep) {
    if (ak_check_wants(rep, "mha")) check_mha_op(ref, test, o, rep);
    if (ak_check_wants(rep, "merge")) check_merge_op(ref, test, o, rep);
    return AK_OK;
}
AK_CHECK_REGISTER(ak_check_mha)
