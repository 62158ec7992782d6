# The two commands of the README's Quick start, plus helpers.
#   make demo   installs what is missing, builds, runs the main job
#   make test   installs what is missing, builds, runs ctest (plus an ASan/UBSan run)
#   make bench  builds bench/fg_bench and compares it with PyTorch (not part of test)
JOBS ?= $(shell nproc)
BUILD ?= build
ASAN_BUILD ?= build-asan

.PHONY: all deps build test test-fast test-asan demo install clean bench

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

test: test-fast test-asan

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
	rm -rf $(BUILD) $(ASAN_BUILD)
