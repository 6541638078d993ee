/* bench_internal.h -- what cmd_bench.c needs from bench.c and bench_cuda.cu. */
#ifndef AK_TOOLS_BENCH_INTERNAL_H
#define AK_TOOLS_BENCH_INTERNAL_H

#include <stddef.h>

#include "bench.h"

#ifdef __cplusplus
extern "C" {
#endif

int32_t ak_bench_family_count(void);
ak_bench_builder ak_bench_family(int32_t i, const char **name);
ak_bench_list *ak_bench_list_create(void);
int32_t ak_bench_list_size(const ak_bench_list *l);
ak_bench_case *ak_bench_list_at(ak_bench_list *l, int32_t i);
void ak_bench_list_destroy(ak_bench_list *l);

double ak_bench_now(void);
void ak_bench_sleep_ms(int32_t ms); /* the host sleeps ms milliseconds */
void ak_bench_stats(double *s, int32_t n, double *median, double *min, double *rsd);
ak_status ak_bench_cpu_time(ak_context *ctx, ak_bench_case *c, double budget_s, double *median_s,
                            double *min_s, double *rsd, int32_t *samples);
ak_status ak_bench_cpu_ceilings(ak_context *ctx, int32_t quick, double *copy_Bps,
                                double *gemm_flops);

/* What one CUDA case measured: medians and the SM clock. */
typedef struct ak_bench_cuda_result {
    double median_s, min_s, rsd, sm_mhz;
    int32_t samples;
} ak_bench_cuda_result;

/* CUDA side (bench_cuda.cu; only in CUDA builds). */
ak_status ak_bench_cuda_setup(ak_context *ctx, void **stream);  /* a non-default stream */
void ak_bench_cuda_teardown(ak_context *ctx, void *stream);
ak_status ak_bench_cuda_ceilings(ak_context *ctx, int32_t quick, double *copy_Bps,
                                 double *gemm_flops, double *gemm_mhz); /* gemm_mhz: SM clock */
/* Events around one call (graph = 0) or replay of a captured graph of 20 calls (graph = 1),
   after cool_ms of an idle GPU (targets.md 6.2); sm_mhz: the median SM clock measured right after
   each sample. */
ak_status ak_bench_cuda_time(ak_context *ctx, ak_bench_case *c, int32_t quick, int32_t cool_ms,
                             ak_bench_cuda_result *r);
/* Random normal bf16 (sigma, clamped) into n elements of device memory, on ctx's stream. */
ak_status ak_bench_cuda_fill_normal_bf16(ak_context *ctx, void *dst, int64_t n, double sigma,
                                         double clamp, uint64_t seed);
/* Device facts for the report header: clocks in MHz, driver and runtime versions, the power limit
   (targets.md 6.2; also into *power_limit_w, < 0 where NVML is absent). */
void ak_bench_cuda_describe(ak_context *ctx, char *buf, size_t size, double *power_limit_w);

#ifdef __cplusplus
}
#endif

#endif
