/*
 * bench.h -- the benchmark framework behind `attnkit bench` (tools/cmd_bench.c). Each op family
 * contributes a case builder in its own tools/bench_<family>.c; the framework times the cases on
 * the chosen backend and reports time, TFLOPS, GB/s and ratios to ceilings measured in the same
 * run (copy bandwidth and bf16 GEMM rate).
 *
 * Timing (targets.md 6): CPU: wall clock per call, median of >= 30 after warm-up. CUDA: events
 * around one call (median); cases marked `graph` (decode-path ops) are captured 20 calls to a
 * CUDA graph and timed by replay (median of 50 replays / 20). Inputs larger than L2, random data.
 */
#ifndef AK_TOOLS_BENCH_H
#define AK_TOOLS_BENCH_H

#include <stdint.h>

#include "attnkit.h"
#include "models.h"

typedef struct ak_bench_opts {
    ak_backend backend;
    int32_t threads;        /* CPU threads (0 = all) */
    const ak_model *model;  /* --model, NULL = the family's default shapes */
    int32_t quick;          /* --quick: smaller shapes, fewer iterations (CI smoke) */
    uint64_t seed;
} ak_bench_opts;

typedef struct ak_bench_case {
    char op[40];          /* name used by --op, e.g. "convert", "mla_decode_sparse" */
    char shape[200];      /* human-readable shape */
    double flops;         /* targets.md 3.1 (real heads, valid keys); 0 for data movement */
    double bytes_kv;      /* anchor convention (KV bytes only); 0 if not meaningful */
    double bytes_total;   /* total convention: bytes read + written */
    int32_t graph;        /* 1: decode-path op, timed by CUDA-graph replay on CUDA */
    void *state;          /* owned by the case */
    ak_status (*run)(ak_context *ctx, void *state); /* one call; no allocation, no host sync */
    void (*destroy)(ak_context *ctx, void *state);
} ak_bench_case;

typedef struct ak_bench_list ak_bench_list;
/* Copies *c into the list (the list takes ownership of c->state). */
ak_status ak_bench_add(ak_bench_list *l, const ak_bench_case *c);

/* A family's case builder: appends the cases of ops it owns that match `op` (NULL = all). */
typedef ak_status (*ak_bench_builder)(ak_context *ctx, const ak_bench_opts *o, const char *op,
                                      ak_bench_list *out);

/* MLA_FP8_PERTENSOR's k_scale in the benchmarks: the calibrated scale of latents clamped to +-1
   (1 / 448 puts 1 at e4m3's largest finite value). */
#define AK_BENCH_FP8_KSCALE (1.0f / 448.0f)

/* A cache pool of num_pages pages of P tokens on ctx's device, its records targets.md 2's data
   (ak_mla_data_pool_anchor, as 6.4 asks), *c describing it (k_scale AK_BENCH_FP8_KSCALE). Up to
   64 pages are drawn and tiled over the pool: it stays far larger than any cache, and its values
   need not be unique. *dev is the caller's to free (ak_dev_free), also on failure. */
ak_status ak_bench_mla_pool(ak_context *ctx, ak_layout l, int32_t num_pages, int32_t P, uint64_t seed,
                            void **dev, ak_cache *c);

/* Random fill helpers for builders (host memory; upload with devmem.h). The MLA builders draw
   targets.md 2's data, as its 6.4 asks: decode q ~ N(0, 1), cache latents and prefill q and KV
   ~ N(0, 0.1^2), clamped to +-1 (their pools: tools/mla_data.h). */
void ak_bench_fill_normal_bf16(uint16_t *dst, int64_t n, double sigma, double clamp, uint64_t seed);
void ak_bench_fill_normal_f32(float *dst, int64_t n, double sigma, double clamp, uint64_t seed);
/* The same distribution written straight into a buffer of ctx's device (a kernel on CUDA, so
   large pools need no host pass; the values differ from the host fill's). */
ak_status ak_bench_fill_normal_bf16_dev(ak_context *ctx, void *dst, int64_t n, double sigma,
                                        double clamp, uint64_t seed);

/* Registers a family's builder; put `AK_BENCH_REGISTER(ak_bench_x)` after its definition in
   tools/bench_<family>.c. The framework runs every registered builder. */
void ak_bench_register(const char *family, ak_bench_builder fn);
#define AK_BENCH_REGISTER(fn)                                                                    \
    __attribute__((constructor)) static void ak_bench_reg_##fn(void) { ak_bench_register(#fn, fn); }

/* 1 when the environment variable AK_BENCH_FILTER (comma list of substrings) is set and no entry
   occurs in `shape`: the case is neither built nor timed (saves device time on subsets). */
int ak_bench_skip(const char *shape);

/* AK_BENCH_SHAPES=BxSxH,... (sparse decode: b, s_q, h_q; h_q 1..128): the shapes in out[k] =
   {b, s_q, h_q} and their count in *n (0 when unset or empty); AK_ERR_INVALID_ARGUMENT naming the
   value when it is malformed or lists more than AK_BENCH_MAX_SHAPES. */
#define AK_BENCH_MAX_SHAPES 32
ak_status ak_bench_env_shapes(int64_t out[AK_BENCH_MAX_SHAPES][3], int *n);

/* Whether `name` is selected by the --op filter `op` (comma list; NULL or "" = all). */
int ak_bench_wants(const char *op, const char *name);

/* Builders of the op families (each in tools/bench_<family>.c). */
ak_status ak_bench_codec(ak_context *ctx, const ak_bench_opts *o, const char *op, ak_bench_list *out);
ak_status ak_bench_mha(ak_context *ctx, const ak_bench_opts *o, const char *op, ak_bench_list *out);
ak_status ak_bench_pagetable(ak_context *ctx, const ak_bench_opts *o, const char *op,
                             ak_bench_list *out);
ak_status ak_bench_mla(ak_context *ctx, const ak_bench_opts *o, const char *op, ak_bench_list *out);
ak_status ak_bench_sparse_decode(ak_context *ctx, const ak_bench_opts *o, const char *op,
                                 ak_bench_list *out);

#endif
