#!/usr/bin/env bash
# Builds the ecstore wheel for one Python as a user's `pip wheel .` does (build isolation:
# pyproject.toml's build requirements, fetched by pip), repairs it into a manylinux wheel in
# dist/ (auditwheel: the shared libraries it needs vendored, the oldest tag this build's
# glibc allows), then checks it in a fresh venv of that Python (scripts/check-wheel.py).
# Usage: scripts/build-wheel.sh [PYTHON]   (default: python3)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${1:-python3}
VENV=$(scripts/wheel-env.sh "$PY")
tag=$("$VENV/bin/python" -c 'import sys; print("cp%d%d" % sys.version_info[:2])')
raw=build-wheel/raw-$tag deps=build-wheel/deps-$tag
rm -rf "$raw" dist/ecstore-*-"$tag"-*.whl
"$VENV/bin/python" -m pip wheel -q --no-deps -w "$raw" .
PATH=$VENV/bin:$PATH "$VENV/bin/auditwheel" repair --plat auto -w dist "$raw"/ecstore-*.whl \
  >/dev/null
"$VENV/bin/python" -m pip download -q --only-binary :all: -d "$deps" numpy
"$VENV/bin/python" scripts/check-wheel.py dist/ecstore-*-"$tag"-*.whl "$deps"
