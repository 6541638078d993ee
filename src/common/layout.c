/* layout.c -- the KV-cache layout registry and the cache descriptor. */
#include "common/internal.h"
#include "common/kv_records.h"
#include "common/numeric.h"

#include <ctype.h>
#include <string.h>

/* Largest page size any attnkit layout accepts (tables are built for 1..1024 as well). */
#define AK_MAX_PAGE_SIZE 1024

/* One table, indexed by the pinned enum values; ids 7 and 8 are reserved. */
static const ak_layout_traits k_traits[AK_LAYOUT_END_] = {
    [AK_LAYOUT_MLA_BF16] = {AK_LAYOUT_MLA_BF16, "MLA_BF16", 1152, 512, 64, 576, 512, AK_DTYPE_BF16,
                            AK_DTYPE_BF16, AK_SCALE_NONE, 0, 0, 0, 0},
    [AK_LAYOUT_MLA_FP8_PERTENSOR] = {AK_LAYOUT_MLA_FP8_PERTENSOR, "MLA_FP8_PERTENSOR", 576, 512, 64,
                                     576, 512, AK_DTYPE_E4M3, AK_DTYPE_E4M3, AK_SCALE_PER_TENSOR,
                                     0, 0, 0, 0},
    [AK_LAYOUT_DSA_FP8_BLOCKSCALE] = {AK_LAYOUT_DSA_FP8_BLOCKSCALE, "DSA_FP8_BLOCKSCALE", 656, 512,
                                      64, 576, 512, AK_DTYPE_E4M3, AK_DTYPE_BF16,
                                      AK_SCALE_FP32_PER_128, 128, 0, 0, 0},
    [AK_LAYOUT_DSV4_FP8_UE8M0] = {AK_LAYOUT_DSV4_FP8_UE8M0, "DSV4_FP8_UE8M0", 584, 448, 64, 512,
                                  512, AK_DTYPE_E4M3, AK_DTYPE_BF16, AK_SCALE_UE8M0_PER_64, 64, 1,
                                  0, AK_DSV4_PAGE_ALIGN},
    [AK_LAYOUT_INDEXER_FP8] = {AK_LAYOUT_INDEXER_FP8, "INDEXER_FP8", 132, 128, 0, 128, 0,
                               AK_DTYPE_E4M3, AK_DTYPE_E4M3, AK_SCALE_FP32_PER_TOKEN, 128, 1,
                               AK_INDEXER_PAGE, 0},
    [AK_LAYOUT_INDEXER_FP4] = {AK_LAYOUT_INDEXER_FP4, "INDEXER_FP4", 68, 128, 0, 128, 0,
                               AK_DTYPE_U8, AK_DTYPE_U8, AK_SCALE_UE8M0_PER_32, 32, 1,
                               AK_INDEXER_PAGE, 0},
    [AK_LAYOUT_MHA_NHD] = {AK_LAYOUT_MHA_NHD, "MHA_NHD", 0, 0, 0, 0, 0, AK_DTYPE_BF16,
                           AK_DTYPE_BF16, AK_SCALE_NONE, 0, 0, 0, 0},
    [AK_LAYOUT_MHA_HND] = {AK_LAYOUT_MHA_HND, "MHA_HND", 0, 0, 0, 0, 0, AK_DTYPE_BF16,
                           AK_DTYPE_BF16, AK_SCALE_NONE, 0, 0, 0, 0},
};

static int layout_known(ak_layout l) {
    return (unsigned)l < (unsigned)AK_LAYOUT_END_ && k_traits[l].name != NULL;
}

static int layout_is_mha(ak_layout l) { return l == AK_LAYOUT_MHA_NHD || l == AK_LAYOUT_MHA_HND; }

const char *ak_layout_name(ak_layout l) { return layout_known(l) ? k_traits[l].name : "INVALID"; }

ak_status ak_layout_traits_get(ak_layout layout, ak_layout_traits *out) {
    if (out == NULL) return ak_fail(AK_ERR_INVALID_ARGUMENT, "ak_layout_traits_get: out is NULL");
    if (!layout_known(layout))
        return ak_fail(AK_ERR_INVALID_ARGUMENT,
                       "ak_layout_traits_get: layout %d is not a registered layout (1-6, 9, 10)",
                       (int)layout);
    *out = k_traits[layout];
    return AK_OK;
}

ak_layout ak_layout_from_name(const char *name) {
    if (name == NULL) return AK_LAYOUT_INVALID;
    for (int i = 1; i < AK_LAYOUT_END_; i++) {
        const char *n = k_traits[i].name;
        if (n == NULL) continue;
        size_t j = 0;
        while (n[j] && name[j] && toupper((unsigned char)name[j]) == n[j]) j++;
        if (n[j] == '\0' && name[j] == '\0') return (ak_layout)i;
    }
    return AK_LAYOUT_INVALID;
}

