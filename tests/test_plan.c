/* test_plan.c -- the planner: every (kind, layout, phase, preference) either plans or is rejected
   at plan time with a message; property tests over random batches; one regression test per seed
   failure of semantics.md 12.4 (decode consulting the prefill choice, a top-k transform chosen for
   the wrong kernel, an unimplemented extend path, a row cap). */
#include <stdlib.h>
#include <string.h>

#include "ak_test.h"
#include "attnkit.h"

static ak_context *cpu_ctx(void) {
    ak_context_options o;
    memset(&o, 0, sizeof o);
    o.backend = AK_BACKEND_CPU;
    o.num_threads = 2;
    ak_context *c = NULL;
    CHECK_STATUS(ak_context_create(&o, &c), AK_OK);
    return c;
}

/* Model-like descriptions (tools/models.h has the presets; tests stay independent of tools/). */
static ak_plan_desc desc_of(ak_attn_kind kind) {
    ak_plan_desc d;
    memset(&d, 0, sizeof d);
    d.kind = kind;
    d.h_q = 128;
    d.h_kv = 1;
    d.d_qk = 576;
    d.d_v = 512;
    d.softmax_scale = 0.0721f;
    d.page_size = 64;
    switch (kind) {
    case AK_ATTN_MLA: d.layout = AK_LAYOUT_MLA_BF16; break;
    case AK_ATTN_DSA:
        d.layout = AK_LAYOUT_DSA_FP8_BLOCKSCALE;
        d.topk = 2048;
        d.index_heads = 64;
        break;
    case AK_ATTN_DSV4:
        d.h_q = 64;
        d.d_qk = d.d_v = 512;
        d.layout = d.extra_layout = AK_LAYOUT_DSV4_FP8_UE8M0;
        d.page_size = 256;
        d.extra_page_size = 64;
        d.compress_ratio = 4;
        d.topk = 512;
        d.window = 128;
        d.index_heads = 64;
        d.has_sink = 1;
        break;
    case AK_ATTN_MHA:
        d.h_q = 32;
        d.h_kv = 8;
        d.d_qk = d.d_v = 128;
        d.layout = AK_LAYOUT_MHA_NHD;
        d.page_size = 16;
        break;
    }
    return d;
}

static int is_attention(ak_step_kind k) {
    return k == AK_STEP_MLA_DENSE || k == AK_STEP_MLA_SPARSE || k == AK_STEP_SPARSE_PREFILL ||
           k == AK_STEP_MHA;
}

static int is_decode_phase(ak_phase p) {
    return p == AK_PHASE_DECODE || p == AK_PHASE_TARGET_VERIFY || p == AK_PHASE_DRAFT_EXTEND;
}

/* Invariants every accepted plan keeps: each non-empty request is covered by exactly one attention
   step; attention rows add up to the batch's rows; decode-class rows never reach a prefill-only
   kernel and their indices are PAGED; each top-k's transform matches its consumer; workspace
   within the budget. */
static void check_plan_invariants(const ak_plan *p, const ak_plan_desc *d, int64_t budget) {
    int32_t n = ak_plan_step_count(p);
    int64_t rows = 0, total = 0;
    int *cover = (int *)calloc((size_t)(d->num_requests > 0 ? d->num_requests : 1), sizeof(int));
    for (int32_t r = 0; r < d->num_requests; r++)
        total += d->q_lens[r];
    for (int32_t i = 0; i < n; i++) {
        ak_plan_step s;
        CHECK_STATUS(ak_plan_step_get(p, i, &s), AK_OK);
        CHECK(s.reason != NULL && s.reason[0] != '\0');
        CHECK(s.kernel != NULL && s.op != NULL);
        CHECK_MSG(s.workspace_bytes <= budget, "step %d workspace %lld > budget %lld", (int)i,
                  (long long)s.workspace_bytes, (long long)budget);
        if (s.kind == AK_STEP_TOPK) {
            /* the next attention step of the same requests consumes these indices */
            for (int32_t j = i + 1; j < n; j++) {
                ak_plan_step a;
                ak_plan_step_get(p, j, &a);
                if (!is_attention(a.kind)) continue;
                CHECK(a.req_begin == s.req_begin && a.req_end == s.req_end);
                if (strcmp(a.kernel, "gather_sparse_prefill") == 0)
                    CHECK_MSG(s.transform == AK_TRANSFORM_RAGGED, "gather consumer needs RAGGED");
                else if (strcmp(a.kernel, "v4_gather_sparse_prefill") == 0)
                    CHECK_MSG(s.transform == AK_TRANSFORM_NONE, "the combiner takes raw positions");
                else
                    CHECK_MSG(s.transform == AK_TRANSFORM_PAGED, "%s needs PAGED", a.kernel);
                break;
            }
        }
        if (!is_attention(s.kind) && s.kind != AK_STEP_MERGE) continue;
        /* partial states merged later count once, through their merge step */
        int partial = 0;
        for (int32_t j = i + 1; j < n && is_attention(s.kind); j++) {
            ak_plan_step m;
            ak_plan_step_get(p, j, &m);
            if (m.kind == AK_STEP_MERGE && m.req_begin == s.req_begin && m.req_end == s.req_end)
                partial = 1;
        }
        if (partial) continue;
        rows += s.rows;
        int64_t seg_rows = 0;
        for (int32_t r = s.req_begin; r < s.req_end; r++) {
            cover[r]++;
            seg_rows += d->q_lens[r];
            if (is_decode_phase(d->phases[r])) {
                CHECK_MSG(strcmp(s.kernel, "sparse_prefill_paged") != 0 &&
                              strcmp(s.kernel, "gather_sparse_prefill") != 0 &&
                              strcmp(s.kernel, "v4_gather_sparse_prefill") != 0,
                          "decode-class request %d on prefill kernel %s", (int)r, s.kernel);
                CHECK(s.transform != AK_TRANSFORM_RAGGED);
            }
        }
        CHECK(seg_rows == s.rows);
        CHECK(s.chunk_rows >= 1 && s.chunk_rows <= s.rows);
    }
    for (int32_t r = 0; r < d->num_requests; r++)
        CHECK_MSG(cover[r] == (d->q_lens[r] > 0 ? 1 : 0), "request %d covered %d times", (int)r,
                  cover[r]);
    CHECK(rows == total);
    CHECK(strlen(ak_plan_explain(p)) > 0);
    free(cover);
}

