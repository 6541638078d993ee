/*
 * attnkit.h -- the whole public C11 API of attnkit.
 *
 * attnkit is the attention-backend layer of an LLM serving engine: DeepSeek MLA (dense and sparse),
 * DeepSeek V3.2 sparse attention with its lightning indexer, DeepSeek V4 (sliding window plus
 * compressed caches) and paged MHA/GQA, over paged KV caches whose byte layouts are explicit.
 *
 * How to read this header
 *   - Every call returns an ak_status. On failure ak_last_error() gives a thread-local detail line
 *     naming the argument, its value and the accepted set. Nothing is written on a failed call.
 *   - Tensors are ak_tensor descriptors (DLPack-like): data, dtype, shape and strides in elements.
 *     The innermost dimension must be contiguous (stride 1) unless a function says otherwise.
 *   - Caches are ak_cache descriptors: a pool of num_pages pages of page_size tokens in one of the
 *     registered layouts. A token's slot id is page * page_size + offset.
 *   - Index rule I1: an index (slot id, position, page id) is valid iff 0 <= i < its bound. Every
 *     other value (-1, any negative, any value >= bound) is an invalid key: skipped, never read.
 *   - All attention ops return lse in natural log of the scaled logits, without the sink; an
 *     empty row gives out 0 and lse +inf.
 *   - A context owns the backend (CPU thread pool, or a CUDA device and stream). Optional tensor
 *     arguments are passed as NULL pointers.
 *
 * Shapes are written [a, b, c] with the innermost dimension last; dtypes follow the shape.
 */
#ifndef ATTNKIT_H
#define ATTNKIT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(_WIN32) && defined(AK_BUILD_SHARED)
#define AK_API __declspec(dllexport)
#elif defined(__GNUC__)
#define AK_API __attribute__((visibility("default")))
#else
#define AK_API
#endif

/* ---------------------------------------------------------------------------------------------- */
/* Versions                                                                                        */
/* ---------------------------------------------------------------------------------------------- */

#define AK_VERSION_MAJOR 0
#define AK_VERSION_MINOR 1
#define AK_VERSION_PATCH 0
#define AK_VERSION_NUMBER (AK_VERSION_MAJOR * 1000000 + AK_VERSION_MINOR * 1000 + AK_VERSION_PATCH)
#define AK_VERSION_STRING "0.1.0"
/* Bumped whenever a cache byte layout or a quantization rule changes; independent of the library. */
#define AK_LAYOUT_FORMAT_VERSION 1

AK_API int32_t ak_version_number(void);      /* == AK_VERSION_NUMBER of the built library */
AK_API const char *ak_version_string(void);  /* "0.1.0" */

/* ---------------------------------------------------------------------------------------------- */
/* Status                                                                                          */
/* ---------------------------------------------------------------------------------------------- */

/* X(name, value, text). Values are pinned forever; new codes are appended. */
#define AK_STATUS_MAP(X)                                                                         \
    X(OK, 0, "success")                                                                          \
    X(ERR_INVALID_ARGUMENT, 1, "invalid argument")                                               \
    X(ERR_UNSUPPORTED, 2, "valid request, but no kernel or conversion supports it")              \
    X(ERR_WORKSPACE_TOO_SMALL, 3, "workspace smaller than the size query returned")              \
    X(ERR_OUT_OF_MEMORY, 4, "out of memory")                                                     \
    X(ERR_MISUSE, 5, "API misuse: wrong call order or a stale object")                           \
    X(ERR_BAD_PAGE_TABLE, 6, "page table inconsistent with the cache")                           \
    X(ERR_NONFINITE, 7, "non-finite input value")                                                \
    X(ERR_CORRUPT_CACHE, 8, "cache bytes violate the layout's invariants")                       \
    X(ERR_CUDA, 9, "CUDA runtime error")                                                         \
    X(ERR_INTERNAL, 10, "internal invariant violated (a bug in attnkit)")                        \
    X(ERR_NO_DEVICE, 11, "no usable GPU for the requested backend")

typedef enum ak_status {
#define AK_STATUS_ENUM_(name, value, text) AK_##name = value,
    AK_STATUS_MAP(AK_STATUS_ENUM_)
#undef AK_STATUS_ENUM_
} ak_status;

AK_API const char *ak_status_name(ak_status s);   /* "AK_ERR_UNSUPPORTED"; "AK_STATUS_UNKNOWN" */
AK_API const char *ak_status_string(ak_status s); /* fixed English text of the code */
/* Detail line of the last failing call on this thread ("" after a success). */
AK_API const char *ak_last_error(void);
/* Reentrant variant: copies the detail line into buf (always NUL-terminated when size > 0). */
AK_API void ak_last_error_r(char *buf, size_t size);

/* ---------------------------------------------------------------------------------------------- */
/* Data types, devices, tensors                                                                    */
/* ---------------------------------------------------------------------------------------------- */

typedef enum ak_dtype {
    AK_DTYPE_F32 = 0,
    AK_DTYPE_BF16 = 1,
    AK_DTYPE_F16 = 2,
    AK_DTYPE_E4M3 = 3,  /* OCP float8_e4m3fn, saturating writers (rule F1) */
    AK_DTYPE_UE8M0 = 4, /* OCP float8_e8m0fnu scale byte */
    AK_DTYPE_I32 = 5,
    AK_DTYPE_I64 = 6,
    AK_DTYPE_U8 = 7,
    AK_DTYPE_COUNT_ = 8
} ak_dtype;

AK_API int32_t ak_dtype_size(ak_dtype t);       /* bytes per element; 0 for an unknown dtype */
AK_API const char *ak_dtype_name(ak_dtype t);   /* "bf16", ...; "?" for an unknown dtype */

/* DLPack device codes. */
typedef enum ak_device_type { AK_DEVICE_CPU = 1, AK_DEVICE_CUDA = 2 } ak_device_type;

typedef struct ak_device {
    ak_device_type type;
    int32_t id; /* CUDA ordinal; 0 for the CPU */
} ak_device;

