#!/usr/bin/env bash
# gpu_test.sh -- builds attnkit with the CUDA backend and runs every GPU check: the GPU unit tests
# (ctest -L gpu), `attnkit check --backend cuda` (CUDA against the CPU backend for every op),
# compute-sanitizer memcheck and racecheck on a reduced shape set, and a short benchmark of the
# foundation ops. Prints one summary table (step, result, seconds) and exits 1 if any step failed.
# Without a GPU every GPU step reports SKIP and the script exits 0.
#
# Environment: BUILD (default build-gpu), JOBS (default: all cores), STEP_TIMEOUT (seconds per
# step, default 900), DEADLINE (seconds for the whole script, 0 = none: a step that would start
# past it is SKIP and each step's timeout is cut to the time left, so the table always prints),
# AK_GPU_TEST_BENCH=0 skips the benchmark step, AK_GPU_TEST_SANITIZE=0 skips the sanitizer steps,
# BENCH_OPS (the --op list of the benchmark step), CHECK_OPS (--op of the check steps; all),
# BUILD_TARGETS (space-separated targets to build; all).
set -u
cd "$(dirname "$0")/.."

BUILD=${BUILD:-build-gpu}
JOBS=${JOBS:-$(nproc 2>/dev/null || echo 2)}
STEP_TIMEOUT=${STEP_TIMEOUT:-900}
DEADLINE=${DEADLINE:-0}
CHECK_OPS=${CHECK_OPS:-}
T_START=$(date +%s)
BENCH_OPS=${BENCH_OPS:-write,gather,convert,block_table,csr,transform_paged,transform_ragged,swa_indices,combine_indices,merge}

names=()
results=()
secs=()
failed=0

record() { # name result seconds
    names+=("$1")
    results+=("$2")
    secs+=("$3")
    if [ "$2" = FAIL ]; then failed=1; fi
}

# run_step NAME CMD...: PASS on exit 0, SKIP on 77, FAIL otherwise (a timeout is a FAIL).
run_step() {
    local name=$1
    shift
    local limit=$STEP_TIMEOUT
    if [ "$DEADLINE" -gt 0 ]; then
        local left=$((DEADLINE - ($(date +%s) - T_START)))
        if [ $left -lt 5 ]; then
            echo "==== $name: skipped, the ${DEADLINE}s deadline has passed"
            record "$name" SKIP 0.0
            return
        fi
        [ $left -lt "$limit" ] && limit=$left
    fi
    echo
    echo "==== $name: $(printf '%s ' "$@" | tr -s ' \n' ' ' | cut -c1-160)"
    local t0 t1 rc
    t0=$(date +%s.%N)
    timeout "$limit" "$@"
    rc=$?
    t1=$(date +%s.%N)
    local dt
    dt=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }')
    if [ $rc -eq 0 ]; then
        record "$name" PASS "$dt"
    elif [ $rc -eq 77 ]; then
        record "$name" SKIP "$dt"
    else
        [ $rc -eq 124 ] && echo "==== $name: timed out after ${limit}s"
        echo "==== $name: exit status $rc"
        record "$name" FAIL "$dt"
    fi
}

summary() {
    echo
    echo "==== gpu-test summary ($(date -u +%Y-%m-%dT%H:%M:%SZ), ${GPU_NAME:-no GPU})"
    printf '%-34s %-6s %9s\n' step result seconds
    local i
    for i in "${!names[@]}"; do
        printf '%-34s %-6s %9s\n' "${names[$i]}" "${results[$i]}" "${secs[$i]}"
    done
    if [ $failed -ne 0 ]; then echo "gpu-test: FAILED"; else echo "gpu-test: OK"; fi
}

GPU_STEPS=(configure build "ctest -L gpu" "attnkit check --backend cuda" "bench (cuda)"
           "memcheck gpu tests (quick)" "racecheck gpu tests (quick)"
           "memcheck attnkit check --quick" "racecheck attnkit check --quick")

GPU_NAME=""
if command -v nvidia-smi >/dev/null 2>&1; then
    GPU_NAME=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n 1)
fi
HAVE_NVCC=0
if command -v nvcc >/dev/null 2>&1 || [ -x /usr/local/cuda/bin/nvcc ]; then HAVE_NVCC=1; fi
if [ -z "$GPU_NAME" ] || [ $HAVE_NVCC -eq 0 ]; then
    echo "gpu-test: no GPU or no CUDA toolkit on this machine; every GPU step is skipped"
    for s in "${GPU_STEPS[@]}"; do record "$s" SKIP 0.0; done
    summary
    exit 0
