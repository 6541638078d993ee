/* test_foundation.c -- status codes, versions, tensors, the layout registry, the context. */
#include <string.h>

#include "ak_test.h"
#include "attnkit.h"

AK_TEST(status_names_and_texts) {
    CHECK(strcmp(ak_status_name(AK_OK), "AK_OK") == 0);
    CHECK(strcmp(ak_status_name(AK_ERR_UNSUPPORTED), "AK_ERR_UNSUPPORTED") == 0);
    CHECK(strcmp(ak_status_name((ak_status)999), "AK_STATUS_UNKNOWN") == 0);
    CHECK(AK_ERR_INVALID_ARGUMENT == 1 && AK_ERR_NO_DEVICE == 11); /* pinned values */
    CHECK(strlen(ak_status_string(AK_ERR_CUDA)) > 0);
    CHECK(ak_version_number() == AK_VERSION_NUMBER);
    CHECK(strcmp(ak_version_string(), AK_VERSION_STRING) == 0);
}

AK_TEST(layout_page_bytes_match_layouts_md) {
    /* layouts.md section 5 */
    struct { ak_layout l; int32_t p; int64_t bytes; } rows[] = {
        {AK_LAYOUT_MLA_BF16, 64, 73728},          {AK_LAYOUT_MLA_FP8_PERTENSOR, 64, 36864},
        {AK_LAYOUT_DSA_FP8_BLOCKSCALE, 64, 41984}, {AK_LAYOUT_DSV4_FP8_UE8M0, 256, 149760},
        {AK_LAYOUT_DSV4_FP8_UE8M0, 128, 74880},    {AK_LAYOUT_DSV4_FP8_UE8M0, 64, 37440},
        {AK_LAYOUT_DSV4_FP8_UE8M0, 2, 1728},       {AK_LAYOUT_DSV4_FP8_UE8M0, 1, 1152},
        {AK_LAYOUT_DSV4_FP8_UE8M0, 16, 9792},      {AK_LAYOUT_DSV4_FP8_UE8M0, 32, 19008},
        {AK_LAYOUT_INDEXER_FP8, 64, 8448},         {AK_LAYOUT_INDEXER_FP4, 64, 4352},
        {AK_LAYOUT_DSA_FP8_BLOCKSCALE, 256, 167936}, {AK_LAYOUT_MLA_BF16, 1, 1152},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        int64_t b = -1;
        CHECK_STATUS(ak_layout_page_bytes(rows[i].l, rows[i].p, &b), AK_OK);
        CHECK_MSG(b == rows[i].bytes, "layout %d page %d: %lld bytes, expected %lld",
                  (int)rows[i].l, (int)rows[i].p, (long long)b, (long long)rows[i].bytes);
    }
}

AK_TEST(layout_bad_inputs) {
    int64_t b;
    CHECK_REJECT(ak_layout_page_bytes(AK_LAYOUT_DSA_FP8_BLOCKSCALE, 0, &b), AK_ERR_INVALID_ARGUMENT, "page_size");
    CHECK_REJECT(ak_layout_page_bytes(AK_LAYOUT_DSA_FP8_BLOCKSCALE, 1025, &b), AK_ERR_INVALID_ARGUMENT, "page_size");
    CHECK_REJECT(ak_layout_page_bytes(AK_LAYOUT_INDEXER_FP8, 32, &b), AK_ERR_INVALID_ARGUMENT, "page_size");
    CHECK_REJECT(ak_layout_page_bytes((ak_layout)7, 64, &b), AK_ERR_INVALID_ARGUMENT, "layout");
    CHECK_REJECT(ak_layout_page_bytes(AK_LAYOUT_MHA_NHD, 64, &b), AK_ERR_INVALID_ARGUMENT, "ak_cache_page_bytes");
    CHECK_REJECT(ak_layout_page_bytes(AK_LAYOUT_MLA_BF16, 64, NULL), AK_ERR_INVALID_ARGUMENT, "bytes");
    ak_layout_traits t;
    CHECK_REJECT(ak_layout_traits_get((ak_layout)-3, &t), AK_ERR_INVALID_ARGUMENT, "layout");
    CHECK(ak_layout_from_name("dsa_fp8_blockscale") == AK_LAYOUT_DSA_FP8_BLOCKSCALE);
    CHECK(ak_layout_from_name("DSA_FP8") == AK_LAYOUT_INVALID);
}

