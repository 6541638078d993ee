/*
 * codec.c -- public entry points of the KV-cache codecs: ak_cache_write, ak_mha_cache_write,
 * ak_cache_gather, ak_mha_cache_gather, ak_cache_convert and ak_cache_audit. Each validates every
 * argument (descriptor, shapes, dtypes, strides, layout pairs, rules) and dispatches; values inside
 * tensors (slots, page ids, finiteness) are checked by the CPU backend before it writes.
 */
#include "common/internal.h"
#include "cpu/cpu.h"
#include "cuda/cuda_backend.h"

#include <stdint.h>

static const ak_layout k_mla_idx[] = {AK_LAYOUT_MLA_BF16, AK_LAYOUT_MLA_FP8_PERTENSOR,
                                      AK_LAYOUT_DSA_FP8_BLOCKSCALE, AK_LAYOUT_DSV4_FP8_UE8M0,
                                      AK_LAYOUT_INDEXER_FP8, AK_LAYOUT_INDEXER_FP4};
static const ak_layout k_mha[] = {AK_LAYOUT_MHA_NHD, AK_LAYOUT_MHA_HND};

static int is_mha(ak_layout l) { return l == AK_LAYOUT_MHA_NHD || l == AK_LAYOUT_MHA_HND; }
static int is_mla(ak_layout l) { return l >= AK_LAYOUT_MLA_BF16 && l <= AK_LAYOUT_DSV4_FP8_UE8M0; }

static const char *rule_name(ak_quant_rule r) {
    switch (r) {
    case AK_QUANT_DEFAULT: return "AK_QUANT_DEFAULT";
    case AK_QUANT_POW2: return "AK_QUANT_POW2";
    case AK_QUANT_FP32: return "AK_QUANT_FP32";
    case AK_QUANT_POW2_AMAX_FLOOR: return "AK_QUANT_POW2_AMAX_FLOOR";
    default: return "?";
    }
}

/* Rules a writer into `l` accepts (layouts.md 3): DEFAULT everywhere; POW2 for 656, 584 and the
   indexers; FP32 for 656 and INDEXER_FP8; POW2_AMAX_FLOOR for 584. */
static ak_status check_rule(const char *fn, ak_layout l, ak_quant_rule rule) {
    int ok;
    switch (rule) {
    case AK_QUANT_DEFAULT: ok = 1; break;
    case AK_QUANT_POW2:
        ok = l == AK_LAYOUT_DSA_FP8_BLOCKSCALE || l == AK_LAYOUT_DSV4_FP8_UE8M0 ||
             l == AK_LAYOUT_INDEXER_FP8 || l == AK_LAYOUT_INDEXER_FP4;
        break;
    case AK_QUANT_FP32: ok = l == AK_LAYOUT_DSA_FP8_BLOCKSCALE || l == AK_LAYOUT_INDEXER_FP8; break;
    case AK_QUANT_POW2_AMAX_FLOOR: ok = l == AK_LAYOUT_DSV4_FP8_UE8M0; break;
    default:
        return ak_fail(AK_ERR_INVALID_ARGUMENT,
                       "%s: rule %d is not an ak_quant_rule (0 DEFAULT, 1 POW2, 2 FP32, "
                       "3 POW2_AMAX_FLOOR)", fn, (int)rule);
    }
    if (!ok)
        return ak_fail(AK_ERR_INVALID_ARGUMENT,
                       "%s: rule %s does not apply to layout %s (POW2: 656/584/indexers, FP32: "
                       "656/INDEXER_FP8, POW2_AMAX_FLOOR: 584; DEFAULT: all)", fn, rule_name(rule),
                       ak_layout_name(l));
    return AK_OK;
}