#define AK_MAX_DIMS 6

/* Field for field a DLTensor (byte_offset folded into data). */
typedef struct ak_tensor {
    void *data;
    ak_device device;
    int32_t ndim;                  /* 0..AK_MAX_DIMS */
    ak_dtype dtype;
    int64_t shape[AK_MAX_DIMS];
    int64_t strides[AK_MAX_DIMS];  /* in elements */
} ak_tensor;

/* A contiguous row-major tensor on the CPU. */
AK_API ak_tensor ak_tensor_make(void *data, ak_dtype dtype, int32_t ndim, const int64_t *shape);
/* The same, on a given device. */
AK_API ak_tensor ak_tensor_make_on(void *data, ak_device device, ak_dtype dtype, int32_t ndim,
                                   const int64_t *shape);
AK_API int64_t ak_tensor_numel(const ak_tensor *t);

/* ---------------------------------------------------------------------------------------------- */
/* Context                                                                                         */
/* ---------------------------------------------------------------------------------------------- */

typedef enum ak_backend {
    AK_BACKEND_AUTO = 0, /* CUDA when the library was built with it and a GPU is present, else CPU */
    AK_BACKEND_CPU = 1,
    AK_BACKEND_CUDA = 2
} ak_backend;

typedef struct ak_context ak_context;

typedef struct ak_context_options {
    ak_backend backend;
    int32_t num_threads; /* CPU: worker threads including the caller; 0 = all online cores */
    int32_t device_id;   /* CUDA: device ordinal */
    void *stream;        /* CUDA: a cudaStream_t; NULL = the legacy default stream */
} ak_context_options;

/* Device properties the planner's cost model reads. Bandwidth and matrix rate are measured by
   `attnkit bench` and may be set by the caller; 0 means "use the built-in estimate". */
typedef struct ak_device_info {
    ak_backend backend;
    char name[96];
    int32_t sm_count;            /* CUDA multiprocessors; CPU: threads */
    int32_t cc_major, cc_minor;
    int64_t smem_per_block_optin;
    int64_t l2_bytes;
    int64_t global_mem_bytes;
    double copy_bytes_per_s;     /* read + write bytes per second */
    double bf16_flops_per_s;
} ak_device_info;

AK_API ak_status ak_context_create(const ak_context_options *opts, ak_context **out);
AK_API void ak_context_destroy(ak_context *ctx); /* NULL is a no-op */
AK_API ak_backend ak_context_backend(const ak_context *ctx);
AK_API ak_device ak_context_device(const ak_context *ctx);
AK_API int32_t ak_context_num_threads(const ak_context *ctx);
AK_API ak_status ak_context_set_stream(ak_context *ctx, void *stream);
AK_API ak_status ak_context_device_info(const ak_context *ctx, ak_device_info *out);
/* Overrides the measured ceilings used by the planner's cost model (0 leaves a value as is). */
AK_API ak_status ak_context_set_ceilings(ak_context *ctx, double copy_bytes_per_s,
                                         double bf16_flops_per_s);
/* Waits for the context's stream (CUDA); a no-op on the CPU. */
AK_API ak_status ak_context_synchronize(ak_context *ctx);

/* ---------------------------------------------------------------------------------------------- */
/* KV-cache layouts                                                                                */
/* ---------------------------------------------------------------------------------------------- */

/* Values are pinned and never reused; new layouts are appended. */
typedef enum ak_layout {
    AK_LAYOUT_INVALID = 0,
    AK_LAYOUT_MLA_BF16 = 1,           /* 1152 B/token AoS: 512 bf16 latent | 64 bf16 rope */
    AK_LAYOUT_MLA_FP8_PERTENSOR = 2,  /* 576 B/token AoS: 576 e4m3, one out-of-band k_scale */
    AK_LAYOUT_DSA_FP8_BLOCKSCALE = 3, /* 656 B/token AoS: 512 e4m3 | 4 fp32 scales | 64 bf16 rope */
    AK_LAYOUT_DSV4_FP8_UE8M0 = 4,     /* 584 B/token per-page SoA; page stride multiple of 576 */
    AK_LAYOUT_INDEXER_FP8 = 5,        /* 132 B/token per-page SoA, 64-token pages */
    AK_LAYOUT_INDEXER_FP4 = 6,        /* 68 B/token per-page SoA, 64-token pages */
    /* 7, 8: reserved for the DeepSeek V4.1 layouts (secondary sources only, not implemented) */
    AK_LAYOUT_MHA_NHD = 9,            /* K and V pools [pages, P, h_kv, D] */
    AK_LAYOUT_MHA_HND = 10,           /* K and V pools [pages, h_kv, P, D] */
    AK_LAYOUT_END_ = 11
} ak_layout;

typedef enum ak_scale_kind {
    AK_SCALE_NONE = 0,
    AK_SCALE_PER_TENSOR = 1,      /* one fp32 out of band */
    AK_SCALE_FP32_PER_128 = 2,    /* fp32 inline per 128-dim tile */
    AK_SCALE_UE8M0_PER_64 = 3,    /* UE8M0 byte per 64-dim tile */
    AK_SCALE_FP32_PER_TOKEN = 4,  /* fp32 per token (indexer) */
    AK_SCALE_UE8M0_PER_32 = 5     /* UE8M0 byte per 32 values (FP4 indexer) */
} ak_scale_kind;

typedef struct ak_layout_traits {
    ak_layout layout;
    const char *name;          /* "DSA_FP8_BLOCKSCALE" */
    int32_t bytes_per_token;   /* logical bytes per token; 0 for MHA (depends on h_kv, D, dtype) */
    int32_t d_nope;            /* quantized / latent dims (NoPE) */
    int32_t d_rope;            /* RoPE dims stored apart (0 if none) */
    int32_t d_qk;              /* key width the attention reads */
    int32_t d_v;               /* value width (0 for indexer layouts) */
    ak_dtype elem_dtype;       /* element type of the NoPE part */
    ak_dtype rope_dtype;       /* element type of the RoPE part */
    ak_scale_kind scale_kind;
    int32_t scale_block;       /* dims per scale (0 if none or per tensor) */
    int32_t soa;               /* 1: per-page structure of arrays; 0: per-token records */
    int32_t fixed_page_size;   /* 64 for the indexer layouts; 0 = any page size */
    int32_t page_align;        /* page stride rounded up to a multiple of this (576 for V4); 0 */
} ak_layout_traits;