static ak_status check_page_size(const char *fn, ak_layout layout, int32_t page_size) {
    if (page_size < 1 || page_size > AK_MAX_PAGE_SIZE)
        return ak_fail(AK_ERR_INVALID_ARGUMENT, "%s: page_size %d is out of range, expected 1..%d",
                       fn, (int)page_size, AK_MAX_PAGE_SIZE);
    int32_t fixed = k_traits[layout].fixed_page_size;
    if (fixed != 0 && page_size != fixed)
        return ak_fail(AK_ERR_INVALID_ARGUMENT, "%s: layout %s needs page_size %d, got %d", fn,
                       k_traits[layout].name, (int)fixed, (int)page_size);
    return AK_OK;
}

/* Minimum page bytes for the non-MHA layouts. */
static int64_t fixed_page_bytes(ak_layout layout, int32_t page_size) {
    const ak_layout_traits *t = &k_traits[layout];
    int64_t raw = (int64_t)page_size * t->bytes_per_token;
    if (t->page_align > 0) raw = (raw + t->page_align - 1) / t->page_align * t->page_align;
    return raw;
}

ak_status ak_layout_page_bytes(ak_layout layout, int32_t page_size, int64_t *bytes) {
    const char *fn = "ak_layout_page_bytes";
    if (bytes == NULL) return ak_fail(AK_ERR_INVALID_ARGUMENT, "%s: bytes is NULL", fn);
    if (!layout_known(layout))
        return ak_fail(AK_ERR_INVALID_ARGUMENT, "%s: layout %d is not a registered layout", fn,
                       (int)layout);
    if (layout_is_mha(layout))
        return ak_fail(AK_ERR_INVALID_ARGUMENT,
                       "%s: %s page bytes depend on h_kv, head_dim and dtype; use "
                       "ak_cache_page_bytes", fn, k_traits[layout].name);
    AK_TRY(check_page_size(fn, layout, page_size));
    *bytes = fixed_page_bytes(layout, page_size);
    return AK_OK;
}

static int64_t mha_page_bytes(const ak_cache *c, int32_t dim) {
    return (int64_t)c->page_size * c->h_kv * dim * ak_dtype_size(c->elem_dtype);
}

int64_t ak_cache_stride(const ak_cache *c) {
    if (c->page_stride > 0) return c->page_stride;
    return layout_is_mha(c->layout) ? mha_page_bytes(c, c->head_dim)
                                    : fixed_page_bytes(c->layout, c->page_size);
}

int64_t ak_cache_v_stride(const ak_cache *c) {
    if (c->v_page_stride > 0) return c->v_page_stride;
    return mha_page_bytes(c, c->head_dim_v);
}

