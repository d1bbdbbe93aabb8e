#!/usr/bin/env bash
# Gathers what `make test-gpu` and the GPU benches need from a CUDA build into one folder that
# can be copied to a GPU machine lacking this machine's libraries (docs/development.md):
#   scripts/gpu-bundle.sh BUILD OUT        (absolute or relative paths)
# OUT then holds ecstore_tests, ec-store, ec-store-bench, python/ecstore (the package and its
# extension), tests/ (the CUDA Python tests), lib/ (every shared library they link beyond the
# C and C++ runtimes and the CUDA driver) and run-gpu-tests.sh, which runs what `make test-gpu`
# runs from anywhere, the source tree not needed:
#   OUT/run-gpu-tests.sh
# The runner puts on the library path only those of lib/ the GPU machine lacks (by soname,
# as ldconfig knows them), so that torch and the machine's own programs keep its libraries.
set -euo pipefail
build=${1:?usage: gpu-bundle.sh BUILD OUT}
out=${2:?usage: gpu-bundle.sh BUILD OUT}
src=$(cd "$(dirname "$0")/.." && pwd)
[ -x "$build/ec-store" ] || { echo "gpu-bundle: $build/ec-store is missing: build it first" >&2; exit 1; }
rm -rf "$out"
mkdir -p "$out/lib" "$out/python" "$out/tests"
bins=()
for b in ecstore_tests ec-store ec-store-bench; do
  if [ -x "$build/$b" ]; then cp "$build/$b" "$out/" && bins+=("$out/$b"); else echo "gpu-bundle: no $b"; fi
done
cp -r "$build/python/ecstore" "$out/python/"
find "$out/python" -name __pycache__ -prune -exec rm -rf {} +
cp "$src/python/tests/conftest.py" "$src/python/tests/test_cuda.py" \
   "$src/python/tests/test_cuda_peer.py" "$out/tests/"
# The C and C++ runtimes and the CUDA driver come with the GPU machine; the rest travels.
for f in "${bins[@]}" "$out"/python/ecstore/_ecstore*.so; do
  ldd "$f" | awk '$2 == "=>" && $3 ~ /^\// {print $3}'
done | sort -u | grep -Ev '/(libc|libm|libstdc\+\+|libgcc_s|libpthread|libdl|librt|libresolv|ld-linux[^/]*|libcuda)\.so' |
  while read -r lib; do cp -L "$lib" "$out/lib/"; done
strip --strip-unneeded "${bins[@]}" 2>/dev/null || true
cp "$src/scripts/run-gpu-tests.sh" "$out/"
du -sh "$out"
