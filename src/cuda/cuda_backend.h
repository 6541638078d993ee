/*
 * cuda_backend.h -- the C-callable surface of the CUDA backend. Every function is implemented in a
 * .cu file with C linkage; the public entry points in src/<family>.c reach them through AK_DISPATCH, so a
 * build without CUDA never references them.
 */
#ifndef AK_CUDA_BACKEND_H
#define AK_CUDA_BACKEND_H

#include "common/internal.h"

#ifdef __cplusplus
extern "C" {
#endif

#ifdef AK_HAVE_CUDA
#define AK_DISPATCH(ctx, cpu_call, cuda_call)                                                    \
    ((ctx)->backend == AK_BACKEND_CUDA ? (cuda_call) : (cpu_call))
#else
#define AK_DISPATCH(ctx, cpu_call, cuda_call) (cpu_call)
#endif

/* ---- context (src/cuda/context.cu; src/cuda/no_cuda.c without CUDA) ---- */
int ak_cuda_available(void);                    /* built with CUDA and a device is present */
ak_status ak_cuda_context_init(ak_context *ctx); /* sets ctx->cuda and ctx->info */
void ak_cuda_context_fini(ak_context *ctx);
ak_status ak_cuda_synchronize(ak_context *ctx);

#ifdef __cplusplus
}
#endif

#endif /* AK_CUDA_BACKEND_H */