static ak_status validate(const char *fn, const char *arg, const ak_cache *c) {
    if (c == NULL) return ak_fail(AK_ERR_INVALID_ARGUMENT, "%s: %s is NULL", fn, arg);
    if (!layout_known(c->layout))
        return ak_fail(AK_ERR_INVALID_ARGUMENT,
                       "%s: %s.layout %d is not a registered layout (1-6, 9, 10)", fn, arg,
                       (int)c->layout);
    const ak_layout_traits *t = &k_traits[c->layout];
    if (c->num_pages < 0)
        return ak_fail(AK_ERR_INVALID_ARGUMENT, "%s: %s.num_pages is %d, expected >= 0", fn, arg,
                       (int)c->num_pages);
    AK_TRY(check_page_size(fn, c->layout, c->page_size));
    int64_t cap = (int64_t)c->num_pages * c->page_size;
    if (cap > INT32_MAX)
        return ak_fail(AK_ERR_INVALID_ARGUMENT,
                       "%s: %s: capacity %lld tokens exceeds 2^31-1 (slot ids are int32)", fn, arg,
                       (long long)cap);
    if (c->device.type != AK_DEVICE_CPU && c->device.type != AK_DEVICE_CUDA)
        return ak_fail(AK_ERR_INVALID_ARGUMENT, "%s: %s.device.type %d is not cpu (1) or cuda (2)",
                       fn, arg, (int)c->device.type);
    if (c->num_pages > 0 && c->data == NULL)
        return ak_fail(AK_ERR_INVALID_ARGUMENT, "%s: %s.data is NULL", fn, arg);
    if (!(c->k_scale >= 0.0f) || !ak_isfinite_f32(c->k_scale) || !(c->v_scale >= 0.0f) ||
        !ak_isfinite_f32(c->v_scale))
        return ak_fail(AK_ERR_INVALID_ARGUMENT,
                       "%s: %s: k_scale %g / v_scale %g must be finite and > 0 (0 means 1.0)", fn,
                       arg, (double)c->k_scale, (double)c->v_scale);
    int64_t min_stride;
    if (layout_is_mha(c->layout)) {
        if (c->elem_dtype != AK_DTYPE_BF16 && c->elem_dtype != AK_DTYPE_F16 &&
            c->elem_dtype != AK_DTYPE_E4M3)
            return ak_fail(AK_ERR_INVALID_ARGUMENT,
                           "%s: %s.elem_dtype is %s, expected one of {bf16, f16, e4m3}", fn, arg,
                           ak_dtype_name(c->elem_dtype));
        if (c->h_kv < 1 || c->h_kv > 256)
            return ak_fail(AK_ERR_INVALID_ARGUMENT, "%s: %s.h_kv is %d, expected 1..256", fn, arg,
                           (int)c->h_kv);
        if (c->head_dim < 1 || c->head_dim > 512 || c->head_dim_v < 1 || c->head_dim_v > 512)
            return ak_fail(AK_ERR_INVALID_ARGUMENT,
                           "%s: %s: head_dim %d / head_dim_v %d, expected 1..512", fn, arg,
                           (int)c->head_dim, (int)c->head_dim_v);
        if (c->num_pages > 0 && c->v_data == NULL)
            return ak_fail(AK_ERR_INVALID_ARGUMENT, "%s: %s.v_data is NULL (MHA needs a V pool)",
                           fn, arg);
        int64_t vmin = mha_page_bytes(c, c->head_dim_v);
        if (c->v_page_stride != 0 && c->v_page_stride < vmin)
            return ak_fail(AK_ERR_INVALID_ARGUMENT,
                           "%s: %s.v_page_stride %lld is below the page size %lld bytes", fn, arg,
                           (long long)c->v_page_stride, (long long)vmin);
        min_stride = mha_page_bytes(c, c->head_dim);
    } else {
        min_stride = fixed_page_bytes(c->layout, c->page_size);
    }
    if (c->page_stride < 0 || (c->page_stride != 0 && c->page_stride < min_stride))
        return ak_fail(AK_ERR_INVALID_ARGUMENT,
                       "%s: %s.page_stride %lld is below the %s page size of %lld bytes", fn, arg,
                       (long long)c->page_stride, t->name, (long long)min_stride);
    /* Kernels read records with 16-byte loads and decode fields in place, so an explicit stride
       keeps every field aligned: MLA strides are multiples of 16 bytes, MHA strides of the
       element size. */
    if (!layout_is_mha(c->layout) && c->page_stride % 16 != 0 && t->soa == 0)
        return ak_fail(AK_ERR_INVALID_ARGUMENT,
                       "%s: %s.page_stride %lld is not a multiple of 16 bytes (required by %s)",
                       fn, arg, (long long)c->page_stride, t->name);
    if (layout_is_mha(c->layout) && (c->page_stride % ak_dtype_size(c->elem_dtype) != 0 ||
                                     c->v_page_stride % ak_dtype_size(c->elem_dtype) != 0))
        return ak_fail(AK_ERR_INVALID_ARGUMENT,
                       "%s: %s: page_stride %lld / v_page_stride %lld are not multiples of the "
                       "%s element size", fn, arg, (long long)c->page_stride,
                       (long long)c->v_page_stride, ak_dtype_name(c->elem_dtype));
    if (t->page_align > 0 && c->page_stride % t->page_align != 0)
        return ak_fail(AK_ERR_INVALID_ARGUMENT,
                       "%s: %s.page_stride %lld is not a multiple of %d (required by %s)", fn, arg,
                       (long long)c->page_stride, (int)t->page_align, t->name);
    if (c->layout == AK_LAYOUT_INDEXER_FP8 && c->page_stride % 4 != 0)
        return ak_fail(AK_ERR_INVALID_ARGUMENT,
                       "%s: %s.page_stride %lld is not a multiple of 4 (INDEXER_FP8)", fn, arg,
                       (long long)c->page_stride);
    int64_t total;
    if (!ak_mul_i64(ak_cache_stride(c), c->num_pages, &total))
        return ak_fail(AK_ERR_INVALID_ARGUMENT, "%s: %s: pool size overflows int64", fn, arg);
    return AK_OK;
}

ak_status ak_cache_validate(const ak_cache *c) { return validate("ak_cache_validate", "cache", c); }

