#!/usr/bin/env bash
# A cluster with trust end to end, on a real etcd run as production etcds are: https,
# --client-cert-auth, `etcdctl auth enable` with a user scoped to ec-store's keys. Three
# nodes serve TLS with client certificates required; a client reaches them through the
# cluster; a node record written into etcd by hand, for a daemon whose certificate names
# another node, receives nothing and serves nothing.
# Usage: tests/cluster_tls_test.sh path/to/ec-store   (exit 77: skipped, etcd not installed)
set -euo pipefail
EC=$(realpath "$1")
if ! command -v etcd >/dev/null || ! command -v etcdctl >/dev/null; then
  echo "SKIP: etcd is not installed (scripts/install-deps.sh installs etcd-server, etcd-client)"
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

# One CA: etcd's certificate, etcd clients' (root for the set-up, ec-store for the nodes and
# clients), the nodes' (each carries its member URI, ecstore://CLUSTER/node/ID, and no
# address), a rogue's that names the address a record claims but no member URI, and an
# engine's client certificate.
K=(-newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes)
openssl req -x509 "${K[@]}" -days 2 -subj /CN=test-ca -keyout ca.key -out ca.crt 2>/dev/null
issue() {  # issue FILE SUBJECT-OR-CN [SANS]
  local subj=$2
  [ "${subj#/}" = "$subj" ] && subj="/CN=$2"
  openssl req "${K[@]}" -subj "$subj" -keyout "$1.key" -out "$1.csr" 2>/dev/null
  if [ -n "${3:-}" ]; then printf 'subjectAltName=%s\n' "$3" >"$1.ext"; else : >"$1.ext"; fi
  openssl x509 -req -in "$1.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -days 2 \
    -extfile "$1.ext" -out "$1.crt" 2>/dev/null
}
issue etcd etcd IP:127.0.0.1
issue root root
# etcd's JSON gateway refuses a certificate that has a CN once auth is on (it would not use
# it): ec-store's etcd certificate has none, and its user proves itself by password.
issue ecstore /O=ec-store
for n in node-a node-b node-c; do issue $n $n URI:ecstore://trusted/node/$n; done
issue rogue rogue DNS:rogue,IP:127.0.0.1
issue plain node-d DNS:node-d,IP:127.0.0.1
issue engine engine

CP=$(port)
PP=$(port)
etcd --data-dir etcd --listen-client-urls "https://127.0.0.1:$CP" \
  --advertise-client-urls "https://127.0.0.1:$CP" --listen-peer-urls "http://127.0.0.1:$PP" \
  --initial-advertise-peer-urls "http://127.0.0.1:$PP" --initial-cluster "default=http://127.0.0.1:$PP" \
  --cert-file etcd.crt --key-file etcd.key --client-cert-auth --trusted-ca-file ca.crt \
  >etcd.log 2>&1 &
pids+=($!)
ctl() { ETCDCTL_API=3 etcdctl --endpoints "https://127.0.0.1:$CP" --cacert ca.crt --cert root.crt \
          --key root.key "$@"; }
for _ in $(seq 100); do ctl endpoint health >/dev/null 2>&1 && break; sleep 0.1; done
ctl user add root --new-user-password=rootpw >/dev/null
ctl user grant-role root root >/dev/null
ctl user add ecstore --new-user-password=ecpw >/dev/null
ctl role add ecstore >/dev/null
ctl role grant-permission ecstore --prefix=true readwrite /ec-store/ >/dev/null
ctl user grant-role ecstore ecstore >/dev/null
ctl auth enable >/dev/null
printf ecpw >etcd.pw

E="etcds://127.0.0.1:$CP/trusted"
ETCD=(--etcd-ca ca.crt --etcd-cert ecstore.crt --etcd-key ecstore.key --etcd-user ecstore
      --etcd-password-file etcd.pw)
check "without a client certificate etcd refuses" \
  bash -c "! \"$EC\" --cluster $E --etcd-ca ca.crt --timeout 2s cluster status >/dev/null 2>&1"
check "without the etcd user's password etcd refuses" \
  bash -c "! \"$EC\" --cluster $E --etcd-ca ca.crt --etcd-cert ecstore.crt --etcd-key ecstore.key cluster status >/dev/null 2>&1"