AK_API ak_status ak_layout_traits_get(ak_layout layout, ak_layout_traits *out);
/* Minimum page stride in bytes for a page size (with the V4 rounding). MHA layouts need the
   ak_cache form (ak_cache_page_bytes). */
AK_API ak_status ak_layout_page_bytes(ak_layout layout, int32_t page_size, int64_t *bytes);
/* Layout by name ("DSA_FP8_BLOCKSCALE", case-insensitive); AK_LAYOUT_INVALID if unknown. */
AK_API ak_layout ak_layout_from_name(const char *name);

/* A paged cache pool. Zero-initialize, then fill; ak_cache_init does it for the common cases. */
typedef struct ak_cache {
    ak_layout layout;
    ak_device device;
    void *data;              /* the pool (K pool for MHA) */
    void *v_data;            /* MHA only: the V pool, same page geometry, head_dim_v wide */
    int32_t num_pages;
    int32_t page_size;       /* tokens per page, >= 1 */
    int64_t page_stride;     /* bytes between pages (K pool); 0 = the layout's minimum */
    int64_t v_page_stride;   /* MHA only: bytes between V pages; 0 = minimum */
    /* MHA only */
    ak_dtype elem_dtype;     /* BF16, F16 or E4M3 */
    int32_t h_kv;
    int32_t head_dim;        /* K head dim */
    int32_t head_dim_v;      /* V head dim */
    /* Per-tensor dequantization scales: MLA_FP8_PERTENSOR uses k_scale; MHA E4M3 uses both.
       0 means 1.0. A non-NULL *_scale_ptr (on the cache's device) overrides the float, so a
       captured CUDA graph can change it between replays. */
    float k_scale;
    float v_scale;
    const float *k_scale_ptr;
    const float *v_scale_ptr;
} ak_cache;

/* MLA and indexer layouts: fills a descriptor with minimum page stride, k_scale 1. */
AK_API ak_status ak_cache_init(ak_cache *c, ak_layout layout, void *data, int32_t num_pages,
                               int32_t page_size);
/* MHA layouts: K and V pools of [num_pages, page_size, h_kv, D] (NHD) or [.., h_kv, page_size, D]. */
AK_API ak_status ak_cache_init_mha(ak_cache *c, ak_layout layout, ak_dtype elem_dtype, void *k_data,
                                   void *v_data, int32_t num_pages, int32_t page_size, int32_t h_kv,
                                   int32_t head_dim, int32_t head_dim_v);
/* Bytes of one page (K pool for MHA), minimum stride. */
AK_API ak_status ak_cache_page_bytes(const ak_cache *c, int64_t *bytes);
/* Bytes of the whole pool (K pool for MHA, V pool in *v_bytes if non-NULL). */
AK_API ak_status ak_cache_bytes(const ak_cache *c, int64_t *bytes, int64_t *v_bytes);
/* Checks the descriptor (layout, page geometry, strides, scales). */
AK_API ak_status ak_cache_validate(const ak_cache *c);

/* ---------------------------------------------------------------------------------------------- */
/* Codecs: write (quantize and store), gather (dequantize by slot), convert (layout to layout)     */
/* ---------------------------------------------------------------------------------------------- */

/* How a writer forms quantization scales (layouts.md section 3). */
typedef enum ak_quant_rule {
    AK_QUANT_DEFAULT = 0,          /* 656/584: power of two; indexer: plain fp32 */
    AK_QUANT_POW2 = 1,             /* 2^ceil(log2(max(amax/448, 1e-4))) (indexer: ue8m0-rounded) */
    AK_QUANT_FP32 = 2,             /* unrounded max(amax/448, 1e-4) (656 and indexer only) */
    AK_QUANT_POW2_AMAX_FLOOR = 3   /* 584 only: SGLang's store, round_up_pow2(max(amax,1e-4)/448) */
} ak_quant_rule;

/*
 * Quantize and store n new tokens at the given slots.
 *   MLA layouts:     nope [n, 512] (448 for V4), rope [n, 64]; bf16 or f32. The two may be views
 *                    of one [n, 576] row with a row stride.
 *   INDEXER layouts: nope [n, 128] bf16 or f32; rope NULL.
 *   MHA layouts:     use ak_mha_cache_write.
 * slots [n] int32: -1 skips the row (engines' padding); any other value outside [0, capacity) is
 * AK_ERR_INVALID_ARGUMENT on the CPU backend (checked before anything is written) and skipped on
 * CUDA (no host synchronisation). Non-finite inputs give AK_ERR_NONFINITE on the CPU.
 */
AK_API ak_status ak_cache_write(ak_context *ctx, const ak_cache *cache, const ak_tensor *nope,
                                const ak_tensor *rope, const ak_tensor *slots, ak_quant_rule rule);

/* MHA: k [n, h_kv, head_dim], v [n, h_kv, head_dim_v] (bf16, f16 or f32) at slots [n] int32. */
AK_API ak_status ak_mha_cache_write(ak_context *ctx, const ak_cache *cache, const ak_tensor *k,
                                    const ak_tensor *v, const ak_tensor *slots);

/*
 * Dequantize the tokens at slots [n] int32 into rows.
 *   MLA layouts:     out [n, d_qk] bf16 or f32 (576, or 512 for V4); exact (layouts.md section 4).
 *   INDEXER layouts: out [n, 128] f32 or bf16 dequantized; or out [n, 128] e4m3 (FP8 only) with
 *                    out_scale [n] f32, the raw bytes and scales (lossless, conversion C10).
 *   MHA layouts:     out [n, h_kv, head_dim] for K; V through ak_mha_cache_gather.
 * Rows whose slot is invalid (rule I1) are written as zeros.
 */
