/*
 * cmd_run.c -- `attnkit run`, the main job: simulates serving one attention layer of a model for N
 * engine steps over a paged cache in the model's default layout. Each step has running decodes
 * (one a speculative verify every third step), a new prefill, and a new request whose prefix is
 * already cached (extend). The step writes its new tokens into the caches (main, indexer, V4
 * compressed), plans the batch with ak_plan_create, runs it with ak_plan_run, and checks sampled
 * rows against a reference computed here in double precision from the dequantized cache; for
 * sparse rows the reference takes its key set from direct ak_indexer_logits_paged + ak_topk calls
 * on that single row (so chunking, transforms, metadata and the attention kernels are checked).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "attnkit.h"
#include "cli.h"
#include "models.h"

#define MAX_REQ 16

typedef struct req {
    int32_t id, len; /* tokens in the cache after this step */
    int32_t q;       /* new tokens this step */
    ak_phase phase;
    int32_t *pages; /* page ids, [max_pages] */
} req;

typedef struct sim {
    const ak_model *m;
    ak_context *ctx;
    ak_plan_desc d;
    int32_t h_q, max_ctx, max_pages, num_pages, new_q, prefix;
    ak_cache main, extra, index;
    void *main_buf, *extra_buf, *index_buf;
    int32_t *free_pages;
    int32_t nfree;
    req reqs[MAX_REQ];
    int32_t nreq, next_id;
    uint64_t rng;
    int64_t checked_rows;
    double worst;
} sim;

/* ---- small helpers ------------------------------------------------------------------------------
 */

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static uint64_t rnd(sim *s) {
    s->rng ^= s->rng << 13;
    s->rng ^= s->rng >> 7;
    s->rng ^= s->rng << 17;
    return s->rng;
}

