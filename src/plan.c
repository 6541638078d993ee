/*
 * plan.c -- the planner: validates a batch description, splits the batch into segments of
 * consecutive requests computed one way, chooses each segment's path from the kernel catalogue
 * (by rule where the semantics decide, by the cost model where several paths compute the same
 * thing), sizes its workspace within the budget, and explains all of it. Rules and the cost model
 * are documented in docs/planner.md. No op runs here (src/plan_run.c executes plans).
 */
#include "plan_internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define AK_PLAN_DEFAULT_BUDGET ((int64_t)256 << 20)

/* ---- kernel catalogue -------------------------------------------------------------------------
 */

#define LBIT(l) (1u << (unsigned)(l))
#define L_MLA3                                                                                     \
    (LBIT(AK_LAYOUT_MLA_BF16) | LBIT(AK_LAYOUT_MLA_FP8_PERTENSOR) |                                \
     LBIT(AK_LAYOUT_DSA_FP8_BLOCKSCALE))
#define L_MLA4 (L_MLA3 | LBIT(AK_LAYOUT_DSV4_FP8_UE8M0))
#define L_MHA (LBIT(AK_LAYOUT_MHA_NHD) | LBIT(AK_LAYOUT_MHA_HND))

typedef enum kern_id {
    K_MLA_DENSE = 0,
    K_MLA_SPARSE,
    K_SPARSE_PREFILL_PAGED,
    K_GATHER_SPARSE_PREFILL,
    K_MHA,
    K_INDEXER,
    K_TOPK,
    K_SWA_INDICES,
    K_TOPK_TRANSFORM,
    K_V4_GATHER_SPARSE_PREFILL,
    K_COMBINE,
    K_MERGE,
    K_CONVERT,
    K_GATHER,
    K_COUNT
} kern_id;

typedef struct kern {
    ak_plan_kernel pub;
    uint32_t cpu_layouts, cuda_layouts; /* bit per ak_layout the kernel reads */
    int selectable;                     /* may be named as a preference */
} kern;

static const kern k_kernels[K_COUNT] = {
    [K_MLA_DENSE] = {{"mla_decode_dense", "ak_mla_decode", "MLA, DSA (context <= topk)",
                      "MLA_BF16, MLA_FP8_PERTENSOR, DSA_FP8_BLOCKSCALE", 1, 1, 1, 0,
                      "d_qk 576, h_kv 1, any h_q; multi-token causal rows"},
                     L_MLA3,
                     0,
                     1},
    [K_MLA_SPARSE] = {{"mla_decode_sparse", "ak_mla_decode", "DSA, DSV4",
                       "MLA_BF16, MLA_FP8_PERTENSOR, DSA_FP8_BLOCKSCALE, DSV4_FP8_UE8M0 (CPU "
                       "and CUDA)",
                       1, 1, 1, 1, "h_kv 1, any h_q, any topk; extra cache; multi-token rows"},
                      L_MLA4,
                      L_MLA4,
                      1},
    [K_SPARSE_PREFILL_PAGED] = {{"sparse_prefill_paged", "ak_sparse_prefill", "DSA, DSV4",
                                 "MLA_BF16, MLA_FP8_PERTENSOR, DSA_FP8_BLOCKSCALE, DSV4_FP8_UE8M0",
                                 0, 1, 1, 0, "h_kv 1, any h_q, any topk; PAGED indices"},
                                L_MLA4,
                                0,
                                1},
    [K_GATHER_SPARSE_PREFILL] = {{"gather_sparse_prefill", "ak_cache_gather + ak_sparse_prefill",
                                  "DSA", "MLA_BF16, MLA_FP8_PERTENSOR, DSA_FP8_BLOCKSCALE", 0, 1, 1,
                                  0, "bf16 workspace of the request's kv; RAGGED indices"},
                                 L_MLA3,
                                 0,
                                 1},
    [K_MHA] = {{"mha_paged", "ak_mha", "MHA", "MHA_NHD, MHA_HND", 1, 1, 1, 0,
                "h_q % h_kv == 0; head dims 64, 128, 256, 192/128"},
               L_MHA,
               0,
               1},
    [K_INDEXER] = {{"indexer_paged", "ak_indexer_logits_paged", "DSA, DSV4 (C4)", "INDEXER_FP8", 1,
                    1, 1, 0, "<= 64 heads of 128 dims; 64-token pages"},
                   LBIT(AK_LAYOUT_INDEXER_FP8),
                   0,
                   0},
    [K_TOPK] = {{"topk", "ak_topk", "DSA, DSV4 (C4)", "-", 1, 1, 1, 0,
                 "any k; fused PAGED or RAGGED transform"},
                0,
                0,
                0},
    [K_SWA_INDICES] = {{"dsv4_swa_indices", "ak_dsv4_swa_indices", "DSV4", "-", 1, 1, 1, 1,
                        "any window"},
                       0,
                       0,
                       0},
    [K_TOPK_TRANSFORM] = {{"topk_transform", "ak_topk_transform", "DSV4 (C128)", "-", 1, 1, 1, 1,
                           "PAGED or RAGGED"},
                          0,
                          0,
                          0},
    [K_V4_GATHER_SPARSE_PREFILL] = {{"v4_gather_sparse_prefill",
                                     "ak_cache_gather + ak_dsv4_combine_indices + "
                                     "ak_sparse_prefill",
                                     "DSV4", "DSV4_FP8_UE8M0", 0, 1, 1, 0,
                                     "bf16 workspace of the compressed entries and the window a "
                                     "row chunk sees (semantics.md 10.4-10.5)"},
                                    LBIT(AK_LAYOUT_DSV4_FP8_UE8M0),
                                    0,
                                    1},
    [K_COMBINE] = {{"dsv4_combine_indices", "ak_dsv4_combine_indices", "DSV4", "-", 0, 1, 1, 1,
                    "ratio 0, 4, 128"},
                   0,
                   0,
                   0},
    [K_MERGE] = {{"merge_states", "ak_merge_states", "DSV4 (two pools)", "-", 0, 1, 1, 1,
                  "any n partials; sink applied once"},
                 0,
                 0,
                 0},
    [K_CONVERT] = {{"cache_convert", "ak_cache_convert", "all", "layouts.md section 6 pairs", 1, 1,
                    1, 1, "touched pages only"},
                   L_MLA3 | L_MHA,
                   L_MLA3 | L_MHA,
                   0},
    [K_GATHER] = {{"cache_gather", "ak_cache_gather", "all", "every MLA layout", 1, 1, 1, 1,
                   "rows of d_qk, bf16 out"},
                  L_MLA4,
                  L_MLA4,
                  0},
};

int32_t ak_plan_kernel_count(void) {
    return K_COUNT;
}

ak_status ak_plan_kernel_get(int32_t i, ak_plan_kernel *out) {
    if (out == NULL) return ak_fail(AK_ERR_INVALID_ARGUMENT, "ak_plan_kernel_get: out is NULL");
    if ((uint32_t)i >= (uint32_t)K_COUNT)
        return ak_fail(AK_ERR_INVALID_ARGUMENT, "ak_plan_kernel_get: i %d, expected 0..%d", (int)i,
                       K_COUNT - 1);
    *out = k_kernels[i].pub;
    return AK_OK;
}

static int kern_on(kern_id k, ak_backend b) {
    return b == AK_BACKEND_CUDA ? k_kernels[k].pub.cuda : k_kernels[k].pub.cpu;
}

static int kern_reads(kern_id k, ak_backend b, ak_layout l) {
    uint32_t m = b == AK_BACKEND_CUDA ? k_kernels[k].cuda_layouts : k_kernels[k].cpu_layouts;
    return (m & LBIT(l)) != 0;
}

/* ---- names ------------------------------------------------------------------------------------
 */

static const char *const k_phase_names[AK_PHASE_COUNT_] = {"prefill", "extend", "decode",
                                                           "target-verify", "draft-extend"};

const char *ak_phase_name(ak_phase p) {
    return (unsigned)p < (unsigned)AK_PHASE_COUNT_ ? k_phase_names[p] : "?";
}

ak_phase ak_phase_from_name(const char *name) {
    if (name == NULL) return AK_PHASE_COUNT_;
    for (int i = 0; i < AK_PHASE_COUNT_; i++)
        if (strcmp(name, k_phase_names[i]) == 0) return (ak_phase)i;
    if (strcmp(name, "verify") == 0) return AK_PHASE_TARGET_VERIFY;
    return AK_PHASE_COUNT_;
}

