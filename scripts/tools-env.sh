#!/usr/bin/env bash
# Creates (once) and prints the path of a small venv with the checking tools CI runs that
# Debian does not package: lizard (function lengths, scripts/house_rules.py), and the official
# Kubernetes client with PyYAML (the manifests' check, scripts/check_manifests.py). It lives outside
# the source tree (EC_TOOLS_VENV, default ~/.cache/ec-store/tools-venv), apart from the vLLM
# venv, so adding a tool never touches that one.
set -euo pipefail
VENV=${EC_TOOLS_VENV:-$HOME/.cache/ec-store/tools-venv}
TOOLS=(lizard==1.24.3 kubernetes==37.0.3 pyyaml==6.0.3)
ready() { [ -x "$VENV/bin/python" ] && "$VENV/bin/python" -c 'import lizard, kubernetes, yaml' 2>/dev/null; }
if ! ready; then
  echo "tools-env: installing ${TOOLS[*]} into $VENV" >&2
  [ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q "${TOOLS[@]}" >&2
  ready || { echo "tools-env: $VENV cannot import lizard, kubernetes or yaml" >&2; exit 1; }
fi
echo "$VENV"
