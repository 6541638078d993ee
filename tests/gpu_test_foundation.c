/*
 * gpu_test_foundation.c -- the CUDA backend's foundation ops against the CPU backend, through the
 * public API: the same seeded random inputs go to a CPU context and to a CUDA context, and the
 * outputs are compared.
 *
 * What is tested
 *   - codecs (write for every layout, rule and input dtype; gather to bf16/f32/e4m3; MHA write and
 *     gather; every conversion of the matrix, whole pool and touched pages, V4 page split and
 *     merge, padded page strides): whole pools and outputs byte for byte. Unused cache bytes and
 *     outputs start poisoned (NaN / 0x7f pattern) on both sides, so a stray or missing write shows.
 *     Pools of 12.8k-44.8k tokens run the staged MLA codec's pipeline over several iterations.
 *   - invalid slots of every kind (-1, -7, INT32_MIN, capacity, capacity + 100, INT32_MAX) are
 *     skipped by the CUDA writers (the CPU run gets -1 there: it rejects the others) and give zero
 *     rows in gathers; invalid page ids in convert are skipped.
 *   - block table, CSR, top-k transforms (NONE, PAGED P = 1 / 64, RAGGED, with and without
 *     cu_seqlens_q), V4 SWA lists and the sparse-prefill combiner: byte for byte; CUDA-only
 *     truncation of a CSR list past its capacity.
 *   - merge_states (both bases, sinks, empty partials, bf16/f32, one case with several pairs per
 *     warp): within 2 ulp-scale tolerance,
 *     because exp/log of the CUDA math library and of libm may differ in the last bit.
 *   - capture of write + gather into a CUDA graph and two replays give the eager bytes.
 * AK_TEST_QUICK=1 shrinks every shape (compute-sanitizer runs). Exit 77 without a GPU.
 */
#include "ak_test.h"

#include <stdlib.h>
#include <string.h>

#ifdef AK_HAVE_CUDA
#include <cuda_runtime.h>

static ak_context *g_cpu, *g_gpu;
static int g_state; /* 0 unknown, 1 ready, -1 no device */
static int g_quick;

/* Both contexts, or a skip when no CUDA device is usable. */
static int gpu(void) {
    if (g_state == 0) {
        g_quick = getenv("AK_TEST_QUICK") != NULL && atoi(getenv("AK_TEST_QUICK")) != 0;
        ak_context_options o = {AK_BACKEND_CPU, 2, 0, NULL};
        ak_context_options g = {AK_BACKEND_CUDA, 0, 0, NULL};
        if (ak_context_create(&o, &g_cpu) != AK_OK) {
            g_state = -1;
        } else {
            ak_status s = ak_context_create(&g, &g_gpu);
            g_state = s == AK_OK ? 1 : -1;
        }
    }
    if (g_state < 0) ak_test_skip("no usable CUDA device (%s)", ak_last_error());
    return g_state > 0;
}

static const ak_device k_dev = {AK_DEVICE_CUDA, 0};

static void *dalloc(size_t bytes) {
    void *p = NULL;
    if (cudaMalloc(&p, bytes ? bytes : 16) != cudaSuccess) return NULL;
    return p;
}
static void up(void *d, const void *h, size_t n) { cudaMemcpy(d, h, n, cudaMemcpyHostToDevice); }
static void down(void *h, const void *d, size_t n) { cudaMemcpy(h, d, n, cudaMemcpyDeviceToHost); }
static void *dclone(const void *h, size_t n) {
    void *d = dalloc(n);
    if (d) up(d, h, n);
    return d;
}

/* Byte comparison with the first differing offset in the failure message. */
static int same_bytes(const char *what, const void *a, const void *b, size_t n) {
    const uint8_t *x = (const uint8_t *)a, *y = (const uint8_t *)b;
    for (size_t i = 0; i < n; i++) {
        if (x[i] != y[i]) {
            CHECK_MSG(0, "%s: byte %zu of %zu differs: cpu 0x%02x, cuda 0x%02x", what, i, n, x[i], y[i]);
            return 0;
        }
    }
    return 1;
}

static void fill_bytes(void *p, size_t n, uint8_t v) { memset(p, v, n); }

/* The layout's minimum page stride for this descriptor. */
static int64_t ak_cache_stride_min(const ak_cache *c) {
    int64_t b = 0;
    ak_cache d = *c;
    d.page_stride = 0;
    ak_cache_page_bytes(&d, &b);
    return b;
}

static const char *ak_layout_name_of(ak_layout l) {
    ak_layout_traits tr;
    return ak_layout_traits_get(l, &tr) == AK_OK ? tr.name : "?";
}

/* Random values with a per-64-dim tile magnitude: zero tiles, tiny (subnormal e4m3 range) and huge
   ones, so every scale branch (floors, clamps, saturation) is visited. */
static void random_rows(ak_rng *r, float *x, int64_t rows, int64_t w) {
    for (int64_t i = 0; i < rows; i++) {
        for (int64_t t = 0; t < w; t += 32) {
            double mag;
            switch (ak_rng_range(r, 0, 6)) {
            case 0: mag = 0.0; break;
            case 1: mag = 1e-7; break;
            case 2: mag = 3e-3; break;
            case 3: mag = 1e4; break;
            default: mag = 1.0; break;
            }
            for (int64_t d = t; d < t + 32 && d < w; d++) x[i * w + d] = (float)(ak_rng_normal(r) * mag);
        }
    }
}

static uint16_t to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

