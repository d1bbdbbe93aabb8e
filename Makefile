# ec-store: the two commands are `make demo` and `make test`.
BUILD    ?= build
SANITIZE ?=
JOBS     ?= $(shell nproc)
CMAKE_FLAGS = -DCMAKE_BUILD_TYPE=Release -DEC_SANITIZE=$(SANITIZE) $(CMAKE_EXTRA)
# Ninja where a build folder is new (an existing one keeps its generator): it compiles a
# library's sources while the one below it still links, where make waits.
export CMAKE_GENERATOR ?= Ninja

.PHONY: soak deps build demo test test-gpu chaos python-ext python-test python-daemon-test python-install sglang-test python-wheel python-wheels test-rdma test-shared bench-rdma bench bench-quick asan tsan sanitized-test house-rules clean format format-check

# Two tests at a time on a 2-core machine; those that measure time or memory, or take both
# cores themselves, run alone (RUN_SERIAL in CMakeLists.txt). Labels pick suites:
# `make test CTEST_ARGS="-L unit"` (unit, daemon, vm, slow).
CTEST = ctest --output-on-failure -j $(JOBS) --timeout 600 $(CTEST_ARGS)

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
	cd $(BUILD) && $(CTEST)
	$(MAKE) python-test sglang-test
	$(MAKE) soak SOAK_SECONDS=60

# The Python package as users install it: the wheel (make python-wheel) installed into
# build-wheel/test-venv, a venv that sees the vLLM venv's packages (vLLM 0.33.0 and torch, on
# the CPU; scripts/python-env.sh) through a .pth line. The suite imports the installed
# package and starts the wheel's own `ec-store` unless EC_DAEMON names another binary.
TEST_VENV = $(CURDIR)/build-wheel/test-venv
EC_DAEMON ?= $(TEST_VENV)/bin/ec-store
PY_ENV = VLLM_TARGET_DEVICE=cpu HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 EC_STORE_BIN=$(EC_DAEMON)
# Each run leaves JUnit XML in build-wheel/junit (CI's report lists the slowest tests).
JUNIT = --junitxml=$(CURDIR)/build-wheel/junit/$(1).xml
# A passing test's tmp_path is removed as it ends: the cluster tests' stores preallocate
# their segments, and a run would otherwise keep gigabytes on the disk.
PYTEST = cd /tmp && $(PY_ENV) $(TEST_VENV)/bin/python -m pytest -q -p no:cacheprovider \
  -o tmp_path_retention_policy=failed
python-install: python-wheel
	@scripts/wheel-test-env.sh $(TEST_VENV) dist/ecstore-*-$(WHEEL_TAG)-*.whl

python-test: python-install
	$(PYTEST) $(call JUNIT,python) $(CURDIR)/python/tests --ignore=$(CURDIR)/python/tests/test_sglang.py \
	  $(PYTEST_ARGS)

# The cluster's history under partitions, pauses, lagging views and churn, each history
# checked for linearizability (python/tests/test_cluster_fencing.py): make test runs 3 seeds of
# 15 s, the sanitized builds 1; this runs CHAOS_SEEDS seeds of CHAOS_SECONDS each.
CHAOS_SEEDS ?= $(shell seq -s, 1 50)
CHAOS_SECONDS ?= 60
chaos: export EC_CHAOS_SEEDS = $(CHAOS_SEEDS)
chaos: export EC_CHAOS_SECONDS = $(CHAOS_SECONDS)
chaos: python-install
	$(PYTEST) $(call JUNIT,chaos) -s -k history $(CURDIR)/python/tests/test_cluster_fencing.py

# The Python tests that start a daemon, against EC_DAEMON, with the installed package (made
# once when absent): what a sanitized build's daemon is checked with.
python-daemon-test:
	@[ -x $(TEST_VENV)/bin/python ] || $(MAKE) python-install
	$(PYTEST) $(call JUNIT,daemon-$(notdir $(BUILD))) -m daemon $(CURDIR)/python/tests \
	  --ignore=$(CURDIR)/python/tests/test_sglang.py

