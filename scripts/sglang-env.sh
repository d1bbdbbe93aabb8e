#!/usr/bin/env bash
# Creates (once) and prints the path of the venv the SGLang backend's tests run in: SGLang
# 0.5.23 on top of the vLLM venv (scripts/python-env.sh), whose torch, transformers and
# numpy it reuses through a .pth line, so that it adds ~300 MB instead of SGLang's full
# set of CUDA kernels (flashinfer, deep-ep, ...), which its embedding cache does not import.
# It lives outside the source tree (EC_SGLANG_VENV, default ~/.cache/ec-store/sglang-venv).
set -euo pipefail
BASE=$("$(dirname "$0")/python-env.sh")
VENV=${EC_SGLANG_VENV:-$HOME/.cache/ec-store/sglang-venv}
ready() {
  [ -x "$VENV/bin/python" ] && "$VENV/bin/python" - <<'PY' 2>/dev/null
import importlib.metadata as m
assert m.version("sglang") == "0.5.23"
from sglang.srt.mem_cache.embedding_cache_controller import EmbeddingCacheController
PY
}
if ! ready; then
  echo "sglang-env: installing SGLang 0.5.23 into $VENV (once)" >&2
  rm -rf "$VENV"
  "$BASE/bin/python" -m venv "$VENV"
  site=$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  "$BASE/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])' \
    >"$site/ec_store_base_venv.pth"
  # SGLang itself without its dependency list (it pins its CUDA kernels); then the two
  # modules its embedding cache's imports need that the vLLM venv lacks.
  "$VENV/bin/pip" install -q --no-deps sglang==0.5.23 >&2
  "$VENV/bin/pip" install -q ipython gguf >&2
  ready || { echo "sglang-env: the venv in $VENV cannot import SGLang's embedding cache" >&2; exit 1; }
fi
echo "$VENV"