ak_status ak_check_cache(const ak_context *ctx, const char *fn, const char *arg, const ak_cache *c,
                         int32_t nwant, const ak_layout *want) {
    AK_TRY(validate(fn, arg, c));
    if (ctx != NULL && c->num_pages > 0) {
        ak_device d = ak_ctx_device(ctx);
        if (c->device.type != d.type || (d.type == AK_DEVICE_CUDA && c->device.id != d.id))
            return ak_fail(AK_ERR_INVALID_ARGUMENT,
                           "%s: %s lives on device type %d:%d, the context runs on %d:%d", fn, arg,
                           (int)c->device.type, (int)c->device.id, (int)d.type, (int)d.id);
    }
    if (want == NULL || nwant == 0) return AK_OK;
    char list[256];
    size_t used = 0;
    list[0] = '\0';
    for (int32_t i = 0; i < nwant; i++) {
        if (c->layout == want[i]) return AK_OK;
        size_t n = strlen(k_traits[want[i]].name);
        if (used + n + 3 < sizeof list) {
            if (i) { memcpy(list + used, ", ", 2); used += 2; }
            memcpy(list + used, k_traits[want[i]].name, n + 1);
            used += n;
        }
    }
    return ak_fail(AK_ERR_UNSUPPORTED, "%s: %s.layout is %s; supported: {%s}", fn, arg,
                   k_traits[c->layout].name, list);
}

ak_status ak_cache_init(ak_cache *c, ak_layout layout, void *data, int32_t num_pages,
                        int32_t page_size) {
    const char *fn = "ak_cache_init";
    if (c == NULL) return ak_fail(AK_ERR_INVALID_ARGUMENT, "%s: c is NULL", fn);
    if (layout_is_mha(layout))
        return ak_fail(AK_ERR_INVALID_ARGUMENT, "%s: %s needs ak_cache_init_mha", fn,
                       ak_layout_name(layout));
    ak_cache t;
    memset(&t, 0, sizeof t);
    t.layout = layout;
    t.device.type = AK_DEVICE_CPU;
    t.data = data;
    t.num_pages = num_pages;
    t.page_size = page_size;
    t.h_kv = 1;
    t.k_scale = 1.0f;
    t.v_scale = 1.0f;
    AK_TRY(validate(fn, "cache", &t));
    t.page_stride = ak_cache_stride(&t);
    *c = t;
    return AK_OK;
}

ak_status ak_cache_init_mha(ak_cache *c, ak_layout layout, ak_dtype elem_dtype, void *k_data,
                            void *v_data, int32_t num_pages, int32_t page_size, int32_t h_kv,
                            int32_t head_dim, int32_t head_dim_v) {
    const char *fn = "ak_cache_init_mha";
    if (c == NULL) return ak_fail(AK_ERR_INVALID_ARGUMENT, "%s: c is NULL", fn);
    if (!layout_is_mha(layout))
        return ak_fail(AK_ERR_INVALID_ARGUMENT, "%s: layout %s is not MHA_NHD or MHA_HND", fn,
                       ak_layout_name(layout));
    ak_cache t;
    memset(&t, 0, sizeof t);
    t.layout = layout;
    t.device.type = AK_DEVICE_CPU;
    t.data = k_data;
    t.v_data = v_data;
    t.num_pages = num_pages;
    t.page_size = page_size;
    t.elem_dtype = elem_dtype;
    t.h_kv = h_kv;
    t.head_dim = head_dim;
    t.head_dim_v = head_dim_v;
    t.k_scale = 1.0f;
    t.v_scale = 1.0f;
    AK_TRY(validate(fn, "cache", &t));
    t.page_stride = ak_cache_stride(&t);
    t.v_page_stride = ak_cache_v_stride(&t);
    *c = t;
    return AK_OK;
}

ak_status ak_cache_page_bytes(const ak_cache *c, int64_t *bytes) {
    if (bytes == NULL) return ak_fail(AK_ERR_INVALID_ARGUMENT, "ak_cache_page_bytes: bytes is NULL");
    AK_TRY(validate("ak_cache_page_bytes", "c", c));
    *bytes = layout_is_mha(c->layout) ? mha_page_bytes(c, c->head_dim)
                                      : fixed_page_bytes(c->layout, c->page_size);
    return AK_OK;
}

ak_status ak_cache_bytes(const ak_cache *c, int64_t *bytes, int64_t *v_bytes) {
    if (bytes == NULL) return ak_fail(AK_ERR_INVALID_ARGUMENT, "ak_cache_bytes: bytes is NULL");
    AK_TRY(validate("ak_cache_bytes", "c", c));
    *bytes = ak_cache_stride(c) * c->num_pages;
    if (v_bytes != NULL) *v_bytes = layout_is_mha(c->layout) ? ak_cache_v_stride(c) * c->num_pages : 0;
    return AK_OK;
}