static const char *kind_name(ak_attn_kind k) {
    switch (k) {
    case AK_ATTN_MLA: return "MLA";
    case AK_ATTN_DSA: return "DSA";
    case AK_ATTN_DSV4: return "DSV4";
    case AK_ATTN_MHA: return "MHA";
    }
    return "?";
}

static const char *transform_name(ak_index_transform t) {
    return t == AK_TRANSFORM_PAGED ? "PAGED" : t == AK_TRANSFORM_RAGGED ? "RAGGED" : "NONE";
}

static int phase_is_decode(ak_phase p) {
    return p == AK_PHASE_DECODE || p == AK_PHASE_TARGET_VERIFY || p == AK_PHASE_DRAFT_EXTEND;
}

/* ---- explain text -----------------------------------------------------------------------------
 */

static void say(ak_plan *p, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/* Appends to the explain text; on allocation failure the text is cut short (never invalid). */
static void say(ak_plan *p, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    va_list ap2;
    va_copy(ap2, ap);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n > 0 && p->explain_len + (size_t)n + 1 > p->explain_cap) {
        size_t cap = p->explain_cap ? p->explain_cap : 4096;
        while (cap < p->explain_len + (size_t)n + 1)
            cap *= 2;
        char *e = (char *)realloc(p->explain, cap);
        if (e != NULL) {
            p->explain = e;
            p->explain_cap = cap;
        }
    }
    if (n > 0 && p->explain_len + (size_t)n + 1 <= p->explain_cap) {
        vsnprintf(p->explain + p->explain_len, (size_t)n + 1, fmt, ap2);
        p->explain_len += (size_t)n;
    }
    va_end(ap2);
}

/* ---- steps ------------------------------------------------------------------------------------
 */

static ak_status add_step(ak_plan *p, ak_step_kind kind, kern_id k, const ak_plan_seg *s,
                          ak_index_transform tf, ak_layout reads, int64_t ws, double secs,
                          const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 9, 10)))
#endif
    ;

static ak_status add_step(ak_plan *p, ak_step_kind kind, kern_id k, const ak_plan_seg *s,
                          ak_index_transform tf, ak_layout reads, int64_t ws, double secs,
                          const char *fmt, ...) {
    if (p->nsteps == p->cap_steps) {
        int32_t cap = p->cap_steps ? p->cap_steps * 2 : 16;
        ak_plan_istep *n = (ak_plan_istep *)realloc(p->steps, (size_t)cap * sizeof *n);
        if (n == NULL) return ak_fail(AK_ERR_OUT_OF_MEMORY, "ak_plan_create: %d steps", (int)cap);
        p->steps = n;
        p->cap_steps = cap;
    }
    ak_plan_istep *st = &p->steps[p->nsteps++];
    memset(st, 0, sizeof *st);
    st->pub.kind = kind;
    st->pub.kernel = k_kernels[k].pub.name;
    st->pub.op = k_kernels[k].pub.op;
    st->pub.req_begin = s ? s->r0 : 0;
    st->pub.req_end = s ? s->r1 : p->d.num_requests;
    st->pub.rows = s ? s->rows : p->total_rows;
    st->pub.chunk_rows = s ? (s->decode ? s->chunk * s->q_len : s->chunk) : 0;
    st->pub.transform = tf;
    st->pub.reads = reads;
    st->pub.workspace_bytes = ws;
    st->pub.est_seconds = secs;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(st->reason, sizeof st->reason, fmt, ap);
    va_end(ap);
    return AK_OK;
}

/* ---- cost model -------------------------------------------------------------------------------
 */

/* Bytes moved and FLOPs of a candidate; time = max(bytes / copy rate, flops / bf16 rate) per pass,
   summed over passes (each pass is one kernel, so passes do not overlap). */
typedef struct cost {
    double bytes, flops, secs;
} cost;

typedef struct costmodel {
    double bw, fl;
} costmodel;

static void cost_pass(const costmodel *m, cost *c, double bytes, double flops) {
    double tb = bytes / m->bw, tf = flops / m->fl;
    c->bytes += bytes;
    c->flops += flops;
    c->secs += tb > tf ? tb : tf;
}

/* Row i (0-based) of a request with q new tokens over kv keys sees kv - q + i + 1 positions. */
static int64_t causal_len(int32_t q, int32_t kv, int64_t i) {
    return (int64_t)kv - q + i + 1;
}

/* Sum over the request's rows of min(cap, f(row)) where f = causal length / div (div 1 or a V4
   compress ratio); cap < 0 means no cap. */
static double sum_rows(int32_t q, int32_t kv, int32_t div, int64_t cap) {
    double s = 0;
    for (int64_t i = 0; i < q; i++) {
        int64_t n = causal_len(q, kv, i) / div;
        s += (double)(cap >= 0 && n > cap ? cap : n);
    }
    return s;
}

/* ---- planning ---------------------------------------------------------------------------------
 */

typedef struct segcand {
    ak_path path;
    kern_id attn; /* the attention kernel */
    const char *label;
    ak_index_transform tf; /* of the top-k output */
    int feasible;
    char why[160];   /* why infeasible */
    cost c, c_index; /* total; its indexer + top-k part */
    int64_t per_row, fixed, chunk;
    double kv_sum, keys, idx_pairs; /* cost-model inputs, shown by explain */
    double merge_bytes;             /* V4 paged + merge: the partial states' traffic */
} segcand;

static int32_t lay_bpt(ak_layout l) {
    ak_layout_traits t;
    return ak_layout_traits_get(l, &t) == AK_OK ? t.bytes_per_token : 0;
}

static const char *lay_name(ak_layout l) {
    return ak_layout_name(l);
}

