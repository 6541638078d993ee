/*
 * gpu_test_sparse_decode.c -- CUDA sparse MLA decode (ak_mla_decode with indices) against the CPU
 * backend on the same cache bytes: all four MLA layouts, h_q {1, 8, 16, 32, 64, 128}, s_q
 * {1, 2, 4}, extra cache, ragged and zero lengths ([b] and [b, s_q] forms), every kind of invalid
 * index, all-invalid rows, sinks including +-inf, NaN-poisoned unused slots and outputs, bitwise
 * reruns and CUDA-graph replay with changed indices and lengths; and the op's limits: top-k 32768,
 * s_q 8 on every layout, more than 11.6k query rows in one call; values past fp16's range both ways
 * on every split path (the partial rows' format); a softmax far from uniform on every kernel and
 * split path (sparse_decode_sharp); and random shapes, page sizes and q strides
 * (sparse_decode_fuzz). Exit 77 without a GPU. Timing of
 * the target shapes lives in `attnkit bench --op mla_decode_sparse`. AK_TEST_QUICK=1 keeps a third
 * of the matrix (h_q 1, 16, 64; s_q 1, 2), one long case and two graph cases: the set that
 * compute-sanitizer memcheck and racecheck run in reasonable time.
 *
 * Data (targets.md 2, FlashMLA's sparse decode test): q ~ N(0, 1) and the KV latent ~ N(0, 0.1^2),
 * both clamped to +-1 and rounded to bf16; the fp8 layouts are then quantized with the codec rules
 * of layouts.md 3 (656: per-128 scale, power of two on even slots and the unrounded AK_SCALE_FP32
 * option on odd slots, so the kernel's fp32-scale-then-bf16 rounding is exercised; 584: UE8M0 per
 * 64; per-tensor: k_scale 0.0179 and, for the extra pool, 0.00586 through a device pointer, neither
 * a power of two).
 *
 * Tolerances (semantics.md 14.2, FlashMLA's sparse decode test): both backends see the same
 * dequantized keys; the kernel rounds P to bf16 for the PV product (relative error 2^-9 per
 * weight) and sums in another order. With |V| <= 1 and typically 0.1, the P rounding moves an
 * output by at most 2^-9 * sum p |v|, under 1e-3 while sum p |v| < 0.5 (5 sigma of the data; ~2^-9
 * * 0.1 / sqrt(keys) in practice), so out passes per element at abs 1e-3 or rel 2.01/128 (two
 * bf16 ulps), cosine diff 5e-6, NMSE 5e-4. A kernel that rounds twice per term (the register-
 * dequantizing kernel until x193: P s_b, and v s unrounded) halves that margin, and short rows of
 * sparse_decode_balanced then failed it about once in 10^6 elements;
 * lse, a log of an fp32 sum, at abs 1e-6 or rel 8.01/65536 (eight fp32-sum ulps of lse's scale).
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ak_test.h"
#include "attnkit.h"
#include "common/numeric.h"

#ifdef AK_HAVE_CUDA
#include <cuda_runtime_api.h>

static const ak_tol k_out_tol = {1e-3, 2.01 / 128, 5e-6, 5e-4};
static const ak_tol k_lse_tol = {1e-6, 8.01 / 65536, -1.0, -1.0};

static uint16_t sd_bf16(float x) { /* round to nearest even; inputs are finite */
    uint32_t u;
    memcpy(&u, &x, 4);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}
