#!/usr/bin/env bash
# In a folder made by scripts/gpu-bundle.sh, on the GPU machine: the device-tier tests (which
# fail instead of skipping when no GPU is found) and the CUDA Python tests -- what
# `make test-gpu` runs -- from any working directory. Only the bundled libraries this machine
# lacks go on the library path (EC_BUNDLE_ALL_LIBS=1: all of them).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
need="$here/lib-needed"
rm -rf "$need" && mkdir -p "$need"
known=$(ldconfig -p 2>/dev/null | awk '{print $1}')
for f in "$here"/lib/*; do
  so=$(basename "$f")
  if [ "${EC_BUNDLE_ALL_LIBS:-0}" = 1 ] || ! grep -qxF "$so" <<<"$known"; then ln -s "$f" "$need/$so"; fi
done
echo "run-gpu-tests: bundled libraries this machine lacks: $(ls "$need" | tr '\n' ' ')"
export LD_LIBRARY_PATH="$need${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export EC_STORE_BIN="$here/ec-store"
rc=0
EC_REQUIRE_GPU=1 "$here/ecstore_tests" --gtest_filter='Device*' || rc=1
cd /tmp && PYTHONPATH="$here/python" python3 -m pytest -q -p no:cacheprovider -rs \
  "$here/tests/test_cuda.py" "$here/tests/test_cuda_peer.py" || rc=1
exit $rc
