# The two commands of the README's Quick start, plus helpers.
#   make demo   installs what is missing, builds, runs the main job
#   make test   installs what is missing, builds, runs ctest, then again under
#               ASan/UBSan (all tests) and ThreadSanitizer (executor, pool, kernels)
#   make bench  builds bench/fg_bench and compares it with PyTorch (not part of test)
JOBS ?= $(shell nproc)
BUILD ?= build
ASAN_BUILD ?= build-asan
TSAN_BUILD ?= build-tsan

.PHONY: all deps build test test-fast test-asan test-tsan demo install clean bench

all: build

deps:
	@./tools/install_deps.sh

build: deps
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release
	cmake --build $(BUILD) -j $(JOBS)

test-fast: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

test-asan: deps
	cmake -S . -B $(ASAN_BUILD) -DCMAKE_BUILD_TYPE=Debug -DFG_SANITIZE=address,undefined
	cmake --build $(ASAN_BUILD) -j $(JOBS)
	cd $(ASAN_BUILD) && ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1 \
	  ctest --output-on-failure -j $(JOBS) -E '^install\.'

# The thread pool, the executor and the parallel kernels under TSan.
test-tsan: deps
	cmake -S . -B $(TSAN_BUILD) -DCMAKE_BUILD_TYPE=Debug -DFG_SANITIZE=thread
	cmake --build $(TSAN_BUILD) -j $(JOBS) --target test_threadpool test_threadpool_kernels \
	  test_executor test_session test_kernels
	cd $(TSAN_BUILD) && TSAN_OPTIONS=halt_on_error=1 \
	  ctest --output-on-failure -j $(JOBS) -R '^test_(threadpool|threadpool_kernels|executor|session|kernels)\.'

test: test-fast test-asan test-tsan

demo: build
	./tools/demo.sh $(BUILD)

# Only the library and the driver are built; the comparison takes a few minutes.
bench: deps
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release
	cmake --build $(BUILD) -j $(JOBS) --target fg_bench
	/usr/bin/python3 bench/compare_torch.py --driver $(BUILD)/bench/fg_bench

install: build
	cmake --install $(BUILD)

clean:
	rm -rf $(BUILD) $(ASAN_BUILD) $(TSAN_BUILD)