AK_API ak_status ak_cache_gather(ak_context *ctx, const ak_cache *cache, const ak_tensor *slots,
                                 ak_tensor *out, ak_tensor *out_scale);
AK_API ak_status ak_mha_cache_gather(ak_context *ctx, const ak_cache *cache, const ak_tensor *slots,
                                     ak_tensor *k_out, ak_tensor *v_out);

/*
 * Convert src into dst, keeping slot ids: token s of src becomes token s of dst. Page sizes may
 * differ (re-paging, e.g. DSV4 256-token pages to 64-token pages); dst capacity must cover the
 * converted slots. pages [n] int32 lists the source pages to convert (the touched-pages form);
 * NULL converts the whole source pool. Supported (layouts.md section 6):
 *   same layout (re-page or copy); MLA_FP8_PERTENSOR -> DSA_FP8_BLOCKSCALE (NoPE bytes kept,
 *   scales = k_scale, rope dequantized); MLA_BF16 <-> DSA_FP8_BLOCKSCALE; MLA_BF16 <->
 *   MLA_FP8_PERTENSOR; DSA_FP8_BLOCKSCALE -> MLA_FP8_PERTENSOR; MHA NHD <-> HND and
 *   bf16/f16 <-> e4m3. Anything else is AK_ERR_UNSUPPORTED naming both layouts. V4 rows to and
 *   from bf16 go through ak_cache_gather and ak_cache_write.
 */
AK_API ak_status ak_cache_convert(ak_context *ctx, const ak_cache *src, const ak_cache *dst,
                                  const ak_tensor *pages, ak_quant_rule rule);

/* Cache audit (CPU): scans pages [first, first + count) for NaN payload bytes, UE8M0 0xFF and
   non-positive or non-finite scales. AK_OK if clean, AK_ERR_CORRUPT_CACHE naming the first bad
   token otherwise; *bad_tokens (optional) receives the count of bad tokens. */
AK_API ak_status ak_cache_audit(ak_context *ctx, const ak_cache *cache, int32_t first_page,
                                int32_t page_count, int64_t *bad_tokens);

/* ---------------------------------------------------------------------------------------------- */
/* Page tables and index transforms                                                                */
/* ---------------------------------------------------------------------------------------------- */

/*
 * Block table from a token table: block_table[b, p] = req_to_token[req_ids[b], kv_start[b] + p*P] / P
 * for p < ceil(seq_lens[b] / P); every other entry of the row is -1.
 *   req_to_token [pool_rows, max_ctx] int32 slot ids; req_ids [B] int32 (NULL = 0..B-1);
 *   kv_start [B] int32 (NULL = 0); seq_lens [B] int32; block_table [B, max_pages] int32.
 * The CPU backend checks that each page is contiguous and page-aligned (AK_ERR_BAD_PAGE_TABLE);
 * a row needing more than max_pages pages is AK_ERR_INVALID_ARGUMENT on the CPU and truncated on
 * CUDA.
 */
AK_API ak_status ak_block_table_build(ak_context *ctx, const ak_tensor *req_to_token,
                                      const ak_tensor *req_ids, const ak_tensor *kv_start,
                                      const ak_tensor *seq_lens, int32_t page_size,
                                      ak_tensor *block_table);

/*
 * CSR page list (FlashInfer form) from a token table. page_size 1 gives token-granular indices
 * (slot ids); page_size P > 1 gives page ids. kv_indptr [B+1] int32 = exclusive prefix sum of the
 * per-request entry counts; kv_indices [capacity] int32 (entries past kv_indptr[B] are -1);
 * kv_last_page_len [B] int32 optional (0 for an empty request). A total above capacity is
 * AK_ERR_INVALID_ARGUMENT on the CPU and truncated on CUDA.
 */
AK_API ak_status ak_csr_build(ak_context *ctx, const ak_tensor *req_to_token,
                              const ak_tensor *req_ids, const ak_tensor *kv_start,
                              const ak_tensor *seq_lens, int32_t page_size, ak_tensor *kv_indptr,
                              ak_tensor *kv_indices, ak_tensor *kv_last_page_len);

typedef enum ak_index_transform {
    AK_TRANSFORM_NONE = 0,   /* request-local positions, unchanged */
    AK_TRANSFORM_PAGED = 1,  /* positions -> slot ids through the request's page table */
    AK_TRANSFORM_RAGGED = 2  /* positions + cu_seqlens_k[request] into a batch-flattened KV */
} ak_index_transform;

typedef struct ak_transform {
    ak_index_transform kind;
    /* PAGED: [B, width] int32. page_size 1: a token table of slot ids per position;
       page_size P > 1: a block table of page ids. Invalid entries give -1. */
    const ak_tensor *table;
    int32_t page_size;
    /* [B+1] int32: row t belongs to request b with cu_seqlens_q[b] <= t < cu_seqlens_q[b+1]; rows
       past cu_seqlens_q[B] are all -1. NULL: row t is request t (decode, or a table pre-expanded
       per query row). */
    const ak_tensor *cu_seqlens_q;
    /* RAGGED: [B+1] int32, start of each request's rows in the gathered KV. */
    const ak_tensor *cu_seqlens_k;
} ak_transform;

/* out[t, j] = transform(idx[t, j]) for idx >= 0, -1 otherwise; a position past the table width
   gives -1, as does (RAGGED) a position >= the request's key count cu_seqlens_k[b+1] -
   cu_seqlens_k[b], and (PAGED) a negative table entry or a slot above 2^31 - 1.
   idx, out [rows, k] int32 (out may alias idx). */
AK_API ak_status ak_topk_transform(ak_context *ctx, const ak_transform *tf, const ak_tensor *idx,
                                   ak_tensor *out);