static float sd_bf16_f(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
/* An anchor-distribution value (targets.md 2): N(0, sd^2) clamped to +-1, rounded to bf16. */
static float sd_anchor(ak_rng *r, double sd) {
    double v = ak_rng_normal(r) * sd;
    v = v > 1.0 ? 1.0 : v < -1.0 ? -1.0 : v;
    return sd_bf16_f(sd_bf16((float)v));
}

/* The codec's scale for a tile with largest magnitude amax (layouts.md 3): 2^ceil(log2(max(amax /
   448, 1e-4))), or unrounded max(amax / 448, 1e-4) (AK_SCALE_FP32). */
static float sd_scale(const float *x, int n, int pow2) {
    float amax = 0.0f;
    for (int d = 0; d < n; d++) amax = fmaxf(amax, fabsf(x[d]));
    float s = fmaxf(amax / 448.0f, 1e-4f);
    return pow2 ? ak_pow2_f32(ak_ceil_log2_f32(s)) : s;
}

/* MLA_FP8_PERTENSOR scales of the main and the extra pool: neither a power of two (the dequantized
   key float(q) k_scale is then not a bf16 value: a kernel that rounds it to bf16 misses the lse
   tolerance), and different, so each list's own scale must be applied. amax 1 -> 56 and 171. */
#define SD_K_SCALE_MAIN 0.0179f
#define SD_K_SCALE_EXTRA 0.00586f

static int sd_quick(void) {
    const char *e = getenv("AK_TEST_QUICK");
    return e != NULL && atoi(e) != 0;
}

static uint8_t sd_dummy; /* ak_cache_init wants a non-NULL pool before the real one exists */

static const int32_t k_bad[8] = {INT32_MIN, -123456, -1, 0 /* = capacity */, 114514, 1919810,
                                 2147480000, INT32_MAX};

typedef struct sd_pool {
    ak_layout layout;
    int32_t num_pages, page_size;
    int64_t stride, bytes;
    uint8_t *host;   /* [num_pages, stride] bytes */
    void *dev;
    float *dscale;   /* per-tensor extra pool: its k_scale on the device, passed as k_scale_ptr */
    ak_cache c_cpu, c_gpu;
    int32_t *used;   /* slots holding records (the rest stay NaN) */
    int32_t n_used, n_unused;
    int32_t *unused;
} sd_pool;

static int sd_rec_bytes(ak_layout l) {
    return l == AK_LAYOUT_MLA_BF16 ? 1152 : l == AK_LAYOUT_DSA_FP8_BLOCKSCALE ? 656 : 576;
}

/* Writes random records into the used slots of a NaN-filled pool (0xff bytes: NaN in bf16, e4m3,
   f32 and ue8m0 alike). Per-tensor: encoded with k_scale, which the GPU cache gets through a device
   pointer when scale_ptr (its float then set wrong, so a kernel that reads the float fails). Every
   key is 2^vexp times the anchor distribution's, exactly: the fp8 layouts' bytes stay, their scales
   (and per-tensor k_scale) and the bf16 parts take the factor. */
static void sd_pool_make(sd_pool *p, ak_rng *r, ak_layout layout, int32_t num_pages, int32_t page,
                         float k_scale, int scale_ptr, int dense, int vexp, int copies) {
    const float vf = ak_pow2_f32(vexp);
    memset(p, 0, sizeof *p);
    p->layout = layout;
    const int32_t drawn = num_pages; /* pages of random records; `copies` > 1 repeats them */
    num_pages *= copies > 1 ? copies : 1;
    p->num_pages = num_pages;
    p->page_size = page;
    CHECK_STATUS(ak_cache_init(&p->c_cpu, layout, &sd_dummy, num_pages, page), AK_OK);
    int64_t minb = 0;
    CHECK_STATUS(ak_cache_page_bytes(&p->c_cpu, &minb), AK_OK);
    /* A page stride above the minimum catches kernels that assume packed pages. */
    p->stride = minb + (layout == AK_LAYOUT_DSV4_FP8_UE8M0 ? 576 : sd_rec_bytes(layout));
    p->bytes = p->stride * num_pages;
    p->host = malloc((size_t)p->bytes);
    memset(p->host, 0xff, (size_t)p->bytes);
    int32_t cap = num_pages * page;
    p->used = malloc(sizeof(int32_t) * (size_t)cap);
    p->unused = malloc(sizeof(int32_t) * (size_t)cap);
    for (int32_t s = 0; s < cap; s++) {
        if (dense ? s >= cap - page : s % 4 == 3) { /* dense: only the last page stays NaN */
            p->unused[p->n_unused++] = s;
            continue;
        }
        p->used[p->n_used++] = s;
        int32_t pg = s / page, t = s % page;
        if (pg >= drawn) continue; /* a copy, below */
        uint8_t *base = p->host + (int64_t)pg * p->stride;
        float x[576];
        for (int d = 0; d < 576; d++) x[d] = sd_anchor(r, 0.1);
        if (layout == AK_LAYOUT_MLA_BF16) {
            uint16_t *rec = (uint16_t *)(base + (int64_t)t * 1152);
            for (int d = 0; d < 576; d++) rec[d] = sd_bf16(x[d] * vf);
        } else if (layout == AK_LAYOUT_MLA_FP8_PERTENSOR) {
            uint8_t *rec = base + (int64_t)t * 576;
            for (int d = 0; d < 576; d++) rec[d] = ak_f32_to_e4m3(x[d] / k_scale);
        } else if (layout == AK_LAYOUT_DSA_FP8_BLOCKSCALE) {
            uint8_t *rec = base + (int64_t)t * 656;
            for (int k = 0; k < 4; k++) {
                float sc = sd_scale(x + 128 * k, 128, s % 2 == 0);
                for (int d = 128 * k; d < 128 * k + 128; d++) rec[d] = ak_f32_to_e4m3(x[d] / sc);
                sc *= vf;
                memcpy(rec + 512 + 4 * k, &sc, 4);
            }
            uint16_t *rope = (uint16_t *)(rec + 528);
            for (int d = 0; d < 64; d++) rope[d] = sd_bf16(x[512 + d] * vf);
        } else {
            uint8_t *row = base + (int64_t)t * 576;
            uint8_t *sc = base + (int64_t)page * 576 + (int64_t)t * 8;
            for (int k = 0; k < 7; k++) {
                int32_t e = 127 + ak_ceil_log2_f32(sd_scale(x + 64 * k, 64, 1));
                e = e < 1 ? 1 : e > 254 ? 254 : e;
                for (int d = 64 * k; d < 64 * k + 64; d++) row[d] = ak_f32_to_e4m3(x[d] / ak_pow2_f32(e - 127));
                e += vexp;
                CHECK(e >= 1 && e <= 254);
                sc[k] = (uint8_t)e;
            }
            sc[7] = 0;
            uint16_t *rope = (uint16_t *)(row + 448);
            for (int d = 0; d < 64; d++) rope[d] = sd_bf16(x[448 + d] * vf);
        }
    }
    for (int32_t pg = drawn; pg < num_pages; pg++)
        memcpy(p->host + (int64_t)pg * p->stride, p->host + (int64_t)(pg % drawn) * p->stride, (size_t)p->stride);
    CHECK(cudaMalloc(&p->dev, (size_t)p->bytes) == cudaSuccess);
    CHECK(cudaMemcpy(p->dev, p->host, (size_t)p->bytes, cudaMemcpyHostToDevice) == cudaSuccess);
    p->c_cpu.data = p->host;
    p->c_cpu.page_stride = p->stride;
    k_scale *= vf;
    p->c_cpu.k_scale = k_scale;
    p->c_gpu = p->c_cpu;
    p->c_gpu.data = p->dev;
    p->c_gpu.device.type = AK_DEVICE_CUDA;
    p->c_gpu.device.id = 0;
    if (layout == AK_LAYOUT_MLA_FP8_PERTENSOR && scale_ptr) {
        CHECK(cudaMalloc((void **)&p->dscale, sizeof(float)) == cudaSuccess);
        CHECK(cudaMemcpy(p->dscale, &k_scale, sizeof(float), cudaMemcpyHostToDevice) == cudaSuccess);
        p->c_gpu.k_scale_ptr = p->dscale;
        p->c_gpu.k_scale = 1.0f;
    }
}

static void sd_pool_free(sd_pool *p) {
    free(p->host);
    free(p->used);
    free(p->unused);
    cudaFree(p->dev);
    cudaFree(p->dscale);
}

/* Index rows: distinct used slots; with `bad`, about one in six replaced by an invalid value;
   positions at or past the row's length hold unused (NaN) slots that must never be read. Row 0 of
   request 0 is all invalid when `bad`. With `runs` (a dense pool: its used slots are 0 .. n_used -
   1) each row is one run of consecutive slots, rising or (every other row, as V4's sliding window,
   newest first) falling, from a random start, crossing page boundaries: records adjacent in the
   pool, where random rows almost never put two. */
static void sd_fill_indices(int32_t *idx, const int32_t *len, int len2d, const sd_pool *p, ak_rng *r,
                            int64_t b, int64_t s_q, int64_t topk, int bad, int runs, int regions) {
    int32_t cap = p->num_pages * p->page_size;
    int64_t *mark = calloc((size_t)cap, sizeof(int64_t)); /* mark[v] = ri + 1: slot v is in row ri */
    CHECK(mark != NULL);
    for (int64_t ri = 0; ri < b * s_q; ri++) {
        int32_t n = len == NULL ? (int32_t)topk : len[len2d ? ri : ri / s_q];
        int32_t *row = idx + ri * topk;
        const int32_t start = runs ? (int32_t)ak_rng_range(r, 0, p->n_used - topk + 1) : 0;
        for (int64_t j = 0; j < topk; j++) {
            if (j >= n) {
                row[j] = p->unused[ak_rng_range(r, 0, p->n_unused)];
                continue;
            }
            if (runs) {
                row[j] = ri % 2 ? start + (int32_t)(topk - 1 - j) : start + (int32_t)j;
            } else {
                /* with `regions`, request rq draws from its own share of the used slots (its context) */
                const int64_t rq = ri / s_q, lo = regions ? p->n_used * rq / b : 0;
                const int64_t hi = regions ? p->n_used * (rq + 1) / b : p->n_used;
                for (;;) { /* distinct within the row: a short rejection loop, pools are >= 4x topk */
                    int32_t v = p->used[ak_rng_range(r, lo, hi)];
                    if (mark[v] != ri + 1) {
                        mark[v] = ri + 1;
                        row[j] = v;
                        break;
                    }
                }
            }
            if (bad && (ak_rng_range(r, 0, 6) == 0 || ri == 0)) {
                int32_t v = k_bad[ak_rng_range(r, 0, 8)];
                /* 0 stands for the capacity itself; a listed value inside a large pool (top-k 32768
                   pools hold 131k slots) moves past its end, so it stays out of range */
                row[j] = v == 0 ? cap : v > 0 && v < cap ? cap + v : v;
            }
        }
    }
    free(mark);
}

typedef struct sd_case {
    ak_layout layout;
    int64_t b, s_q, h_q, topk, etopk; /* etopk 0: no extra cache */
    int len_mode;                     /* 0 none, 1 [b], 2 [b, s_q] */
    int bad, sink, out_f32;
    int runs; /* the main list's rows as runs of consecutive slots (sd_fill_indices) */
    int vexp; /* keys (so values) times 2^vexp, q times 2^-vexp: the same logits, outputs times 2^vexp */
    int out_pad; /* > 0: output rows of 512 + out_pad elements (rows not 16-byte aligned); not with graphs */
    int pool_copies; /* > 1: the main pool's pages repeated this often (a pool far past L2), each
                        request's keys drawn from its own share of it, as from its own context */
    int launches;    /* > 1: each checked run is this many launches back to back (the last one's output) */
    int32_t page, epage; /* slots per page of the main and the extra pool (0: 64 and 16) */
    int q_pad;       /* > 0: q's head rows d_qk + q_pad elements apart on the GPU (odd: rows off the
                        16-byte grid, read without vector loads), the gaps NaN */
    int lse_mode;    /* the GPU's lse: 0 [b, s_q, h_q] packed, 1 as [b, h_q, s_q] (FlashMLA's order), 2 rows
                        of h_q + 3; every element outside the view must keep its poison */
    ak_balance balance; /* MAKE: the first run makes the schedule, the second (bitwise equal) and a run
                           with new lengths reuse it; graphs capture a MAKE call */
    int len_skew;    /* lengths: every ninth row full, the others empty or of 1 .. 128 keys (the
                        clamping cases of sd_fill_lengths still apply) */
    int lexp;        /* softmax scale times 2^lexp (sparse_decode_sharp) */
} sd_case;

static void sd_fill_lengths(int32_t *len, int64_t n, int64_t topk, ak_rng *r, int skew) {
    for (int64_t k = 0; k < n; k++) {
        int64_t v = ak_rng_range(r, 0, 5) == 0 ? 0 : ak_rng_range(r, 1, topk + 1);
        if (skew) v = k % 9 == 0 ? topk : k % 9 == 4 ? 0 : ak_rng_range(r, 1, (topk < 128 ? topk : 128) + 1);
        if (k % 7 == 3) v = topk + 5;  /* above the width: clamped */
        if (k % 11 == 5) v = -3;      /* negative: treated as 0 */
        if (k % 13 == 1) v = 1 + (k / 13) % 2; /* one or two keys: the lse is then about one logit,
                                                   so an error in a dequantized key shows there */
        len[k] = (int32_t)v;
    }
}

typedef struct sd_io {
    uint16_t *q;           /* [b, s_q, h_q, d_qk] bf16 */
    int32_t *idx, *eidx;   /* [b, s_q, topk], [b, s_q, etopk] int32 */
    int32_t *len, *elen;   /* [b] or [b, s_q] int32 */
    float *sink;           /* [h_q] f32 */
    void *dq, *didx, *deidx, *dlen, *delen, *dsink;
} sd_io;

static void sd_fill_lists(sd_io *io, const sd_case *cs, const sd_pool *mp, const sd_pool *ep, ak_rng *r) {
    int64_t nlen = cs->len_mode == 2 ? cs->b * cs->s_q : cs->b;
    sd_fill_lengths(io->len, nlen, cs->topk, r, cs->len_skew);
    sd_fill_lengths(io->elen, nlen, cs->etopk, r, cs->len_skew);
    /* indices see the clamped lengths the kernel uses (negative -> 0, above width -> width) */
    int32_t *cl = malloc(sizeof(int32_t) * (size_t)nlen), *ecl = malloc(sizeof(int32_t) * (size_t)nlen);
    for (int64_t k = 0; k < nlen; k++) {
        cl[k] = io->len[k] < 0 ? 0 : io->len[k] > cs->topk ? (int32_t)cs->topk : io->len[k];
        ecl[k] = io->elen[k] < 0 ? 0 : io->elen[k] > cs->etopk ? (int32_t)cs->etopk : io->elen[k];
    }
    sd_fill_indices(io->idx, cs->len_mode ? cl : NULL, cs->len_mode == 2, mp, r, cs->b, cs->s_q,
                    cs->topk, cs->bad, cs->runs, cs->pool_copies > 1);
    if (cs->etopk > 0)
        sd_fill_indices(io->eidx, cs->len_mode ? ecl : NULL, cs->len_mode == 2, ep, r, cs->b,
                        cs->s_q, cs->etopk, cs->bad, 0, 0);
    free(cl);
    free(ecl);
}

static void sd_upload(void *d, const void *h, size_t n) {
    CHECK(cudaMemcpy(d, h, n, cudaMemcpyHostToDevice) == cudaSuccess);
}

/* Runs the CPU backend into f32 out/lse (the reference). */
static void sd_cpu_ref(ak_context *cpu, ak_mla_decode_args a, float *out, float *lse,
                       const int64_t *os, const int64_t *lss) {
    ak_tensor to = ak_tensor_make(out, AK_DTYPE_F32, 4, os), tl = ak_tensor_make(lse, AK_DTYPE_F32, 3, lss);
    a.out = &to;
    a.lse = &tl;
    size_t ws = 0;
    CHECK_STATUS(ak_mla_decode_workspace_size(cpu, &a, &ws), AK_OK);
    void *w = ws > 0 ? malloc(ws) : NULL;
    CHECK_STATUS(ak_mla_decode(cpu, &a, w, ws), AK_OK);
    free(w);
}

static void sd_compare(const char *what, const void *out, int f32, const float *lse, const float *out_ref,
                       const float *lse_ref, int64_t nrow, int vexp, int lexp) {
    float *g = malloc(sizeof(float) * (size_t)nrow * 512);
    double *rd = malloc(sizeof(double) * (size_t)nrow * 512);
    for (int64_t k = 0; k < nrow * 512; k++) {
        g[k] = f32 ? ((const float *)out)[k] : sd_bf16_f(((const uint16_t *)out)[k]);
        rd[k] = out_ref[k];
    }
    char w[240];
    snprintf(w, sizeof w, "%s: out", what);
    ak_tol t = k_out_tol; /* outputs 2^vexp times the anchor data's: so is the absolute bound */
    t.abs = ldexp(t.abs, vexp);
    ak_compare(w, g, rd, nrow * 512, t);
    for (int64_t k = 0; k < nrow; k++) rd[k] = lse_ref[k];
    snprintf(w, sizeof w, "%s: lse", what);
    ak_tol tl = k_lse_tol; /* logits 2^lexp times the anchor data's: so is their fp32 error */
    tl.abs = ldexp(tl.abs, lexp);
    ak_compare(w, lse, rd, nrow, tl);
    free(g);
    free(rd);
}

/* The GPU's lse (nl floats at dlse: a view [b, s_q, h_q] of strides l0, l1, l2) -> lse packed as
   [b, s_q, h_q]; every float outside the view must still hold the 0xff poison. */
static void sd_lse_read(const char *what, float *lse, float *hl, const void *dlse, int64_t nl, int64_t b,
                        int64_t s_q, int64_t h_q, int64_t l0, int64_t l1, int64_t l2) {
    CHECK(cudaMemcpy(hl, dlse, 4 * (size_t)nl, cudaMemcpyDeviceToHost) == cudaSuccess);
    uint8_t *in_view = calloc((size_t)nl, 1);
    CHECK(in_view != NULL);
    for (int64_t r = 0; r < b; r++)
        for (int64_t i = 0; i < s_q; i++)
            for (int64_t h = 0; h < h_q; h++) {
                const int64_t off = r * l0 + i * l1 + h * l2;
                lse[(r * s_q + i) * h_q + h] = hl[off];
                in_view[off] = 1;
            }
    size_t touched = 0;
    for (int64_t e = 0; e < nl; e++) {
        uint32_t u;
        memcpy(&u, hl + e, 4);
        touched += !in_view[e] && u != 0xffffffffu;
    }
    CHECK_MSG(touched == 0, "%s: %zu lse floats outside the view were written", what, touched);
    free(in_view);
}

/* A call that must be refused before anything runs: AK_ERR_INVALID_ARGUMENT with `detail` in its
   detail line, and not one byte of the poisoned output dout [obytes] written (hpad: host copy). */
static void sd_check_refused(ak_context *gpu, const ak_mla_decode_args *a, void *dws, size_t ws,
                             void *dout, uint8_t *hpad, size_t obytes, const char *detail,
                             const char *what, const char *label) {
    CHECK(cudaMemset(dout, 0xff, obytes) == cudaSuccess);
    CHECK_STATUS(ak_mla_decode(gpu, a, dws, ws), AK_ERR_INVALID_ARGUMENT);
    CHECK_MSG(strstr(ak_last_error(), detail) != NULL, "%s: %s: detail '%s'", what, label,
              ak_last_error());
    CHECK_STATUS(ak_context_synchronize(gpu), AK_OK);
    CHECK(cudaMemcpy(hpad, dout, obytes, cudaMemcpyDeviceToHost) == cudaSuccess);
    size_t written = 0;
    for (size_t k = 0; k < obytes; k++) written += hpad[k] != 0xff;
    CHECK_MSG(written == 0, "%s: %s: %zu output bytes written", what, label, written);
}

/* One case; graph = 1 also captures the GPU call in a CUDA graph and replays it with new indices
   and lengths written into the captured buffers. */
static void sd_run_case(ak_context *cpu, ak_context *gpu, const sd_case *cs, ak_rng *r, int graph) {
    const int dqk = cs->layout == AK_LAYOUT_DSV4_FP8_UE8M0 ? 512 : 576;
    const int64_t b = cs->b, s_q = cs->s_q, h_q = cs->h_q, topk = cs->topk, etopk = cs->etopk;
    char what[200];
    snprintf(what, sizeof what,
             "layout %d b %lld s_q %lld h_q %lld topk %lld extra %lld len %d%s bad %d sink %d f32 %d pad %d runs %d "
             "vexp %d page %d/%d q_pad %d lse %d lexp %d%s",
             (int)cs->layout, (long long)b, (long long)s_q, (long long)h_q, (long long)topk,
             (long long)etopk, cs->len_mode, cs->len_skew ? " skewed" : "", cs->bad, cs->sink, cs->out_f32, cs->out_pad,
             cs->runs, cs->vexp, (int)cs->page, (int)cs->epage, cs->q_pad, cs->lse_mode, cs->lexp, graph ? " graph" : "");
    const ak_device dev = {AK_DEVICE_CUDA, 0};
    sd_pool mp, ep;
    memset(&ep, 0, sizeof ep);
    /* the main pool's per-tensor scale as a float, the extra pool's through a device pointer */
    const int32_t page = cs->page > 0 ? cs->page : 64, epage = cs->epage > 0 ? cs->epage : 16;
    sd_pool_make(&mp, r, cs->layout, (int32_t)((4 * topk + page - 1) / page) + 1, page, SD_K_SCALE_MAIN, 0, cs->runs,
                 cs->vexp, cs->pool_copies);
    if (etopk > 0)
        sd_pool_make(&ep, r, cs->layout, (int32_t)((4 * etopk + epage - 1) / epage) + 1, epage, SD_K_SCALE_EXTRA, 1, 0,
                     cs->vexp, 1);

    const int64_t nq = b * s_q * h_q * dqk, nrow = b * s_q * h_q;
    const int64_t nlen = cs->len_mode == 2 ? b * s_q : b;
    const size_t ni = (size_t)(b * s_q * topk), nei = (size_t)(b * s_q * etopk);
    sd_io io;
    io.q = malloc(sizeof(uint16_t) * (size_t)nq);
    io.idx = malloc(4 * ni + 4);
    io.eidx = malloc(4 * nei + 4);
    io.len = malloc(4 * (size_t)nlen);
    io.elen = malloc(4 * (size_t)nlen);
    io.sink = malloc(4 * (size_t)h_q);
    for (int64_t k = 0; k < nq; k++) io.q[k] = sd_bf16(sd_anchor(r, 1.0) * ak_pow2_f32(-cs->vexp));
    for (int64_t h = 0; h < h_q; h++)
        io.sink[h] = h % 5 == 1 ? INFINITY : h % 5 == 2 ? -INFINITY : (float)ak_rng_normal(r);
    sd_fill_lists(&io, cs, &mp, &ep, r);
    const int64_t qstr = dqk + cs->q_pad, nqp = b * s_q * h_q * qstr; /* the GPU's q rows */
    CHECK(cudaMalloc(&io.dq, 2 * (size_t)nqp) == cudaSuccess);
    CHECK(cudaMalloc(&io.didx, 4 * ni + 4) == cudaSuccess);
    CHECK(cudaMalloc(&io.deidx, 4 * nei + 4) == cudaSuccess);
    CHECK(cudaMalloc(&io.dlen, 4 * (size_t)nlen) == cudaSuccess);
    CHECK(cudaMalloc(&io.delen, 4 * (size_t)nlen) == cudaSuccess);
    CHECK(cudaMalloc(&io.dsink, 4 * (size_t)h_q) == cudaSuccess);
    if (cs->q_pad > 0) {
        uint16_t *qp = malloc(2 * (size_t)nqp);
        memset(qp, 0xff, 2 * (size_t)nqp); /* NaN in every gap: a kernel that reads one fails */
        for (int64_t k = 0; k < b * s_q * h_q; k++) memcpy(qp + k * qstr, io.q + k * dqk, 2 * (size_t)dqk);
        sd_upload(io.dq, qp, 2 * (size_t)nqp);
        free(qp);
    } else {
        sd_upload(io.dq, io.q, 2 * (size_t)nq);
    }
    sd_upload(io.didx, io.idx, 4 * ni);
    sd_upload(io.deidx, io.eidx, 4 * nei);
    sd_upload(io.dlen, io.len, 4 * (size_t)nlen);
    sd_upload(io.delen, io.elen, 4 * (size_t)nlen);
    sd_upload(io.dsink, io.sink, 4 * (size_t)h_q);

    const size_t osz = cs->out_f32 ? 4 : 2, ostr = 512 + (size_t)cs->out_pad, obytes = (size_t)nrow * ostr * osz;
    void *dout = NULL, *dlse = NULL, *dws = NULL;
    CHECK(!graph || cs->out_pad == 0);
    CHECK(cudaMalloc(&dout, obytes) == cudaSuccess);
    /* the lse view's strides and the buffer under it */
    const int64_t lhp = cs->lse_mode == 2 ? h_q + 3 : h_q, nl = b * s_q * lhp;
    const int64_t l0 = s_q * lhp, l1 = cs->lse_mode == 1 ? 1 : lhp, l2 = cs->lse_mode == 1 ? s_q : 1;
    CHECK(cudaMalloc(&dlse, (size_t)nl * 4) == cudaSuccess);
    float *hl = malloc(4 * (size_t)nl);

    int64_t qs[4] = {b, s_q, h_q, dqk}, is[3] = {b, s_q, topk}, es[3] = {b, s_q, etopk};
    int64_t ls[2] = {b, s_q}, os[4] = {b, s_q, h_q, 512}, lss[3] = {b, s_q, h_q}, hs[1] = {h_q};
    ak_tensor cq = ak_tensor_make(io.q, AK_DTYPE_BF16, 4, qs);
    ak_tensor ci = ak_tensor_make(io.idx, AK_DTYPE_I32, 3, is);
    ak_tensor cei = ak_tensor_make(io.eidx, AK_DTYPE_I32, 3, es);
    ak_tensor cl = ak_tensor_make(io.len, AK_DTYPE_I32, cs->len_mode == 2 ? 2 : 1, ls);
    ak_tensor cel = ak_tensor_make(io.elen, AK_DTYPE_I32, cs->len_mode == 2 ? 2 : 1, ls);
    ak_tensor cs_ = ak_tensor_make(io.sink, AK_DTYPE_F32, 1, hs);
    ak_tensor gq = ak_tensor_make_on(io.dq, dev, AK_DTYPE_BF16, 4, qs);
    gq.strides[2] = qstr, gq.strides[1] = h_q * qstr, gq.strides[0] = s_q * h_q * qstr;
    ak_tensor gi = ak_tensor_make_on(io.didx, dev, AK_DTYPE_I32, 3, is);
    ak_tensor gei = ak_tensor_make_on(io.deidx, dev, AK_DTYPE_I32, 3, es);
    ak_tensor gl = ak_tensor_make_on(io.dlen, dev, AK_DTYPE_I32, cs->len_mode == 2 ? 2 : 1, ls);
    ak_tensor gel = ak_tensor_make_on(io.delen, dev, AK_DTYPE_I32, cs->len_mode == 2 ? 2 : 1, ls);
    ak_tensor gs = ak_tensor_make_on(io.dsink, dev, AK_DTYPE_F32, 1, hs);
    ak_tensor go = ak_tensor_make_on(dout, dev, cs->out_f32 ? AK_DTYPE_F32 : AK_DTYPE_BF16, 4, os);
    go.strides[2] = (int64_t)ostr, go.strides[1] = h_q * go.strides[2], go.strides[0] = s_q * go.strides[1];
    uint8_t *hpad = malloc(obytes);
    ak_tensor glse = ak_tensor_make_on(dlse, dev, AK_DTYPE_F32, 3, lss);
    glse.strides[0] = l0, glse.strides[1] = l1, glse.strides[2] = l2;

    ak_mla_decode_args ca, ga;
    memset(&ca, 0, sizeof ca);
    ca.q = &cq;
    ca.cache = &mp.c_cpu;
    /* not d^-0.5: catches an ignored scale */
    ca.softmax_scale = (float)ldexp(pow((double)dqk, -0.55), cs->lexp);
    ca.indices = &ci;
    ca.topk_length = cs->len_mode ? &cl : NULL;
    if (etopk > 0) {
        ca.extra_cache = &ep.c_cpu;
        ca.extra_indices = &cei;
        ca.extra_topk_length = cs->len_mode ? &cel : NULL;
    }
    ca.attn_sink = cs->sink ? &cs_ : NULL;
    ca.balance = cs->balance; /* the CPU backend accepts and ignores it */
    ga = ca;
    ga.q = &gq;
    ga.cache = &mp.c_gpu;
    ga.indices = &gi;
    ga.topk_length = cs->len_mode ? &gl : NULL;
    if (etopk > 0) {
        ga.extra_cache = &ep.c_gpu;
        ga.extra_indices = &gei;
        ga.extra_topk_length = cs->len_mode ? &gel : NULL;
    }
    ga.attn_sink = cs->sink ? &gs : NULL;
    ga.out = &go;
    ga.lse = &glse;

    float *out_ref = malloc(sizeof(float) * (size_t)nrow * 512), *lse_ref = malloc(4 * (size_t)nrow);
    void *hout = malloc((size_t)nrow * 512 * osz), *hout2 = malloc((size_t)nrow * 512 * osz);
    float *hlse = malloc(4 * (size_t)nrow), *hlse2 = malloc(4 * (size_t)nrow);
    sd_cpu_ref(cpu, ca, out_ref, lse_ref, os, lss);

    size_t ws = 0;
    CHECK_STATUS(ak_mla_decode_workspace_size(gpu, &ga, &ws), AK_OK);
    if (ws > 0) CHECK(cudaMalloc(&dws, ws) == cudaSuccess);
    for (int rep = 0; rep < 2; rep++) { /* the second run must match the first bit for bit */
        CHECK(cudaMemset(dout, 0xff, obytes) == cudaSuccess); /* NaN poison */
        CHECK(cudaMemset(dlse, 0xff, (size_t)nl * 4) == cudaSuccess);
        ga.balance = cs->balance != AK_BALANCE_NONE && rep == 1 ? AK_BALANCE_REUSE : cs->balance;
        for (int l = 0; l < (cs->launches > 1 ? cs->launches : 1); l++)
            CHECK_STATUS(ak_mla_decode(gpu, &ga, dws, ws), AK_OK);
        CHECK_STATUS(ak_context_synchronize(gpu), AK_OK);
        CHECK(cudaMemcpy(hpad, dout, obytes, cudaMemcpyDeviceToHost) == cudaSuccess);
        /* the rows to the dense host copy; every padding byte must still hold the poison */
        size_t touched = 0;
        for (int64_t k = 0; k < nrow; k++) {
            memcpy((uint8_t *)(rep ? hout2 : hout) + (size_t)k * 512 * osz, hpad + (size_t)k * ostr * osz, 512 * osz);
            for (size_t e = 512 * osz; e < ostr * osz; e++) touched += hpad[(size_t)k * ostr * osz + e] != 0xff;
        }
        CHECK_MSG(touched == 0, "%s: %zu bytes of the output rows' padding were written", what, touched);
        sd_lse_read(what, rep ? hlse2 : hlse, hl, dlse, nl, b, s_q, h_q, l0, l1, l2);
    }
    ga.balance = cs->balance;
    sd_compare(what, hout, cs->out_f32, hlse, out_ref, lse_ref, nrow, cs->vexp, cs->lexp);
    CHECK_MSG(memcmp(hout, hout2, (size_t)nrow * 512 * osz) == 0 && memcmp(hlse, hlse2, 4 * (size_t)nrow) == 0,
              "%s: rerun is not bitwise identical", what);
    if (cs->balance != AK_BALANCE_NONE && !graph) {
        /* the schedule made for the lengths above, reused with new lists and lengths: exact still */
        sd_fill_lists(&io, cs, &mp, &ep, r);
        sd_upload(io.didx, io.idx, 4 * ni);
        sd_upload(io.deidx, io.eidx, 4 * nei);
        sd_upload(io.dlen, io.len, 4 * (size_t)nlen);
        sd_upload(io.delen, io.elen, 4 * (size_t)nlen);
        CHECK(cudaMemset(dout, 0xff, obytes) == cudaSuccess);
        CHECK(cudaMemset(dlse, 0xff, (size_t)nl * 4) == cudaSuccess);
        ga.balance = AK_BALANCE_REUSE;
        CHECK_STATUS(ak_mla_decode(gpu, &ga, dws, ws), AK_OK);
        CHECK_STATUS(ak_context_synchronize(gpu), AK_OK);
        CHECK(cudaMemcpy(hpad, dout, obytes, cudaMemcpyDeviceToHost) == cudaSuccess);
        for (int64_t k = 0; k < nrow; k++)
            memcpy((uint8_t *)hout + (size_t)k * 512 * osz, hpad + (size_t)k * ostr * osz, 512 * osz);
        sd_lse_read(what, hlse, hl, dlse, nl, b, s_q, h_q, l0, l1, l2);
        sd_cpu_ref(cpu, ca, out_ref, lse_ref, os, lss);
        sd_compare(what, hout, cs->out_f32, hlse, out_ref, lse_ref, nrow, cs->vexp, cs->lexp);
        /* REUSE on a workspace that holds no schedule (random bytes): the rows are then
           unspecified, but every entry is checked like an index, so nothing is read or written
           outside a buffer (the sanitizers' quick set runs this) */
        uint8_t *junk = malloc(ws);
        for (size_t e = 0; e < ws; e++) junk[e] = (uint8_t)ak_rng_range(r, 0, 256);
        sd_upload(dws, junk, ws);
        free(junk);
        CHECK_STATUS(ak_mla_decode(gpu, &ga, dws, ws), AK_OK);
        CHECK_STATUS(ak_context_synchronize(gpu), AK_OK);
    }
    if (!graph) { /* an output view off the element-pair grid is refused before anything is written */
        uint8_t *dbad = NULL;
        CHECK(cudaMalloc((void **)&dbad, obytes + 64) == cudaSuccess);
        CHECK(cudaMemset(dbad, 0xff, obytes + 64) == cudaSuccess);
        ak_tensor bo = go;
        bo.data = dbad + osz;
        ak_mla_decode_args ba = ga;
        ba.out = &bo;
        CHECK_STATUS(ak_mla_decode(gpu, &ba, dws, ws), AK_ERR_INVALID_ARGUMENT);
        CHECK_MSG(strstr(ak_last_error(), "out") != NULL, "%s: misaligned out: detail '%s'", what, ak_last_error());
        CHECK_STATUS(ak_context_synchronize(gpu), AK_OK);
        uint8_t *hb = malloc(obytes + 64);
        CHECK(cudaMemcpy(hb, dbad, obytes + 64, cudaMemcpyDeviceToHost) == cudaSuccess);
        size_t changed = 0;
        for (size_t e = 0; e < obytes + 64; e++) changed += hb[e] != 0xff;
        CHECK_MSG(changed == 0, "%s: misaligned out: %zu bytes written", what, changed);
        free(hb);
        cudaFree(dbad);
        if (ws > 0) { /* so is a workspace off the 16-byte grid */
            uint8_t *dws2 = NULL;
            CHECK(cudaMalloc((void **)&dws2, ws + 16) == cudaSuccess);
            sd_check_refused(gpu, &ga, dws2 + 8, ws, dout, hpad, obytes, "workspace", what,
                             "misaligned workspace");
            cudaFree(dws2);
        }
        /* and a pool off the 16-byte grid, which the record copies could not read (each list's) */
        for (int e = 0; e < (ga.extra_cache != NULL ? 2 : 1); e++) {
            ak_cache bc = e ? *ga.extra_cache : *ga.cache;
            bc.data = (uint8_t *)bc.data + 8;
            ak_mla_decode_args pa = ga;
            if (e) pa.extra_cache = &bc;
            else pa.cache = &bc;
            sd_check_refused(gpu, &pa, dws, ws, dout, hpad, obytes,
                             e ? ": extra_cache.data" : ": cache.data", what,
                             e ? "misaligned extra_cache" : "misaligned cache");
        }
    }

    if (graph) {
        cudaStream_t st;
        cudaGraph_t g;
        cudaGraphExec_t ge;
        CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking) == cudaSuccess);
        CHECK_STATUS(ak_context_set_stream(gpu, st), AK_OK);
        CHECK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal) == cudaSuccess);
        CHECK_STATUS(ak_mla_decode(gpu, &ga, dws, ws), AK_OK);
        CHECK(cudaStreamEndCapture(st, &g) == cudaSuccess);
        CHECK(cudaGraphInstantiate(&ge, g, 0) == cudaSuccess);
        for (int rep = 0; rep < 2; rep++) { /* new lists and lengths in the captured buffers */
            sd_fill_lists(&io, cs, &mp, &ep, r);
            sd_upload(io.didx, io.idx, 4 * ni);
            sd_upload(io.deidx, io.eidx, 4 * nei);
            sd_upload(io.dlen, io.len, 4 * (size_t)nlen);
            sd_upload(io.delen, io.elen, 4 * (size_t)nlen);
            CHECK(cudaMemset(dout, 0xff, (size_t)nrow * 512 * osz) == cudaSuccess);
            CHECK(cudaMemset(dlse, 0xff, (size_t)nl * 4) == cudaSuccess);
            /* the uploads and the poison ran on the legacy stream, which the non-blocking st does
               not wait for: unordered, the poison could land after the replay's rows (session 39) */
            CHECK(cudaDeviceSynchronize() == cudaSuccess);
            CHECK(cudaGraphLaunch(ge, st) == cudaSuccess);
            CHECK(cudaStreamSynchronize(st) == cudaSuccess);
            CHECK(cudaMemcpy(hout, dout, (size_t)nrow * 512 * osz, cudaMemcpyDeviceToHost) == cudaSuccess);
            sd_lse_read(what, hlse, hl, dlse, nl, b, s_q, h_q, l0, l1, l2);
            sd_cpu_ref(cpu, ca, out_ref, lse_ref, os, lss);
            sd_compare(what, hout, cs->out_f32, hlse, out_ref, lse_ref, nrow, cs->vexp, cs->lexp);
        }
        CHECK_STATUS(ak_context_set_stream(gpu, NULL), AK_OK);
        cudaGraphExecDestroy(ge);
        cudaGraphDestroy(g);
        cudaStreamDestroy(st);
    }

    /* Row (0, 0) with bad indices is all invalid: out 0, lse +inf (the CPU reference says so
       too, but check the rule itself). */
    if (cs->bad && !graph) {
        CHECK(isinf(hlse[0]) && hlse[0] > 0);
    }
    free(out_ref);
    free(lse_ref);
    free(hout);
    free(hout2);
    free(hlse);
    free(hlse2);
    free(hl);
    free(io.q);
    free(io.idx);
    free(io.eidx);
    free(io.len);
    free(io.elen);
    free(io.sink);
    cudaFree(io.dq);
    cudaFree(io.didx);
    cudaFree(io.deidx);
    cudaFree(io.dlen);
    cudaFree(io.delen);
    cudaFree(io.dsink);
    free(hpad);
    cudaFree(dout);
    cudaFree(dlse);
    cudaFree(dws);
    sd_pool_free(&mp);
    if (etopk > 0) sd_pool_free(&ep);
}