static float rnd_f(sim *s) {
    return (float)((double)(rnd(s) >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

static uint16_t f32_to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

static float bf16_to_f32(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static ak_tensor t1(void *p, ak_dtype dt, int64_t a) {
    int64_t sh[1] = {a};
    return ak_tensor_make(p, dt, 1, sh);
}

static ak_tensor t2(void *p, ak_dtype dt, int64_t a, int64_t b) {
    int64_t sh[2] = {a, b};
    return ak_tensor_make(p, dt, 2, sh);
}

static ak_tensor t3(void *p, ak_dtype dt, int64_t a, int64_t b, int64_t c) {
    int64_t sh[3] = {a, b, c};
    return ak_tensor_make(p, dt, 3, sh);
}

/* Errors return 2 (the run stops); a sampled row off the reference returns 1 (counted). */
static int fail(const char *what) {
    fprintf(stderr, "attnkit run: %s failed: %s\n", what, ak_last_error());
    return 2;
}

#define TRY(expr, what)                                                                            \
    do {                                                                                           \
        ak_status st_ = (expr);                                                                    \
        if (st_ != AK_OK) {                                                                        \
            fprintf(stderr, "attnkit run: %s: %s: %s\n", what, ak_status_name(st_),                \
                    ak_last_error());                                                              \
            return 2;                                                                              \
        }                                                                                          \
    } while (0)

static int32_t slot_of(const sim *s, const req *r, int64_t pos) {
    return r->pages[pos / s->d.page_size] * s->d.page_size + (int32_t)(pos % s->d.page_size);
}

/* ---- cache writes -------------------------------------------------------------------------------
 */

/* Writes positions [from, to) of request r: main latent rows, indexer keys, V4 compressed rows. */
static int write_tokens(sim *s, req *r, int64_t from, int64_t to) {
    int64_t n = to - from;
    if (n <= 0) return 0;
    int32_t dq = s->d.d_qk, rope = 64;
    float *rows = (float *)malloc((size_t)n * (size_t)dq * 4);
    int32_t *slots = (int32_t *)malloc((size_t)n * 4);
    if (rows == NULL || slots == NULL) return fail("host allocation");
    for (int64_t i = 0; i < n * dq; i++)
        rows[i] = rnd_f(s);
    for (int64_t i = 0; i < n; i++)
        slots[i] = slot_of(s, r, from + i);
    ak_tensor sl = t1(slots, AK_DTYPE_I32, n);
    int rc = 0;
    if (s->d.kind == AK_ATTN_MHA) {
        int32_t hk = s->d.h_kv, D = s->d.d_qk;
        float *v = (float *)malloc((size_t)n * hk * D * 4);
        float *k = (float *)malloc((size_t)n * hk * D * 4);
        if (v == NULL || k == NULL) return fail("host allocation");
        for (int64_t i = 0; i < n * hk * D; i++)
            k[i] = rnd_f(s), v[i] = rnd_f(s);
        ak_tensor kt = t3(k, AK_DTYPE_F32, n, hk, D), vt = t3(v, AK_DTYPE_F32, n, hk, D);
        ak_status st = ak_mha_cache_write(s->ctx, &s->main, &kt, &vt, &sl);
        free(k), free(v);
        if (st != AK_OK) rc = fail("ak_mha_cache_write");
    } else {
        ak_tensor nope = t2(rows, AK_DTYPE_F32, n, dq - rope),
                  rp = t2(rows + dq - rope, AK_DTYPE_F32, n, rope);
        nope.strides[0] = rp.strides[0] = dq;
        if (ak_cache_write(s->ctx, &s->main, &nope, &rp, &sl, AK_QUANT_DEFAULT) != AK_OK)
            rc = fail("ak_cache_write main");
        if (rc == 0 && s->d.kind == AK_ATTN_DSA) {
            ak_tensor ik = t2(rows, AK_DTYPE_F32, n, 128);
            ik.strides[0] = dq;
            if (ak_cache_write(s->ctx, &s->index, &ik, NULL, &sl, AK_QUANT_DEFAULT) != AK_OK)
                rc = fail("ak_cache_write indexer");
        }
        if (rc == 0 && s->d.kind == AK_ATTN_DSV4 && s->d.compress_ratio != 0) {
            /* The compressor emits entry c once positions 4c .. 4c+3 exist (semantics.md 10.1);
               its output here is a fresh random row (the compressor itself is not attnkit's). */
            int32_t R = s->d.compress_ratio, EP = s->d.extra_page_size;
            for (int64_t p = from; p < to && rc == 0; p++) {
                if ((p + 1) % R != 0) continue;
                int64_t c = p / R;
                int32_t es = r->pages[c / EP] * EP + (int32_t)(c % EP);
                ak_tensor es_t = t1(&es, AK_DTYPE_I32, 1);
                float *row = rows + (p - from) * dq;
                ak_tensor en = t2(row, AK_DTYPE_F32, 1, dq - rope),
                          er = t2(row + dq - rope, AK_DTYPE_F32, 1, rope);
                if (ak_cache_write(s->ctx, &s->extra, &en, &er, &es_t, AK_QUANT_DEFAULT) != AK_OK)
                    rc = fail("ak_cache_write compressed");
                ak_tensor ik = t2(row, AK_DTYPE_F32, 1, 128);
                if (rc == 0 &&
                    ak_cache_write(s->ctx, &s->index, &ik, NULL, &es_t, AK_QUANT_DEFAULT) != AK_OK)
                    rc = fail("ak_cache_write C4 indexer");
            }
        }
    }
    free(rows), free(slots);
    return rc;
}

/* ---- requests -----------------------------------------------------------------------------------
 */

static req *admit(sim *s, ak_phase phase, int32_t prefix, int32_t q) {
    if (s->nreq == MAX_REQ) return NULL;
    req *r = &s->reqs[s->nreq];
    if (s->nfree < s->max_pages) return NULL;
    r->pages = (int32_t *)malloc((size_t)s->max_pages * 4);
    if (r->pages == NULL) return NULL;
    for (int32_t i = 0; i < s->max_pages; i++)
        r->pages[i] = s->free_pages[--s->nfree];
    r->id = s->next_id++;
    r->len = prefix;
    r->q = q;
    r->phase = phase;
    s->nreq++;
    return r;
}

static void retire(sim *s, int32_t i) {
    req *r = &s->reqs[i];
    for (int32_t p = 0; p < s->max_pages; p++)
        s->free_pages[s->nfree++] = r->pages[p];
    free(r->pages);
    memmove(&s->reqs[i], &s->reqs[i + 1], (size_t)(s->nreq - i - 1) * sizeof *r);
    s->nreq--;
}

/* ---- reference for one query row
 * ----------------------------------------------------------------- */

/* Exact attention in double over keys gathered (dequantized) from the caches. */
static int reference_row(sim *s, const req *r, int64_t pos, const uint16_t *q_row,
                         const uint8_t *iq, const float *iw, const float *sink, const float *got,
                         const float *got_lse) {
    const ak_plan_desc *d = &s->d;
    int32_t dq = d->d_qk, dv = d->d_v, hq = s->h_q;
    int32_t *slots = (int32_t *)malloc((size_t)(pos + 1) * 4);
    int32_t *eslots = NULL;
    int64_t n = 0, ne = 0;
    if (slots == NULL) return fail("host allocation");
    int sparse = d->kind == AK_ATTN_DSA && pos + 1 > d->topk;
    if (d->kind == AK_ATTN_DSV4) {
        for (int64_t j = 0; j < d->window && pos - j >= 0; j++)
            slots[n++] = slot_of(s, r, pos - j);
    } else if (!sparse) {
        for (int64_t p = 0; p <= pos; p++)
            slots[n++] = slot_of(s, r, p);
    }
    int idx_rows = d->kind == AK_ATTN_DSA ? (sparse ? (int)(pos + 1) : 0)
                   : d->kind == AK_ATTN_DSV4 && d->compress_ratio == 4 ? (int)((pos + 1) / 4)
                                                                       : 0;
    int32_t EP = d->kind == AK_ATTN_DSV4 ? d->extra_page_size : d->page_size;
    if (idx_rows > 0) {
        /* The key set from direct indexer and top-k calls on this single row. */
        int32_t width = idx_rows, ctxlen = idx_rows, k = d->topk;
        float *lg = (float *)malloc((size_t)width * 4);
        int32_t *sel = (int32_t *)malloc((size_t)k * 4);
        int32_t *bt = (int32_t *)malloc((size_t)s->max_pages * 4);
        if (lg == NULL || sel == NULL || bt == NULL) return fail("host allocation");
        memcpy(bt, r->pages, (size_t)s->max_pages * 4);
        int64_t shq[4] = {1, 1, d->index_heads, 128};
        ak_tensor qt = ak_tensor_make((void *)iq, AK_DTYPE_E4M3, 4, shq);
        ak_tensor wt = t2((void *)iw, AK_DTYPE_F32, 1, d->index_heads),
                  btt = t2(bt, AK_DTYPE_I32, 1, s->max_pages);
        ak_tensor cl = t1(&ctxlen, AK_DTYPE_I32, 1), lt = t2(lg, AK_DTYPE_F32, 1, width);
        TRY(ak_indexer_logits_paged(s->ctx, &qt, &wt, &s->index, &btt, &cl, 1, &lt),
            "reference indexer");
        ak_tensor st = t2(sel, AK_DTYPE_I32, 1, k);
        TRY(ak_topk(s->ctx, &lt, &cl, NULL, k, 1, NULL, &st), "reference top-k");
        int32_t *dst = slots;
        int64_t *cnt = &n;
        if (d->kind == AK_ATTN_DSV4) {
            eslots = (int32_t *)malloc((size_t)k * 4);
            if (eslots == NULL) return fail("host allocation");
            dst = eslots;
            cnt = &ne;
        }
        for (int32_t j = 0; j < k; j++)
            if (sel[j] >= 0) dst[(*cnt)++] = r->pages[sel[j] / EP] * EP + sel[j] % EP;
        free(lg), free(sel), free(bt);
    } else if (d->kind == AK_ATTN_DSV4 && d->compress_ratio == 128) {
        int64_t nc = (pos + 1) / 128;
        eslots = (int32_t *)malloc((size_t)(nc > 0 ? nc : 1) * 4);
        if (eslots == NULL) return fail("host allocation");
        for (int64_t c = 0; c < nc; c++)
            eslots[ne++] = r->pages[c / EP] * EP + (int32_t)(c % EP);
    }
    int64_t nk = n + ne;
    int32_t hk = d->kind == AK_ATTN_MHA ? d->h_kv : 1;
    float *K = (float *)malloc((size_t)(nk > 0 ? nk : 1) * hk * dq * 4);
    float *V =
        d->kind == AK_ATTN_MHA ? (float *)malloc((size_t)(nk > 0 ? nk : 1) * hk * dv * 4) : K;
    if (K == NULL || V == NULL) return fail("host allocation");
    if (d->kind == AK_ATTN_MHA) {
        ak_tensor sl = t1(slots, AK_DTYPE_I32, n), kt = t3(K, AK_DTYPE_F32, n, hk, dq),
                  vt = t3(V, AK_DTYPE_F32, n, hk, dv);
        TRY(ak_mha_cache_gather(s->ctx, &s->main, &sl, &kt, &vt), "reference gather");
    } else {
        ak_tensor sl = t1(slots, AK_DTYPE_I32, n), kt = t2(K, AK_DTYPE_F32, n, dq);
        if (n > 0) TRY(ak_cache_gather(s->ctx, &s->main, &sl, &kt, NULL), "reference gather");
        if (ne > 0) {
            ak_tensor esl = t1(eslots, AK_DTYPE_I32, ne),
                      ekt = t2(K + n * dq, AK_DTYPE_F32, ne, dq);
            TRY(ak_cache_gather(s->ctx, &s->extra, &esl, &ekt, NULL),
                "reference gather compressed");
        }
    }
    double *logit = (double *)malloc((size_t)(nk > 0 ? nk : 1) * sizeof(double));
    if (logit == NULL) return fail("host allocation");
    int bad = 0;
    for (int32_t h = 0; h < hq; h++) {
        int32_t g = h / (hq / hk);
        double mx = -INFINITY;
        for (int64_t j = 0; j < nk; j++) {
            const float *kr = K + (j * hk + g) * dq;
            double acc = 0;
            for (int32_t e = 0; e < dq; e++)
                acc += (double)bf16_to_f32(q_row[(int64_t)h * dq + e]) * kr[e];
            logit[j] = acc * d->softmax_scale;
            if (logit[j] > mx) mx = logit[j];
        }
        double sum = 0;
        for (int64_t j = 0; j < nk; j++)
            sum += (logit[j] = exp(logit[j] - mx)); /* now weights */
        double denom = sum + (sink != NULL && nk > 0 ? exp((double)sink[h] - mx) : 0.0);
        /* lse without the sink (natural log); a row always has keys here */
        double lse_ref = mx + log(sum), lse_err = fabs((double)got_lse[h] - lse_ref);
        if (lse_err > 1e-5 + 1e-6 * fabs(lse_ref)) bad++;
        int64_t vs = d->kind == AK_ATTN_MHA ? dv : dq;
        for (int32_t e = 0; e < dv; e++) {
            double o = 0;
            for (int64_t j = 0; j < nk; j++)
                o += logit[j] * (double)V[(j * hk + g) * vs + e];
            o = nk > 0 ? o / denom : 0.0;
            double gv = (double)got[(int64_t)h * dv + e];
            double err = fabs(gv - o);
            /* fp32 kernels on the same dequantized inputs: rounding of fp32 sums over <= 8k keys.
             */
            if (err > 2e-4 + 2e-3 * fabs(o)) bad++;
            if (err > s->worst) s->worst = err;
        }
    }
    free(logit), free(K);
    if (V != K) free(V);
    free(slots), free(eslots);
    s->checked_rows++;
    if (bad)
        fprintf(stderr, "attnkit run: request %d position %lld: %d values off the reference\n",
                (int)r->id, (long long)pos, bad);
    return bad ? 1 : 0;
}

/* ---- one engine step
 * ------------------------------------------------------------------------------ */

static int run_step(sim *s, int step, int verbose, double *secs, int64_t *tokens) {
    ak_plan_desc d = s->d;
    int32_t n = s->nreq;
    ak_phase ph[MAX_REQ];
    int32_t ql[MAX_REQ], kl[MAX_REQ];
    int64_t T = 0;
    for (int32_t i = 0; i < n; i++) {
        req *r = &s->reqs[i];
        if (write_tokens(s, r, r->len, r->len + r->q)) return 2;
        r->len += r->q;
        ph[i] = r->phase, ql[i] = r->q, kl[i] = r->len;
        T += r->q;
    }
    d.num_requests = n, d.phases = ph, d.q_lens = ql, d.kv_lens = kl;
    ak_plan *plan = NULL;
    ak_status st = ak_plan_create(s->ctx, &d, &plan);
    if (st != AK_OK) {
        fprintf(stderr, "attnkit run: plan rejected: %s: %s\n", ak_status_name(st),
                ak_last_error());
        return 2;
    }
    if (step == 0) fputs(ak_plan_explain(plan), stdout);
    int32_t hq = s->h_q, dq = d.d_qk, dv = d.d_v, H = d.index_heads > 0 ? d.index_heads : 1;
    uint16_t *q = (uint16_t *)malloc((size_t)(T ? T : 1) * hq * dq * 2);
    float *out = (float *)malloc((size_t)(T ? T : 1) * hq * dv * 4);
    float *lse = (float *)malloc((size_t)(T ? T : 1) * hq * 4);
    uint8_t *iq = (uint8_t *)malloc((size_t)(T ? T : 1) * H * 128);
    float *iw = (float *)malloc((size_t)(T ? T : 1) * H * 4);
    float *sink = (float *)malloc((size_t)hq * 4);
    int32_t *bt = (int32_t *)malloc((size_t)n * s->max_pages * 4);
    int32_t *seq = (int32_t *)malloc((size_t)(n ? n : 1) * 4);
    size_t wsb = 0;
    TRY(ak_plan_workspace_size(plan, &wsb), "ak_plan_workspace_size");
    void *ws = malloc(wsb ? wsb : 1);
    if (!q || !out || !lse || !iq || !iw || !sink || !bt || !seq || !ws)
        return fail("host allocation");
    for (int64_t i = 0; i < T * hq * dq; i++)
        q[i] = f32_to_bf16(rnd_f(s));
    /* e4m3 bytes with exponent field <= 9 and a random sign: finite, |x| < 8 */
    for (int64_t i = 0; i < T * H * 128; i++)
        iq[i] = (uint8_t)((rnd(s) % 0x50) | (rnd(s) & 0x80));
    for (int64_t i = 0; i < T * H; i++)
        iw[i] = rnd_f(s) * 0.05f;
    for (int32_t h = 0; h < hq; h++)
        sink[h] = rnd_f(s);
    for (int32_t i = 0; i < n; i++) {
        memcpy(bt + (int64_t)i * s->max_pages, s->reqs[i].pages, (size_t)s->max_pages * 4);
        seq[i] = s->reqs[i].len;
    }
    memset(out, 0xff, (size_t)(T ? T : 1) * hq * dv * 4); /* NaN: rows not written are caught */
    ak_tensor qt = t3(q, AK_DTYPE_BF16, T, hq, dq), ot = t3(out, AK_DTYPE_F32, T, hq, dv);
    ak_tensor lt = t2(lse, AK_DTYPE_F32, T, hq), iqt = t3(iq, AK_DTYPE_E4M3, T, H, 128);
    ak_tensor iwt = t2(iw, AK_DTYPE_F32, T, H), skt = t1(sink, AK_DTYPE_F32, hq);
    ak_tensor btt = t2(bt, AK_DTYPE_I32, n, s->max_pages), sqt = t1(seq, AK_DTYPE_I32, n);
    ak_plan_io io;
    memset(&io, 0, sizeof io);
    io.q = &qt;
    io.cache = &s->main;
    io.extra_cache = d.kind == AK_ATTN_DSV4 && d.compress_ratio ? &s->extra : NULL;
    io.index_cache = d.kind == AK_ATTN_DSA || (d.kind == AK_ATTN_DSV4 && d.compress_ratio == 4)
                         ? &s->index
                         : NULL;
    io.block_table = &btt;
    io.seq_lens = &sqt;
    io.index_q = io.index_cache ? &iqt : NULL;
    io.index_weights = io.index_cache ? &iwt : NULL;
    io.attn_sink = d.has_sink ? &skt : NULL;
    io.out = &ot;
    io.lse = &lt;
    double t0 = now_s();
    TRY(ak_plan_run(s->ctx, plan, &io, ws, wsb), "ak_plan_run");
    *secs = now_s() - t0;
    *tokens = T;
    int bad = 0;
    for (int64_t i = 0; i < T * hq * dv; i++)
        if (out[i] != out[i]) {
            fprintf(stderr, "attnkit run: output element %lld not written\n", (long long)i);
            bad = 1;
            break;
        }
    /* Sampled rows: each request's last row, and a random earlier row of every multi-row one. */
    int64_t row0 = 0;
    for (int32_t i = 0; i < n && !bad; i++) {
        req *r = &s->reqs[i];
        int32_t picks[2] = {r->q - 1, r->q > 1 ? (int32_t)(rnd(s) % (uint64_t)(r->q - 1)) : -1};
        for (int k = 0; k < 2 && !bad; k++) {
            if (picks[k] < 0) continue;
            int64_t row = row0 + picks[k], pos = r->len - r->q + picks[k];
            bad |= reference_row(s, r, pos, q + row * hq * dq, iq + row * H * 128, iw + row * H,
                                 d.has_sink ? sink : NULL, out + row * hq * dv, lse + row * hq);
        }
        row0 += r->q;
    }
    if (verbose) {
        char mix[160] = "";
        for (int32_t i = 0; i < n; i++) {
            size_t l = strlen(mix);
            if (l < sizeof mix - 24)
                snprintf(mix + l, sizeof mix - l, "%s%s", i ? " " : "",
                         s->reqs[i].phase == AK_PHASE_DECODE          ? "D"
                         : s->reqs[i].phase == AK_PHASE_TARGET_VERIFY ? "V"
                         : s->reqs[i].phase == AK_PHASE_EXTEND        ? "E"
                                                                      : "P");
        }
        double est = 0;
        for (int32_t i = 0; i < ak_plan_step_count(plan); i++) {
            ak_plan_step ps;
            if (ak_plan_step_get(plan, i, &ps) == AK_OK) est += ps.est_seconds;
        }
        printf(
            "step %3d: %2d requests [%s], %5lld rows, %2d plan steps, %8.2f ms (model %7.2f ms), "
            "%7.0f tok/s, checks %s\n",
            step, (int)n, mix, (long long)T, (int)ak_plan_step_count(plan), *secs * 1e3, est * 1e3,
            *secs > 0 ? (double)T / *secs : 0.0, bad ? "FAILED" : "ok");
        fflush(stdout);
    }
    free(q), free(out), free(lse), free(iq), free(iw), free(sink), free(bt), free(seq), free(ws);
    ak_plan_destroy(plan);
    return bad;
}

/* After a step: prefill-class requests become decodes; verifies accept their drafts; one
   request retires when the batch is full; new arrivals are admitted. */
static int advance(sim *s, int step) {
    for (int32_t i = 0; i < s->nreq; i++)
        s->reqs[i].phase = AK_PHASE_DECODE, s->reqs[i].q = 1;
    while (s->nreq >= 5)
        retire(s, 0);
    for (int32_t i = 0; i < s->nreq; i++)
        if (s->reqs[i].len + 8 > s->max_ctx) retire(s, i--);
    if (step % 3 == 1 && s->nreq > 0) {
        s->reqs[s->nreq - 1].phase = AK_PHASE_TARGET_VERIFY;
        s->reqs[s->nreq - 1].q = 3;
    }
    req *r = admit(s, AK_PHASE_PREFILL, 0, s->new_q);
    if (r == NULL) return 0;
    /* A request whose prefix is already cached: written now, planned as an extend. */
    int32_t prefix = s->prefix + (int32_t)(rnd(s) % (uint64_t)(s->prefix / 3 + 1));
    r = admit(s, AK_PHASE_EXTEND, 0, s->new_q);
    if (r == NULL) return 0;
    if (write_tokens(s, r, 0, prefix)) return 2;
    r->len = prefix;
    return 0;
}

static void usage(FILE *f) {
    fprintf(
        f, "usage: attnkit run [--model dsv32|dsv4-flash|dsv4-pro|dsv3|llama3-8b]\n"
           "                   [--backend auto|cpu|cuda] [--steps N] [--threads N] [--seed S]\n"
           "                   [--prefill auto|KERNEL] [--decode auto|KERNEL] [--budget BYTES]\n\n"
           "Simulates serving one attention layer for N engine steps over a paged cache in the\n"
           "model's default layout: running decodes (and a speculative verify every third step),\n"
           "a new prefill and a new request over a cached prefix each step. Every step writes its\n"
           "tokens into the caches, plans the batch, runs the plan and checks sampled rows\n"
           "against a double-precision reference. On the CPU the shapes are one tensor-parallel\n"
           "shard (heads / 8) with contexts of a few thousand tokens.\n");
}

int ak_cmd_run(int argc, char **argv) {
    if (ak_cli_has_flag(argc, argv, "--help")) {
        usage(stdout);
        return 0;
    }
    const char *mname = ak_cli_option(argc, argv, "--model");
    const ak_model *m = ak_model_find(mname ? mname : "dsv32");
    if (m == NULL) {
        fprintf(stderr, "attnkit run: unknown model '%s'\n\n", mname);
        usage(stderr);
        return 2;
    }
    const char *steps_s = ak_cli_option(argc, argv, "--steps");
    int steps = steps_s ? atoi(steps_s) : 8;
    if (steps < 1) {
        fprintf(stderr, "attnkit run: --steps %s, expected >= 1\n", steps_s);
        return 2;
    }
    const char *bname = ak_cli_option(argc, argv, "--backend");
    ak_context_options o;
    memset(&o, 0, sizeof o);
    o.backend = AK_BACKEND_AUTO;
    if (bname != NULL && strcmp(bname, "cpu") == 0)
        o.backend = AK_BACKEND_CPU;
    else if (bname != NULL && strcmp(bname, "cuda") == 0)
        o.backend = AK_BACKEND_CUDA;
    else if (bname != NULL && strcmp(bname, "auto") != 0) {
        fprintf(stderr, "attnkit run: --backend %s, expected auto, cpu or cuda\n", bname);
        return 2;
    }
    const char *th = ak_cli_option(argc, argv, "--threads");
    o.num_threads = th ? atoi(th) : 0;
    sim s;
    memset(&s, 0, sizeof s);
    s.m = m;
    const char *seed = ak_cli_option(argc, argv, "--seed");
    s.rng = seed ? strtoull(seed, NULL, 10) * 2654435761u + 1 : 0x9e3779b97f4a7c15ull;
    if (ak_context_create(&o, &s.ctx) != AK_OK) {
        fail("ak_context_create");
        return 1;
    }
    ak_cli_plan_desc(m, &s.d);
    s.d.prefill_kernel = ak_cli_option(argc, argv, "--prefill");
    s.d.decode_kernel = ak_cli_option(argc, argv, "--decode");
    const char *budget = ak_cli_option(argc, argv, "--budget");
    if (budget != NULL) s.d.workspace_budget = strtoll(budget, NULL, 10);
    if (o.backend == AK_BACKEND_AUTO && ak_context_backend(s.ctx) == AK_BACKEND_CUDA) {
        /* auto takes the GPU only when the planner accepts this model's batches there */
        ak_phase ph = AK_PHASE_DECODE;
        int32_t q1 = 1, kv1 = 65536;
        ak_plan_desc d = s.d;
        d.num_requests = 1, d.phases = &ph, d.q_lens = &q1, d.kv_lens = &kv1;
        ak_plan *p = NULL;
        if (ak_plan_create(s.ctx, &d, &p) != AK_OK) {
            printf("attnkit run: backend auto: the CUDA plan was rejected (%s); running on the CPU "
                   "backend\n",
                   ak_last_error());
            ak_context_destroy(s.ctx);
            s.ctx = NULL;
            o.backend = AK_BACKEND_CPU;
            if (ak_context_create(&o, &s.ctx) != AK_OK) {
                fail("ak_context_create");
                return 1;
            }
        }
        ak_plan_destroy(p);
    }
    int cuda = ak_context_backend(s.ctx) == AK_BACKEND_CUDA;
    /* CPU: one tensor-parallel shard of 8 for the MLA models (heads / 8; GQA keeps all) and
       contexts of a few thousand tokens, so that DSA rows fall on both sides of top-k 2048 and V4
       rows see a few hundred compressed entries. CUDA: full heads and long contexts. */
    s.h_q = cuda || m->kind == AK_MODEL_MHA ? m->h_q : m->h_q / 8;
    s.d.h_q = s.h_q;
    s.max_ctx = cuda ? 65536 : 4608;
    s.new_q = cuda ? 2048 : 64;
    s.prefix = cuda ? 16384 : 2200;
    s.max_pages = (s.max_ctx + s.d.page_size - 1) / s.d.page_size;
    s.num_pages = s.max_pages * (MAX_REQ + 2);
    printf(
        "attnkit run: %s, one attention layer, %d query heads, backend %s (%d threads), %d steps\n",
        m->title, (int)s.h_q, cuda ? "cuda" : "cpu", (int)ak_context_num_threads(s.ctx), steps);
    if (cuda) {
        /* The tool's buffers are host memory; CUDA batches stop at the plan when rejected. */
        ak_phase ph = AK_PHASE_DECODE;
        int32_t q1 = 1, kv1 = s.max_ctx;
        ak_plan_desc d = s.d;
        d.num_requests = 1, d.phases = &ph, d.q_lens = &q1, d.kv_lens = &kv1;
        ak_plan *p = NULL;
        ak_status st = ak_plan_create(s.ctx, &d, &p);
        if (st != AK_OK) {
            fprintf(stderr, "attnkit run: plan rejected: %s: %s\n", ak_status_name(st),
                    ak_last_error());
            ak_context_destroy(s.ctx);
            return 1;
        }
        fputs(ak_plan_explain(p), stdout);
        ak_plan_destroy(p);
        fprintf(stderr, "attnkit run: the CUDA run of this tool needs device buffers; not built\n");
        ak_context_destroy(s.ctx);
        return 1;
    }
    int64_t bytes = 0, ebytes = 0, ibytes = 0;
    int rc = 0;
    static char probe[64]; /* descriptors are sized before their pools exist */
    if (s.d.kind == AK_ATTN_MHA) {
        int64_t vb = 0;
        if (ak_cache_init_mha(&s.main, s.d.layout, AK_DTYPE_BF16, probe, probe, s.num_pages,
                              s.d.page_size, s.d.h_kv, s.d.d_qk, s.d.d_v) != AK_OK ||
            ak_cache_bytes(&s.main, &bytes, &vb) != AK_OK)
            rc = fail("ak_cache_init_mha");
        s.main_buf = malloc((size_t)bytes + 1);
        s.extra_buf = malloc((size_t)vb + 1);
        s.main.data = s.main_buf;
        s.main.v_data = s.extra_buf;
        if (s.extra_buf) memset(s.extra_buf, 0xff, (size_t)vb);
    } else {
        if (ak_cache_init(&s.main, s.d.layout, probe, s.num_pages, s.d.page_size) != AK_OK ||
            ak_cache_bytes(&s.main, &bytes, NULL) != AK_OK)
            rc = fail("ak_cache_init");
        s.main_buf = malloc((size_t)bytes + 1);
        s.main.data = s.main_buf;
        if (rc == 0 && s.d.kind == AK_ATTN_DSV4 && s.d.compress_ratio) {
            if (ak_cache_init(&s.extra, s.d.extra_layout, probe, s.num_pages,
                              s.d.extra_page_size) != AK_OK ||
                ak_cache_bytes(&s.extra, &ebytes, NULL) != AK_OK)
                rc = fail("ak_cache_init compressed");
            s.extra_buf = malloc((size_t)ebytes + 1);
            s.extra.data = s.extra_buf;
            if (s.extra_buf) memset(s.extra_buf, 0xff, (size_t)ebytes);
        }
        if (rc == 0 &&
            (s.d.kind == AK_ATTN_DSA || (s.d.kind == AK_ATTN_DSV4 && s.d.compress_ratio == 4))) {
            if (ak_cache_init(&s.index, AK_LAYOUT_INDEXER_FP8, probe, s.num_pages, 64) != AK_OK ||
                ak_cache_bytes(&s.index, &ibytes, NULL) != AK_OK)
                rc = fail("ak_cache_init indexer");
            s.index_buf = malloc((size_t)ibytes + 1);
            s.index.data = s.index_buf;
            if (s.index_buf) memset(s.index_buf, 0xff, (size_t)ibytes);
        }
    }
    s.free_pages = (int32_t *)malloc((size_t)s.num_pages * 4);
    if (rc == 0 && (s.main_buf == NULL || s.free_pages == NULL)) rc = fail("host allocation");
    if (rc == 0) {
        /* unused pages hold NaN bytes: a kernel reading outside its keys shows up in the checks */
        memset(s.main_buf, 0xff, (size_t)bytes);
        for (int32_t i = 0; i < s.num_pages; i++)
            s.free_pages[i] = i;
        for (int32_t i = s.num_pages - 1; i > 0; i--) { /* shuffled page ids */
            int32_t j = (int32_t)(rnd(&s) % (uint64_t)(i + 1)), t = s.free_pages[i];
            s.free_pages[i] = s.free_pages[j], s.free_pages[j] = t;
        }
        s.nfree = s.num_pages;
        /* Running requests at the start: contexts on both sides of the DSA top-k. */
        const int32_t start[4] = {700, 1900, 2600, 3300};
        for (int i = 0; i < 4 && rc == 0; i++) {
            int32_t L = cuda ? start[i] * 8 : start[i];
            req *r = admit(&s, AK_PHASE_DECODE, 0, 1);
            if (r == NULL || write_tokens(&s, r, 0, L - 1))
                rc = 1;
            else
                r->len = L - 1;
        }
        if (rc == 0 && advance(&s, -1)) rc = 1;
    }
    double total_s = 0, t_begin = now_s();
    int64_t total_tok = 0;
    int failed = 0, verbose = 1, tty = isatty(1), steps_run = 0;
    for (int step = 0; step < steps && rc == 0; step++) {
        if (tty && step > 0) { /* progress while the step runs; its figures line replaces it */
            printf("step %3d/%d: writing, planning, running, checking ...\r", step, steps);
            fflush(stdout);
        }
        double secs = 0;
        int64_t tok = 0;
        int r = run_step(&s, step, verbose, &secs, &tok);
        if (r >= 2) {
            rc = 1;
            break;
        }
        if (r) failed++;
        steps_run++;
        total_s += secs;
        total_tok += tok;
        if (advance(&s, step)) rc = 1;
    }
    if (rc == 0) {
        printf("total: %d steps, %lld query tokens, attention %.3f s (%.0f tok/s), wall %.3f s; "
               "%lld sampled rows checked against the reference, max abs error %.3e: %s\n",
               steps_run, (long long)total_tok, total_s,
               total_s > 0 ? (double)total_tok / total_s : 0.0, now_s() - t_begin,
               (long long)s.checked_rows, s.worst, failed ? "CHECKS FAILED" : "checks passed");
        rc = failed ? 1 : 0;
    }
    while (s.nreq > 0)
        retire(&s, 0);
    free(s.main_buf), free(s.extra_buf), free(s.index_buf), free(s.free_pages);
    ak_context_destroy(s.ctx);
    return rc;
}
