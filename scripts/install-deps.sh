#!/bin/sh
# Install what deltacast needs to build, test and benchmark on Debian 12.
# Run as root.  Idempotent; quiet unless something fails.
set -eu
PKGS="build-essential meson ninja-build pkg-config python3
  libzstd-dev libxxhash-dev libjansson-dev libssl-dev libyaml-dev
  libcriterion-dev libhwloc-dev libisal-dev libsimde-dev cmake
  libucx-dev ucx-utils libibverbs-dev librdmacm-dev ibverbs-utils
  iproute2 iperf3 xdelta3 zstd gnuplot-nox graphviz
  slurm-wlm munge openmpi-bin libopenmpi-dev python3-numpy python3-torch"
missing=""
for p in $PKGS; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
if [ -n "$missing" ]; then
  echo "install-deps: installing:$missing" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q >/dev/null
  apt-get install -y -q --no-install-recommends $missing >/dev/null
fi
