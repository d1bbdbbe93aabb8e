#!/usr/bin/env bash
# Installs a built ecstore wheel into the venv the Python suites run in, as a user installs
# it: VENV (made once) sees the vLLM venv's packages (scripts/python-env.sh: vLLM, torch,
# pytest) through a .pth line, and holds nothing of ecstore but the wheel's files, so the
# tests import the installed package and start the wheel's own `ec-store`.
# Usage: scripts/wheel-test-env.sh VENV WHEEL
set -euo pipefail
VENV=$(realpath -m "$1")
WHEEL=$(realpath -m "$2")
[ -f "$WHEEL" ] || { echo "wheel-test-env: no wheel at $WHEEL (make python-wheel builds it)" >&2; exit 1; }
BASE=$("$(dirname "$0")/python-env.sh")
if [ ! -x "$VENV/bin/python" ]; then
  "$BASE/bin/python" -m venv "$VENV"
  site=$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  "$BASE/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])' \
    >"$site/ec_store_base_venv.pth"
fi
"$VENV/bin/python" -m pip install -q --no-index --no-deps --force-reinstall "$WHEEL"
# ecstore.dynamo's test runs against Dynamo's runtime from PyPI (in this venv only).
"$VENV/bin/python" -c 'import importlib.metadata as m; assert m.version("ai-dynamo-runtime") == "1.6.1"' \
  2>/dev/null || "$VENV/bin/python" -m pip install -q ai-dynamo-runtime==1.6.1
cd /tmp && "$VENV/bin/python" - "$VENV" <<'PY'
import os, sys, ecstore
venv = os.path.realpath(sys.argv[1])
assert os.path.realpath(ecstore.__file__).startswith(venv), \
    f"ecstore comes from {ecstore.__file__}, not the wheel installed in {venv}"
print(f"wheel-test-env: ecstore {getattr(ecstore, '__version__', '')} installed in {venv}")
PY
