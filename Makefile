# attnkit: `make run` builds and runs the main job; `make test` builds and runs every test.
BUILD ?= build
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
CMAKE_FLAGS ?=

.PHONY: all build run test test-sanitize gpu-test bench install clean

all: build

$(BUILD)/CMakeCache.txt:
	cmake -S . -B $(BUILD) $(CMAKE_FLAGS)

build: $(BUILD)/CMakeCache.txt
	cmake --build $(BUILD) -j $(JOBS)

# The main job: one attention layer of DeepSeek V3.2 served for a few engine steps (plan, run,
# check against a reference); `./build/attnkit run --help` for the other models and options.
run: build
	./$(BUILD)/attnkit run

test: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

# The same tests under AddressSanitizer + UndefinedBehaviorSanitizer (CPU backend only).
test-sanitize:
	cmake -S . -B $(BUILD)-asan -DAK_SANITIZE=ON -DAK_CUDA=OFF -DCMAKE_BUILD_TYPE=Debug $(CMAKE_FLAGS)
	cmake --build $(BUILD)-asan -j $(JOBS)
	cd $(BUILD)-asan && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 ctest --output-on-failure -j $(JOBS) -LE gpu

# On a GPU machine: CUDA build in $(BUILD)-gpu, GPU unit tests, `attnkit check --backend cuda`,
# compute-sanitizer memcheck/racecheck on reduced shapes, a short benchmark; one summary table.
# Without a GPU every step reports SKIP (exit 0).
gpu-test:
	BUILD=$(BUILD)-gpu JOBS=$(JOBS) bash scripts/gpu_test.sh

install: build
	cmake --install $(BUILD)

clean:
	rm -rf $(BUILD) $(BUILD)-asan $(BUILD)-gpu