/* Acceptance: a 16384-row extend over 65536 keys plans (no query cap) and explains its choice. */
AK_TEST(plan_dsa_long_extend_has_no_cap) {
    ak_context *ctx = cpu_ctx();
    ak_plan_desc d = desc_of(AK_ATTN_DSA);
    ak_phase ph[1] = {AK_PHASE_EXTEND};
    int32_t q[1] = {16384}, kv[1] = {65536};
    d.num_requests = 1, d.phases = ph, d.q_lens = q, d.kv_lens = kv;
    ak_plan *p = NULL;
    CHECK_STATUS(ak_plan_create(ctx, &d, &p), AK_OK);
    if (p != NULL) {
        check_plan_invariants(p, &d, (int64_t)256 << 20);
        const char *e = ak_plan_explain(p);
        CHECK(strstr(e, "candidate") != NULL && strstr(e, "chosen") != NULL);
        CHECK(strstr(e, "cost model") != NULL);
    }
    ak_plan_destroy(p);
    ak_context_destroy(ctx);
}

/* Acceptance: V4 on the 576-byte per-tensor layout is rejected, naming the supported layout. */
AK_TEST(plan_rejects_v4_on_pertensor_layout) {
    ak_context *ctx = cpu_ctx();
    ak_plan_desc d = desc_of(AK_ATTN_DSV4);
    d.layout = AK_LAYOUT_MLA_FP8_PERTENSOR;
    ak_phase ph[1] = {AK_PHASE_DECODE};
    int32_t q[1] = {1}, kv[1] = {4096};
    d.num_requests = 1, d.phases = ph, d.q_lens = q, d.kv_lens = kv;
    ak_plan *p = NULL;
    CHECK_REJECT(ak_plan_create(ctx, &d, &p), AK_ERR_UNSUPPORTED, "DSV4_FP8_UE8M0");
    CHECK(p == NULL);
    ak_context_destroy(ctx);
}

/* Seed failure 1: a decode step consulted the prefill backend's choice. Decode-only batches plan
   the same steps whatever prefill_kernel says, and decode rows in a mixed batch keep PAGED. */
AK_TEST(regression_decode_never_reads_prefill_choice) {
    ak_context *ctx = cpu_ctx();
    const char *prefs[] = {NULL, "auto", "gather_sparse_prefill", "sparse_prefill_paged",
                           "mla_decode_sparse"};
    ak_phase ph[3] = {AK_PHASE_DECODE, AK_PHASE_TARGET_VERIFY, AK_PHASE_DRAFT_EXTEND};
    int32_t q[3] = {1, 3, 2}, kv[3] = {9000, 5000, 70000};
    char first[8192] = "";
    for (size_t i = 0; i < sizeof prefs / sizeof prefs[0]; i++) {
        ak_plan_desc d = desc_of(AK_ATTN_DSA);
        d.num_requests = 3, d.phases = ph, d.q_lens = q, d.kv_lens = kv;
        d.prefill_kernel = prefs[i];
        ak_plan *p = NULL;
        CHECK_STATUS(ak_plan_create(ctx, &d, &p), AK_OK);
        if (p == NULL) continue;
        char sig[8192] = "";
        for (int32_t s = 0; s < ak_plan_step_count(p); s++) {
            ak_plan_step st;
            ak_plan_step_get(p, s, &st);
            CHECK(st.transform != AK_TRANSFORM_RAGGED);
            size_t l = strlen(sig);
            snprintf(sig + l, sizeof sig - l, "%s/%d/%d/%d;", st.kernel, (int)st.req_begin,
                     (int)st.req_end, (int)st.transform);
        }
        if (i == 0) memcpy(first, sig, sizeof sig);
        CHECK_MSG(strcmp(first, sig) == 0, "prefill_kernel %s changed the decode plan", prefs[i]);
        check_plan_invariants(p, &d, (int64_t)256 << 20);
        ak_plan_destroy(p);
    }
    ak_context_destroy(ctx);
}

/* Seed failure 2: the top-k transform was chosen for the wrong kernel (and RAGGED offsets reached a
   kernel with no gathered buffer). The transform always follows the consumer. */
AK_TEST(regression_topk_transform_follows_consumer) {
    ak_context *ctx = cpu_ctx();
    struct {
        const char *pref;
        ak_index_transform want;
    } cases[] = {{"gather_sparse_prefill", AK_TRANSFORM_RAGGED},
                 {"sparse_prefill_paged", AK_TRANSFORM_PAGED},
                 {"mla_decode_sparse", AK_TRANSFORM_PAGED}};
    ak_phase ph[2] = {AK_PHASE_EXTEND, AK_PHASE_DECODE};
    int32_t q[2] = {300, 1}, kv[2] = {6000, 6000};
    for (size_t i = 0; i < 3; i++) {
        ak_plan_desc d = desc_of(AK_ATTN_DSA);
        d.num_requests = 2, d.phases = ph, d.q_lens = q, d.kv_lens = kv;
        d.prefill_kernel = cases[i].pref;
        ak_plan *p = NULL;
        CHECK_STATUS(ak_plan_create(ctx, &d, &p), AK_OK);
        if (p == NULL) continue;
        int seen = 0;
        for (int32_t s = 0; s < ak_plan_step_count(p); s++) {
            ak_plan_step st;
            ak_plan_step_get(p, s, &st);
            if (st.kind != AK_STEP_TOPK) continue;
            seen++;
            CHECK(st.transform == (st.req_begin == 0 ? cases[i].want : AK_TRANSFORM_PAGED));
        }
        CHECK(seen == 2);
        check_plan_invariants(p, &d, (int64_t)256 << 20);
        ak_plan_destroy(p);
    }
    ak_context_destroy(ctx);
}

/* Seed failure 3: an extend path left unimplemented ("Unsupported nsa_impl"). Every kind plans
   every phase, and every decode kernel takes extend-shaped (multi-token) rows. */
AK_TEST(regression_every_phase_has_a_path) {
    ak_context *ctx = cpu_ctx();
    for (int k = 0; k <= AK_ATTN_MHA; k++)
        for (int ph = 0; ph < AK_PHASE_COUNT_; ph++) {
            ak_plan_desc d = desc_of((ak_attn_kind)k);
            ak_phase phs[2] = {(ak_phase)ph, (ak_phase)ph};
            int32_t q[2], kv[2] = {3000, 100};
            q[0] = ph == AK_PHASE_DECODE ? 1 : ph == AK_PHASE_PREFILL ? 3000 : 4;
            q[1] = ph == AK_PHASE_DECODE ? 1 : ph == AK_PHASE_PREFILL ? 100 : 4;
            d.num_requests = 2, d.phases = phs, d.q_lens = q, d.kv_lens = kv;
            ak_plan *p = NULL;
            CHECK_STATUS(ak_plan_create(ctx, &d, &p), AK_OK);
            if (p != NULL) check_plan_invariants(p, &d, (int64_t)256 << 20);
            ak_plan_destroy(p);
            /* the decode kernel named for prefill-class rows */
            if (!is_decode_phase((ak_phase)ph) && k != AK_ATTN_MHA) {
                d.prefill_kernel = k == AK_ATTN_MLA ? "mla_decode_dense" : "mla_decode_sparse";
                CHECK_STATUS(ak_plan_create(ctx, &d, &p), AK_OK);
                ak_plan_destroy(p);
            }
        }
    ak_context_destroy(ctx);
}

