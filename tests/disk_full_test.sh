#!/usr/bin/env bash
# A daemon that fills its disk for real (a 64 MiB ext4 file system on a loop device, in a
# private mount namespace): every put the store reported on disk and every erase it
# acknowledged survive a clean stop and a restart, the stop exits 0, and compaction works
# again once space is freed.
# Usage: tests/disk_full_test.sh path/to/ec-store
set -euo pipefail
EC=$(realpath "$1")
if [ "${EC_IN_NS:-}" != 1 ]; then
  if ! unshare -m true 2>/dev/null || ! command -v mkfs.ext4 >/dev/null || ! losetup -f >/dev/null 2>&1; then
    echo "skip - a real full disk needs root, unshare -m, mkfs.ext4 and a free loop device"
    exit 77
  fi
  exec env EC_IN_NS=1 unshare -m "$0" "$@"
fi
T=$(mktemp -d)
trap 'umount "$T/mnt" 2>/dev/null || true; rm -rf "$T"' EXIT
cd "$T"
truncate -s 64M disk.img
mkfs.ext4 -q disk.img
mkdir mnt
if ! mount -o loop disk.img mnt 2>mount.err; then
  echo "skip - a real full disk needs a loop mount: $(cat mount.err)"
  exit 77
fi
pass=0
fail=0
ok()  { pass=$((pass + 1)); echo "ok   - $*"; }
bad() { fail=$((fail + 1)); echo "FAIL - $*"; }
check() { local what=$1; shift; if "$@"; then ok "$what"; else bad "$what"; fi; }
head -c 1048576 /dev/urandom >one.bin
# Another tenant's file shares the disk; deleting it is how space comes back.
head -c $((24 << 20)) /dev/zero >mnt/filler
start() {
  "$EC" --dir mnt/st --pool-size 4MiB serve --listen 127.0.0.1:0 >serve.out 2>>serve.err &
  SRV=$!
  for _ in $(seq 100); do grep -q "port" serve.out 2>/dev/null && break; sleep 0.1; done
  R="--server 127.0.0.1:$(sed -n 's/.*(port \([0-9]*\).*/\1/p' serve.out) --timeout 30s"
}
start
# Fill: puts of 1 MiB through the daemon until the disk refuses, then a few more.
: >acked
refused=0
for i in $(seq 1 80); do
  if "$EC" $R put "k$i" one.bin --dtype u8 --shape 1048576 >/dev/null 2>put.err; then
    echo "k$i" >>acked
  else
    refused=$((refused + 1))
    [ $refused -ge 5 ] && break
  fi
done
check "the disk filled and puts were refused ($refused)" test $refused -ge 1
# Erases during the full-disk moment: those answered OK must stay erased.
: >erased
for k in $(head -n 10 acked); do
  if "$EC" $R evict "$k" >/dev/null 2>&1; then echo "$k" >>erased; fi
done
# What the store says is on disk now must survive the stop.
: >ondisk
for k in $(grep -vxF -f erased acked || true); do
  if "$EC" $R --json inspect "$k" 2>/dev/null | grep -q '"on_disk":true'; then echo "$k" >>ondisk; fi
done
check "entries reported on disk ($(wc -l <ondisk))" test "$(wc -l <ondisk)" -ge 10
kill -TERM $SRV
rc=0
for _ in $(seq 300); do kill -0 $SRV 2>/dev/null || break; sleep 0.1; done
if kill -0 $SRV 2>/dev/null; then bad "the stop hung"; kill -KILL $SRV; fi
wait $SRV || rc=$?
check "a daemon that filled its disk stops with status 0 (got $rc)" test $rc = 0
[ $rc = 0 ] || tail -n 5 serve.err
# Restart on the still-full disk: it opens, every on-disk entry is there, erases stay.
"$EC" --dir mnt/st --json ls >ls.json 2>ls.err || true
missing=0
for k in $(cat ondisk); do grep -q "\"key\":\"$k\"" ls.json || missing=$((missing + 1)); done
check "every entry reported on disk is there after the restart ($missing missing)" test $missing = 0
back=0
for k in $(cat erased); do if grep -q "\"key\":\"$k\"" ls.json; then back=$((back + 1)); fi; done
check "acknowledged erases stay erased ($(wc -l <erased) erased, $back back)" test $back = 0
"$EC" --dir mnt/st get "$(tail -n 1 ondisk)" -o got.bin >/dev/null 2>&1 || true
check "an entry read back after the restart is byte-exact" cmp -s one.bin got.bin
# Space comes back: the store erases, compacts and writes again.
rm mnt/filler
for k in $(head -n 20 ondisk); do "$EC" --dir mnt/st evict "$k" >/dev/null; done
check "compaction works once space is freed" "$EC" --dir mnt/st compact
check "puts work again" "$EC" --dir mnt/st put again one.bin --dtype u8 --shape 1048576
echo "disk_full: $pass passed, $fail failed"
[ $fail = 0 ]