static int sd_contexts(ak_context **cpu, ak_context **gpu) {
    ak_context_options o;
    memset(&o, 0, sizeof o);
    o.backend = AK_BACKEND_CUDA;
    ak_status s = ak_context_create(&o, gpu);
    if (s != AK_OK) {
        ak_test_skip("no CUDA device (%s)", ak_last_error());
        return 0;
    }
    o.backend = AK_BACKEND_CPU;
    CHECK_STATUS(ak_context_create(&o, cpu), AK_OK);
    return 1;
}

static const ak_layout k_layouts[4] = {AK_LAYOUT_DSA_FP8_BLOCKSCALE, AK_LAYOUT_MLA_BF16,
                                       AK_LAYOUT_MLA_FP8_PERTENSOR, AK_LAYOUT_DSV4_FP8_UE8M0};

/* sd_contexts for a test of full runs only: under AK_TEST_QUICK (the sanitizers' set) it reports
   the test skipped and returns 0. */
static int sd_full_contexts(ak_context **cpu, ak_context **gpu) {
    if (!sd_contexts(cpu, gpu)) return 0;
    if (!sd_quick()) return 1;
    ak_test_skip("full runs only (AK_TEST_QUICK)");
    ak_context_destroy(*cpu);
    ak_context_destroy(*gpu);
    return 0;
}

