# ec-store: the two commands are `make demo` and `make test`.
BUILD    ?= build
SANITIZE ?=
JOBS     ?= $(shell nproc)
CMAKE_FLAGS = -DCMAKE_BUILD_TYPE=Release -DEC_SANITIZE=$(SANITIZE)

.PHONY: deps build demo test test-rdma bench-rdma bench bench-quick asan tsan clean format

deps:
	@scripts/install-deps.sh

build: deps
	@cmake -S . -B $(BUILD) $(CMAKE_FLAGS) >/dev/null
	@cmake --build $(BUILD) -j $(JOBS)

demo: build
	$(BUILD)/ec-store-demo ./.ec-store
	$(BUILD)/ec-store --dir ./.ec-store ls --limit 8
	$(BUILD)/ec-store --dir ./.ec-store stats

test: build
	cd $(BUILD) && ctest --output-on-failure -j 1 --timeout 600

# Real RDMA verbs under Soft-RoCE in a QEMU VM (also part of `make test`).
test-rdma: build
	cd $(BUILD) && ctest --output-on-failure -R rdma_softroce_vm

# The rdma bench workload inside the Soft-RoCE VM (emulated: correctness, not NIC speed).
bench-rdma: build
	tests/rdma-vm/run.sh $(BUILD)/rdma-vm tests/rdma-vm/bench.sh $(BUILD)/ec-store-bench

bench: build
	$(BUILD)/ec-store-bench --dir ./bench-out/store --json bench-out/results.json --png bench-out/results.png

bench-quick: build
	$(BUILD)/ec-store-bench --quick --dir ./bench-out/store --json bench-out/results.json --png bench-out/results.png

# Sanitizer builds: `make asan` / `make tsan` build and run the whole suite instrumented.
asan:
	$(MAKE) test BUILD=build-asan SANITIZE=address
tsan:
	$(MAKE) test BUILD=build-tsan SANITIZE=thread

format:
	clang-format -i $$(git ls-files '*.cc' '*.h')

clean:
	rm -rf build build-asan build-tsan .ec-store bench-out
