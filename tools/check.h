/*
 * check.h -- the cross-backend check behind `attnkit check` (tools/cmd_check.c). Each op family
 * contributes a runner in its own tools/check_<family>.c: for a list of shapes that cross page
 * boundaries and corner cases, it draws seeded random inputs, runs the op on the reference context
 * (CPU) and on the context under test, and compares: bitwise when both are CPU (two thread counts),
 * by NMSE and abs+rel tolerances otherwise (semantics.md 14.2).
 */
#ifndef AK_TOOLS_CHECK_H
#define AK_TOOLS_CHECK_H

#include <stdint.h>

#include "attnkit.h"

typedef struct ak_check_opts {
    uint64_t seed;
    int32_t quick;      /* reduced shape set (compute-sanitizer runs) */
    int32_t bitwise;    /* the test context is a CPU context: results must be bitwise equal */
} ak_check_opts;

typedef struct ak_check_result {
    char op[40];        /* e.g. "mla_decode" */
    char shape[200];    /* the case's printable parameters */
    int32_t passed;
    int32_t skipped;    /* the test backend has no kernel for this case (AK_ERR_UNSUPPORTED) */
    double max_abs;     /* worst absolute error over the outputs compared */
    double max_rel;
    double nmse;
    char note[200];     /* why it failed, or what was compared */
} ak_check_result;

typedef struct ak_check_report ak_check_report;
void ak_check_report_add(ak_check_report *r, const ak_check_result *res);

/* A family's runner: runs its ops whose name matches (ak_check_wants). */
typedef ak_status (*ak_check_runner)(ak_context *ref, ak_context *test, const ak_check_opts *o,
                                     ak_check_report *rep);
/* Whether op `name` was selected by --op (comma list; none = all). */
int ak_check_wants(const ak_check_report *r, const char *name);

/* Registers a family's runner; put `AK_CHECK_REGISTER(ak_check_x)` after its definition in
   tools/check_<family>.c. `attnkit check` runs every registered runner. */
void ak_check_register(const char *family, ak_check_runner fn);
#define AK_CHECK_REGISTER(fn)                                                                    \
    __attribute__((constructor)) static void ak_check_reg_##fn(void) { ak_check_register(#fn, fn); }

/* Comparison helpers for runners. Compare n test values against reference values with the
   semantics.md 14.2 rule (abs or rel per element, NMSE, exact match of non-finite positions);
   fill res (max_abs, max_rel, nmse, passed, note). With bitwise set, any bit difference fails. */
void ak_check_compare_f32(const float *test, const float *ref, int64_t n, double abs_tol,
                          double rel_tol, double nmse_tol, int bitwise, ak_check_result *res);
/* Byte-exact comparison (codecs, integer ops); records the first differing offset in note. */
void ak_check_compare_bytes(const void *test, const void *ref, size_t n, ak_check_result *res);

/* Runners of the op families (each in tools/check_<family>.c). */
ak_status ak_check_codec(ak_context *ref, ak_context *test, const ak_check_opts *o, ak_check_report *rep);
ak_status ak_check_mha(ak_context *ref, ak_context *test, const ak_check_opts *o, ak_check_report *rep);
ak_status ak_check_pagetable(ak_context *ref, ak_context *test, const ak_check_opts *o,
                             ak_check_report *rep);
ak_status ak_check_indexer(ak_context *ref, ak_context *test, const ak_check_opts *o,
                           ak_check_report *rep);
ak_status ak_check_mla(ak_context *ref, ak_context *test, const ak_check_opts *o, ak_check_report *rep);

#endif
