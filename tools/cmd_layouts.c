/* cmd_layouts.c -- `attnkit layouts [--json]`: the layout registry with bytes per page. */
#include <stdio.h>
#include <string.h>

#include "attnkit.h"
#include "cli.h"
#include "json.h"

static const int32_t k_page_sizes[] = {1, 2, 16, 32, 64, 128, 256};
#define N_PAGE_SIZES ((int)(sizeof k_page_sizes / sizeof k_page_sizes[0]))

static const char *scale_name(ak_scale_kind k) {
    switch (k) {
    case AK_SCALE_NONE: return "none";
    case AK_SCALE_PER_TENSOR: return "fp32 per tensor";
    case AK_SCALE_FP32_PER_128: return "fp32 per 128";
    case AK_SCALE_UE8M0_PER_64: return "ue8m0 per 64";
    case AK_SCALE_FP32_PER_TOKEN: return "fp32 per token";
    case AK_SCALE_UE8M0_PER_32: return "ue8m0 per 32";
    }
    return "?";
}

int ak_cmd_layouts(int argc, char **argv) {
    if (ak_cli_has_flag(argc, argv, "--help")) {
        printf("usage: attnkit layouts [--json]\n\nPrints every registered KV-cache layout: bytes "
               "per token, dims, dtypes, scale kind,\nstructure, and bytes per page for page "
               "sizes 1..256 (the V4 page stride rounds up to a multiple of 576).\n");
        return 0;
    }
    int json = ak_cli_has_flag(argc, argv, "--json");
    ak_json j;
    if (json) {
        ak_json_init(&j, stdout);
        ak_json_object_begin(&j, NULL);
        ak_json_int(&j, "format_version", AK_LAYOUT_FORMAT_VERSION);
        ak_json_array_begin(&j, "layouts");
    } else {
        printf("%-3s %-20s %6s %5s %5s %5s %4s %-5s %-5s %-16s %-5s %s\n", "id", "layout", "B/tok",
               "nope", "rope", "d_qk", "d_v", "elem", "rope", "scale", "struct",
               "bytes per page (P = 1 2 16 32 64 128 256)");
    }
    for (int id = 1; id < AK_LAYOUT_END_; id++) {
        ak_layout_traits t;
        if (ak_layout_traits_get((ak_layout)id, &t) != AK_OK) continue;
        int mha = t.bytes_per_token == 0;
        int64_t pages[N_PAGE_SIZES];
        for (int i = 0; i < N_PAGE_SIZES; i++)
            if (mha || ak_layout_page_bytes(t.layout, k_page_sizes[i], &pages[i]) != AK_OK) pages[i] = -1;
        if (json) {
            ak_json_object_begin(&j, NULL);
            ak_json_int(&j, "id", id);
            ak_json_str(&j, "name", t.name);
            if (mha) {
                ak_json_null(&j, "bytes_per_token");
                ak_json_str(&j, "bytes_per_token_formula",
                            "h_kv * head_dim * elem_bytes per K token (V likewise, head_dim_v); "
                            "elem bf16, f16 or e4m3");
            } else {
                ak_json_int(&j, "bytes_per_token", t.bytes_per_token);
            }
            ak_json_int(&j, "d_nope", t.d_nope);
            ak_json_int(&j, "d_rope", t.d_rope);
            ak_json_int(&j, "d_qk", t.d_qk);
            ak_json_int(&j, "d_v", t.d_v);
            ak_json_str(&j, "elem_dtype", mha ? "bf16|f16|e4m3" : ak_dtype_name(t.elem_dtype));
            ak_json_str(&j, "rope_dtype", t.d_rope ? ak_dtype_name(t.rope_dtype) : NULL);
            ak_json_str(&j, "scale", scale_name(t.scale_kind));
            ak_json_int(&j, "scale_block", t.scale_block);
            ak_json_str(&j, "structure", t.soa ? "per-page SoA" : mha ? "paged tensor" : "AoS");
            if (t.fixed_page_size) ak_json_int(&j, "fixed_page_size", t.fixed_page_size);
            if (t.page_align) ak_json_int(&j, "page_stride_multiple", t.page_align);
            ak_json_object_begin(&j, "bytes_per_page");
            for (int i = 0; i < N_PAGE_SIZES; i++) {
                if (pages[i] < 0) continue;
                char key[16];
                snprintf(key, sizeof key, "%d", (int)k_page_sizes[i]);
                ak_json_int(&j, key, pages[i]);
            }
            ak_json_object_end(&j);
            ak_json_object_end(&j);
        } else {
            char bpt[16], per_page[160] = "";
            snprintf(bpt, sizeof bpt, "%d", (int)t.bytes_per_token);
            if (mha) {
                snprintf(per_page, sizeof per_page, "P * h_kv * D * elem (K and V pools)");
            } else {
                size_t used = 0;
                for (int i = 0; i < N_PAGE_SIZES; i++) {
                    int w = pages[i] < 0 ? snprintf(per_page + used, sizeof per_page - used, " -")
                                         : snprintf(per_page + used, sizeof per_page - used,
                                                    " %lld", (long long)pages[i]);
                    if (w > 0) used += (size_t)w;
                }
            }
            printf("%-3d %-20s %6s %5d %5d %5d %4d %-5s %-5s %-16s %-5s%s\n", id, t.name,
                   mha ? "var" : bpt, (int)t.d_nope, (int)t.d_rope, (int)t.d_qk, (int)t.d_v,
                   mha ? "var" : ak_dtype_name(t.elem_dtype),
                   t.d_rope ? ak_dtype_name(t.rope_dtype) : "-", scale_name(t.scale_kind),
                   t.soa ? "SoA" : mha ? "paged" : "AoS", per_page);
        }
    }
    if (json) {
        ak_json_array_end(&j);
        ak_json_object_end(&j);
        ak_json_finish(&j);
    }
    return 0;
}
