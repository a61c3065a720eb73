#!/bin/sh
# Run a command inside a VM whose kernel has soft-RoCE (rdma_rxe), so that
# the rdma transport runs on a real verbs device on a machine without one.
#
#   scripts/rdma-vm.sh [-t SECONDS] [-m MiB] 'COMMAND LINE'
#
# The VM is Debian's own kernel (package linux-image-amd64) under qemu's TCG
# (-accel tcg: this machine's /dev/kvm hangs a guest early), with no network
# card.  Its root file system is this machine's, read-only over virtio-9p, so
# the guest has every package installed here; the repository is a second,
# writable 9p export at the same path, so a build tree runs as it is.  The
# guest's init (scripts/rdma-vm-init.sh) loads rdma_rxe, ib_uverbs and
# rdma_ucm, creates a veth pair with link-local addresses that exist only
# inside the guest, adds rxe0 on veth0, runs COMMAND LINE from the repository
# root with DELTACAST_TEST_RDMA_ADDR / DELTACAST_TEST_RDMA_DEV set, and powers
# off.  Its output is this script's; its exit status is this script's (125:
# the VM did not run it; 124: the time limit, default 1200 s, passed).
# Everything runs under emulation: functional, ~10-50x slower than native.
set -eu
cd "$(dirname "$0")/.."
repo=$(pwd)
limit=1200
mem=2048
while [ $# -gt 1 ]; do
  case "$1" in
    -t) limit=$2; shift 2 ;;
    -m) mem=$2; shift 2 ;;
    --) shift; break ;;
    *) break ;;
  esac
done
[ $# -eq 1 ] || { echo "usage: scripts/rdma-vm.sh [-t SECONDS] [-m MiB] 'COMMAND LINE'" >&2; exit 2; }

need=""
for p in qemu-system-x86 linux-image-amd64 initramfs-tools rdma-core ibverbs-providers \
         iproute2 kmod; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || need="$need $p"
done
if [ -n "$need" ]; then
  echo "rdma-vm: installing:$need" >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $need >/dev/null
fi
kver=$(ls /lib/modules | sort -V | while read -r v; do
  [ -f "/boot/vmlinuz-$v" ] && [ -n "$(find "/lib/modules/$v" -name 'rdma_rxe.ko*' | head -1)" ] &&
    echo "$v"; done | tail -1)
[ -n "$kver" ] || { echo "rdma-vm: no installed kernel with rdma_rxe (linux-image-amd64)" >&2; exit 125; }

# an initramfs that can mount a 9p root (built once per kernel)
state="${DELTACAST_RDMA_VM_DIR:-/var/tmp/deltacast-rdma-vm}"
mkdir -p "$state"
initrd="$state/initrd-9p-$kver"
if [ ! -s "$initrd" ]; then
  conf=$(mktemp -d)
  cp -a /etc/initramfs-tools/. "$conf/"
  printf '9p\n9pnet\n9pnet_virtio\nvirtio_pci\n' >>"$conf/modules"
  echo "rdma-vm: building $initrd" >&2
  mkinitramfs -d "$conf" -o "$initrd.tmp" "$kver" 2>/dev/null
  mv "$initrd.tmp" "$initrd"
  rm -rf "$conf"
fi

run=$(mktemp -d "$repo/.rdma-vm.XXXXXX")
trap 'rm -rf "$run"' EXIT INT TERM
printf '%s\n' "$1" >"$run/cmd"
echo 125 >"$run/rc"
out=$run
# -no-reboot + panic=-1: an init that dies ends the VM; poweroff -f ends it too
timeout "$limit" qemu-system-x86_64 -accel tcg -m "$mem" -smp 2 -nographic -no-reboot \
  -kernel "/boot/vmlinuz-$kver" -initrd "$initrd" \
  -append "console=ttyS0 quiet loglevel=3 panic=-1 root=hostroot rootfstype=9p rootflags=trans=virtio,version=9p2000.L,msize=262144,cache=loose ro init=$repo/scripts/rdma-vm-init.sh dcvm.repo=$repo dcvm.run=$out" \
  -virtfs local,path=/,mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap \
  -virtfs local,path="$repo",mount_tag=repo,security_model=none,multidevs=remap \
  -nic none </dev/null | tr -d '\r' | sed -e '/^\x1b/d'
qrc=$?
rc=$(cat "$run/rc" 2>/dev/null || echo 125)
if [ "$qrc" = 124 ]; then
  echo "rdma-vm: the VM passed its time limit ($limit s)" >&2
  exit 124
fi
exit "$rc"