/* Seed failure 4: a scheduler crashed past 11673 query rows. Batches at and around the shared
   memory bounds of semantics.md 12.3 plan, in chunks, without a cap. */
AK_TEST(regression_no_row_cap) {
    ak_context *ctx = cpu_ctx();
    const int32_t sizes[] = {1, 11622, 11623, 11674, 100000};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        int32_t n = sizes[i];
        ak_phase *ph = (ak_phase *)malloc((size_t)n * sizeof *ph);
        int32_t *q = (int32_t *)malloc((size_t)n * 4), *kv = (int32_t *)malloc((size_t)n * 4);
        for (int32_t r = 0; r < n; r++)
            ph[r] = AK_PHASE_DECODE, q[r] = 1, kv[r] = 4096 + r % 7;
        for (int k = AK_ATTN_DSA; k <= AK_ATTN_DSV4; k++) {
            ak_plan_desc d = desc_of((ak_attn_kind)k);
            d.num_requests = n, d.phases = ph, d.q_lens = q, d.kv_lens = kv;
            ak_plan *p = NULL;
            CHECK_STATUS(ak_plan_create(ctx, &d, &p), AK_OK);
            if (p != NULL) check_plan_invariants(p, &d, (int64_t)256 << 20);
            ak_plan_destroy(p);
        }
        /* the same number of rows as one extend request (prefill rows through the decode kernel) */
        ak_plan_desc d = desc_of(AK_ATTN_DSA);
        ak_phase e = AK_PHASE_EXTEND;
        int32_t eq = n, ekv = n + 2049;
        d.num_requests = 1, d.phases = &e, d.q_lens = &eq, d.kv_lens = &ekv;
        d.prefill_kernel = "mla_decode_sparse";
        ak_plan *p = NULL;
        CHECK_STATUS(ak_plan_create(ctx, &d, &p), AK_OK);
        if (p != NULL) check_plan_invariants(p, &d, (int64_t)256 << 20);
        ak_plan_destroy(p);
        free(ph), free(q), free(kv);
    }
    ak_context_destroy(ctx);
}

/* Sparse equals dense: contexts that fit in top-k use dense causal MLA (no indexer logits). */
AK_TEST(plan_short_context_is_dense) {
    ak_context *ctx = cpu_ctx();
    ak_plan_desc d = desc_of(AK_ATTN_DSA);
    ak_phase ph[2] = {AK_PHASE_EXTEND, AK_PHASE_DECODE};
    int32_t q[2] = {1000, 1}, kv[2] = {2048, 17};
    d.num_requests = 2, d.phases = ph, d.q_lens = q, d.kv_lens = kv;
    ak_plan *p = NULL;
    CHECK_STATUS(ak_plan_create(ctx, &d, &p), AK_OK);
    for (int32_t s = 0; p != NULL && s < ak_plan_step_count(p); s++) {
        ak_plan_step st;
        ak_plan_step_get(p, s, &st);
        CHECK(st.kind == AK_STEP_MLA_DENSE);
    }
    ak_plan_destroy(p);
    /* a named dense decode kernel cannot serve contexts beyond top-k */
    kv[1] = 5000;
    d.decode_kernel = "mla_decode_dense";
    CHECK_REJECT(ak_plan_create(ctx, &d, &p), AK_ERR_UNSUPPORTED, "mla_decode_sparse");
    ak_context_destroy(ctx);
}

/* The workspace budget bounds every step; a budget below one row is rejected at plan time. */
AK_TEST(plan_budget_chunks_and_rejects) {
    ak_context *ctx = cpu_ctx();
    ak_plan_desc d = desc_of(AK_ATTN_DSA);
    ak_phase ph[1] = {AK_PHASE_EXTEND};
    int32_t q[1] = {8192}, kv[1] = {131072};
    d.num_requests = 1, d.phases = ph, d.q_lens = q, d.kv_lens = kv;
    d.workspace_budget = (int64_t)64 << 20;
    ak_plan *p = NULL;
    CHECK_STATUS(ak_plan_create(ctx, &d, &p), AK_OK);
    if (p != NULL) check_plan_invariants(p, &d, d.workspace_budget);
    ak_plan_destroy(p);
    d.workspace_budget = 4096;
    CHECK_REJECT(ak_plan_create(ctx, &d, &p), AK_ERR_UNSUPPORTED, "budget");
    ak_context_destroy(ctx);
}

/* Every (kind, layout, phase, preference) plans or is rejected at plan time with a message that
   names the supported alternatives. */
AK_TEST(plan_support_matrix_is_complete) {
    ak_context *ctx = cpu_ctx();
    const char *prefs[] = {"auto",
                           "mla_decode_dense",
                           "mla_decode_sparse",
                           "sparse_prefill_paged",
                           "gather_sparse_prefill",
                           "v4_gather_sparse_prefill",
                           "mha_paged"};
    int planned = 0, rejected = 0;
    for (int k = 0; k <= AK_ATTN_MHA; k++)
        for (int l = 1; l < AK_LAYOUT_END_; l++) {
            ak_layout_traits t;
            if (ak_layout_traits_get((ak_layout)l, &t) != AK_OK) continue;
            for (int ph = 0; ph < AK_PHASE_COUNT_; ph++)
                for (size_t pi = 0; pi < sizeof prefs / sizeof prefs[0]; pi++) {
                    ak_plan_desc d = desc_of((ak_attn_kind)k);
                    d.layout = (ak_layout)l;
                    ak_phase phs[1] = {(ak_phase)ph};
                    int32_t q[1] = {ph == AK_PHASE_DECODE ? 1 : ph == AK_PHASE_PREFILL ? 4000 : 3};
                    int32_t kv[1] = {4000};
                    d.num_requests = 1, d.phases = phs, d.q_lens = q, d.kv_lens = kv;
                    if (is_decode_phase((ak_phase)ph))
                        d.decode_kernel = prefs[pi];
                    else
                        d.prefill_kernel = prefs[pi];
                    ak_plan *p = NULL;
                    ak_status s = ak_plan_create(ctx, &d, &p);
                    if (s == AK_OK) {
                        planned++;
                        check_plan_invariants(p, &d, (int64_t)256 << 20);
                    } else {
                        rejected++;
                        CHECK_MSG(s == AK_ERR_UNSUPPORTED, "status %s: %s", ak_status_name(s),
                                  ak_last_error());
                        CHECK_MSG(strstr(ak_last_error(), "supported") != NULL,
                                  "no alternatives in: %s", ak_last_error());
                    }
                    ak_plan_destroy(p);
                }
        }
    CHECK(planned > 0 && rejected > 0);
    ak_context_destroy(ctx);
}