AK_TEST(cache_descriptor_checks) {
    static unsigned char pool[4 * 37440];
    ak_cache c;
    CHECK_STATUS(ak_cache_init(&c, AK_LAYOUT_DSV4_FP8_UE8M0, pool, 4, 64), AK_OK);
    CHECK(c.page_stride == 37440);
    int64_t total = 0;
    CHECK_STATUS(ak_cache_bytes(&c, &total, NULL), AK_OK);
    CHECK(total == 4 * 37440);
    c.page_stride = 37376; /* not a multiple of 576 */
    CHECK_REJECT(ak_cache_validate(&c), AK_ERR_INVALID_ARGUMENT, "page_stride");
    CHECK_REJECT(ak_cache_init(&c, AK_LAYOUT_MLA_BF16, NULL, 4, 64), AK_ERR_INVALID_ARGUMENT, "data");
    CHECK_STATUS(ak_cache_init(&c, AK_LAYOUT_DSA_FP8_BLOCKSCALE, pool, 2, 64), AK_OK);
    c.page_stride = 65 * 656; /* FlashMLA's padded (P + 1) * 656 stride: legal */
    CHECK_STATUS(ak_cache_validate(&c), AK_OK);
    c.page_stride = 64 * 656 + 8; /* misaligns the fp32 scales and bf16 rope of later pages */
    CHECK_REJECT(ak_cache_validate(&c), AK_ERR_INVALID_ARGUMENT, "multiple of 16");
    CHECK_REJECT(ak_cache_init(&c, AK_LAYOUT_MLA_BF16, pool, 1 << 30, 1024), AK_ERR_INVALID_ARGUMENT, "capacity");
    CHECK_REJECT(ak_cache_init(&c, AK_LAYOUT_MLA_BF16, pool, -1, 64), AK_ERR_INVALID_ARGUMENT, "num_pages");
    static uint16_t k[2 * 16 * 8 * 128], v[2 * 16 * 8 * 128];
    CHECK_STATUS(ak_cache_init_mha(&c, AK_LAYOUT_MHA_HND, AK_DTYPE_BF16, k, v, 2, 16, 8, 128, 128), AK_OK);
    int64_t pb = 0;
    CHECK_STATUS(ak_cache_page_bytes(&c, &pb), AK_OK);
    CHECK(pb == 32768);
    CHECK_REJECT(ak_cache_init_mha(&c, AK_LAYOUT_MHA_HND, AK_DTYPE_F32, k, v, 2, 16, 8, 128, 128),
                 AK_ERR_INVALID_ARGUMENT, "elem_dtype");
    CHECK_REJECT(ak_cache_init_mha(&c, AK_LAYOUT_MHA_NHD, AK_DTYPE_BF16, k, NULL, 2, 16, 8, 128, 128),
                 AK_ERR_INVALID_ARGUMENT, "v_data");
}

AK_TEST(context_cpu_and_cuda_absent) {
    ak_context *ctx = NULL;
    ak_context_options o = {AK_BACKEND_CPU, 2, 0, NULL};
    CHECK_STATUS(ak_context_create(&o, &ctx), AK_OK);
    CHECK(ak_context_backend(ctx) == AK_BACKEND_CPU);
    CHECK(ak_context_num_threads(ctx) == 2);
    ak_context_destroy(ctx);
    o.num_threads = -1;
    CHECK_REJECT(ak_context_create(&o, &ctx), AK_ERR_INVALID_ARGUMENT, "num_threads");
    o.num_threads = 0;
    o.backend = (ak_backend)7;
    CHECK_REJECT(ak_context_create(&o, &ctx), AK_ERR_INVALID_ARGUMENT, "backend");
    CHECK_REJECT(ak_context_create(NULL, NULL), AK_ERR_INVALID_ARGUMENT, "out");
}

AK_TEST(tensor_checks_via_make) {
    int64_t shape[2] = {3, 4};
    float buf[12];
    ak_tensor t = ak_tensor_make(buf, AK_DTYPE_F32, 2, shape);
    CHECK(t.strides[0] == 4 && t.strides[1] == 1);
    CHECK(ak_tensor_numel(&t) == 12);
    ak_tensor bad = ak_tensor_make(buf, AK_DTYPE_F32, 9, shape);
    CHECK(ak_tensor_numel(&bad) == 0);
}
