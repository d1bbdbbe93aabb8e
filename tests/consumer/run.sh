#!/usr/bin/env bash
# Installs the build into a scratch prefix, then builds and runs tests/consumer against it,
# once with find_package(ecstore) and once with pkg-config.
# Usage: tests/consumer/run.sh BUILD_DIR WORK_DIR
set -euo pipefail
BUILD=$(realpath -m "$1")
WORK=$(realpath -m "$2")
SRC=$(cd "$(dirname "$0")" && pwd)
rm -rf "$WORK"
mkdir -p "$WORK"
cmake --install "$BUILD" --prefix "$WORK/prefix" >/dev/null
test -f "$WORK/prefix/include/ecstore/store.h"
test -x "$WORK/prefix/bin/ec-store"
test -f "$WORK/prefix/share/ec-store/ec-store.service"
# The public headers build with the library's own headers alone: no third-party ones.
if grep -rlE '#include <(nlohmann|spdlog|fmt|CLI|liburing|sqlite3|httplib)' "$WORK/prefix/include"; then
  echo "installed headers include third-party headers (above)" >&2
  exit 1
fi
# Exactly the public headers and the library headers they include: nothing private.
ROOT=$(cd "$SRC/../.." && pwd)
want=$(cd "$ROOT" && for h in include/ecstore/*.h; do g++ -std=c++20 -MM -I. -Iinclude "$h"; done |
  tr ' \\' '\n\n' | grep '\.h$' | sed 's|^include/ecstore/||' | sort -u)
have=$(cd "$WORK/prefix/include/ecstore" && find . -name '*.h' | sed 's|^\./||' | sort)
if [ "$want" != "$have" ]; then
  echo "installed headers differ from the public ones and what they include:" >&2
  diff <(echo "$want") <(echo "$have") >&2 || true
  exit 1
fi
if grep -E '^Cflags:.* -D|/usr/local|cudalibdir' "$WORK/prefix/lib/pkgconfig/ecstore.pc"; then
  echo "ecstore.pc hands consumers a define or a path of the building machine (above)" >&2
  exit 1
fi
cmake -S "$SRC" -B "$WORK/build" -DCMAKE_PREFIX_PATH="$WORK/prefix" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$WORK/build" -j 2 >/dev/null
"$WORK/build/consumer" "$WORK/store"
"$WORK/build/consumer_net" "$WORK/store-net"
export PKG_CONFIG_PATH="$WORK/prefix/lib/pkgconfig"
# A shared build in a prefix off the loader's path: as its users run it (pkg-config sets
# no run path).
export LD_LIBRARY_PATH="$WORK/prefix/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
# shellcheck disable=SC2046
g++ -std=c++20 -o "$WORK/consumer-pc" "$SRC/main.cc" $(pkg-config --cflags --libs ecstore)
"$WORK/consumer-pc" "$WORK/store-pc"
# shellcheck disable=SC2046
g++ -std=c++20 -o "$WORK/consumer-pc-static" "$SRC/main_net.cc" \
  $(pkg-config --cflags --libs --static ecstore)
"$WORK/consumer-pc-static" "$WORK/store-pc-static"
if grep -q "^Cflags:.*-std=" "$PKG_CONFIG_PATH/ecstore.pc"; then
  echo "ecstore.pc forces a language standard on its consumers" >&2
  exit 1
fi
echo "installed library: find_package(ecstore), pkg-config and pkg-config --static consumers pass"
