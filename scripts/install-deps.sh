#!/usr/bin/env bash
# Installs the Debian packages ec-store builds, tests and benchmarks with. Idempotent: does
# nothing (not even apt-get update) when everything is already installed.
# Usage: scripts/install-deps.sh [build]   (build: only what building the library, the CLI
# and the demo needs -- `make demo`; else everything the tests and benchmarks use too)
set -euo pipefail
PKGS=(build-essential cmake ninja-build pkg-config python3
      liburing-dev liblz4-dev libsqlite3-dev libspdlog-dev libfmt-dev libcli11-dev libcpp-httplib-dev
      nlohmann-json3-dev libxxhash-dev libsystemd-dev libibverbs-dev librdmacm-dev libssl-dev
      libzmq3-dev cppzmq-dev libmsgpack-cxx-dev)
if [ "${1:-all}" != build ]; then
  PKGS+=(libgtest-dev libbenchmark-dev systemd etcd-server etcd-client
         gnuplot-nox fio clang clang-format libclang-rt-14-dev redis-server libhiredis-dev
         ibverbs-providers rdma-core iproute2
         qemu-system-x86 busybox-static cpio kmod prometheus)
fi
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "deps: all ${#PKGS[@]} Debian packages present"
  exit 0
fi
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
echo "deps: installing ${missing[*]}"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "deps: done"