static ak_status check_slots(const ak_context *ctx, const char *fn, const ak_tensor *slots,
                             int64_t *n) {
    static const ak_dtype i32[] = {AK_DTYPE_I32};
    ak_tcheck c = {fn, "slots", "[n] int32"};
    AK_TRY(ak_check_shape(ctx, &c, slots, 1, NULL));
    AK_TRY(ak_check_dtype(&c, slots, 1, i32));
    if (slots->shape[0] > INT32_MAX)
        return ak_fail(AK_ERR_INVALID_ARGUMENT, "%s: slots: n = %lld exceeds 2^31-1", fn,
                       (long long)slots->shape[0]);
    *n = slots->shape[0];
    return AK_OK;
}

/* A 2-D [n, w] (or 3-D [n, h, w]) row tensor of one of the listed dtypes. */
static ak_status check_rows(const ak_context *ctx, const char *fn, const char *arg,
                            const char *shape_txt, const ak_tensor *t, int32_t ndim,
                            const int64_t *dims, int32_t ndt, const ak_dtype *dts) {
    ak_tcheck c = {fn, arg, shape_txt};
    AK_TRY(ak_check_shape(ctx, &c, t, ndim, dims));
    return ak_check_dtype(&c, t, ndt, dts);
}

/* Output rows must not overlap (two rows sharing bytes would have two writers). */
static ak_status check_disjoint(const char *fn, const char *arg, const ak_tensor *t) {
    for (int32_t i = 0; i + 1 < t->ndim; i++) {
        int64_t inner = t->shape[i + 1] * (t->strides[i + 1] < 0 ? -t->strides[i + 1] : t->strides[i + 1]);
        int64_t st = t->strides[i] < 0 ? -t->strides[i] : t->strides[i];
        if (t->shape[i] > 1 && st < inner)
            return ak_fail(AK_ERR_INVALID_ARGUMENT,
                           "%s: %s: stride[%d] is %lld, below the %lld elements of dimension %d "
                           "(output rows would overlap)", fn, arg, (int)i, (long long)t->strides[i],
                           (long long)inner, (int)(i + 1));
    }
    return AK_OK;
}

ak_status ak_cache_write(ak_context *ctx, const ak_cache *cache, const ak_tensor *nope,
                         const ak_tensor *rope, const ak_tensor *slots, ak_quant_rule rule) {
    const char *fn = "ak_cache_write";
    static const ak_dtype in_dt[] = {AK_DTYPE_BF16, AK_DTYPE_F32};
    AK_TRY(ak_check_context(ctx, fn));
    if (cache != NULL && is_mha(cache->layout))
        return ak_fail(AK_ERR_INVALID_ARGUMENT,
                       "%s: cache.layout is %s; MHA caches are written with ak_mha_cache_write",
                       fn, ak_layout_name(cache->layout));
    AK_TRY(ak_check_cache(ctx, fn, "cache", cache, 6, k_mla_idx));
    ak_layout_traits tr;
    AK_TRY(ak_layout_traits_get(cache->layout, &tr));
    int64_t n = 0;
    AK_TRY(check_slots(ctx, fn, slots, &n));
    int64_t nd[2] = {n, tr.d_nope};
    AK_TRY(check_rows(ctx, fn, "nope", is_mla(cache->layout) ? "[n, d_nope] (512; 448 for DSV4)"
                                                            : "[n, 128]",
                      nope, 2, nd, 2, in_dt));
    if (tr.d_rope > 0) {
        int64_t rd[2] = {n, tr.d_rope};
        AK_TRY(check_rows(ctx, fn, "rope", "[n, 64]", rope, 2, rd, 2, in_dt));
    } else if (rope != NULL) {
        return ak_fail(AK_ERR_INVALID_ARGUMENT,
                       "%s: rope must be NULL for layout %s (the indexer key has no RoPE part)",
                       fn, ak_layout_name(cache->layout));
    }
    AK_TRY(check_rule(fn, cache->layout, rule));
    if (n == 0) return AK_OK;
    return AK_DISPATCH(ctx, ak_cpu_cache_write(ctx, cache, nope, rope, slots, rule),
                       ak_cuda_cache_write(ctx, cache, nope, rope, slots, rule));
}

