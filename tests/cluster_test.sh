#!/usr/bin/env bash
# Cluster membership end to end against a real etcd on loopback: daemons started with
# --cluster register under their cluster's name, a clean stop leaves at once, a SIGKILLed
# node leaves when its lease lapses, a restart with the same directory keeps its id, two
# cluster names on one etcd never see each other's nodes, a key with replicas is one entry
# to the CLI (stats: entries and copies apart), and a stats sum missing a node says so.
# Usage: tests/cluster_test.sh path/to/ec-store   (exit 77: skipped, etcd not installed)
set -euo pipefail
EC=$(realpath "$1")
if ! command -v etcd >/dev/null; then
  echo "SKIP: etcd is not installed (scripts/install-deps.sh installs etcd-server)"
  exit 77
fi
T=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done; rm -rf "$T"; }
trap cleanup EXIT
cd "$T"
pass=0
fail=0
check() { local what=$1; shift; if "$@"; then pass=$((pass + 1)); echo "ok   - $what"
          else fail=$((fail + 1)); echo "FAIL - $what"; fi; }
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

CP=$(port)
PP=$(port)
etcd --data-dir "$T/etcd" --listen-client-urls "http://127.0.0.1:$CP" \
  --advertise-client-urls "http://127.0.0.1:$CP" --listen-peer-urls "http://127.0.0.1:$PP" \
  --initial-advertise-peer-urls "http://127.0.0.1:$PP" \
  --initial-cluster "default=http://127.0.0.1:$PP" >etcd.log 2>&1 &
pids+=($!)
E="etcd://127.0.0.1:$CP"
for _ in $(seq 100); do "$EC" --cluster "$E/c1" cluster status >/dev/null 2>&1 && break; sleep 0.1; done

serve() {  # serve NAME CLUSTER [ARGS...]: a node in its own directory; its pid in PID
  local name=$1 cl=$2; shift 2
  "$EC" --dir "$T/$name" --pool-size 16MiB --cluster "$E/$cl" serve --listen 127.0.0.1:0 \
    --cluster-ttl 2s "$@" >"$name.out" 2>"$name.err" &
  PID=$!
  pids+=($PID)
  for _ in $(seq 100); do grep -q "port" "$name.out" 2>/dev/null && break; sleep 0.1; done
}
nodes() { "$EC" --cluster "$E/$1" --json cluster status |
          python3 -c 'import json,sys; print(" ".join(n["id"] for n in json.load(sys.stdin)["nodes"]))'; }

serve a c1 --node-id node-a; A=$PID
serve b c1; B=$PID
serve x c2 --node-id node-x
B_ID=$(cat "$T/b/node-id")
check "both c1 nodes are members" test "$(nodes c1)" = "$(echo "node-a $B_ID" | tr ' ' '\n' | sort | tr '\n' ' ' | sed 's/ $//')"
check "a node without --node-id gets one kept in its directory" test -n "$B_ID"
check "c2 sees only its own node" test "$(nodes c2)" = node-x
A_ADDR=$("$EC" --cluster "$E/c1" --json cluster status | python3 -c 'import json,sys
print([n["tcp"] for n in json.load(sys.stdin)["nodes"] if n["id"]=="node-a"][0])')
check "a member's address is the one it serves on" \
  grep -q "port ${A_ADDR##*:}" a.out
check "a member's address reaches it" bash -c "\"$EC\" --server $A_ADDR stats >/dev/null"
kill -TERM $A; wait $A || true
check "a clean stop leaves at once" test "$(nodes c1)" = "$B_ID"
kill -KILL $B; wait $B 2>/dev/null || true
left=no
for _ in $(seq 80); do [ -z "$(nodes c1)" ] && left=yes && break; sleep 0.1; done
check "a killed node leaves when its 2 s lease lapses" test $left = yes
serve b c1
check "a restart in the same directory keeps its id" test "$(nodes c1)" = "$B_ID"
check "and counts its incarnation" test "$(cat "$T/b/node-incarnation")" = 2
# Replicas are one entry to the CLI; a stats sum with a node down says it is partial.
serve c c1 --node-id node-c; C=$PID
for _ in $(seq 50); do [ "$(nodes c1 | wc -w)" = 2 ] && break; sleep 0.1; done
head -c 4096 /dev/urandom >v.bin
"$EC" --cluster "$E/c1" --replicas 2 put k1 v.bin --dtype U8 --shape 1,4096 >/dev/null
check "a key with two replicas is got without --namespace" \
  bash -c "\"$EC\" --cluster $E/c1 get k1 -o got.bin && cmp -s v.bin got.bin"
"$EC" --cluster "$E/c1" --json stats >stats.json
check "stats through the cluster says it is whole, entries and copies apart" \
  python3 -c 'import json; j=json.load(open("stats.json")); assert j["partial"] is False and j["cluster"] == {"entries": 1, "copies": 2}, j'
check "and evicted without --namespace" \
  bash -c "\"$EC\" --cluster $E/c1 evict k1 | grep -q 'evicted 1 entries'"
"$EC" --cluster "$E/c1" --json stats >stats.json
check "and then it is no entry in no copies" \
  python3 -c 'import json; j=json.load(open("stats.json")); assert j["cluster"] == {"entries": 0, "copies": 0}, j'
kill -STOP $C
rc=0
"$EC" --cluster "$E/c1" --timeout 1s --json stats >stats.json 2>stats.err || rc=$?
kill -CONT $C
check "with a node not answering, stats exits 1 and says partial" \
  python3 -c "import json; j=json.load(open('stats.json')); assert $rc == 1 and j['partial'] and j['not_answering'] == ['node-c']"
rc=0
"$EC" --cluster tcp://x:1/c cluster status 2>bad.err || rc=$?
check "a cluster address in no known form is a usage error naming the form" \
  bash -c "[ $rc -eq 2 ] && grep -q 'etcd://HOST:PORT' bad.err"
echo "cluster: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
