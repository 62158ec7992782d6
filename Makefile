# The two commands of the README's Quick start, plus helpers.
#   make demo   installs what the demo needs when missing, builds the command
#               and the digits examples, runs the main job
#   make test   installs everything missing, builds, runs ctest, then again under
#               ASan/UBSan (all tests) and ThreadSanitizer (executor, pool, kernels)
#   make bench  builds bench/fg_bench and compares it with PyTorch (not part of test)
JOBS ?= $(shell nproc)
# ctest runs one test more than there are cores: many tests spend much of
# their time waiting on processes they start (mpirun's ranks, the command,
# Python's references), so cores would idle at JOBS. On a 2-core VM the
# ASan suite took 494 s at -j 2, 352 s at -j 3 and 386 s at -j 4.
TEST_JOBS ?= $(shell echo $$(($(JOBS) + 1)))
BUILD ?= build
ASAN_BUILD ?= build-asan
TSAN_BUILD ?= build-tsan
# ctest, printing failed tests' output again at the end (the tail CI keeps).
CTEST = $(CURDIR)/tools/ctest_run.sh
# cmake's configure of folder $(1). A new build folder gets Ninja's
# generator when Ninja is installed: on the 2-core VM the Release build with
# its tests took 219 s with it, 275 s with Make's. A folder already made
# keeps the generator it was made with.
CONFIGURE = cmake -S . -B $(1) $(if $(wildcard $(1)/CMakeCache.txt),,$(if $(shell command -v ninja),-G Ninja))
# Programs and the shared library link with lld where it is installed (a
# test program's link: 0.19 s against GNU ld's 0.49 s, 0.38 s against 0.90 s
# under ASan).
LINK = $(if $(shell command -v ld.lld),-DCMAKE_EXE_LINKER_FLAGS=-fuse-ld=lld \
  -DCMAKE_SHARED_LINKER_FLAGS=-fuse-ld=lld -DCMAKE_MODULE_LINKER_FLAGS=-fuse-ld=lld)

.PHONY: all deps deps-demo build build-demo test test-fast test-asan test-tsan demo install clean bench \
        fuzz fuzz-build fuzz-smoke

all: build

deps:
	@./tools/install_deps.sh all

deps-demo:
	@./tools/install_deps.sh demo

build: deps
	@echo "== $@ started $$(date +%T)"
	$(call CONFIGURE,$(BUILD)) $(LINK) -DCMAKE_BUILD_TYPE=Release -DFG_BUILD_TESTS=ON
	cmake --build $(BUILD) -j $(JOBS)

# Only what tools/demo.sh runs: the command and the two digits builders
# (ONNX and MPI are left out when their packages are missing).
build-demo: deps-demo
	$(call CONFIGURE,$(BUILD)) -DCMAKE_BUILD_TYPE=Release -DFG_BUILD_TESTS=OFF
	cmake --build $(BUILD) -j $(JOBS) --target flowgraph_cli example_digits_build_mlp \
	  example_digits_build_cnn

test-fast: build
	@echo "== $@ started $$(date +%T)"
	cd $(BUILD) && $(CTEST) --output-on-failure -j $(TEST_JOBS)

# The sanitizer builds are Debug (assertions on) at -O1, the level the
# sanitizers' authors advise: on the 2-core VM the ASan suite took 507 s at
# -O0 and 405-417 s at -O1, its build 2 min 0 s and 3 min 11 s. Their debug
# information is -g1, functions and line tables, what a sanitizer's report
# prints (kernels/cpu/binary.c compiled in 7.3 s under ASan, 12.9 s at -g).
SAN_FLAGS = -DCMAKE_BUILD_TYPE=Debug -DCMAKE_C_FLAGS_DEBUG="-g1 -O1" -DCMAKE_CXX_FLAGS_DEBUG="-g1 -O1" \
  -DFG_CUDA=OFF -DFG_TEST_CASES_DIR=$(CASES_DIR)
# The sanitizer builds read the ONNX test cases and models the Release
# build's tests generated (Python with PyTorch, torchvision models exported),
# rather than generating their own.
CASES_DIR = $(CURDIR)/$(BUILD)/onnx_cases

