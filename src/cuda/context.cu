/* context.cu -- CUDA context: device selection, properties, stream synchronisation. */
#include "cuda/cuda_backend.h"
#include "cuda/cuda_common.cuh"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern "C" int ak_cuda_available(void) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError(); /* no driver or no device: not sticky, clear it */
        return 0;
    }
    return n > 0;
}

extern "C" ak_status ak_cuda_context_init(ak_context *ctx) {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n == 0) {
        cudaGetLastError();
        return ak_fail(AK_ERR_NO_DEVICE, "ak_context_create: backend CUDA: no CUDA device (%s)",
                       e != cudaSuccess ? cudaGetErrorName(e) : "device count 0");
    }
    if (ctx->device_id >= n)
        return ak_fail(AK_ERR_INVALID_ARGUMENT,
                       "ak_context_create: device_id %d, but only %d CUDA device(s) exist",
                       (int)ctx->device_id, n);
    AK_CUDA_TRY(cudaSetDevice(ctx->device_id));
    ak_cuda_state *st = (ak_cuda_state *)calloc(1, sizeof *st);
    if (st == NULL) return ak_fail(AK_ERR_OUT_OF_MEMORY, "ak_context_create: CUDA state");
    ctx->cuda = st;
    AK_CUDA_TRY(cudaGetDeviceProperties(&st->prop, ctx->device_id));
    if (st->prop.major != 9)
        return ak_fail(AK_ERR_UNSUPPORTED,
                       "ak_context_create: device %d (%s) is sm_%d%d; attnkit's kernels are built "
                       "for sm_90a (Hopper); use backend CPU",
                       (int)ctx->device_id, st->prop.name, st->prop.major, st->prop.minor);
    ak_device_info *in = &ctx->info;
    memset(in, 0, sizeof *in);
    in->backend = AK_BACKEND_CUDA;
    snprintf(in->name, sizeof in->name, "%s", st->prop.name);
    in->sm_count = st->prop.multiProcessorCount;
    in->cc_major = st->prop.major;
    in->cc_minor = st->prop.minor;
    in->smem_per_block_optin = (int64_t)st->prop.sharedMemPerBlockOptin;
    in->l2_bytes = st->prop.l2CacheSize;
    in->global_mem_bytes = (int64_t)st->prop.totalGlobalMem;
    /* Estimates until `attnkit bench` measures them (targets.md 1.2: ~88% of spec copy, ~75% GEMM). */
    int bus = 0, clk = 0;
    cudaDeviceGetAttribute(&bus, cudaDevAttrGlobalMemoryBusWidth, ctx->device_id);
    cudaDeviceGetAttribute(&clk, cudaDevAttrMemoryClockRate, ctx->device_id);
    double spec_bw = 2.0 * (double)clk * 1e3 * (double)bus / 8.0;
    in->copy_bytes_per_s = spec_bw > 0 ? 0.88 * spec_bw : 3.0e12;
    in->bf16_flops_per_s = 0.745 * 989.4e12 * in->sm_count / 132.0;
    return AK_OK;
}

extern "C" void ak_cuda_context_fini(ak_context *ctx) {
    free(ctx->cuda);
    ctx->cuda = NULL;
}

extern "C" ak_status ak_cuda_synchronize(ak_context *ctx) {
    AK_CUDA_ENTER(ctx);
    AK_CUDA_TRY(cudaStreamSynchronize(ak_stream(ctx)));
    return AK_OK;
}