/* Every layout x h_q x s_q; the other knobs rotate so each layout meets each of them. */
AK_TEST(sparse_decode_matrix) {
    ak_context *cpu = NULL, *gpu = NULL;
    if (!sd_contexts(&cpu, &gpu)) return;
    ak_rng r;
    ak_rng_init(&r, ak_test_seed());
    static const int64_t heads[6] = {1, 8, 16, 32, 64, 128}, sqs[3] = {1, 2, 4};
    static const int64_t topks[4] = {64, 128, 192, 320}, etopks[3] = {0, 64, 128};
    int n = 0;
    for (int li = 0; li < 4; li++)
        for (int hi = 0; hi < 6; hi++)
            for (int si = 0; si < 3; si++, n++) {
                if (sd_quick() && (hi % 2 == 1 || si == 2)) continue;
                sd_case c;
                memset(&c, 0, sizeof c);
                c.layout = k_layouts[li];
                c.h_q = heads[hi];
                c.s_q = sqs[si];
                c.b = heads[hi] * sqs[si] >= 256 ? 2 : 3;
                c.topk = topks[n % 4];
                c.etopk = c.layout == AK_LAYOUT_DSV4_FP8_UE8M0 ? 128 + etopks[n % 3] : etopks[(n / 2) % 3];
                if (c.layout == AK_LAYOUT_DSV4_FP8_UE8M0) c.topk = 128; /* the SWA window */
                c.len_mode = n % 3;
                c.bad = (n % 2) == 0;
                c.sink = (n % 4) < 2;
                c.out_f32 = (n % 7) == 6;
                c.runs = (n % 5) == 4;
                sd_run_case(cpu, gpu, &c, &r, 0);
            }
    ak_context_destroy(cpu);
    ak_context_destroy(gpu);
}

