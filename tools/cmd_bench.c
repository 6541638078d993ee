/* cmd_bench.c -- `attnkit bench`: times every registered op case on a backend and reports time,
   TFLOPS, GB/s and ratios to the copy and GEMM ceilings measured in the same run. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "attnkit.h"
#include "bench_internal.h"
#include "cli.h"
#include "json.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: attnkit bench [--backend auto|cpu|cuda] [--op NAMES] [--model M] [--threads N]\n"
            "                     [--quick] [--seed S] [--cool MS] [--json]\n\n"
            "Times each op case: median of >= 30 calls after warm-up (CPU: wall clock; CUDA: events\n"
            "around one call, decode-path ops by replaying a CUDA graph of 20 calls), on random data\n"
            "larger than L2. Reports us, TFLOPS, GB/s (KV bytes and total bytes) and %% of the copy\n"
            "bandwidth and GEMM rate measured at start-up in the same run; on CUDA also the SM clock\n"
            "measured right after each sample (median), which a card above its power limit lowers\n"
            "(the header gives the limit where NVML is present).\n"
            "  --op NAMES   comma list of op names (default: all)\n"
            "  --model M    dsv3, dsv32, dsv4-flash, dsv4-pro, llama3-8b (default: each family's shapes)\n"
            "  --quick      smaller shapes and fewer samples (smoke runs)\n"
            "  --cool MS    CUDA: the GPU idles MS ms before each case (default 300, as the\n"
            "               anchors' harness: targets.md 6.2); 0 runs the cases back to back\n"
            "  --json       one JSON document on stdout instead of the table\n"
            "Environment: AK_BENCH_FILTER=a,b times only the cases whose shape contains a or b;\n"
            "AK_BENCH_SHARED_CTX=1 puts every V3.2 sparse decode request's keys in one shared 32k\n"
            "context (records L2-resident: a proxy for more bandwidth per SM, marked 'shared');\n"
            "AK_BENCH_COLD=1 gives each of the graph's 20 calls its own V3.2 index set (and\n"
            "up to b 16 its own contexts), so the records come from DRAM as in a server\n"
            "(marked 'cold');\n"
            "AK_BENCH_ROW_GROUPS=g gives V3.2 request r request r %% g's index rows, so that\n"
            "b / g CTAs read each record at once, as a many-head call's head tiles do (marked\n"
            "'rows/g');\n"
            "AK_BENCH_INVALID=n sets the last n%% of every V3.2 sparse decode index row to -1 (an\n"
            "engine's padding of short requests with no topk_length; marked 'invalid n%%');\n"
            "AK_BENCH_RAGGED=1 passes a V3.2 topk_length per request, uniform in 1..top-k (marked\n"
            "'ragged'; 2 and 3: the same lengths falling or rising with the request index; 4: every\n"
            "length top-k, 'lengths full'; 5: every tenth request top-k, the rest 1..top-k / 8,\n"
            "'ragged skewed'); AK_BENCH_BALANCE=1 balances every sparse decode call by its lengths\n"
            "(AK_BALANCE_MAKE, 'balanced'), 2 makes the schedule in the first call and reuses it in\n"
            "the timed ones (AK_BALANCE_REUSE, as a step's later layers: 'balanced reused');\n"
            "AK_BENCH_SINK=1 gives the V4 sparse decode calls an attention sink per head ('sink');\n"
            "AK_BENCH_SHAPES=BxSxH,... times sparse decode (656, V4 and per-tensor fp8) at these (b,\n"
            "s_q, h_q) instead of its lists.\n");
}

int ak_cmd_bench(int argc, char **argv) {
    if (ak_cli_has_flag(argc, argv, "--help")) {
        usage(stdout);
        return 0;
    }
    ak_bench_opts o;
    memset(&o, 0, sizeof o);
    const char *backend = ak_cli_option(argc, argv, "--backend");
    const char *op = ak_cli_option(argc, argv, "--op");
    const char *model = ak_cli_option(argc, argv, "--model");
    const char *threads = ak_cli_option(argc, argv, "--threads");
    const char *seed = ak_cli_option(argc, argv, "--seed");
    const char *cool = ak_cli_option(argc, argv, "--cool");
    int json = ak_cli_has_flag(argc, argv, "--json");
    o.quick = ak_cli_has_flag(argc, argv, "--quick");
    o.seed = seed ? strtoull(seed, NULL, 0) : 20261122ull;
    o.threads = threads ? atoi(threads) : 0;
    if (backend == NULL || strcmp(backend, "auto") == 0) o.backend = AK_BACKEND_AUTO;
    else if (strcmp(backend, "cpu") == 0) o.backend = AK_BACKEND_CPU;
    else if (strcmp(backend, "cuda") == 0) o.backend = AK_BACKEND_CUDA;
    else {
        fprintf(stderr, "attnkit bench: --backend %s: expected auto, cpu or cuda\n", backend);
        return 2;
    }
    if (model != NULL && (o.model = ak_model_find(model)) == NULL) {
        fprintf(stderr, "attnkit bench: --model %s: expected dsv3, dsv32, dsv4-flash, dsv4-pro or llama3-8b\n", model);
        return 2;
    }
    char *cool_end = NULL;
    const long cool_ms = cool ? strtol(cool, &cool_end, 10) : 300;
    if (cool && (cool_end == cool || *cool_end != '\0' || cool_ms < 0 || cool_ms > 60000)) {
        fprintf(stderr, "attnkit bench: --cool %s: expected 0..60000 ms\n", cool);
        return 2;
    }
    if (o.threads < 0) {
        fprintf(stderr, "attnkit bench: --threads %d: expected >= 0\n", (int)o.threads);
        return 2;
    }
    ak_context_options co = {o.backend, o.threads, 0, NULL};
    ak_context *ctx = NULL;
    if (ak_context_create(&co, &ctx) != AK_OK) {
        fprintf(stderr, "attnkit bench: %s\n", ak_last_error());
        return 1;
    }
    int cuda = ak_context_backend(ctx) == AK_BACKEND_CUDA;
    void *stream = NULL; /* the bench stream (CUDA) */
    (void)stream;
    double copy = 0, gemm = 0, gemm_mhz = 0;
    ak_status st = AK_OK;
    char extra[320] = "";
    double plimit = -1; /* W, < 0: unknown */