ak_status ak_mha_cache_write(ak_context *ctx, const ak_cache *cache, const ak_tensor *k,
                             const ak_tensor *v, const ak_tensor *slots) {
    const char *fn = "ak_mha_cache_write";
    static const ak_dtype in_dt[] = {AK_DTYPE_BF16, AK_DTYPE_F16, AK_DTYPE_F32};
    AK_TRY(ak_check_context(ctx, fn));
    AK_TRY(ak_check_cache(ctx, fn, "cache", cache, 2, k_mha));
    int64_t n = 0;
    AK_TRY(check_slots(ctx, fn, slots, &n));
    int64_t kd[3] = {n, cache->h_kv, cache->head_dim};
    int64_t vd[3] = {n, cache->h_kv, cache->head_dim_v};
    AK_TRY(check_rows(ctx, fn, "k", "[n, h_kv, head_dim]", k, 3, kd, 3, in_dt));
    AK_TRY(check_rows(ctx, fn, "v", "[n, h_kv, head_dim_v]", v, 3, vd, 3, in_dt));
    if (n == 0) return AK_OK;
    return AK_DISPATCH(ctx, ak_cpu_mha_cache_write(ctx, cache, k, v, slots),
                       ak_cuda_mha_cache_write(ctx, cache, k, v, slots));
}

ak_status ak_cache_gather(ak_context *ctx, const ak_cache *cache, const ak_tensor *slots,
                          ak_tensor *out, ak_tensor *out_scale) {
    const char *fn = "ak_cache_gather";
    static const ak_dtype out_dt[] = {AK_DTYPE_BF16, AK_DTYPE_F32};
    static const ak_dtype idx8_dt[] = {AK_DTYPE_BF16, AK_DTYPE_F32, AK_DTYPE_E4M3};
    static const ak_dtype f32[] = {AK_DTYPE_F32};
    AK_TRY(ak_check_context(ctx, fn));
    AK_TRY(ak_check_cache(ctx, fn, "cache", cache, 0, NULL));
    int64_t n = 0;
    AK_TRY(check_slots(ctx, fn, slots, &n));
    ak_layout l = cache->layout;
    if (is_mha(l)) {
        int64_t od[3] = {n, cache->h_kv, cache->head_dim};
        AK_TRY(check_rows(ctx, fn, "out", "[n, h_kv, head_dim]", out, 3, od, 2, out_dt));
        AK_TRY(check_disjoint(fn, "out", out));
    } else {
        ak_layout_traits tr;
        AK_TRY(ak_layout_traits_get(l, &tr));
        int64_t od[2] = {n, tr.d_qk};
        int raw_ok = l == AK_LAYOUT_INDEXER_FP8;
        AK_TRY(check_rows(ctx, fn, "out",
                          is_mla(l) ? "[n, d_qk] (576; 512 for DSV4)" : "[n, 128]", out, 2, od,
                          raw_ok ? 3 : 2, raw_ok ? idx8_dt : out_dt));
        AK_TRY(check_disjoint(fn, "out", out));
        if (out->dtype == AK_DTYPE_E4M3) {
            int64_t sd[1] = {n};
            AK_TRY(check_rows(ctx, fn, "out_scale", "[n] f32 (needed with e4m3 out)", out_scale,
                              1, sd, 1, f32));
            AK_TRY(check_disjoint(fn, "out_scale", out_scale));
            if (n == 0) return AK_OK;
            return AK_DISPATCH(ctx, ak_cpu_cache_gather(ctx, cache, slots, out, out_scale),
                               ak_cuda_cache_gather(ctx, cache, slots, out, out_scale));
        }
    }
    if (out_scale != NULL)
        return ak_fail(AK_ERR_INVALID_ARGUMENT,
                       "%s: out_scale must be NULL unless out is e4m3 (INDEXER_FP8 raw gather); "
                       "out is %s", fn, ak_dtype_name(out->dtype));
    if (n == 0) return AK_OK;
    return AK_DISPATCH(ctx, ak_cpu_cache_gather(ctx, cache, slots, out, NULL),
                       ak_cuda_cache_gather(ctx, cache, slots, out, NULL));
}