/* Long lists (many KV splits and tiles per split), and small head counts at a larger batch. */
AK_TEST(sparse_decode_long) {
    ak_context *cpu = NULL, *gpu = NULL;
    if (!sd_contexts(&cpu, &gpu)) return;
    ak_rng r;
    ak_rng_init(&r, ak_test_seed() + 1);
    sd_case c;
    memset(&c, 0, sizeof c);
    c.layout = AK_LAYOUT_DSA_FP8_BLOCKSCALE;
    c.b = 2, c.s_q = 1, c.h_q = 16, c.topk = 2048, c.len_mode = 2, c.bad = 1, c.sink = 1;
    sd_run_case(cpu, gpu, &c, &r, 0);
    if (!sd_quick()) {
        c.layout = AK_LAYOUT_MLA_BF16;
        c.b = 40, c.h_q = 8, c.topk = 256, c.len_mode = 0, c.bad = 0, c.sink = 0;
        sd_run_case(cpu, gpu, &c, &r, 0);
    }
    c.layout = AK_LAYOUT_DSV4_FP8_UE8M0;
    c.b = 1, c.h_q = 64, c.topk = 128, c.etopk = 1024, c.len_mode = 1, c.bad = 1, c.sink = 1;
    sd_run_case(cpu, gpu, &c, &r, 0);
    ak_context_destroy(cpu);
    ak_context_destroy(gpu);
}

/* The edges of what the op promises (issue 6): top-k 32768, the longest list, on the mma.sync
   kernel (b 1, many splits) and on the warp-specialized one (b 8 x 64 heads, with splits); s_q 8 on
   every layout; and more than 11.6k query rows in one call (b s_q h_q 12800 and 13312: the count
   at which FlashMLA's sparse decode caps a batch). Only the s_q 8 656 case runs in the quick set. */
AK_TEST(sparse_decode_limits) {
    ak_context *cpu = NULL, *gpu = NULL;
    if (!sd_contexts(&cpu, &gpu)) return;
    ak_rng r;
    ak_rng_init(&r, ak_test_seed() + 4);
    static const struct { ak_layout l; int64_t b, s_q, h_q, topk, etopk; } k[] = {
        {AK_LAYOUT_DSA_FP8_BLOCKSCALE, 2, 8, 16, 256, 0},  {AK_LAYOUT_DSA_FP8_BLOCKSCALE, 1, 1, 16, 32768, 0},
        {AK_LAYOUT_DSA_FP8_BLOCKSCALE, 8, 1, 64, 32768, 0}, {AK_LAYOUT_MLA_FP8_PERTENSOR, 1, 8, 128, 192, 64},
        {AK_LAYOUT_MLA_BF16, 3, 8, 8, 128, 0},              {AK_LAYOUT_DSV4_FP8_UE8M0, 1, 8, 32, 128, 512},
        {AK_LAYOUT_DSA_FP8_BLOCKSCALE, 100, 2, 64, 64, 0},  {AK_LAYOUT_MLA_BF16, 104, 1, 128, 64, 0},
    };
    for (size_t n = 0; n < sizeof k / sizeof k[0]; n++) {
        if (sd_quick() && n > 0) break;
        sd_case c;
        memset(&c, 0, sizeof c);
        c.layout = k[n].l, c.b = k[n].b, c.s_q = k[n].s_q, c.h_q = k[n].h_q, c.topk = k[n].topk;
        c.etopk = k[n].etopk, c.len_mode = 1 + (int)(n % 2), c.bad = 1, c.sink = (int)(n % 2);
        sd_run_case(cpu, gpu, &c, &r, 0);
    }
    ak_context_destroy(cpu);
    ak_context_destroy(gpu);
}

