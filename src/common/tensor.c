/* tensor.c -- tensor descriptors and the argument checks every public function runs. */
#include "common/internal.h"

#include <stdio.h>
#include <string.h>

int32_t ak_dtype_size(ak_dtype t) {
    switch (t) {
    case AK_DTYPE_F32: case AK_DTYPE_I32: return 4;
    case AK_DTYPE_BF16: case AK_DTYPE_F16: return 2;
    case AK_DTYPE_E4M3: case AK_DTYPE_UE8M0: case AK_DTYPE_U8: return 1;
    case AK_DTYPE_I64: return 8;
    default: return 0;
    }
}

const char *ak_dtype_name(ak_dtype t) {
    static const char *names[AK_DTYPE_COUNT_] = {"f32", "bf16", "f16", "e4m3",
                                                 "ue8m0", "i32", "i64", "u8"};
    if ((unsigned)t >= (unsigned)AK_DTYPE_COUNT_) return "?";
    return names[t];
}

ak_tensor ak_tensor_make_on(void *data, ak_device device, ak_dtype dtype, int32_t ndim,
                            const int64_t *shape) {
    ak_tensor t;
    memset(&t, 0, sizeof t);
    t.data = data;
    t.device = device;
    t.dtype = dtype;
    if (ndim < 0 || ndim > AK_MAX_DIMS || (ndim > 0 && shape == NULL)) {
        t.ndim = -1; /* rejected by every check */
        return t;
    }
    t.ndim = ndim;
    int64_t stride = 1;
    for (int32_t i = ndim - 1; i >= 0; i--) {
        t.shape[i] = shape[i];
        t.strides[i] = stride;
        stride *= shape[i] > 0 ? shape[i] : 1;
    }
    return t;
}

ak_tensor ak_tensor_make(void *data, ak_dtype dtype, int32_t ndim, const int64_t *shape) {
    ak_device cpu = {AK_DEVICE_CPU, 0};
    return ak_tensor_make_on(data, cpu, dtype, ndim, shape);
}

int64_t ak_tensor_numel(const ak_tensor *t) {
    if (t == NULL || t->ndim < 0 || t->ndim > AK_MAX_DIMS) return 0;
    int64_t n = 1;
    for (int32_t i = 0; i < t->ndim; i++) {
        if (t->shape[i] <= 0) return 0;
        if (!ak_mul_i64(n, t->shape[i], &n)) return -1;
    }
    return n;
}

static const char *device_name(ak_device_type t) {
    return t == AK_DEVICE_CPU ? "cpu" : t == AK_DEVICE_CUDA ? "cuda" : "unknown";
}

