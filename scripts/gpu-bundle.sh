#!/usr/bin/env bash
# Gathers what `make test-gpu` and the GPU benches need from a CUDA build into one folder that
# can be copied to a GPU machine lacking this machine's libraries (docs/development.md):
#   scripts/gpu-bundle.sh BUILD OUT
# OUT then holds ecstore_tests, ec-store, ec-store-bench, python/ecstore (the package and its
# extension) and lib/ (every shared library they link beyond the C and C++ runtimes). There:
#   LD_LIBRARY_PATH=OUT/lib make test-gpu BUILD=OUT
set -euo pipefail
build=${1:?usage: gpu-bundle.sh BUILD OUT}
out=${2:?usage: gpu-bundle.sh BUILD OUT}
rm -rf "$out"
mkdir -p "$out/lib" "$out/python"
bins=()
[ -x "$build/ec-store" ] || { echo "gpu-bundle: $build/ec-store is missing: build it first" >&2; exit 1; }
for b in ecstore_tests ec-store ec-store-bench; do
  if [ -x "$build/$b" ]; then cp "$build/$b" "$out/" && bins+=("$out/$b"); else echo "gpu-bundle: no $b"; fi
done
cp -r "$build/python/ecstore" "$out/python/"
find "$out/python" -name __pycache__ -prune -exec rm -rf {} +
# The C and C++ runtimes and the CUDA driver come with the GPU machine; the rest travels.
for f in "${bins[@]}" "$out"/python/ecstore/_ecstore*.so; do
  ldd "$f" | awk '$2 == "=>" && $3 ~ /^\// {print $3}'
done | sort -u | grep -Ev '/(libc|libm|libstdc\+\+|libgcc_s|libpthread|libdl|librt|libresolv|ld-linux[^/]*|libcuda)\.so' |
  while read -r lib; do cp -L "$lib" "$out/lib/"; done
strip --strip-unneeded "${bins[@]}" 2>/dev/null || true
du -sh "$out"
