/*
 * cpu.h -- the CPU backend's functions. Each takes the arguments of its public counterpart after
 * the entry point in src/<family>.c has validated every descriptor; checks of values inside
 * tensors (slot ranges, lengths) happen here, before anything is written.
 */
#ifndef AK_CPU_H
#define AK_CPU_H

#include "common/internal.h"

/* ---- codec (src/cpu/codec.c) ---- */
ak_status ak_cpu_cache_write(ak_context *ctx, const ak_cache *cache, const ak_tensor *nope,
                             const ak_tensor *rope, const ak_tensor *slots, ak_quant_rule rule);
ak_status ak_cpu_mha_cache_write(ak_context *ctx, const ak_cache *cache, const ak_tensor *k,
                                 const ak_tensor *v, const ak_tensor *slots);
ak_status ak_cpu_cache_gather(ak_context *ctx, const ak_cache *cache, const ak_tensor *slots,
                              ak_tensor *out, ak_tensor *out_scale);
ak_status ak_cpu_mha_cache_gather(ak_context *ctx, const ak_cache *cache, const ak_tensor *slots,
                                  ak_tensor *k_out, ak_tensor *v_out);
ak_status ak_cpu_cache_convert(ak_context *ctx, const ak_cache *src, const ak_cache *dst,
                               const ak_tensor *pages, ak_quant_rule rule);
ak_status ak_cpu_cache_audit(ak_context *ctx, const ak_cache *cache, int32_t first_page,
                             int32_t page_count, int64_t *bad_tokens);

/* ---- page tables and transforms (src/cpu/pagetable.c) ---- */
ak_status ak_cpu_block_table_build(ak_context *ctx, const ak_tensor *req_to_token,
                                   const ak_tensor *req_ids, const ak_tensor *kv_start,
                                   const ak_tensor *seq_lens, int32_t page_size,
                                   ak_tensor *block_table);
ak_status ak_cpu_csr_build(ak_context *ctx, const ak_tensor *req_to_token, const ak_tensor *req_ids,
                           const ak_tensor *kv_start, const ak_tensor *seq_lens, int32_t page_size,
                           ak_tensor *kv_indptr, ak_tensor *kv_indices, ak_tensor *kv_last_page_len);
ak_status ak_cpu_topk_transform(ak_context *ctx, const ak_transform *tf, const ak_tensor *idx,
                                ak_tensor *out);
ak_status ak_cpu_dsv4_swa_indices(ak_context *ctx, const ak_tensor *seq_lens,
                                  const ak_tensor *cu_seqlens_q, const ak_tensor *table,
                                  int32_t page_size, int32_t window, ak_tensor *indices,
                                  ak_tensor *lengths);
ak_status ak_cpu_dsv4_combine_indices(ak_context *ctx, const ak_tensor *raw_topk,
                                      const ak_tensor *seq_lens, const ak_tensor *cu_seqlens_q,
                                      int32_t ratio, int32_t topk, int32_t c_max, int32_t window,
                                      ak_tensor *indices, ak_tensor *lengths,
                                      ak_tensor *swa_offsets);

/* Transform support shared with the fused top-k. ak_transform_check (src/pagetable.c) validates
   the descriptor (tf NULL is accepted); ak_cpu_transform_prepare checks the values of its
   cu_seqlens for `rows` rows; ak_cpu_transform_row maps n positions of row t (in may equal out). */
typedef struct ak_cpu_tf {
    ak_index_transform kind;
    const int32_t *table;  /* [B, width] int32 */
    int64_t table_stride, width;
    int32_t page_size;
    const ak_tensor *cu_q; /* [B+1] int32 or NULL */
    const ak_tensor *cu_k; /* [B+1] int32 (RAGGED) */
    int64_t nreq;          /* B, or -1 when nothing fixes it (NONE without cu_seqlens_q) */
} ak_cpu_tf;
ak_status ak_transform_check(const ak_context *ctx, const char *fn, const ak_transform *tf);
ak_status ak_cpu_transform_prepare(const char *fn, const ak_transform *tf, ak_cpu_tf *plan);
void ak_cpu_transform_row(const ak_cpu_tf *plan, int64_t t, const int32_t *in, int32_t *out,
                          int64_t n);

/* ---- MLA decode and sparse prefill (src/cpu/mla_decode.c, src/cpu/sparse_prefill.c) ---- */
ak_status ak_cpu_mla_decode_workspace_size(ak_context *ctx, const ak_mla_decode_args *args,
                                           size_t *bytes);
ak_status ak_cpu_mla_decode(ak_context *ctx, const ak_mla_decode_args *args, void *workspace,
                            size_t workspace_bytes);
ak_status ak_cpu_sparse_prefill_workspace_size(ak_context *ctx, const ak_sparse_prefill_args *args,
                                               size_t *bytes);
ak_status ak_cpu_sparse_prefill(ak_context *ctx, const ak_sparse_prefill_args *args,
                                void *workspace, size_t workspace_bytes);

/* ---- paged MHA (src/cpu/mha.c) and merge (src/cpu/merge.c) ---- */
ak_status ak_cpu_mha_workspace_size(ak_context *ctx, const ak_mha_args *args, size_t *bytes);
ak_status ak_cpu_mha(ak_context *ctx, const ak_mha_args *args, void *workspace,
                     size_t workspace_bytes);
ak_status ak_cpu_merge_states(ak_context *ctx, const ak_tensor *outs, const ak_tensor *lses,
                              ak_lse_base in_base, const ak_tensor *attn_sink, ak_tensor *out,
                              ak_tensor *lse, ak_lse_base out_base);

/* ---- indexer and top-k (src/cpu/indexer.c, src/cpu/topk.c) ---- */
ak_status ak_cpu_indexer_logits_ragged(ak_context *ctx, const ak_tensor *q, const ak_tensor *weights,
                                       const ak_tensor *k, const ak_tensor *k_scale,
                                       const ak_tensor *ks, const ak_tensor *ke,
                                       int32_t compressed, int32_t clean_logits,
                                       ak_tensor *logits);
ak_status ak_cpu_indexer_logits_paged(ak_context *ctx, const ak_tensor *q, const ak_tensor *weights,
                                      const ak_cache *cache, const ak_tensor *block_table,
                                      const ak_tensor *context_lens, int32_t clean_logits,
                                      ak_tensor *logits);
ak_status ak_cpu_topk(ak_context *ctx, const ak_tensor *logits, const ak_tensor *lengths,
                      const ak_tensor *row_starts, int32_t k, int32_t deterministic,
                      const ak_transform *tf, ak_tensor *out);

#endif /* AK_CPU_H */
