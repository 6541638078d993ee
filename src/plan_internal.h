/*
 * plan_internal.h -- the plan object shared by the planner (src/plan.c, pure host logic with no op
 * calls) and its executor (src/plan_run.c, which calls the public ops). Not installed.
 */
#ifndef AK_PLAN_INTERNAL_H
#define AK_PLAN_INTERNAL_H

#include "common/internal.h"

/* How a segment of requests is computed; each path is a fixed sequence of public ops. */
typedef enum ak_path {
    AK_PATH_MHA = 0,        /* ak_mha, causal, ragged q */
    AK_PATH_MLA_DENSE = 1,  /* ak_mla_decode dense, causal multi-token rows */
    AK_PATH_DSA_DECODE = 2, /* indexer -> top-k PAGED -> ak_mla_decode sparse */
    AK_PATH_DSA_PAGED = 3,  /* indexer -> top-k PAGED -> ak_sparse_prefill paged */
    AK_PATH_DSA_GATHER = 4, /* gather bf16 -> indexer -> top-k RAGGED -> ak_sparse_prefill flat */
    AK_PATH_V4_DECODE = 5,  /* [indexer -> top-k PAGED | C128 list] + SWA list -> sparse decode */
    AK_PATH_V4_GATHER = 6,  /* gather compressed + window rows to bf16 -> [indexer -> raw top-k]
                               -> ak_dsv4_combine_indices -> ak_sparse_prefill flat */
    AK_PATH_V4_PAGED_MERGE = 7 /* lists as V4_DECODE -> ak_sparse_prefill paged per pool
                                  -> ak_merge_states (sink once) */
} ak_path;

/* A run of consecutive requests computed one way. Decode segments have one q_len for all of
   their requests and run batched; prefill segments run request by request, chunked by rows. */
typedef struct ak_plan_seg {
    ak_path path;
    int32_t r0, r1;      /* requests [r0, r1) */
    int32_t decode;      /* decode, verify or draft-extend rows */
    int32_t q_len;       /* decode segments: every request's q_len */
    int64_t row0, rows;  /* first query row, rows */
    int64_t chunk;       /* prefill: rows per call; decode: requests per call */
    int64_t width;       /* logits columns (largest indexed context) */
    int64_t gather_rows; /* DSA_GATHER: rows of the bf16 workspace (largest kv) */
    int32_t converted;   /* reads io->convert_cache */
    int64_t ws;          /* plan-buffer bytes of this segment */
} ak_plan_seg;

typedef struct ak_plan_istep {
    ak_plan_step pub;
    char reason[384];
} ak_plan_istep;

struct ak_plan {
    ak_context *ctx;
    ak_backend backend;
    ak_plan_desc d;   /* arrays point at the copies below */
    ak_phase *phases; /* [n] */
    int32_t *q_lens;  /* [n] */
    int32_t *kv_lens; /* [n] */
    int64_t *cu_q;    /* [n + 1] */
    int64_t total_rows;
    ak_layout convert_to;  /* AK_LAYOUT_INVALID: no conversion */
    int64_t convert_pages; /* pages listed by the CONVERT step (upper bound) */
    ak_plan_seg *segs;
    int32_t nseg;
    ak_plan_istep *steps;
    int32_t nsteps, cap_steps;
    int64_t ws_bytes; /* plan buffers: max over segments + the conversion page list */
    char *explain;
    size_t explain_len, explain_cap;
};

#endif /* AK_PLAN_INTERNAL_H */
