#!/usr/bin/env bash
# Runs commands against real RDMA verbs (Soft-RoCE, rdma_rxe) inside a throwaway QEMU VM:
# the development and CI machines' own kernel has no RDMA. The guest boots Debian's stock
# kernel (unpacked, never installed) with a busybox initramfs that holds the rxe modules,
# the rxe verbs provider, and the host-built binaries named here with every library they
# load. The guest brings up rxe0 over a dummy netdev (10.0.0.1, inside the guest only),
# runs GUEST_SCRIPT, prints "RDMA-VM-EXIT <code>", and powers off.
#
#   tests/rdma-vm/run.sh WORK_DIR GUEST_SCRIPT [BINARY...]
# Exit: the guest script's code; 77 (skip, with the reason printed) where the VM cannot run.
set -euo pipefail
WORK=$(realpath -m "$1"); SCRIPT=$(realpath "$2"); shift 2
BINS=("$@")
mkdir -p "$WORK"
skip() { echo "SKIP: $*"; exit 77; }
for tool in qemu-system-x86_64 busybox cpio depmod modprobe rdma; do
  command -v "$tool" >/dev/null || skip "$tool is not installed (make deps installs the RDMA VM packages)"
done
PROVIDER=$(ls /usr/lib/x86_64-linux-gnu/libibverbs/librxe-rdmav*.so 2>/dev/null | head -1)
[ -n "$PROVIDER" ] || skip "the rxe verbs provider (ibverbs-providers) is not installed"

# The stock bookworm kernel, cached in WORK.
if [ ! -f "$WORK/kroot/.ready" ]; then
  kpkg() { apt-cache depends linux-image-amd64 2>/dev/null | sed -n 's/.*Depends: \(linux-image-[0-9].*\)/\1/p' | head -1; }
  KPKG=$(kpkg)
  if [ -z "$KPKG" ] && [ "$(id -u)" -eq 0 ]; then apt-get update -qq >/dev/null 2>&1 || true; KPKG=$(kpkg); fi
  [ -n "$KPKG" ] || skip "cannot resolve the linux-image package (run apt-get update)"
  (cd "$WORK" && rm -f linux-image-*.deb && apt-get download "$KPKG" >/dev/null 2>&1) ||
    skip "cannot download $KPKG"
  rm -rf "$WORK/kroot" && dpkg-deb -x "$WORK"/linux-image-*.deb "$WORK/kroot"
  depmod -b "$WORK/kroot" "$(ls "$WORK/kroot/lib/modules")"
  touch "$WORK/kroot/.ready"
fi
KVER=$(ls "$WORK/kroot/lib/modules")
VMLINUZ="$WORK/kroot/boot/vmlinuz-$KVER"

# The initramfs.
ROOT="$WORK/initramfs"
rm -rf "$ROOT" && mkdir -p "$ROOT"/{bin,sbin,lib/modules,etc/libibverbs.d,proc,sys,dev,tmp,usr/lib/x86_64-linux-gnu/libibverbs}
cp "$(command -v busybox)" "$ROOT/bin/busybox"
: > "$ROOT/modules.order"
for m in udp_tunnel ip6_udp_tunnel ib_core ib_uverbs configfs ib_cm iw_cm rdma_cm rdma_ucm \
         crc32_generic rdma_rxe dummy; do
  for f in $(modprobe -d "$WORK/kroot" -S "$KVER" --show-depends "$m" 2>/dev/null | awk '$1=="insmod"{print $2}'); do
    b=$(basename "$f" .ko)
    grep -qx "$b" "$ROOT/modules.order" || { cp "$f" "$ROOT/lib/modules/"; echo "$b" >> "$ROOT/modules.order"; }
  done