/* Property test: random mixed batches (empty requests, q 1..8192, kv 0..128k) on the planner. */
AK_TEST(plan_random_batches) {
    ak_context *ctx = cpu_ctx();
    ak_rng rng;
    ak_rng_init(&rng, ak_test_seed());
    for (int it = 0; it < 2000; it++) {
        int k = (int)ak_rng_range(&rng, 0, 4);
        int32_t n = (int32_t)ak_rng_range(&rng, 0, 24);
        ak_phase ph[24];
        int32_t q[24], kv[24];
        for (int32_t r = 0; r < n; r++) {
            ph[r] = (ak_phase)ak_rng_range(&rng, 0, AK_PHASE_COUNT_);
            int64_t L = ak_rng_range(&rng, 0, 131073);
            int64_t Q;
            switch (ph[r]) {
            case AK_PHASE_PREFILL: Q = L > 8192 ? 8192 : L, L = Q; break;
            case AK_PHASE_DECODE: Q = L > 0 ? 1 : 0; break;
            case AK_PHASE_TARGET_VERIFY:
            case AK_PHASE_DRAFT_EXTEND: Q = ak_rng_range(&rng, 0, 9); break;
            default: Q = ak_rng_range(&rng, 0, 8193); break;
            }
            if (ak_rng_range(&rng, 0, 10) == 0) Q = 0; /* empty request */
            if (Q > L || ph[r] == AK_PHASE_PREFILL) L = Q;
            q[r] = (int32_t)Q, kv[r] = (int32_t)L;
        }
        ak_plan_desc d = desc_of((ak_attn_kind)k);
        d.num_requests = n, d.phases = ph, d.q_lens = q, d.kv_lens = kv;
        d.workspace_budget = ak_rng_range(&rng, 0, 2) ? 0 : ak_rng_range(&rng, 1 << 20, 1 << 28);
        ak_plan *p = NULL;
        ak_status s = ak_plan_create(ctx, &d, &p);
        if (s == AK_OK) {
            check_plan_invariants(p, &d,
                                  d.workspace_budget ? d.workspace_budget : (int64_t)256 << 20);
        } else {
            CHECK_MSG(s == AK_ERR_UNSUPPORTED && strstr(ak_last_error(), "budget") != NULL,
                      "iteration %d: %s: %s", it, ak_status_name(s), ak_last_error());
        }
        ak_plan_destroy(p);
    }
    ak_context_destroy(ctx);
}

/* CUDA plans are explained from any machine; paths without CUDA kernels name the CPU backend. */
AK_TEST(plan_cuda_target_names_cpu_backend) {
    ak_context *ctx = cpu_ctx();
    ak_device_info h100;
    memset(&h100, 0, sizeof h100);
    h100.backend = AK_BACKEND_CUDA;
    h100.sm_count = 132;
    h100.copy_bytes_per_s = 3e12;
    h100.bf16_flops_per_s = 9e14;
    for (int k = 0; k <= AK_ATTN_MHA; k++) {
        ak_plan_desc d = desc_of((ak_attn_kind)k);
        ak_phase ph[1] = {AK_PHASE_DECODE};
        int32_t q[1] = {1}, kv[1] = {9000};
        d.num_requests = 1, d.phases = ph, d.q_lens = q, d.kv_lens = kv;
        d.target = AK_BACKEND_CUDA;
        d.device = &h100;
        ak_plan *p = NULL;
        CHECK_REJECT(ak_plan_create(ctx, &d, &p), AK_ERR_UNSUPPORTED, "CPU backend");
    }
    ak_context_destroy(ctx);
}

AK_TEST(plan_bad_arguments) {
    ak_context *ctx = cpu_ctx();
    ak_plan *p = NULL;
    ak_plan_desc d = desc_of(AK_ATTN_DSA);
    ak_phase ph[1] = {AK_PHASE_DECODE};
    int32_t q[1] = {1}, kv[1] = {100};
    d.num_requests = 1, d.phases = ph, d.q_lens = q, d.kv_lens = kv;
    CHECK_REJECT(ak_plan_create(NULL, &d, &p), AK_ERR_INVALID_ARGUMENT, "ctx");
    CHECK_REJECT(ak_plan_create(ctx, NULL, &p), AK_ERR_INVALID_ARGUMENT, "desc");
    CHECK_REJECT(ak_plan_create(ctx, &d, NULL), AK_ERR_INVALID_ARGUMENT, "out");
    q[0] = 2;
    CHECK_REJECT(ak_plan_create(ctx, &d, &p), AK_ERR_INVALID_ARGUMENT, "decode");
    q[0] = 200;
    ph[0] = AK_PHASE_EXTEND;
    CHECK_REJECT(ak_plan_create(ctx, &d, &p), AK_ERR_INVALID_ARGUMENT, "q_len");
    q[0] = 1;
    ph[0] = (ak_phase)9;
    CHECK_REJECT(ak_plan_create(ctx, &d, &p), AK_ERR_INVALID_ARGUMENT, "phases");
    ph[0] = AK_PHASE_DECODE;
    d.decode_kernel = "flashmla_kv";
    CHECK_REJECT(ak_plan_create(ctx, &d, &p), AK_ERR_INVALID_ARGUMENT, "decode_kernel");
    d.decode_kernel = "sparse_prefill_paged";
    CHECK_REJECT(ak_plan_create(ctx, &d, &p), AK_ERR_UNSUPPORTED, "decode_kernel");
    d.decode_kernel = NULL;
    d.page_size = 32;
    CHECK_REJECT(ak_plan_create(ctx, &d, &p), AK_ERR_UNSUPPORTED, "page_size");
    d.page_size = 64;
    d.h_q = 0;
    CHECK_REJECT(ak_plan_create(ctx, &d, &p), AK_ERR_INVALID_ARGUMENT, "h_q");
    CHECK(p == NULL);
    ak_plan_kernel kk;
    CHECK(ak_plan_kernel_count() > 5);
    CHECK_STATUS(ak_plan_kernel_get(0, &kk), AK_OK);
    CHECK_REJECT(ak_plan_kernel_get(-1, &kk), AK_ERR_INVALID_ARGUMENT, "i");
    CHECK(ak_phase_from_name("target-verify") == AK_PHASE_TARGET_VERIFY);
    CHECK(strcmp(ak_phase_name(AK_PHASE_EXTEND), "extend") == 0);
    ak_context_destroy(ctx);
}