/* Batches large enough that the plan (on a ~132-SM GPU) picks the wgmma kernels, with one split and
   with several, on every record path: the warp-specialized kernel (656, per-tensor fp8 and V4;
   h_q 40..128), the swap-AB kernel (656, per-tensor fp8 and V4; h_q <= 32 from 5 (token, 16-head
   tile) units, V4 from 16: 16- and 32-head tiles, padded columns at h_q 8 and 20), the
   register-dequantizing one (per-tensor fp8; h_q <= 16 at 16 or more tiles per CTA), the
   pipelined one (MLA_BF16 double-buffered and at 64 rows; V4 at 8 to 31 units runs on the
   warp-specialized kernel in the matrix and graph cases), with aligned output rows (stored by
   bulk copies) and padded ones. The small cases above run the mma.sync kernel below 5 (token,
   16-head tile) units (the matrix's s_q 2 and 4 cases at h_q <= 16 and its h_q 32 cases run the
   swap-AB kernel, h_q 32 at s_q 1 and 2 on two 16-head tiles); 656 and per-tensor above 32 heads
   run the swap-AB kernel's 16-head tiles up to 4 (token, 64-head tile) units (the matrix's h_q 64
   s_q 1 cases) and the warp-specialized kernel from 5 (its h_q 64 s_q 2 and 4 and h_q 128 cases);
   V4 and MLA_BF16 above 32 heads run the mma.sync kernel below 8 such units. */
AK_TEST(sparse_decode_wide) {
    ak_context *cpu = NULL, *gpu = NULL;
    if (!sd_contexts(&cpu, &gpu)) return;
    ak_rng r;
    ak_rng_init(&r, ak_test_seed() + 3);
    static const struct { ak_layout l; int64_t b, s_q, h_q, topk, etopk; int runs; } k[] = {
        {AK_LAYOUT_DSA_FP8_BLOCKSCALE, 128, 1, 64, 64, 0}, {AK_LAYOUT_DSA_FP8_BLOCKSCALE, 128, 1, 32, 128, 0},
        {AK_LAYOUT_DSA_FP8_BLOCKSCALE, 8, 1, 128, 2048, 0}, {AK_LAYOUT_MLA_BF16, 64, 1, 128, 128, 0},
        {AK_LAYOUT_MLA_BF16, 128, 1, 32, 64, 0},            {AK_LAYOUT_MLA_FP8_PERTENSOR, 128, 1, 64, 64, 0},
        {AK_LAYOUT_DSV4_FP8_UE8M0, 64, 2, 64, 128, 128},
        /* the warp-specialized kernel at head counts off the 16-row grid, with an extra list */
        {AK_LAYOUT_DSA_FP8_BLOCKSCALE, 16, 2, 40, 192, 64}, {AK_LAYOUT_MLA_FP8_PERTENSOR, 48, 1, 20, 128, 0},
        /* the swap-AB kernel at 8 padded heads and s_q 4, and at 16 heads with an extra list */
        {AK_LAYOUT_DSA_FP8_BLOCKSCALE, 4, 4, 8, 128, 0}, {AK_LAYOUT_DSA_FP8_BLOCKSCALE, 32, 1, 16, 256, 64},
        /* V4 on the warp-specialized kernel with splits (64 units; the 128-unit case above has one) */
        {AK_LAYOUT_DSV4_FP8_UE8M0, 32, 1, 128, 128, 512},
        /* the register-dequantizing kernel (per-tensor fp8, h_q <= 16, 16 or more tiles per CTA:
           67 or more units at one split): one real head of sixteen, and an extra list at s_q 2 */
        {AK_LAYOUT_MLA_FP8_PERTENSOR, 68, 1, 1, 1024, 0},
        {AK_LAYOUT_MLA_FP8_PERTENSOR, 36, 2, 4, 1024, 64},
        /* rows that are runs of consecutive slots (a sliding window's pattern): V4's window and
           per-tensor fp8 on the warp-specialized kernel, 656 on the swap-AB kernel */
        {AK_LAYOUT_DSV4_FP8_UE8M0, 64, 1, 64, 128, 512, 1}, {AK_LAYOUT_MLA_FP8_PERTENSOR, 64, 1, 128, 256, 0, 1},
        {AK_LAYOUT_DSA_FP8_BLOCKSCALE, 32, 2, 32, 256, 64, 1},
        /* V4 at one split with aligned rows and a sink (odd n): the sinks the 64-head kernel loads
           beside Q into shared memory and reads in its staged epilogue (68 units: two splits would
           take two waves on ~132 SMs) */
        {AK_LAYOUT_DSV4_FP8_UE8M0, 68, 1, 64, 128, 512},
        /* the small batches' routes (x228, x229): 24 heads as two 16-head swap-AB tiles (6 units,
           the second tile half padding), and 100 heads on the warp-specialized kernel at 6 (token,
           64-head tile) units, its second tile 36 real heads */
        {AK_LAYOUT_DSA_FP8_BLOCKSCALE, 3, 1, 24, 256, 64}, {AK_LAYOUT_MLA_FP8_PERTENSOR, 3, 1, 100, 192, 0},
        /* V4 on the swap-AB kernel (x231): 16-head tiles at one split, 32-head tiles at s_q 2 with
           a sink and padded rows, 20 heads on two 16-head tiles with splits (10 units), and a
           window's runs of slots at 8 padded heads with a sink */
        {AK_LAYOUT_DSV4_FP8_UE8M0, 160, 1, 16, 128, 512}, {AK_LAYOUT_DSV4_FP8_UE8M0, 24, 2, 32, 128, 512},
        {AK_LAYOUT_DSV4_FP8_UE8M0, 5, 1, 20, 128, 512},   {AK_LAYOUT_DSV4_FP8_UE8M0, 96, 1, 8, 128, 256, 1},
        /* the swap-AB kernel's 16-head tiles above 32 heads (x246): b 1 h_q 128 (8 tiles, 16 splits)
           and 100 heads (7 tiles, the last 4 real heads) with an extra list */
        {AK_LAYOUT_DSA_FP8_BLOCKSCALE, 1, 1, 128, 2048, 0}, {AK_LAYOUT_MLA_FP8_PERTENSOR, 1, 1, 100, 256, 64},
        /* V4 with no extra list (a window alone) on both kernels: their one-list instances */
        {AK_LAYOUT_DSV4_FP8_UE8M0, 64, 1, 64, 256, 0},      {AK_LAYOUT_DSV4_FP8_UE8M0, 128, 1, 16, 256, 0},
    };
    ak_device_info di;
    CHECK_STATUS(ak_context_device_info(gpu, &di), AK_OK);
    for (size_t n = 0; n < sizeof k / sizeof k[0]; n++) {
        if (sd_quick() && n % 2 == 1) continue;
        /* the register-dequantizing kernel serves devices of high copy bandwidth per SM (H200):
           claim one for its cases, so that it runs on any device (and the cases after them take
           such a device's routes: 656 at 16 heads stays on the swap-AB kernel there) */
        if (n >= 12) CHECK_STATUS(ak_context_set_ceilings(gpu, 64e9 * di.sm_count, 0.0), AK_OK);
        sd_case c;
        memset(&c, 0, sizeof c);
        c.layout = k[n].l, c.b = k[n].b, c.s_q = k[n].s_q, c.h_q = k[n].h_q, c.topk = k[n].topk;
        c.etopk = k[n].etopk, c.len_mode = 1 + (int)(n % 2), c.bad = 1, c.sink = (int)(n % 2);
        c.runs = k[n].runs;
        c.out_f32 = n == 2 || n == 6 || n == 22;
        /* rows off the 16-byte grid (the 64-head kernels then store fragments, not bulk rows): the
           splitting 656 case, per-tensor and V4 at one split, the swap-AB kernel */
        c.out_pad = n == 2 || n == 5 || n == 6 || n == 10 || n == 21 ? 2 : 0;
        sd_run_case(cpu, gpu, &c, &r, 0);
    }
    ak_context_destroy(cpu);
    ak_context_destroy(gpu);
}

/* Calls whose CTAs of one split fill two waves, with lengths: the kernels take the token rows
   longest first (the order ak_sd_lpt_order computes on the device from the lengths before the main
   kernel, which each CTA reads after its dependency wait). Every kernel family: the
   warp-specialized kernel (656 at 128 heads, V4 with an extra list), the swap-AB kernel (656 at 16
   heads and s_q 2, per-tensor fp8 at 32, V4 at 16), the pipelined one (MLA_BF16) and the
   register-dequantizing one. b is two waves of the device's SMs, so the plan keeps one split;
   both length forms, invalid indices, sinks; the poisoned outputs catch a row taken twice or by
   no CTA. */
AK_TEST(sparse_decode_lpt) {
    ak_context *cpu = NULL, *gpu = NULL;
    if (!sd_contexts(&cpu, &gpu)) return;
    ak_rng r;
    ak_rng_init(&r, ak_test_seed() + 13);
    ak_device_info di;
    CHECK_STATUS(ak_context_device_info(gpu, &di), AK_OK);
    const int64_t w2 = 2 * (int64_t)di.sm_count; /* CTAs of two waves (one per SM) */
    static const struct { ak_layout l; int64_t s_q, h_q, topk, etopk; } k[] = {
        {AK_LAYOUT_DSA_FP8_BLOCKSCALE, 1, 128, 512, 0}, {AK_LAYOUT_DSV4_FP8_UE8M0, 1, 64, 128, 256},
        {AK_LAYOUT_DSA_FP8_BLOCKSCALE, 2, 16, 256, 0},  {AK_LAYOUT_MLA_FP8_PERTENSOR, 1, 32, 256, 0},
        {AK_LAYOUT_MLA_BF16, 1, 64, 256, 0},            {AK_LAYOUT_DSV4_FP8_UE8M0, 1, 16, 128, 256},
        {AK_LAYOUT_MLA_FP8_PERTENSOR, 1, 16, 1024, 0},
    };
    const int n_k = (int)(sizeof k / sizeof k[0]);
    for (int n = 0; n < n_k; n++) {
        if (sd_quick() && n % 3 != 0) continue;
        /* the last case on the register-dequantizing kernel: claim a high copy bandwidth per SM */
        if (n == n_k - 1) CHECK_STATUS(ak_context_set_ceilings(gpu, 64e9 * di.sm_count, 0.0), AK_OK);
        sd_case c;
        memset(&c, 0, sizeof c);
        const int64_t htiles = k[n].h_q > 32 ? (k[n].h_q + 63) / 64 : 1;
        c.layout = k[n].l, c.s_q = k[n].s_q, c.h_q = k[n].h_q, c.topk = k[n].topk, c.etopk = k[n].etopk;
        c.b = w2 / (htiles * c.s_q);
        c.len_mode = 1 + n % 2, c.bad = 1, c.sink = n % 2;
        sd_run_case(cpu, gpu, &c, &r, 0);
        if (n == n_k - 1) CHECK_STATUS(ak_context_set_ceilings(gpu, di.copy_bytes_per_s, 0.0), AK_OK);
    }
    ak_context_destroy(cpu);
    ak_context_destroy(gpu);
}

