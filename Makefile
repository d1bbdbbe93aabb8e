# ec-store: the two commands are `make demo` and `make test`.
BUILD    ?= build
SANITIZE ?=
JOBS     ?= $(shell nproc)
CMAKE_FLAGS = -DCMAKE_BUILD_TYPE=Release -DEC_SANITIZE=$(SANITIZE)

.PHONY: soak deps build demo test test-gpu thread-safety python-ext python-test sglang-test python-wheel test-rdma test-nordma test-shared bench-rdma bench bench-quick asan tsan clean format format-check

deps:
	@scripts/install-deps.sh

build: deps
	@cmake -S . -B $(BUILD) $(CMAKE_FLAGS) >/dev/null
	@cmake --build $(BUILD) -j $(JOBS)

# The demo needs only the library, the CLI and the demo program, and only the packages that
# build them: no test or bench targets, no test dependencies (QEMU, redis, fio, clang, ...).
DEMO_BUILD ?= build-demo
demo:
	@scripts/install-deps.sh build
	@cmake -S . -B $(DEMO_BUILD) $(CMAKE_FLAGS) -DEC_BUILD_TESTS=OFF -DEC_BUILD_BENCH=OFF >/dev/null
	@cmake --build $(DEMO_BUILD) -j $(JOBS) --target ec-store ec-store-demo
	$(DEMO_BUILD)/ec-store-demo ./.ec-store
	$(DEMO_BUILD)/ec-store --dir ./.ec-store ls --limit 8
	$(DEMO_BUILD)/ec-store --dir ./.ec-store stats

test: build
	cd $(BUILD) && ctest --output-on-failure -j 1 --timeout 600
	$(MAKE) python-test
	$(MAKE) sglang-test
	$(MAKE) soak SOAK_SECONDS=60

# The Python package and the vLLM connector, against the real vLLM 0.33.0 on the CPU, in a
# venv cached outside the tree (scripts/python-env.sh). The extension is built in build-py.
PY_ENV = VLLM_TARGET_DEVICE=cpu HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 \
	EC_STORE_BIN=$(CURDIR)/$(BUILD)/ec-store PYTHONPATH=$(CURDIR)/build-py/python
# On the GPU machine, with a build made here and carried there (docs/development.md): the
# device-tier tests, which fail instead of skipping when no GPU is found, and the CUDA
# Python tests. BUILD there holds ecstore_tests, ec-store and python/ecstore.
test-gpu:
	EC_REQUIRE_GPU=1 $(BUILD)/ecstore_tests --gtest_filter='Device*'
	cd /tmp && PYTHONPATH=$(CURDIR)/$(BUILD)/python EC_STORE_BIN=$(CURDIR)/$(BUILD)/ec-store \
	  python3 -m pytest -q -p no:cacheprovider $(CURDIR)/python/tests/test_cuda.py

# The extension, for the venv's Python, in build-py.
python-ext: build
	@VENV=$$(scripts/python-env.sh) && \
	cmake -S . -B build-py -DCMAKE_BUILD_TYPE=Release -DEC_BUILD_PYTHON=ON -DEC_BUILD_TESTS=OFF \
	  -DEC_BUILD_BENCH=OFF -DPython_EXECUTABLE=$$VENV/bin/python >/dev/null && \
	cmake --build build-py -j $(JOBS) --target _ecstore

python-test: python-ext
	@VENV=$$(scripts/python-env.sh) && \
	$(PY_ENV) $$VENV/bin/python -m pytest -q python/tests --ignore=python/tests/test_sglang.py

# The SGLang backend against SGLang 0.5.23's own classes, in the SGLang venv
# (scripts/sglang-env.sh: SGLang over the vLLM venv's torch). Fails, not skips, without it.
sglang-test: python-ext
	@VENV=$$(scripts/sglang-env.sh) && \
	EC_REQUIRE_SGLANG=1 $(PY_ENV) $$VENV/bin/python -m pytest -q python/tests/test_sglang.py

# `pip wheel .` through scikit-build-core: a wheel with the extension and the package.
# The wheel as a package index takes it: the extension and the ec-store binary with their
# shared libraries vendored by auditwheel (manylinux, the oldest tag this build's glibc
# allows), then installed into a fresh venv offline and run (scripts/check-wheel.py).
python-wheel: deps
	@VENV=$$(scripts/python-env.sh) && rm -rf dist build-wheel/raw && \
	$$VENV/bin/python -m pip wheel --no-build-isolation --no-deps -w build-wheel/raw . && \
	PATH=$$VENV/bin:$$PATH $$VENV/bin/auditwheel repair --plat auto -w dist \
	  build-wheel/raw/ecstore-*.whl >/dev/null && \
	$$VENV/bin/python -m pip download -q --only-binary :all: -d build-wheel/deps numpy && \
	$$VENV/bin/python scripts/check-wheel.py dist/ecstore-*.whl build-wheel/deps