/*
 * DeepSeek V4 sliding-window index lists (semantics.md 10.2). Query rows: one per request at
 * pos = seq_lens[b] - 1 when cu_seqlens_q is NULL, else rows cu_seqlens_q[b] .. [b+1] at
 * pos = seq_lens[b] - q_len_b + i. indices [rows, window] int32, newest first
 * (indices[t, j] = slot of position pos - j, -1 when pos - j < 0); lengths [rows] int32 =
 * min(pos + 1, window). The slot of a position comes from table/page_size as in PAGED. A row
 * with pos < 0 (a padding request with seq_len 0) is all -1 with length 0.
 */
AK_API ak_status ak_dsv4_swa_indices(ak_context *ctx, const ak_tensor *seq_lens,
                                     const ak_tensor *cu_seqlens_q, const ak_tensor *table,
                                     int32_t page_size, int32_t window, ak_tensor *indices,
                                     ak_tensor *lengths);

/*
 * DeepSeek V4 sparse-prefill index combiner (semantics.md 10.4-10.5). For new token i of request
 * r (pos = seq_lens[r] - q_len_r + i): compressed entries first, then the window, in a flat
 * workspace of [B * c_max + total_swa] rows whose compressed region comes first.
 *   raw_topk [T, topk] int32 request-local compressed positions (C4), or NULL for a dense
 *   compressed cache (C128: positions 0, 1, 2, ...); ratio 4 or 128, or 0 for SWA-only;
 *   c_max = compressed rows reserved per request; window 128.
 *   indices [T, W] int32 with W >= topk + window (W = align_up(topk + window, 128) is customary),
 *   -1 padded; lengths [T] int32 = topk_len + swa_len; swa_offsets [B+1] int32 optional output,
 *   the exclusive prefix sum of gather_len = min(seq_len, q_len + window - 1).
 * A raw entry that is negative or not causally visible (>= (pos + 1) / ratio) becomes -1 in
 * place. seq_len < q_len, or c_max < seq_len / ratio, is AK_ERR_INVALID_ARGUMENT.
 */
AK_API ak_status ak_dsv4_combine_indices(ak_context *ctx, const ak_tensor *raw_topk,
                                         const ak_tensor *seq_lens, const ak_tensor *cu_seqlens_q,
                                         int32_t ratio, int32_t topk, int32_t c_max,
                                         int32_t window, ak_tensor *indices, ak_tensor *lengths,
                                         ak_tensor *swa_offsets);

/* ---------------------------------------------------------------------------------------------- */
/* MLA decode (dense and sparse), sparse prefill                                                   */
/* ---------------------------------------------------------------------------------------------- */

/*
 * Ragged sparse decode balanced on the GPU (CUDA backend; the CPU backend accepts and ignores it).
 * A large batch runs one CTA per token row and head tile, so rows of different lengths last as
 * long as the longest. With AK_BALANCE_MAKE the call first cuts the rows into pieces of similar
 * work from topk_length / extra_topk_length (on the device, no host sync), keeps that schedule in
 * the workspace and runs on it, merging the pieces of split rows afterwards; with
 * AK_BALANCE_REUSE it runs on the schedule that an earlier MAKE call of the same shapes left in
 * the same workspace (in stream order, nothing else writing that workspace in between). An engine
 * passes MAKE in a step's first layer and REUSE in the others, whose lengths are the same (a
 * reused schedule with other lengths still gives exact results, only less balanced). Small
 * batches, which split every row already, ignore it. Ask the workspace size with `balance` set.
 */
typedef enum ak_balance {
    AK_BALANCE_NONE = 0,  /* each row one CTA (multi-wave calls with lengths take rows longest first) */
    AK_BALANCE_MAKE = 1,  /* make the schedule from the lengths, keep it in the workspace, run on it */
    AK_BALANCE_REUSE = 2  /* run on the schedule an earlier MAKE call left in this workspace */
} ak_balance;

/*
 * One entry point for dense and sparse MLA decode. Zero-initialize, then set the fields of the
 * mode you want: dense when block_table is set, sparse when indices is set (exactly one).
 * d_qk is 576 (512 latent + 64 rope; V = dims 0..511) with the MLA_BF16, MLA_FP8_PERTENSOR and
 * DSA_FP8_BLOCKSCALE layouts and 512 (V = all 512 dims) with DSV4_FP8_UE8M0; d_v = 512.
 */
typedef struct ak_mla_decode_args {
    const ak_tensor *q;                 /* [b, s_q, h_q, d_qk] bf16 */
    const ak_cache *cache;              /* main cache */
    float softmax_scale;
    /* dense */
    const ak_tensor *block_table;       /* [b, max_pages] int32 page ids */
    const ak_tensor *seq_lens;          /* [b] int32 */
    int32_t causal;                     /* bottom-right aligned when s_q > 1 */
    /* sparse */
    const ak_tensor *indices;           /* [b, s_q, topk] int32 slot ids, rule I1 */
    const ak_tensor *topk_length;       /* [b] or [b, s_q] int32, optional */
    const ak_cache *extra_cache;        /* optional, same record format as the main cache */
    const ak_tensor *extra_indices;     /* [b, s_q, extra_topk] int32 slot ids into extra_cache */
    const ak_tensor *extra_topk_length; /* [b] or [b, s_q] int32, optional */
    /* both */
    const ak_tensor *attn_sink;         /* [h_q] f32, optional */
    ak_tensor *out;                     /* [b, s_q, h_q, 512] bf16 or f32; CUDA: base 4-byte (bf16) or
                                           8-byte (f32) aligned and even strides, else
                                           AK_ERR_INVALID_ARGUMENT; 16-byte aligned rows are stored
                                           faster (bulk copies) */
    ak_tensor *lse;                     /* [b, s_q, h_q] f32, natural log, optional, any strides */
    /* sparse (appended: the fields above keep their offsets) */
    ak_balance balance;                 /* AK_BALANCE_NONE unless set (see ak_balance) */
} ak_mla_decode_args;

/* Workspace bytes for these shapes (depends on shapes only, never on lengths or indices). On the
   CUDA backend the workspace must be 16-byte aligned (cudaMalloc's always is), else
   AK_ERR_INVALID_ARGUMENT. */
