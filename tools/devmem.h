/* devmem.h -- buffers on a context's device for the tools (bench, check, run): host memory for a
   CPU context, cudaMalloc'd memory for a CUDA context. The tools stay plain C. */
#ifndef AK_TOOLS_DEVMEM_H
#define AK_TOOLS_DEVMEM_H

#include <stddef.h>
#include <stdint.h>

#include "attnkit.h"

void *ak_dev_alloc(ak_context *ctx, size_t bytes);         /* NULL on failure; 64-byte aligned */
void ak_dev_free(ak_context *ctx, void *p);                 /* NULL is a no-op */
/* Copies and fills; return AK_OK or AK_ERR_CUDA. All synchronous. */
ak_status ak_dev_upload(ak_context *ctx, void *dst, const void *src, size_t bytes);
ak_status ak_dev_download(ak_context *ctx, void *dst, const void *src, size_t bytes);
ak_status ak_dev_memset(ak_context *ctx, void *dst, int byte, size_t bytes);
/* A tensor descriptor on the context's device over `data` (contiguous). */
ak_tensor ak_dev_tensor(ak_context *ctx, void *data, ak_dtype dtype, int32_t ndim,
                        const int64_t *shape);
/* Convenience: allocates a device copy of host data (NULL on failure). */
void *ak_dev_clone(ak_context *ctx, const void *host, size_t bytes);

#endif