/* Large batches with lengths, balanced on the device (AK_BALANCE_MAKE: ak_sd_balance cuts the
   token rows into pieces of equal work by their lengths, longest first; each CTA reads its piece
   after its dependency wait; rows of several pieces go through the combine; then AK_BALANCE_REUSE,
   with the same lengths and with new ones). Batches of one wave and of two
   waves of the device's SMs (the plan's one-split shapes), on every kernel family: the
   warp-specialized kernel (656 at 128 and 64 heads, V4 with an extra list), the swap-AB kernel (656
   at 16 heads and s_q 2, per-tensor fp8 and V4 at 32), the pipelined one (MLA_BF16) and the
   register-dequantizing one. Half the cases skew the lengths (every ninth row full, the rest short
   or empty), so the long rows split into many pieces; one case runs under graph replay with new
   lengths (a new set of pieces) in each replay; both length forms, invalid indices, sinks. The
   poisoned outputs catch a row taken twice or by no CTA. */
AK_TEST(sparse_decode_balanced) {
    ak_context *cpu = NULL, *gpu = NULL;
    if (!sd_contexts(&cpu, &gpu)) return;
    ak_rng r;
    ak_rng_init(&r, ak_test_seed() + 19);
    ak_device_info di;
    CHECK_STATUS(ak_context_device_info(gpu, &di), AK_OK);
    static const struct { ak_layout l; int64_t s_q, h_q, topk, etopk; int waves, skew, graph; } k[] = {
        {AK_LAYOUT_DSA_FP8_BLOCKSCALE, 1, 128, 512, 0, 2, 0, 0}, {AK_LAYOUT_DSV4_FP8_UE8M0, 1, 64, 128, 256, 2, 1, 0},
        {AK_LAYOUT_DSA_FP8_BLOCKSCALE, 2, 16, 256, 0, 2, 0, 0},  {AK_LAYOUT_MLA_FP8_PERTENSOR, 1, 32, 256, 0, 2, 1, 0},
        {AK_LAYOUT_MLA_BF16, 1, 64, 256, 0, 2, 0, 0},            {AK_LAYOUT_DSA_FP8_BLOCKSCALE, 1, 64, 1024, 0, 1, 1, 0},
        {AK_LAYOUT_DSA_FP8_BLOCKSCALE, 1, 128, 512, 0, 1, 1, 0}, {AK_LAYOUT_DSV4_FP8_UE8M0, 1, 64, 128, 512, 1, 0, 1},
        {AK_LAYOUT_DSV4_FP8_UE8M0, 1, 32, 128, 512, 2, 1, 0},
        {AK_LAYOUT_MLA_FP8_PERTENSOR, 1, 16, 1024, 0, 1, 1, 0},
        {AK_LAYOUT_MLA_FP8_PERTENSOR, 1, 16, 1024, 0, 2, 0, 0},
    };
    const int n_k = (int)(sizeof k / sizeof k[0]);
    for (int n = 0; n < n_k; n++) {
        if (sd_quick() && n % 3 != 0) continue;
        /* the last two cases on the register-dequantizing kernel: claim a high copy bandwidth per SM */
        if (n >= n_k - 2) CHECK_STATUS(ak_context_set_ceilings(gpu, 64e9 * di.sm_count, 0.0), AK_OK);
        sd_case c;
        memset(&c, 0, sizeof c);
        const int64_t htiles = k[n].h_q > 32 ? (k[n].h_q + 63) / 64 : 1;
        c.layout = k[n].l, c.s_q = k[n].s_q, c.h_q = k[n].h_q, c.topk = k[n].topk, c.etopk = k[n].etopk;
        c.b = k[n].waves * (int64_t)di.sm_count / (htiles * c.s_q);
        c.len_mode = 1 + n % 2, c.bad = 1, c.sink = n % 2, c.len_skew = k[n].skew;
        c.balance = AK_BALANCE_MAKE;
        sd_run_case(cpu, gpu, &c, &r, k[n].graph);
    }
    CHECK_STATUS(ak_context_set_ceilings(gpu, di.copy_bytes_per_s, 0.0), AK_OK);
    ak_context_destroy(cpu);
    ak_context_destroy(gpu);
}

/* The register-dequantizing kernel under DRAM load, as it runs the target shape: 128 requests of
   2048 keys (one CTA per request, 32 tiles each, its three consumer warpgroups taking turns on a
   ring of four raw tiles), each request's keys in its own ~21 MB share of a 2.8 GB pool, far past
   L2, and 1000 launches back to back per checked run (two runs, bitwise equal). The pools
   of the cases above fit in L2. (x175, a FULL barrier shared by two warpgroups' tiles, faulted in
   the benchmark's graph replay of this shape but passed here: the benchmark stays its check.) */
AK_TEST(sparse_decode_ring_load) {
    ak_context *cpu = NULL, *gpu = NULL;
    if (!sd_full_contexts(&cpu, &gpu)) return; /* the sanitizers' runs: the wide cases cover this kernel's code */
    ak_rng r;
    ak_rng_init(&r, ak_test_seed() + 11);
    ak_device_info di;
    CHECK_STATUS(ak_context_device_info(gpu, &di), AK_OK);
    CHECK_STATUS(ak_context_set_ceilings(gpu, 64e9 * di.sm_count, 0.0), AK_OK); /* as sparse_decode_wide */
    sd_case c;
    memset(&c, 0, sizeof c);
    c.layout = AK_LAYOUT_MLA_FP8_PERTENSOR, c.b = 128, c.s_q = 1, c.h_q = 16, c.topk = 2048;
    c.pool_copies = 512, c.launches = 1000;
    sd_run_case(cpu, gpu, &c, &r, 0);
    ak_context_destroy(cpu);
    ak_context_destroy(gpu);
}

/* The partial rows of split calls are stored in fp16 at a per-CTA power-of-two scale (sparse_decode.cuh,
   ak_sd_part_scale). Values 2^24 times the anchor data's (~1.7e6 at most, past fp16's 65504) and
   2^-24 times (~6e-9, under its smallest normal 6.1e-5) on every kernel family's split path: the
   mma.sync kernel (b 1), the swap-AB kernel (b 8 h_q 16), the warp-specialized one (656 b 8 h_q
   128, V4 b 8 and b 32), the pipelined one (MLA_BF16 at 8 units) and the register-dequantizing one
   (per-tensor b 40 h_q 16, top-k 4096: 3 splits of 22 tiles). Unscaled fp16 rows would read inf
   or 0 here; NMSE and cosine, which do not depend on the scale, catch any lost precision. */
AK_TEST(sparse_decode_range) {
    ak_context *cpu = NULL, *gpu = NULL;
    if (!sd_contexts(&cpu, &gpu)) return;
    ak_rng r;
    ak_rng_init(&r, ak_test_seed() + 5);
    static const struct { ak_layout l; int64_t b, h_q, topk, etopk; } k[] = {
        {AK_LAYOUT_DSA_FP8_BLOCKSCALE, 1, 16, 2048, 0}, {AK_LAYOUT_MLA_BF16, 1, 64, 512, 0},
        {AK_LAYOUT_DSA_FP8_BLOCKSCALE, 8, 16, 2048, 0}, {AK_LAYOUT_MLA_FP8_PERTENSOR, 8, 32, 1024, 64},
        {AK_LAYOUT_DSA_FP8_BLOCKSCALE, 8, 128, 1024, 0}, {AK_LAYOUT_DSV4_FP8_UE8M0, 32, 64, 128, 512},
        {AK_LAYOUT_MLA_BF16, 8, 64, 512, 0},             {AK_LAYOUT_DSV4_FP8_UE8M0, 8, 64, 128, 512},
        {AK_LAYOUT_MLA_FP8_PERTENSOR, 40, 16, 4096, 0},
    };
    const int n_k = (int)(sizeof k / sizeof k[0]);
    ak_device_info di;
    CHECK_STATUS(ak_context_device_info(gpu, &di), AK_OK);
    for (int n = 0; n < 2 * n_k; n++) {
        const int kk = n % n_k;
        if (sd_quick() && n >= n_k) break;
        /* the register-dequantizing kernel: claim a high copy bandwidth per SM, as sparse_decode_wide does */
        if (kk == n_k - 1) CHECK_STATUS(ak_context_set_ceilings(gpu, 64e9 * di.sm_count, 0.0), AK_OK);
        sd_case c;
        memset(&c, 0, sizeof c);
        c.layout = k[kk].l, c.b = k[kk].b, c.s_q = 1, c.h_q = k[kk].h_q, c.topk = k[kk].topk;
        c.etopk = k[kk].etopk, c.len_mode = 1 + n % 2, c.bad = 1, c.sink = n % 2, c.out_f32 = n % 3 == 2;
        c.vexp = n < n_k ? 24 : -24;
        sd_run_case(cpu, gpu, &c, &r, 0);
        if (kk == n_k - 1) CHECK_STATUS(ak_context_set_ceilings(gpu, di.copy_bytes_per_s, 0.0), AK_OK);
    }
    ak_context_destroy(cpu);
    ak_context_destroy(gpu);
}

/* A softmax far from uniform: the data's logits (~0.06 apart) times 2^9 or 2^10 spread over
   hundreds, so that the running max of every kernel jumps many times, most weights underflow
   (alpha and P flush to 0), and the splits' lse values lie more than 126 log2 units apart, where
   the combines' weights flush to 0 too (x211); every kernel family and split path, sinks
   included. Tolerances as above, lse's absolute bound times 2^lexp: the logits' fp32 error (~1e-5
   raw with the tensor cores' accumulation, ~3e-4 after the scale) scales with them, and moves a
   weight by ~3e-4 relative, under the bf16 P's 2^-9. Full runs only. */
