#!/usr/bin/env bash
# ec-store-bench end to end, at --quick size: every row it reports for put, get_hot, get_disk,
# remote, erase, policy, index and alloc is there, each held to a limit measured in the same
# run, with finite positive figures (mixed_gpu's rows, or the reason it did not run); its store
# directory is gone afterwards; bad flags are clear errors (exit 2).
# Asserts what was measured, never how fast (timings belong in bench/, not in tests).
# Usage: tests/bench_smoke.sh path/to/ec-store-bench [remote|no-remote]
# (no-remote under ThreadSanitizer: the remote workload's server is a forked child that starts
# threads without exec, which TSan does not support.)
set -euo pipefail
BENCH=$(realpath "$1")
REMOTE=${2:-remote}
WORKLOADS=put,get_hot,get_disk,policy,index,alloc
[ "$REMOTE" = remote ] && WORKLOADS=$WORKLOADS,remote,erase
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
pass=0
fail=0
ok()  { pass=$((pass + 1)); echo "ok   - $*"; }
bad() { fail=$((fail + 1)); echo "FAIL - $*"; }
expect_error() {  # expect_error "substring" args...: exit 2 with a message naming the problem
  local want=$1; shift
  local rc=0
  "$BENCH" "$@" >"$T/out.txt" 2>"$T/err.txt" || rc=$?
  if [ "$rc" -eq 2 ] && grep -q -- "$want" "$T/err.txt"; then ok "rejects: $* ($want)"
  else bad "ec-store-bench $* exited $rc: $(cat "$T/err.txt")"; fi
}

expect_error "unknown workload 'nope'" --workloads nope
expect_error "--drift wants EVERY,STEP" --drift 1,x
expect_error "--drift wants EVERY,STEP" --drift 0,5
expect_error "--watermarks wants HIGH,LOW" --watermarks 0.5,0.9
expect_error "--index-entries wants N,N" --index-entries 1000,x
expect_error "--dir needs a value" --dir
expect_error "usage:" --no-such-flag
expect_error "STEP 9000 is more than the trace's 8000 items" --quick --workloads policy \
  --drift 100,9000 --dir "$T/bad"

"$BENCH" --quick --workloads "$WORKLOADS" --index-entries 2000 \
  --dir "$T/store" --json "$T/results.json" >"$T/report.txt" 2>"$T/progress.txt" \
  && ok "the quick bench runs" || bad "the quick bench failed: $(tail -5 "$T/progress.txt")"
[ -e "$T/store" ] && bad "the bench left its store directory" || ok "its store directory is gone"
grep -q "^== get_disk$" "$T/report.txt" && ok "the table has get_disk" || bad "no get_disk table"

python3 - "$T/results.json" "$REMOTE" <<'PY' && ok "every row is there, with its limit" || bad "rows"
import json, math, sys
rows = json.load(open(sys.argv[1]))
by = {(r["workload"], r["system"]): r for r in rows}
def need(w, s, limit=True, gbps=True):
    r = by.get((w, s))
    assert r, f"no row {w}/{s}"
    assert math.isfinite(r["p50_us"]) and r["p99_us"] >= r["p50_us"] >= 0, r
    if gbps: assert r["gbps"] > 0, r
    if limit: assert r.get("ratio_to_limit", 0) > 0, f"{w}/{s} is held to no limit"
    return r
for w, s in [("put", "ec-store"), ("get_hot", "ec-store"), ("get_disk", "ec-store"),
             ("get_disk", "ec-store-10MB+"), ("get_disk", "ec-store-hostbuf"),
             ("get_disk", "ec-store-promote"), ("get_disk", "ec-store-promote-10MB+"),
             ("get_disk", "ec-store-batch"),
             ("get_disk", "baseline")]:
    need(w, s)
for w in ["memcpy", "memcpy_puts", "memcpy_entries", "disk_read", "disk_write",
          "disk_read_entries", "disk_read_batches", "disk_read_entries_promote",
          "disk_read_entries_promote_10MB+"]:
    need(w, "limit", limit=w in ("disk_read", "disk_write"))
assert need("get_hot", "ec-store-lease", limit=False, gbps=False)["ops_per_s"] > 0
need("get_disk_during_spill", "ec-store")
need("put", "baseline")
if sys.argv[2] == "remote":
    for w, s in [("remote_get", "ec-store"), ("remote_put", "ec-store"), ("remote_put", "ec-store-same"),
                 ("shm_get", "ec-store")]:
        need(w, s)
    for w in ["socket_stream", "socket_upload", "memcpy_values"]:
        need(w, "limit", limit=False)
    for s in ["limit", "ec-store", "ec-store-keys"]:  # erase through a daemon, and its limit
        need("erase", s)
assert need("index_2k", "ec-store", limit=False, gbps=False)["ops_per_s"] > 0
assert "2000-entry store" in need("open_2k", "ec-store", limit=False, gbps=False)["note"]
for s in ["ec-store", "buddy", "first-fit"]:
    assert 0 <= need("alloc", s, limit=False, gbps=False)["fragmentation"] < 1
# The policy replay is seeded, so what each policy saves is the same on every machine.
for c in ["05", "10", "20", "50"]:
    for s in ["lru", "gdsf", "freq", "true-popularity", "popularity-5k", "belady"]:
        assert "encoder time saved" in need(f"policy_{c}%", s, limit=False, gbps=False)["note"]
assert "more than LRU" in by[("policy_10%", "freq")]["note"]
PY

# mixed_gpu needs a GPU: without one its row says so, and the bench still succeeds.
"$BENCH" --quick --workloads mixed_gpu --dir "$T/store" --json "$T/gpu.json" >/dev/null 2>&1 \
  && ok "the quick mixed_gpu runs" || bad "the quick mixed_gpu failed"
python3 - "$T/gpu.json" <<'PY' && ok "mixed_gpu reports, or says why not" || bad "mixed_gpu rows"
import json, sys
by = {(r["workload"], r["system"]): r for r in json.load(open(sys.argv[1]))}
r = by[("mixed_gpu", "ec-store")]
if r["note"].startswith("not run: "):
    assert "GPU" in r["note"] or "CUDA" in r["note"], r
else:
    assert r["gbps"] > 0 and r.get("ratio_to_baseline", 0) > 0, r
    assert by[("mixed_gpu", "baseline")]["gbps"] > 0
PY

echo "bench smoke: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
