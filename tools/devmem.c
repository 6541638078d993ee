/* devmem.c -- see devmem.h. */
#include "devmem.h"

#include <stdlib.h>
#include <string.h>

#ifdef AK_HAVE_CUDA
#include <cuda_runtime.h>
#endif

#ifdef AK_HAVE_CUDA
static int on_cuda(ak_context *ctx) { return ak_context_backend(ctx) == AK_BACKEND_CUDA; }
#endif

void *ak_dev_alloc(ak_context *ctx, size_t bytes) {
    if (bytes == 0) bytes = 64;
#ifdef AK_HAVE_CUDA
    if (on_cuda(ctx)) {
        void *p = NULL;
        if (cudaSetDevice(ak_context_device(ctx).id) != cudaSuccess) return NULL;
        if (cudaMalloc(&p, bytes) != cudaSuccess) {
            cudaGetLastError();
            return NULL;
        }
        return p;
    }
#endif
    (void)ctx;
    void *p = NULL;
    if (posix_memalign(&p, 64, (bytes + 63) / 64 * 64) != 0) return NULL;
    return p;
}

void ak_dev_free(ak_context *ctx, void *p) {
    if (p == NULL) return;
#ifdef AK_HAVE_CUDA
    if (on_cuda(ctx)) {
        cudaFree(p);
        return;
    }
#endif
    (void)ctx;
    free(p);
}

ak_status ak_dev_upload(ak_context *ctx, void *dst, const void *src, size_t bytes) {
#ifdef AK_HAVE_CUDA
    if (on_cuda(ctx))
        return cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice) == cudaSuccess ? AK_OK : AK_ERR_CUDA;
#endif
    (void)ctx;
    memcpy(dst, src, bytes);
    return AK_OK;
}

ak_status ak_dev_download(ak_context *ctx, void *dst, const void *src, size_t bytes) {
#ifdef AK_HAVE_CUDA
    if (on_cuda(ctx)) {
        if (ak_context_synchronize(ctx) != AK_OK) return AK_ERR_CUDA;
        return cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost) == cudaSuccess ? AK_OK : AK_ERR_CUDA;
    }
#endif
    (void)ctx;
    memcpy(dst, src, bytes);
    return AK_OK;
}

ak_status ak_dev_memset(ak_context *ctx, void *dst, int byte, size_t bytes) {
#ifdef AK_HAVE_CUDA
    if (on_cuda(ctx)) return cudaMemset(dst, byte, bytes) == cudaSuccess ? AK_OK : AK_ERR_CUDA;
#endif
    (void)ctx;
    memset(dst, byte, bytes);
    return AK_OK;
}

ak_tensor ak_dev_tensor(ak_context *ctx, void *data, ak_dtype dtype, int32_t ndim,
                        const int64_t *shape) {
    return ak_tensor_make_on(data, ak_context_device(ctx), dtype, ndim, shape);
}

void *ak_dev_clone(ak_context *ctx, const void *host, size_t bytes) {
    void *p = ak_dev_alloc(ctx, bytes);
    if (p != NULL && ak_dev_upload(ctx, p, host, bytes) != AK_OK) {
        ak_dev_free(ctx, p);
        return NULL;
    }
    return p;
}
