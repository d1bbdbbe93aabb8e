#!/usr/bin/env bash
# Builds the protocol fuzzer with clang (libFuzzer + ASan + UBSan) and runs it for a bounded
# time. Usage: tests/fuzz_protocol.sh OUT_DIR [SECONDS]
set -euo pipefail
SRC=$(cd "$(dirname "$0")/.." && pwd)
OUT=$1
SECS=${2:-20}
if ! command -v clang++ >/dev/null; then
  echo "SKIP: clang++ is not installed (make deps installs it); protocol fuzzer not run"
  exit 0
fi
mkdir -p "$OUT/corpus"
clang++ -std=c++20 -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
  -I"$SRC" "$SRC/net/protocol_fuzz.cc" "$SRC/net/protocol.cc" "$SRC/net/device_put.cc" \
  "$SRC/base/status.cc" "$SRC/base/tensor_meta.cc" -o "$OUT/protocol_fuzz"
# Seeds: a valid header and a valid key body, so the fuzzer starts inside the grammar.
printf 'ECS1\x01\x00\x02\x00\x01\x00\x00\x00\x00\x00\x00\x00\x08\x00\x00\x00\x00\x00\x00\x00' > "$OUT/corpus/seed-header"
printf '\x02\x00ns\x03\x00key' > "$OUT/corpus/seed-key"
"$OUT/protocol_fuzz" -max_total_time="$SECS" -max_len=4096 -timeout=5 "$OUT/corpus" 2>&1 | tail -3
echo "protocol fuzzer: ${SECS}s without a crash"