/* Distinct slots of the first `cap` slots, `holes` of them -1. */
static void random_slots(ak_rng *r, int32_t *s, int64_t n, int64_t cap) {
    int32_t *perm = (int32_t *)malloc((size_t)cap * 4);
    for (int64_t i = 0; i < cap; i++) perm[i] = (int32_t)i;
    for (int64_t i = cap - 1; i > 0; i--) {
        int64_t j = ak_rng_range(r, 0, i + 1);
        int32_t t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
    for (int64_t i = 0; i < n; i++) s[i] = i < cap ? perm[i] : -1;
    for (int64_t i = 0; i < n; i += 7) s[i] = -1;
    free(perm);
}

/* The invalid slot kinds of rule I1 the CUDA backend must skip. */
static int32_t invalid_slot(int64_t k, int64_t cap) {
    switch (k % 6) {
    case 0: return -1;
    case 1: return -7;
    case 2: return INT32_MIN;
    case 3: return (int32_t)cap;
    case 4: return (int32_t)(cap + 100);
    default: return INT32_MAX;
    }
}

/* A cache pair: the same descriptor over host memory (CPU) and device memory (CUDA). */
typedef struct pair {
    ak_cache h, d;
    int64_t bytes, vbytes;
} pair;

static void pair_make(pair *p, const ak_cache *desc, uint8_t fill) {
    p->h = *desc;
    ak_cache_bytes(desc, &p->bytes, &p->vbytes);
    p->h.data = malloc((size_t)p->bytes);
    p->h.v_data = p->vbytes ? malloc((size_t)p->vbytes) : NULL;
    fill_bytes(p->h.data, (size_t)p->bytes, fill);
    if (p->vbytes) fill_bytes(p->h.v_data, (size_t)p->vbytes, fill);
    p->d = p->h;
    p->d.device = k_dev;
    p->d.data = dclone(p->h.data, (size_t)p->bytes);
    p->d.v_data = p->vbytes ? dclone(p->h.v_data, (size_t)p->vbytes) : NULL;
}
static void pair_sync_to_device(pair *p) {
    up(p->d.data, p->h.data, (size_t)p->bytes);
    if (p->vbytes) up(p->d.v_data, p->h.v_data, (size_t)p->vbytes);
}
static int pair_same(const char *what, const pair *p) {
    uint8_t *g = (uint8_t *)malloc((size_t)p->bytes);
    down(g, p->d.data, (size_t)p->bytes);
    int ok = same_bytes(what, p->h.data, g, (size_t)p->bytes);
    free(g);
    if (p->vbytes) {
        g = (uint8_t *)malloc((size_t)p->vbytes);
        down(g, p->d.v_data, (size_t)p->vbytes);
        ok &= same_bytes(what, p->h.v_data, g, (size_t)p->vbytes);
        free(g);
    }
    return ok;
}
static void pair_free(pair *p) {
    free(p->h.data);
    free(p->h.v_data);
    cudaFree(p->d.data);
    cudaFree(p->d.v_data);
}

/* A tensor pair over one host buffer and a device copy. */
typedef struct tpair {
    ak_tensor h, d;
    size_t bytes;
} tpair;

static void tpair_make(tpair *t, void *host, ak_dtype dt, int32_t nd, const int64_t *shape) {
    t->h = ak_tensor_make(host, dt, nd, shape);
    t->bytes = (size_t)(ak_tensor_numel(&t->h) > 0 ? ak_tensor_numel(&t->h) : 0) * (size_t)ak_dtype_size(dt);
    t->d = ak_tensor_make_on(dclone(host, t->bytes), k_dev, dt, nd, shape);
}
static void tpair_free(tpair *t) { cudaFree(t->d.data); }

/* The quantization rule of pair_fill's writes. */
static ak_quant_rule g_fill_rule = AK_QUANT_DEFAULT;

/* Fills a cache pair with valid content: a CPU write of random rows at every slot, copied to the
   device. */
static void pair_fill(ak_rng *r, pair *p) {
    ak_layout_traits tr;
    ak_layout_traits_get(p->h.layout, &tr);
    int64_t cap = (int64_t)p->h.num_pages * p->h.page_size;
    int32_t *slots = (int32_t *)malloc((size_t)cap * 4);
    for (int64_t i = 0; i < cap; i++) slots[i] = (int32_t)i;
    int64_t ss[1] = {cap};
    ak_tensor st = ak_tensor_make(slots, AK_DTYPE_I32, 1, ss);
    if (p->h.layout == AK_LAYOUT_MHA_NHD || p->h.layout == AK_LAYOUT_MHA_HND) {
        int64_t kw = (int64_t)p->h.h_kv * p->h.head_dim, vw = (int64_t)p->h.h_kv * p->h.head_dim_v;
        float *k = (float *)malloc((size_t)(cap * kw) * 4), *v = (float *)malloc((size_t)(cap * vw) * 4);
        random_rows(r, k, cap, kw);
        random_rows(r, v, cap, vw);
        for (int64_t i = 0; i < cap * kw; i++) k[i] = k[i] > 400.f ? 400.f : k[i] < -400.f ? -400.f : k[i];
        for (int64_t i = 0; i < cap * vw; i++) v[i] = v[i] > 400.f ? 400.f : v[i] < -400.f ? -400.f : v[i];
        int64_t ks[3] = {cap, p->h.h_kv, p->h.head_dim}, vs[3] = {cap, p->h.h_kv, p->h.head_dim_v};
        ak_tensor kt = ak_tensor_make(k, AK_DTYPE_F32, 3, ks), vt = ak_tensor_make(v, AK_DTYPE_F32, 3, vs);
        CHECK_STATUS(ak_mha_cache_write(g_cpu, &p->h, &kt, &vt, &st), AK_OK);
        free(k);
        free(v);
    } else {
        int64_t w = tr.d_qk;
        float *x = (float *)malloc((size_t)(cap * w) * 4);
        random_rows(r, x, cap, w);
        int64_t ns[2] = {cap, tr.d_nope}, rs[2] = {cap, tr.d_rope};
        ak_tensor nt = ak_tensor_make(x, AK_DTYPE_F32, 2, ns), rt = ak_tensor_make(x + tr.d_nope, AK_DTYPE_F32, 2, rs);
        nt.strides[0] = w;
        rt.strides[0] = w;
        CHECK_STATUS(ak_cache_write(g_cpu, &p->h, &nt, tr.d_rope ? &rt : NULL, &st, g_fill_rule), AK_OK);
        free(x);
    }
    free(slots);
    pair_sync_to_device(p);
}

/* Set by cuda_quantizer_midpoints: write_case replaces its rows with midpoint_rows, and FP8-PT
   caches get k_scale g_pt_scale. */
static int g_midpoints;
static float g_pt_scale = 0.375f;

/* Rows whose quotients by their scale land within 12 ulp of an e4m3 rounding midpoint (normal and
   subnormal e4m3 ranges, both signs): where a quotient one ulp off would change the byte, so the
   CUDA quantizers' corrected reciprocal quotients (and their division fallback) are checked
   exactly where they could differ from the CPU backend's IEEE division. Each `tile` starts with its amax, which fixes the scale:
   s = amax / 448 (656 FP32 rule, indexer), or the per-tensor `pt_scale` when it is non-zero. */
static void midpoint_rows(ak_rng *r, float *x, int64_t n, int64_t stride, int64_t w, int64_t tile,
                          float pt_scale) {
    for (int64_t i = 0; i < n; i++) {
        for (int64_t t0 = 0; t0 < w; t0 += tile) {
            float s = pt_scale;
            int64_t d0 = t0;
            if (s == 0.0f) {
                float amax = (float)(ldexp(1.0 + ak_rng_uniform(r), (int)ak_rng_range(r, -8, 12)));
                x[i * stride + t0] = amax;
                s = amax / 448.0f;
                d0 = t0 + 1;
            }
            for (int64_t d = d0; d < t0 + tile && d < w; d++) {
                double mid;
                if (ak_rng_range(r, 0, 4) == 0) /* e4m3 subnormal midpoints (j + 1/2) 2^-9 */
                    mid = ldexp(ak_rng_range(r, 0, 8) + 0.5, -9);
                else /* normal midpoints (1 + (m + 1/2) / 8) 2^e, up to 432 */
                    mid = ldexp(1.0 + (ak_rng_range(r, 0, 8) + 0.5) / 8.0, (int)ak_rng_range(r, -6, 9));
                if (mid > 432.0) mid = 432.0;
                float v = (float)mid * s;
                uint32_t u;
                memcpy(&u, &v, 4);
                u += (uint32_t)(int32_t)ak_rng_range(r, -12, 13);
                memcpy(&v, &u, 4);
                x[i * stride + d] = ak_rng_range(r, 0, 2) ? v : -v;
            }
        }
    }
}

/* ---- codecs -------------------------------------------------------------------------------------- */

/* Pages of write_case's cache. */
static int32_t g_write_pages = 8;

static void write_case(ak_rng *r, ak_layout l, int32_t P, int64_t extra_stride, ak_quant_rule rule,
                       ak_dtype in_dt, int64_t n) {
    ak_cache c;
    CHECK_STATUS(ak_cache_init(&c, l, (void *)16, g_write_pages, P), AK_OK);
    c.page_stride = ak_cache_stride_min(&c) + extra_stride;
    if (l == AK_LAYOUT_MLA_FP8_PERTENSOR) c.k_scale = g_pt_scale;
    pair p;
    pair_make(&p, &c, 0x7f);
    /* on the device the scale comes through k_scale_ptr (graph-friendly), overriding the float */
    float *dscale = NULL;
    if (l == AK_LAYOUT_MLA_FP8_PERTENSOR) {
        dscale = (float *)dclone(&c.k_scale, 4);
        p.d.k_scale_ptr = dscale;
        p.d.k_scale = 7.0f;
    }
    ak_layout_traits tr;
    ak_layout_traits_get(l, &tr);
    int64_t cap = (int64_t)c.num_pages * P, w = tr.d_qk;
    float *x = (float *)malloc((size_t)(n * w) * 4);
    random_rows(r, x, n, w);
    if (l == AK_LAYOUT_MLA_FP8_PERTENSOR)
        for (int64_t i = 0; i < n * w; i++) x[i] = x[i] > 100.f ? 100.f : x[i] < -100.f ? -100.f : x[i];
    if (g_midpoints)
        midpoint_rows(r, x, n, w, l == AK_LAYOUT_DSA_FP8_BLOCKSCALE ? tr.d_nope : w, 128,
                      l == AK_LAYOUT_MLA_FP8_PERTENSOR ? c.k_scale : 0.0f);
    void *in = x;
    uint16_t *xb = NULL;
    if (in_dt == AK_DTYPE_BF16) {
        xb = (uint16_t *)malloc((size_t)(n * w) * 2);
        for (int64_t i = 0; i < n * w; i++) xb[i] = to_bf16(x[i]);
        in = xb;
    }
    int32_t *s_cpu = (int32_t *)malloc((size_t)n * 4), *s_gpu = (int32_t *)malloc((size_t)n * 4);
    random_slots(r, s_cpu, n, cap);
    for (int64_t i = 0; i < n; i++) s_gpu[i] = s_cpu[i] == -1 ? invalid_slot(i, cap) : s_cpu[i];
    int64_t rows_shape[2] = {n, w}, ss[1] = {n};
    tpair rows, sc, sg;
    tpair_make(&rows, in, in_dt, 2, rows_shape);
    tpair_make(&sc, s_cpu, AK_DTYPE_I32, 1, ss);
    tpair_make(&sg, s_gpu, AK_DTYPE_I32, 1, ss);
    /* nope and rope are views of one [n, d_qk] row */
    ak_tensor hn = rows.h, hr = rows.h, dn = rows.d, dr = rows.d;
    hn.shape[1] = dn.shape[1] = tr.d_nope;
    hr.shape[1] = dr.shape[1] = tr.d_rope;
    size_t es = (size_t)ak_dtype_size(in_dt);
    hr.data = (uint8_t *)rows.h.data + es * (size_t)tr.d_nope;
    dr.data = (uint8_t *)rows.d.data + es * (size_t)tr.d_nope;
    const int has_rope = tr.d_rope > 0;
    CHECK_STATUS(ak_cache_write(g_cpu, &p.h, &hn, has_rope ? &hr : NULL, &sc.h, rule), AK_OK);
    CHECK_STATUS(ak_cache_write(g_gpu, &p.d, &dn, has_rope ? &dr : NULL, &sg.d, rule), AK_OK);
    CHECK_STATUS(ak_context_synchronize(g_gpu), AK_OK);
    char what[160];
    snprintf(what, sizeof what, "write %s P=%d stride+%lld rule %d in %s n=%lld", tr.name, (int)P,
             (long long)extra_stride, (int)rule, ak_dtype_name(in_dt), (long long)n);
    pair_same(what, &p);
    tpair_free(&rows);
    tpair_free(&sc);
    tpair_free(&sg);
    free(x);
    free(xb);
    free(s_cpu);
    free(s_gpu);
    cudaFree(dscale);
    pair_free(&p);
}

AK_TEST(cuda_cache_write_every_layout) {
    if (!gpu()) return;
    ak_rng r;
    ak_rng_init(&r, ak_test_seed());
    int64_t n = g_quick ? 40 : 300;
    static const ak_dtype dts[2] = {AK_DTYPE_BF16, AK_DTYPE_F32};
    for (int di = 0; di < 2; di++) {
        ak_dtype dt = dts[di];
        write_case(&r, AK_LAYOUT_MLA_BF16, 64, 0, AK_QUANT_DEFAULT, dt, n);
        write_case(&r, AK_LAYOUT_MLA_BF16, 16, 1152, AK_QUANT_DEFAULT, dt, n);
        write_case(&r, AK_LAYOUT_MLA_FP8_PERTENSOR, 64, 0, AK_QUANT_DEFAULT, dt, n);
        write_case(&r, AK_LAYOUT_MLA_FP8_PERTENSOR, 1, 16, AK_QUANT_DEFAULT, dt, g_quick ? 6 : 8);
        write_case(&r, AK_LAYOUT_DSA_FP8_BLOCKSCALE, 64, 0, AK_QUANT_DEFAULT, dt, n);
        write_case(&r, AK_LAYOUT_DSA_FP8_BLOCKSCALE, 64, 656, AK_QUANT_POW2, dt, n);
        write_case(&r, AK_LAYOUT_DSA_FP8_BLOCKSCALE, 16, 0, AK_QUANT_FP32, dt, n);
        write_case(&r, AK_LAYOUT_DSV4_FP8_UE8M0, 64, 0, AK_QUANT_DEFAULT, dt, n);
        write_case(&r, AK_LAYOUT_DSV4_FP8_UE8M0, 256, 576, AK_QUANT_POW2_AMAX_FLOOR, dt, n);
        write_case(&r, AK_LAYOUT_DSV4_FP8_UE8M0, 2, 0, AK_QUANT_POW2, dt, 16);
        write_case(&r, AK_LAYOUT_INDEXER_FP8, 64, 0, AK_QUANT_DEFAULT, dt, n);
        write_case(&r, AK_LAYOUT_INDEXER_FP8, 64, 8, AK_QUANT_POW2, dt, n);
        write_case(&r, AK_LAYOUT_INDEXER_FP4, 64, 0, AK_QUANT_DEFAULT, dt, n);
    }
}

/* Enough tokens that every warp of the resident-grid indexer writer (3 blocks of 8 warps per SM,
   8 tokens a step) runs several steps, so the next step's loads overlap the current one. */
AK_TEST(cuda_cache_write_long) {
    if (!gpu()) return;
    ak_rng r;
    ak_rng_init(&r, ak_test_seed() + 10);
    g_write_pages = g_quick ? 600 : 1600; /* 64-token pages: 38k or 102k slots */
    const int64_t n = g_quick ? 36000 : 100000;
    write_case(&r, AK_LAYOUT_INDEXER_FP8, 64, 0, AK_QUANT_DEFAULT, AK_DTYPE_BF16, n);
    write_case(&r, AK_LAYOUT_INDEXER_FP8, 64, 16, AK_QUANT_POW2, AK_DTYPE_BF16, n);
    write_case(&r, AK_LAYOUT_DSA_FP8_BLOCKSCALE, 64, 0, AK_QUANT_DEFAULT, AK_DTYPE_BF16, n);
    g_write_pages = 8;
}

/* The quantizers with a non-power-of-two scale on inputs at e4m3 rounding midpoints: bytes equal
   to the CPU backend's (its IEEE division) at every one. */
AK_TEST(cuda_quantizer_midpoints) {
    if (!gpu()) return;
    ak_rng r;
    ak_rng_init(&r, ak_test_seed() + 9);
    int64_t n = g_quick ? 40 : 500;
    g_midpoints = 1;
    /* the three divisor kinds: reciprocal + correction, power of two, plain division (s < 2^-89) */
    static const float pt[3] = {0.0179f, 0.25f, 3e-30f};
    for (int i = 0; i < 3; i++) {
        g_pt_scale = pt[i];
        write_case(&r, AK_LAYOUT_MLA_FP8_PERTENSOR, 64, 0, AK_QUANT_DEFAULT, AK_DTYPE_F32, n);
    }
    g_pt_scale = 0.375f;
    write_case(&r, AK_LAYOUT_DSA_FP8_BLOCKSCALE, 64, 0, AK_QUANT_FP32, AK_DTYPE_F32, n);
    write_case(&r, AK_LAYOUT_INDEXER_FP8, 64, 0, AK_QUANT_DEFAULT, AK_DTYPE_F32, n);
    g_midpoints = 0;
}

/* Per-tensor fp8 quantization of every finite bf16 value by the write (bf16 rows) and convert
   (MLA_BF16 cache) kernels. At k_scale 0.0179 the kernels multiply by RN(1 / s), which encodes every
   bf16 value as the quotient does at that scale (ak_e4m3_recip_exact); at 0x1.73b13ap-9 two bf16
   values encode differently, so the kernels must keep the corrected quotient (test_numeric checks
   both facts on the host). Bytes equal to the CPU backend's IEEE division at every value. */
AK_TEST(cuda_pertensor_every_bf16) {
    if (!gpu()) return;
    const int32_t P = 64, np = 2; /* 128 tokens of 576 values: every pattern at least once */
    const int64_t n = (int64_t)P * np, w = 576;
    uint16_t *x = (uint16_t *)malloc((size_t)(n * w) * 2);
    for (int64_t k = 0; k < n * w; k++) {
        const uint16_t u = (uint16_t)(k & 0xffff);
        x[k] = (u & 0x7f80u) == 0x7f80u ? (uint16_t)(u & 0x807fu) : u; /* inf / NaN -> finite */
    }
    int32_t *slots = (int32_t *)malloc((size_t)n * 4);
    for (int64_t i = 0; i < n; i++) slots[i] = (int32_t)(n - 1 - i);
    const float scales[2] = {0.0179f, 0x1.73b13ap-9f};
    for (int si = 0; si < 2; si++) {
        /* convert: an MLA_BF16 cache whose records are the rows */
        ak_cache sd, dd;
        CHECK_STATUS(ak_cache_init(&sd, AK_LAYOUT_MLA_BF16, (void *)16, np, P), AK_OK);
        CHECK_STATUS(ak_cache_init(&dd, AK_LAYOUT_MLA_FP8_PERTENSOR, (void *)16, np, P), AK_OK);
        dd.k_scale = scales[si];
        pair s, d;
        pair_make(&s, &sd, 0);
        memcpy(s.h.data, x, (size_t)(n * w) * 2);
        pair_sync_to_device(&s);
        pair_make(&d, &dd, 0x7f);
        CHECK_STATUS(ak_cache_convert(g_cpu, &s.h, &d.h, NULL, AK_QUANT_DEFAULT), AK_OK);
        CHECK_STATUS(ak_cache_convert(g_gpu, &s.d, &d.d, NULL, AK_QUANT_DEFAULT), AK_OK);
        char what[120];
        snprintf(what, sizeof what, "convert MLA_BF16 -> FP8-PT, every bf16 value, k_scale %a", (double)scales[si]);
        pair_same(what, &d);
        pair_free(&s);
        pair_free(&d);
        /* write: the same values as bf16 rows, the scale through k_scale_ptr on the device */
        pair_make(&d, &dd, 0x7f);
        float *dscale = (float *)dclone(&dd.k_scale, 4);
        d.d.k_scale_ptr = dscale;
        d.d.k_scale = 7.0f;
        int64_t rs_[2] = {n, w}, ss[1] = {n};
        tpair rows, sl;
        tpair_make(&rows, x, AK_DTYPE_BF16, 2, rs_);
        tpair_make(&sl, slots, AK_DTYPE_I32, 1, ss);
        ak_tensor hn = rows.h, hr = rows.h, dn = rows.d, dr = rows.d;
        hn.shape[1] = dn.shape[1] = 512;
        hr.shape[1] = dr.shape[1] = 64;
        hr.data = (uint16_t *)rows.h.data + 512;
        dr.data = (uint16_t *)rows.d.data + 512;
        CHECK_STATUS(ak_cache_write(g_cpu, &d.h, &hn, &hr, &sl.h, AK_QUANT_DEFAULT), AK_OK);
        CHECK_STATUS(ak_cache_write(g_gpu, &d.d, &dn, &dr, &sl.d, AK_QUANT_DEFAULT), AK_OK);
        CHECK_STATUS(ak_context_synchronize(g_gpu), AK_OK);
        snprintf(what, sizeof what, "write bf16 rows -> FP8-PT, every bf16 value, k_scale %a", (double)scales[si]);
        pair_same(what, &d);
        tpair_free(&rows);
        tpair_free(&sl);
        cudaFree(dscale);
        pair_free(&d);
    }
    free(x);
    free(slots);
}

static void gather_case(ak_rng *r, ak_layout l, int32_t P, int64_t extra_stride, ak_dtype out_dt,
                        int64_t n) {
    ak_cache c;
    CHECK_STATUS(ak_cache_init(&c, l, (void *)16, 6, P), AK_OK);
    c.page_stride = ak_cache_stride_min(&c) + extra_stride;
    if (l == AK_LAYOUT_MLA_FP8_PERTENSOR) c.k_scale = g_pt_scale;
    pair p;
    pair_make(&p, &c, 0x7f);
    pair_fill(r, &p);
    ak_layout_traits tr;
    ak_layout_traits_get(l, &tr);
    int64_t cap = (int64_t)c.num_pages * P, w = tr.d_qk;
    int32_t *s = (int32_t *)malloc((size_t)n * 4);
    for (int64_t i = 0; i < n; i++)
        s[i] = ak_rng_range(r, 0, 5) == 0 ? invalid_slot(i, cap) : (int32_t)ak_rng_range(r, 0, cap);
    /* padded output rows (stride w + 8) check that the row stride is honoured */
    int64_t os = w + 8, es = ak_dtype_size(out_dt);
    size_t ob = (size_t)(n * os * es);
    uint8_t *oc = (uint8_t *)malloc(ob), *og = (uint8_t *)malloc(ob);
    ak_poison(oc, ob, out_dt);
    int64_t ss[1] = {n}, osh[2] = {n, os};
    tpair st, outp;
    tpair_make(&st, s, AK_DTYPE_I32, 1, ss);
    tpair_make(&outp, oc, out_dt, 2, osh); /* the whole padded buffer, viewed as [n, w] */
    outp.h.shape[1] = outp.d.shape[1] = w;
    float *scale_c = NULL;
    tpair sp;
    int raw = out_dt == AK_DTYPE_E4M3;
    if (raw) {
        scale_c = (float *)malloc((size_t)n * 4);
        ak_poison(scale_c, (size_t)n * 4, AK_DTYPE_F32);
        tpair_make(&sp, scale_c, AK_DTYPE_F32, 1, ss);
    }
    CHECK_STATUS(ak_cache_gather(g_cpu, &p.h, &st.h, &outp.h, raw ? &sp.h : NULL), AK_OK);
    CHECK_STATUS(ak_cache_gather(g_gpu, &p.d, &st.d, &outp.d, raw ? &sp.d : NULL), AK_OK);
    down(og, outp.d.data, ob);
    char what[160];
    snprintf(what, sizeof what, "gather %s P=%d stride+%lld out %s n=%lld", tr.name, (int)P,
             (long long)extra_stride, ak_dtype_name(out_dt), (long long)n);
    same_bytes(what, oc, og, ob);
    if (raw) {
        float *g = (float *)malloc((size_t)n * 4);
        down(g, sp.d.data, (size_t)n * 4);
        same_bytes("gather INDEXER_FP8 out_scale", scale_c, g, (size_t)n * 4);
        free(g);
        tpair_free(&sp);
        free(scale_c);
    }
    tpair_free(&st);
    tpair_free(&outp);
    free(s);
    free(oc);
    free(og);
    pair_free(&p);
}

AK_TEST(cuda_cache_gather_every_layout) {
    if (!gpu()) return;
    ak_rng r;
    ak_rng_init(&r, ak_test_seed() + 1);
    int64_t n = g_quick ? 50 : 400;
    static const ak_dtype dts[2] = {AK_DTYPE_BF16, AK_DTYPE_F32};
    for (int di = 0; di < 2; di++) {
        gather_case(&r, AK_LAYOUT_MLA_BF16, 64, 0, dts[di], n);
        gather_case(&r, AK_LAYOUT_MLA_FP8_PERTENSOR, 16, 576, dts[di], n);
        gather_case(&r, AK_LAYOUT_DSA_FP8_BLOCKSCALE, 64, 656, dts[di], n);
        gather_case(&r, AK_LAYOUT_DSV4_FP8_UE8M0, 64, 0, dts[di], n);
        gather_case(&r, AK_LAYOUT_DSV4_FP8_UE8M0, 2, 0, dts[di], 16);
        gather_case(&r, AK_LAYOUT_INDEXER_FP8, 64, 0, dts[di], n);
        gather_case(&r, AK_LAYOUT_INDEXER_FP4, 64, 0, dts[di], n);
    }
    gather_case(&r, AK_LAYOUT_INDEXER_FP8, 64, 4, AK_DTYPE_E4M3, n);
}

static void mha_case(ak_rng *r, ak_layout l, ak_dtype elem, int32_t P, int32_t h, int32_t dk,
                     int32_t dv, ak_dtype in_dt, int64_t n) {
    ak_cache c;
    CHECK_STATUS(ak_cache_init_mha(&c, l, elem, (void *)16, (void *)16, 5, P, h, dk, dv), AK_OK);
    if (elem == AK_DTYPE_E4M3) {
        c.k_scale = 0.5f;
        c.v_scale = 0.1875f;
    }
    pair p;
    pair_make(&p, &c, 0x7f);
    float *dvs = NULL;
    if (elem == AK_DTYPE_E4M3) { /* the V scale through a device pointer on the CUDA side */
        dvs = (float *)dclone(&c.v_scale, 4);
        p.d.v_scale_ptr = dvs;
        p.d.v_scale = 3.0f;
    }
    int64_t cap = (int64_t)c.num_pages * P;
    float *k = (float *)malloc((size_t)(n * h * dk) * 4), *v = (float *)malloc((size_t)(n * h * dv) * 4);
    random_rows(r, k, n, (int64_t)h * dk);
    random_rows(r, v, n, (int64_t)h * dv);
    for (int64_t i = 0; i < n * h * dk; i++) k[i] = k[i] > 100.f ? 100.f : k[i] < -100.f ? -100.f : k[i];
    for (int64_t i = 0; i < n * h * dv; i++) v[i] = v[i] > 50.f ? 50.f : v[i] < -50.f ? -50.f : v[i];
    void *kin = k, *vin = v;
    uint16_t *kb = NULL, *vb = NULL;
    if (in_dt != AK_DTYPE_F32) {
        kb = (uint16_t *)malloc((size_t)(n * h * dk) * 2);
        vb = (uint16_t *)malloc((size_t)(n * h * dv) * 2);
        for (int64_t i = 0; i < n * h * dk; i++) kb[i] = to_bf16(k[i]);
        for (int64_t i = 0; i < n * h * dv; i++) vb[i] = to_bf16(v[i]);
        kin = kb;
        vin = vb;
    }
    int32_t *s_cpu = (int32_t *)malloc((size_t)n * 4), *s_gpu = (int32_t *)malloc((size_t)n * 4);
    random_slots(r, s_cpu, n, cap);
    for (int64_t i = 0; i < n; i++) s_gpu[i] = s_cpu[i] == -1 ? invalid_slot(i, cap) : s_cpu[i];
    int64_t ks[3] = {n, h, dk}, vs[3] = {n, h, dv}, ss[1] = {n};
    tpair kt, vt, sc, sg;
    tpair_make(&kt, kin, in_dt, 3, ks);
    tpair_make(&vt, vin, in_dt, 3, vs);
    tpair_make(&sc, s_cpu, AK_DTYPE_I32, 1, ss);
    tpair_make(&sg, s_gpu, AK_DTYPE_I32, 1, ss);
    CHECK_STATUS(ak_mha_cache_write(g_cpu, &p.h, &kt.h, &vt.h, &sc.h), AK_OK);
    CHECK_STATUS(ak_mha_cache_write(g_gpu, &p.d, &kt.d, &vt.d, &sg.d), AK_OK);
    char what[160];
    snprintf(what, sizeof what, "mha write %s %s P=%d h=%d d=%d/%d in %s", ak_layout_name_of(l),
             ak_dtype_name(elem), (int)P, (int)h, (int)dk, (int)dv, ak_dtype_name(in_dt));
    pair_same(what, &p);
    /* gather both pools back (f32), invalid slots included */
    size_t kob = (size_t)(n * h * dk) * 4, vob = (size_t)(n * h * dv) * 4;
    float *koc = (float *)malloc(kob), *voc = (float *)malloc(vob), *kog = (float *)malloc(kob),
          *vog = (float *)malloc(vob);
    ak_poison(koc, kob, AK_DTYPE_F32);
    ak_poison(voc, vob, AK_DTYPE_F32);
    tpair ko, vo;
    tpair_make(&ko, koc, AK_DTYPE_F32, 3, ks);
    tpair_make(&vo, voc, AK_DTYPE_F32, 3, vs);
    for (int64_t i = 0; i < n; i++) s_cpu[i] = s_gpu[i];
    up(sc.d.data, s_cpu, (size_t)n * 4);
    CHECK_STATUS(ak_mha_cache_gather(g_cpu, &p.h, &sc.h, &ko.h, &vo.h), AK_OK);
    CHECK_STATUS(ak_mha_cache_gather(g_gpu, &p.d, &sc.d, &ko.d, &vo.d), AK_OK);
    down(kog, ko.d.data, kob);
    down(vog, vo.d.data, vob);
    same_bytes("mha gather k", koc, kog, kob);
    same_bytes("mha gather v", voc, vog, vob);
    tpair_free(&kt);
    tpair_free(&vt);
    tpair_free(&sc);
    tpair_free(&sg);
    tpair_free(&ko);
    tpair_free(&vo);
    free(k);
    free(v);
    free(kb);
    free(vb);
    free(s_cpu);
    free(s_gpu);
    free(koc);
    free(voc);
    free(kog);
    free(vog);
    cudaFree(dvs);
    pair_free(&p);
}

AK_TEST(cuda_mha_write_gather) {
    if (!gpu()) return;
    ak_rng r;
    ak_rng_init(&r, ak_test_seed() + 2);
    int64_t n = g_quick ? 20 : 120;
    mha_case(&r, AK_LAYOUT_MHA_NHD, AK_DTYPE_BF16, 16, 4, 128, 128, AK_DTYPE_F32, n);
    mha_case(&r, AK_LAYOUT_MHA_HND, AK_DTYPE_F16, 16, 2, 192, 128, AK_DTYPE_BF16, n);
    mha_case(&r, AK_LAYOUT_MHA_NHD, AK_DTYPE_E4M3, 32, 8, 64, 64, AK_DTYPE_BF16, n);
    mha_case(&r, AK_LAYOUT_MHA_HND, AK_DTYPE_E4M3, 8, 3, 100, 36, AK_DTYPE_F32, n);
}

/* Converts src (filled with valid content) into a poisoned dst on both backends. */
static void convert_case(ak_rng *r, const ak_cache *src, const ak_cache *dst, int use_pages,
                         ak_quant_rule rule) {
    pair s, d;
    pair_make(&s, src, 0x7f);
    pair_fill(r, &s);
    pair_make(&d, dst, 0x7f);
    int64_t np = src->num_pages;
    int32_t *pages = (int32_t *)malloc((size_t)np * 4), *gpages = (int32_t *)malloc((size_t)np * 4);
    for (int64_t i = 0; i < np; i++) pages[i] = (int32_t)(np - 1 - i);
    for (int64_t i = 0; i < np; i += 3) pages[i] = -1;
    for (int64_t i = 0; i < np; i++) gpages[i] = pages[i] == -1 ? invalid_slot(i, np) : pages[i];
    int64_t ps[1] = {np};
    tpair pc, pg;
    tpair_make(&pc, pages, AK_DTYPE_I32, 1, ps);
    tpair_make(&pg, gpages, AK_DTYPE_I32, 1, ps);
    CHECK_STATUS(ak_cache_convert(g_cpu, &s.h, &d.h, use_pages ? &pc.h : NULL, rule), AK_OK);
    CHECK_STATUS(ak_cache_convert(g_gpu, &s.d, &d.d, use_pages ? &pg.d : NULL, rule), AK_OK);
    char what[200];
    snprintf(what, sizeof what, "convert %s P=%d -> %s P=%d %s rule %d", ak_layout_name_of(src->layout),
             (int)src->page_size, ak_layout_name_of(dst->layout), (int)dst->page_size,
             use_pages ? "pages" : "whole pool", (int)rule);
    pair_same(what, &d);
    tpair_free(&pc);
    tpair_free(&pg);
    free(pages);
    free(gpages);
    pair_free(&s);
    pair_free(&d);
}

static ak_cache mla(ak_layout l, int32_t pages, int32_t P, int64_t extra, float k_scale) {
    ak_cache c;
    ak_cache_init(&c, l, (void *)16, pages, P);
    c.page_stride = ak_cache_stride_min(&c) + extra;
    c.k_scale = k_scale;
    return c;
}

AK_TEST(cuda_cache_convert_matrix) {
    if (!gpu()) return;
    ak_rng r;
    ak_rng_init(&r, ak_test_seed() + 3);
    int np = g_quick ? 3 : 9;
    for (int up_ = 0; up_ < 2; up_++) {
        const ak_layout A = AK_LAYOUT_MLA_BF16, B = AK_LAYOUT_MLA_FP8_PERTENSOR,
                        C = AK_LAYOUT_DSA_FP8_BLOCKSCALE, V = AK_LAYOUT_DSV4_FP8_UE8M0;
        ak_cache s, d;
        s = mla(A, np, 64, 0, 0); d = mla(C, np, 64, 656, 0);
        convert_case(&r, &s, &d, up_, AK_QUANT_DEFAULT);
        convert_case(&r, &s, &d, up_, AK_QUANT_FP32);
        s = mla(C, np, 64, 0, 0); d = mla(A, np * 4, 16, 0, 0);
        convert_case(&r, &s, &d, up_, AK_QUANT_DEFAULT);
        s = mla(B, np, 64, 0, 0.25f); d = mla(C, np, 64, 0, 0);
        convert_case(&r, &s, &d, up_, AK_QUANT_DEFAULT);
        s = mla(B, np, 64, 0, 0.3f); d = mla(C, np, 64, 0, 0);
        convert_case(&r, &s, &d, up_, AK_QUANT_DEFAULT);
        s = mla(A, np, 64, 0, 0); d = mla(B, np, 64, 0, 0.5f);
        convert_case(&r, &s, &d, up_, AK_QUANT_DEFAULT);
        s = mla(B, np, 64, 0, 2.0f); d = mla(A, np, 64, 1152, 0);
        convert_case(&r, &s, &d, up_, AK_QUANT_DEFAULT);
        s = mla(C, np, 64, 0, 0); d = mla(B, np, 64, 0, 0.75f);
        convert_case(&r, &s, &d, up_, AK_QUANT_DEFAULT);
        s = mla(C, np, 64, 656, 0); d = mla(C, np * 4, 16, 0, 0); /* re-page and restride */
        convert_case(&r, &s, &d, up_, AK_QUANT_DEFAULT);
        /* AoS re-page by runs of gcd(P, P') tokens: growing, a gcd below both page sizes, a
           destination larger than the source */
        s = mla(A, np * 4, 16, 0, 0); d = mla(A, np, 64, 1152, 0);
        convert_case(&r, &s, &d, up_, AK_QUANT_DEFAULT);
        s = mla(B, np * 2, 24, 576, 0); d = mla(B, np * 2, 40, 0, 0);
        convert_case(&r, &s, &d, up_, AK_QUANT_DEFAULT);
        s = mla(C, np, 48, 0, 0); d = mla(C, np * 2, 36, 656, 0);
        convert_case(&r, &s, &d, up_, AK_QUANT_DEFAULT);
        s = mla(V, np, 256, 0, 0); d = mla(V, np * 4, 64, 0, 0); /* V4 page split */
        convert_case(&r, &s, &d, up_, AK_QUANT_DEFAULT);
        s = mla(V, np * 4, 64, 0, 0); d = mla(V, np, 256, 0, 0); /* and merge */
        convert_case(&r, &s, &d, up_, AK_QUANT_DEFAULT);
        s = mla(V, np, 64, 576, 0); d = mla(V, np, 64, 0, 0);
        convert_case(&r, &s, &d, up_, AK_QUANT_DEFAULT);
        s = mla(AK_LAYOUT_INDEXER_FP8, np, 64, 0, 0); d = mla(AK_LAYOUT_INDEXER_FP8, np, 64, 64, 0);
        convert_case(&r, &s, &d, up_, AK_QUANT_DEFAULT);
        s = mla(AK_LAYOUT_INDEXER_FP4, np, 64, 0, 0); d = mla(AK_LAYOUT_INDEXER_FP4, np, 64, 0, 0);
        convert_case(&r, &s, &d, up_, AK_QUANT_DEFAULT);
        /* MHA: layout permute and element type changes */
        ak_dtype el[4][2] = {{AK_DTYPE_BF16, AK_DTYPE_BF16}, {AK_DTYPE_BF16, AK_DTYPE_E4M3},
                             {AK_DTYPE_E4M3, AK_DTYPE_F16}, {AK_DTYPE_F16, AK_DTYPE_BF16}};
        for (int e = 0; e < 4; e++) {
            ak_cache_init_mha(&s, AK_LAYOUT_MHA_NHD, el[e][0], (void *)16, (void *)16, np, 16, 4, 128, 64);
            ak_cache_init_mha(&d, AK_LAYOUT_MHA_HND, el[e][1], (void *)16, (void *)16, np, 16, 4, 128, 64);
            if (el[e][0] == AK_DTYPE_E4M3) { s.k_scale = 0.5f; s.v_scale = 0.25f; }
            if (el[e][1] == AK_DTYPE_E4M3) { d.k_scale = 0.75f; d.v_scale = 0.125f; }
            d.page_stride = ak_cache_stride_min(&d) + 256;
            convert_case(&r, &s, &d, up_, AK_QUANT_DEFAULT);
        }
        /* odd geometry: rows of 6 or 3 pieces, 3 heads, pages of 24-48 pieces (a warp step
           spans several pages), same-type e4m3 copies */
        ak_dtype el2[3][2] = {{AK_DTYPE_E4M3, AK_DTYPE_BF16}, {AK_DTYPE_E4M3, AK_DTYPE_E4M3},
                              {AK_DTYPE_BF16, AK_DTYPE_E4M3}};
        for (int e = 0; e < 3; e++) {
            ak_cache_init_mha(&s, AK_LAYOUT_MHA_HND, el2[e][0], (void *)16, (void *)16, np * 5, 4, 3, 48, 16);
            ak_cache_init_mha(&d, AK_LAYOUT_MHA_NHD, el2[e][1], (void *)16, (void *)16, np * 5, 4, 3, 48, 16);
            if (el2[e][0] == AK_DTYPE_E4M3) { s.k_scale = 0.3f; s.v_scale = 2.0f; }
            if (el2[e][1] == AK_DTYPE_E4M3) { d.k_scale = 0.0179f; d.v_scale = 0.5f; }
            convert_case(&r, &s, &d, up_, AK_QUANT_DEFAULT);
        }
    }
}

/* 656 -> FP8-PT takes a byte-rescaling path when the tile scale and k_scale are powers of two
   with log2(s / k) in [-24, 15] and the tile holds no NaN byte, the fp32 path otherwise: k_scale
   1, 2^-12 and 2^10 put the random tiles' scales (2^-13 .. 2^6) on both sides of that window,
   0.75 and the unrounded (FP32 rule) source scales take the fp32 path. (A NaN byte also sends its
   tile to the fp32 path, but the CPU backend refuses to quantize a non-finite source.) */
AK_TEST(cuda_convert_656_to_pertensor_paths) {
    if (!gpu()) return;
    ak_rng r;
    ak_rng_init(&r, ak_test_seed() + 6);
    const int np = g_quick ? 3 : 12;
    const float ks[4] = {1.0f, 1.0f / 4096.0f, 1024.0f, 0.75f};
    for (int v = 0; v < 2; v++) {
        g_fill_rule = v == 1 ? AK_QUANT_FP32 : AK_QUANT_DEFAULT;
        for (int k = 0; k < 4; k++) {
            ak_cache s = mla(AK_LAYOUT_DSA_FP8_BLOCKSCALE, np, 64, 0, 0);
            ak_cache d = mla(AK_LAYOUT_MLA_FP8_PERTENSOR, np, 64, 0, ks[k]);
            convert_case(&r, &s, &d, k & 1, AK_QUANT_DEFAULT);
        }
    }
    g_fill_rule = AK_QUANT_DEFAULT;
}

/* Pools deep enough that every block of the staged MLA codec runs several iterations of its
   shared-memory pipeline (two 512-thread blocks per SM hold at most 32 tokens per stage each, so a
   sweep of the grid covers about 8k tokens); the small pools above stay within one iteration. */
AK_TEST(cuda_cache_convert_long_pipeline) {
    if (!gpu()) return;
    ak_rng r;
    ak_rng_init(&r, ak_test_seed() + 5);
    const int32_t np = g_quick ? 200 : 700; /* 64-token pages: 12.8k or 44.8k tokens */
    const ak_layout A = AK_LAYOUT_MLA_BF16, C = AK_LAYOUT_DSA_FP8_BLOCKSCALE,
                    V = AK_LAYOUT_DSV4_FP8_UE8M0;
    for (int up_ = 0; up_ < 2; up_++) {
        ak_cache s = mla(A, np, 64, 0, 0), d = mla(C, np, 64, 0, 0);
        convert_case(&r, &s, &d, up_, AK_QUANT_DEFAULT);
        s = mla(C, np, 64, 0, 0); d = mla(A, np, 64, 0, 0);
        convert_case(&r, &s, &d, up_, AK_QUANT_DEFAULT);
        s = mla(V, np, 64, 0, 0); d = mla(V, np / 4, 256, 0, 0); /* copy with the scale rows */
        convert_case(&r, &s, &d, up_, AK_QUANT_DEFAULT);
        s = mla(C, np, 64, 0, 0); d = mla(C, np / 4, 256, 656, 0); /* the bench's padded re-page */
        convert_case(&r, &s, &d, up_, AK_QUANT_DEFAULT);
    }
}

/* ---- page tables and transforms ------------------------------------------------------------------ */

/* Runs op on both contexts over tensors cloned from host buffers, compares the outputs. */
typedef struct ibuf {
    int32_t *h;      /* CPU side (also the input values) */
    tpair t;
} ibuf;

static void ibuf_in(ibuf *b, const int32_t *vals, int32_t nd, const int64_t *shape) {
    int64_t n = 1;
    for (int i = 0; i < nd; i++) n *= shape[i];
    b->h = (int32_t *)malloc((size_t)(n > 0 ? n : 1) * 4);
    memcpy(b->h, vals, (size_t)n * 4);
    tpair_make(&b->t, b->h, AK_DTYPE_I32, nd, shape);
}
static void ibuf_out(ibuf *b, int32_t nd, const int64_t *shape) {
    int64_t n = 1;
    for (int i = 0; i < nd; i++) n *= shape[i];
    b->h = (int32_t *)malloc((size_t)(n > 0 ? n : 1) * 4);
    for (int64_t i = 0; i < n; i++) b->h[i] = 0x7f7f7f7f;
    tpair_make(&b->t, b->h, AK_DTYPE_I32, nd, shape);
}
static int ibuf_same(const char *what, ibuf *b) {
    int32_t *g = (int32_t *)malloc(b->t.bytes ? b->t.bytes : 4);
    down(g, b->t.d.data, b->t.bytes);
    int ok = same_bytes(what, b->h, g, b->t.bytes);
    free(g);
    return ok;
}
static void ibuf_free(ibuf *b) {
    tpair_free(&b->t);
    free(b->h);
}

/* A token table whose requests own whole, page-aligned pages (what the CPU checks). */
static int32_t *make_r2t(ak_rng *r, int64_t rows, int64_t max_ctx, int32_t P) {
    int64_t pages_per_row = max_ctx / P;
    int64_t total = rows * pages_per_row;
    int32_t *perm = (int32_t *)malloc((size_t)total * 4);
    for (int64_t i = 0; i < total; i++) perm[i] = (int32_t)i;
    for (int64_t i = total - 1; i > 0; i--) {
        int64_t j = ak_rng_range(r, 0, i + 1);
        int32_t t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
    int32_t *t = (int32_t *)malloc((size_t)(rows * max_ctx) * 4);
    for (int64_t q = 0; q < rows; q++)
        for (int64_t p = 0; p < pages_per_row; p++)
            for (int32_t o = 0; o < P; o++)
                t[q * max_ctx + p * P + o] = perm[q * pages_per_row + p] * P + o;
    free(perm);
    return t;
}

AK_TEST(cuda_block_table_and_csr) {
    if (!gpu()) return;
    ak_rng r;
    ak_rng_init(&r, ak_test_seed() + 4);
    static const int32_t Ps[3] = {1, 16, 64};
    for (int pi = 0; pi < 3; pi++) {
        int32_t P = Ps[pi];
        /* 10240 positions: a page-1 request spans 3 CSR block chunks of 4096 entries */
        int64_t rows = 12, max_ctx = g_quick ? 256 : 10240, B = 9;
        int32_t *r2t = make_r2t(&r, rows, max_ctx, P);
        int32_t req[9], start[9], lens[9];
        for (int b = 0; b < B; b++) {
            req[b] = (int32_t)ak_rng_range(&r, 0, rows);
            start[b] = (int32_t)(ak_rng_range(&r, 0, 4) * P);
            lens[b] = b == 2 ? 0 : b == 5 ? -3 : (int32_t)ak_rng_range(&r, 1, max_ctx - start[b]);
        }
        int64_t rs[2] = {rows, max_ctx}, bs[1] = {B}, width = max_ctx / P + 3;
        ibuf tt, rq, st, sl;
        ibuf_in(&tt, r2t, 2, rs);
        ibuf_in(&rq, req, 1, bs);
        ibuf_in(&st, start, 1, bs);
        ibuf_in(&sl, lens, 1, bs);
        int64_t bts[2] = {B, width};
        ibuf bt;
        ibuf_out(&bt, 2, bts);
        CHECK_STATUS(ak_block_table_build(g_cpu, &tt.t.h, &rq.t.h, &st.t.h, &sl.t.h, P, &bt.t.h), AK_OK);
        CHECK_STATUS(ak_block_table_build(g_gpu, &tt.t.d, &rq.t.d, &st.t.d, &sl.t.d, P, &bt.t.d), AK_OK);
        ibuf_same("block_table", &bt);
        int64_t capn = 0;
        for (int b = 0; b < B; b++) capn += lens[b] > 0 ? (lens[b] + P - 1) / P : 0;
        int64_t ips[1] = {B + 1}, ixs[1] = {capn + 37};
        ibuf ip, ix, last;
        ibuf_out(&ip, 1, ips);
        ibuf_out(&ix, 1, ixs);
        ibuf_out(&last, 1, bs);
        CHECK_STATUS(ak_csr_build(g_cpu, &tt.t.h, &rq.t.h, &st.t.h, &sl.t.h, P, &ip.t.h, &ix.t.h, &last.t.h), AK_OK);
        CHECK_STATUS(ak_csr_build(g_gpu, &tt.t.d, &rq.t.d, &st.t.d, &sl.t.d, P, &ip.t.d, &ix.t.d, &last.t.d), AK_OK);
        ibuf_same("csr indptr", &ip);
        ibuf_same("csr indices", &ix);
        ibuf_same("csr last_page_len", &last);
        /* CUDA only: a list past its capacity is truncated, indptr clamped to the capacity */
        int64_t small[1] = {capn / 2};
        ibuf ix2;
        ibuf_out(&ix2, 1, small);
        CHECK_STATUS(ak_csr_build(g_gpu, &tt.t.d, NULL, &st.t.d, &sl.t.d, P, &ip.t.d, &ix2.t.d, NULL), AK_OK);
        int32_t *gi = (int32_t *)malloc((size_t)(B + 1) * 4);
        down(gi, ip.t.d.data, (size_t)(B + 1) * 4);
        CHECK(gi[B] == (int32_t)(capn / 2));
        for (int b = 0; b < B; b++) CHECK(gi[b] <= gi[b + 1]);
        free(gi);
        ibuf_free(&ix2);
        ibuf_free(&tt);
        ibuf_free(&rq);
        ibuf_free(&st);
        ibuf_free(&sl);
        ibuf_free(&bt);
        ibuf_free(&ip);
        ibuf_free(&ix);
        ibuf_free(&last);
        free(r2t);
    }
}

AK_TEST(cuda_topk_transforms) {
    if (!gpu()) return;
    ak_rng r;
    ak_rng_init(&r, ak_test_seed() + 5);
    /* k 2048: two column blocks of 1024 per row, 16-byte accesses; quick k 66 (k % 4 != 0): the
       scalar path */
    const int64_t B = 6, width = 40, k = g_quick ? 66 : 2048;
    int32_t cuq[7] = {0, 3, 3, 10, 11, 15, 18}, cuk[7] = {0, 100, 250, 250, 700, 900, 1000};
    int64_t rows = 21; /* rows past cu_q[B] must be all -1 */
    for (int P = 1; P <= 64; P += 63) {
        int32_t *table = (int32_t *)malloc((size_t)(B * width) * 4);
        for (int64_t i = 0; i < B * width; i++)
            table[i] = ak_rng_range(&r, 0, 8) == 0 ? -1 : (int32_t)ak_rng_range(&r, 0, 1 << 20);
        int32_t *idx = (int32_t *)malloc((size_t)(rows * k) * 4);
        for (int64_t i = 0; i < rows * k; i++)
            idx[i] = ak_rng_range(&r, 0, 10) == 0 ? invalid_slot(i, 0) : (int32_t)ak_rng_range(&r, 0, (int64_t)width * P + 50);
        int64_t ts[2] = {B, width}, is[2] = {rows, k}, cs[1] = {B + 1};
        ibuf tb, ix, cq, ck, out;
        ibuf_in(&tb, table, 2, ts);
        ibuf_in(&ix, idx, 2, is);
        ibuf_in(&cq, cuq, 1, cs);
        ibuf_in(&ck, cuk, 1, cs);
        ibuf_out(&out, 2, is);
        for (int kind = 0; kind < 3; kind++) {
            for (int withq = 0; withq < 2; withq++) {
                ak_transform th = {(ak_index_transform)kind, &tb.t.h, P, withq ? &cq.t.h : NULL, &ck.t.h};
                ak_transform td = {(ak_index_transform)kind, &tb.t.d, P, withq ? &cq.t.d : NULL, &ck.t.d};
                CHECK_STATUS(ak_topk_transform(g_cpu, &th, &ix.t.h, &out.t.h), AK_OK);
                CHECK_STATUS(ak_topk_transform(g_gpu, &td, &ix.t.d, &out.t.d), AK_OK);
                char what[80];
                snprintf(what, sizeof what, "transform kind %d P=%d cu_q %d", kind, P, withq);
                ibuf_same(what, &out);
            }
        }
        ibuf_free(&tb);
        ibuf_free(&ix);
        ibuf_free(&cq);
        ibuf_free(&ck);
        ibuf_free(&out);
        free(table);
        free(idx);
    }
}

AK_TEST(cuda_dsv4_index_lists) {
    if (!gpu()) return;
    ak_rng r;
    ak_rng_init(&r, ak_test_seed() + 6);
    const int64_t B = 5, width = 64;
    int32_t seq[5] = {1, 300, 0, 4000, 129}, cuq[6] = {0, 1, 9, 9, 41, 42};
    int32_t *table = (int32_t *)malloc((size_t)(B * width) * 4);
    for (int64_t i = 0; i < B * width; i++) table[i] = (int32_t)ak_rng_range(&r, -1, 5000);
    int64_t ts[2] = {B, width}, bs[1] = {B}, cs[1] = {B + 1};
    ibuf tb, sl, cq;
    ibuf_in(&tb, table, 2, ts);
    ibuf_in(&sl, seq, 1, bs);
    ibuf_in(&cq, cuq, 1, cs);
    /* seq 0 with one query row is a decode padding row (CPU accepts it for the SWA list only) */
    for (int withq = 0; withq < 2; withq++) {
        int64_t rows = withq ? 45 : B, is[2] = {rows, 128}, ls[1] = {rows};
        ibuf ind, len;
        ibuf_out(&ind, 2, is);
        ibuf_out(&len, 1, ls);
        int32_t seq2[5] = {1, 300, 8, 4000, 129};
        if (withq) up(sl.t.d.data, seq2, sizeof seq2), memcpy(sl.h, seq2, sizeof seq2);
        CHECK_STATUS(ak_dsv4_swa_indices(g_cpu, &sl.t.h, withq ? &cq.t.h : NULL, &tb.t.h, 256, 128, &ind.t.h, &len.t.h), AK_OK);
        CHECK_STATUS(ak_dsv4_swa_indices(g_gpu, &sl.t.d, withq ? &cq.t.d : NULL, &tb.t.d, 256, 128, &ind.t.d, &len.t.d), AK_OK);
        ibuf_same(withq ? "swa indices (cu_q)" : "swa indices", &ind);
        ibuf_same(withq ? "swa lengths (cu_q)" : "swa lengths", &len);
        ibuf_free(&ind);
        ibuf_free(&len);
    }
    /* combiner: global query_start_loc (cu starts at 7), C4 with raw top-k, C128 dense, SWA only */
    int32_t seq3[5] = {1, 300, 8, 4000, 129}, cug[6] = {7, 8, 16, 16, 48, 49};
    memcpy(sl.h, seq3, sizeof seq3);
    up(sl.t.d.data, seq3, sizeof seq3);
    memcpy(cq.h, cug, sizeof cug);
    up(cq.t.d.data, cug, sizeof cug);
    const int64_t T = 45, topk = 512;
    int32_t *raw = (int32_t *)malloc((size_t)(T * topk) * 4);
    for (int64_t i = 0; i < T * topk; i++)
        raw[i] = ak_rng_range(&r, 0, 20) == 0 ? -1 : (int32_t)ak_rng_range(&r, 0, 1100);
    int64_t rs[2] = {T, topk};
    ibuf rw;
    ibuf_in(&rw, raw, 2, rs);
    static const int32_t ratios[3] = {4, 128, 0};
    for (int ri = 0; ri < 3; ri++) {
        int32_t ratio = ratios[ri], c_max = ratio ? 4000 / ratio + 1 : 0;
        int32_t tk = ratio == 128 ? 32 : ratio == 0 ? 0 : (int32_t)topk;
        int64_t W = ((tk + 128 + 127) / 128) * 128, is[2] = {T, W}, ls[1] = {T}, os[1] = {B + 1};
        ibuf ind, len, off;
        ibuf_out(&ind, 2, is);
        ibuf_out(&len, 1, ls);
        ibuf_out(&off, 1, os);
        const ak_tensor *rh = ratio == 4 ? &rw.t.h : NULL, *rd = ratio == 4 ? &rw.t.d : NULL;
        CHECK_STATUS(ak_dsv4_combine_indices(g_cpu, rh, &sl.t.h, &cq.t.h, ratio, tk, c_max, 128, &ind.t.h, &len.t.h, &off.t.h), AK_OK);
        CHECK_STATUS(ak_dsv4_combine_indices(g_gpu, rd, &sl.t.d, &cq.t.d, ratio, tk, c_max, 128, &ind.t.d, &len.t.d, &off.t.d), AK_OK);
        char what[80];
        snprintf(what, sizeof what, "combine ratio %d indices", ratio);
        ibuf_same(what, &ind);
        ibuf_same("combine lengths", &len);
        ibuf_same("combine swa_offsets", &off);
        ibuf_free(&ind);
        ibuf_free(&len);
        ibuf_free(&off);
    }
    ibuf_free(&rw);
    ibuf_free(&tb);
    ibuf_free(&sl);
    ibuf_free(&cq);
    free(raw);
    free(table);
}

/* ---- merge ---------------------------------------------------------------------------------------- */

AK_TEST(cuda_merge_states) {
    if (!gpu()) return;
    ak_rng r;
    ak_rng_init(&r, ak_test_seed() + 7);
    const int64_t n = 5, h = 8, d = 200;
    for (int variant = 0; variant < 4; variant++) {
        /* variant 0: more (row, head) pairs than the grid has warps (16 blocks of 8 per SM), so
           each warp merges several pairs with the next one's loads in flight */
        const int64_t rows = g_quick ? 3 : variant == 0 ? 2400 : 17;
        ak_dtype dt = variant & 1 ? AK_DTYPE_BF16 : AK_DTYPE_F32;
        ak_lse_base ib = variant & 2 ? AK_LSE_BASE_2 : AK_LSE_BASE_E, ob = variant == 1 ? AK_LSE_BASE_2 : AK_LSE_BASE_E;
        size_t es = (size_t)ak_dtype_size(dt);
        float *o = (float *)malloc((size_t)(n * rows * h * d) * 4);
        for (int64_t i = 0; i < n * rows * h * d; i++) o[i] = (float)ak_rng_normal(&r);
        void *oin = o;
        uint16_t *ob16 = NULL;
        if (dt == AK_DTYPE_BF16) {
            ob16 = (uint16_t *)malloc((size_t)(n * rows * h * d) * 2);
            for (int64_t i = 0; i < n * rows * h * d; i++) ob16[i] = to_bf16(o[i]);
            oin = ob16;
        }
        float *l = (float *)malloc((size_t)(n * rows * h) * 4), sink[8];
        for (int64_t i = 0; i < n * rows * h; i++) {
            int64_t row = (i / h) % rows;
            l[i] = (float)(ak_rng_normal(&r) * 3.0);
            if (ak_rng_range(&r, 0, 6) == 0) l[i] = ak_rng_range(&r, 0, 2) ? INFINITY : -INFINITY;
            if (row == 1) l[i] = INFINITY; /* an all-empty row */
        }
        for (int i = 0; i < 8; i++) sink[i] = (float)ak_rng_normal(&r);
        int64_t os[4] = {n, rows, h, d}, ls[3] = {n, rows, h}, outs[3] = {rows, h, d}, lo[2] = {rows, h}, ss[1] = {h};
        tpair to, tl, ts, tout, tlse;
        tpair_make(&to, oin, dt, 4, os);
        tpair_make(&tl, l, AK_DTYPE_F32, 3, ls);
        tpair_make(&ts, sink, AK_DTYPE_F32, 1, ss);
        size_t outb = (size_t)(rows * h * d) * es;
        void *oc = malloc(outb), *og = malloc(outb);
        float *lc = (float *)malloc((size_t)(rows * h) * 4), *lg = (float *)malloc((size_t)(rows * h) * 4);
        ak_poison(oc, outb, dt);
        ak_poison(lc, (size_t)(rows * h) * 4, AK_DTYPE_F32);
        tpair_make(&tout, oc, dt, 3, outs);
        tpair_make(&tlse, lc, AK_DTYPE_F32, 2, lo);
        const int with_sink = variant >= 2;
        CHECK_STATUS(ak_merge_states(g_cpu, &to.h, &tl.h, ib, with_sink ? &ts.h : NULL, &tout.h, &tlse.h, ob), AK_OK);
        CHECK_STATUS(ak_merge_states(g_gpu, &to.d, &tl.d, ib, with_sink ? &ts.d : NULL, &tout.d, &tlse.d, ob), AK_OK);
        down(og, tout.d.data, outb);
        down(lg, tlse.d.data, (size_t)(rows * h) * 4);
        /* both reduce in the same partial order with fp64 lse: differences come only from the
           last-bit behaviour of exp/log in libm vs CUDA, a few fp32 ulps (bf16: one rounding) */
        ak_tol tol = {dt == AK_DTYPE_BF16 ? 8e-3 : 1e-5, dt == AK_DTYPE_BF16 ? 8e-3 : 1e-5, -1, -1};
        int64_t m = rows * h * d;
        float *gf = (float *)malloc((size_t)m * 4);
        double *ref = (double *)malloc((size_t)m * 8);
        for (int64_t i = 0; i < m; i++) {
            if (dt == AK_DTYPE_F32) {
                gf[i] = ((float *)og)[i];
                ref[i] = ((float *)oc)[i];
            } else {
                uint32_t a = (uint32_t)((uint16_t *)og)[i] << 16, b = (uint32_t)((uint16_t *)oc)[i] << 16;
                float fa, fb;
                memcpy(&fa, &a, 4);
                memcpy(&fb, &b, 4);
                gf[i] = fa;
                ref[i] = fb;
            }
        }
        ak_compare("merge out", gf, ref, m, tol);
        double *lref = (double *)malloc((size_t)(rows * h) * 8);
        for (int64_t i = 0; i < rows * h; i++) lref[i] = lc[i];
        ak_tol ltol = {1e-5, 1e-6, -1, -1};
        ak_compare("merge lse", lg, lref, rows * h, ltol);
        free(gf);
        free(ref);
        free(lref);
        tpair_free(&to);
        tpair_free(&tl);
        tpair_free(&ts);
        tpair_free(&tout);
        tpair_free(&tlse);
        free(o);
        free(ob16);
        free(l);
        free(oc);
        free(og);
        free(lc);
        free(lg);
    }
}

/* ---- graph capture --------------------------------------------------------------------------------- */

AK_TEST(cuda_write_gather_graph_capture) {
    if (!gpu()) return;
    ak_rng r;
    ak_rng_init(&r, ak_test_seed() + 8);
    ak_cache c = mla(AK_LAYOUT_DSA_FP8_BLOCKSCALE, 4, 64, 0, 0);
    pair p;
    pair_make(&p, &c, 0);
    const int64_t n = 100;
    float *x = (float *)malloc((size_t)(n * 576) * 4);
    random_rows(&r, x, n, 576);
    int32_t *s = (int32_t *)malloc((size_t)n * 4);
    random_slots(&r, s, n, 256);
    int64_t ns[2] = {n, 512}, rs[2] = {n, 64}, ss[1] = {n}, os[2] = {n, 576};
    tpair xt, st, out;
    int64_t full[2] = {n, 576};
    tpair_make(&xt, x, AK_DTYPE_F32, 2, full);
    tpair_make(&st, s, AK_DTYPE_I32, 1, ss);
    float *o = (float *)malloc((size_t)(n * 576) * 4);
    tpair_make(&out, o, AK_DTYPE_F32, 2, os);
    ak_tensor dn = xt.d, dr = xt.d;
    dn.shape[1] = ns[1];
    dr.shape[1] = rs[1];
    dr.data = (float *)xt.d.data + 512;
    /* eager reference */
    CHECK_STATUS(ak_cache_write(g_gpu, &p.d, &dn, &dr, &st.d, AK_QUANT_DEFAULT), AK_OK);
    CHECK_STATUS(ak_cache_gather(g_gpu, &p.d, &st.d, &out.d, NULL), AK_OK);
    float *eager = (float *)malloc((size_t)(n * 576) * 4), *replay = (float *)malloc((size_t)(n * 576) * 4);
    down(eager, out.d.data, (size_t)(n * 576) * 4);
    CHECK(cudaMemset(p.d.data, 0, (size_t)p.bytes) == cudaSuccess);
    CHECK(cudaMemset(out.d.data, 0, (size_t)(n * 576) * 4) == cudaSuccess);
    /* the clears ran on the legacy stream, which the non-blocking stream below does not wait for */
    CHECK(cudaDeviceSynchronize() == cudaSuccess);
    cudaStream_t stream;
    CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) == cudaSuccess);
    CHECK_STATUS(ak_context_set_stream(g_gpu, stream), AK_OK);
    cudaGraph_t graph = NULL;
    cudaGraphExec_t exec = NULL;
    CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal) == cudaSuccess);
    CHECK_STATUS(ak_cache_write(g_gpu, &p.d, &dn, &dr, &st.d, AK_QUANT_DEFAULT), AK_OK);
    CHECK_STATUS(ak_cache_gather(g_gpu, &p.d, &st.d, &out.d, NULL), AK_OK);
    CHECK(cudaStreamEndCapture(stream, &graph) == cudaSuccess);
    CHECK(cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess);
    for (int rep = 0; rep < 2; rep++) CHECK(cudaGraphLaunch(exec, stream) == cudaSuccess);
    CHECK(cudaStreamSynchronize(stream) == cudaSuccess);
    down(replay, out.d.data, (size_t)(n * 576) * 4);
    same_bytes("graph replay of write + gather", eager, replay, (size_t)(n * 576) * 4);
    CHECK_STATUS(ak_context_set_stream(g_gpu, NULL), AK_OK);
    if (exec) cudaGraphExecDestroy(exec);
    if (graph) cudaGraphDestroy(graph);
    cudaStreamDestroy(stream);
    tpair_free(&xt);
    tpair_free(&st);
    tpair_free(&out);
    free(x);
    free(s);
    free(o);
    free(eager);
    free(replay);
    pair_free(&p);
}

#else /* built without CUDA: every GPU test reports skipped */

AK_TEST(cuda_foundation) { ak_test_skip("attnkit was built without the CUDA backend"); }

#endif