/* Cost and workspace of running segment s along candidate c. */
static void evaluate(ak_plan *p, const costmodel *m, const ak_plan_seg *s, segcand *c,
                     int64_t budget) {
    const ak_plan_desc *d = &p->d;
    ak_layout L = p->convert_to != AK_LAYOUT_INVALID && s->converted ? p->convert_to : d->layout;
    double bpt =
        d->kind == AK_ATTN_MHA ? (double)d->h_kv * (d->d_qk + d->d_v) * 2.0 : (double)lay_bpt(L);
    /* Dequantizing a record inside an attention kernel costs what the gather pass pays per
       record for the bf16 side (its measured copy rate), charged every time the record is read. */
    double bf = d->kind == AK_ATTN_MHA ? 0.0 : (double)d->d_qk * 2.0;
    double deq = (L == AK_LAYOUT_MLA_BF16 || d->kind == AK_ATTN_MHA) ? 0.0 : bf;
    double qo = (double)s->rows * d->h_q * (d->d_qk + d->d_v) * 2.0;
    double hflops = 2.0 * d->h_q * (d->d_qk + d->d_v);
    int64_t topk = d->topk;
    memset(&c->c, 0, sizeof c->c);
    memset(&c->c_index, 0, sizeof c->c_index);
    c->feasible = 1;
    c->merge_bytes = 0;
    c->per_row = 0;
    c->fixed = 0;
    double kv_sum = 0, keys_dense = 0, keys_sparse = 0, idx_pairs = 0, idx_ctx = 0;
    int64_t kv_max = 0;
    for (int32_t r = s->r0; r < s->r1; r++) {
        int32_t q = p->q_lens[r], kv = p->kv_lens[r];
        if (q == 0) continue;
        kv_sum += kv;
        if (kv > kv_max) kv_max = kv;
        keys_dense += sum_rows(q, kv, 1, -1);
        if (d->kind == AK_ATTN_DSA) {
            keys_sparse += sum_rows(q, kv, 1, topk);
            idx_pairs += sum_rows(q, kv, 1, -1);
            idx_ctx += kv;
        } else if (d->kind == AK_ATTN_DSV4) {
            keys_sparse += sum_rows(q, kv, 1, d->window);
            if (d->compress_ratio == 4) {
                keys_sparse += sum_rows(q, kv, 4, topk);
                idx_pairs += sum_rows(q, kv, 4, -1);
                idx_ctx += kv / 4;
            } else if (d->compress_ratio == 128) {
                keys_sparse += sum_rows(q, kv, 128, -1);
            }
        }
    }
    int64_t width = s->width;
    c->kv_sum = kv_sum;
    c->keys = (c->path == AK_PATH_MHA || c->path == AK_PATH_MLA_DENSE) ? keys_dense : keys_sparse;
    c->idx_pairs = idx_pairs;
    switch (c->path) {
    case AK_PATH_MHA:
        /* GQA kernels read each request's K/V once for all its rows (rows share a tile). */
        cost_pass(m, &c->c, kv_sum * bpt + qo, keys_dense * 2.0 * d->h_q * (d->d_qk + d->d_v));
        c->fixed = 4 * (int64_t)(s->r1 - s->r0 + 1);
        break;
    case AK_PATH_MLA_DENSE:
        cost_pass(m, &c->c, kv_sum * (bpt + deq) + qo, keys_dense * hflops);
        break;
    case AK_PATH_DSA_DECODE:
    case AK_PATH_DSA_PAGED:
    case AK_PATH_DSA_GATHER:
    case AK_PATH_V4_DECODE:
    case AK_PATH_V4_GATHER:
    case AK_PATH_V4_PAGED_MERGE: {
        if (idx_pairs > 0) {
            /* Indexer: 2 * H * 128 FLOPs per (row, key); reads 132 B per key per request and
               writes the fp32 logits, which top-k reads back. */
            cost_pass(m, &c->c_index, idx_ctx * 132.0 + idx_pairs * 8.0,
                      idx_pairs * 2.0 * d->index_heads * 128.0);
            c->per_row += width * 4 + (topk + 1) * 4;
        }
        if (c->path == AK_PATH_V4_DECODE || c->path == AK_PATH_V4_PAGED_MERGE) {
            c->per_row += ((int64_t)d->window + 2) * 4;
            if (d->compress_ratio == 128) c->per_row += (width + 1) * 4;
        }
        if (c->path == AK_PATH_V4_PAGED_MERGE && d->compress_ratio != 0) {
            /* two fp32 partial states per row, written by the prefills and read by the merge,
               which writes the final row */
            double st = (double)d->h_q * (d->d_v + 1) * 4.0;
            c->per_row += 2 * (int64_t)st;
            c->merge_bytes = (double)s->rows * st * 3.0;
        }
        c->c = c->c_index;
        if (c->path == AK_PATH_DSA_GATHER) {
            /* Each cached token dequantized once per request into bf16 rows, then read as bf16
               by the flat kernel for every selection. */
            cost_pass(m, &c->c, kv_sum * (bpt + bf) + kv_sum * 4.0, 0.0);
            cost_pass(m, &c->c, keys_sparse * bf + qo, keys_sparse * hflops);
            c->fixed = kv_max * (int64_t)(bf + 4);
        } else if (c->path == AK_PATH_V4_GATHER) {
            /* Per row chunk: the request's compressed entries and the window the chunk sees,
               dequantized once to bf16 rows; then bf16 reads per selection. The combined index
               row holds the compressed selections and the window. */
            int64_t topk_eff = d->compress_ratio == 4 ? topk : d->compress_ratio ? width : 0;
            c->fixed = (width + 1 + d->window) * (int64_t)(bf + 4);
            c->per_row += (int64_t)(bf + 4) + (topk_eff + d->window + 1) * 4;
            cost_pass(m, &c->c, keys_sparse * bf + qo, keys_sparse * hflops);
        } else {
            cost_pass(m, &c->c, keys_sparse * (bpt + deq) + qo, keys_sparse * hflops);
            if (c->merge_bytes > 0) cost_pass(m, &c->c, c->merge_bytes, 0.0);
        }
        break;
    }
    }
    /* Chunking: decode segments chunk whole requests (q_len rows each), prefill segments rows. */
    int64_t unit = s->decode ? (int64_t)s->q_len : 1;
    int64_t units = s->decode ? (int64_t)(s->r1 - s->r0) : 0;
    if (!s->decode) {
        for (int32_t r = s->r0; r < s->r1; r++)
            if (p->q_lens[r] > units) units = p->q_lens[r];
    }
    if (c->per_row == 0) {
        c->chunk = units;
    } else {
        int64_t per_unit = c->per_row * unit;
        int64_t avail = budget - c->fixed;
        if (avail < per_unit) {
            c->feasible = 0;
            snprintf(c->why, sizeof c->why,
                     "needs %lld B (%lld fixed + %lld per %s) but the workspace budget is %lld B",
                     (long long)(c->fixed + per_unit), (long long)c->fixed, (long long)per_unit,
                     s->decode ? "request" : "row", (long long)budget);
            c->chunk = 0;
        } else {
            c->chunk = avail / per_unit;
            if (c->chunk > units) c->chunk = units;
            if (c->chunk < 1) c->chunk = 1;
        }
    }
    if (c->path == AK_PATH_V4_GATHER && c->feasible) {
        double rows = 0;
        for (int32_t r = s->r0; r < s->r1; r++) {
            int64_t chunks = (p->q_lens[r] + c->chunk - 1) / c->chunk;
            int64_t cmp = d->compress_ratio ? p->kv_lens[r] / d->compress_ratio + 1 : 0;
            rows += (double)chunks * (double)(cmp + d->window - 1) + p->q_lens[r];
        }
        cost_pass(m, &c->c, rows * (bpt + bf + 4.0), 0.0);
    }
    if (c->path == AK_PATH_DSA_GATHER && c->feasible) {
        /* every further row chunk of a request gathers its context again */
        double again = 0;
        for (int32_t r = s->r0; r < s->r1; r++) {
            int64_t chunks = (p->q_lens[r] + c->chunk - 1) / c->chunk;
            if (chunks > 1) again += (double)(chunks - 1) * p->kv_lens[r] * (bpt + bf + 4.0);
        }
        if (again > 0) cost_pass(m, &c->c, again, 0.0);
    }
}

static int64_t seg_ws(const segcand *c, const ak_plan_seg *s) {
    int64_t unit = s->decode ? (int64_t)s->q_len : 1;
    return c->fixed + c->per_row * unit * c->chunk;
}

/* Named preference -> kernel id, or -1 for auto. */
static ak_status pref_kernel(const char *name, const char *option, int *out) {
    *out = -1;
    if (name == NULL || name[0] == '\0' || strcmp(name, "auto") == 0) return AK_OK;
    for (int k = 0; k < K_COUNT; k++)
        if (k_kernels[k].selectable && strcmp(k_kernels[k].pub.name, name) == 0) {
            *out = k;
            return AK_OK;
        }
    return ak_fail(AK_ERR_INVALID_ARGUMENT,
                   "ak_plan_create: %s '%s' is not a kernel name; supported: auto, "
                   "mla_decode_dense, mla_decode_sparse, sparse_prefill_paged, "
                   "gather_sparse_prefill, v4_gather_sparse_prefill, mha_paged",
                   option, name);
}

static kern_id path_attn_kernel(ak_path path) {
    switch (path) {
    case AK_PATH_MHA: return K_MHA;
    case AK_PATH_MLA_DENSE: return K_MLA_DENSE;
    case AK_PATH_DSA_DECODE: return K_MLA_SPARSE;
    case AK_PATH_DSA_PAGED: return K_SPARSE_PREFILL_PAGED;
    case AK_PATH_DSA_GATHER: return K_GATHER_SPARSE_PREFILL;
    case AK_PATH_V4_DECODE: return K_MLA_SPARSE;
    case AK_PATH_V4_GATHER: return K_V4_GATHER_SPARSE_PREFILL;
    case AK_PATH_V4_PAGED_MERGE: return K_SPARSE_PREFILL_PAGED;
    }
    return K_MHA;
}

static const char *backend_name(ak_backend b) {
    return b == AK_BACKEND_CUDA ? "cuda" : "cpu";
}

