#!/usr/bin/env bash
# scripts/house_rules.py on a scratch tree: a 600-line library file passes, a 601-line one
# fails and is named, a test file of any length and a tracked wheel are told apart; a bare
# mutex and a room missing from docs/architecture.md fail.
# Usage: tests/house_rules_test.sh PYTHON   (exit 77: skipped, lizard not installed)
set -euo pipefail
PY=$1
SRC=$(cd "$(dirname "$0")/.." && pwd)
VENV=$("$SRC/scripts/tools-env.sh" 2>/dev/null) && PY=$VENV/bin/python ||
  { "$PY" -c 'import lizard' 2>/dev/null || { echo "SKIP: lizard is not installed (scripts/tools-env.sh)"; exit 77; }; }
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
cd "$T"
git init -q .
mkdir -p store tests
lines() { for i in $(seq "$1"); do echo "int v$i = $i;"; done; }
lines 600 > store/fine.cc
lines 900 > tests/long_test.cc
git add -A
"$PY" "$SRC/scripts/house_rules.py" "$T" > ok.out || { cat ok.out; echo "FAIL: 600 lines refused"; exit 1; }
lines 601 > store/big.cc
git add store/big.cc
if "$PY" "$SRC/scripts/house_rules.py" "$T" > big.out; then
  cat big.out; echo "FAIL: a 601-line library file passed"; exit 1
fi
grep -q "^store/big.cc: 601 lines, over 600" big.out || { cat big.out; echo "FAIL: not named"; exit 1; }
! grep -q "fine.cc\|long_test.cc" big.out || { cat big.out; echo "FAIL: a file within the rules named"; exit 1; }
git rm -qf store/big.cc && : > pkg.whl && git add pkg.whl
! "$PY" "$SRC/scripts/house_rules.py" "$T" > whl.out && grep -q "^pkg.whl: build output" whl.out ||
  { cat whl.out; echo "FAIL: a tracked wheel passed"; exit 1; }
printf '// Measured on the H100 host.\nint x;\n' > store/note.cc && git rm -q --cached pkg.whl && git add store/note.cc
! "$PY" "$SRC/scripts/house_rules.py" "$T" > c.out && grep -q "^store/note.cc:1: a comment names a machine" c.out ||
  { cat c.out; echo "FAIL: a machine in a comment passed"; exit 1; }
git rm -qf store/note.cc && mkdir -p net && printf '#include "store/store.h"\n' > net/reach.h &&
  printf '#include "net/b.h"\n' > net/a.h && printf '#include "net/a.h"\n' > net/b.h && git add net
! "$PY" "$SRC/scripts/house_rules.py" "$T" > r.out &&
  grep -q '^net/reach.h:1: includes store/store.h, a room net/ may not see' r.out &&
  grep -q 'includes run in a circle: net/a.h -> net/b.h -> net/a.h' r.out ||
  { cat r.out; echo "FAIL: an include into a room net/ may not see, or a circle, passed"; exit 1; }
git rm -rqf net && printf 'struct S {\n  mutable std::mutex mu;\n};\n' > tests/lock_test.cc && git add tests
! "$PY" "$SRC/scripts/house_rules.py" "$T" > l.out &&
  grep -q "^tests/lock_test.cc:2: a bare std::mutex: use base/mutex.h's Mutex" l.out ||
  { cat l.out; echo "FAIL: a bare std::mutex, unseen by the lock analysis, passed"; exit 1; }
git rm -qf tests/lock_test.cc && mkdir -p docs && printf '| `tests/` | x |\n' > docs/architecture.md &&
  git add docs
! "$PY" "$SRC/scripts/house_rules.py" "$T" > m.out &&
  grep -q "^docs/architecture.md: the room table has no row for store/" m.out ||
  { cat m.out; echo "FAIL: a room missing from the map passed"; exit 1; }
echo "house rules: 600 lines pass; 601 lines, a tracked wheel, a machine in a comment, an include"
echo "outside the rooms, a circle of includes, a bare mutex and a room off the map fail"
cat big.out
