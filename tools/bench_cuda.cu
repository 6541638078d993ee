/* bench_cuda.cu -- CUDA side of `attnkit bench`: a non-default stream, the copy and bf16 GEMM
   ceilings measured in the same run, event timing and CUDA-graph replay timing. */
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include "bench_internal.h"
#include "common/internal.h"
#include "common/numeric.h"

#define BENCH_CU(call)                                                                           \
    do {                                                                                         \
        cudaError_t e_ = (call);                                                                 \
        if (e_ != cudaSuccess)                                                                   \
            return ak_fail(AK_ERR_CUDA, "bench: %s: %s", #call, cudaGetErrorString(e_));         \
    } while (0)

/* Random bf16 in [-1, 1) from a hash of the index: never zeros (zeros run faster on tensor cores). */
__global__ void bench_fill_bf16(uint16_t *p, size_t n, unsigned long long seed) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        unsigned long long z = (i + seed) * 0x9e3779b97f4a7c15ull;
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z ^= z >> 31;
        float u = (float)(z >> 40) * (1.0f / 16777216.0f) * 2.0f - 1.0f;
        p[i] = (uint16_t)(__float_as_uint(u) >> 16);
    }
}

/* Normal(0, sigma) clamped to +-clamp, as bf16: Box-Muller on two 24-bit fields of a hash of
   (index, seed). */
__global__ void bench_fill_normal_bf16(uint16_t *p, int64_t n, float sigma, float clamp,
                                       unsigned long long seed) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        unsigned long long z = (unsigned long long)i + seed * 0x632be59bd9b4e019ull;
        z *= 0x9e3779b97f4a7c15ull;
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        z ^= z >> 31;
        float u1 = ((float)(z >> 40) + 0.5f) * (1.0f / 16777216.0f);
        float u2 = (float)((z >> 16) & 0xffffffull) * (1.0f / 16777216.0f);
        float x = sigma * sqrtf(-2.0f * logf(u1)) * cospif(2.0f * u2);
        x = fminf(fmaxf(x, -clamp), clamp);
        p[i] = ak_f32_to_bf16(x);
    }
}

extern "C" ak_status ak_bench_cuda_fill_normal_bf16(ak_context *ctx, void *dst, int64_t n,
                                                    double sigma, double clamp, uint64_t seed) {
    if (n <= 0) return AK_OK;
    int64_t blocks = (n + 255) / 256;
    if (blocks > 8192) blocks = 8192;
    bench_fill_normal_bf16<<<(int)blocks, 256, 0, (cudaStream_t)ctx->stream>>>(
        (uint16_t *)dst, n, (float)sigma, (float)clamp, (unsigned long long)seed);
    BENCH_CU(cudaGetLastError());
    return AK_OK;
}

