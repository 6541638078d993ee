/*
 * cuda_backend.h -- the C-callable surface of the CUDA backend. Every function is implemented in a
 * .cu file with C linkage; the public entry points in src/<family>.c reach them through AK_DISPATCH, so a
 * build without CUDA never references them.
 */
#ifndef AK_CUDA_BACKEND_H
#define AK_CUDA_BACKEND_H

#include "common/internal.h"

#ifdef __cplusplus
extern "C" {
#endif

#ifdef AK_HAVE_CUDA
#define AK_DISPATCH(ctx, cpu_call, cuda_call)                                                    \
    ((ctx)->backend == AK_BACKEND_CUDA ? (cuda_call) : (cpu_call))
#else
#define AK_DISPATCH(ctx, cpu_call, cuda_call) (cpu_call)
#endif

/* ---- context (src/cuda/context.cu; src/cuda/no_cuda.c without CUDA) ---- */
int ak_cuda_available(void);                    /* built with CUDA and a device is present */
ak_status ak_cuda_context_init(ak_context *ctx); /* sets ctx->cuda and ctx->info */
void ak_cuda_context_fini(ak_context *ctx);
ak_status ak_cuda_synchronize(ak_context *ctx);

/* ---- codecs (src/cuda/codec.cu) ---- */
ak_status ak_cuda_cache_write(ak_context *ctx, const ak_cache *cache, const ak_tensor *nope,
                              const ak_tensor *rope, const ak_tensor *slots, ak_quant_rule rule);
ak_status ak_cuda_mha_cache_write(ak_context *ctx, const ak_cache *cache, const ak_tensor *k,
                                  const ak_tensor *v, const ak_tensor *slots);
ak_status ak_cuda_cache_gather(ak_context *ctx, const ak_cache *cache, const ak_tensor *slots,
                               ak_tensor *out, ak_tensor *out_scale);
ak_status ak_cuda_mha_cache_gather(ak_context *ctx, const ak_cache *cache, const ak_tensor *slots,
                                   ak_tensor *k_out, ak_tensor *v_out);
ak_status ak_cuda_cache_convert(ak_context *ctx, const ak_cache *src, const ak_cache *dst,
                                const ak_tensor *pages, ak_quant_rule rule);

/* ---- page tables and transforms (src/cuda/pagetable.cu) ---- */
ak_status ak_cuda_block_table_build(ak_context *ctx, const ak_tensor *req_to_token,
                                    const ak_tensor *req_ids, const ak_tensor *kv_start,
                                    const ak_tensor *seq_lens, int32_t page_size,
                                    ak_tensor *block_table);
ak_status ak_cuda_csr_build(ak_context *ctx, const ak_tensor *req_to_token,
                            const ak_tensor *req_ids, const ak_tensor *kv_start,
                            const ak_tensor *seq_lens, int32_t page_size, ak_tensor *kv_indptr,
                            ak_tensor *kv_indices, ak_tensor *kv_last_page_len);
ak_status ak_cuda_topk_transform(ak_context *ctx, const ak_transform *tf, const ak_tensor *idx,
                                 ak_tensor *out);
ak_status ak_cuda_dsv4_swa_indices(ak_context *ctx, const ak_tensor *seq_lens,
                                   const ak_tensor *cu_seqlens_q, const ak_tensor *table,
                                   int32_t page_size, int32_t window, ak_tensor *indices,
                                   ak_tensor *lengths);
ak_status ak_cuda_dsv4_combine_indices(ak_context *ctx, const ak_tensor *raw_topk,
                                       const ak_tensor *seq_lens, const ak_tensor *cu_seqlens_q,
                                       int32_t ratio, int32_t topk, int32_t c_max, int32_t window,
                                       ak_tensor *indices, ak_tensor *lengths,
                                       ak_tensor *swa_offsets);

/* ---- merge (src/cuda/merge.cu) ---- */
ak_status ak_cuda_merge_states(ak_context *ctx, const ak_tensor *outs, const ak_tensor *lses,
                               ak_lse_base in_base, const ak_tensor *attn_sink, ak_tensor *out,
                               ak_tensor *lse, ak_lse_base out_base);

/* ---- MLA decode, sparse path (src/cuda/sparse_decode.cu) ---- */
ak_status ak_cuda_mla_decode_workspace_size(ak_context *ctx, const ak_mla_decode_args *args,
                                            size_t *bytes);
ak_status ak_cuda_mla_decode(ak_context *ctx, const ak_mla_decode_args *args, void *workspace,
                             size_t workspace_bytes);

#ifdef __cplusplus
}
#endif

#endif /* AK_CUDA_BACKEND_H */
