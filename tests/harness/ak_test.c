/* ak_test.c -- the harness behind ak_test.h, including main(). */
#include "ak_test.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define AK_MAX_TESTS 1024

static struct {
    const char *name;
    ak_test_fn fn;
} g_tests[AK_MAX_TESTS];
static int g_ntests;
static int g_cur_failures;
static int g_cur_skipped;
static const char *g_cur_name;
static uint64_t g_seed;

void ak_test_register(const char *name, ak_test_fn fn) {
    if (g_ntests < AK_MAX_TESTS) {
        g_tests[g_ntests].name = name;
        g_tests[g_ntests].fn = fn;
        g_ntests++;
    }
}

void ak_test_fail_at(const char *file, int line, const char *fmt, ...) {
    g_cur_failures++;
    if (g_cur_failures > 20) return; /* enough to diagnose; keep logs readable */
    va_list ap;
    va_start(ap, fmt);
    fprintf(stdout, "FAIL %s (%s:%d): ", g_cur_name, file, line);
    vfprintf(stdout, fmt, ap);
    fprintf(stdout, "\n");
    va_end(ap);
    fflush(stdout);
}

void ak_test_skip(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stdout, "SKIP %s: ", g_cur_name);
    vfprintf(stdout, fmt, ap);
    fprintf(stdout, "\n");
    va_end(ap);
    g_cur_skipped = 1;
}

int ak_test_failures(void) { return g_cur_failures; }

void ak_test_check_reject(ak_status got, ak_status want, const char *word, const char *expr,
                          const char *file, int line) {
    const char *detail = ak_last_error();
    if (got != want) {
        ak_test_fail_at(file, line, "%s returned %s, expected %s (detail: %s)", expr,
                        ak_status_name(got), ak_status_name(want), detail);
    } else if (detail == NULL || detail[0] == '\0') {
        ak_test_fail_at(file, line, "%s returned %s with an empty detail line", expr,
                        ak_status_name(got));
    } else if (word != NULL && strstr(detail, word) == NULL) {
        ak_test_fail_at(file, line, "%s: detail '%s' does not mention '%s'", expr, detail, word);
    }
}

