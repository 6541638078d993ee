/* merge.c -- public entry point of ak_merge_states: argument validation and dispatch. */
#include "common/internal.h"
#include "cpu/cpu.h"
#include "cuda/cuda_backend.h"

ak_status ak_merge_states(ak_context *ctx, const ak_tensor *outs, const ak_tensor *lses,
                          ak_lse_base in_base, const ak_tensor *attn_sink, ak_tensor *out,
                          ak_tensor *lse, ak_lse_base out_base) {
    static const char *const fn = "ak_merge_states";
    static const ak_dtype k_vals[] = {AK_DTYPE_F32, AK_DTYPE_BF16};
    static const ak_dtype k_f32[] = {AK_DTYPE_F32};
    AK_TRY(ak_check_context(ctx, fn));
    ak_tcheck to = {fn, "outs", "[n, rows, h, d]"};
    AK_TRY(ak_check_shape(ctx, &to, outs, 4, NULL));
    AK_TRY(ak_check_dtype(&to, outs, 2, k_vals));
    const int64_t *s = outs->shape; /* n, rows, h, d */
    ak_tcheck tl = {fn, "lses", "[n, rows, h]"};
    AK_TRY(ak_check_shape(ctx, &tl, lses, 3, s));
    AK_TRY(ak_check_dtype(&tl, lses, 1, k_f32));
    if (in_base != AK_LSE_BASE_E && in_base != AK_LSE_BASE_2)
        return ak_fail(AK_ERR_INVALID_ARGUMENT,
                       "%s: in_base is %d, expected AK_LSE_BASE_E (0) or AK_LSE_BASE_2 (1)", fn,
                       (int)in_base);
    if (out_base != AK_LSE_BASE_E && out_base != AK_LSE_BASE_2)
        return ak_fail(AK_ERR_INVALID_ARGUMENT,
                       "%s: out_base is %d, expected AK_LSE_BASE_E (0) or AK_LSE_BASE_2 (1)", fn,
                       (int)out_base);
    if (attn_sink != NULL) {
        ak_tcheck ts = {fn, "attn_sink", "[h]"};
        AK_TRY(ak_check_shape(ctx, &ts, attn_sink, 1, &s[2]));
        AK_TRY(ak_check_dtype(&ts, attn_sink, 1, k_f32));
    }
    ak_tcheck tout = {fn, "out", "[rows, h, d]"};
    AK_TRY(ak_check_shape(ctx, &tout, out, 3, s + 1));
    AK_TRY(ak_check_dtype(&tout, out, 2, k_vals));
    if (lse != NULL) {
        ak_tcheck tlse = {fn, "lse", "[rows, h]"};
        AK_TRY(ak_check_shape(ctx, &tlse, lse, 2, s + 1));
        AK_TRY(ak_check_dtype(&tlse, lse, 1, k_f32));
    }
    return AK_DISPATCH(
        ctx, ak_cpu_merge_states(ctx, outs, lses, in_base, attn_sink, out, lse, out_base),
        ak_cuda_merge_states(ctx, outs, lses, in_base, attn_sink, out, lse, out_base));
}
