#!/usr/bin/env bash
# End-to-end tests of the ec-store CLI: every command, good and bad input.
# Usage: tests/cli_test.sh path/to/ec-store
set -euo pipefail
EC=$(realpath "$1")
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
cd "$T"
PY=python3
pass=0
fail=0
ok()   { pass=$((pass + 1)); echo "ok   - $*"; }
bad()  { fail=$((fail + 1)); echo "FAIL - $*"; }
check() { local what=$1; shift; if "$@"; then ok "$what"; else bad "$what"; fi; }
# expect_error "substring" cmd...: the command must exit non-zero with a one-line error naming it.
expect_error() {
  local want=$1; shift
  if "$@" >out.txt 2>err.txt; then bad "should fail: $*"; return; fi
  if grep -q -- "$want" err.txt && [ "$(wc -l <err.txt)" -le 2 ]; then ok "rejects: $* ($want)"
  else bad "error for $* lacks '$want': $(cat err.txt)"; fi
}

# expect_usage "substring" cmd...: a usage error: exit 2 and a one-line error naming it.
expect_usage() {
  local want=$1; shift
  local rc=0
  "$@" >out.txt 2>err.txt || rc=$?
  if [ "$rc" -eq 2 ] && grep -q -- "$want" err.txt && [ "$(wc -l <err.txt)" -eq 1 ]; then
    ok "usage error (2): $* ($want)"
  else bad "usage error for $* (exit $rc, want 2 and '$want'): $(cat err.txt)"; fi
}