/* The kernels a path uses, besides its attention kernel, must exist on the backend too. */
static ak_status check_path_backend(ak_plan *p, ak_path path) {
    kern_id need[8];
    int n = 0;
    need[n++] = path_attn_kernel(path);
    if (path == AK_PATH_DSA_DECODE || path == AK_PATH_DSA_PAGED || path == AK_PATH_DSA_GATHER ||
        ((path == AK_PATH_V4_DECODE || path == AK_PATH_V4_GATHER ||
          path == AK_PATH_V4_PAGED_MERGE) &&
         p->d.compress_ratio == 4)) {
        need[n++] = K_INDEXER;
        need[n++] = K_TOPK;
    }
    if (path == AK_PATH_V4_DECODE) need[n++] = K_SWA_INDICES;
    if (path == AK_PATH_V4_GATHER) need[n++] = K_COMBINE;
    if (path == AK_PATH_V4_PAGED_MERGE) {
        need[n++] = K_SWA_INDICES;
        if (p->d.compress_ratio != 0) need[n++] = K_MERGE;
    }
    for (int i = 0; i < n; i++)
        if (!kern_on(need[i], p->backend))
            return ak_fail(AK_ERR_UNSUPPORTED,
                           "ak_plan_create: backend %s: %s attention needs kernel %s (%s), which "
                           "has no %s implementation yet; supported: the CPU backend (backend "
                           "cpu / --backend cpu)",
                           backend_name(p->backend), kind_name(p->d.kind),
                           k_kernels[need[i]].pub.name, k_kernels[need[i]].pub.op,
                           backend_name(p->backend));
    if (p->backend == AK_BACKEND_CUDA)
        return ak_fail(
            AK_ERR_UNSUPPORTED,
            "ak_plan_create: backend cuda: the kernels of this path exist, but the plan "
            "executor builds per-call row metadata (row lengths, cu_seqlens) on the host "
            "and has no device-side builder yet; supported: the CPU backend (backend "
            "cpu / --backend cpu)");
    return AK_OK;
}

/* Can `from` be converted by ak_cache_convert into a layout kernel k reads? */
static ak_layout convert_target(kern_id k, ak_backend b, ak_layout from) {
    static const ak_layout pairs[][2] = {
        {AK_LAYOUT_MLA_FP8_PERTENSOR, AK_LAYOUT_DSA_FP8_BLOCKSCALE},
        {AK_LAYOUT_MLA_BF16, AK_LAYOUT_DSA_FP8_BLOCKSCALE},
        {AK_LAYOUT_DSA_FP8_BLOCKSCALE, AK_LAYOUT_MLA_BF16},
        {AK_LAYOUT_MLA_BF16, AK_LAYOUT_MLA_FP8_PERTENSOR},
        {AK_LAYOUT_MLA_FP8_PERTENSOR, AK_LAYOUT_MLA_BF16},
        {AK_LAYOUT_DSA_FP8_BLOCKSCALE, AK_LAYOUT_MLA_FP8_PERTENSOR},
        {AK_LAYOUT_MHA_NHD, AK_LAYOUT_MHA_HND},
        {AK_LAYOUT_MHA_HND, AK_LAYOUT_MHA_NHD},
    };
    if (!kern_on(K_CONVERT, b)) return AK_LAYOUT_INVALID;
    for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; i++)
        if (pairs[i][0] == from && kern_reads(k, b, pairs[i][1])) return pairs[i][1];
    return AK_LAYOUT_INVALID;
}

/* Decides whether segment s reads the cache directly or through the plan's one conversion. */
static ak_status settle_layout(ak_plan *p, ak_plan_seg *s, ak_path path) {
    kern_id k = path_attn_kernel(path);
    s->converted = 0;
    if (kern_reads(k, p->backend, p->d.layout)) return AK_OK;
    ak_layout to = convert_target(k, p->backend, p->d.layout);
    if (to == AK_LAYOUT_INVALID || p->d.kind == AK_ATTN_DSV4)
        return ak_fail(AK_ERR_UNSUPPORTED,
                       "ak_plan_create: layout %s: kernel %s on backend %s reads %s, and no "
                       "conversion from %s reaches one",
                       lay_name(p->d.layout), k_kernels[k].pub.name, backend_name(p->backend),
                       k_kernels[k].pub.layouts, lay_name(p->d.layout));
    if (p->convert_to != AK_LAYOUT_INVALID && p->convert_to != to)
        return ak_fail(AK_ERR_UNSUPPORTED,
                       "ak_plan_create: layout %s would need two conversions (%s and %s) in one "
                       "batch; name kernels that read a common layout",
                       lay_name(p->d.layout), lay_name(p->convert_to), lay_name(to));
    p->convert_to = to;
    s->converted = 1;
    return AK_OK;
}

static ak_status validate(const ak_plan_desc *d) {
    const char *fn = "ak_plan_create";
    if ((unsigned)d->kind > (unsigned)AK_ATTN_MHA)
        return ak_fail(AK_ERR_INVALID_ARGUMENT,
                       "%s: desc.kind %d, expected 0..3 (MLA, DSA, DSV4, MHA)", fn, (int)d->kind);
    if (d->h_q < 1 || d->h_kv < 1 || d->h_q % d->h_kv != 0)
        return ak_fail(AK_ERR_INVALID_ARGUMENT,
                       "%s: desc.h_q %d, h_kv %d: expected h_q >= 1, h_kv >= 1, h_q %% h_kv == 0",
                       fn, (int)d->h_q, (int)d->h_kv);
    if (d->page_size < 1)
        return ak_fail(AK_ERR_INVALID_ARGUMENT, "%s: desc.page_size %d, expected >= 1", fn,
                       (int)d->page_size);
    if (!(d->softmax_scale > 0.0f) || d->softmax_scale != d->softmax_scale)
        return ak_fail(AK_ERR_INVALID_ARGUMENT, "%s: desc.softmax_scale %g, expected > 0", fn,
                       (double)d->softmax_scale);
    if (d->workspace_budget < 0)
        return ak_fail(AK_ERR_INVALID_ARGUMENT, "%s: desc.workspace_budget %lld, expected >= 0", fn,
                       (long long)d->workspace_budget);
    if (d->target != AK_BACKEND_AUTO && d->target != AK_BACKEND_CPU && d->target != AK_BACKEND_CUDA)
        return ak_fail(AK_ERR_INVALID_ARGUMENT, "%s: desc.target %d, expected AUTO, CPU or CUDA",
                       fn, (int)d->target);
    if (d->num_requests < 0 ||
        (d->num_requests > 0 && (d->phases == NULL || d->q_lens == NULL || d->kv_lens == NULL)))
        return ak_fail(AK_ERR_INVALID_ARGUMENT,
                       "%s: desc.num_requests %d with phases %p, q_lens %p, kv_lens %p: expected "
                       ">= 0 and three arrays of that length",
                       fn, (int)d->num_requests, (const void *)d->phases, (const void *)d->q_lens,
                       (const void *)d->kv_lens);
    for (int32_t r = 0; r < d->num_requests; r++) {
        ak_phase ph = d->phases[r];
        int32_t q = d->q_lens[r], kv = d->kv_lens[r];
        if ((unsigned)ph >= (unsigned)AK_PHASE_COUNT_)
            return ak_fail(AK_ERR_INVALID_ARGUMENT, "%s: phases[%d] = %d, expected 0..4", fn,
                           (int)r, (int)ph);
        if (q < 0 || kv < q)
            return ak_fail(
                AK_ERR_INVALID_ARGUMENT,
                "%s: request %d (%s): q_len %d, kv_len %d: expected 0 <= q_len <= kv_len", fn,
                (int)r, ak_phase_name(ph), (int)q, (int)kv);
        if (ph == AK_PHASE_PREFILL && q != kv)
            return ak_fail(
                AK_ERR_INVALID_ARGUMENT,
                "%s: request %d (prefill): q_len %d != kv_len %d; a cached prefix is the "
                "extend phase",
                fn, (int)r, (int)q, (int)kv);
        if (ph == AK_PHASE_DECODE && q > 1)
            return ak_fail(AK_ERR_INVALID_ARGUMENT,
                           "%s: request %d (decode): q_len %d, expected 0 or 1 (multi-token decode "
                           "rows are target-verify or draft-extend)",
                           fn, (int)r, (int)q);
    }
    return AK_OK;
}