ak_status ak_mha_cache_gather(ak_context *ctx, const ak_cache *cache, const ak_tensor *slots,
                              ak_tensor *k_out, ak_tensor *v_out) {
    const char *fn = "ak_mha_cache_gather";
    static const ak_dtype out_dt[] = {AK_DTYPE_BF16, AK_DTYPE_F32};
    AK_TRY(ak_check_context(ctx, fn));
    AK_TRY(ak_check_cache(ctx, fn, "cache", cache, 2, k_mha));
    int64_t n = 0;
    AK_TRY(check_slots(ctx, fn, slots, &n));
    if (k_out == NULL && v_out == NULL)
        return ak_fail(AK_ERR_INVALID_ARGUMENT, "%s: k_out and v_out are both NULL; pass at least one",
                       fn);
    int64_t kd[3] = {n, cache->h_kv, cache->head_dim};
    int64_t vd[3] = {n, cache->h_kv, cache->head_dim_v};
    if (k_out != NULL) {
        AK_TRY(check_rows(ctx, fn, "k_out", "[n, h_kv, head_dim]", k_out, 3, kd, 2, out_dt));
        AK_TRY(check_disjoint(fn, "k_out", k_out));
    }
    if (v_out != NULL) {
        AK_TRY(check_rows(ctx, fn, "v_out", "[n, h_kv, head_dim_v]", v_out, 3, vd, 2, out_dt));
        AK_TRY(check_disjoint(fn, "v_out", v_out));
    }
    if (n == 0) return AK_OK;
    return AK_DISPATCH(ctx, ak_cpu_mha_cache_gather(ctx, cache, slots, k_out, v_out),
                       ak_cuda_mha_cache_gather(ctx, cache, slots, k_out, v_out));
}

/* Conversion matrix (layouts.md 6.1-6.2): which (src, dst) pairs ak_cache_convert implements. */
static int pair_supported(ak_layout s, ak_layout d) {
    if (s == d) return 1; /* copy / re-page (C8, C13) */
    if (is_mha(s) && is_mha(d)) return 1; /* C11, C12 */
    const ak_layout B = AK_LAYOUT_MLA_BF16, F = AK_LAYOUT_MLA_FP8_PERTENSOR,
                    D = AK_LAYOUT_DSA_FP8_BLOCKSCALE;
    return (s == F && d == D) || (s == B && d == D) || (s == D && d == B) || (s == B && d == F) ||
           (s == F && d == B) || (s == D && d == F);
}

/* Pools must not overlap: the conversion reads src while it writes dst. */
static int ranges_overlap(const void *a, int64_t an, const void *b, int64_t bn) {
    uintptr_t a0 = (uintptr_t)a, b0 = (uintptr_t)b;
    if (a == NULL || b == NULL || an == 0 || bn == 0) return 0;
    return a0 < b0 + (uintptr_t)bn && b0 < a0 + (uintptr_t)an;
}