/* ---- plan and run: every path gives what the direct ops give ------------------------------------
 */

#define FX_MAXR 8

typedef struct fx {
    ak_context *ctx;
    ak_plan_desc d;
    ak_cache main, extra, index;
    void *mbuf, *vbuf, *ebuf, *ibuf;
    int32_t n, max_pages;
    ak_phase ph[FX_MAXR];
    int32_t q[FX_MAXR], kv[FX_MAXR];
    int32_t *bt; /* [n, max_pages] */
    int64_t T;
    uint16_t *qb; /* [T, h_q, d_qk] bf16 */
    uint8_t *iq;  /* [T, H, 128] e4m3 */
    float *iw, *sink;
    ak_rng rng;
} fx;

static uint16_t to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

static float urand(ak_rng *r) {
    return (float)(ak_rng_uniform(r) * 2.0 - 1.0);
}

static void *pool(const ak_cache *c, int64_t *bytes) {
    int64_t b = 0, vb = 0;
    ak_cache_bytes(c, &b, &vb);
    *bytes = b;
    void *p = malloc((size_t)b + 64);
    if (p != NULL) memset(p, 0xff, (size_t)b); /* NaN bytes: unused slots must never be read */
    return p;
}

static void fx_write(fx *f, const ak_cache *c, int32_t page_size, int32_t r, int64_t count,
                     int32_t width, int rope) {
    for (int64_t p = 0; p < count; p++) {
        float row[576];
        for (int32_t e = 0; e < width; e++)
            row[e] = urand(&f->rng);
        int32_t slot =
            f->bt[r * f->max_pages + p / page_size] * page_size + (int32_t)(p % page_size);
        ak_tensor sl = ak_tensor_make(&slot, AK_DTYPE_I32, 1, (int64_t[]){1});
        ak_tensor no = ak_tensor_make(row, AK_DTYPE_F32, 2, (int64_t[]){1, width - rope});
        ak_tensor ro = ak_tensor_make(row + width - rope, AK_DTYPE_F32, 2, (int64_t[]){1, rope});
        CHECK_STATUS(ak_cache_write(f->ctx, c, &no, rope ? &ro : NULL, &sl, AK_QUANT_DEFAULT),
                     AK_OK);
    }
}

static void fx_init(fx *f, ak_plan_desc d, int32_t n, const ak_phase *ph, const int32_t *q,
                    const int32_t *kv) {
    memset(f, 0, sizeof *f);
    f->ctx = cpu_ctx();
    f->d = d;
    f->n = n;
    ak_rng_init(&f->rng, ak_test_seed() ^ (uint64_t)d.kind * 7919u);
    int32_t maxkv = 1;
    for (int32_t r = 0; r < n; r++) {
        f->ph[r] = ph[r], f->q[r] = q[r], f->kv[r] = kv[r];
        f->T += q[r];
        if (kv[r] > maxkv) maxkv = kv[r];
    }
    f->max_pages = (maxkv + d.page_size - 1) / d.page_size + 1;
    int32_t pages = n * f->max_pages;
    f->bt = (int32_t *)malloc((size_t)pages * 4);
    for (int32_t i = 0; i < pages; i++)
        f->bt[i] = pages - 1 - i; /* pages in reverse order */
    int64_t b;
    char probe[64];
    if (d.kind == AK_ATTN_MHA) {
        CHECK_STATUS(ak_cache_init_mha(&f->main, d.layout, AK_DTYPE_BF16, probe, probe, pages,
                                       d.page_size, d.h_kv, d.d_qk, d.d_v),
                     AK_OK);
        int64_t vb = 0;
        ak_cache_bytes(&f->main, &b, &vb);
        f->mbuf = malloc((size_t)b), f->vbuf = malloc((size_t)vb);
        f->main.data = f->mbuf, f->main.v_data = f->vbuf;
        for (int32_t r = 0; r < n; r++)
            for (int64_t p = 0; p < kv[r]; p++) {
                float k[8 * 128], v[8 * 128];
                for (int32_t e = 0; e < d.h_kv * d.d_qk; e++)
                    k[e] = urand(&f->rng), v[e] = urand(&f->rng);
                int32_t slot = f->bt[r * f->max_pages + p / d.page_size] * d.page_size +
                               (int32_t)(p % d.page_size);
                ak_tensor sl = ak_tensor_make(&slot, AK_DTYPE_I32, 1, (int64_t[]){1});
                ak_tensor kt = ak_tensor_make(k, AK_DTYPE_F32, 3, (int64_t[]){1, d.h_kv, d.d_qk});
                ak_tensor vt = ak_tensor_make(v, AK_DTYPE_F32, 3, (int64_t[]){1, d.h_kv, d.d_v});
                CHECK_STATUS(ak_mha_cache_write(f->ctx, &f->main, &kt, &vt, &sl), AK_OK);
            }
    } else {
        CHECK_STATUS(ak_cache_init(&f->main, d.layout, probe, pages, d.page_size), AK_OK);
        f->mbuf = pool(&f->main, &b);
        f->main.data = f->mbuf;
        for (int32_t r = 0; r < n; r++)
            fx_write(f, &f->main, d.page_size, r, kv[r], d.d_qk, 64);
        int c4 = d.kind == AK_ATTN_DSV4 && d.compress_ratio;
        if (c4) {
            CHECK_STATUS(ak_cache_init(&f->extra, d.extra_layout, probe, pages, d.extra_page_size),
                         AK_OK);
            f->ebuf = pool(&f->extra, &b);
            f->extra.data = f->ebuf;
            for (int32_t r = 0; r < n; r++)
                fx_write(f, &f->extra, d.extra_page_size, r, kv[r] / d.compress_ratio, 512, 64);
        }
        if (d.kind == AK_ATTN_DSA || (c4 && d.compress_ratio == 4)) {
            CHECK_STATUS(ak_cache_init(&f->index, AK_LAYOUT_INDEXER_FP8, probe, pages, 64), AK_OK);
            f->ibuf = pool(&f->index, &b);
            f->index.data = f->ibuf;
            for (int32_t r = 0; r < n; r++)
                fx_write(f, &f->index, 64, r, d.kind == AK_ATTN_DSA ? kv[r] : kv[r] / 4, 128, 0);
        }
    }
    int32_t H = d.index_heads > 0 ? d.index_heads : 1;
    int64_t T = f->T > 0 ? f->T : 1;
    f->qb = (uint16_t *)malloc((size_t)T * d.h_q * d.d_qk * 2);
    f->iq = (uint8_t *)malloc((size_t)T * H * 128);
    f->iw = (float *)malloc((size_t)T * H * 4);
    f->sink = (float *)malloc((size_t)d.h_q * 4);
    for (int64_t i = 0; i < f->T * d.h_q * d.d_qk; i++)
        f->qb[i] = to_bf16(urand(&f->rng));
    for (int64_t i = 0; i < f->T * H * 128; i++)
        f->iq[i] = (uint8_t)(ak_rng_range(&f->rng, 0, 0x50) | (ak_rng_range(&f->rng, 0, 2) << 7));
    for (int64_t i = 0; i < f->T * H; i++)
        f->iw[i] = urand(&f->rng) * 0.05f;
    for (int32_t h = 0; h < d.h_q; h++)
        f->sink[h] = urand(&f->rng);
}