# On the GPU machine, with a build made here and carried there (docs/development.md): the
# device-tier tests, which fail instead of skipping when no GPU is found, and the CUDA
# Python tests. BUILD (absolute, or relative to the tree) holds ecstore_tests, ec-store and
# python/ecstore; a folder made by scripts/gpu-bundle.sh runs them through its own runner.
GPU_BUILD = $(abspath $(BUILD))
test-gpu:
	@if [ -x $(GPU_BUILD)/run-gpu-tests.sh ]; then exec $(GPU_BUILD)/run-gpu-tests.sh; fi; \
	EC_REQUIRE_GPU=1 EC_STORE_BIN=$(GPU_BUILD)/ec-store $(GPU_BUILD)/ecstore_tests \
	  --gtest_filter='Device*' && \
	cd /tmp && PYTHONPATH=$(GPU_BUILD)/python EC_STORE_BIN=$(GPU_BUILD)/ec-store \
	  python3 -m pytest -q -p no:cacheprovider -rs $(CURDIR)/python/tests/test_cuda.py \
	  $(CURDIR)/python/tests/test_cuda_peer.py

# The extension for a developer's edit-and-run loop, for the venv's Python, in build-py
# (import it with PYTHONPATH=build-py/python); the suites use the installed wheel.
python-ext: deps
	@VENV=$$(scripts/python-env.sh) && \
	cmake -S . -B build-py -DCMAKE_BUILD_TYPE=Release -DEC_BUILD_PYTHON=ON -DEC_BUILD_TESTS=OFF \
	  -DEC_BUILD_BENCH=OFF -DPython_EXECUTABLE=$$VENV/bin/python >/dev/null && \
	cmake --build build-py -j $(JOBS) --target _ecstore

# The SGLang backend against SGLang 0.5.23's own classes, in the SGLang venv
# (scripts/sglang-env.sh: SGLang over the vLLM venv's torch), importing the installed wheel's
# package. Fails, not skips, without it.
sglang-test: python-install
	@VENV=$$(scripts/sglang-env.sh) && SITE=$$($(TEST_VENV)/bin/python -c \
	  'import sysconfig; print(sysconfig.get_paths()["purelib"])') && \
	cd /tmp && EC_REQUIRE_SGLANG=1 PYTHONPATH=$$SITE $(PY_ENV) $$VENV/bin/python -m pytest -q \
	  -p no:cacheprovider $(call JUNIT,sglang) $(CURDIR)/python/tests/test_sglang.py

# `pip wheel .` as a user runs it, for PYTHON (default python3, the Python of the test venv),
# in a small venv of its own (scripts/build-wheel.sh: build isolation, auditwheel, then the
# wheel installed offline into a fresh venv and run). `make python-wheels` does it for each
# CPython of WHEEL_PYTHONS (3.10 to 3.13 where pyenv has them).
PYTHON ?= python3
WHEEL_TAG = $(shell $(PYTHON) -c 'import sys; print("cp%d%d" % sys.version_info[:2])')
WHEEL_PYTHONS ?= $(wildcard $(HOME)/.pyenv/versions/3.1[0-3].*/bin/python3)
python-wheel: deps
	@scripts/build-wheel.sh $(PYTHON)

python-wheels: deps
	@[ -n "$(WHEEL_PYTHONS)" ] || { echo "python-wheels: no CPython 3.10-3.13 (set WHEEL_PYTHONS)" >&2; exit 1; }
	@for py in $(WHEEL_PYTHONS); do scripts/build-wheel.sh $$py || exit 1; done

# Real RDMA verbs under Soft-RoCE in a QEMU VM (also part of `make test`).
test-rdma: build
	cd $(BUILD) && ctest --output-on-failure -L vm

# The rdma bench workload inside the Soft-RoCE VM (emulated: correctness, not NIC speed).
bench-rdma: build
	tests/rdma-vm/run.sh $(BUILD)/rdma-vm tests/rdma-vm/bench.sh $(BUILD)/ec-store-bench

# The soak test (docs/operations.md): SOAK_SECONDS of chaos against the daemon of BUILD,
# driven through the installed package, then every acknowledged-durable entry checked. Root
# runs the disk-full phase on a tmpfs. `make test` runs it for 60 s.
SOAK_SECONDS ?= 600
soak:
	@[ -x $(TEST_VENV)/bin/python ] || $(MAKE) python-install
	$(TEST_VENV)/bin/python tests/soak.py --bin $(CURDIR)/$(BUILD)/ec-store \
	  --seconds $(SOAK_SECONDS) $(SOAK_ARGS)