AK_API ak_status ak_mla_decode_workspace_size(ak_context *ctx, const ak_mla_decode_args *args,
                                              size_t *bytes);
/* Capturable in a CUDA graph on the CUDA backend: no allocation, no host synchronisation; all
   per-step metadata is rebuilt on the device from the lengths and indices. There the cache pools
   (cache, extra_cache) must start on a 16-byte boundary, else AK_ERR_INVALID_ARGUMENT. */
AK_API ak_status ak_mla_decode(ak_context *ctx, const ak_mla_decode_args *args, void *workspace,
                               size_t workspace_bytes);

/*
 * Sparse prefill. Flat form: kv [s_kv, d_qk] bf16 and indices are row numbers into kv. Paged form:
 * cache set (any MLA layout, dequantized on the fly) and indices are slot ids. Exactly one of kv
 * and cache.
 */
typedef struct ak_sparse_prefill_args {
    const ak_tensor *q;            /* [s_q, h_q, d_qk] bf16 */
    const ak_tensor *kv;           /* [s_kv, d_qk] bf16 (flat form) */
    const ak_cache *cache;         /* paged form */
    const ak_tensor *indices;      /* [s_q, topk] int32 */
    const ak_tensor *topk_length;  /* [s_q] int32, optional */
    const ak_tensor *attn_sink;    /* [h_q] f32, optional */
    float softmax_scale;
    ak_tensor *out;                /* [s_q, h_q, 512] bf16 or f32 */
    ak_tensor *max_logits;         /* [s_q, h_q] f32, optional; -inf for empty rows */
    ak_tensor *lse;                /* [s_q, h_q] f32, optional; +inf for empty rows */
} ak_sparse_prefill_args;

AK_API ak_status ak_sparse_prefill_workspace_size(ak_context *ctx,
                                                  const ak_sparse_prefill_args *args,
                                                  size_t *bytes);
AK_API ak_status ak_sparse_prefill(ak_context *ctx, const ak_sparse_prefill_args *args,
                                   void *workspace, size_t workspace_bytes);

/* ---------------------------------------------------------------------------------------------- */
/* Paged MHA / GQA                                                                                 */
/* ---------------------------------------------------------------------------------------------- */

/*
 * Prefill, extend over a cached prefix, decode and speculative verify over a paged MHA cache.
 * q is ragged [total_q, h_q, d_qk] with cu_seqlens_q [B+1], or uniform [B, q_len, h_q, d_qk].
 * The new tokens are the last q_len keys of each request (bottom-right alignment). The page table
 * is given as exactly one of: block_table + seq_lens; CSR kv_indptr + kv_indices +
 * kv_last_page_len; or a token table (token_table = 1: block_table holds one slot id per position).
 * Head dims: d_qk = cache head_dim, d_v = cache head_dim_v (64, 128, 256, or 192/128).
 */
typedef struct ak_mha_args {
    const ak_tensor *q;                /* [total_q, h_q, d_qk] or [B, q_len, h_q, d_qk] bf16 */
    const ak_tensor *cu_seqlens_q;     /* [B+1] int32, required for the ragged q form */
    const ak_cache *cache;             /* MHA_NHD or MHA_HND */
    const ak_tensor *block_table;      /* [B, max_pages] int32 (or [B, max_len] slot ids) */
    const ak_tensor *seq_lens;         /* [B] int32 kv lengths, new tokens included */
    int32_t token_table;
    const ak_tensor *kv_indptr;        /* [B+1] int32 */
    const ak_tensor *kv_indices;       /* [nnz] int32 page ids */
    const ak_tensor *kv_last_page_len; /* [B] int32 */
    float softmax_scale;
    int32_t causal;
    int32_t window_left;               /* -1 = unlimited; key j needs j >= pos - window_left */
    const ak_tensor *attn_sink;        /* [h_q] f32, optional */
    ak_tensor *out;                    /* [total_q, h_q, d_v] or [B, q_len, h_q, d_v], bf16 or f32 */
    ak_tensor *lse;                    /* [total_q, h_q] or [B, q_len, h_q] f32, optional */
} ak_mha_args;

AK_API ak_status ak_mha_workspace_size(ak_context *ctx, const ak_mha_args *args, size_t *bytes);
AK_API ak_status ak_mha(ak_context *ctx, const ak_mha_args *args, void *workspace,
                        size_t workspace_bytes);

/* ---------------------------------------------------------------------------------------------- */
/* Merging attention states                                                                        */
/* ---------------------------------------------------------------------------------------------- */

typedef enum ak_lse_base { AK_LSE_BASE_E = 0, AK_LSE_BASE_2 = 1 } ak_lse_base;

/*
 * Combine partial results over disjoint key sets (rule M1): outs [n, rows, h, d] (f32 or bf16),
 * lses [n, rows, h] f32 in in_base; out [rows, h, d] (f32 or bf16), lse [rows, h] f32 in out_base
 * (optional). A partial with lse +-inf has weight 0; all empty gives out 0 and lse +inf. The sink
 * [h] f32 (optional, rule M2) is applied once, after the merge.
 */
AK_API ak_status ak_merge_states(ak_context *ctx, const ak_tensor *outs, const ak_tensor *lses,
                                 ak_lse_base in_base, const ak_tensor *attn_sink, ak_tensor *out,
                                 ak_tensor *lse, ak_lse_base out_base);

/* ---------------------------------------------------------------------------------------------- */
/* DSA lightning indexer and top-k                                                                 */
/* ---------------------------------------------------------------------------------------------- */

/*
 * Ragged logits: L[i, j] = k_scale[j] * sum_h weights[i, h] * relu(q[i, h] . k[j]) for
 * j in [ks[i], ke[i]). q [S, H, 128] e4m3; weights [S, H] f32 (the q scale and softmax scale
 * folded in); k [S_kv, 128] e4m3; k_scale [S_kv] f32; ks, ke [S] int32.
 * logits [S, width] f32: with compressed = 0 column j holds key j (width >= S_kv); with
 * compressed = 1 column c holds key ks[i] + c (width >= max(ke - ks)). Columns outside the range
 * are -inf when clean_logits is set, untouched otherwise.
 */
