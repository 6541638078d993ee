/* cmd_plan.c -- `attnkit plan`: plans one batch for a model preset and prints the explained plan
   (or --json), or the rejection with a non-zero exit. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attnkit.h"
#include "cli.h"
#include "json.h"
#include "models.h"

/* Built-in H100 SXM figures for planning a CUDA batch on a machine without a GPU: HBM3 copy rate
   and dense bf16 tensor-core rate (data-sheet values; `attnkit bench` measures the real ones). */
static void h100_estimate(ak_device_info *d) {
    memset(d, 0, sizeof *d);
    d->backend = AK_BACKEND_CUDA;
    snprintf(d->name, sizeof d->name, "NVIDIA H100 (built-in estimate, no device)");
    d->sm_count = 132;
    d->cc_major = 9;
    d->smem_per_block_optin = 232448;
    d->l2_bytes = 50 << 20;
    d->global_mem_bytes = (int64_t)80 << 30;
    d->copy_bytes_per_s = 3.0e12;
    d->bf16_flops_per_s = 9.0e14;
}

void ak_cli_plan_desc(const ak_model *m, ak_plan_desc *d) {
    memset(d, 0, sizeof *d);
    d->kind = m->kind == AK_MODEL_MLA_DENSE ? AK_ATTN_MLA
              : m->kind == AK_MODEL_DSA     ? AK_ATTN_DSA
              : m->kind == AK_MODEL_DSV4    ? AK_ATTN_DSV4
                                            : AK_ATTN_MHA;
    d->h_q = m->h_q;
    d->h_kv = m->h_kv;
    d->d_qk = m->d_qk;
    d->d_v = m->d_v;
    d->topk = m->topk;
    d->window = m->window;
    d->compress_ratio = m->compress_ratio;
    d->index_heads = m->index_heads;
    d->has_sink = m->kind == AK_MODEL_DSV4;
    d->softmax_scale = m->softmax_scale;
    d->layout = m->layout;
    d->page_size = m->page_size;
    d->extra_layout = m->extra_layout;
    d->extra_page_size = m->extra_page_size;
}

/* Parses "a,b,c" into at most cap int32 values; returns the count or -1. */
int ak_cli_int_list(const char *s, int32_t *out, int cap) {
    int n = 0;
    while (s != NULL && *s) {
        char *end;
        errno = 0;
        long v = strtol(s, &end, 10);
        if (end == s || errno != 0 || v < -2147483647L || v > 2147483647L || n == cap) return -1;
        out[n++] = (int32_t)v;
        if (*end == ',')
            end++;
        else if (*end != '\0')
            return -1;
        s = end;
    }
    return n;
}

static int phase_list(const char *s, ak_phase *out, int cap) {
    int n = 0;
    char buf[64];
    while (s != NULL && *s) {
        size_t l = strcspn(s, ",");
        if (l >= sizeof buf || n == cap) return -1;
        memcpy(buf, s, l);
        buf[l] = '\0';
        ak_phase p = ak_phase_from_name(buf);
        if (p == AK_PHASE_COUNT_) return -1;
        out[n++] = p;
        s += l;
        if (*s == ',') s++;
    }
    return n;
}

static void usage(FILE *f) {
    fprintf(
        f,
        "usage: attnkit plan --model M [--layout L] --phase P[,P...] --q-lens N[,N...]\n"
        "                    [--kv-lens N[,N...]] [--prefill auto|KERNEL] [--decode auto|KERNEL]\n"
        "                    [--backend cpu|cuda] [--budget BYTES] [--ratio 0|4|128] [--json]\n\n"
        "Plans one batch of one attention layer of model M (dsv3, dsv32, dsv4-flash, dsv4-pro,\n"
        "llama3-8b) and prints the steps, the kernels, the cost model's candidates and why.\n"
        "One phase applies to every request, or give one per request: prefill, extend, decode,\n"
        "target-verify, draft-extend. kv lengths default to the q lengths. A rejected request\n"
        "prints the reason and exits 1.\n");
}

#define MAX_REQ 4096