fi
export PATH="$PATH:/usr/local/cuda/bin"

run_step configure cmake -S . -B "$BUILD" -DAK_REQUIRE_CUDA=ON -DCMAKE_BUILD_TYPE=Release
if [ "${results[0]}" != PASS ]; then
    for s in "${GPU_STEPS[@]:1}"; do record "$s" SKIP 0.0; done
    summary
    exit 1
fi
TARGET_ARG=()
[ -n "${BUILD_TARGETS:-}" ] && TARGET_ARG=(--target $BUILD_TARGETS)
run_step build cmake --build "$BUILD" -j "$JOBS" ${TARGET_ARG[@]+"${TARGET_ARG[@]}"}
if [ "${results[1]}" != PASS ]; then
    for s in "${GPU_STEPS[@]:2}"; do record "$s" SKIP 0.0; done
    summary
    exit 1
fi

# SKIP (not PASS) when every GPU test skipped itself: on a GPU machine that needs a look
export BUILD
CTEST_RUN='out=$(mktemp)
    ctest --test-dir "$BUILD" -L gpu --output-on-failure 2>&1 | tee "$out"
    r=${PIPESTATUS[0]}
    if [ $r -eq 0 ] && ! grep -q " Passed " "$out"; then r=77; fi
    rm -f "$out"
    exit $r'
run_step "ctest -L gpu" bash -c "$CTEST_RUN"
OPS_ARG=()
[ -n "$CHECK_OPS" ] && OPS_ARG=(--op "$CHECK_OPS")
run_step "attnkit check --backend cuda" "./$BUILD/attnkit" check --backend cuda ${OPS_ARG[@]+"${OPS_ARG[@]}"}

if [ "${AK_GPU_TEST_BENCH:-1}" != 0 ]; then
    run_step "bench (cuda)" "./$BUILD/attnkit" bench --backend cuda --op "$BENCH_OPS"
else
    record "bench (cuda)" SKIP 0.0
fi

SAN=$(command -v compute-sanitizer 2>/dev/null || echo /usr/local/cuda/bin/compute-sanitizer)
if [ "${AK_GPU_TEST_SANITIZE:-1}" = 0 ] || [ ! -x "$SAN" ]; then
    for s in "${GPU_STEPS[@]:5}"; do record "$s" SKIP 0.0; done
else
    # san TOOL CMD...: the command under compute-sanitizer; exit 77 (SKIP) when the sanitizer
    # cannot attach to this device (it refuses GPUs under some sandboxed runtimes), 1 on a report.
    export SAN
    SAN_RUN='tool=$1; shift
        out=$(mktemp)
        AK_TEST_QUICK=1 "$SAN" --tool "$tool" --error-exitcode 99 "$@" 2>&1 | tee "$out"
        r=${PIPESTATUS[0]}
        if [ $r -ne 0 ] && grep -q -i "device not supported" "$out"; then r=77; fi
        rm -f "$out"
        if [ $r -eq 77 ]; then exit 77; fi
        exit $r'
    # every GPU test binary on the reduced shape set (AK_TEST_QUICK=1); a skipped binary passes
    export BUILD SAN_RUN
    SAN_TESTS='rc=0; any=0
        for t in "$BUILD"/tests/gpu_test_*; do
            [ -x "$t" ] || continue
            echo "-- $0: $t"
            bash -c "$SAN_RUN" san "$0" "$t"
            r=$?
            if [ $r -eq 77 ]; then continue; fi
            any=1
            if [ $r -ne 0 ]; then rc=1; fi
        done
        if [ $any -eq 0 ]; then exit 77; fi
        exit $rc'
    run_step "memcheck gpu tests (quick)" bash -c "$SAN_TESTS" memcheck
    run_step "racecheck gpu tests (quick)" bash -c "$SAN_TESTS" racecheck
    run_step "memcheck attnkit check --quick" bash -c "$SAN_RUN" san memcheck \
        "./$BUILD/attnkit" check --backend cuda --quick ${OPS_ARG[@]+"${OPS_ARG[@]}"}
    run_step "racecheck attnkit check --quick" bash -c "$SAN_RUN" san racecheck \
        "./$BUILD/attnkit" check --backend cuda --quick ${OPS_ARG[@]+"${OPS_ARG[@]}"}
fi

summary
exit $failed