AK_TEST(sparse_decode_sharp) {
    ak_context *cpu = NULL, *gpu = NULL;
    if (!sd_full_contexts(&cpu, &gpu)) return;
    ak_rng r;
    ak_rng_init(&r, ak_test_seed() + 13);
    static const struct { ak_layout l; int64_t b, h_q, topk, etopk; } k[] = {
        {AK_LAYOUT_DSA_FP8_BLOCKSCALE, 1, 16, 2048, 0},  /* mma.sync kernel, 32 splits */
        {AK_LAYOUT_DSA_FP8_BLOCKSCALE, 1, 128, 2048, 0}, /* mma.sync, 16-head tiles, 16 splits */
        {AK_LAYOUT_DSV4_FP8_UE8M0, 1, 64, 128, 512},     /* V4 b 1: 10 splits */
        {AK_LAYOUT_DSV4_FP8_UE8M0, 8, 64, 128, 512},     /* 64-head kernel at 8 units, 4-dim combine */
        {AK_LAYOUT_DSA_FP8_BLOCKSCALE, 8, 16, 2048, 0},  /* swap-AB kernel with splits */
        {AK_LAYOUT_DSA_FP8_BLOCKSCALE, 8, 128, 2048, 0}, /* 64-head kernel with splits */
        {AK_LAYOUT_MLA_FP8_PERTENSOR, 32, 64, 1024, 0},  /* 64-head kernel, one split */
        {AK_LAYOUT_MLA_BF16, 8, 32, 512, 0},
        {AK_LAYOUT_MLA_BF16, 8, 64, 512, 0},             /* the pipelined wgmma kernel */
        {AK_LAYOUT_MLA_FP8_PERTENSOR, 40, 16, 4096, 0},  /* register-dequantizing kernel (below) */
    };
    const int n_k = (int)(sizeof k / sizeof k[0]);
    ak_device_info di;
    CHECK_STATUS(ak_context_device_info(gpu, &di), AK_OK);
    for (int n = 0; n < n_k; n++) {
        if (n == n_k - 1) CHECK_STATUS(ak_context_set_ceilings(gpu, 64e9 * di.sm_count, 0.0), AK_OK);
        sd_case c;
        memset(&c, 0, sizeof c);
        c.layout = k[n].l, c.b = k[n].b, c.s_q = 1, c.h_q = k[n].h_q, c.topk = k[n].topk;
        c.etopk = k[n].etopk, c.len_mode = n % 3 == 2 ? 0 : 1 + n % 2, c.bad = 1, c.sink = n % 2 == 0;
        c.out_f32 = n % 4 == 3, c.lexp = 9 + n % 2;
        sd_run_case(cpu, gpu, &c, &r, 0);
        if (n == n_k - 1) CHECK_STATUS(ak_context_set_ceilings(gpu, di.copy_bytes_per_s, 0.0), AK_OK);
    }
    ak_context_destroy(cpu);
    ak_context_destroy(gpu);
}

/* Capture once, replay with new indices and lengths in the same buffers. */
AK_TEST(sparse_decode_graph) {
    ak_context *cpu = NULL, *gpu = NULL;
    if (!sd_contexts(&cpu, &gpu)) return;
    ak_rng r;
    ak_rng_init(&r, ak_test_seed() + 2);
    /* every layout at 16 heads (mma.sync kernel) and 128 (the wgmma kernels: 12 units); 656 at 32
       heads and b 4 (the swap-AB kernel: 8 units); V4 at b 16 h_q 64 (32 units) and b 8 h_q 16 (the
       swap-AB kernel: 16 units) */
    for (int n = 0; n < 11; n++) {
        const int li = n < 8 ? n / 2 : n == 8 ? 0 : 3, wide = n % 2;
        if (sd_quick() && n < 8 && (li + wide) % 2 == 1) continue;
        sd_case c;
        memset(&c, 0, sizeof c);
        c.layout = k_layouts[li];
        c.b = n < 8 ? 3 : n == 8 ? 4 : n == 9 ? 16 : 8, c.s_q = 2;
        c.h_q = n < 8 ? (wide ? 128 : 16) : n == 8 ? 32 : n == 9 ? 64 : 16;
        c.topk = n == 9 ? 128 : 256, c.len_mode = 1 + n % 2;
        c.etopk = li >= 2 ? 128 : 0;
        c.bad = 1, c.sink = 1;
        sd_run_case(cpu, gpu, &c, &r, 1);
    }
    ak_context_destroy(cpu);
    ak_context_destroy(gpu);
}


/* Random cases: any head count 1..128, s_q 1..8, batches from one request to a few waves of CTAs
   (so the kernel, head tile, split count and longest-first order the plan picks all vary), top-k
   and extra lists in steps of 64, page sizes from 1 to 256 slots in both pools, q rows at padded
   and at odd strides (off the 16-byte grid), lse in FlashMLA's [b, h_q, s_q] order or in padded
   rows, a third of them balanced (AK_BALANCE_MAKE, then REUSE), every length form, invalid
   indices, sinks, f32 and padded outputs, and one case in six under graph replay. The cases above cover each path by
   design; these look for the combinations nobody listed. Outside the quick set one case in six is
   drawn on the register-dequantizing kernel's route (h_q <= 16, one split of 16 or more tiles, the
   context told an H200's copy bandwidth per SM: per-tensor fp8 runs there, 656 on the swap-AB
   kernel), which the plan takes only on such a device, so that every card draws it (656 on that
   kernel rounded its P V twice per term until x193, which two fixed cases showed once in 10^6
   elements). Each case's oracle work (b s_q h_q keys) stays under a budget, so a case takes about
   a second of CPU. AK_SD_FUZZ=n runs n cases (default 24; 4 in the quick set); the harness prints
   the seed, and each failure names its case. */
AK_TEST(sparse_decode_fuzz) {
    ak_context *cpu = NULL, *gpu = NULL;
    if (!sd_contexts(&cpu, &gpu)) return;
    ak_rng r;
    ak_rng_init(&r, ak_test_seed() + 17);
    const char *env = getenv("AK_SD_FUZZ");
    const int cases = env != NULL ? atoi(env) : sd_quick() ? 4 : 24;
    const double budget = sd_quick() ? 3e5 : 1.2e7;
    static const int32_t pages[8] = {1, 2, 16, 32, 64, 100, 128, 256};
    ak_device_info di;
    CHECK_STATUS(ak_context_device_info(gpu, &di), AK_OK);
    for (int n = 0; n < cases; n++) {
        sd_case c;
        memset(&c, 0, sizeof c);
        c.layout = k_layouts[ak_rng_range(&r, 0, 4)];
        const int v4 = c.layout == AK_LAYOUT_DSV4_FP8_UE8M0;
        c.h_q = ak_rng_range(&r, 1, 129);
        c.s_q = ak_rng_range(&r, 0, 4) == 0 ? ak_rng_range(&r, 3, 9) : ak_rng_range(&r, 1, 3);
        c.topk = 64 * ak_rng_range(&r, 1, v4 ? 5 : 33);
        c.etopk = v4 || ak_rng_range(&r, 0, 3) == 0 ? 64 * ak_rng_range(&r, 1, 17) : 0;
        /* b log-uniform in [1, bmax]: single requests, split calls and multi-wave calls alike */
        double bmax = budget / (double)(c.s_q * c.h_q * (c.topk + c.etopk));
        bmax = bmax < 1.0 ? 1.0 : bmax > 600.0 ? 600.0 : bmax;
        c.b = (int64_t)floor(pow(bmax, ak_rng_uniform(&r)));
        c.b = c.b < 1 ? 1 : c.b;
        c.page = pages[ak_rng_range(&r, 0, 8)];
        c.epage = pages[ak_rng_range(&r, 0, 8)];
        c.len_mode = (int)ak_rng_range(&r, 0, 3);
        c.bad = (int)ak_rng_range(&r, 0, 2);
        c.sink = (int)ak_rng_range(&r, 0, 2);
        c.out_f32 = ak_rng_range(&r, 0, 5) == 0;
        c.runs = ak_rng_range(&r, 0, 4) == 0;
        const int graph = ak_rng_range(&r, 0, 6) == 0;
        c.out_pad = !graph && ak_rng_range(&r, 0, 6) == 0 ? 2 : 0;
        const int64_t qp = ak_rng_range(&r, 0, 6);
        c.q_pad = qp == 0 ? 8 : qp == 1 ? 1 : 0;
        c.lse_mode = (int)ak_rng_range(&r, 0, 3);
        c.balance = ak_rng_range(&r, 0, 3) == 0 ? AK_BALANCE_MAKE : AK_BALANCE_NONE;
        const int rd = !sd_quick() && ak_rng_range(&r, 0, 6) == 0;
        if (rd) { /* the register-dequantizing route: b s_q from one to two waves keeps one split */
            c.layout =
                ak_rng_range(&r, 0, 3) ? AK_LAYOUT_MLA_FP8_PERTENSOR : AK_LAYOUT_DSA_FP8_BLOCKSCALE;
            c.h_q = ak_rng_range(&r, 1, 17);
            c.s_q = ak_rng_range(&r, 1, 3);
            c.topk = 64 * ak_rng_range(&r, 16, 33);
            c.etopk = ak_rng_range(&r, 0, 3) == 0 ? 64 * ak_rng_range(&r, 1, 9) : 0;
            c.b = ak_rng_range(&r, di.sm_count, 2 * (int64_t)di.sm_count + 1) / c.s_q;
            CHECK_STATUS(ak_context_set_ceilings(gpu, 64e9 * di.sm_count, 0.0), AK_OK);
        }
        sd_run_case(cpu, gpu, &c, &r, graph);
        if (rd) CHECK_STATUS(ak_context_set_ceilings(gpu, di.copy_bytes_per_s, 0.0), AK_OK);
    }
    ak_context_destroy(cpu);
    ak_context_destroy(gpu);
}


#else
AK_TEST(sparse_decode_no_cuda) { ak_test_skip("built without CUDA"); }
#endif
