/* bench.c -- case lists, the builder registry, random fills and the CPU ceilings and timing. */
#include "bench.h"
#include "bench_internal.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/internal.h"
#include "common/numeric.h"

struct ak_bench_list {
    ak_bench_case *v;
    int32_t n, cap;
};

#define AK_BENCH_MAX_FAMILIES 32
static struct {
    const char *family;
    ak_bench_builder fn;
} g_families[AK_BENCH_MAX_FAMILIES];
static int32_t g_nfamilies;

void ak_bench_register(const char *family, ak_bench_builder fn) {
    if (g_nfamilies < AK_BENCH_MAX_FAMILIES) {
        g_families[g_nfamilies].family = family;
        g_families[g_nfamilies].fn = fn;
        g_nfamilies++;
    }
}

int32_t ak_bench_family_count(void) { return g_nfamilies; }
ak_bench_builder ak_bench_family(int32_t i, const char **name) {
    if (name != NULL) *name = g_families[i].family;
    return g_families[i].fn;
}

ak_status ak_bench_add(ak_bench_list *l, const ak_bench_case *c) {
    if (l->n == l->cap) {
        int32_t cap = l->cap ? 2 * l->cap : 16;
        ak_bench_case *v = (ak_bench_case *)realloc(l->v, (size_t)cap * sizeof *v);
        if (v == NULL) return AK_ERR_OUT_OF_MEMORY;
        l->v = v;
        l->cap = cap;
    }
    l->v[l->n++] = *c;
    return AK_OK;
}

ak_bench_list *ak_bench_list_create(void) { return (ak_bench_list *)calloc(1, sizeof(ak_bench_list)); }
int32_t ak_bench_list_size(const ak_bench_list *l) { return l->n; }
ak_bench_case *ak_bench_list_at(ak_bench_list *l, int32_t i) { return &l->v[i]; }
void ak_bench_list_destroy(ak_bench_list *l) {
    if (l == NULL) return;
    free(l->v);
    free(l);
}

int ak_bench_skip(const char *shape) {
    const char *f = getenv("AK_BENCH_FILTER");
    if (f == NULL || f[0] == '\0') return 0;
    for (const char *p = f; *p;) {
        const char *e = strchr(p, ',');
        size_t len = e != NULL ? (size_t)(e - p) : strlen(p);
        for (const char *q = shape; len > 0 && *q; q++)
            if (strncmp(q, p, len) == 0) return 0;
        p += len + (e != NULL);
    }
    return 1;
}

ak_status ak_bench_env_shapes(int64_t out[AK_BENCH_MAX_SHAPES][3], int *n) {
    const char *env = getenv("AK_BENCH_SHAPES"), *s = env;
    *n = 0;
    if (s == NULL) return AK_OK;
    while (*s != '\0') {
        long long v[3] = {0, 0, 0};
        int ok = *n < AK_BENCH_MAX_SHAPES;
        for (int k = 0; ok && k < 3; k++) {
            char *end;
            v[k] = strtoll(s, &end, 10);
            ok = end != s && v[k] >= 1 && v[k] <= (k == 2 ? 128 : 1 << 20);
            s = end;
            if (ok && k < 2) ok = *s++ == 'x';
        }
        if (!ok || (*s != ',' && *s != '\0'))
            return ak_fail(AK_ERR_INVALID_ARGUMENT, "AK_BENCH_SHAPES '%s': expected BxSxH,... (at most %d, h_q 1..128)",
                           env, AK_BENCH_MAX_SHAPES);
        for (int k = 0; k < 3; k++) out[*n][k] = v[k];
        (*n)++;
        if (*s == ',') s++;
    }
    return AK_OK;
}

int ak_bench_wants(const char *op, const char *name) {
    if (op == NULL || op[0] == '\0') return 1;
    size_t n = strlen(name);
    for (const char *p = op; *p;) {
        const char *e = strchr(p, ',');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        if (len == n && strncmp(p, name, n) == 0) return 1;
        if (e == NULL) break;
        p = e + 1;
    }
    return 0;
}

static uint64_t mix(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static double normal(uint64_t *x) {
    double u = ((double)(mix(x) >> 11) + 0.5) * 0x1.0p-53, v = (double)(mix(x) >> 11) * 0x1.0p-53;
    return sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v);
}

static double clampd(double v, double c) { return c > 0 ? (v > c ? c : v < -c ? -c : v) : v; }

void ak_bench_fill_normal_bf16(uint16_t *dst, int64_t n, double sigma, double clamp, uint64_t seed) {
    uint64_t x = seed;
    for (int64_t i = 0; i < n; i++) dst[i] = ak_f32_to_bf16((float)clampd(sigma * normal(&x), clamp));
}

void ak_bench_fill_normal_f32(float *dst, int64_t n, double sigma, double clamp, uint64_t seed) {
    uint64_t x = seed;
    for (int64_t i = 0; i < n; i++) dst[i] = (float)clampd(sigma * normal(&x), clamp);
}

ak_status ak_bench_fill_normal_bf16_dev(ak_context *ctx, void *dst, int64_t n, double sigma,
                                        double clamp, uint64_t seed) {
#ifdef AK_HAVE_CUDA
    if (ak_context_backend(ctx) == AK_BACKEND_CUDA)
        return ak_bench_cuda_fill_normal_bf16(ctx, dst, n, sigma, clamp, seed);
#endif
    ak_bench_fill_normal_bf16((uint16_t *)dst, n, sigma, clamp, seed); /* CPU: host memory */
    return AK_OK;
}

/* ---- CPU timing and ceilings ---- */

