/*
 * internal.h -- what every op family shares inside the library: the context, error reporting,
 * argument validation and the CPU parallel-for. Not installed.
 */
#ifndef AK_INTERNAL_H
#define AK_INTERNAL_H

#include "attnkit.h"

#include <stdarg.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- errors ----------------------------------------------------------------------------------- */

/* Records the detail line for this thread and returns s. printf-style. */
ak_status ak_fail(ak_status s, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
void ak_clear_error(void);

/* Propagates a failing status. */
#define AK_TRY(expr)                                                                              \
    do {                                                                                          \
        ak_status ak_try_s_ = (expr);                                                             \
        if (ak_try_s_ != AK_OK) return ak_try_s_;                                                 \
    } while (0)

/* ---- context ---------------------------------------------------------------------------------- */

typedef struct ak_threadpool ak_threadpool;
struct ak_cuda_state; /* defined by the CUDA backend */

struct ak_context {
    ak_backend backend;
    int32_t num_threads;
    int32_t device_id;
    void *stream;
    ak_threadpool *pool;          /* CPU backend */
    struct ak_cuda_state *cuda;   /* CUDA backend */
    ak_device_info info;
};

/* Validates ctx and returns the device tensors of this context must live on. */
ak_status ak_check_context(const ak_context *ctx, const char *fn);
ak_device ak_ctx_device(const ak_context *ctx);

/* ---- CPU parallel-for --------------------------------------------------------------------------- */

/* fn(arg, item, thread) is called once for every item in [0, n); `thread` in [0, num_threads)
   identifies the calling worker (index into per-thread scratch). Items are claimed dynamically;
   results must not depend on which thread runs an item. */
typedef void (*ak_parallel_fn)(void *arg, int64_t item, int32_t thread);
void ak_parallel_for(ak_context *ctx, int64_t n, ak_parallel_fn fn, void *arg);

ak_status ak_threadpool_create(int32_t num_threads, ak_threadpool **out);
void ak_threadpool_destroy(ak_threadpool *pool);

/* ---- tensor validation -------------------------------------------------------------------------- */
/*
 * Each check names the function and the argument in its detail line, e.g.
 *   "ak_mla_decode: q: ndim is 3, expected 4 ([b, s_q, h_q, d_qk])".
 * `dims` lists the expected extents; -1 accepts any extent (returned through the tensor itself).
 */
typedef struct ak_tcheck {
    const char *fn;     /* public function name */
    const char *arg;    /* argument name */
    const char *shape;  /* shape text for messages, "[b, s_q, h_q, d_qk]" */
} ak_tcheck;

/* Non-NULL descriptor with non-NULL data (unless it has zero elements), ndim in range,
   non-negative shape, innermost stride 1 (when the innermost extent > 1), on the context's device. */
ak_status ak_check_tensor(const ak_context *ctx, const ak_tcheck *c, const ak_tensor *t);
/* ak_check_tensor plus ndim and the listed extents (-1 = any). */
ak_status ak_check_shape(const ak_context *ctx, const ak_tcheck *c, const ak_tensor *t,
                         int32_t ndim, const int64_t *dims);
/* dtype is one of the `n` listed. */
ak_status ak_check_dtype(const ak_tcheck *c, const ak_tensor *t, int32_t n, const ak_dtype *ok);
/* All strides form a dense row-major tensor. */
ak_status ak_check_contiguous(const ak_tcheck *c, const ak_tensor *t);

/* Element offset of index idx[0..ndim-1]. */
static inline int64_t ak_tensor_offset(const ak_tensor *t, const int64_t *idx) {
    int64_t off = 0;
    for (int32_t i = 0; i < t->ndim; i++) off += idx[i] * t->strides[i];
    return off;
}

/* Reads element i of a 1-D int32 tensor (any stride). */
static inline int32_t ak_i32_at(const ak_tensor *t, int64_t i) {
    return ((const int32_t *)t->data)[i * t->strides[0]];
}

/* ---- cache helpers ------------------------------------------------------------------------------ */

/* Validates the cache descriptor for `fn`, that it lives on the context's device, and (when
   `want` is not NULL, `nwant` entries) that its layout is one of the listed. */
ak_status ak_check_cache(const ak_context *ctx, const char *fn, const char *arg, const ak_cache *c,
                         int32_t nwant, const ak_layout *want);
/* Effective page stride (K pool) in bytes: the descriptor's, or the layout minimum. */
int64_t ak_cache_stride(const ak_cache *c);
int64_t ak_cache_v_stride(const ak_cache *c);
/* num_pages * page_size. */
static inline int64_t ak_cache_capacity(const ak_cache *c) {
    return (int64_t)c->num_pages * (int64_t)c->page_size;
}
const char *ak_layout_name(ak_layout l);

/* Overflow-checked arithmetic for sizes. Return 0 on overflow. */
static inline int ak_mul_i64(int64_t a, int64_t b, int64_t *r) {
    return !__builtin_mul_overflow(a, b, r);
}
static inline int ak_add_i64(int64_t a, int64_t b, int64_t *r) {
    return !__builtin_add_overflow(a, b, r);
}

#ifdef __cplusplus
}
#endif

#endif /* AK_INTERNAL_H */
