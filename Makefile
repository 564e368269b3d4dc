# The project's commands. Each one prepares the machine first (scripts/setup.sh,
# fast when nothing is missing) and uses CMake + Ninja underneath:
#   make demo        build and run examples/demo.c, then examples/tier_restart.c
#   make examples    the candle example (bindings/rust/examples/candle-decoder): its exactness check against
#                    candle's own caches; not part of make test (candle compiles for minutes on two cores)
#   make test        unit/conformance/header/abi tests, then the same under
#                    ASan+UBSan, then the bounded fuzz runs
#   make bench       optimised build, then the benchmarks; results in build/bench/results.json
#   make bench-host-issue  only the host cost of issuing a decode step on the emulated device
#   make sanitize    only the ASan+UBSan suite      make fuzz   only the fuzz suite
#   make tsan        the library and tests/threads under ThreadSanitizer
#   make coverage    gcov build, the C suites, then line and branch coverage per folder of the library
#                    (build-coverage/coverage.txt and coverage.json; docs/testing.md)
#   make fuzz-pool-long  the pool fuzzer: libFuzzer for FUZZ_SECONDS (3600), then FUZZ_OPS (10^7) standalone operations
#   make test-packages  what users install, built as they get it: the Rust crates packaged (cargo publish
#                    --dry-run) and used from the .crate files by a crate outside the repository, and the Python
#                    manylinux wheel installed into a fresh venv without a compiler (part of make test)
#   make install PREFIX=/usr/local                  make clean  remove build dirs

JOBS   ?= 2
PREFIX ?= /usr/local
CMAKE  ?= cmake
CTEST  ?= ctest
CONFIGURE = $(CMAKE) -G Ninja

BUILD         := build
BUILD_ASAN    := build-asan
BUILD_TSAN    := build-tsan
BUILD_FUZZ    := build-fuzz
BUILD_RELEASE := build-release
# The emulated device plugin (tests/gpu), optimised, for bench_host_issue: the Release build above has no tests.
BUILD_EMULATED := build-release-emulated
BUILD_COVERAGE := build-coverage

# `make test` prepares the machine once and tells the suites it ran not to repeat it.
SETUP_DEP := $(if $(SKIP_SETUP),,setup)

# The GPU backend plugins (libkvcache-cuda.so, libkvcache-hip.so) are built
# wherever their toolchains are; scripts/setup.sh installs both (CUDA 13 into
# .venv, HIP from Debian), so CI always compiles them for their real targets
# and runs the CPU suites with them beside the library. Compiling needs no
# GPU. Deferred (=): evaluated when a recipe runs, after setup.
GPU_FLAGS = $(shell scripts/gpu_cmake_flags.sh cuda hip)
# The benchmarks' GPU rows are CUDA's; the HIP plugin is not built for them.
BENCH_GPU_FLAGS = $(shell scripts/gpu_cmake_flags.sh cuda) -DKVC_HIP=OFF
# The sanitized and fuzz builds never build a GPU backend: the GPU runtimes
# map memory where ASan keeps its shadow (CMake refuses KVC_SANITIZE with
# them), and the fuzz targets drive CPU caches only.
NO_GPU_FLAGS = -DKVC_CUDA=OFF -DKVC_HIP=OFF -DKVC_LINK_BACKEND=OFF

.PHONY: all setup build test examples test-unit test-go test-rust test-python test-packages sanitize tsan fuzz fuzz-pool-long coverage demo bench bench-host-issue emulated-plugin install clean distclean

all: build

setup:
	@scripts/setup.sh

build: $(SETUP_DEP)
	$(CONFIGURE) -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo $(GPU_FLAGS)
	$(CMAKE) --build $(BUILD) -j $(JOBS)