AK_API ak_status ak_indexer_logits_ragged(ak_context *ctx, const ak_tensor *q,
                                          const ak_tensor *weights, const ak_tensor *k,
                                          const ak_tensor *k_scale, const ak_tensor *ks,
                                          const ak_tensor *ke, int32_t compressed,
                                          int32_t clean_logits, ak_tensor *logits);

/*
 * Paged logits over an INDEXER_FP8 cache: q [B, next_n, H, 128] e4m3, weights [B * next_n, H] f32,
 * block_table [B, max_pages] int32, context_lens [B] or [B, next_n] int32. Row (b, i) scores
 * positions p < context_len; logits [B * next_n, width] f32, column p = position p; columns
 * >= context_len are -inf when clean_logits is set, untouched otherwise. A position whose page is
 * invalid or past max_pages (rule I2) gets -inf. A context_len above width is clamped to width.
 */
AK_API ak_status ak_indexer_logits_paged(ak_context *ctx, const ak_tensor *q,
                                         const ak_tensor *weights, const ak_cache *cache,
                                         const ak_tensor *block_table,
                                         const ak_tensor *context_lens, int32_t clean_logits,
                                         ak_tensor *logits);

/*
 * Top-k over logits [rows, width] f32 (row t's window starts at column row_starts[t] when given,
 * [rows] int32) with lengths [rows] int32 (rule T1): len <= k gives 0..len-1 then -1 in positional
 * order; len > k gives k distinct positions whose logits are >= every other (order unspecified;
 * deterministic = 1 breaks ties by the smaller position and sorts the output ascending by
 * position). NaN ranks below -inf. The transform (NULL = none) is fused: out [rows, k] int32
 * receives transformed indices. Never writes into logits. k is 1..2048; row_starts must lie in
 * [0, width]; a length above the row's window is clamped to it.
 */
AK_API ak_status ak_topk(ak_context *ctx, const ak_tensor *logits, const ak_tensor *lengths,
                         const ak_tensor *row_starts, int32_t k, int32_t deterministic,
                         const ak_transform *tf, ak_tensor *out);

/* ---------------------------------------------------------------------------------------------- */
/* Planner: one explicit dispatch object per batch                                                 */
/* ---------------------------------------------------------------------------------------------- */

/*
 * ak_plan_create turns (attention kind, cache layouts, backend and device, preferences, and the
 * batch's per-request phases and lengths) into an ordered list of steps, each naming the kernel it
 * runs, the requests and query rows it covers, its index transform, its workspace bytes and why it
 * was chosen (docs/planner.md lists the rules). Every rejection happens here, with AK_ERR_UNSUPPORTED
 * and a message naming the option and the supported alternatives; ak_plan_run never rejects a
 * request the plan accepted. A plan may be run for any number of steps whose batch has the same
 * phases and query lengths; kv lengths are read from io->seq_lens at run time and may be anything
 * from q_len up to the planned kv_len (which sized the workspace).
 */
typedef enum ak_attn_kind {
    AK_ATTN_MLA = 0,  /* DeepSeek V2/V3 dense MLA (d_qk 576, d_v 512) */
    AK_ATTN_DSA = 1,  /* DeepSeek V3.2: lightning indexer + top-k + sparse MLA */
    AK_ATTN_DSV4 = 2, /* DeepSeek V4: SWA window + compressed cache (ratio 0, 4 or 128) */
    AK_ATTN_MHA = 3   /* paged MHA/GQA */
} ak_attn_kind;

typedef enum ak_phase {
    AK_PHASE_PREFILL = 0,       /* new request, no cached prefix (q_len == kv_len) */
    AK_PHASE_EXTEND = 1,        /* new tokens over a cached prefix (q_len <= kv_len) */
    AK_PHASE_DECODE = 2,        /* one new token (q_len 1) */
    AK_PHASE_TARGET_VERIFY = 3, /* speculative verify: q_len = 1 + draft tokens */
    AK_PHASE_DRAFT_EXTEND = 4,  /* draft model extend after a verify */
    AK_PHASE_COUNT_ = 5
} ak_phase;

typedef struct ak_plan_desc {
    ak_attn_kind kind;
    int32_t h_q, h_kv;          /* h_kv 1 for MLA/DSA/V4 */
    int32_t d_qk, d_v;          /* 576/512 (MLA, DSA), 512/512 (V4), MHA head dims */
    int32_t topk;               /* DSA index top-k; V4 C4 top-k */
    int32_t window;             /* V4 sliding window (128); MHA: window_left + 1, 0 = none */
    int32_t compress_ratio;     /* V4 layer: 0 (SWA only), 4 (C4 + top-k) or 128 (C128 dense) */
    int32_t index_heads;        /* DSA / V4 C4 indexer heads (<= 64), head dim 128 */
    int32_t has_sink;           /* io->attn_sink will be given */
    float softmax_scale;
    ak_layout layout;           /* main cache layout (V4: the SWA cache) */
    int32_t page_size;
    ak_layout extra_layout;     /* V4 compressed cache (ratio 4 or 128); else AK_LAYOUT_INVALID */
    int32_t extra_page_size;    /* V4: page_size / ratio entries per page */
    const char *prefill_kernel; /* NULL or "auto", or a name from ak_plan_kernel_get */
    const char *decode_kernel;  /* NULL or "auto", or a name; decode rows never read prefill_kernel */
    int64_t workspace_budget;   /* bytes of plan buffers (logits, indices, gathers); 0 = 256 MiB */
    ak_backend target;          /* AUTO: ctx's backend; CPU or CUDA: plan for that backend
                                   (explain only when it differs from ctx's: ak_plan_run refuses) */
    const ak_device_info *device; /* cost-model constants; NULL: ctx's ak_context_device_info */
    int32_t num_requests;       /* >= 0 */
    const ak_phase *phases;     /* [num_requests] host */
    const int32_t *q_lens;      /* [num_requests] host, >= 0 */
    const int32_t *kv_lens;     /* [num_requests] host, >= q_len, new tokens included */
} ak_plan_desc;

