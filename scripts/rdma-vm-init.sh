#!/bin/sh
# PID 1 of the VM that scripts/rdma-vm.sh boots (see there): mounts, the
# repository's writable export, soft-RoCE on a veth, the command, poweroff.
export PATH=/usr/sbin:/usr/bin:/sbin:/bin
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev 2>/dev/null
mkdir -p /dev/pts /dev/shm
mount -t devpts devpts /dev/pts
for d in /tmp /run /dev/shm /var/tmp /root; do mount -t tmpfs tmpfs "$d"; done
repo="" run=""
for a in $(cat /proc/cmdline); do
  case "$a" in
    dcvm.repo=*) repo=${a#dcvm.repo=} ;;
    dcvm.run=*) run=${a#dcvm.run=} ;;
  esac
done
# (a repository under /tmp is hidden by the guest's own /tmp: make its path)
mkdir -p "$repo"
if ! mount -t 9p -o trans=virtio,version=9p2000.L,msize=262144 repo "$repo"; then
  echo "rdma-vm: cannot mount the repository at $repo"
  poweroff -f
fi
hostname dcvm
ip link set lo up
modprobe -q rdma_rxe && modprobe -q ib_uverbs && modprobe -q rdma_ucm
# a veth pair inside the guest only, link-local addresses, rxe on each end
ip link add veth0 type veth peer name veth1
ip addr add 169.254.77.1/24 dev veth0
ip addr add 169.254.77.2/24 dev veth1
ip link set veth0 up
ip link set veth1 up
rdma link add rxe0 type rxe netdev veth0
rdma link add rxe1 type rxe netdev veth1
ulimit -l unlimited
echo "rdma-vm: $(uname -r), $(nproc) CPUs; devices: $(ls /sys/class/infiniband | tr '\n' ' ')"
cd "$repo"
export DELTACAST_TEST_RDMA_ADDR=169.254.77.1 DELTACAST_TEST_RDMA_ADDR2=169.254.77.2
export DELTACAST_TEST_RDMA_DEV=rxe0 HOME=/root
sh -c "$(cat "$run/cmd")"
echo $? >"$run/rc"
sync
poweroff -f
