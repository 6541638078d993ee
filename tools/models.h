/* models.h -- model presets shared by `attnkit bench`, `plan` and `run`. Dims are the models'
   published attention shapes (semantics.md; targets.md for the benchmark shapes). */
#ifndef AK_TOOLS_MODELS_H
#define AK_TOOLS_MODELS_H

#include <stdint.h>

#include "attnkit.h"

typedef enum ak_model_kind {
    AK_MODEL_MLA_DENSE = 0,  /* DeepSeek V2/V3: dense MLA decode, MHA 192/128 prefill */
    AK_MODEL_DSA = 1,        /* DeepSeek V3.2: indexer + top-k + sparse MLA */
    AK_MODEL_DSV4 = 2,       /* DeepSeek V4: SWA + C4 (top-k) / C128 (dense) compressed caches */
    AK_MODEL_MHA = 3         /* paged MHA/GQA */
} ak_model_kind;

typedef struct ak_model {
    const char *name;        /* "dsv32" */
    const char *title;       /* "DeepSeek V3.2 (DSA)" */
    ak_model_kind kind;
    int32_t h_q;             /* query heads of the attention (full model, TP 1) */
    int32_t h_kv;
    int32_t d_qk, d_v;
    ak_layout layout;        /* default cache layout */
    int32_t page_size;
    int32_t topk;            /* sparse top-k (DSA 2048; V4 C4 512/1024) */
    int32_t window;          /* V4 sliding window (128) */
    int32_t index_heads, index_dim;  /* lightning indexer (64, 128) */
    ak_layout extra_layout;  /* V4 compressed cache layout */
    int32_t extra_page_size; /* V4 C4 pool page size (64) */
    int32_t compress_ratio;  /* V4 layer kind used by the presets: 4 (C4 + top-k) */
    float softmax_scale;
} ak_model;

/* The preset for a name (dsv3, dsv32, dsv4-flash, dsv4-pro, llama3-8b); NULL if unknown. */
const ak_model *ak_model_find(const char *name);
/* All presets, terminated by a NULL name. */
const ak_model *ak_model_list(void);

#endif