/* Attention kind vs layouts and dims: every rejection names the supported set. */
static ak_status check_kind(const ak_plan_desc *d) {
    const char *fn = "ak_plan_create";
    switch (d->kind) {
    case AK_ATTN_MLA:
    case AK_ATTN_DSA:
        if (d->layout != AK_LAYOUT_MLA_BF16 && d->layout != AK_LAYOUT_MLA_FP8_PERTENSOR &&
            d->layout != AK_LAYOUT_DSA_FP8_BLOCKSCALE)
            return ak_fail(AK_ERR_UNSUPPORTED,
                           "%s: layout %s cannot hold %s attention (d_qk 576); supported: "
                           "MLA_BF16, MLA_FP8_PERTENSOR, DSA_FP8_BLOCKSCALE",
                           fn, lay_name(d->layout), kind_name(d->kind));
        if (d->d_qk != 576 || d->d_v != 512 || d->h_kv != 1)
            return ak_fail(AK_ERR_UNSUPPORTED,
                           "%s: %s with d_qk %d, d_v %d, h_kv %d; supported: d_qk 576, d_v 512, "
                           "h_kv 1 (absorbed MLA)",
                           fn, kind_name(d->kind), (int)d->d_qk, (int)d->d_v, (int)d->h_kv);
        if (d->kind == AK_ATTN_DSA) {
            if (d->topk < 1 || d->index_heads < 1 || d->index_heads > 64)
                return ak_fail(AK_ERR_UNSUPPORTED,
                               "%s: DSA with topk %d, index_heads %d; supported: topk >= 1, "
                               "index_heads 1..64",
                               fn, (int)d->topk, (int)d->index_heads);
            if (d->page_size != 64)
                return ak_fail(AK_ERR_UNSUPPORTED,
                               "%s: DSA page_size %d: the indexer cache shares the main cache's "
                               "page ids and has 64-token pages; supported: page_size 64",
                               fn, (int)d->page_size);
        }
        return AK_OK;
    case AK_ATTN_DSV4:
        if (d->layout != AK_LAYOUT_DSV4_FP8_UE8M0)
            return ak_fail(AK_ERR_UNSUPPORTED,
                           "%s: layout %s cannot hold DeepSeek V4 attention (d_qk 512, UE8M0 "
                           "scales per 64 dims); supported layouts: DSV4_FP8_UE8M0",
                           fn, lay_name(d->layout));
        if (d->d_qk != 512 || d->d_v != 512 || d->h_kv != 1 || d->window < 1)
            return ak_fail(
                AK_ERR_UNSUPPORTED,
                "%s: DSV4 with d_qk %d, d_v %d, h_kv %d, window %d; supported: d_qk 512, "
                "d_v 512, h_kv 1, window >= 1",
                fn, (int)d->d_qk, (int)d->d_v, (int)d->h_kv, (int)d->window);
        if (d->compress_ratio != 0 && d->compress_ratio != 4 && d->compress_ratio != 128)
            return ak_fail(AK_ERR_UNSUPPORTED,
                           "%s: DSV4 compress_ratio %d; supported: 0 (SWA only), 4 (C4 + top-k), "
                           "128 (C128)",
                           fn, (int)d->compress_ratio);
        if (d->compress_ratio != 0) {
            if (d->extra_layout != AK_LAYOUT_DSV4_FP8_UE8M0)
                return ak_fail(AK_ERR_UNSUPPORTED,
                               "%s: DSV4 compressed cache layout %s; supported extra layouts: "
                               "DSV4_FP8_UE8M0",
                               fn, lay_name(d->extra_layout));
            if (d->page_size % d->compress_ratio != 0 ||
                d->extra_page_size != d->page_size / d->compress_ratio)
                return ak_fail(AK_ERR_UNSUPPORTED,
                               "%s: DSV4 extra_page_size %d with page_size %d, ratio %d: the "
                               "compressed pool shares page ids, so it needs page_size / ratio = "
                               "%d entries per page",
                               fn, (int)d->extra_page_size, (int)d->page_size,
                               (int)d->compress_ratio, (int)(d->page_size / d->compress_ratio));
        }
        if (d->compress_ratio == 4) {
            if (d->topk < 1 || d->index_heads < 1 || d->index_heads > 64)
                return ak_fail(AK_ERR_UNSUPPORTED,
                               "%s: DSV4 C4 with topk %d, index_heads %d; supported: topk >= 1, "
                               "index_heads 1..64",
                               fn, (int)d->topk, (int)d->index_heads);
            if (d->page_size != 256)
                return ak_fail(AK_ERR_UNSUPPORTED,
                               "%s: DSV4 C4 page_size %d: the C4 indexer cache has 64-entry pages "
                               "sharing page ids, so full pages hold 256 tokens; supported: 256",
                               fn, (int)d->page_size);
        }
        return AK_OK;
    case AK_ATTN_MHA: {
        int ok = (d->d_qk == d->d_v && (d->d_qk == 64 || d->d_qk == 128 || d->d_qk == 256)) ||
                 (d->d_qk == 192 && d->d_v == 128);
        if (d->layout != AK_LAYOUT_MHA_NHD && d->layout != AK_LAYOUT_MHA_HND)
            return ak_fail(AK_ERR_UNSUPPORTED,
                           "%s: layout %s cannot hold MHA attention; supported: MHA_NHD, MHA_HND",
                           fn, lay_name(d->layout));
        if (!ok)
            return ak_fail(AK_ERR_UNSUPPORTED,
                           "%s: MHA head dims %d/%d; supported: 64, 128, 256, 192/128", fn,
                           (int)d->d_qk, (int)d->d_v);
        return AK_OK;
    }
    }
    return AK_OK;
}

/* Candidates for segment s. Decode rows consult only decode_kernel, prefill rows only
   prefill_kernel (docs/planner.md rule R1). */
static int candidates(const ak_plan *p, const ak_plan_seg *s, int dense, segcand *c) {
    int n = 0;
    memset(c, 0, 3 * sizeof *c);
    switch (p->d.kind) {
    case AK_ATTN_MHA: c[n].path = AK_PATH_MHA, c[n].label = "paged MHA", n++; break;
    case AK_ATTN_MLA:
        c[n].path = AK_PATH_MLA_DENSE, c[n].label = "dense MLA decode kernel, causal rows", n++;
        break;
    case AK_ATTN_DSV4:
        c[n].path = AK_PATH_V4_DECODE, c[n].tf = AK_TRANSFORM_PAGED,
        c[n].label = "sparse decode kernel over SWA + compressed lists", n++;
        if (!s->decode) {
            c[n].path = AK_PATH_V4_GATHER, c[n].tf = AK_TRANSFORM_NONE,
            c[n].label = "gather-dequantize compressed + window rows, flat sparse prefill", n++;
            c[n].path = AK_PATH_V4_PAGED_MERGE, c[n].tf = AK_TRANSFORM_PAGED,
            c[n].label = "paged sparse prefill per pool, merged", n++;
        }
        break;
    case AK_ATTN_DSA:
        if (dense) {
            c[n].path = AK_PATH_MLA_DENSE,
            c[n].label = "dense causal MLA (whole context fits in top-k: sparse equals dense)", n++;
        } else if (s->decode) {
            c[n].path = AK_PATH_DSA_DECODE, c[n].tf = AK_TRANSFORM_PAGED,
            c[n].label = "sparse decode kernel", n++;
        } else {
            c[n].path = AK_PATH_DSA_PAGED, c[n].tf = AK_TRANSFORM_PAGED,
            c[n].label = "paged sparse prefill reading the cache directly", n++;
            c[n].path = AK_PATH_DSA_GATHER, c[n].tf = AK_TRANSFORM_RAGGED,
            c[n].label = "gather-dequantize to bf16, then flat sparse prefill", n++;
            c[n].path = AK_PATH_DSA_DECODE, c[n].tf = AK_TRANSFORM_PAGED,
            c[n].label = "prefill rows through the sparse decode kernel", n++;
        }
        break;
    }
    for (int i = 0; i < n; i++)
        c[i].attn = path_attn_kernel(c[i].path);
    return n;
}

