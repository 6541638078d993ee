/*
 * ak_test.h -- attnkit's small in-process test harness.
 *
 *   AK_TEST(name) { ... CHECK(cond); CHECK_STATUS(call, AK_OK); ... }
 *
 * Every test binary links tests/harness/ak_test.c, which provides main(): it runs the registered
 * tests (optionally only those whose name contains argv[1]), prints one line per failure with the
 * case parameters, "SKIP name: reason" for skipped tests, and ends with exactly one line
 * "N passed, N failed" (", N skipped" appended when some were skipped). Exit status: 0 if nothing
 * failed; 77 if every test was skipped (CTest reports it as skipped); 1 otherwise.
 *
 * Random inputs: ak_rng seeded from AK_TEST_SEED when set, else from the clock and the process
 * (so tests started together draw different inputs); the seed is printed first so a failure can be
 * replayed.
 */
#ifndef AK_TEST_H
#define AK_TEST_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "attnkit.h"

typedef void (*ak_test_fn)(void);
void ak_test_register(const char *name, ak_test_fn fn);

#define AK_TEST(name)                                                                            \
    static void name(void);                                                                      \
    __attribute__((constructor)) static void ak_test_reg_##name(void) {                          \
        ak_test_register(#name, name);                                                           \
    }                                                                                            \
    static void name(void)

/* Records a failure of the running test (it keeps running). */
void ak_test_fail_at(const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Marks the running test as skipped. */
void ak_test_skip(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Number of failures recorded by the running test so far. */
int ak_test_failures(void);

#define CHECK(cond)                                                                              \
    do {                                                                                         \
        if (!(cond)) ak_test_fail_at(__FILE__, __LINE__, "CHECK(%s)", #cond);                   \
    } while (0)

#define CHECK_MSG(cond, ...)                                                                     \
    do {                                                                                         \
        if (!(cond)) ak_test_fail_at(__FILE__, __LINE__, __VA_ARGS__);                          \
    } while (0)

/* Checks a status, printing the library's detail line when it differs. */
#define CHECK_STATUS(expr, want)                                                                 \
    do {                                                                                         \
        ak_status ak_cs_got_ = (expr);                                                           \
        if (ak_cs_got_ != (want))                                                                \
            ak_test_fail_at(__FILE__, __LINE__, "%s returned %s, expected %s (detail: %s)",     \
                            #expr, ak_status_name(ak_cs_got_), ak_status_name(want),             \
                            ak_last_error());                                                    \
    } while (0)

/* Checks that a call fails with `want` and leaves a non-empty detail line that contains `word`
   (the argument name it must mention; NULL skips that part). */
#define CHECK_REJECT(expr, want, word) ak_test_check_reject((expr), (want), (word), #expr, __FILE__, __LINE__)
void ak_test_check_reject(ak_status got, ak_status want, const char *word, const char *expr,
                          const char *file, int line);

/* ---- random numbers ---- */
typedef struct ak_rng {
    uint64_t s[4];
} ak_rng;
uint64_t ak_test_seed(void);            /* this run's seed */
void ak_rng_init(ak_rng *r, uint64_t seed);
uint64_t ak_rng_u64(ak_rng *r);
double ak_rng_uniform(ak_rng *r);       /* [0, 1) */
double ak_rng_normal(ak_rng *r);        /* N(0, 1) */
int64_t ak_rng_range(ak_rng *r, int64_t lo, int64_t hi); /* [lo, hi) */

/* ---- comparison ---- */
typedef struct ak_tol {
    double abs;   /* pass if |got - ref| <= abs ... */
    double rel;   /* ... or |got - ref| <= rel * |ref| */
    double cos;   /* cosine difference 1 - 2<a,b>/(|a|^2+|b|^2) at most this (< 0: not checked) */
    double nmse;  /* sum (got-ref)^2 / sum ref^2 at most this (< 0: not checked) */
} ak_tol;

/* Compares n values; non-finite reference values must be matched exactly (same inf sign; NaN
   with NaN). Prints the worst element and the metrics on failure and records a failure. Returns
   1 when everything passed. `what` names the case. */
int ak_compare(const char *what, const float *got, const double *ref, int64_t n, ak_tol tol);

/* Fills n bytes with a NaN pattern suited to dtype (bf16 0x7fc0, f32 0x7fc00000, e4m3 0x7f). */
void ak_poison(void *p, size_t bytes, ak_dtype dtype);

#endif /* AK_TEST_H */