serve() {  # serve NODE: a node with its own certificate; its pid in PID
  local n=$1
  "$EC" --dir "$T/$n" --pool-size 16MiB --cluster "$E" "${ETCD[@]}" --tls-cert $n.crt \
    --tls-key $n.key --tls-ca ca.crt serve --listen 127.0.0.1:0 --node-id $n --cluster-ttl 3s \
    >"$n.out" 2>"$n.err" &
  PID=$!
  pids+=($PID)
  for _ in $(seq 100); do grep -q "port" "$n.out" 2>/dev/null && break; sleep 0.1; done
}
CLIENT=(--cluster "$E" "${ETCD[@]}" --tls-ca ca.crt --tls-cert engine.crt --tls-key engine.key)
nodes() { "$EC" "${CLIENT[@]}" --json cluster status |
          python3 -c 'import json,sys; print(" ".join(sorted(n["id"] for n in json.load(sys.stdin)["nodes"])))'; }
"$EC" --dir "$T/node-d" --pool-size 16MiB --cluster "$E" "${ETCD[@]}" --tls-cert plain.crt \
  --tls-key plain.key --tls-ca ca.crt serve --listen 127.0.0.1:0 --node-id node-d \
  >node-d.out 2>node-d.err && rc=0 || rc=$?
check "a member whose certificate lacks its member URI is refused at start (exit $rc)" \
  grep -q "does not carry ecstore://trusted/node/node-d" node-d.err
serve node-a
serve node-b
serve node-c
check "three nodes joined through an etcd that requires certificates and auth" \
  test "$(nodes)" = "node-a node-b node-c"
head -c 65536 /dev/urandom >v.bin
for i in $(seq 12); do
  timeout 20 "$EC" "${CLIENT[@]}" put k$i v.bin --dtype U8 --shape 65536 >/dev/null
done
ok=0
for i in $(seq 12); do
  "$EC" "${CLIENT[@]}" get k$i -o got.bin >/dev/null 2>&1 && cmp -s v.bin got.bin && ok=$((ok + 1))
done
check "puts and gets through the cluster over TLS are byte-exact (12 of 12)" test $ok = 12

# A record added by hand under a lease (one without is no member): it claims to be node-x at
# the address of a daemon whose (valid) certificate names that address, but carries no member
# URI: an address proves nothing.
"$EC" --dir "$T/rogue" --pool-size 16MiB --tls-cert rogue.crt --tls-key rogue.key --tls-ca ca.crt \
  serve --listen 127.0.0.1:0 >rogue.out 2>rogue.err &
pids+=($!)
for _ in $(seq 100); do grep -q "port" rogue.out 2>/dev/null && break; sleep 0.1; done
RPORT=$(sed -n 's/.*(port \([0-9]*\).*/\1/p' rogue.out)
REC=$(ctl get --print-value-only /ec-store/trusted/nodes/node-a)
ROGUE=$(python3 -c 'import json,sys; r=json.loads(sys.argv[1]); r["id"]="node-x"; r["tcp"]="127.0.0.1:'$RPORT'"; r.pop("unix", None); r.pop("unix_path", None); print(json.dumps(r))' "$REC")
LEASE=$(ctl lease grant 600 | awk '{print $2}')
ctl put --lease="$LEASE" /ec-store/trusted/nodes/node-x "$ROGUE" >/dev/null
for _ in $(seq 50); do [ "$(nodes)" = "node-a node-b node-c node-x" ] && break; sleep 0.1; done
check "the hand-written record is a member in etcd" test "$(nodes)" = "node-a node-b node-c node-x"
for i in $(seq 13 60); do
  "$EC" "${CLIENT[@]}" put k$i v.bin --dtype U8 --shape 65536 >/dev/null 2>&1 || true
done
got=$("$EC" --server tls://127.0.0.1:$RPORT --tls-ca ca.crt --tls-cert engine.crt \
        --tls-key engine.key --tls-server-name rogue --json stats | python3 -c 'import json,sys; print(json.load(sys.stdin)["keydir"]["entries"])')
check "the unproven node received no put (it holds $got entries)" test "$got" = 0
ok=0
for i in $(seq 1 12); do
  "$EC" "${CLIENT[@]}" get k$i -o got.bin >/dev/null 2>&1 && cmp -s v.bin got.bin && ok=$((ok + 1))
done
check "entries the honest nodes hold are still read (12 of 12)" test $ok = 12
echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