static void fx_free(fx *f) {
    free(f->mbuf), free(f->vbuf), free(f->ebuf), free(f->ibuf), free(f->bt);
    free(f->qb), free(f->iq), free(f->iw), free(f->sink);
    ak_context_destroy(f->ctx);
}

/* Plans with the given preferences and budget, runs, returns out [T, h_q, d_v] f32 followed by lse
   [T, h_q] f32 in one malloc'd array, or NULL when the plan was rejected (the rejection must then
   be AK_ERR_UNSUPPORTED, at plan time). */
static float *fx_run(fx *f, const char *prefill, const char *decode, int64_t budget) {
    ak_plan_desc d = f->d;
    d.num_requests = f->n, d.phases = f->ph, d.q_lens = f->q, d.kv_lens = f->kv;
    d.prefill_kernel = prefill, d.decode_kernel = decode, d.workspace_budget = budget;
    ak_plan *p = NULL;
    ak_status s = ak_plan_create(f->ctx, &d, &p);
    if (s != AK_OK) {
        CHECK_MSG(s == AK_ERR_UNSUPPORTED, "%s/%s: %s", prefill, decode, ak_last_error());
        return NULL;
    }
    int64_t T = f->T;
    int32_t H = d.index_heads > 0 ? d.index_heads : 1;
    float *out = (float *)malloc((size_t)(T > 0 ? T : 1) * d.h_q * (d.d_v + 1) * 4);
    float *lse = out + T * d.h_q * d.d_v;
    ak_poison(out, (size_t)T * d.h_q * (d.d_v + 1) * 4, AK_DTYPE_F32);
    ak_tensor q = ak_tensor_make(f->qb, AK_DTYPE_BF16, 3, (int64_t[]){T, d.h_q, d.d_qk});
    ak_tensor o = ak_tensor_make(out, AK_DTYPE_F32, 3, (int64_t[]){T, d.h_q, d.d_v});
    ak_tensor l = ak_tensor_make(lse, AK_DTYPE_F32, 2, (int64_t[]){T, d.h_q});
    ak_tensor bt = ak_tensor_make(f->bt, AK_DTYPE_I32, 2, (int64_t[]){f->n, f->max_pages});
    ak_tensor sl = ak_tensor_make(f->kv, AK_DTYPE_I32, 1, (int64_t[]){f->n});
    ak_tensor iq = ak_tensor_make(f->iq, AK_DTYPE_E4M3, 3, (int64_t[]){T, H, 128});
    ak_tensor iw = ak_tensor_make(f->iw, AK_DTYPE_F32, 2, (int64_t[]){T, H});
    ak_tensor sk = ak_tensor_make(f->sink, AK_DTYPE_F32, 1, (int64_t[]){d.h_q});
    ak_plan_io io;
    memset(&io, 0, sizeof io);
    io.q = &q, io.out = &o, io.lse = &l, io.cache = &f->main, io.block_table = &bt,
    io.seq_lens = &sl;
    if (f->ebuf) io.extra_cache = &f->extra;
    if (f->ibuf) io.index_cache = &f->index, io.index_q = &iq, io.index_weights = &iw;
    if (d.has_sink) io.attn_sink = &sk;
    size_t wsb = 0;
    CHECK_STATUS(ak_plan_workspace_size(p, &wsb), AK_OK);
    void *ws = malloc(wsb + 1);
    CHECK_STATUS(ak_plan_run(f->ctx, p, &io, ws, wsb), AK_OK);
    /* one byte short is refused before anything runs */
    if (wsb > 0)
        CHECK_REJECT(ak_plan_run(f->ctx, p, &io, ws, wsb - 1), AK_ERR_WORKSPACE_TOO_SMALL,
                     "workspace");
    for (int64_t i = 0; i < T * d.h_q * (d.d_v + 1); i++)
        if (out[i] != out[i]) {
            CHECK_MSG(0, "%s/%s: output %lld not written", prefill, decode, (long long)i);
            break;
        }
    /* io values outside the plan are refused before anything runs */
    for (int32_t r = 0; r < f->n; r++) {
        if (f->q[r] == 0) continue; /* empty requests have no rows to check */
        int32_t keep = f->kv[r];
        f->kv[r] = keep + 1;
        CHECK_REJECT(ak_plan_run(f->ctx, p, &io, ws, wsb), AK_ERR_INVALID_ARGUMENT, "seq_lens");
        f->kv[r] = keep;
        break;
    }
    free(ws);
    ak_plan_destroy(p);
    return out;
}

static void fx_compare(const char *what, const fx *f, const float *got, const float *ref) {
    int64_t n = f->T * f->d.h_q * (f->d.d_v + 1); /* out, then lse */
    double *r = (double *)malloc((size_t)(n > 0 ? n : 1) * sizeof(double));
    for (int64_t i = 0; i < n; i++)
        r[i] = ref[i];
    /* Two fp32 CPU paths over the same dequantized keys and the same key sets: they differ only
       in summation order (tiles, chunks, key order), a few fp32 ulps of outputs of magnitude ~1. */
    ak_tol tol = {1e-5, 1e-4, 1e-9, 1e-9};
    ak_compare(what, got, r, n, tol);
    free(r);
}

/* DSA: every prefill and decode preference, with and without a tight budget (chunking), gives the
   auto plan's output; short contexts through the sparse kernel equal the dense path. */