# Every test but the install's and the two that read the sources only
# (format, layering), which the Release run has passed.
test-asan: deps
	@echo "== $@ started $$(date +%T)"
	mkdir -p $(CASES_DIR)
	$(call CONFIGURE,$(ASAN_BUILD)) $(LINK) $(SAN_FLAGS) -DFG_SANITIZE=address,undefined
	cmake --build $(ASAN_BUILD) -j $(JOBS)
	cd $(ASAN_BUILD) && ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1 \
	  $(CTEST) --output-on-failure -j $(TEST_JOBS) -E '^(install|format|layering)\.'

# The thread pool, the executor, the parallel kernels and the threads that
# stand in for processes (dist_agree, dist_hybrid, shm_reduce), and the
# lanes of micro-batched pipelines (dist_micro), and the in-process ranks
# of fused product updates (dist_product), under TSan.
test-tsan: deps
	@echo "== $@ started $$(date +%T)"
	mkdir -p $(CASES_DIR)
	$(call CONFIGURE,$(TSAN_BUILD)) $(LINK) $(SAN_FLAGS) -DFG_SANITIZE=thread
	cmake --build $(TSAN_BUILD) -j $(JOBS) --target test_threadpool test_threadpool_kernels \
	  test_executor test_session test_kernels test_threads test_numerics test_dist test_dist_exec \
	  test_dist_agree test_dist_hybrid test_shm_reduce test_dist_micro test_dist_run_agree \
	  test_dist_product test_conv_share
	cd $(TSAN_BUILD) && TSAN_OPTIONS=halt_on_error=1 \
	  $(CTEST) --output-on-failure -j $(TEST_JOBS) -R '^test_(threadpool|threadpool_kernels|executor|session|kernels|threads|numerics|dist|dist_exec|dist_agree|dist_hybrid|shm_reduce|dist_micro|dist_run_agree|dist_product|conv_share)\.'

test: test-fast test-asan test-tsan fuzz-smoke
	@echo "== $@ finished $$(date +%T)"

# libFuzzer harnesses (tests/fuzz/): a clang build of the library with
# coverage, ASan and UBSan. `make fuzz FUZZ_SECONDS=N` runs each harness N
# seconds, one after the other; fuzz-smoke runs all three (load, api, onnx)
# for 60 s side by side.
# Either fails when a harness finds a crash (input in build-fuzz/fuzz-artifacts/).
FUZZ_BUILD ?= build-fuzz
FUZZ_SECONDS ?= 300

fuzz-build: deps
	@echo "== $@ started $$(date +%T)"
	$(call CONFIGURE,$(FUZZ_BUILD)) $(LINK) -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
	  -DFG_FUZZ=ON -DFG_BUILD_TESTS=OFF -DFG_CUDA=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo
	cmake --build $(FUZZ_BUILD) -j $(JOBS) --target fuzz_load fuzz_api fuzz_onnx fuzz_gen_seeds
	./tests/fuzz/seed_corpus.sh . $(FUZZ_BUILD)

fuzz: fuzz-build
	./tests/fuzz/run_fuzz.sh $(FUZZ_BUILD) $(FUZZ_SECONDS) seq

fuzz-smoke: fuzz-build
	@echo "== $@ started $$(date +%T)"
	./tests/fuzz/run_fuzz.sh $(FUZZ_BUILD) 60 par

demo: build-demo
	./tools/demo.sh $(BUILD)

# Only the library and the driver are built; the comparison takes a few minutes.
bench: deps
	$(call CONFIGURE,$(BUILD)) -DCMAKE_BUILD_TYPE=Release
	cmake --build $(BUILD) -j $(JOBS) --target fg_bench fg_bench_gpu fg_bench_cnn fg_bench_onnx
	/usr/bin/python3 bench/compare_torch.py --driver $(BUILD)/bench/fg_bench
	/usr/bin/python3 bench/compare_torch_cnn.py --driver $(BUILD)/bench/fg_bench_cnn
	/usr/bin/python3 bench/compare_torch_onnx.py --driver $(BUILD)/bench/fg_bench_onnx
	/usr/bin/python3 bench/passes_ablation.py --build $(BUILD)
	/usr/bin/python3 bench/compare_torch_gpu.py --driver $(BUILD)/bench/fg_bench_gpu
	./bench/dist_bench.sh $(BUILD)

install: build
	cmake --install $(BUILD)

clean:
	rm -rf $(BUILD) $(ASAN_BUILD) $(TSAN_BUILD)