# Suites run one after the other and the first failure stops `make test`.
test: setup
	@$(MAKE) --no-print-directory test-unit SKIP_SETUP=1
	@$(MAKE) --no-print-directory test-go SKIP_SETUP=1
	@$(MAKE) --no-print-directory test-rust SKIP_SETUP=1
	@$(MAKE) --no-print-directory test-python SKIP_SETUP=1
	@$(MAKE) --no-print-directory test-packages SKIP_SETUP=1
	@$(MAKE) --no-print-directory sanitize SKIP_SETUP=1
	@$(MAKE) --no-print-directory tsan SKIP_SETUP=1
	@$(MAKE) --no-print-directory fuzz SKIP_SETUP=1
	@echo "make test: all suites passed"

test-unit: build
	$(CTEST) --test-dir $(BUILD) --output-on-failure --no-tests=error -j $(JOBS)

# The Go binding against this build: gofmt, go vet, go test -race ./...,
# cgocheck2, a build without cgo, and the README's example in a module
# outside the repository (bindings/go/scripts/test.sh).
test-go: build
	GOFLAGS=-p=$(JOBS) bindings/go/scripts/test.sh $(BUILD)

# The Rust crates (bindings/rust/check.sh): cargo fmt --check, clippy -D warnings,
# cargo test (unit, integration, doc) with the dlpack feature, the examples, and a
# build with freshly generated bindings. Cargo builds its own static copy of the
# library from these sources into bindings/rust/target.
test-rust: $(SETUP_DEP)
	JOBS=$(JOBS) bindings/rust/check.sh

# The Python binding (bindings/python/check.sh): pip-installs the package into .venv (scikit-build-core +
# SWIG, compiling this tree's C sources; build tree in bindings/python/build), then its pytest suite.
test-python: $(SETUP_DEP)
	JOBS=$(JOBS) bindings/python/check.sh

# The packages as users install them (bindings/rust/package.sh, bindings/python/wheel_check.sh). After
# test-python the wheel's CMake tree is already built (about a minute); the crates compile the C sources again
# from their packages (one to three minutes on 2 cores). The C library's own packaging (add_subdirectory, a
# moved install prefix) and the Go binding's (static and shared, moved prefix) are in test-unit and test-go.
test-packages: build
	JOBS=$(JOBS) bindings/rust/package.sh $(BUILD)
	JOBS=$(JOBS) bindings/python/wheel_check.sh

sanitize: $(SETUP_DEP)
	$(CONFIGURE) -S . -B $(BUILD_ASAN) -DCMAKE_BUILD_TYPE=Debug -DKVC_SANITIZE=ON $(NO_GPU_FLAGS)
	$(CMAKE) --build $(BUILD_ASAN) -j $(JOBS)
	$(CTEST) --test-dir $(BUILD_ASAN) --output-on-failure --no-tests=error -j $(JOBS) -LE fuzz

# Threads racing on one handle (tests/threads) under ThreadSanitizer: a data race fails the test. Only the library
# and those tests are built. halt_on_error: the first report fails the run; second_deadlock_stack: both stacks.
tsan: $(SETUP_DEP)
	$(CONFIGURE) -S . -B $(BUILD_TSAN) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKVC_TSAN=ON $(NO_GPU_FLAGS)
	$(CMAKE) --build $(BUILD_TSAN) -j $(JOBS) --target thread_tests
	TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 \
	  $(CTEST) --test-dir $(BUILD_TSAN) --output-on-failure --no-tests=error -j $(JOBS) -L threads

# No fuzz target yet is said, not hidden; once there is one, an empty run fails.
fuzz: $(SETUP_DEP)
	@if ! ls tests/fuzz/fuzz_*.c >/dev/null 2>&1; then \
	  echo "fuzz: SKIPPED: no tests/fuzz/fuzz_*.c targets yet"; \
	else \
	  set -e; \
	  CC=clang CXX=clang++ $(CONFIGURE) -S . -B $(BUILD_FUZZ) -DCMAKE_BUILD_TYPE=RelWithDebInfo $(NO_GPU_FLAGS); \
	  $(CMAKE) --build $(BUILD_FUZZ) -j $(JOBS) --target fuzz_targets; \
	  $(CTEST) --test-dir $(BUILD_FUZZ) --output-on-failure --no-tests=error -j $(JOBS) -L fuzz; \
	fi