/* Emits the steps of segment s along path c. */
static ak_status emit(ak_plan *p, const ak_plan_seg *s, const segcand *c) {
    const ak_plan_desc *d = &p->d;
    ak_layout L = s->converted ? p->convert_to : d->layout;
    int64_t pr = c->per_row * (s->decode ? s->q_len : 1) * c->chunk;
    const char *cls = s->decode ? "decode-class rows (decode, verify, draft-extend) use the decode "
                                  "kernel with multi-token queries"
                                : "prefill-class rows";
    switch (c->path) {
    case AK_PATH_MHA:
        return add_step(p, AK_STEP_MHA, K_MHA, s, AK_TRANSFORM_NONE, L, c->fixed, c->c.secs,
                        "%s; causal bottom-right, one call over the segment", cls);
    case AK_PATH_MLA_DENSE:
        return add_step(p, AK_STEP_MLA_DENSE, K_MLA_DENSE, s, AK_TRANSFORM_NONE, L, 0, c->c.secs,
                        "%s; %s; reads %s directly (no conversion)", cls, c->label, lay_name(L));
    case AK_PATH_V4_DECODE:
    case AK_PATH_V4_PAGED_MERGE:
        if (d->compress_ratio == 4) {
            AK_TRY(add_step(p, AK_STEP_INDEXER, K_INDEXER, s, AK_TRANSFORM_NONE,
                            AK_LAYOUT_INDEXER_FP8, pr, c->c_index.secs,
                            "C4 indexer logits over the (pos+1)/4 visible compressed entries, "
                            "%lld columns, chunked to the budget",
                            (long long)s->width));
            AK_TRY(add_step(p, AK_STEP_TOPK, K_TOPK, s, AK_TRANSFORM_PAGED, AK_LAYOUT_INVALID, 0,
                            0.0,
                            "top-%d with the PAGED transform into C4 slots (page %d): the consumer "
                            "(%s) reads the paged pool",
                            (int)d->topk, (int)d->extra_page_size, k_kernels[c->attn].pub.name));
        } else if (d->compress_ratio == 128) {
            AK_TRY(add_step(p, AK_STEP_INDEX_LIST, K_TOPK_TRANSFORM, s, AK_TRANSFORM_PAGED,
                            AK_LAYOUT_INVALID, 0, 0.0,
                            "C128 is dense over compressed entries: positions 0..(pos+1)/128-1 "
                            "mapped to C128 slots by the PAGED transform (page %d)",
                            (int)d->extra_page_size));
        }
        AK_TRY(add_step(p, AK_STEP_INDEX_LIST, K_SWA_INDICES, s, AK_TRANSFORM_PAGED,
                        AK_LAYOUT_INVALID, d->compress_ratio == 4 ? 0 : pr, 0.0,
                        "sliding-window list of the last %d positions as slots of the main cache",
                        (int)d->window));
        if (c->path == AK_PATH_V4_PAGED_MERGE) {
            double secs = c->c.secs - c->c_index.secs;
            if (d->compress_ratio == 0)
                return add_step(p, AK_STEP_SPARSE_PREFILL, K_SPARSE_PREFILL_PAGED, s,
                                AK_TRANSFORM_PAGED, L, 0, secs,
                                "%s; SWA-only layer: one paged sparse prefill over the window "
                                "with the sink",
                                cls);
            AK_TRY(add_step(p, AK_STEP_SPARSE_PREFILL, K_SPARSE_PREFILL_PAGED, s,
                            AK_TRANSFORM_PAGED, L, 0, secs / 2,
                            "%s; partial state over the window (main cache), no sink", cls));
            AK_TRY(add_step(p, AK_STEP_SPARSE_PREFILL, K_SPARSE_PREFILL_PAGED, s,
                            AK_TRANSFORM_PAGED, d->extra_layout, 0, secs / 2,
                            "partial state over the compressed list (extra cache), no sink"));
            return add_step(p, AK_STEP_MERGE, K_MERGE, s, AK_TRANSFORM_NONE, AK_LAYOUT_INVALID, 0,
                            0.0,
                            "merge the two partial states (disjoint key sets, rule M1) and apply "
                            "the sink once (rule M2)");
        }
        return add_step(p, AK_STEP_MLA_SPARSE, K_MLA_SPARSE, s, AK_TRANSFORM_PAGED, L, 0,
                        c->c.secs - c->c_index.secs,
                        "%s; one softmax over the window (main cache) and the %s list (extra "
                        "cache)%s",
                        cls, d->compress_ratio == 0 ? "empty" : "compressed",
                        s->decode ? ""
                                  : "; prefill rows run as decode rows (every decode kernel "
                                    "accepts extend-shaped batches)");
    case AK_PATH_V4_GATHER:
        AK_TRY(add_step(p, AK_STEP_GATHER, K_GATHER, s, AK_TRANSFORM_NONE, L, c->fixed, 0.0,
                        "gather and dequantize, per row chunk, the request's compressed entries "
                        "(<= %lld) and the window the chunk sees into bf16 rows [.., 512], "
                        "compressed region first (semantics.md 10.4)",
                        (long long)s->width));
        if (d->compress_ratio == 4) {
            AK_TRY(add_step(p, AK_STEP_INDEXER, K_INDEXER, s, AK_TRANSFORM_NONE,
                            AK_LAYOUT_INDEXER_FP8, pr, c->c_index.secs,
                            "C4 indexer logits over the (pos+1)/4 visible compressed entries, "
                            "%lld columns, chunked to the budget",
                            (long long)s->width));
            AK_TRY(add_step(p, AK_STEP_TOPK, K_TOPK, s, AK_TRANSFORM_NONE, AK_LAYOUT_INVALID, 0,
                            0.0,
                            "top-%d without a transform: the consumer is the index combiner, "
                            "which offsets request-local positions into the gathered rows",
                            (int)d->topk));
        }
        AK_TRY(add_step(p, AK_STEP_INDEX_LIST, K_COMBINE, s, AK_TRANSFORM_RAGGED, AK_LAYOUT_INVALID,
                        d->compress_ratio == 4 ? 0 : pr, 0.0,
                        "combined rows: compressed selections then the window, as row numbers "
                        "of the gathered bf16 rows (semantics.md 10.5)"));
        return add_step(p, AK_STEP_SPARSE_PREFILL, K_V4_GATHER_SPARSE_PREFILL, s,
                        AK_TRANSFORM_RAGGED, AK_LAYOUT_MLA_BF16, 0, c->c.secs - c->c_index.secs,
                        "%s; %s", cls, c->label);
    case AK_PATH_DSA_DECODE:
    case AK_PATH_DSA_PAGED:
    case AK_PATH_DSA_GATHER: {
        if (c->path == AK_PATH_DSA_GATHER)
            AK_TRY(
                add_step(p, AK_STEP_GATHER, K_GATHER, s, AK_TRANSFORM_NONE, L, c->fixed, 0.0,
                         "gather and dequantize the context a row chunk sees (<= %lld positions) "
                         "into a bf16 workspace [kv, %d], once per chunk",
                         (long long)s->gather_rows, (int)d->d_qk));
        AK_TRY(add_step(p, AK_STEP_INDEXER, K_INDEXER, s, AK_TRANSFORM_NONE, AK_LAYOUT_INDEXER_FP8,
                        pr, c->c_index.secs,
                        "indexer logits, paged, %lld columns; chunks of %lld %s fit the budget",
                        (long long)s->width, (long long)c->chunk, s->decode ? "requests" : "rows"));
        AK_TRY(add_step(p, AK_STEP_TOPK, K_TOPK, s, c->tf, AK_LAYOUT_INVALID, 0, 0.0,
                        "top-%d with the %s transform, fixed by its consumer %s (%s)", (int)d->topk,
                        transform_name(c->tf), k_kernels[c->attn].pub.name,
                        c->tf == AK_TRANSFORM_RAGGED ? "indices address the gathered bf16 rows"
                                                     : "indices are slot ids of the paged pool"));
        if (c->path == AK_PATH_DSA_DECODE)
            return add_step(p, AK_STEP_MLA_SPARSE, K_MLA_SPARSE, s, AK_TRANSFORM_PAGED, L, 0,
                            c->c.secs - c->c_index.secs, "%s; %s; reads %s directly", cls, c->label,
                            lay_name(L));
        return add_step(p, AK_STEP_SPARSE_PREFILL, c->attn, s, c->tf,
                        c->path == AK_PATH_DSA_GATHER ? AK_LAYOUT_MLA_BF16 : L, 0,
                        c->c.secs - c->c_index.secs, "%s; %s", cls, c->label);
    }
    }
    return AK_OK;
}