# Real RDMA verbs under Soft-RoCE in a QEMU VM (also part of `make test`).
test-rdma: build
	cd $(BUILD) && ctest --output-on-failure -R rdma_softroce_vm

# The rdma bench workload inside the Soft-RoCE VM (emulated: correctness, not NIC speed).
bench-rdma: build
	tests/rdma-vm/run.sh $(BUILD)/rdma-vm tests/rdma-vm/bench.sh $(BUILD)/ec-store-bench

# The soak test (docs/operations.md): SOAK_SECONDS of chaos against a daemon,
# then every acknowledged-durable entry checked. Root runs the disk-full phase on a tmpfs.
# `make test` runs it for 60 s.
SOAK_SECONDS ?= 600
soak: python-ext
	@VENV=$$(scripts/python-env.sh) && \
	PYTHONPATH=$(CURDIR)/build-py/python $$VENV/bin/python tests/soak.py \
	  --bin $(CURDIR)/$(BUILD)/ec-store --seconds $(SOAK_SECONDS) $(SOAK_ARGS)

bench: build
	$(BUILD)/ec-store-bench --dir ./bench-out/store --json bench-out/results.json --png bench-out/results.png

bench-quick: build
	$(BUILD)/ec-store-bench --quick --dir ./bench-out/store --json bench-out/results.json --png bench-out/results.png

# The library without RDMA and without CUDA (-DEC_WITH_RDMA=OFF -DEC_WITH_CUDA=OFF): builds,
# passes the suite, links no verbs.
test-nordma: deps
	@cmake -S . -B build-nordma -DCMAKE_BUILD_TYPE=Release -DEC_WITH_RDMA=OFF -DEC_WITH_CUDA=OFF >/dev/null
	@cmake --build build-nordma -j $(JOBS)
	@! ldd build-nordma/ec-store | grep -E 'libibverbs|librdmacm' || \
	  (echo "ec-store built with EC_WITH_RDMA=OFF links verbs" && false)
	cd build-nordma && ctest --output-on-failure -j 1 --timeout 600

# The library as shared objects (-DBUILD_SHARED_LIBS=ON): built, installed into a scratch
# prefix, and linked by find_package and pkg-config consumers, as tests/consumer/run.sh does.
test-shared: deps
	@cmake -S . -B build-shared -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=ON \
	  -DEC_BUILD_TESTS=OFF -DEC_BUILD_BENCH=OFF >/dev/null
	@cmake --build build-shared -j $(JOBS)
	tests/consumer/run.sh build-shared build-shared/consumer

# Sanitizer builds: `make asan` / `make tsan` build and run the whole suite instrumented.
# vLLM's CPU platform puts libraries in LD_PRELOAD for the rest of the process, and the daemons
# the Python tests start inherit it: ASan's check that its runtime comes first would refuse them.
# A smaller quarantine (freed memory held back to catch use after free; 256 MiB by default) and,
# under both sanitizers, more room in the soak's RSS bound for their shadow memory: under ASan
# the daemon reached 587 MiB with the default quarantine, 223-234 MiB with 8-16 MiB; under TSan
# 249 MiB (its bound without them: 256 MiB).
SANITIZER_SOAK = SOAK_ARGS=--rss-slack-mib=352
asan:
	ASAN_OPTIONS=verify_asan_link_order=0:quarantine_size_mb=8 $(MAKE) test BUILD=build-asan \
	  SANITIZE=address $(SANITIZER_SOAK)
tsan:
	$(MAKE) test BUILD=build-tsan SANITIZE=thread $(SANITIZER_SOAK)

# clang's -Wthread-safety over the store (GUARDED_BY / REQUIRES in store/store_impl.h):
# a lock-discipline error fails the build. CI runs it.
thread-safety: deps
	@cmake -S . -B build-clang -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_COMPILER=clang \
	  -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_CXX_FLAGS=-Wthread-safety -DEC_BUILD_TESTS=OFF \
	  -DEC_BUILD_BENCH=OFF >/dev/null
	@cmake --build build-clang -j $(JOBS) --target ecstore_store
	@echo "thread-safety: clang -Wthread-safety clean"

format:
	clang-format -i $$(git ls-files '*.cc' '*.h')

# Fails when any tracked C++ file is not .clang-format clean (CI runs it).
format-check:
	clang-format --dry-run -Werror $$(git ls-files '*.cc' '*.h')

clean:
	rm -rf build build-asan build-tsan build-nordma build-clang build-py dist .ec-store bench-out