double ak_bench_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void ak_bench_sleep_ms(int32_t ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    if (ms <= 0) return;
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Median, min and relative standard deviation of n samples (sorted in place). */
void ak_bench_stats(double *s, int32_t n, double *median, double *min, double *rsd) {
    qsort(s, (size_t)n, sizeof *s, cmp_double);
    *median = n % 2 ? s[n / 2] : 0.5 * (s[n / 2 - 1] + s[n / 2]);
    *min = s[0];
    double mean = 0, var = 0;
    for (int32_t i = 0; i < n; i++) mean += s[i];
    mean /= n;
    for (int32_t i = 0; i < n; i++) var += (s[i] - mean) * (s[i] - mean);
    *rsd = n > 1 && mean > 0 ? sqrt(var / (n - 1)) / mean : 0.0;
}

/* Times c->run on the CPU: 2 warm-ups, then samples until 30 or `budget_s` seconds (>= 3). */
ak_status ak_bench_cpu_time(ak_context *ctx, ak_bench_case *c, double budget_s, double *median_s,
                            double *min_s, double *rsd, int32_t *samples) {
    for (int w = 0; w < 2; w++) AK_TRY(c->run(ctx, c->state));
    double s[30];
    int32_t n = 0;
    double start = ak_bench_now();
    while (n < 30 && (n < 3 || ak_bench_now() - start < budget_s)) {
        double t0 = ak_bench_now();
        AK_TRY(c->run(ctx, c->state));
        s[n++] = ak_bench_now() - t0;
    }
    ak_bench_stats(s, n, median_s, min_s, rsd);
    *samples = n;
    return AK_OK;
}

typedef struct copy_job {
    unsigned char *dst;
    const unsigned char *src;
    size_t bytes, chunk;
} copy_job;

static void copy_item(void *arg, int64_t i, int32_t thread) {
    copy_job *j = (copy_job *)arg;
    size_t off = (size_t)i * j->chunk;
    size_t n = off + j->chunk > j->bytes ? j->bytes - off : j->chunk;
    memcpy(j->dst + off, j->src + off, n);
}

typedef struct gemm_job {
    const float *a, *b;
    float *c;
    int32_t n;
} gemm_job;

/* The CPU attention kernels use 8-lane vectors with an AVX2 clone; the GEMM ceiling is measured
   the same way so the ratio compares like with like. */
typedef float ak_bench_v8 __attribute__((vector_size(32)));
#if defined(__x86_64__) && defined(__linux__) && defined(__GNUC__) && !defined(__clang__)
#define AK_BENCH_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define AK_BENCH_CLONES
#endif

/* C[16 rows of block blk] = A B: per row, 8-lane accumulators over the columns (n % 8 == 0). */
AK_BENCH_CLONES static void gemm_item(void *arg, int64_t blk, int32_t thread) {
    gemm_job *j = (gemm_job *)arg;
    int32_t n = j->n;
    for (int32_t r = (int32_t)blk * 16; r < (int32_t)blk * 16 + 16; r++) {
        float *crow = j->c + (int64_t)r * n;
        for (int32_t x0 = 0; x0 < n; x0 += 64) {
            ak_bench_v8 acc[8];
            memset(acc, 0, sizeof acc);
            for (int32_t k = 0; k < n; k++) {
                float a = j->a[(int64_t)r * n + k];
                const float *brow = j->b + (int64_t)k * n + x0;
                for (int v = 0; v < 8; v++) {
                    ak_bench_v8 b;
                    memcpy(&b, brow + 8 * v, sizeof b);
                    acc[v] += a * b;
                }
            }
            memcpy(crow + x0, acc, sizeof acc);
        }
    }
}

ak_status ak_bench_cpu_ceilings(ak_context *ctx, int32_t quick, double *copy_Bps, double *gemm_flops) {
    size_t bytes = quick ? ((size_t)64 << 20) : ((size_t)512 << 20);
    unsigned char *src = (unsigned char *)malloc(bytes), *dst = (unsigned char *)malloc(bytes);
    if (src == NULL || dst == NULL) {
        free(src);
        free(dst);
        return AK_ERR_OUT_OF_MEMORY;
    }
    for (size_t i = 0; i < bytes; i++) src[i] = (unsigned char)(i * 131u + 7u);
    memset(dst, 1, bytes);
    copy_job cj = {dst, src, bytes, (size_t)4 << 20};
    int64_t chunks = (int64_t)((bytes + cj.chunk - 1) / cj.chunk);
    double s[10];
    for (int i = 0; i < 10; i++) {
        double t0 = ak_bench_now();
        ak_parallel_for(ctx, chunks, copy_item, &cj);
        s[i] = ak_bench_now() - t0;
    }
    double med, mn, rsd;
    ak_bench_stats(s + 2, 8, &med, &mn, &rsd);
    *copy_Bps = 2.0 * (double)bytes / med;
    free(src);
    free(dst);

    int32_t n = quick ? 256 : 512;
    float *a = (float *)malloc(sizeof(float) * (size_t)n * n * 3);
    if (a == NULL) return AK_ERR_OUT_OF_MEMORY;
    for (int64_t i = 0; i < (int64_t)n * n * 2; i++) a[i] = (float)((i * 37 % 101) - 50) * 0.01f;
    gemm_job gj = {a, a + (int64_t)n * n, a + 2 * (int64_t)n * n, n};
    for (int i = 0; i < 5; i++) {
        double t0 = ak_bench_now();
        ak_parallel_for(ctx, n / 16, gemm_item, &gj);
        s[i] = ak_bench_now() - t0;
    }
    ak_bench_stats(s + 1, 4, &med, &mn, &rsd);
    *gemm_flops = 2.0 * n * (double)n * n / med;
    free(a);
    return AK_OK;
}
