/* cuda_common.cuh -- error mapping and launch helpers shared by every CUDA file. */
#ifndef AK_CUDA_COMMON_CUH
#define AK_CUDA_COMMON_CUH

#include <cuda_runtime.h>
#include <string.h>

#include "common/internal.h"

struct ak_cuda_state {
    cudaDeviceProp prop;
};

/* Maps a CUDA error to AK_ERR_CUDA with the call, the error name and its text in the detail. */
#define AK_CUDA_TRY(call)                                                                        \
    do {                                                                                         \
        cudaError_t ak_cu_e_ = (call);                                                           \
        if (ak_cu_e_ != cudaSuccess)                                                             \
            return ak_fail(AK_ERR_CUDA, "%s:%d: %s: %s (%s)", __FILE__, __LINE__, #call,          \
                           cudaGetErrorName(ak_cu_e_), cudaGetErrorString(ak_cu_e_));             \
    } while (0)

/* Checks the launch just made (configuration errors are reported at once; faults in the kernel
   surface at the next synchronising call). */
#define AK_CUDA_CHECK_LAUNCH(what)                                                               \
    do {                                                                                         \
        cudaError_t ak_cu_e_ = cudaGetLastError();                                               \
        if (ak_cu_e_ != cudaSuccess)                                                             \
            return ak_fail(AK_ERR_CUDA, "launch of %s failed: %s (%s)", what,                    \
                           cudaGetErrorName(ak_cu_e_), cudaGetErrorString(ak_cu_e_));             \
    } while (0)

static inline cudaStream_t ak_stream(const ak_context *ctx) { return (cudaStream_t)ctx->stream; }

/* Every entry point selects the context's device first (multi-GPU safety). */
#define AK_CUDA_ENTER(ctx) AK_CUDA_TRY(cudaSetDevice((ctx)->device_id))

/* Launches a kernel of one argument pointer list (cudaLaunchKernelExC) on the context's stream as
   a programmatic dependent launch: its CTAs may start during the previous kernel's tail, so the
   boundary between the sparse decode kernels and the next call's costs less (about 0.35 us per
   boundary in a replayed graph on H100, scripts/launch_gap.cu). The kernel must call
   ak_grid_dep_wait (ptx.cuh) before its first global memory access; the sparse decode kernels
   release their dependents (ak_grid_dep_launch) when their epilogue starts. */
static inline cudaError_t ak_launch_pdl(const ak_context *ctx, const void *fn, unsigned grid, unsigned block,
                                        size_t smem, void **args) {
    cudaLaunchAttribute at[1];
    at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    at[0].val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.gridDim = dim3(grid);
    cfg.blockDim = dim3(block);
    cfg.dynamicSmemBytes = smem;
    cfg.stream = ak_stream(ctx);
    cfg.attrs = at;
    cfg.numAttrs = 1;
    return cudaLaunchKernelExC(&cfg, fn, args);
}

static inline int ak_ceil_div_i64(int64_t a, int64_t b) { return (int)((a + b - 1) / b); }

/* Blocks for `items` work items, per_block per block, at most cap_per_sm blocks per SM (a grid-stride
   kernel strides over the rest). */
static inline int ak_grid_cap(const ak_context *ctx, int64_t items, int per_block, int cap_per_sm) {
    int64_t blocks = (items + per_block - 1) / per_block;
    const int64_t cap = (int64_t)(ctx->info.sm_count > 0 ? ctx->info.sm_count : 132) * cap_per_sm;
    if (blocks > cap) blocks = cap;
    return blocks < 1 ? 1 : (int)blocks;
}

/* log2(page_size) when it is a power of two (every common size), else -1: kernels find a slot's
   page by a shift instead of a 32-bit division (~20 instructions) where they can. */
static inline int32_t ak_page_shift(int32_t page_size) {
    for (int32_t k = 0; k < 31; k++)
        if (page_size == (int32_t)1 << k) return k;
    return -1;
}

#endif /* AK_CUDA_COMMON_CUH */