AK_TEST(plan_run_dsa_paths_agree) {
    ak_plan_desc d = desc_of(AK_ATTN_DSA);
    d.h_q = 4, d.topk = 64, d.index_heads = 4;
    ak_phase ph[7] = {AK_PHASE_DECODE,  AK_PHASE_DECODE, AK_PHASE_TARGET_VERIFY, AK_PHASE_EXTEND,
                      AK_PHASE_PREFILL, AK_PHASE_EXTEND, AK_PHASE_DRAFT_EXTEND};
    int32_t q[7] = {1, 1, 3, 50, 30, 0, 2}, kv[7] = {300, 40, 200, 250, 30, 10, 60};
    fx f;
    fx_init(&f, d, 7, ph, q, kv);
    float *ref = fx_run(&f, "auto", "auto", 0);
    const char *pre[] = {"sparse_prefill_paged", "gather_sparse_prefill", "mla_decode_sparse"};
    for (int i = 0; i < 3 && ref; i++) {
        float *o = fx_run(&f, pre[i], "mla_decode_sparse", 0);
        if (o) fx_compare(pre[i], &f, o, ref);
        free(o);
        o = fx_run(&f, pre[i], "auto", 24 * 1024); /* a few rows per chunk */
        if (o) fx_compare(pre[i], &f, o, ref);
        free(o);
    }
    free(ref);
    fx_free(&f);
}

/* The plan's dense MLA and MHA paths equal one direct op call over the same batch. */
AK_TEST(plan_run_matches_direct_ops) {
    for (int k = 0; k < 2; k++) {
        ak_plan_desc d = desc_of(k == 0 ? AK_ATTN_MLA : AK_ATTN_MHA);
        if (k == 0) d.h_q = 4, d.layout = AK_LAYOUT_MLA_FP8_PERTENSOR;
        ak_phase ph[3] = {AK_PHASE_EXTEND, AK_PHASE_EXTEND, AK_PHASE_EXTEND};
        int32_t q[3] = {5, 5, 5}, kv[3] = {90, 37, 5};
        fx f;
        fx_init(&f, d, 3, ph, q, kv);
        float *got = fx_run(&f, "auto", "auto", 0);
        int64_t n = f.T * d.h_q * (d.d_v + 1);
        float *ref = (float *)malloc((size_t)n * 4);
        ak_poison(ref, (size_t)n * 4, AK_DTYPE_F32);
        float *ref_lse = ref + f.T * d.h_q * d.d_v;
        ak_tensor bt = ak_tensor_make(f.bt, AK_DTYPE_I32, 2, (int64_t[]){3, f.max_pages});
        ak_tensor sl = ak_tensor_make(f.kv, AK_DTYPE_I32, 1, (int64_t[]){3});
        size_t wsb = 0;
        void *ws = NULL;
        if (k == 0) {
            ak_tensor q4 = ak_tensor_make(f.qb, AK_DTYPE_BF16, 4, (int64_t[]){3, 5, d.h_q, 576});
            ak_tensor o4 = ak_tensor_make(ref, AK_DTYPE_F32, 4, (int64_t[]){3, 5, d.h_q, 512});
            ak_mla_decode_args a;
            memset(&a, 0, sizeof a);
            a.q = &q4, a.cache = &f.main, a.softmax_scale = d.softmax_scale, a.block_table = &bt;
            ak_tensor l3 = ak_tensor_make(ref_lse, AK_DTYPE_F32, 3, (int64_t[]){3, 5, d.h_q});
            a.seq_lens = &sl, a.causal = 1, a.out = &o4, a.lse = &l3;
            CHECK_STATUS(ak_mla_decode_workspace_size(f.ctx, &a, &wsb), AK_OK);
            ws = malloc(wsb + 1);
            CHECK_STATUS(ak_mla_decode(f.ctx, &a, ws, wsb), AK_OK);
        } else {
            int32_t cu[4] = {0, 5, 10, 15};
            ak_tensor cut = ak_tensor_make(cu, AK_DTYPE_I32, 1, (int64_t[]){4});
            ak_tensor q3 = ak_tensor_make(f.qb, AK_DTYPE_BF16, 3, (int64_t[]){15, d.h_q, d.d_qk});
            ak_tensor o3 = ak_tensor_make(ref, AK_DTYPE_F32, 3, (int64_t[]){15, d.h_q, d.d_v});
            ak_mha_args a;
            memset(&a, 0, sizeof a);
            a.q = &q3, a.cu_seqlens_q = &cut, a.cache = &f.main, a.block_table = &bt,
            a.seq_lens = &sl;
            ak_tensor l2 = ak_tensor_make(ref_lse, AK_DTYPE_F32, 2, (int64_t[]){15, d.h_q});
            a.softmax_scale = d.softmax_scale, a.causal = 1, a.window_left = -1, a.out = &o3;
            a.lse = &l2;
            CHECK_STATUS(ak_mha_workspace_size(f.ctx, &a, &wsb), AK_OK);
            ws = malloc(wsb + 1);
            CHECK_STATUS(ak_mha(f.ctx, &a, ws, wsb), AK_OK);
        }
        if (got) fx_compare(k == 0 ? "mla dense" : "mha", &f, got, ref);
        free(ws), free(ref), free(got);
        fx_free(&f);
    }
}

/* DeepSeek V4 (C4, C128 and SWA-only layers): chunked runs equal unchunked ones, and the gathered
   flat sparse prefill and the per-pool paged prefills + merge equal prefill rows through the
   decode kernel. */
AK_TEST(plan_run_dsv4_layers) {
    const int32_t ratios[3] = {4, 128, 0};
    for (int i = 0; i < 3; i++) {
        ak_plan_desc d = desc_of(AK_ATTN_DSV4);
        d.h_q = 4, d.topk = 16, d.window = 16, d.index_heads = 4;
        d.compress_ratio = ratios[i];
        d.extra_page_size = ratios[i] ? 256 / ratios[i] : 0;
        if (!ratios[i]) d.extra_layout = AK_LAYOUT_INVALID;
        ak_phase ph[4] = {AK_PHASE_DECODE, AK_PHASE_EXTEND, AK_PHASE_TARGET_VERIFY,
                          AK_PHASE_PREFILL};
        int32_t q[4] = {1, 20, 3, 40}, kv[4] = {600, 300, 520, 40};
        fx f;
        fx_init(&f, d, 4, ph, q, kv);
        float *ref = fx_run(&f, "auto", "auto", 0);
        float *o = fx_run(&f, "auto", "auto", 16 * 1024);
        if (ref && o) fx_compare("dsv4 chunked", &f, o, ref);
        free(o);
        /* the gathered-workspace path (semantics.md 10.4-10.5), whole and chunked */
        o = fx_run(&f, "v4_gather_sparse_prefill", "auto", 0);
        if (ref && o) fx_compare("dsv4 gather", &f, o, ref);
        CHECK(o != NULL);
        free(o);
        o = fx_run(&f, "v4_gather_sparse_prefill", "auto", 96 * 1024);
        if (ref && o) fx_compare("dsv4 gather chunked", &f, o, ref);
        CHECK(o != NULL);
        free(o);
        /* one paged sparse prefill per pool, merged with the sink applied once */
        o = fx_run(&f, "sparse_prefill_paged", "auto", 0);
        if (ref && o) fx_compare("dsv4 paged + merge", &f, o, ref);
        CHECK(o != NULL);
        free(o);
        o = fx_run(&f, "sparse_prefill_paged", "auto", 40 * 1024);
        if (ref && o) fx_compare("dsv4 paged + merge chunked", &f, o, ref);
        CHECK(o != NULL);
        free(o), free(ref);
        fx_free(&f);
    }
}

