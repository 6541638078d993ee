/* models.c -- see models.h. */
#include "models.h"

#include <string.h>

static const ak_model k_models[] = {
    /* DeepSeek V3: 128 heads, absorbed MLA 576/512, softmax scale 192^-0.5 (before YaRN mscale). */
    {"dsv3", "DeepSeek V3 (dense MLA)", AK_MODEL_MLA_DENSE, 128, 1, 576, 512, AK_LAYOUT_MLA_BF16, 64,
     0, 0, 0, 0, AK_LAYOUT_INVALID, 0, 0, 0.07216878f},
    /* DeepSeek V3.2: DSA with the 656-byte fp8 cache, top-k 2048, indexer 64 x 128. */
    {"dsv32", "DeepSeek V3.2 (DSA)", AK_MODEL_DSA, 128, 1, 576, 512, AK_LAYOUT_DSA_FP8_BLOCKSCALE,
     64, 2048, 0, 64, 128, AK_LAYOUT_INVALID, 0, 0, 0.07216878f},
    /* DeepSeek V4-Flash: 64 heads, head dim 512, SWA 128 on 256-token pages, C4 top-k 512. */
    {"dsv4-flash", "DeepSeek V4-Flash", AK_MODEL_DSV4, 64, 1, 512, 512, AK_LAYOUT_DSV4_FP8_UE8M0, 256,
     512, 128, 64, 128, AK_LAYOUT_DSV4_FP8_UE8M0, 64, 4, 0.04419417f},
    /* DeepSeek V4-Pro: 128 heads, C4 top-k 1024. */
    {"dsv4-pro", "DeepSeek V4-Pro", AK_MODEL_DSV4, 128, 1, 512, 512, AK_LAYOUT_DSV4_FP8_UE8M0, 256,
     1024, 128, 64, 128, AK_LAYOUT_DSV4_FP8_UE8M0, 64, 4, 0.04419417f},
    /* Llama 3 8B: GQA 32/8, head dim 128, bf16 NHD pages of 16. */
    {"llama3-8b", "Llama 3 8B (GQA)", AK_MODEL_MHA, 32, 8, 128, 128, AK_LAYOUT_MHA_NHD, 16, 0, 0, 0,
     0, AK_LAYOUT_INVALID, 0, 0, 0.08838835f},
    {NULL, NULL, 0, 0, 0, 0, 0, AK_LAYOUT_INVALID, 0, 0, 0, 0, 0, AK_LAYOUT_INVALID, 0, 0, 0.0f},
};

const ak_model *ak_model_find(const char *name) {
    if (name == NULL) return NULL;
    for (const ak_model *m = k_models; m->name != NULL; m++)
        if (strcmp(m->name, name) == 0) return m;
    return NULL;
}

const ak_model *ak_model_list(void) { return k_models; }