done
cp "$PROVIDER" "$ROOT/usr/lib/x86_64-linux-gnu/libibverbs/"
echo "driver rxe" > "$ROOT/etc/libibverbs.d/rxe.driver"
copy_with_libs() {
  local bin=$1 dest=$2
  cp "$bin" "$dest"
  ldd "$bin" | awk '/=>/ && $3 ~ /^\// {print $3} /^\t\/lib/ {print $1}' | while read -r lib; do
    mkdir -p "$ROOT$(dirname "$lib")"
    [ -e "$ROOT$lib" ] || cp -L "$lib" "$ROOT$lib"
  done
}
copy_with_libs "$(command -v rdma)" "$ROOT/sbin/rdma"
copy_with_libs "$(command -v ip)" "$ROOT/sbin/ip"
for lib in "$PROVIDER" /lib/x86_64-linux-gnu/libgcc_s.so.1; do copy_with_libs "$lib" "$ROOT/tmp/provider.so"; done
mkdir -p "$ROOT/lib/x86_64-linux-gnu" && cp -L /lib/x86_64-linux-gnu/libgcc_s.so.1 "$ROOT/lib/x86_64-linux-gnu/"
rm -f "$ROOT/tmp/provider.so"
# The binaries load libibverbs and librdmacm at run time (rdma/verbs_api.h): no ldd names them.
for so in libibverbs.so.1 librdmacm.so.1; do
  # awk reads all of ldconfig's output (no early exit): ldconfig must not die of SIGPIPE,
  # which pipefail would turn into a failed assignment.
  lib=$(ldconfig -p | awk -v so="$so" '$1 == so && /x86-64/ && !found {found = $NF} END {print found}')
  [ -n "$lib" ] || skip "$so is not installed (make deps installs rdma-core)"
  mkdir -p "$ROOT$(dirname "$lib")" && copy_with_libs "$lib" "$ROOT$lib"
done
for b in "${BINS[@]}"; do copy_with_libs "$b" "$ROOT/bin/$(basename "$b")"; done
cp "$SCRIPT" "$ROOT/guest.sh"
cat > "$ROOT/init" <<'INIT'
#!/bin/busybox sh
/bin/busybox --install -s /bin
export PATH=/sbin:/bin
mount -t proc proc /proc; mount -t sysfs sys /sys; mount -t devtmpfs dev /dev
mount -t tmpfs tmp /tmp
for m in $(cat /modules.order); do insmod /lib/modules/$m.ko 2>/dev/null; done
mount -t configfs none /sys/kernel/config 2>/dev/null
ip link set lo up
ip link show dummy0 >/dev/null 2>&1 || ip link add dummy0 type dummy
ip addr add 10.0.0.1/24 dev dummy0
ip link set dummy0 up
rdma link add rxe0 type rxe netdev dummy0
echo "RDMA-VM: rdma devices: $(ls /sys/class/infiniband 2>/dev/null)"
cd /tmp
sh /guest.sh
echo "RDMA-VM-EXIT $?"
poweroff -f
INIT
chmod +x "$ROOT/init"
(cd "$ROOT" && find . | cpio -o -H newc --quiet | gzip -1) > "$WORK/initrd.gz"

# Boot. KVM is unavailable on these machines: TCG.
LOG="$WORK/serial.log"
timeout "${RDMA_VM_TIMEOUT:-600}" qemu-system-x86_64 -accel tcg,thread=multi -cpu max -m 2G -smp 2 \
  -display none -monitor none -serial stdio -no-reboot -kernel "$VMLINUZ" \
  -initrd "$WORK/initrd.gz" -nic none -append "console=ttyS0 quiet panic=-1" > "$LOG" 2>&1 || true
grep -v '^\s*$' "$LOG" | grep -vE '^\[ *[0-9]+\.[0-9]+\]' || true
code=$(sed -n 's/.*RDMA-VM-EXIT \([0-9]*\).*/\1/p' "$LOG" | tail -1)
[ -n "$code" ] || { echo "RDMA VM: no result (the guest did not finish; see $LOG)"; exit 1; }
exit "$code"