/* auto follows the cost model with the device's constants: on a memory-bound device, gathering
   once pays off when rows * topk selections dwarf the context (long extend), and reading the cache
   directly wins when few rows select from a long context. */
AK_TEST(plan_auto_follows_cost_model) {
    ak_context *ctx = cpu_ctx();
    ak_device_info dev;
    memset(&dev, 0, sizeof dev);
    dev.backend = AK_BACKEND_CPU;
    dev.copy_bytes_per_s = 1e12;
    dev.bf16_flops_per_s = 1e16;
    struct {
        int32_t q, kv;
        const char *want;
    } cases[] = {{8000, 10000, "gather_sparse_prefill"}, {16, 65536, "sparse_prefill_paged"}};
    for (int i = 0; i < 2; i++) {
        ak_plan_desc d = desc_of(AK_ATTN_DSA);
        ak_phase ph = AK_PHASE_EXTEND;
        d.num_requests = 1, d.phases = &ph, d.q_lens = &cases[i].q, d.kv_lens = &cases[i].kv;
        d.device = &dev;
        ak_plan *p = NULL;
        CHECK_STATUS(ak_plan_create(ctx, &d, &p), AK_OK);
        int found = 0;
        for (int32_t s = 0; p != NULL && s < ak_plan_step_count(p); s++) {
            ak_plan_step st;
            ak_plan_step_get(p, s, &st);
            if (st.kind == AK_STEP_SPARSE_PREFILL) found = strcmp(st.kernel, cases[i].want) == 0;
        }
        CHECK_MSG(found, "q %d kv %d: expected %s\n%s", (int)cases[i].q, (int)cases[i].kv,
                  cases[i].want, ak_plan_explain(p));
        ak_plan_destroy(p);
    }
    ak_context_destroy(ctx);
}

/* Every (kind, layout, preference pair) on a batch with every phase: each plan either runs and
   equals the auto plan of the same cache, or is rejected at plan time (checked in fx_run). */
AK_TEST(plan_run_every_layout_and_preference) {
    const char *prefs[] = {"auto",
                           "mla_decode_dense",
                           "mla_decode_sparse",
                           "sparse_prefill_paged",
                           "gather_sparse_prefill",
                           "v4_gather_sparse_prefill",
                           "mha_paged"};
    const struct {
        ak_attn_kind kind;
        ak_layout layout;
    } cases[] = {{AK_ATTN_MLA, AK_LAYOUT_MLA_BF16},
                 {AK_ATTN_MLA, AK_LAYOUT_MLA_FP8_PERTENSOR},
                 {AK_ATTN_MLA, AK_LAYOUT_DSA_FP8_BLOCKSCALE},
                 {AK_ATTN_DSA, AK_LAYOUT_MLA_BF16},
                 {AK_ATTN_DSA, AK_LAYOUT_MLA_FP8_PERTENSOR},
                 {AK_ATTN_DSA, AK_LAYOUT_DSA_FP8_BLOCKSCALE},
                 {AK_ATTN_DSV4, AK_LAYOUT_DSV4_FP8_UE8M0},
                 {AK_ATTN_MHA, AK_LAYOUT_MHA_NHD},
                 {AK_ATTN_MHA, AK_LAYOUT_MHA_HND}};
    ak_phase ph[5] = {AK_PHASE_DECODE, AK_PHASE_TARGET_VERIFY, AK_PHASE_EXTEND, AK_PHASE_PREFILL,
                      AK_PHASE_DRAFT_EXTEND};
    int32_t q[5] = {1, 3, 20, 30, 2}, kv[5] = {300, 200, 250, 30, 50};
    int ran = 0, rejected = 0;
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        ak_plan_desc d = desc_of(cases[c].kind);
        d.layout = cases[c].layout;
        if (d.kind != AK_ATTN_MHA) d.h_q = 4;
        if (d.kind == AK_ATTN_DSA) d.topk = 64, d.index_heads = 4;
        if (d.kind == AK_ATTN_DSV4) d.topk = 16, d.window = 16, d.index_heads = 4;
        fx f;
        fx_init(&f, d, 5, ph, q, kv);
        float *ref = fx_run(&f, "auto", "auto", 0);
        CHECK_MSG(ref != NULL, "auto rejected for kind %d layout %d", (int)d.kind, (int)d.layout);
        for (size_t a = 0; a < sizeof prefs / sizeof prefs[0] && ref; a++)
            for (size_t b = 0; b < sizeof prefs / sizeof prefs[0]; b++) {
                float *o = fx_run(&f, prefs[a], prefs[b], 0);
                if (o == NULL) {
                    rejected++;
                    continue;
                }
                ran++;
                char what[96];
                snprintf(what, sizeof what, "kind %d layout %d prefill %s decode %s", (int)d.kind,
                         (int)d.layout, prefs[a], prefs[b]);
                fx_compare(what, &f, o, ref);
                free(o);
            }
        free(ref);
        fx_free(&f);
    }
    CHECK(ran > 9 && rejected > 0);
}

/* Empty batches and empty (padded) requests plan and run; they produce no rows and cost nothing. */
AK_TEST(plan_run_empty_requests) {
    ak_plan_desc d = desc_of(AK_ATTN_DSA);
    d.h_q = 4, d.topk = 64, d.index_heads = 4;
    ak_phase ph[3] = {AK_PHASE_DECODE, AK_PHASE_EXTEND, AK_PHASE_DECODE};
    int32_t q[3] = {0, 0, 1}, kv[3] = {0, 100, 200};
    fx f;
    fx_init(&f, d, 3, ph, q, kv);
    float *o = fx_run(&f, "auto", "auto", 0);
    CHECK(o != NULL);
    free(o);
    fx_free(&f);
    fx_init(&f, d, 0, ph, q, kv);
    o = fx_run(&f, "auto", "auto", 0);
    CHECK(o != NULL);
    free(o);
    fx_free(&f);
}
