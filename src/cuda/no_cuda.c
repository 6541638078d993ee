/* no_cuda.c -- the CUDA context hooks of a build without CUDA: no device is ever available. */
#include "cuda/cuda_backend.h"

int ak_cuda_available(void) { return 0; }

ak_status ak_cuda_context_init(ak_context *ctx) {
    (void)ctx;
    return ak_fail(AK_ERR_NO_DEVICE,
                   "ak_context_create: backend CUDA: this attnkit was built without CUDA "
                   "(configure with nvcc on the PATH and -DAK_CUDA=ON)");
}

void ak_cuda_context_fini(ak_context *ctx) { (void)ctx; }

ak_status ak_cuda_synchronize(ak_context *ctx) {
    (void)ctx;
    return AK_OK;
}