ak_status ak_cache_convert(ak_context *ctx, const ak_cache *src, const ak_cache *dst,
                           const ak_tensor *pages, ak_quant_rule rule) {
    const char *fn = "ak_cache_convert";
    static const ak_dtype i32[] = {AK_DTYPE_I32};
    AK_TRY(ak_check_context(ctx, fn));
    AK_TRY(ak_check_cache(ctx, fn, "src", src, 0, NULL));
    AK_TRY(ak_check_cache(ctx, fn, "dst", dst, 0, NULL));
    if (!pair_supported(src->layout, dst->layout))
        return ak_fail(AK_ERR_UNSUPPORTED,
                       "%s: no conversion from %s to %s (supported: same layout; "
                       "MLA_FP8_PERTENSOR -> DSA_FP8_BLOCKSCALE; MLA_BF16 <-> DSA_FP8_BLOCKSCALE; "
                       "MLA_BF16 <-> MLA_FP8_PERTENSOR; DSA_FP8_BLOCKSCALE -> MLA_FP8_PERTENSOR; "
                       "MHA NHD/HND and dtypes; DSV4 rows via ak_cache_gather/ak_cache_write)",
                       fn, ak_layout_name(src->layout), ak_layout_name(dst->layout));
    if (is_mha(src->layout) &&
        (src->h_kv != dst->h_kv || src->head_dim != dst->head_dim ||
         src->head_dim_v != dst->head_dim_v))
        return ak_fail(AK_ERR_INVALID_ARGUMENT,
                       "%s: MHA geometry differs: src h_kv %d head_dim %d/%d, dst h_kv %d "
                       "head_dim %d/%d", fn, (int)src->h_kv, (int)src->head_dim,
                       (int)src->head_dim_v, (int)dst->h_kv, (int)dst->head_dim,
                       (int)dst->head_dim_v);
    /* the rule matters only where the conversion quantizes with per-block scales (C2) */
    if (rule != AK_QUANT_DEFAULT) {
        int quantizing = dst->layout == AK_LAYOUT_DSA_FP8_BLOCKSCALE &&
                         src->layout == AK_LAYOUT_MLA_BF16;
        if (!quantizing)
            return ak_fail(AK_ERR_INVALID_ARGUMENT,
                           "%s: rule %s has no effect converting %s to %s; pass AK_QUANT_DEFAULT",
                           fn, rule_name(rule), ak_layout_name(src->layout),
                           ak_layout_name(dst->layout));
        AK_TRY(check_rule(fn, dst->layout, rule));
    }
    if (pages != NULL) {
        ak_tcheck c = {fn, "pages", "[n] int32 source page ids"};
        AK_TRY(ak_check_shape(ctx, &c, pages, 1, NULL));
        AK_TRY(ak_check_dtype(&c, pages, 1, i32));
    }
    int64_t sb, sv, db, dv;
    AK_TRY(ak_cache_bytes(src, &sb, &sv));
    AK_TRY(ak_cache_bytes(dst, &db, &dv));
    if (ranges_overlap(src->data, sb, dst->data, db) ||
        ranges_overlap(src->v_data, sv, dst->v_data, dv) ||
        ranges_overlap(src->data, sb, dst->v_data, dv) ||
        ranges_overlap(src->v_data, sv, dst->data, db))
        return ak_fail(AK_ERR_INVALID_ARGUMENT,
                       "%s: src and dst pools overlap in memory; convert into a separate pool", fn);
    if (src->num_pages == 0 || (pages != NULL && pages->shape[0] == 0)) return AK_OK;
    return AK_DISPATCH(ctx, ak_cpu_cache_convert(ctx, src, dst, pages, rule),
                       ak_cuda_cache_convert(ctx, src, dst, pages, rule));
}

ak_status ak_cache_audit(ak_context *ctx, const ak_cache *cache, int32_t first_page,
                         int32_t page_count, int64_t *bad_tokens) {
    const char *fn = "ak_cache_audit";
    AK_TRY(ak_check_context(ctx, fn));
    if (ctx->backend == AK_BACKEND_CUDA)
        return ak_fail(AK_ERR_UNSUPPORTED,
                       "%s: the audit runs on a CPU context only; download the pool and audit it "
                       "with a CPU context", fn);
    AK_TRY(ak_check_cache(ctx, fn, "cache", cache, 0, NULL));
    if (first_page < 0 || page_count < 0 ||
        (int64_t)first_page + page_count > (int64_t)cache->num_pages)
        return ak_fail(AK_ERR_INVALID_ARGUMENT,
                       "%s: first_page %d, page_count %d: range outside [0, %d) (num_pages)", fn,
                       (int)first_page, (int)page_count, (int)cache->num_pages);
    if (bad_tokens != NULL) *bad_tokens = 0;
    return ak_cpu_cache_audit(ctx, cache, first_page, page_count, bad_tokens);
}