int ak_cmd_plan(int argc, char **argv) {
    if (ak_cli_has_flag(argc, argv, "--help")) {
        usage(stdout);
        return 0;
    }
    int json = ak_cli_has_flag(argc, argv, "--json");
    const char *mname = ak_cli_option(argc, argv, "--model");
    const ak_model *m = ak_model_find(mname ? mname : "dsv32");
    if (m == NULL) {
        fprintf(stderr,
                "attnkit plan: unknown model '%s' (dsv3, dsv32, dsv4-flash, dsv4-pro, "
                "llama3-8b)\n",
                mname);
        return 2;
    }
    ak_plan_desc d;
    ak_cli_plan_desc(m, &d);
    const char *lname = ak_cli_option(argc, argv, "--layout");
    if (lname != NULL) {
        d.layout = ak_layout_from_name(lname);
        if (d.layout == AK_LAYOUT_INVALID) {
            fprintf(stderr, "attnkit plan: unknown layout '%s' (see `attnkit layouts`)\n", lname);
            return 2;
        }
    }
    const char *ratio = ak_cli_option(argc, argv, "--ratio");
    if (ratio != NULL) {
        d.compress_ratio = atoi(ratio);
        if (d.compress_ratio == 0)
            d.extra_layout = AK_LAYOUT_INVALID;
        else
            d.extra_page_size = d.page_size / d.compress_ratio;
    }
    static int32_t q[MAX_REQ], kv[MAX_REQ];
    static ak_phase ph[MAX_REQ];
    int nq = ak_cli_int_list(ak_cli_option(argc, argv, "--q-lens"), q, MAX_REQ);
    const char *kvs = ak_cli_option(argc, argv, "--kv-lens");
    int nkv = kvs ? ak_cli_int_list(kvs, kv, MAX_REQ) : nq;
    if (kvs == NULL && nq > 0) memcpy(kv, q, (size_t)nq * sizeof *q);
    int np = phase_list(ak_cli_option(argc, argv, "--phase"), ph, MAX_REQ);
    if (nq < 1 || nkv != nq || np < 1 || (np != 1 && np != nq)) {
        fprintf(stderr,
                "attnkit plan: need --phase (one, or one per request), --q-lens and "
                "--kv-lens of the same length (<= %d requests)\n\n",
                MAX_REQ);
        usage(stderr);
        return 2;
    }
    for (int i = np; i < nq; i++)
        ph[i] = ph[0];
    d.num_requests = nq;
    d.phases = ph;
    d.q_lens = q;
    d.kv_lens = kv;
    d.prefill_kernel = ak_cli_option(argc, argv, "--prefill");
    d.decode_kernel = ak_cli_option(argc, argv, "--decode");
    const char *budget = ak_cli_option(argc, argv, "--budget");
    if (budget != NULL) d.workspace_budget = strtoll(budget, NULL, 10);

    const char *bname = ak_cli_option(argc, argv, "--backend");
    ak_context_options o;
    memset(&o, 0, sizeof o);
    o.backend = AK_BACKEND_CPU;
    ak_device_info est;
    if (bname != NULL && strcmp(bname, "cuda") == 0) {
        o.backend = AK_BACKEND_CUDA;
        d.target = AK_BACKEND_CUDA;
    } else if (bname != NULL && strcmp(bname, "cpu") != 0 && strcmp(bname, "auto") != 0) {
        fprintf(stderr, "attnkit plan: --backend %s, expected auto, cpu or cuda\n", bname);
        return 2;
    }
    ak_context *ctx = NULL;
    if (ak_context_create(&o, &ctx) != AK_OK) {
        /* Plan for CUDA from a machine without one: the CPU context hosts the planner. */
        o.backend = AK_BACKEND_CPU;
        if (ak_context_create(&o, &ctx) != AK_OK) {
            fprintf(stderr, "attnkit plan: %s\n", ak_last_error());
            return 1;
        }
        h100_estimate(&est);
        d.device = &est;
    }
    ak_plan *plan = NULL;
    ak_status s = ak_plan_create(ctx, &d, &plan);
    int rc = 0;
    if (json) {
        ak_json j;
        ak_json_init(&j, stdout);
        ak_json_object_begin(&j, NULL);
        ak_json_str(&j, "model", m->name);
        ak_layout_traits lt;
        ak_json_str(&j, "layout", ak_layout_traits_get(d.layout, &lt) == AK_OK ? lt.name : NULL);
        ak_json_bool(&j, "ok", s == AK_OK);
        if (s != AK_OK) {
            ak_json_str(&j, "status", ak_status_name(s));
            ak_json_str(&j, "error", ak_last_error());
        } else {
            ak_json_array_begin(&j, "steps");
            for (int32_t i = 0; i < ak_plan_step_count(plan); i++) {
                ak_plan_step st;
                ak_plan_step_get(plan, i, &st);
                ak_json_object_begin(&j, NULL);
                ak_json_str(&j, "kernel", st.kernel);
                ak_json_str(&j, "op", st.op);
                ak_json_int(&j, "req_begin", st.req_begin);
                ak_json_int(&j, "req_end", st.req_end);
                ak_json_int(&j, "rows", st.rows);
                ak_json_int(&j, "chunk_rows", st.chunk_rows);
                ak_json_str(&j, "transform",
                            st.transform == AK_TRANSFORM_PAGED    ? "PAGED"
                            : st.transform == AK_TRANSFORM_RAGGED ? "RAGGED"
                                                                  : "NONE");
                ak_layout_traits t;
                ak_json_str(&j, "reads",
                            ak_layout_traits_get(st.reads, &t) == AK_OK ? t.name : NULL);
                ak_json_int(&j, "workspace_bytes", st.workspace_bytes);
                ak_json_num(&j, "est_seconds", st.est_seconds);
                ak_json_str(&j, "reason", st.reason);
                ak_json_object_end(&j);
            }
            ak_json_array_end(&j);
            size_t ws = 0;
            if (ak_plan_workspace_size(plan, &ws) == AK_OK)
                ak_json_int(&j, "workspace_bytes", (int64_t)ws);
            ak_json_str(&j, "explain", ak_plan_explain(plan));
        }
        ak_json_object_end(&j);
        ak_json_finish(&j);
    } else if (s == AK_OK) {
        fputs(ak_plan_explain(plan), stdout);
    }
    if (s != AK_OK) {
        if (!json)
            fprintf(stderr, "attnkit plan: rejected: %s: %s\n", ak_status_name(s), ak_last_error());
        rc = 1;
    }
    ak_plan_destroy(plan);
    ak_context_destroy(ctx);
    return rc;
}