typedef enum ak_step_kind {
    AK_STEP_CONVERT = 0,       /* ak_cache_convert of the pages the batch touches, once */
    AK_STEP_GATHER = 1,        /* ak_cache_gather of kv positions into a bf16 workspace */
    AK_STEP_INDEXER = 2,       /* ak_indexer_logits_paged */
    AK_STEP_TOPK = 3,          /* ak_topk with the consumer's transform */
    AK_STEP_INDEX_LIST = 4,    /* ak_dsv4_swa_indices, or dense position lists + ak_topk_transform */
    AK_STEP_MLA_DENSE = 5,     /* ak_mla_decode, dense (block table, causal) */
    AK_STEP_MLA_SPARSE = 6,    /* ak_mla_decode, sparse (indices, optional extra cache) */
    AK_STEP_SPARSE_PREFILL = 7,/* ak_sparse_prefill, paged or flat */
    AK_STEP_MHA = 8,           /* ak_mha */
    AK_STEP_MERGE = 9          /* ak_merge_states */
} ak_step_kind;

typedef struct ak_plan_step {
    ak_step_kind kind;
    const char *kernel;          /* catalogue name, e.g. "sparse_prefill_paged" */
    const char *op;              /* the public function it calls */
    int32_t req_begin, req_end;  /* requests [begin, end) */
    int64_t rows;                /* query rows covered */
    int64_t chunk_rows;          /* rows per call (the budget's chunking); rows when unchunked */
    ak_index_transform transform;/* of the indices this step produces or consumes */
    ak_layout reads;             /* cache layout it reads (AK_LAYOUT_INVALID: none) */
    int64_t workspace_bytes;     /* its part of the plan workspace (op scratch excluded) */
    double est_seconds;          /* cost-model estimate */
    const char *reason;          /* why this step, this kernel */
} ak_plan_step;

/* The kernel catalogue the planner chooses from. */
typedef struct ak_plan_kernel {
    const char *name;            /* "mla_decode_sparse" */
    const char *op;              /* public function */
    const char *kinds;           /* attention kinds it serves, text */
    const char *layouts;         /* layouts it reads, text */
    int32_t decode;              /* usable for decode, verify and draft-extend rows */
    int32_t prefill;             /* usable for prefill and extend rows */
    int32_t cpu, cuda;           /* exists on the backend */
    const char *limits;          /* head counts, dims */
} ak_plan_kernel;

AK_API int32_t ak_plan_kernel_count(void);
AK_API ak_status ak_plan_kernel_get(int32_t i, ak_plan_kernel *out);

typedef struct ak_plan ak_plan;

/* Plans on ctx's backend with its ak_device_info (cost-model constants included). */
AK_API ak_status ak_plan_create(ak_context *ctx, const ak_plan_desc *desc, ak_plan **out);
AK_API void ak_plan_destroy(ak_plan *plan); /* NULL is a no-op */
/* The explained plan: inputs, the cost model's candidates and figures, the steps. Owned by plan. */
AK_API const char *ak_plan_explain(const ak_plan *plan);
AK_API int32_t ak_plan_step_count(const ak_plan *plan);
AK_API ak_status ak_plan_step_get(const ak_plan *plan, int32_t i, ak_plan_step *out);

/*
 * Tensors and caches of one engine step. Query rows are ragged in request order: request b owns
 * rows [cu_q[b], cu_q[b+1]) with cu_q the prefix sum of the plan's q_lens.
 */
typedef struct ak_plan_io {
    const ak_tensor *q;             /* [T, h_q, d_qk] bf16 */
    const ak_cache *cache;          /* main cache (V4: SWA), plan.layout */
    const ak_cache *extra_cache;    /* V4 compressed cache (ratio 4, 128), sharing page ids */
    const ak_cache *index_cache;    /* DSA / V4 C4 indexer cache (INDEXER_FP8), sharing page ids */
    const ak_cache *convert_cache;  /* destination of a CONVERT step, same page ids; else NULL */
    const ak_tensor *block_table;   /* [B, max_pages] int32 page ids of the main cache */
    const ak_tensor *seq_lens;      /* [B] int32 kv lengths, new tokens included */
    const ak_tensor *index_q;       /* [T, index_heads, 128] e4m3 (DSA, V4 ratio 4) */
    const ak_tensor *index_weights; /* [T, index_heads] f32 */
    const ak_tensor *attn_sink;     /* [h_q] f32 when plan.has_sink */
    ak_tensor *out;                 /* [T, h_q, d_v] bf16 or f32 */
    ak_tensor *lse;                 /* [T, h_q] f32, optional */
} ak_plan_io;

/* Workspace bytes for ak_plan_run: the plan's buffers plus the largest op scratch. */
AK_API ak_status ak_plan_workspace_size(const ak_plan *plan, size_t *bytes);
/* Runs the steps in order on ctx (the plan's backend). Allocates nothing: per-call metadata (row
   lengths, cu_seqlens, slot lists) is rebuilt from io->seq_lens on every run at fixed workspace
   offsets, the shape a CUDA graph capture of the decode path needs. The rebuild is a host loop on
   the CPU; its device-side builder does not exist yet, so CUDA plans are rejected at plan time. */
AK_API ak_status ak_plan_run(ak_context *ctx, const ak_plan *plan, const ak_plan_io *io,
                             void *workspace, size_t workspace_bytes);

AK_API const char *ak_phase_name(ak_phase p);  /* "decode"; "?" when unknown */
AK_API ak_phase ak_phase_from_name(const char *name); /* AK_PHASE_COUNT_ when unknown */

#ifdef __cplusplus
}
#endif

#endif /* ATTNKIT_H */