#ifdef AK_HAVE_CUDA
    if (cuda) {
        st = ak_bench_cuda_setup(ctx, &stream);
        if (st == AK_OK) st = ak_bench_cuda_ceilings(ctx, o.quick, &copy, &gemm, &gemm_mhz);
        ak_bench_cuda_describe(ctx, extra, sizeof extra, &plimit);
        const size_t used = strlen(extra);
        snprintf(extra + used, sizeof extra - used, ", %ld ms idle before each case", cool_ms);
    } else
#endif
        st = ak_bench_cpu_ceilings(ctx, o.quick, &copy, &gemm);
    if (st != AK_OK) {
        fprintf(stderr, "attnkit bench: measuring ceilings: %s\n", ak_last_error());
        ak_context_destroy(ctx);
        return 1;
    }
    ak_context_set_ceilings(ctx, copy, gemm);
    ak_device_info info;
    ak_context_device_info(ctx, &info);
    const char *gemm_kind = cuda ? "bf16 GEMM 8192^3 (cuBLAS)" : "f32 GEMM 512^3 (8-lane vectors)";
    ak_json j;
    if (json) {
        ak_json_init(&j, stdout);
        ak_json_object_begin(&j, NULL);
        ak_json_str(&j, "attnkit", ak_version_string());
        ak_json_str(&j, "device", info.name);
        ak_json_str(&j, "device_detail", extra);
        ak_json_str(&j, "backend", cuda ? "cuda" : "cpu");
        ak_json_int(&j, "threads", ak_context_num_threads(ctx));
        ak_json_num(&j, "copy_GBps", copy * 1e-9);
        ak_json_num(&j, "gemm_TFLOPS", gemm * 1e-12);
        ak_json_str(&j, "gemm_kind", gemm_kind);
        if (cuda) ak_json_num(&j, "gemm_sm_MHz", gemm_mhz);
        if (plimit >= 0) ak_json_num(&j, "power_limit_W", plimit);
        if (cuda) ak_json_int(&j, "cool_ms", (int64_t)cool_ms);
        ak_json_array_begin(&j, "cases");
    } else {
        printf("attnkit %s bench on %s (%s)%s%s\n", ak_version_string(), info.name,
               cuda ? "cuda" : "cpu", extra[0] ? "; " : "", extra);
        printf("ceilings measured in this run: copy %.1f GB/s (read + write), %s %.2f %s", copy * 1e-9,
               gemm_kind, cuda ? gemm * 1e-12 : gemm * 1e-9, cuda ? "TFLOPS" : "GFLOPS");
        if (cuda) printf(" at SM %.0f MHz", gemm_mhz);
        printf("\n");
        printf("timing: %s; median of samples\n\n",
               cuda ? "CUDA events per call (queued behind a 100 us hold kernel: GPU time, not host enqueue); decode ops (*) by graph replay of 20 calls; SM MHz: median SM clock right after each sample (a card held above its power limit runs slower)"
                    : "wall clock per call");
        printf("%-20s %-58s %10s %7s %9s %9s %9s %7s %7s%s\n", "op", "shape", "us", "rsd%",
               "TFLOPS", "GB/s kv", "GB/s tot", "%copy", "%gemm", cuda ? "  SM MHz" : "");
    }
    int failures = 0, cases = 0;
    for (int32_t f = 0; f < ak_bench_family_count(); f++) {
        const char *fam;
        ak_bench_builder b = ak_bench_family(f, &fam);
        ak_bench_list *list = ak_bench_list_create();
        if (list == NULL || b(ctx, &o, op, list) != AK_OK) {
            fprintf(stderr, "attnkit bench: %s: building cases failed: %s\n", fam, ak_last_error());
            failures++;
        }
        for (int32_t i = 0; list != NULL && i < ak_bench_list_size(list); i++) {
            ak_bench_case *c = ak_bench_list_at(list, i);
            if (ak_bench_skip(c->shape)) continue;
            double med = 0, mn = 0, rsd = 0, mhz = 0;
            int32_t n = 0;
            if (isatty(2)) fprintf(stderr, "\r%-20s %-58.58s ...", c->op, c->shape);
#ifdef AK_HAVE_CUDA
            if (cuda) {
                ak_bench_cuda_result r;
                st = ak_bench_cuda_time(ctx, c, o.quick, (int32_t)cool_ms, &r);
                med = r.median_s, mn = r.min_s, rsd = r.rsd, n = r.samples, mhz = r.sm_mhz;
            } else
#endif
                st = ak_bench_cpu_time(ctx, c, o.quick ? 1.0 : 5.0, &med, &mn, &rsd, &n);
            if (isatty(2)) fprintf(stderr, "\r%90s\r", "");
            cases++;
            double tf = med > 0 ? c->flops / med : 0, kv = med > 0 ? c->bytes_kv / med : 0,
                   tot = med > 0 ? c->bytes_total / med : 0;
            if (json) {
                ak_json_object_begin(&j, NULL);
                ak_json_str(&j, "op", c->op);
                ak_json_str(&j, "shape", c->shape);
                ak_json_str(&j, "status", ak_status_name(st));
                if (st == AK_OK) {
                    ak_json_num(&j, "us", med * 1e6);
                    ak_json_num(&j, "min_us", mn * 1e6);
                    ak_json_num(&j, "rsd", rsd);
                    ak_json_int(&j, "samples", n);
                    ak_json_bool(&j, "graph", cuda && c->graph);
                    ak_json_num(&j, "TFLOPS", tf * 1e-12);
                    ak_json_num(&j, "GBps_kv", kv * 1e-9);
                    ak_json_num(&j, "GBps_total", tot * 1e-9);
                    ak_json_num(&j, "frac_copy", tot / copy);
                    ak_json_num(&j, "frac_gemm", tf / gemm);
                    if (cuda) ak_json_num(&j, "sm_MHz", mhz);
                } else {
                    ak_json_str(&j, "error", ak_last_error());
                }
                ak_json_object_end(&j);
            } else if (st == AK_OK) {
                printf("%-20s %-58s %9.1f%s %6.1f%% %9.3f %9.1f %9.1f %6.1f%% %6.1f%%", c->op,
                       c->shape, med * 1e6, cuda && c->graph ? "*" : " ", 100 * rsd, tf * 1e-12,
                       kv * 1e-9, tot * 1e-9, 100 * tot / copy, 100 * tf / gemm);
                if (cuda) printf(" %8.0f", mhz);
                printf("\n");
            } else {
                printf("%-20s %-58s FAILED: %s\n", c->op, c->shape, ak_last_error());
            }
            if (st != AK_OK) failures++;
            fflush(stdout);
            if (c->destroy) c->destroy(ctx, c->state);
        }
        ak_bench_list_destroy(list);
    }
    if (json) {
        ak_json_array_end(&j);
        ak_json_object_end(&j);
        ak_json_finish(&j);
    } else if (cases == 0) {
        printf("(no case matched --op %s)\n", op ? op : "");
    }
#ifdef AK_HAVE_CUDA
    if (stream != NULL) ak_bench_cuda_teardown(ctx, stream);
#endif
    ak_context_destroy(ctx);
    return failures ? 1 : 0;
}