ak_status ak_check_tensor(const ak_context *ctx, const ak_tcheck *c, const ak_tensor *t) {
    if (t == NULL)
        return ak_fail(AK_ERR_INVALID_ARGUMENT, "%s: %s is NULL, expected a tensor %s", c->fn,
                       c->arg, c->shape);
    if (t->ndim < 0 || t->ndim > AK_MAX_DIMS)
        return ak_fail(AK_ERR_INVALID_ARGUMENT, "%s: %s: ndim is %d, expected 0..%d", c->fn,
                       c->arg, (int)t->ndim, AK_MAX_DIMS);
    if (ak_dtype_size(t->dtype) == 0)
        return ak_fail(AK_ERR_INVALID_ARGUMENT, "%s: %s: dtype code %d is not an ak_dtype", c->fn,
                       c->arg, (int)t->dtype);
    int64_t numel = 1;
    for (int32_t i = 0; i < t->ndim; i++) {
        if (t->shape[i] < 0)
            return ak_fail(AK_ERR_INVALID_ARGUMENT, "%s: %s: shape[%d] is %lld, expected >= 0",
                           c->fn, c->arg, (int)i, (long long)t->shape[i]);
        if (!ak_mul_i64(numel, t->shape[i], &numel))
            return ak_fail(AK_ERR_INVALID_ARGUMENT, "%s: %s: element count overflows int64",
                           c->fn, c->arg);
    }
    /* the byte span of the tensor must be representable */
    int64_t span = 0;
    for (int32_t i = 0; i < t->ndim && numel > 0; i++) {
        int64_t s = t->strides[i] < 0 ? -t->strides[i] : t->strides[i], part;
        if (!ak_mul_i64(s, t->shape[i] - 1, &part) || !ak_add_i64(span, part, &span) ||
            !ak_mul_i64(span, 8, &part))
            return ak_fail(AK_ERR_INVALID_ARGUMENT, "%s: %s: strides overflow the address range",
                           c->fn, c->arg);
    }
    if (numel > 0 && t->data == NULL)
        return ak_fail(AK_ERR_INVALID_ARGUMENT, "%s: %s: data is NULL for %lld elements", c->fn,
                       c->arg, (long long)numel);
    if (t->ndim > 0 && t->shape[t->ndim - 1] > 1 && t->strides[t->ndim - 1] != 1)
        return ak_fail(AK_ERR_INVALID_ARGUMENT,
                       "%s: %s: innermost stride is %lld, expected 1 (last dim contiguous)", c->fn,
                       c->arg, (long long)t->strides[t->ndim - 1]);
    if (ctx != NULL && numel > 0) {
        ak_device d = ak_ctx_device(ctx);
        if (t->device.type != d.type || (d.type == AK_DEVICE_CUDA && t->device.id != d.id))
            return ak_fail(AK_ERR_INVALID_ARGUMENT,
                           "%s: %s is on %s:%d, but the context runs on %s:%d", c->fn, c->arg,
                           device_name(t->device.type), (int)t->device.id, device_name(d.type),
                           (int)d.id);
    }
    return AK_OK;
}

ak_status ak_check_shape(const ak_context *ctx, const ak_tcheck *c, const ak_tensor *t,
                         int32_t ndim, const int64_t *dims) {
    AK_TRY(ak_check_tensor(ctx, c, t));
    if (t->ndim != ndim)
        return ak_fail(AK_ERR_INVALID_ARGUMENT, "%s: %s: ndim is %d, expected %d (%s)", c->fn,
                       c->arg, (int)t->ndim, (int)ndim, c->shape);
    for (int32_t i = 0; i < ndim; i++) {
        if (dims != NULL && dims[i] >= 0 && t->shape[i] != dims[i])
            return ak_fail(AK_ERR_INVALID_ARGUMENT, "%s: %s: shape[%d] is %lld, expected %lld (%s)",
                           c->fn, c->arg, (int)i, (long long)t->shape[i], (long long)dims[i],
                           c->shape);
    }
    return AK_OK;
}

ak_status ak_check_dtype(const ak_tcheck *c, const ak_tensor *t, int32_t n, const ak_dtype *ok) {
    char list[128];
    size_t used = 0;
    list[0] = '\0';
    for (int32_t i = 0; i < n; i++) {
        if (t->dtype == ok[i]) return AK_OK;
        int w = snprintf(list + used, sizeof list - used, "%s%s", i ? ", " : "",
                         ak_dtype_name(ok[i]));
        if (w > 0 && (size_t)w < sizeof list - used) used += (size_t)w;
    }
    return ak_fail(AK_ERR_INVALID_ARGUMENT, "%s: %s: dtype is %s, expected one of {%s}", c->fn,
                   c->arg, ak_dtype_name(t->dtype), list);
}

ak_status ak_check_contiguous(const ak_tcheck *c, const ak_tensor *t) {
    int64_t want = 1;
    for (int32_t i = t->ndim - 1; i >= 0; i--) {
        if (t->shape[i] > 1 && t->strides[i] != want)
            return ak_fail(AK_ERR_INVALID_ARGUMENT,
                           "%s: %s: stride[%d] is %lld, expected %lld (a dense row-major tensor)",
                           c->fn, c->arg, (int)i, (long long)t->strides[i], (long long)want);
        want *= t->shape[i] > 0 ? t->shape[i] : 1;
    }
    return AK_OK;
}
