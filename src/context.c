/* context.c -- backend selection and the context object. */
#include "common/internal.h"
#include "cuda/cuda_backend.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int32_t online_cores(void) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : n > 1024 ? 1024 : (int32_t)n;
}

ak_device ak_ctx_device(const ak_context *ctx) {
    ak_device d;
    d.type = ctx->backend == AK_BACKEND_CUDA ? AK_DEVICE_CUDA : AK_DEVICE_CPU;
    d.id = ctx->backend == AK_BACKEND_CUDA ? ctx->device_id : 0;
    return d;
}

ak_status ak_check_context(const ak_context *ctx, const char *fn) {
    if (ctx == NULL) return ak_fail(AK_ERR_INVALID_ARGUMENT, "%s: ctx is NULL", fn);
    if (ctx->backend != AK_BACKEND_CPU && ctx->backend != AK_BACKEND_CUDA)
        return ak_fail(AK_ERR_MISUSE, "%s: ctx is not a live context", fn);
    return AK_OK;
}

static void cpu_info(ak_context *c) {
    memset(&c->info, 0, sizeof c->info);
    c->info.backend = AK_BACKEND_CPU;
    snprintf(c->info.name, sizeof c->info.name, "cpu (%d threads)", (int)c->num_threads);
    c->info.sm_count = c->num_threads;
    /* Conservative defaults for the cost model until a bench measures them. */
    c->info.copy_bytes_per_s = 10e9;
    c->info.bf16_flops_per_s = 20e9 * c->num_threads;
}

ak_status ak_context_create(const ak_context_options *opts, ak_context **out) {
    const char *fn = "ak_context_create";
    if (out == NULL) return ak_fail(AK_ERR_INVALID_ARGUMENT, "%s: out is NULL", fn);
    *out = NULL;
    ak_context_options o;
    memset(&o, 0, sizeof o);
    if (opts != NULL) o = *opts;
    if (o.backend != AK_BACKEND_AUTO && o.backend != AK_BACKEND_CPU && o.backend != AK_BACKEND_CUDA)
        return ak_fail(AK_ERR_INVALID_ARGUMENT, "%s: backend %d, expected AUTO (0), CPU (1) or CUDA (2)",
                       fn, (int)o.backend);
    if (o.num_threads < 0 || o.num_threads > 1024)
        return ak_fail(AK_ERR_INVALID_ARGUMENT, "%s: num_threads %d, expected 0..1024", fn,
                       (int)o.num_threads);
    if (o.device_id < 0)
        return ak_fail(AK_ERR_INVALID_ARGUMENT, "%s: device_id %d, expected >= 0", fn,
                       (int)o.device_id);
    ak_context *c = (ak_context *)calloc(1, sizeof *c);
    if (c == NULL) return ak_fail(AK_ERR_OUT_OF_MEMORY, "%s: context", fn);
    c->num_threads = o.num_threads > 0 ? o.num_threads : online_cores();
    c->device_id = o.device_id;
    c->stream = o.stream;
    ak_backend want = o.backend;
    if (want == AK_BACKEND_AUTO) want = ak_cuda_available() ? AK_BACKEND_CUDA : AK_BACKEND_CPU;
    c->backend = want;
    ak_status s;
    if (want == AK_BACKEND_CUDA) {
        s = ak_cuda_context_init(c);
    } else {
        s = ak_threadpool_create(c->num_threads, &c->pool);
        if (s == AK_OK) cpu_info(c);
    }
    if (s != AK_OK) {
        ak_context_destroy(c);
        return s;
    }
    *out = c;
    ak_clear_error();
    return AK_OK;
}

void ak_context_destroy(ak_context *ctx) {
    if (ctx == NULL) return;
    if (ctx->cuda != NULL) ak_cuda_context_fini(ctx);
    ak_threadpool_destroy(ctx->pool);
    ctx->backend = (ak_backend)-1; /* a stale pointer fails ak_check_context */
    free(ctx);
}

ak_backend ak_context_backend(const ak_context *ctx) {
    return ctx != NULL ? ctx->backend : AK_BACKEND_AUTO;
}

ak_device ak_context_device(const ak_context *ctx) {
    ak_device d = {AK_DEVICE_CPU, 0};
    return ctx != NULL ? ak_ctx_device(ctx) : d;
}

int32_t ak_context_num_threads(const ak_context *ctx) { return ctx != NULL ? ctx->num_threads : 0; }

ak_status ak_context_set_stream(ak_context *ctx, void *stream) {
    AK_TRY(ak_check_context(ctx, "ak_context_set_stream"));
    if (ctx->backend != AK_BACKEND_CUDA && stream != NULL)
        return ak_fail(AK_ERR_INVALID_ARGUMENT,
                       "ak_context_set_stream: stream %p given to a CPU context", stream);
    ctx->stream = stream;
    return AK_OK;
}

ak_status ak_context_device_info(const ak_context *ctx, ak_device_info *out) {
    AK_TRY(ak_check_context(ctx, "ak_context_device_info"));
    if (out == NULL) return ak_fail(AK_ERR_INVALID_ARGUMENT, "ak_context_device_info: out is NULL");
    *out = ctx->info;
    return AK_OK;
}

ak_status ak_context_set_ceilings(ak_context *ctx, double copy_bytes_per_s, double bf16_flops_per_s) {
    AK_TRY(ak_check_context(ctx, "ak_context_set_ceilings"));
    if (!(copy_bytes_per_s >= 0.0) || !(bf16_flops_per_s >= 0.0))
        return ak_fail(AK_ERR_INVALID_ARGUMENT,
                       "ak_context_set_ceilings: copy %g B/s, bf16 %g FLOP/s, expected >= 0",
                       copy_bytes_per_s, bf16_flops_per_s);
    if (copy_bytes_per_s > 0.0) ctx->info.copy_bytes_per_s = copy_bytes_per_s;
    if (bf16_flops_per_s > 0.0) ctx->info.bf16_flops_per_s = bf16_flops_per_s;
    return AK_OK;
}

ak_status ak_context_synchronize(ak_context *ctx) {
    AK_TRY(ak_check_context(ctx, "ak_context_synchronize"));
    if (ctx->backend == AK_BACKEND_CUDA) return ak_cuda_synchronize(ctx);
    return AK_OK;
}