# Line and branch coverage of the library (core/, backends/cpu/) under the C suites: gcc --coverage at -O0
# (KVC_COVERAGE), every CTest test but the libFuzzer ones (label fuzz; clang only), counters reset first so
# that the numbers are this run's. gcovr (scripts/requirements-dev.txt) reads the counters and writes one JSON
# summary per file, scripts/coverage_table.py folds it per folder. Branches on lines without code (the
# compiler's own) are left out; C throws nothing. Not part of `make test`: its own full build and suite.
COVERAGE_GCOVR ?= .venv/bin/gcovr
# pool_fuzz at -O0 with counters: 10^6 operations take over 5 minutes; 10^5 here, the 10^6 run stays in `make test`.
COVERAGE_POOL_FUZZ_OPS ?= 100000
coverage: $(SETUP_DEP)
	CC=gcc $(CONFIGURE) -S . -B $(BUILD_COVERAGE) -DCMAKE_BUILD_TYPE=Debug -DKVC_COVERAGE=ON $(NO_GPU_FLAGS) \
	  -DKVC_POOL_FUZZ_OPS=$(COVERAGE_POOL_FUZZ_OPS)
	$(CMAKE) --build $(BUILD_COVERAGE) -j $(JOBS)
	find $(BUILD_COVERAGE) -name '*.gcda' -delete
	$(CTEST) --test-dir $(BUILD_COVERAGE) --output-on-failure --no-tests=error -j $(JOBS) -LE fuzz
	$(COVERAGE_GCOVR) --root . --object-directory $(BUILD_COVERAGE) --filter 'core/' --filter 'backends/cpu/' \
	  --exclude-unreachable-branches -j $(JOBS) --json-summary $(BUILD_COVERAGE)/coverage-files.json
	.venv/bin/python scripts/coverage_table.py $(BUILD_COVERAGE)/coverage-files.json \
	  $(BUILD_COVERAGE)/coverage.txt $(BUILD_COVERAGE)/coverage.json

# The pool fuzzer beyond its bounded runs: libFuzzer (ASan+UBSan, coverage-guided) for FUZZ_SECONDS over its
# corpus in build-fuzz/fuzz/pool/corpus and the seeds, then FUZZ_OPS operations of the standalone driver under
# ASan+UBSan from a seed that changes every run (printed; a failing input is saved in build-asan/tests/fuzz).
FUZZ_SECONDS ?= 3600
FUZZ_OPS ?= 10000000
fuzz-pool-long: $(SETUP_DEP)
	CC=clang CXX=clang++ $(CONFIGURE) -S . -B $(BUILD_FUZZ) -DCMAKE_BUILD_TYPE=RelWithDebInfo $(NO_GPU_FLAGS)
	$(CMAKE) --build $(BUILD_FUZZ) -j $(JOBS) --target fuzz_pool
	$(BUILD_FUZZ)/tests/fuzz/fuzz_pool -error_exitcode=1 -max_total_time=$(FUZZ_SECONDS) -timeout=25 -max_len=4096 \
	  -artifact_prefix=$(BUILD_FUZZ)/fuzz/pool/artifacts/ $(BUILD_FUZZ)/fuzz/pool/corpus tests/fuzz/corpus/pool
	$(CONFIGURE) -S . -B $(BUILD_ASAN) -DCMAKE_BUILD_TYPE=Debug -DKVC_SANITIZE=ON $(NO_GPU_FLAGS)
	$(CMAKE) --build $(BUILD_ASAN) -j $(JOBS) --target fuzz_pool_standalone
	cd $(BUILD_ASAN)/tests/fuzz && ./fuzz_pool_standalone -ops=$(FUZZ_OPS) -len=1500 -seed=$$(date +%s)