extern "C" ak_status ak_bench_cuda_setup(ak_context *ctx, void **stream) {
    cudaStream_t s;
    BENCH_CU(cudaSetDevice(ak_context_device(ctx).id));
    BENCH_CU(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    *stream = s;
    return ak_context_set_stream(ctx, s);
}

extern "C" void ak_bench_cuda_teardown(ak_context *ctx, void *stream) {
    ak_context_set_stream(ctx, NULL);
    cudaStreamDestroy((cudaStream_t)stream);
}

typedef struct copy_arg {
    void *dst;
    const void *src;
    size_t bytes;
    cudaStream_t s;
} copy_arg;
static void do_copy(void *p) {
    copy_arg *c = (copy_arg *)p;
    cudaMemcpyAsync(c->dst, c->src, c->bytes, cudaMemcpyDeviceToDevice, c->s);
}

typedef struct gemm_arg {
    cublasHandle_t h;
    const void *a, *b;
    void *c;
    int n;
} gemm_arg;
static void do_gemm(void *p) {
    gemm_arg *g = (gemm_arg *)p;
    float alpha = 1.0f, beta = 0.0f;
    cublasGemmEx(g->h, CUBLAS_OP_N, CUBLAS_OP_N, g->n, g->n, g->n, &alpha, g->a, CUDA_R_16BF, g->n,
                 g->b, CUDA_R_16BF, g->n, &beta, g->c, CUDA_R_16BF, g->n, CUBLAS_COMPUTE_32F,
                 CUBLAS_GEMM_DEFAULT);
}

/* The GPU's global nanosecond timer (%globaltimer). */
__device__ __forceinline__ unsigned long long bench_now_ns(void) {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

/* The SM clock right after a timed sample: one thread counts SM cycles between two ticks of
   %globaltimer 50 us apart and stores [cycles, ns] at out. Both ends wait for a tick (the timer
   advances in 32-64 ns steps), so the window's ns are exact. On an idle H100 it reads 1979-1981
   MHz (1980 stated; a 1 s window agrees with the host clock to 0.04%). These kernels hold an H100
   above its 700 W limit and its firmware lowers the clock within ~100 ms (session 40: to
   1740-1900 MHz), so a median time is read next to the clock it ran at. After some cases it reads
   up to ~6% above the stated maximum, which is not explained. */
__global__ void bench_sm_clock(unsigned long long *out) {
    const unsigned long long t = bench_now_ns();
    unsigned long long t0, t1;
    do t0 = bench_now_ns();
    while (t0 == t);
    const long long c0 = clock64();
    do t1 = bench_now_ns();
    while (t1 - t0 < 50000ull);
    out[0] = (unsigned long long)(clock64() - c0);
    out[1] = t1 - t0;
}

/* Median of n clock probes ([cycles, ns] pairs in device memory) in MHz. */
static ak_status sm_clock_median(const unsigned long long *dev, int n, double *mhz) {
    unsigned long long h[2 * 64];
    double f[64];
    if (n > 64) n = 64;
    BENCH_CU(cudaMemcpy(h, dev, sizeof(unsigned long long) * 2 * (size_t)n, cudaMemcpyDeviceToHost));
    for (int i = 0; i < n; i++) f[i] = h[2 * i + 1] ? 1e3 * (double)h[2 * i] / (double)h[2 * i + 1] : 0.0;
    double mn, rsd;
    ak_bench_stats(f, n, mhz, &mn, &rsd);
    return AK_OK;
}

/* Ends a timed sample that event a began: records b, probes the SM clock into clk[0..1], waits,
   and stores the elapsed time divided by calls into *t. */
static ak_status end_sample(cudaStream_t s, cudaEvent_t a, cudaEvent_t b, unsigned long long *clk, int calls,
                            double *t) {
    BENCH_CU(cudaEventRecord(b, s));
    bench_sm_clock<<<1, 1, 0, s>>>(clk);
    BENCH_CU(cudaGetLastError());
    BENCH_CU(cudaEventSynchronize(b));
    float ms;
    BENCH_CU(cudaEventElapsedTime(&ms, a, b));
    *t = ms * 1e-3 / calls;
    return AK_OK;
}

/* 20 samples of body(arg) after 3 warm-ups, each between events a and b with a clock probe after
   it (clk: [20][2]), into t. */
static ak_status ceiling_samples(cudaStream_t s, cudaEvent_t a, cudaEvent_t b, unsigned long long *clk,
                                 void (*body)(void *), void *arg, double *t) {
    for (int i = 0; i < 3; i++) body(arg);
    for (int i = 0; i < 20; i++) {
        BENCH_CU(cudaEventRecord(a, s));
        body(arg);
        AK_TRY(end_sample(s, a, b, clk + 2 * i, 1, &t[i]));
    }
    return AK_OK;
}

/* The two ceilings on resources the caller owns: copy src -> dst (bytes each, read + write
   counted) and a bf16 GEMM n^3 of random a, b into c through cuBLAS handle h; medians of 20. */
static ak_status ceilings_on(cudaStream_t s, cudaEvent_t e0, cudaEvent_t e1, unsigned long long *clk,
                             void *src, void *dst, size_t bytes, cublasHandle_t h, void *a, void *b, void *c,
                             int n, double *copy_Bps, double *gemm_flops, double *gemm_mhz) {
    double t[20], med, mn, rsd;
    bench_fill_bf16<<<1024, 256, 0, s>>>((uint16_t *)src, bytes / 2, 1);
    BENCH_CU(cudaGetLastError());
    copy_arg ca = {dst, src, bytes, s};
    AK_TRY(ceiling_samples(s, e0, e1, clk, do_copy, &ca, t));
    ak_bench_stats(t, 20, &med, &mn, &rsd);
    *copy_Bps = 2.0 * (double)bytes / med;

    const size_t mat = (size_t)n * n;
    bench_fill_bf16<<<1024, 256, 0, s>>>((uint16_t *)a, mat, 2);
    bench_fill_bf16<<<1024, 256, 0, s>>>((uint16_t *)b, mat, 3);
    BENCH_CU(cudaGetLastError());
    if (cublasSetStream(h, s) != CUBLAS_STATUS_SUCCESS) return ak_fail(AK_ERR_CUDA, "bench: cublasSetStream failed");
    gemm_arg ga = {h, a, b, c, n};
    AK_TRY(ceiling_samples(s, e0, e1, clk, do_gemm, &ga, t));
    BENCH_CU(cudaGetLastError());
    AK_TRY(sm_clock_median(clk, 20, gemm_mhz));
    ak_bench_stats(t, 20, &med, &mn, &rsd);
    *gemm_flops = 2.0 * (double)n * n * n / med;
    return AK_OK;
}

extern "C" ak_status ak_bench_cuda_ceilings(ak_context *ctx, int32_t quick, double *copy_Bps,
                                            double *gemm_flops, double *gemm_mhz) {
    /* copy: 4 GiB (quick 512 MiB) device to device; GEMM: 8192^3 (quick 4096^3) */
    const size_t bytes = quick ? ((size_t)512 << 20) : ((size_t)4 << 30);
    const int n = quick ? 4096 : 8192;
    const size_t mat = (size_t)n * n;
    void *src = NULL, *dst = NULL, *a = NULL, *b = NULL, *c = NULL;
    unsigned long long *clk = NULL; /* [20][2] clock probes */
    cudaEvent_t e0 = NULL, e1 = NULL;
    cublasHandle_t h = NULL;
    ak_status st = AK_OK;
    cudaError_t ce;
    if ((ce = cudaEventCreate(&e0)) != cudaSuccess || (ce = cudaEventCreate(&e1)) != cudaSuccess ||
        (ce = cudaMalloc(&src, bytes)) != cudaSuccess || (ce = cudaMalloc(&dst, bytes)) != cudaSuccess ||
        (ce = cudaMalloc(&a, mat * 2)) != cudaSuccess || (ce = cudaMalloc(&b, mat * 2)) != cudaSuccess ||
        (ce = cudaMalloc(&c, mat * 2)) != cudaSuccess ||
        (ce = cudaMalloc(&clk, sizeof(unsigned long long) * 2 * 20)) != cudaSuccess)
        st = ak_fail(AK_ERR_CUDA, "bench: ceiling buffers: %s", cudaGetErrorString(ce));
    if (st == AK_OK && cublasCreate(&h) != CUBLAS_STATUS_SUCCESS) {
        h = NULL;
        st = ak_fail(AK_ERR_CUDA, "bench: cublasCreate failed");
    }
    if (st == AK_OK)
        st = ceilings_on((cudaStream_t)ctx->stream, e0, e1, clk, src, dst, bytes, h, a, b, c, n, copy_Bps,
                         gemm_flops, gemm_mhz);
    if (h != NULL) cublasDestroy(h);
    if (e0 != NULL) cudaEventDestroy(e0);
    if (e1 != NULL) cudaEventDestroy(e1);
    cudaFree(src);
    cudaFree(dst);
    cudaFree(a);
    cudaFree(b);
    cudaFree(c);
    cudaFree(clk);
    return st;
}

#define GRAPH_CALLS 20

/* Holds the stream for ns nanoseconds. Event-timed calls are queued behind it, so the interval
   between their events covers the GPU work of the call and not the host's time to validate and
   launch it (nvbench's "blocking kernel" does the same): without it a 30 us codec call measured
   several microseconds of host enqueue. A call whose enqueue outlasts the hold is measured with
   the excess, never less. */
#define HOLD_NS 100000ull
__global__ void bench_hold(unsigned long long ns) {
    const unsigned long long t0 = bench_now_ns();
    do __nanosleep(2000);
    while (bench_now_ns() - t0 < ns);
}

/* reps replays of the graph ge after three warm-ups: each one's time per call into t[*n], then a
   clock probe into clk. */
static ak_status replay_samples(cudaStream_t s, cudaGraphExec_t ge, int reps, cudaEvent_t a,
                                cudaEvent_t b, unsigned long long *clk, double *t, int *n) {
    for (int w = 0; w < 3; w++) BENCH_CU(cudaGraphLaunch(ge, s));
    for (*n = 0; *n < reps; (*n)++) {
        BENCH_CU(cudaEventRecord(a, s));
        BENCH_CU(cudaGraphLaunch(ge, s));
        AK_TRY(end_sample(s, a, b, clk + 2 * *n, GRAPH_CALLS, &t[*n]));
    }
    BENCH_CU(cudaStreamSynchronize(s));
    return AK_OK;
}

/* The timed samples of one case into t[0..*n) and, after each, a clock probe into clk. The GPU
   idles cool_ms first (targets.md 6.2: the anchors' harness cools down 0.3 s between cases), so
   that a case does not start at the clock a power-capped predecessor left. */
static ak_status time_samples(ak_context *ctx, ak_bench_case *c, int32_t quick, int32_t cool_ms,
                              cudaEvent_t a, cudaEvent_t b, unsigned long long *clk, double *t, int *n) {
    cudaStream_t s = (cudaStream_t)ctx->stream;
    /* the case's uploads ran on the legacy stream, which the non-blocking s does not wait for */
    BENCH_CU(cudaDeviceSynchronize());
    if (cool_ms > 0) ak_bench_sleep_ms(cool_ms);
    for (int w = 0; w < 5; w++) AK_TRY(c->run(ctx, c->state));
    BENCH_CU(cudaStreamSynchronize(s));
    if (!c->graph) {
        int reps = quick ? 10 : 30;
        for (*n = 0; *n < reps; (*n)++) {
            bench_hold<<<1, 1, 0, s>>>(HOLD_NS);
            BENCH_CU(cudaGetLastError());
            BENCH_CU(cudaEventRecord(a, s));
            AK_TRY(c->run(ctx, c->state));
            AK_TRY(end_sample(s, a, b, clk + 2 * *n, 1, &t[*n]));
        }
        BENCH_CU(cudaStreamSynchronize(s));
        return AK_OK;
    }
    /* targets.md 5.0: capture 20 back-to-back calls, replay, divide by 20 */
    cudaGraph_t g = NULL;
    cudaGraphExec_t ge = NULL;
    BENCH_CU(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    ak_status st = AK_OK;
    for (int i = 0; i < GRAPH_CALLS && st == AK_OK; i++) st = c->run(ctx, c->state);
    cudaError_t ce = cudaStreamEndCapture(s, &g);
    if (st == AK_OK && ce != cudaSuccess)
        st = ak_fail(AK_ERR_CUDA, "bench: %s: capture failed: %s", c->op, cudaGetErrorString(ce));
    if (st == AK_OK && (ce = cudaGraphInstantiate(&ge, g, 0)) != cudaSuccess)
        st = ak_fail(AK_ERR_CUDA, "bench: %s: cudaGraphInstantiate: %s", c->op, cudaGetErrorString(ce));
    if (st == AK_OK) st = replay_samples(s, ge, quick ? 10 : 50, a, b, clk, t, n);
    if (ge != NULL) cudaGraphExecDestroy(ge);
    if (g != NULL) cudaGraphDestroy(g);
    return st;
}

extern "C" ak_status ak_bench_cuda_time(ak_context *ctx, ak_bench_case *c, int32_t quick, int32_t cool_ms,
                                        ak_bench_cuda_result *r) {
    cudaEvent_t a = NULL, b = NULL;
    unsigned long long *clk = NULL; /* [50][2] clock probes, one after each sample */
    double t[50];
    int n = 0;
    ak_status st = AK_OK;
    cudaError_t ce;
    memset(r, 0, sizeof *r);
    if ((ce = cudaEventCreate(&a)) != cudaSuccess || (ce = cudaEventCreate(&b)) != cudaSuccess ||
        (ce = cudaMalloc(&clk, sizeof(unsigned long long) * 2 * 50)) != cudaSuccess)
        st = ak_fail(AK_ERR_CUDA, "bench: %s: events and clock probes: %s", c->op, cudaGetErrorString(ce));
    if (st == AK_OK) st = time_samples(ctx, c, quick, cool_ms, a, b, clk, t, &n);
    if (st == AK_OK) st = sm_clock_median(clk, n, &r->sm_mhz);
    if (a != NULL) cudaEventDestroy(a);
    if (b != NULL) cudaEventDestroy(b);
    if (clk != NULL) cudaFree(clk);
    AK_TRY(st);
    ak_bench_stats(t, n, &r->median_s, &r->min_s, &r->rsd);
    r->samples = n;
    return AK_OK;
}

/* The enforced power limit of CUDA device dev from NVML, in W; < 0 where unknown. NVML ships with
   the driver, not the toolkit's build, so it is loaded at run time and nothing links against it.
   Per-case power and clock event reasons were read too in session 70 and dropped: on an H200 both
   lag a case of ~100 ms, so the SM clock probe stays the per-case record. */
static double nvml_power_limit(int dev) {
    typedef int (*init_fn)(void);
    typedef int (*by_pci_fn)(const char *bus_id, void **device);
    typedef int (*limit_fn)(void *device, unsigned int *mw);
    char bus[32];
    if (cudaDeviceGetPCIBusId(bus, (int)sizeof bus, dev) != cudaSuccess) return -1.0;
    void *lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (lib == NULL) return -1.0;
    init_fn init = (init_fn)dlsym(lib, "nvmlInit_v2");
    init_fn shutdown = (init_fn)dlsym(lib, "nvmlShutdown");
    by_pci_fn by_pci = (by_pci_fn)dlsym(lib, "nvmlDeviceGetHandleByPciBusId_v2");
    limit_fn limit = (limit_fn)dlsym(lib, "nvmlDeviceGetEnforcedPowerLimit");
    double w = -1.0;
    if (init != NULL && init() == 0) { /* 0: NVML_SUCCESS */
        void *device = NULL;
        unsigned int mw = 0;
        if (by_pci != NULL && limit != NULL && by_pci(bus, &device) == 0 && limit(device, &mw) == 0)
            w = 1e-3 * mw;
        if (shutdown != NULL) shutdown();
    }
    dlclose(lib);
    return w;
}

extern "C" void ak_bench_cuda_describe(ak_context *ctx, char *buf, size_t size, double *power_limit_w) {
    int dev = ak_context_device(ctx).id, sm = 0, mem = 0, drv = 0, rt = 0;
    cudaDeviceGetAttribute(&sm, cudaDevAttrClockRate, dev);
    cudaDeviceGetAttribute(&mem, cudaDevAttrMemoryClockRate, dev);
    cudaDriverGetVersion(&drv);
    cudaRuntimeGetVersion(&rt);
    *power_limit_w = nvml_power_limit(dev);
    char limit[48] = "power limit unknown (no NVML)";
    if (*power_limit_w >= 0) snprintf(limit, sizeof limit, "power limit %.0f W", *power_limit_w);
    snprintf(buf, size, "max SM clock %d MHz, memory clock %d MHz, driver %d.%d, runtime %d.%d, %s",
             sm / 1000, mem / 1000, drv / 1000, (drv % 1000) / 10, rt / 1000, (rt % 1000) / 10, limit);
}
