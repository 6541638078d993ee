/* cmd_check.c -- `attnkit check`: every registered op runner on a backend against the CPU
   backend; prints a table and exits non-zero if any case failed. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "attnkit.h"
#include "check.h"
#include "cli.h"
#include "json.h"

struct ak_check_report {
    ak_check_result *v;
    int32_t n, cap;
    const char *ops;      /* --op filter */
    const char *backend;  /* label of the backend under test */
};

#define AK_CHECK_MAX_FAMILIES 32
static struct {
    const char *family;
    ak_check_runner fn;
} g_runners[AK_CHECK_MAX_FAMILIES];
static int32_t g_nrunners;

void ak_check_register(const char *family, ak_check_runner fn) {
    if (g_nrunners < AK_CHECK_MAX_FAMILIES) {
        g_runners[g_nrunners].family = family;
        g_runners[g_nrunners].fn = fn;
        g_nrunners++;
    }
}

void ak_check_report_add(ak_check_report *r, const ak_check_result *res) {
    if (r->n == r->cap) {
        int32_t cap = r->cap ? 2 * r->cap : 64;
        ak_check_result *v = (ak_check_result *)realloc(r->v, (size_t)cap * sizeof *v);
        if (v == NULL) return;
        r->v = v;
        r->cap = cap;
    }
    r->v[r->n++] = *res;
}

int ak_check_wants(const ak_check_report *r, const char *name) {
    const char *op = r->ops;
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

void ak_check_compare_f32(const float *test, const float *ref, int64_t n, double abs_tol,
                          double rel_tol, double nmse_tol, int bitwise, ak_check_result *res) {
    double se = 0, sr = 0, max_abs = 0, max_rel = 0;
    int64_t bad = 0, first = -1;
    for (int64_t i = 0; i < n; i++) {
        double t = test[i], r = ref[i];
        if (bitwise) {
            if (memcmp(&test[i], &ref[i], sizeof(float)) != 0) {
                bad++;
                if (first < 0) first = i;
            }
        }
        if (!isfinite(r) || !isfinite(t)) {
            int same = (isnan(r) && isnan(t)) || (isinf(r) && isinf(t) && (r > 0) == (t > 0));
            if (!same && !bitwise) {
                bad++;
                if (first < 0) first = i;
            }
            continue;
        }
        double d = fabs(t - r), rel = d / (fabs(r) > 1e-30 ? fabs(r) : 1e-30);
        se += d * d;
        sr += r * r;
        if (d > max_abs) max_abs = d;
        if (rel > max_rel && d > abs_tol) max_rel = rel;
        if (!bitwise && !(d <= abs_tol || d <= rel_tol * fabs(r))) {
            bad++;
            if (first < 0) first = i;
        }
    }
    res->max_abs = max_abs;
    res->max_rel = max_rel;
    res->nmse = sr > 0 ? se / sr : se;
    res->passed = bad == 0 && (bitwise || nmse_tol < 0 || res->nmse <= nmse_tol);
    if (bad)
        snprintf(res->note, sizeof res->note, "%lld of %lld differ%s; first [%lld] test %.9g ref %.9g",
                 (long long)bad, (long long)n, bitwise ? " bitwise" : "", (long long)first,
                 (double)test[first], (double)ref[first]);
    else if (!res->passed)
        snprintf(res->note, sizeof res->note, "nmse %.3g above %.3g", res->nmse, nmse_tol);
}

void ak_check_compare_bytes(const void *test, const void *ref, size_t n, ak_check_result *res) {
    const unsigned char *a = (const unsigned char *)test, *b = (const unsigned char *)ref;
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < n; i++)
        if (a[i] != b[i]) {
            if (bad == 0) first = i;
            bad++;
        }
    res->max_abs = 0;
    res->max_rel = 0;
    res->nmse = 0;
    res->passed = bad == 0;
    if (bad)
        snprintf(res->note, sizeof res->note, "%zu of %zu bytes differ; first at %zu (0x%02x vs 0x%02x)",
                 bad, n, first, a[first], b[first]);
}

static void usage(FILE *f) {
    fprintf(f,
            "usage: attnkit check [--backend cpu|cuda|all] [--op NAMES] [--quick] [--seed S] [--json]\n\n"
            "Runs every op on the backend under test and on the CPU backend with the same seeded random\n"
            "inputs and compares them: cpu = the CPU backend at 2 threads against 1 thread (bitwise);\n"
            "cuda = the CUDA backend against the CPU backend (semantics.md 14.2 tolerances; byte-exact\n"
            "for codecs and integer ops). Exits 1 if any case failed, 77 if the backend is unavailable.\n");
}