bench: build
	$(BUILD)/ec-store-bench --dir ./bench-out/store --json bench-out/results.json --png bench-out/results.png

bench-quick: build
	$(BUILD)/ec-store-bench --quick --dir ./bench-out/store --json bench-out/results.json --png bench-out/results.png

# The library as shared objects without RDMA or CUDA (-DBUILD_SHARED_LIBS=ON
# -DEC_WITH_RDMA=OFF -DEC_WITH_CUDA=OFF): links no verbs; installed into a scratch prefix and
# linked by the find_package and pkg-config consumers (tests/consumer/run.sh); and the
# transport and CLI tests, which are what runs differently without verbs.
SHARED_TESTS = ^(installed_library_consumer|cli_end_to_end|(Net|NetShm|Protocol|ServerTransport)\.|Transports/)
test-shared: deps
	@cmake -S . -B build-shared -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=ON \
	  -DEC_WITH_RDMA=OFF -DEC_WITH_CUDA=OFF -DEC_BUILD_BENCH=OFF $(UNITY) >/dev/null
	@cmake --build build-shared -j $(JOBS)
	@! ldd build-shared/ec-store | grep -E 'libibverbs|librdmacm' || \
	  (echo "ec-store built with EC_WITH_RDMA=OFF links verbs" && false)
	cd build-shared && $(CTEST) -R '$(SHARED_TESTS)'

# Sanitizer builds: the C++ suite instrumented, then the Python tests that start a daemon
# (the sanitized one, driven by the installed package) and the soak.
# clang's -Wthread-safety then checks every target's GUARDED_BY / REQUIRES (base/mutex.h):
# a lock-discipline error fails the build.
# vLLM's CPU platform puts libraries in LD_PRELOAD for the rest of the process, and the daemons
# the Python tests start inherit it: ASan's check that its runtime comes first would refuse them.
# A smaller quarantine (freed memory held back to catch use after free; 256 MiB by default) and,
# under both sanitizers, more room in the soak's RSS bound for their shadow memory: under ASan
# the daemon reached 587 MiB with the default quarantine, 223-234 MiB with 8-16 MiB; under TSan
# 249 MiB (its bound without them: 256 MiB).
SANITIZER_SOAK = SOAK_ARGS=--rss-slack-mib=352
# The sanitizer and shared builds compile as unity builds (CMAKE_UNITY_BUILD: 8 sources per
# compiler run), in about half the time; the plain build in build/ compiles each file on its
# own, so a file that misses an include still fails there. Both sanitizers build with clang:
# gcc's ASan and UBSan at -O3 took four times as long over the same unity sources.
UNITY = -DCMAKE_UNITY_BUILD=ON -DCMAKE_UNITY_BUILD_BATCH_SIZE=8
CLANG = -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++
sanitized-test: build
	cd $(BUILD) && $(CTEST)
	EC_CHAOS_SEEDS=1 $(MAKE) python-daemon-test EC_DAEMON=$(CURDIR)/$(BUILD)/ec-store
	$(MAKE) soak SOAK_SECONDS=60
asan:
	ASAN_OPTIONS=verify_asan_link_order=0:quarantine_size_mb=8 $(MAKE) sanitized-test \
	  BUILD=build-asan SANITIZE=address $(SANITIZER_SOAK) CMAKE_EXTRA="$(CLANG) $(UNITY)"
tsan:
	TSAN_OPTIONS=suppressions=$(CURDIR)/tests/tsan.supp $(MAKE) sanitized-test BUILD=build-tsan \
	  SANITIZE=thread $(SANITIZER_SOAK) CMAKE_EXTRA="$(CLANG) $(UNITY)"

# The house rules (scripts/house_rules.py): file and function lengths, no tracked build
# output, no issue, date or machine in a comment. CI runs it.
house-rules:
	@VENV=$$(scripts/tools-env.sh) && $$VENV/bin/python scripts/house_rules.py

format:
	clang-format -i $$(git ls-files '*.cc' '*.h')

# Fails when any tracked C++ file is not .clang-format clean (CI runs it).
format-check:
	clang-format --dry-run -Werror $$(git ls-files '*.cc' '*.h')

clean:
	rm -rf build build-asan build-tsan build-shared build-py build-wheel dist .ec-store bench-out