# safetensors files like vLLM writes them, with random bf16 payloads
mk() { # mk PATH ROWS COLS [truncate_by]
  $PY - "$@" <<'PY'
import json, os, struct, sys
path, rows, cols = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
cut = int(sys.argv[4]) if len(sys.argv) > 4 else 0
data = os.urandom(rows * cols * 2)
h = json.dumps({"ec_cache": {"dtype": "BF16", "shape": [rows, cols], "data_offsets": [0, len(data)]}}).encode()
h += b" " * ((8 - len(h) % 8) % 8)
blob = struct.pack("<Q", len(h)) + h + data
open(path, "wb").write(blob[:len(blob) - cut])
PY
}
tensor_bytes() { $PY -c '
import json,struct,sys
b=open(sys.argv[1],"rb").read(); n=struct.unpack("<Q",b[:8])[0]; h=json.loads(b[8:8+n])
o=h["ec_cache"]["data_offsets"]; sys.stdout.buffer.write(b[8+n+o[0]:8+n+o[1]])' "$1"; }
jget() { $PY -c 'import json,sys; d=json.load(sys.stdin)
for k in sys.argv[1].split("."): d=d[int(k)] if isinstance(d,list) else d[k]
print(d)' "$1"; }

S="--dir $T/store --pool-size 16MiB"
mk a.safetensors 400 3584
mk b.safetensors 324 1024
mk trunc.safetensors 100 100 7

$EC $S put img-a a.safetensors >/dev/null
check "put safetensors" test $? -eq 0
J=$($EC $S --json inspect img-a)
check "inspect tier" test "$(echo "$J" | jget tier)" = disk
check "inspect bytes" test "$(echo "$J" | jget bytes)" = 2867200
check "inspect dtype" test "$(echo "$J" | jget dtype)" = BF16
check "inspect shape" test "$(echo "$J" | jget shape.1)" = 3584
check "--json is one object on one line" test "$(echo "$J" | wc -l)" = 1
check "--json checksum is 16 hex digits (no number past 2^53)" \
  $PY -c 'import json,re,sys; c=json.loads(sys.argv[1])["checksum"]; sys.exit(not re.fullmatch("[0-9a-f]{16}", c))' "$J"
check "--pretty indents it" test "$($EC $S --json --pretty inspect img-a | wc -l)" -gt 5
ER=$($EC --dir $T/none --json stats 2>/dev/null || true)
check "an error under --json is a JSON object" test "$(echo "$ER" | jget error.code)" = NotFound
$EC $S get img-a -o out.safetensors >/dev/null
check "get .safetensors is byte-exact" cmp <(tensor_bytes a.safetensors) <(tensor_bytes out.safetensors)
$EC $S get img-a -o out.raw >/dev/null
check "get raw is byte-exact" cmp <(tensor_bytes a.safetensors) out.raw

# raw bytes with dtype and shape
tensor_bytes b.safetensors > b.raw
$EC $S put img-b b.raw --dtype bf16 --shape 324,1024 -n qwen3 >/dev/null
check "put raw with --dtype/--shape" test "$($EC $S --json inspect img-b -n qwen3 | jget namespace)" = qwen3
complete_words() {  # complete_words WORD... : what bash completion offers for the last word
  bash -c 'source <("$0" completion bash); COMP_WORDS=("ec-store" "$@"); COMP_CWORD=$#; _ec_store
           echo "${COMPREPLY[*]}"' "$EC" "$@"
}
check "completion offers the commands" grep -qw ls <(complete_words l)
check "completion offers a command's options" grep -qw -- --prefix <(complete_words ls --pre)
check "completion offers the global options after a command" grep -qw -- --json <(complete_words ls --js)
check "zsh completion loads through bashcompinit" grep -q bashcompinit <($EC completion zsh)
check "a command's --help names the global options" grep -q "Global options.*--dir" <($EC ls --help)
expect_usage "did you mean 'ls'" $EC lss
expect_usage "did you mean 'serve'" $EC servee --listen 127.0.0.1:0
expect_usage "did you mean '--json'" $EC ls --jsno
expect_usage "did you mean '--pool-size'" $EC --pool-sise 1GiB ls
# A flag takes no value: the word after it is the command (or the next option), not its value.
expect_usage "did you mean 'ls'" $EC --json lss
$EC --json --pool-size 4Gi --dir "$T/flagged" ls >out.txt 2>err.txt || true
check "a flag's next word is not taken for its value" bash -c "! grep -q \"unknown command '4Gi'\" err.txt"
expect_usage "did you mean 'ls'" $EC --json --pool-size 4GiB --dir st lss
expect_usage "get: key is required; see ec-store get --help" $EC get
expect_usage "ls: The following argument was not expected: extra" $EC ls extra
$EC --json get >out.txt 2>/dev/null || true
check "a usage error under --json is a JSON error with code Usage" \
  test "$($PY -c 'import json,sys; print(json.load(open("out.txt"))["error"]["code"])')" = Usage
check "positionals say what they are" bash -c "$EC get --help | grep -q 'key TEXT REQUIRED *entry key'"
expect_usage "bad size '4GB2'" $EC --dir $T/store --pool-size 4GB2 stats
expect_usage "unknown size unit in '12X'" $EC $S --disk-quota=12X stats
expect_usage "bad duration" $EC $S --timeout soon stats
expect_usage "bad duration" $EC $S evict --older-than 3weeks
expect_usage "bad port in 'bad:port:x'" $EC --server bad:port:x ls
expect_usage "'http://' is not a scheme ec-store speaks: drop it" $EC --server http://127.0.0.1:7070 ls
expect_usage "unix: names no socket" $EC --server unix: ls
expect_usage "must be at least 100ms" $EC --dir $T/io serve --io-timeout 1ms --listen 127.0.0.1:0
expect_error "give --dtype and --shape" $EC $S put img-c b.raw
expect_error "unknown dtype" $EC $S put img-c b.raw --dtype bf17 --shape 324,1024
expect_error "describes" $EC $S put img-c b.raw --dtype bf16 --shape 324,1000
expect_error "bad shape" $EC $S put img-c b.raw --dtype bf16 --shape 324,,x
expect_error "truncated" $EC $S put img-c trunc.safetensors
expect_error "no entry for key" $EC $S inspect nope
expect_error "no entry for key" $EC $S get nope -o x.raw
expect_error "key is" $EC $S put "$(printf 'k%.0s' {1..300})" a.safetensors
echo notadir > plainfile
expect_error "writable --dir" $EC --dir plainfile/store put img-x a.safetensors
expect_error "bad size" $EC --dir "$T/store" --pool-size lots stats
# a store held by another process is refused with a clear message
flock "$T/store/LOCK" sleep 3 &
sleep 0.5
expect_error "in use by another process" $EC $S stats
wait
check "bad input lost nothing" test "$($EC $S --json stats | jget disk.entries)" = 2

# fill past the pool: entries land on disk; ls and stats show them
for i in $(seq 1 12); do mk "e$i.safetensors" 1024 3584; done
for i in $(seq 1 12); do $EC $S put "e$i" "e$i.safetensors" >/dev/null; done
check "ls counts entries" test "$($EC $S --json ls | $PY -c 'import json,sys; print(len(json.load(sys.stdin)))')" = 14
check "ls --tier disk" test "$($EC $S --json ls --tier disk | $PY -c 'import json,sys; print(len(json.load(sys.stdin)))')" = 14
check "ls --prefix" test "$($EC $S --json ls --prefix img- | $PY -c 'import json,sys; print(len(json.load(sys.stdin)))')" = 2
check "ls --namespace" test "$($EC $S --json ls -n qwen3 | $PY -c 'import json,sys; print(len(json.load(sys.stdin)))')" = 1
check "ls --sort size" test "$($EC $S --json ls --sort size | jget 0.bytes)" = 7340032
check "ls table" bash -c "$EC $S ls --limit 3 | grep -q '3 entries'"
ST=$($EC $S --json stats)
check "stats disk.entries" test "$(echo "$ST" | jget disk.entries)" = 14
check "stats pool fields" test -n "$(echo "$ST" | jget pool.entries)$(echo "$ST" | jget pool.bytes)$(echo "$ST" | jget disk.bytes)"
check "stats table" bash -c "$EC $S stats | grep -q fragmentation"
check "stats: a reopened store's entries are compact rows" test "$(echo "$ST" | jget keydir.compact_rows)" = 14
check "stats table: keydir" bash -c "$EC $S stats | grep -q '14 entries, 14 of them compact rows'"

# evict
$EC $S evict e1 e2 >/dev/null
check "evict KEY..." test "$($EC $S --json stats | jget disk.entries)" = 12
check "evict of a missing key removes the rest, says so and exits 1" \
  bash -c "! $EC $S evict e1 e3 >ev.out 2>ev.err; grep -q 'evicted 1 entries.*1 not found' ev.out && grep -q 'not found: e1' ev.err && ! $EC $S inspect e3 2>/dev/null"
expect_error "say what to evict" $EC $S evict
$EC $S evict --to-bytes 40MiB >/dev/null
check "evict --to-bytes" test "$($EC $S --json stats | jget disk.bytes)" -le $((40 * 1048576))
$EC $S evict --older-than 1d >/dev/null
check "evict --older-than keeps recent" test "$($EC $S --json stats | jget disk.entries)" -gt 0
expect_error "bad duration" $EC $S evict --older-than soon
before=$($EC $S --json stats | jget disk.entries)
expect_error "bad duration" $EC $S evict --older-than 1e300d
expect_error "out of range" $EC $S evict --older-than 1000000000d
expect_error "bad size" $EC $S evict --to-bytes 0x10
check "a refused duration evicts nothing" test "$($EC $S --json stats | jget disk.entries)" = "$before"
expect_error "bad size" $EC --dir "$T/store" --pool-size nan stats
expect_error "bad size" $EC --dir "$T/store" --disk-quota 1e30 stats
expect_error "out of range" $EC --dir "$T/store" --disk-quota 2000000TiB stats
mk big.safetensors 1024 1024
expect_error "disk quota" timeout 30 $EC --dir "$T/quota" --disk-quota 1MiB put big big.safetensors

# verify, corruption, compact, repair
check "verify clean" bash -c "$EC $S verify 2>/dev/null | grep -q '0 corrupt'"
N=$($EC $S --json stats | jget disk.entries)
$EC $S compact >/dev/null
check "compact keeps live entries" test "$($EC $S --json stats | jget disk.entries)" = "$N"
rm -f "$T/store/index.sqlite"*
$EC $S repair >/dev/null
check "repair rebuilds the index" test "$($EC $S --json stats | jget disk.entries)" = "$N"
$EC $S get e12 -o r.raw >/dev/null
check "repaired entries read back byte-exact" cmp <(tensor_bytes e12.safetensors) r.raw
# a flipped payload byte: verify reports it, drops it, and get never serves it
$EC --dir "$T/s3" put one a.safetensors >/dev/null
SEG=$(ls "$T/s3/segments" | head -1)
printf '\xff\xff\xff\xff' | dd of="$T/s3/segments/$SEG" bs=1 seek=8192 conv=notrunc status=none
if $EC --dir "$T/s3" verify >v.out 2>v.err; then bad "verify should fail on a flipped byte"; else
  grep -q "corrupt" v.err && ok "verify reports corruption" || bad "verify message: $(cat v.err)"; fi
check "corrupt entry dropped" test "$($EC --dir "$T/s3" --json stats | jget disk.entries)" = 0
expect_error "no entry for key" $EC --dir "$T/s3" get one -o x.raw

# import / export in the baseline's layout
mkdir -p base
for h in 1111aaaa 2222bbbb 3333cccc; do mkdir -p "base/$h"; mk "base/$h/encoder_cache.safetensors" 400 3584; done
check "import" bash -c "$EC --dir $T/s2 --json import base | grep -q '\"imported\":3'"
hits_before=$($EC --dir "$T/s2" --json inspect 1111aaaa | jget hits)
$EC --dir "$T/s2" export exp >/dev/null
for h in 1111aaaa 2222bbbb 3333cccc; do
  check "export $h byte-exact" cmp <(tensor_bytes "base/$h/encoder_cache.safetensors") <(tensor_bytes "exp/$h/encoder_cache.safetensors")
done
check "export leaves no temporary files" test -z "$(find exp -name '*.tmp-*')"
# an export killed part way leaves only whole files under their final names
$EC $S export expk >/dev/null 2>&1 & EXP=$!
sleep 0.3; kill -KILL $EXP 2>/dev/null || true; wait $EXP 2>/dev/null || true
check "a killed export leaves no partial safetensors file" $PY - expk <<'PY'
import json, os, struct, sys
for root, _, files in os.walk(sys.argv[1]):
    for f in files:
        if not f.endswith(".safetensors"): continue
        b = open(os.path.join(root, f), "rb").read()
        n = struct.unpack("<Q", b[:8])[0]
        end = json.loads(b[8:8 + n])["ec_cache"]["data_offsets"][1]
        assert len(b) == 8 + n + end, f
PY
check "export does not count hits" test "$($EC --dir "$T/s2" --json inspect 1111aaaa | jget hits)" = "$hits_before"
# the same key in two namespaces: one folder per namespace, nothing overwritten
$EC --dir "$T/s2" put -n other 1111aaaa b.safetensors >/dev/null
check "export of two namespaces keeps both" bash -c "$EC --dir $T/s2 --json export exp2 | grep -q '\"exported\":4'"
check "namespaces exported apart" cmp <(tensor_bytes b.safetensors) <(tensor_bytes exp2/other/1111aaaa/encoder_cache.safetensors)
check "default namespace exported apart" cmp <(tensor_bytes base/1111aaaa/encoder_cache.safetensors) <(tensor_bytes exp2/default/1111aaaa/encoder_cache.safetensors)
$EC --dir "$T/s2" evict -n other 1111aaaa >/dev/null
# keys that are not a path component are refused at put; import skips bad entries and goes on
expect_error "cannot contain '/'" $EC $S put a/b a.safetensors
expect_error "reserved" $EC $S put .. a.safetensors
mkdir -p bad/0000bad0 bad/9999ffff; echo "not safetensors" >bad/0000bad0/encoder_cache.safetensors
mk bad/9999ffff/encoder_cache.safetensors 4 8
if $EC --dir "$T/s4" --json import bad >imp.out 2>imp.err; then bad "import with a bad file should exit 1"; else
  check "import skips the bad file and loads the good one" grep -q '"imported":1' imp.out
  check "import names the skipped file" grep -q "0000bad0" imp.err; fi
$EC --dir "$T/s2" evict --all >/dev/null
check "evict --all" test "$($EC --dir "$T/s2" --json stats | jget disk.entries)" = 0

# against a running server: serve, then put/get/inspect/stats/evict with --server
$EC --dir "$T/srv" serve --listen 127.0.0.1:0 >serve.out 2>serve.err &
SRV=$!
for _ in $(seq 50); do grep -q "port" serve.out 2>/dev/null && break; sleep 0.1; done
PORT=$(sed -n 's/.*(port \([0-9]*\).*/\1/p' serve.out)
R="--server 127.0.0.1:$PORT"
check "serve reports its port" test -n "$PORT"
expect_error "reach it with --server" $EC --dir "$T/srv" stats
$EC $R put remote-a a.safetensors >/dev/null
check "remote put" test $? -eq 0
$EC $R get remote-a -o remote.raw >/dev/null
check "remote get is byte-exact" cmp <(tensor_bytes a.safetensors) remote.raw
check "remote inspect" test "$($EC $R --json inspect remote-a | jget bytes)" = 2867200
check "same host picks shared memory" test "$($EC $R --json stats | jget transport)" = shm
json_fields() { $PY -c '
import json, sys
def walk(d, p=""):
    for k, v in d.items():
        yield from (walk(v, p + k + ".") if isinstance(v, dict) else [p + k])
print(" ".join(sorted(walk(json.load(sys.stdin)))))'; }
check "local and remote stats have the same fields" \
  test "$($EC --dir "$T/s2" --json stats | json_fields)" = "$($EC $R --json stats | json_fields)"
check "remote stats carry the full schema (pool capacity)" test "$($EC $R --json stats | jget pool.capacity)" -gt 0
expect_error "no entry for key" $EC $R inspect nope
check "remote ls" test "$($EC $R --json ls | jget 0.key)" = remote-a
check "remote ls --prefix" test "$($EC $R --json ls --prefix nomatch | $PY -c 'import json,sys; print(len(json.load(sys.stdin)))')" = 0
check "remote verify" test "$($EC $R --json verify | jget checked)" -ge 1
check "remote compact" test "$($EC $R --json compact | jget after)" -ge 0
expect_error "not available with --server" $EC $R repair
$EC $R evict remote-a >/dev/null
expect_error "no entry for key" $EC $R get remote-a -o x.raw
$EC $R put remote-b a.safetensors >/dev/null
$EC $R put remote-c a.safetensors >/dev/null
check "remote evict of keys (one ERASE_MANY) says which were missing" \
  bash -c "$EC $R evict remote-c remote-z 2>ev.err | grep -q 'evicted 1 entries.*1 not found' && grep -q 'not found: remote-z' ev.err"
$EC $R evict --all >/dev/null
check "remote evict --all" test "$($EC $R --json ls | $PY -c 'import json,sys; print(len(json.load(sys.stdin)))')" = 0
kill -TERM $SRV; wait $SRV
check "serve stops cleanly on SIGTERM" grep -q "stopped cleanly" serve.err
# SIGHUP persists and keeps serving: an acknowledged put survives a later SIGKILL
$EC --dir "$T/srv" serve --listen 127.0.0.1:0 >serve.out 2>serve.err &
SRV=$!
for _ in $(seq 50); do grep -q "port" serve.out 2>/dev/null && break; sleep 0.1; done
R="--server 127.0.0.1:$(sed -n 's/.*(port \([0-9]*\).*/\1/p' serve.out)"
$EC $R put hup-a a.safetensors >/dev/null
kill -HUP $SRV
for _ in $(seq 50); do grep -q "persisted" serve.err && break; sleep 0.1; done
check "SIGHUP persists the pool" grep -q "persisted; still serving" serve.err
check "serve keeps serving after SIGHUP" test "$($EC $R --json inspect hup-a | jget bytes)" = 2867200
kill -KILL $SRV; wait $SRV 2>/dev/null || true
$EC --dir "$T/srv" get hup-a -o hup.raw >/dev/null
check "put acknowledged before SIGHUP survives SIGKILL" cmp <(tensor_bytes a.safetensors) hup.raw
expect_error "cannot connect" $EC $R stats
expect_error "needs clients that prove who they are" $EC --dir "$T/srv2" serve --listen 0.0.0.0:0
# an index row claiming 64 MiB more than its record: the store corrects it from the record,
# and get writes the record's bytes, not the row's length
$EC --dir "$T/row" put row-a a.safetensors >/dev/null
$PY - "$T/row/index.sqlite" <<'PY'
import sqlite3, sys
db = sqlite3.connect(sys.argv[1])
db.execute("UPDATE entries SET raw_len = raw_len + 67108864 WHERE key = 'row-a'")
db.commit()
PY
$EC --dir "$T/row" get row-a -o row.raw >/dev/null 2>row.err
check "get after a wrong index row writes the record's bytes, no tail" cmp <(tensor_bytes a.safetensors) row.raw
# operator input that would start a daemon refusing every client, or hang it: refused at start
expect_error "at least 100ms" $EC --dir "$T/bad" serve --io-timeout 0
expect_error "at least 1ms" $EC --dir "$T/bad" serve --lease-ttl 0s
expect_error "not in range" $EC --dir "$T/bad" serve --max-connections 0
mkfifo cfg.fifo
expect_error "not a regular file" timeout 10 $EC --config cfg.fifo ls
# a new store is private to its user (0700/0600), or to its group with --group-access
$EC --dir "$T/priv/st" put p-a a.safetensors >/dev/null
check "a new store directory is 0700" test "$(stat -c %a "$T/priv/st")" = 700
check "its files are 0600" test -z "$(find "$T/priv/st" -type f ! -perm 600)"
$EC --dir "$T/grp" --group-access put g-a a.safetensors >/dev/null
check "--group-access: 0750 and 0640" test "$(stat -c %a "$T/grp")/$(stat -c %a "$T/grp/index.sqlite")" = 750/640
# namespaces an operator can find: a connector-written key without --namespace
VNS=vllm-Qwen2.5-VL-7B-Instruct-0a1b2c3d
$EC --dir "$T/nsf" put -n "$VNS" abcdef0123 a.safetensors >/dev/null
$EC --dir "$T/nsf" put -n other-ns shared a.safetensors >/dev/null
$EC --dir "$T/nsf" put -n "$VNS" shared a.safetensors >/dev/null
check "inspect finds a key in its only namespace" test "$($EC --dir "$T/nsf" --json inspect abcdef0123 | jget namespace)" = "$VNS"
check "inspect finds a prefix across namespaces, asked with --prefix" test "$($EC --dir "$T/nsf" --json inspect abcd --prefix | jget key)" = abcdef0123
expect_error "keys that begin with it" $EC --dir "$T/nsf" inspect abcd
$EC --dir "$T/nsf" get abcdef0123 -o nsf.raw >/dev/null
check "get finds it too" cmp <(tensor_bytes a.safetensors) nsf.raw
expect_error "is in 2 namespaces" $EC --dir "$T/nsf" inspect shared
expect_error "other-ns/shared" $EC --dir "$T/nsf" get shared -o x.raw
expect_error "in any namespace" $EC --dir "$T/nsf" inspect nothing-like-it
check "ls shows the whole namespace" grep -q -- "$VNS" <($EC --dir "$T/nsf" ls)
check "namespaces lists entries per namespace" test "$($EC --dir "$T/nsf" --json namespaces | $PY -c 'import json,sys; print({r["namespace"]: r["entries"] for r in json.load(sys.stdin)})')" = "{'$VNS': 2, 'other-ns': 1}"
expect_error "is in 2 namespaces" $EC --dir "$T/nsf" evict shared
$EC --dir "$T/nsf" evict abcdef0123 >/dev/null
check "evict finds a key in its only namespace" test "$($EC --dir "$T/nsf" --json namespaces | $PY -c 'import json,sys; print(sum(r["entries"] for r in json.load(sys.stdin)))')" = 2
# one-shot commands append to the open tail segment, and inspection pins no pool
mk one.safetensors 64 64
for k in one-a one-b one-c; do $EC --dir "$T/tail" put $k one.safetensors >/dev/null; done
$EC --dir "$T/tail" evict one-b >/dev/null
check "one-shot puts share one segment file" test "$(ls "$T/tail/segments" | wc -l)" = 1
check "stats pins no pool" test "$($EC --dir "$T/tail" --pool-size 20GiB --json stats | jget pool.capacity)" = 1048576
# a full disk: the store still opens to read (read-only) and says "disk full" to writes
mkdir -p full
if unshare -m sh -c "mount -t tmpfs -o size=8m tmpfs $T/full" 2>/dev/null; then
  set +e
  unshare -m sh -c "
    mount -t tmpfs -o size=8m tmpfs $T/full
    $EC --dir $T/full/st put full-a a.safetensors >/dev/null || exit 2
    dd if=/dev/zero of=$T/full/filler bs=64k >/dev/null 2>&1
    $EC --dir $T/full/st --json ls >full-ls.json 2>full-ls.err || exit 3
    $EC --dir $T/full/st get full-a -o full-a.raw >/dev/null 2>&1 || exit 4
    $EC --dir $T/full/st put full-b a.safetensors 2>full-put.err && exit 5
    exit 0"
  rc=$?
  set -e
  check "a full disk still opens to read (rc $rc)" test "$rc" = 0
  check "read on a full disk is byte-exact" cmp <(tensor_bytes a.safetensors) full-a.raw
  check "open on a full disk says so" grep -q "disk full" full-ls.err
  check "a write on a full disk says why" grep -q "free disk space" full-put.err
else
  echo "skip - full-disk open: needs unshare -m and a tmpfs mount"
fi
# loopback is decided on the resolved address: a name spelled "127.…" that resolves to this
# host's outside address still needs a token (an /etc/hosts entry in a private mount namespace)
OUTSIDE=$(hostname -I 2>/dev/null | tr ' ' '\n' | grep -v '^127\.' | grep -v : | head -1 || true)
if [ -n "$OUTSIDE" ] && unshare -m true 2>/dev/null; then
  { cat /etc/hosts; echo "$OUTSIDE 127.attacker.test"; } >hosts.fake
  expect_error "needs clients that prove who they are" timeout 10 unshare -m sh -c \
    "mount --bind $T/hosts.fake /etc/hosts && exec $EC --dir $T/srv3 serve --listen 127.attacker.test:0"
else
  echo "skip - token check by resolved address: needs a non-loopback IPv4 address and unshare -m"
fi


# ---- command-line conventions (git / kubectl / redis-cli habits)
rc_of() { set +e; "$@" >/dev/null 2>&1; local rc=$?; set -e; echo $rc; }
check "--version prints the version, exit 0" bash -c "$EC --version | grep -qE '^ec-store [0-9]+\.[0-9]+\.[0-9]+$'"
check "an unknown option exits 2" test "$(rc_of $EC --dir "$T/conv" ls --bogus)" = 2
check "no subcommand exits 2" test "$(rc_of $EC --dir "$T/conv")" = 2
check "a bad option value exits 2" test "$(rc_of $EC --dir "$T/conv" ls --sort sideways)" = 2
check "a failed command exits 1" test "$(rc_of $EC --dir "$T/store" inspect nope)" = 1
check "read-only commands on a directory without a store say so" \
  bash -c "! $EC --dir $T/nostore ls 2>ns.err && grep -q 'no store in' ns.err && [ ! -e $T/nostore ]"
check "...and stats does not create one either" bash -c "! $EC --dir $T/nostore stats 2>/dev/null && [ ! -e $T/nostore ]"
K1=aaaa0123456789abcdef0123456789abcdef0123456789abcdef0123456789ab
K2=aaab0123456789abcdef0123456789abcdef0123456789abcdef0123456789ab
$EC put $K1 a.safetensors --dir "$T/conv" >/dev/null   # global options after the subcommand
$EC put $K2 b.safetensors --dir "$T/conv" >/dev/null
check "global options after the subcommand" test "$($EC ls --dir "$T/conv" --json | jget 1.key)" = $K2
check "ls prints full keys when stdout is not a terminal" bash -c "$EC ls --dir $T/conv | grep -q $K1"
check "ls --wide prints full keys" bash -c "$EC ls --wide --dir $T/conv | grep -q $K2"
check "get -o - writes the bytes to stdout" \
  bash -c "$EC get $K1 -o - --dir $T/conv 2>/dev/null | cmp - <(python3 -c 'import sys,json,struct
b=open(\"a.safetensors\",\"rb\").read(); n=struct.unpack(\"<Q\",b[:8])[0]; sys.stdout.buffer.write(b[8+n:])')"
check "a unique key prefix, asked with --prefix, names the entry" test "$($EC inspect aaaa --prefix --dir "$T/conv" --json | jget key)" = $K1
expect_error "ambiguous" $EC inspect aaa --prefix --dir "$T/conv"
# A missing key is a miss, never the bytes of a key it begins (img-1 is not img-12, an
# unsalted hash not a salted one), locally and through a server.
$EC --dir "$T/miss" put -n a img-12 a.safetensors >/dev/null
$EC --dir "$T/miss" put -n a "$K1.salt-9f" a.safetensors >/dev/null
for k in img-1 "$K1"; do
  check "get $k of a store holding only longer keys exits 1 and writes nothing" \
    bash -c "! $EC --dir $T/miss get $k -n a -o miss.out 2>/dev/null && [ ! -e miss.out ]"
  check "inspect $k without a namespace misses too" \
    bash -c "! $EC --dir $T/miss inspect $k >/dev/null 2>&1"
done
check "evict takes full keys only" bash -c "$EC evict aaaa --dir $T/conv 2>/dev/null | grep -q 'evicted 0 entries'"
# configuration: command line > EC_STORE_* environment > config file > defaults
for d in cfgA cfgB cfgC; do $EC --dir "$T/$d" put "only-$d" b.safetensors >/dev/null; done
printf 'dir = "%s"\ndisk-quota = "8GiB"\n[serve]\nlisten = "127.0.0.1:0"\n' "$T/cfgA" >ec.toml
check "the config file sets options" test "$($EC --config ec.toml --json ls | jget 0.key)" = only-cfgA
check "EC_STORE_CONFIG names the config file" test "$(EC_STORE_CONFIG=ec.toml $EC --json ls | jget 0.key)" = only-cfgA
check "the environment beats the config file" \
  test "$(EC_STORE_DIR=$T/cfgB $EC --config ec.toml --json ls | jget 0.key)" = only-cfgB
check "the command line beats both" \
  test "$(EC_STORE_DIR=$T/cfgB $EC --config ec.toml ls --dir $T/cfgC --json | jget 0.key)" = only-cfgC
check "the config file's quota is used" test "$($EC --config ec.toml --json stats | jget disk.capacity)" = 8589934592
printf 'dir = "%s"\npool-sise = "1GiB"\n' "$T/cfgA" >typo.toml
expect_error "unknown setting 'pool-sise'" $EC --config typo.toml ls
check "an unknown config setting exits 2" test "$(rc_of $EC --config typo.toml ls)" = 2
check "a bad environment value exits 2" test "$(EC_STORE_LOG_LEVEL=loud rc_of $EC --dir $T/cfgA ls)" = 2
echo s3cret >token.txt
$EC --dir "$T/tok" serve --listen 127.0.0.1:0 --token-file token.txt >tok.out 2>tok.err &
TSRV=$!
for _ in $(seq 50); do grep -q "port" tok.out 2>/dev/null && break; sleep 0.1; done
TR="--server 127.0.0.1:$(sed -n 's/.*(port \([0-9]*\).*/\1/p' tok.out)"
check "a client --token-file is presented" bash -c "$EC $TR --token-file token.txt stats >/dev/null"
check "EC_STORE_TOKEN_FILE works as --token-file" bash -c "EC_STORE_TOKEN_FILE=token.txt $EC $TR stats >/dev/null"
expect_error "wrong or missing token" $EC $TR stats
check "a refused token is logged with the peer's address" grep -q "refused a client from 127.0.0.1:" tok.err
kill -TERM $TSRV; wait $TSRV

# The open-files limit: raised at start to what --max-connections needs, or the shortfall said.
HARD=$(ulimit -Hn)
CASES=("800 800:about 288 clients can connect")
if [ "$HARD" = unlimited ] || [ "$HARD" -ge 1536 ]; then
  CASES+=("512 $HARD:raised from 512 to 1536")
else
  echo "skip - raising the open-files limit: the hard limit here is $HARD, under 1536"
fi
for lim in "${CASES[@]}"; do
  soft=${lim%% *}; rest=${lim#* }; hard=${rest%%:*}; want=${rest#*:}
  (ulimit -Sn "$soft"; ulimit -Hn "$hard"
   exec $EC --dir "$T/nofile" serve --listen 127.0.0.1:0 --max-connections 1024 >nofile.out 2>nofile.err) &
  NSRV=$!
  for _ in $(seq 50); do grep -q "port" nofile.out 2>/dev/null && break; sleep 0.1; done
  check "open files $soft/$hard: $want" grep -q "$want" nofile.err
  kill -TERM $NSRV; wait $NSRV || true
done

# TLS and an ACL from the command line (docs/security.md's steps): a certificate the
# client's CA signed, a principal per client certificate, rotation and ACL edits at SIGHUP.
P="$T/pki" && mkdir -p "$P"
EC_KEY=(-newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes)
openssl req -x509 "${EC_KEY[@]}" -days 2 -subj /CN=cli-ca -keyout $P/ca.key -out $P/ca.crt 2>/dev/null
for n in server:node-1 next:node-1-next reader:reader; do
  f=${n%%:*}; cn=${n#*:}
  openssl req "${EC_KEY[@]}" -subj /CN=$cn -keyout $P/$f.key -out $P/$f.csr 2>/dev/null
  printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\n' >$P/$f.ext
  openssl x509 -req -in $P/$f.csr -CA $P/ca.crt -CAkey $P/ca.key -CAcreateserial -days 2 \
    -extfile $P/$f.ext -out $P/$f.crt 2>/dev/null
done
cp $P/server.crt $P/live.crt && cp $P/server.key $P/live.key
printf 'reader cert=reader ns=cli* rights=read\n' >acl.txt
echo metrics-secret >metrics.token
$EC --dir "$T/tls" --tls-cert $P/live.crt --tls-key $P/live.key --tls-ca $P/ca.crt serve \
  --listen 127.0.0.1:0 --acl-file acl.txt --metrics-listen 127.0.0.1:0 \
  --metrics-token-file metrics.token >tls.out 2>tls.err &
LSRV=$!
for _ in $(seq 50); do grep -q "port" tls.out 2>/dev/null && break; sleep 0.1; done
LPORT=$(sed -n 's/.*(port \([0-9]*\).*/\1/p' tls.out)
LR=(--server tls://127.0.0.1:$LPORT --tls-ca $P/ca.crt --tls-cert $P/reader.crt --tls-key $P/reader.key)
check "the start-up log says TLS is on and whether kTLS is" grep -q "kTLS" tls.err
MPORT=$(sed -n 's/.*metrics port \([0-9]*\).*/\1/p' tls.out)
check "the operator port speaks https with the same certificate, /metrics with the bearer token" \
  bash -c "curl -sf --cacert $P/ca.crt -H 'Authorization: Bearer metrics-secret' https://127.0.0.1:$MPORT/metrics | grep -q ecstore_refused_requests_total"
check "/metrics without the token is 401" test "$(curl -s -o /dev/null -w '%{http_code}' --cacert $P/ca.crt https://127.0.0.1:$MPORT/metrics)" = 401
check "/healthz needs no token" bash -c "curl -sf --cacert $P/ca.crt https://127.0.0.1:$MPORT/healthz | grep -q ok"
expect_error "needs https" $EC --dir "$T/tls2" serve --listen 127.0.0.1:0 --metrics-listen 0.0.0.0:0
expect_error "requires TLS" $EC --server 127.0.0.1:$LPORT stats
expect_error "may not write namespace 'cli1'" $EC "${LR[@]}" put --namespace cli1 k1 big.safetensors
expect_error "may not read namespace 'other'" $EC "${LR[@]}" get --namespace other k1 -o /dev/null
check "a refusal under --json says its code, PermissionDenied" bash -c "$EC ${LR[*]} --json get --namespace other k1 -o /dev/null 2>/dev/null | grep -q '\"code\": *\"PermissionDenied\"'"
check "a granted read over TLS answers (a miss is NotFound, not a refusal)" \
  bash -c "$EC ${LR[*]} get --namespace cli1 nope -o /dev/null 2>&1 | grep -q NotFound"
printf 'reader cert=reader ns=cli*,other rights=read\n' >acl.txt
cp $P/next.crt $P/live.crt && cp $P/next.key $P/live.key
kill -HUP $LSRV
for _ in $(seq 50); do grep -q "SIGHUP" tls.err && break; sleep 0.1; done
check "after SIGHUP the edited ACL applies" \
  bash -c "$EC ${LR[*]} get --namespace other k1 -o /dev/null 2>&1 | grep -q NotFound"
check "after SIGHUP new connections get the new certificate" bash -c \
  "openssl s_client -connect 127.0.0.1:$LPORT -CAfile $P/ca.crt -cert $P/reader.crt -key $P/reader.key </dev/null 2>/dev/null | grep -q 'CN = node-1-next'"
kill -TERM $LSRV; wait $LSRV

# Other local users: a daemon without a token serves only its own user (and root) -- the
# unprivileged `nobody` neither reads nor erases through its loopback port -- and what it
# writes is its user's alone (its group's too with --group-access).
mode_of() { stat -c %a "$1"; }
if [ "$(id -u)" = 0 ] && command -v setpriv >/dev/null; then
  install -d -m 0755 "$T/bin" && install -m 0755 "$EC" "$T/bin/ec-store" && chmod 0711 "$T"
  AS_NOBODY=(setpriv --reuid=65534 --regid=65534 --clear-groups "$T/bin/ec-store")
  $EC --dir "$T/own" serve --listen 127.0.0.1:0 >own.out 2>own.err &
  OSRV=$!
  for _ in $(seq 50); do grep -q "port" own.out 2>/dev/null && break; sleep 0.1; done
  OR="--server 127.0.0.1:$(sed -n 's/.*(port \([0-9]*\).*/\1/p' own.out)"
  $EC $OR put mine big.safetensors >/dev/null
  expect_error "user 65534 may not use this server" "${AS_NOBODY[@]}" $OR get mine -o /dev/null
  expect_error "user 65534 may not use this server" "${AS_NOBODY[@]}" $OR evict mine
  check "its own user still reads the entry another user tried to erase" \
    bash -c "$EC $OR inspect mine >/dev/null"
  for f in index.sqlite index.sqlite-wal index.sqlite-shm serve.sock; do
    check "$f is the daemon user's alone (600)" test "$(mode_of "$T/own/$f")" = 600
  done
  check "segments/ is the daemon user's alone (700)" test "$(mode_of "$T/own/segments")" = 700
  kill -TERM $OSRV; wait $OSRV
  $EC --dir "$T/grp" --group-access serve --listen 127.0.0.1:0 >grp.out 2>grp.err &
  GSRV=$!
  for _ in $(seq 50); do grep -q "port" grp.out 2>/dev/null && break; sleep 0.1; done
  check "--group-access: its group may use the socket (660)" test "$(mode_of "$T/grp/serve.sock")" = 660
  check "--group-access: its group may read the index (640)" \
    test "$(mode_of "$T/grp/index.sqlite-wal")" = 640
  kill -TERM $GSRV; wait $GSRV
else
  echo "skip - other local users: acting as another user needs root and setpriv"
fi

# progress: drawn on a terminal only, with totals and rate
check "progress is drawn on a terminal, with totals and rate" \
  bash -c "script -qec '$EC --dir $T/conv verify' /dev/null | grep -qE 'verify: [0-9]+/[0-9]+ entries, [0-9.]+/s'"
check "...and not when stderr is not a terminal" \
  bash -c "! $EC --dir $T/conv verify 2>&1 >/dev/null | grep -q 'verify: '"

# logs: start-up lines, a per-request debug line, a slow-request warning, the periodic summary
mk big.safetensors 4096 4096
$EC --dir "$T/logs" serve --listen 127.0.0.1:0 --log-level debug --slow-request 1ms \
  --log-summary 1s >log.out 2>log.err &
LSRV=$!
for _ in $(seq 50); do grep -q "port" log.out 2>/dev/null && break; sleep 0.1; done
LR="--server 127.0.0.1:$(sed -n 's/.*(port \([0-9]*\).*/\1/p' log.out)"
$EC $LR put big1 big.safetensors >/dev/null  # 32 MiB: well over 1 ms
$EC $LR stats >/dev/null
$EC $LR get big1 -n default -o /dev/null >/dev/null
sleep 1.5
check "start-up logs the pool: size, pinning, pages" \
  grep -qE "pool [0-9.]+ [KMG]iB \((pinned|NOT pinned), (huge pages|4 KiB pages)" log.err
check "start-up logs the entries recovered and the time it took" \
  grep -qE "recovered [0-9]+ entries .* in [0-9.]+ s" log.err
check "--log-level debug logs each request with its peer (one over 1 ms as a warning)" \
  grep -qE "\[(debug|warning)\] (slow )?stats -/- \(request [0-9]+\) from (127\.0\.0\.1:[0-9]+|unix pid [0-9]+) over (tcp|shm): ok" log.err
check "--slow-request warns of a request over it" grep -qE "\[warning\] slow put default/big1 " log.err
check "a get's line names its namespace and key" grep -qE "\] (slow )?get default/big1 " log.err
check "--log-summary logs a one-line summary" grep -qE "summary: [0-9.]+ req/s" log.err
kill -TERM $LSRV; wait $LSRV

# --log-format json: every line one JSON object with time, level and msg
$EC --dir "$T/jlog" serve --listen 127.0.0.1:0 --log-format json >jlog.out 2>jlog.err &
JSRV=$!
for _ in $(seq 50); do grep -q "port" jlog.out 2>/dev/null && break; sleep 0.1; done
kill -TERM $JSRV; wait $JSRV
check "--log-format json writes one object per line" $PY -c '
import json, sys
lines = open("jlog.err").read().splitlines()
assert len(lines) >= 3, lines
for l in lines:
    d = json.loads(l)
    assert set(d) == {"time", "level", "msg"}, d
assert any("stopped cleanly" in json.loads(l)["msg"] for l in lines)'

# SIGHUP reloads what can change while serving, and names what needs a restart
printf 'pool-size = "64MiB"\n[serve]\nslow-request = "10s"\n' >hup.toml
$EC --dir "$T/hup" --config hup.toml serve --listen 127.0.0.1:0 >hup.out 2>hup.err &
HSRV=$!
for _ in $(seq 50); do grep -q "port" hup.out 2>/dev/null && break; sleep 0.1; done
HR="--server 127.0.0.1:$(sed -n 's/.*(port \([0-9]*\).*/\1/p' hup.out)"
$EC $HR put before big.safetensors >/dev/null
printf 'pool-size = "128MiB"\nlog-level = "debug"\n[serve]\nslow-request = "1ms"\n' >hup.toml
kill -HUP $HSRV
for _ in $(seq 50); do grep -q "SIGHUP: log level" hup.err && break; sleep 0.1; done
$EC $HR put after big.safetensors >/dev/null
kill -TERM $HSRV; wait $HSRV
check "before SIGHUP a 10s threshold logs no slow put" bash -c '! grep -q "slow put default/before" hup.err'
check "SIGHUP reloads the slow-request threshold" grep -q "slow put default/after" hup.err
check "SIGHUP reloads the log level" grep -q "SIGHUP: log level debug" hup.err
check "SIGHUP names a change that needs a restart" \
  grep -q "SIGHUP: --pool-size changed but take effect only at a restart" hup.err
# --dry-run loads what serve would load at start: a bad ACL or a missing token is refused
printf 'ops nonsense\n' >bad.acl
printf 's3cret\n' >good.token
check "--dry-run refuses an ACL that does not parse, naming its line" bash -c \
  "! $EC --dry-run --dir $T/dry --token-file good.token serve --listen 0.0.0.0:7070 --acl-file bad.acl 2>dry.err && grep -q 'bad.acl:1:' dry.err"
check "--dry-run refuses a token file that is not there" bash -c \
  "! $EC --dry-run --dir $T/dry serve --listen 0.0.0.0:7070 --token-file none.token 2>dry.err && grep -q 'none.token' dry.err"
check "--dry-run of a good command line exits 0" \
  $EC --dry-run --dir "$T/dry" --token-file good.token serve --listen 0.0.0.0:7070
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