static int run_backend(ak_backend b, const ak_check_opts *base, ak_check_report *rep) {
    ak_context_options ro = {AK_BACKEND_CPU, b == AK_BACKEND_CPU ? 1 : 0, 0, NULL};
    ak_context_options to = {b, b == AK_BACKEND_CPU ? 2 : 0, 0, NULL};
    ak_context *ref = NULL, *test = NULL;
    if (ak_context_create(&ro, &ref) != AK_OK) {
        fprintf(stderr, "attnkit check: reference context: %s\n", ak_last_error());
        return 1;
    }
    ak_status s = ak_context_create(&to, &test);
    if (s != AK_OK) {
        ak_context_destroy(ref);
        if (s == AK_ERR_NO_DEVICE) {
            printf("SKIP backend %s: %s\n", rep->backend, ak_last_error());
            return 77;
        }
        fprintf(stderr, "attnkit check: %s context: %s\n", rep->backend, ak_last_error());
        return 1;
    }
    ak_check_opts o = *base;
    o.bitwise = b == AK_BACKEND_CPU;
    int errors = 0;
    for (int32_t i = 0; i < g_nrunners; i++) {
        if (g_runners[i].fn(ref, test, &o, rep) != AK_OK) {
            ak_check_result r;
            memset(&r, 0, sizeof r);
            snprintf(r.op, sizeof r.op, "%s", g_runners[i].family);
            snprintf(r.shape, sizeof r.shape, "(runner)");
            snprintf(r.note, sizeof r.note, "runner error: %s", ak_last_error());
            ak_check_report_add(rep, &r);
            errors++;
        }
    }
    ak_context_destroy(test);
    ak_context_destroy(ref);
    return errors ? 1 : 0;
}

int ak_cmd_check(int argc, char **argv) {
    if (ak_cli_has_flag(argc, argv, "--help")) {
        usage(stdout);
        return 0;
    }
    const char *backend = ak_cli_option(argc, argv, "--backend");
    const char *seed = ak_cli_option(argc, argv, "--seed");
    ak_check_opts o;
    memset(&o, 0, sizeof o);
    o.quick = ak_cli_has_flag(argc, argv, "--quick");
    o.seed = seed ? strtoull(seed, NULL, 0) : (uint64_t)time(NULL);
    int json = ak_cli_has_flag(argc, argv, "--json");
    if (backend == NULL) backend = "all";
    int want_cpu = strcmp(backend, "cpu") == 0 || strcmp(backend, "all") == 0;
    int want_cuda = strcmp(backend, "cuda") == 0 || strcmp(backend, "all") == 0;
    if (!want_cpu && !want_cuda) {
        fprintf(stderr, "attnkit check: --backend %s: expected cpu, cuda or all\n", backend);
        return 2;
    }
    if (!json) printf("attnkit check: seed %llu (replay with --seed %llu)\n",
                      (unsigned long long)o.seed, (unsigned long long)o.seed);
    ak_check_report reps[2];
    memset(reps, 0, sizeof reps);
    int rc[2] = {0, 0}, ran[2] = {0, 0};
    for (int k = 0; k < 2; k++) {
        if (!(k == 0 ? want_cpu : want_cuda)) continue;
        reps[k].ops = ak_cli_option(argc, argv, "--op");
        reps[k].backend = k == 0 ? "cpu" : "cuda";
        rc[k] = run_backend(k == 0 ? AK_BACKEND_CPU : AK_BACKEND_CUDA, &o, &reps[k]);
        ran[k] = rc[k] != 77;
    }
    int passed = 0, failed = 0, skipped = 0;
    ak_json j;
    if (json) {
        ak_json_init(&j, stdout);
        ak_json_object_begin(&j, NULL);
        ak_json_int(&j, "seed", (int64_t)o.seed);
        ak_json_array_begin(&j, "cases");
    } else {
        printf("%-7s %-18s %-62s %10s %10s %10s %s\n", "backend", "op", "shape", "max_abs",
               "max_rel", "nmse", "result");
    }
    for (int k = 0; k < 2; k++) {
        for (int32_t i = 0; i < reps[k].n; i++) {
            ak_check_result *r = &reps[k].v[i];
            if (r->skipped) skipped++;
            else if (r->passed) passed++;
            else failed++;
            if (json) {
                ak_json_object_begin(&j, NULL);
                ak_json_str(&j, "backend", reps[k].backend);
                ak_json_str(&j, "op", r->op);
                ak_json_str(&j, "shape", r->shape);
                ak_json_num(&j, "max_abs", r->max_abs);
                ak_json_num(&j, "max_rel", r->max_rel);
                ak_json_num(&j, "nmse", r->nmse);
                ak_json_bool(&j, "passed", r->passed && !r->skipped);
                ak_json_bool(&j, "skipped", r->skipped);
                ak_json_str(&j, "note", r->note);
                ak_json_object_end(&j);
            } else {
                printf("%-7s %-18s %-62s %10.3g %10.3g %10.3g %s%s%s\n", reps[k].backend, r->op,
                       r->shape, r->max_abs, r->max_rel, r->nmse, r->skipped ? "skip" : r->passed ? "ok" : "FAIL",
                       r->note[0] ? "  " : "", r->note);
            }
        }
        free(reps[k].v);
    }
    if (json) {
        ak_json_array_end(&j);
        ak_json_int(&j, "passed", passed);
        ak_json_int(&j, "failed", failed);
        ak_json_int(&j, "skipped", skipped);
        ak_json_object_end(&j);
        ak_json_finish(&j);
    } else {
        if (skipped) printf("%d passed, %d failed, %d skipped\n", passed, failed, skipped);
        else printf("%d passed, %d failed\n", passed, failed);
    }
    if (failed > 0 || rc[0] == 1 || rc[1] == 1) return 1;
    if (!ran[0] && !ran[1]) return 77;
    if (passed == 0) {
        fprintf(stderr, "attnkit check: no case matched\n");
        return 1;
    }
    return 0;
}
