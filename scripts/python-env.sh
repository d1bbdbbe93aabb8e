#!/usr/bin/env bash
# Creates (once) and prints the path of the Python venv the Python suite runs in: vLLM
# 0.33.0 with torch (~8.6 GB), pytest and numpy (the wheel is built without it:
# scripts/build-wheel.sh). It lives outside the
# source tree (EC_PY_VENV, default ~/.cache/ec-store/py-venv) and is reused when present.
#
# vLLM 0.33.0's wheel pins certifi>=2026.10.19, newer than any certifi the package
# registry here offers (2026.10.18); uv's --override relaxes that one pin and nothing else.
set -euo pipefail
VENV=${EC_PY_VENV:-$HOME/.cache/ec-store/py-venv}
ready() {
  [ -x "$VENV/bin/python" ] && "$VENV/bin/python" - <<'PY' 2>/dev/null
import importlib.metadata as m
assert m.version("vllm") == "0.33.0"
for p in ("pytest", "numpy", "torch"):
    m.version(p)
PY
}
if ! ready; then
  # Completed where something is missing, never removed: it may be a venv the user named.
  if [ -e "$VENV" ] && [ ! -x "$VENV/bin/python" ]; then
    echo "python-env: $VENV exists and is not a venv; point EC_PY_VENV elsewhere" >&2
    exit 1
  fi
  echo "python-env: installing vLLM 0.33.0 and the test tools into $VENV (once)" >&2
  [ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q --upgrade pip uv >&2
  overrides=$(mktemp)
  echo "certifi>=2026.10.18" >"$overrides"
  VLLM_TARGET_DEVICE=cpu "$VENV/bin/uv" pip install -q --python "$VENV/bin/python" \
    --override "$overrides" vllm==0.33.0 pytest numpy >&2
  rm -f "$overrides"
  ready || { echo "python-env: the venv in $VENV is incomplete" >&2; exit 1; }
fi
echo "$VENV"