/* xoshiro256** seeded by splitmix64 */
static uint64_t splitmix(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

void ak_rng_init(ak_rng *r, uint64_t seed) {
    uint64_t x = seed;
    for (int i = 0; i < 4; i++) r->s[i] = splitmix(&x);
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

uint64_t ak_rng_u64(ak_rng *r) {
    uint64_t *s = r->s;
    uint64_t result = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

double ak_rng_uniform(ak_rng *r) { return (double)(ak_rng_u64(r) >> 11) * 0x1.0p-53; }

double ak_rng_normal(ak_rng *r) {
    double u = ak_rng_uniform(r), v = ak_rng_uniform(r);
    if (u < 1e-300) u = 1e-300;
    return sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v);
}

int64_t ak_rng_range(ak_rng *r, int64_t lo, int64_t hi) {
    if (hi <= lo) return lo;
    return lo + (int64_t)(ak_rng_u64(r) % (uint64_t)(hi - lo));
}

uint64_t ak_test_seed(void) { return g_seed; }

int ak_compare(const char *what, const float *got, const double *ref, int64_t n, ak_tol tol) {
    double se = 0, sr = 0, dot = 0, ng = 0, worst = -1;
    int64_t worst_i = -1, bad = 0, first_bad = -1;
    for (int64_t i = 0; i < n; i++) {
        double g = got[i], r = ref[i];
        if (!isfinite(r) || !isfinite(g)) {
            int same = (isnan(r) && isnan(g)) || (isinf(r) && isinf(g) && (r > 0) == (g > 0));
            if (!same) {
                bad++;
                if (first_bad < 0) first_bad = i;
            }
            continue;
        }
        double d = fabs(g - r);
        se += d * d;
        sr += r * r;
        dot += g * r;
        ng += g * g;
        if (!(d <= tol.abs || d <= tol.rel * fabs(r))) {
            bad++;
            if (first_bad < 0) first_bad = i;
        }
        double excess = d - tol.rel * fabs(r);
        if (excess > worst) {
            worst = excess;
            worst_i = i;
        }
    }
    double nmse = sr > 0 ? se / sr : se;
    double cosd = (ng + sr) > 0 ? 1.0 - 2.0 * dot / (ng + sr) : 0.0;
    int ok = bad == 0 && (tol.nmse < 0 || nmse <= tol.nmse) && (tol.cos < 0 || cosd <= tol.cos);
    if (!ok) {
        ak_test_fail_at(__FILE__, __LINE__,
                        "%s: %lld of %lld elements out of tolerance (abs %g or rel %g); nmse %.3g "
                        "(max %g), cos diff %.3g (max %g); first bad [%lld] got %.9g ref %.9g; "
                        "worst [%lld] got %.9g ref %.9g",
                        what, (long long)bad, (long long)n, tol.abs, tol.rel, nmse, tol.nmse, cosd,
                        tol.cos, (long long)first_bad, first_bad >= 0 ? got[first_bad] : 0.0,
                        first_bad >= 0 ? ref[first_bad] : 0.0, (long long)worst_i,
                        worst_i >= 0 ? got[worst_i] : 0.0, worst_i >= 0 ? ref[worst_i] : 0.0);
    }
    return ok;
}

void ak_poison(void *p, size_t bytes, ak_dtype dtype) {
    unsigned char *b = (unsigned char *)p;
    switch (dtype) {
    case AK_DTYPE_F32: case AK_DTYPE_I32:
        for (size_t i = 0; i + 4 <= bytes; i += 4) { b[i] = 0; b[i + 1] = 0; b[i + 2] = 0xc0; b[i + 3] = 0x7f; }
        break;
    case AK_DTYPE_BF16: case AK_DTYPE_F16:
        for (size_t i = 0; i + 2 <= bytes; i += 2) { b[i] = dtype == AK_DTYPE_BF16 ? 0xc0 : 0x00; b[i + 1] = dtype == AK_DTYPE_BF16 ? 0x7f : 0x7e; }
        break;
    default:
        memset(p, 0x7f, bytes);
    }
}

/* A seed that differs between processes started together (the GPU stress runs start several in the
 * same second, where time() alone repeats): the wall clock in nanoseconds, the CPU clock and a
 * stack address (randomized per process), mixed by splitmix64's finalizer. */
static uint64_t ak_fresh_seed(void) {
    struct timespec ts = {0, 0};
    timespec_get(&ts, TIME_UTC);
    int local = 0;
    uint64_t x = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
    x ^= (uint64_t)clock() * 0x9e3779b97f4a7c15ull;
    x ^= (uint64_t)(uintptr_t)&local << 16;
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

int main(int argc, char **argv) {
    const char *filter = argc > 1 ? argv[1] : NULL;
    const char *env = getenv("AK_TEST_SEED");
    g_seed = env != NULL ? strtoull(env, NULL, 0) : ak_fresh_seed();
    printf("seed %llu (replay with AK_TEST_SEED=%llu)\n", (unsigned long long)g_seed,
           (unsigned long long)g_seed);
    int passed = 0, failed = 0, skipped = 0;
    for (int i = 0; i < g_ntests; i++) {
        if (filter != NULL && strstr(g_tests[i].name, filter) == NULL) continue;
        g_cur_name = g_tests[i].name;
        g_cur_failures = 0;
        g_cur_skipped = 0;
        g_tests[i].fn();
        if (g_cur_failures > 0) failed++;
        else if (g_cur_skipped) skipped++;
        else passed++;
        fflush(stdout);
    }
    if (skipped > 0) printf("%d passed, %d failed, %d skipped\n", passed, failed, skipped);
    else printf("%d passed, %d failed\n", passed, failed);
    if (failed > 0) return 1;
    if (passed == 0 && skipped > 0) return 77;
    return 0;
}