/* Plans one segment: candidates, preference, backend, cost, budget, steps. */
static ak_status plan_segment(ak_plan *p, const costmodel *m, ak_plan_seg *s, int dense, int pref,
                              int64_t budget) {
    const ak_plan_desc *d = &p->d;
    const char *option = s->decode ? "decode_kernel" : "prefill_kernel";
    segcand c[3];
    int n = candidates(p, s, dense, c);
    say(p, "segment %d: requests [%d, %d), %s, %lld rows, max kv %lld, indexed width %lld\n",
        (int)p->nseg, (int)s->r0, (int)s->r1, s->decode ? "decode-class" : "prefill-class",
        (long long)s->rows, (long long)s->gather_rows, (long long)s->width);
    if (pref >= 0) {
        int keep = -1;
        for (int i = 0; i < n; i++)
            if ((int)c[i].attn == pref) keep = i;
        if (keep < 0 && d->kind == AK_ATTN_DSA && pref == K_MLA_SPARSE && dense) {
            /* A named sparse kernel also serves short contexts (top-k keeps every position). */
            memset(&c[0], 0, sizeof c[0]);
            c[0].path = AK_PATH_DSA_DECODE, c[0].tf = AK_TRANSFORM_PAGED, c[0].attn = K_MLA_SPARSE;
            c[0].label = "sparse decode kernel (named)";
            keep = 0;
        }
        if (keep < 0) {
            char alts[256] = "auto";
            for (int i = 0; i < n; i++) {
                size_t l = strlen(alts);
                snprintf(alts + l, sizeof alts - l, ", %s", k_kernels[c[i].attn].pub.name);
            }
            return ak_fail(AK_ERR_UNSUPPORTED,
                           "ak_plan_create: %s '%s' cannot compute %s %s rows (requests %d..%d)%s; "
                           "supported: %s",
                           option, k_kernels[pref].pub.name, kind_name(d->kind),
                           s->decode ? "decode-class" : "prefill-class", (int)s->r0, (int)s->r1 - 1,
                           dense ? ""
                                 : (d->kind == AK_ATTN_DSA && pref == K_MLA_DENSE
                                        ? " (contexts exceed top-k, so they need sparse "
                                          "attention)"
                                        : ""),
                           alts);
        }
        if (keep != 0) c[0] = c[keep];
        n = 1;
    }
    int best = -1, shown = 0;
    ak_status first_err = AK_OK;
    char err[512] = "";
    for (int i = 0; i < n; i++) {
        ak_layout saved = p->convert_to; /* a candidate's conversion binds only if chosen */
        ak_status st = check_path_backend(p, c[i].path);
        if (st == AK_OK) st = settle_layout(p, s, c[i].path);
        if (st != AK_OK) {
            if (first_err == AK_OK) {
                first_err = st;
                snprintf(err, sizeof err, "%s", ak_last_error());
            }
            c[i].feasible = 0;
            snprintf(c[i].why, sizeof c[i].why, "not on backend %s", backend_name(p->backend));
            say(p, "  candidate %-22s infeasible: %s\n", k_kernels[c[i].attn].pub.name, c[i].why);
            p->convert_to = saved;
            continue;
        }
        evaluate(p, m, s, &c[i], budget);
        p->convert_to = saved;
        if (!shown++)
            say(p,
                "  inputs: %lld rows, %.0f cached tokens, %.0f (row, key) attention pairs, %.0f "
                "indexer pairs\n",
                (long long)s->rows, c[i].kv_sum, c[i].keys, c[i].idx_pairs);
        say(p, "  candidate %-22s %s: bytes %.3e, FLOPs %.3e -> %.3e s",
            k_kernels[c[i].attn].pub.name, transform_name(c[i].tf), c[i].c.bytes, c[i].c.flops,
            c[i].c.secs);
        if (!c[i].feasible)
            say(p, " infeasible: %s\n", c[i].why);
        else
            say(p, " (chunk %lld %s, workspace %lld B)\n", (long long)c[i].chunk,
                s->decode ? "requests" : "rows", (long long)seg_ws(&c[i], s));
        if (c[i].feasible && (best < 0 || c[i].c.secs < c[best].c.secs)) best = i;
    }
    if (best < 0) {
        if (first_err != AK_OK) return ak_fail(first_err, "%s", err);
        return ak_fail(AK_ERR_UNSUPPORTED,
                       "ak_plan_create: workspace_budget %lld B: %s rows of requests %d..%d %s; "
                       "raise the budget",
                       (long long)budget, kind_name(d->kind), (int)s->r0, (int)s->r1 - 1, c[0].why);
    }
    AK_TRY(settle_layout(p, s, c[best].path));
    s->path = c[best].path;
    s->chunk = c[best].chunk;
    s->ws = seg_ws(&c[best], s);
    say(p, "  chosen: %s (%s)%s\n", k_kernels[c[best].attn].pub.name,
        n > 1       ? "lowest estimated time; ties keep the earlier candidate"
        : pref >= 0 ? "named by the preference"
                    : "only path",
        s->converted ? ", reading the converted cache" : "");
    return emit(p, s, &c[best]);
}