demo: build
	@test -x $(BUILD)/examples/demo || { echo "demo: examples/demo.c is missing" >&2; exit 1; }
	$(BUILD)/examples/demo
	@echo
	$(BUILD)/examples/tier_restart

# kvcache-sys compiles the library from this checkout (its bundled build), so the example needs no build
# dir; its own Cargo workspace and target dir keep candle out of bindings/rust's `cargo test`.
CANDLE_EXAMPLE := bindings/rust/examples/candle-decoder
examples: $(SETUP_DEP)
	@echo "examples: the candle example is not part of make test: candle takes minutes to compile on two cores"
	cd $(CANDLE_EXAMPLE) && CARGO_BUILD_JOBS=$(JOBS) cargo run --release --locked --bin check
	@echo "examples: its bench: cd $(CANDLE_EXAMPLE) && cargo run --release --bin bench"

# Release is CMake's portable -O3; no -march=native, so numbers are comparable
# across machines of one architecture.
bench: $(SETUP_DEP)
	$(CONFIGURE) -S . -B $(BUILD_RELEASE) -DCMAKE_BUILD_TYPE=Release -DBUILD_TESTING=OFF $(BENCH_GPU_FLAGS)
	$(CMAKE) --build $(BUILD_RELEASE) -j $(JOBS)
	@$(MAKE) --no-print-directory emulated-plugin SKIP_SETUP=1
	@if [ -f bench/run.sh ]; then \
	  KVC_BENCH_EMULATED_DIR=$(BUILD_EMULATED)/tests/gpu/emulated \
	  KVC_BENCH_JSON=$${KVC_BENCH_JSON:-$(BUILD)/bench/results.json} bash bench/run.sh $(BUILD_RELEASE); \
	else \
	  set -e; found=0; \
	  for b in $(BUILD_RELEASE)/bench/bench_*; do \
	    [ -x "$$b" ] || continue; found=1; echo "== $$b"; "$$b"; \
	  done; \
	  [ $$found -eq 1 ] || { echo "bench: no bench/bench_*.c programs" >&2; exit 1; }; \
	fi

# Only the emulated device plugin is built there (no tests): what bench_host_issue loads.
emulated-plugin: $(SETUP_DEP)
	$(CONFIGURE) -S . -B $(BUILD_EMULATED) -DCMAKE_BUILD_TYPE=Release $(NO_GPU_FLAGS)
	$(CMAKE) --build $(BUILD_EMULATED) -j $(JOBS) --target kvc_emulated_device

# bench_host_issue alone (bench/bench_host_issue.c): the core's host cost of one 32-layer update_all step.
bench-host-issue: $(SETUP_DEP)
	$(CONFIGURE) -S . -B $(BUILD_RELEASE) -DCMAKE_BUILD_TYPE=Release -DBUILD_TESTING=OFF $(BENCH_GPU_FLAGS)
	$(CMAKE) --build $(BUILD_RELEASE) -j $(JOBS) --target bench_host_issue
	@$(MAKE) --no-print-directory emulated-plugin SKIP_SETUP=1
	KVC_BACKEND_PATH=$(BUILD_EMULATED)/tests/gpu/emulated $(BUILD_RELEASE)/bench/bench_host_issue \
	  --json $${KVC_BENCH_JSON:-$(BUILD)/bench/results.json}

install: build
	$(CMAKE) --install $(BUILD) --prefix "$(PREFIX)"

clean:
	rm -rf $(BUILD) $(BUILD_ASAN) $(BUILD_TSAN) $(BUILD_FUZZ) $(BUILD_RELEASE) $(BUILD_EMULATED) $(BUILD_COVERAGE)

# Also the Python environment that setup.sh made.
distclean: clean
	rm -rf .venv