static ak_status plan_build(ak_plan *p, const ak_plan_desc *names, const ak_device_info *info) {
    const ak_plan_desc *d = &p->d;
    int pre = -1, dec = -1;
    AK_TRY(pref_kernel(names->prefill_kernel, "prefill_kernel", &pre));
    AK_TRY(pref_kernel(names->decode_kernel, "decode_kernel", &dec));
    if (pre >= 0 && !k_kernels[pre].pub.prefill)
        return ak_fail(
            AK_ERR_UNSUPPORTED,
            "ak_plan_create: prefill_kernel '%s' is not a prefill-capable kernel; "
            "supported: auto, mla_decode_dense, mla_decode_sparse, sparse_prefill_paged, "
            "gather_sparse_prefill, v4_gather_sparse_prefill, mha_paged",
            k_kernels[pre].pub.name);
    if (dec >= 0 && !k_kernels[dec].pub.decode)
        return ak_fail(AK_ERR_UNSUPPORTED,
                       "ak_plan_create: decode_kernel '%s' is prefill-only; supported: auto, "
                       "mla_decode_dense, mla_decode_sparse, mha_paged",
                       k_kernels[dec].pub.name);
    costmodel m;
    m.bw = info->copy_bytes_per_s > 0 ? info->copy_bytes_per_s : 10e9;
    m.fl = info->bf16_flops_per_s > 0 ? info->bf16_flops_per_s : 20e9;
    int64_t budget = d->workspace_budget > 0 ? d->workspace_budget : AK_PLAN_DEFAULT_BUDGET;
    ak_layout_traits t;
    memset(&t, 0, sizeof t);
    ak_layout_traits_get(d->layout, &t);
    say(p, "attnkit plan: %s attention, h_q %d, h_kv %d, d_qk %d, d_v %d", kind_name(d->kind),
        (int)d->h_q, (int)d->h_kv, (int)d->d_qk, (int)d->d_v);
    if (d->kind == AK_ATTN_DSA || (d->kind == AK_ATTN_DSV4 && d->compress_ratio == 4))
        say(p, ", topk %d, indexer %d x 128", (int)d->topk, (int)d->index_heads);
    if (d->kind == AK_ATTN_DSV4)
        say(p, ", window %d, compress ratio %d", (int)d->window, (int)d->compress_ratio);
    if (t.bytes_per_token == 0) /* MHA: K and V of every kv head, bf16 */
        t.bytes_per_token = d->h_kv * (d->d_qk + d->d_v) * 2;
    say(p, "\ncache: %s (%d B/token), page %d", lay_name(d->layout), (int)t.bytes_per_token,
        (int)d->page_size);
    if (d->kind == AK_ATTN_DSV4 && d->compress_ratio != 0)
        say(p, "; compressed %s, page %d", lay_name(d->extra_layout), (int)d->extra_page_size);
    say(p, "\nbackend %s (%s, %d SMs/threads); cost model: copy %.3e B/s, bf16 %.3e FLOP/s\n",
        backend_name(p->backend), info->name, (int)info->sm_count, m.bw, m.fl);
    say(p, "preferences: prefill %s, decode %s; workspace budget %lld B\n",
        pre >= 0 ? k_kernels[pre].pub.name : "auto", dec >= 0 ? k_kernels[dec].pub.name : "auto",
        (long long)budget);
    say(p, "batch: %d requests, %lld query rows\n", (int)d->num_requests, (long long)p->total_rows);

    p->segs =
        (ak_plan_seg *)calloc((size_t)(d->num_requests > 0 ? d->num_requests : 1), sizeof *p->segs);
    if (p->segs == NULL) return ak_fail(AK_ERR_OUT_OF_MEMORY, "ak_plan_create: segments");
    int32_t r = 0;
    while (r < d->num_requests) {
        if (p->q_lens[r] == 0) { /* an empty (or padded) request has no rows and costs nothing */
            r++;
            continue;
        }
        int decode = phase_is_decode(p->phases[r]);
        int pref = decode ? dec : pre;
        int dense =
            d->kind == AK_ATTN_DSA && p->kv_lens[r] <= d->topk && (pref < 0 || pref == K_MLA_DENSE);
        int32_t e = r + 1;
        while (e < d->num_requests && p->q_lens[e] != 0 &&
               phase_is_decode(p->phases[e]) == decode &&
               (!decode || p->q_lens[e] == p->q_lens[r]) &&
               (d->kind != AK_ATTN_DSA ||
                (p->kv_lens[e] <= d->topk && (pref < 0 || pref == K_MLA_DENSE)) == dense))
            e++;
        ak_plan_seg *s = &p->segs[p->nseg];
        s->r0 = r;
        s->r1 = e;
        s->decode = decode;
        s->q_len = p->q_lens[r];
        s->row0 = p->cu_q[r];
        s->rows = p->cu_q[e] - p->cu_q[r];
        for (int32_t i = r; i < e; i++) {
            int64_t w = p->kv_lens[i];
            if (d->kind == AK_ATTN_DSV4) w = d->compress_ratio ? w / d->compress_ratio : 0;
            if (w > s->width) s->width = w;
            if (p->kv_lens[i] > s->gather_rows) s->gather_rows = p->kv_lens[i];
        }
        AK_TRY(plan_segment(p, &m, s, dense, pref, budget));
        if (s->ws > p->ws_bytes) p->ws_bytes = s->ws;
        p->nseg++;
        r = e;
    }
    if (p->convert_to != AK_LAYOUT_INVALID) {
        int64_t pages = 0;
        for (int32_t i = 0; i < p->nseg; i++)
            if (p->segs[i].converted)
                for (int32_t q = p->segs[i].r0; q < p->segs[i].r1; q++)
                    pages += (p->kv_lens[q] + d->page_size - 1) / d->page_size;
        p->convert_pages = pages;
        p->ws_bytes += pages * 4;
        /* The conversion runs first, once, for the union of the pages the converted readers
           touch; move it to the front of the step list. */
        AK_TRY(add_step(
            p, AK_STEP_CONVERT, K_CONVERT, NULL, AK_TRANSFORM_NONE, d->layout, pages * 4,
            (double)pages * d->page_size * (lay_bpt(d->layout) + lay_bpt(p->convert_to)) / m.bw,
            "convert the <= %lld pages the batch touches from %s to %s once (read by "
            "%s), into io.convert_cache",
            (long long)pages, lay_name(d->layout), lay_name(p->convert_to),
            "the kernels marked as reading it"));
        ak_plan_istep cv = p->steps[p->nsteps - 1];
        memmove(p->steps + 1, p->steps, (size_t)(p->nsteps - 1) * sizeof *p->steps);
        p->steps[0] = cv;
    }
    say(p, "steps:\n");
    double total = 0;
    for (int32_t i = 0; i < p->nsteps; i++) {
        const ak_plan_step *st = &p->steps[i].pub;
        total += st->est_seconds;
        say(p, "  %2d. %-22s %-34s requests [%d, %d) rows %lld chunk %lld", (int)i + 1, st->kernel,
            st->op, (int)st->req_begin, (int)st->req_end, (long long)st->rows,
            (long long)st->chunk_rows);
        if (st->transform != AK_TRANSFORM_NONE)
            say(p, " transform %s", transform_name(st->transform));
        if (st->reads != AK_LAYOUT_INVALID) say(p, " reads %s", lay_name(st->reads));
        say(p, " workspace %lld B est %.3e s\n      why: %s\n", (long long)st->workspace_bytes,
            st->est_seconds, p->steps[i].reason);
    }
    say(p,
        "plan workspace %lld B (plus op scratch, see ak_plan_workspace_size); estimated %.3e s\n",
        (long long)p->ws_bytes, total);
    return AK_OK;
}

ak_status ak_plan_create(ak_context *ctx, const ak_plan_desc *desc, ak_plan **out) {
    const char *fn = "ak_plan_create";
    AK_TRY(ak_check_context(ctx, fn));
    if (out == NULL) return ak_fail(AK_ERR_INVALID_ARGUMENT, "%s: out is NULL", fn);
    *out = NULL;
    if (desc == NULL) return ak_fail(AK_ERR_INVALID_ARGUMENT, "%s: desc is NULL", fn);
    AK_TRY(validate(desc));
    AK_TRY(check_kind(desc));
    ak_plan *p = (ak_plan *)calloc(1, sizeof *p);
    if (p == NULL) return ak_fail(AK_ERR_OUT_OF_MEMORY, "%s: plan", fn);
    p->ctx = ctx;
    p->backend = desc->target == AK_BACKEND_AUTO ? ctx->backend : desc->target;
    p->d = *desc;
    size_t n = (size_t)desc->num_requests;
    p->phases = (ak_phase *)malloc((n ? n : 1) * sizeof *p->phases);
    p->q_lens = (int32_t *)malloc((n ? n : 1) * sizeof *p->q_lens);
    p->kv_lens = (int32_t *)malloc((n ? n : 1) * sizeof *p->kv_lens);
    p->cu_q = (int64_t *)malloc((n + 1) * sizeof *p->cu_q);
    if (p->phases == NULL || p->q_lens == NULL || p->kv_lens == NULL || p->cu_q == NULL) {
        ak_plan_destroy(p);
        return ak_fail(AK_ERR_OUT_OF_MEMORY, "%s: %zu requests", fn, n);
    }
    if (n) {
        memcpy(p->phases, desc->phases, n * sizeof *p->phases);
        memcpy(p->q_lens, desc->q_lens, n * sizeof *p->q_lens);
        memcpy(p->kv_lens, desc->kv_lens, n * sizeof *p->kv_lens);
    }
    p->d.phases = p->phases;
    p->d.q_lens = p->q_lens;
    p->d.kv_lens = p->kv_lens;
    p->d.prefill_kernel = NULL; /* names are resolved during the build; not kept */
    p->d.decode_kernel = NULL;
    p->d.device = NULL;
    p->cu_q[0] = 0;
    for (size_t i = 0; i < n; i++)
        p->cu_q[i + 1] = p->cu_q[i] + p->q_lens[i];
    p->total_rows = p->cu_q[n];
    ak_device_info info = ctx->info;
    if (desc->device != NULL) info = *desc->device;
    ak_status s = plan_build(p, desc, &info);
    if (s != AK_OK) {
        ak_plan_destroy(p);
        return s;
    }
    if (p->explain == NULL) {
        ak_plan_destroy(p);
        return ak_fail(AK_ERR_OUT_OF_MEMORY, "%s: explain text", fn);
    }
    *out = p;
    ak_clear_error();
    return AK_OK;
}

void ak_plan_destroy(ak_plan *plan) {
    if (plan == NULL) return;
    free(plan->phases);
    free(plan->q_lens);
    free(plan->kv_lens);
    free(plan->cu_q);
    free(plan->segs);
    free(plan->steps);
    free(plan->explain);
    free(plan);
}

const char *ak_plan_explain(const ak_plan *plan) {
    return plan != NULL && plan->explain != NULL ? plan->explain : "";
}

int32_t ak_plan_step_count(const ak_plan *plan) {
    return plan != NULL ? plan->nsteps : 0;
}

ak_status ak_plan_step_get(const ak_plan *plan, int32_t i, ak_plan_step *out) {
    if (plan == NULL || out == NULL)
        return ak_fail(AK_ERR_INVALID_ARGUMENT,
                       "ak_plan_step_get: plan %p, out %p: expected non-NULL", (const void *)plan,
                       (void *)out);
    if ((uint32_t)i >= (uint32_t)plan->nsteps)
        return ak_fail(AK_ERR_INVALID_ARGUMENT, "ak_plan_step_get: i %d, expected 0..%d", (int)i,
                       (int)plan->nsteps - 1);
    *out = plan->steps[i].pub;
    out->reason = plan->steps[i].reason;
    return AK_OK;
}
