#!/bin/bash
# examples.sh [BUILD_DIR] - use deltacast the way a user who installed it
# does: `meson install` of BUILD_DIR (default build) into a temporary
# DESTDIR, then from outside the source tree
#   - the C examples (examples/) built through pkg-config (examples/Makefile)
#     and through CMake (find_package(deltacast), deltacast::deltacast);
#   - a sender and two receivers on loopback, checked byte-exact, for each;
#   - the installed Python module with /usr/bin/python3: it must load the
#     installed library (no LD_LIBRARY_PATH, no build tree), and
#     examples/sender.py refits to a C receiver byte-exact; the torch
#     examples/trainer.py refits two examples/rollout.py nodes byte-exact;
#   - the mpirun line of examples/README.md, and the Slurm batch script's
#     topology (and the batch script itself when Slurm is up here);
#   - examples/loopback-job.sh: a job without a topology file or launcher;
#   - libdeltacast.so has no libcudart among its NEEDED libraries.
# One "PASS name" / "FAIL name: why" / "SKIP name: why" line per check, then
# "N passed, N failed, N skipped", also written to BUILD_DIR/examples-count.txt
# (.ci/count.py reads it).  Exit status 1 when a check failed.
set -u
cd "$(dirname "$0")/.."
src=$(pwd)
build=${1:-build}
build=$(cd "$build" && pwd) || { echo "examples.sh: no build directory $1"; exit 1; }
count="$build/examples-count.txt"
passed=0 failed=0 skipped=0
pass() { echo "PASS $1"; passed=$((passed + 1)); }
fail() { echo "FAIL $1: $2"; failed=$((failed + 1)); }
skip() { echo "SKIP $1: $2"; skipped=$((skipped + 1)); }
finish() {
  echo "$passed passed, $failed failed, $skipped skipped" | tee "$count"
  [ "$failed" -eq 0 ]
  exit $?
}
py=/usr/bin/python3
tmp=$(mktemp -d /tmp/deltacast-examples.XXXXXX)
keep=${KEEP_EXAMPLES_TMP:-}
trap '[ -n "$keep" ] || rm -rf "$tmp"' EXIT
log=$tmp/log
mkdir -p "$log"
# The examples run with a fresh job secret and TCP on loopback, from $tmp.
export DELTACAST_SECRET_FILE=$tmp/job.secret
(umask 077 && head -c 32 /dev/urandom | base64 > "$DELTACAST_SECRET_FILE")
export DELTACAST_TRANSPORT=tcp
unset DELTACAST_LIB LD_LIBRARY_PATH PYTHONPATH
cd "$tmp"

# --- install ----------------------------------------------------------------
dest=$tmp/root
if ! ninja -C "$build" >"$log/ninja" 2>&1; then
  fail build "ninja -C $build failed (tail: $(tail -1 "$log/ninja"))"
  finish
fi
if ! meson install -C "$build" --no-rebuild --destdir "$dest" >"$log/install" 2>&1; then
  fail install "meson install failed (tail: $(tail -1 "$log/install"))"
  finish
fi
# where meson put each file (prefix paths; under $dest after DESTDIR)
installed() {
  "$py" -c 'import json, sys
for k, v in json.load(sys.stdin).items():
    if v.endswith(sys.argv[1]): print(v); break' "$1" < <(meson introspect "$build" --installed)
}
lib=$dest$(installed /libdeltacast.so.0.2)
pc=$dest$(installed /deltacast.pc)
cmakecfg=$dest$(installed /deltacastConfig.cmake)
pymod=$dest$(installed /deltacast.py)
hdr=$dest$(installed /deltacast.h)
prefix=$dest$(meson introspect "$build" --buildoptions | "$py" -c 'import json, sys
print([o["value"] for o in json.load(sys.stdin) if o["name"] == "prefix"][0])')
missing=""
for f in "$lib" "$pc" "$cmakecfg" "${cmakecfg%Config.cmake}ConfigVersion.cmake" "$pymod" "$hdr"; do
  [ -f "$f" ] || missing="$missing $f"
done
if [ -z "$missing" ]; then pass install; else fail install "missing:$missing"; finish; fi

# --- libcudart is no hard dependency ----------------------------------------
needed=$(readelf -d "$lib" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | tr '\n' ' ')
if echo "$needed" | grep -q "libcudart\|libcuda\.so"; then
  fail no_cudart_needed "$(basename "$lib") needs: $needed"
else
  pass no_cudart_needed
fi

# a pair: sender + receivers on loopback, each receiver's weights == the sender's
# below the kernel's ephemeral range: a port in it can be some connection's
# local port at the moment a sender binds it (EADDRINUSE, seen in CI)
eph=$(cut -f1 /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || echo 32768)
[ "$eph" -gt 12000 ] 2>/dev/null || eph=32768
PORT=$((10000 + RANDOM % (eph - 11000)))
pair() { # NAME N RECEIVER SENDER_CMD... (N receivers, ports from $PORT; RECEIVER
         # is split into words: "python3 rollout.py")
  local name=$1 n=$2 recv=$3
  shift 3
  local dir=$tmp/$name
  mkdir -p "$dir"
  PORT=$((PORT + 10))
  local topo=local:$n:$PORT pids=() r ok=1
  for r in $(seq 1 "$n"); do
    # shellcheck disable=SC2086
    timeout 120 $recv "$topo" "$r" "$dir/state/%r" "$dir/out%r.bin" >"$log/$name-r$r" 2>&1 &
    pids+=($!)
  done
  if ! timeout 120 "$@" "$topo" 3 "$dir/state/0" "$dir/out0.bin" >"$log/$name-s" 2>&1; then
    ok=0
  fi
  for r in "${!pids[@]}"; do wait "${pids[$r]}" || ok=0; done
  for r in $(seq 1 "$n"); do cmp -s "$dir/out0.bin" "$dir/out$r.bin" || ok=0; done
  if [ $ok = 1 ] && grep -q "version 3 committed" "$log/$name-s"; then
    pass "$name"
  else
    fail "$name" "logs: $(tail -n 3 "$log/$name"-* | tr '\n' ' ')"
  fi
}
# the programs must load the installed library, not the build's
loads_installed() { # NAME PROGRAM
  local got
  got=$(ldd "$2" | sed -n 's/^\s*libdeltacast\.so[^ ]* => \([^ ]*\).*/\1/p')
  if [ "$(readlink -f "$got")" = "$(readlink -f "$lib")" ]; then
    pass "$1"
  else
    fail "$1" "$2 loads libdeltacast from '${got:-nowhere}', not $lib"
  fi
}

# --- pkg-config -------------------------------------------------------------
export PKG_CONFIG_PATH=${pc%/*} PKG_CONFIG_SYSROOT_DIR=$dest
mkdir -p pc
if make -C pc -f "$src/examples/Makefile" VPATH="$src/examples" \
     CFLAGS="-O2 -Wall -Wextra -Werror" >"$log/make" 2>&1; then
  pass pkgconfig_build
  loads_installed pkgconfig_rpath pc/sender
  pair pkgconfig_loopback 2 pc/receiver pc/sender
else
  fail pkgconfig_build "$(tail -n 3 "$log/make" | tr '\n' ' ')"
fi
unset PKG_CONFIG_PATH PKG_CONFIG_SYSROOT_DIR

# --- CMake ------------------------------------------------------------------
if command -v cmake >/dev/null; then
  if cmake -S "$src/examples" -B cm -DCMAKE_PREFIX_PATH="$prefix" \
       -DCMAKE_C_FLAGS="-Wall -Wextra -Werror" >"$log/cmake" 2>&1 &&
     cmake --build cm >>"$log/cmake" 2>&1; then
    pass cmake_build
    loads_installed cmake_rpath cm/sender
    pair cmake_loopback 1 cm/receiver cm/sender
  else
    fail cmake_build "$(tail -n 3 "$log/cmake" | tr '\n' ' ')"
  fi
  # the version file: 0.2.x accepted above, another minor refused
  if cmake -S "$src/examples" -B cm3 -DCMAKE_PREFIX_PATH="$prefix" \
       -DDELTACAST_VERSION_WANTED=0.3 >"$log/cmake3" 2>&1; then
    fail cmake_version "find_package(deltacast 0.3) accepted version 0.2"
  elif grep -q "compatible with requested version \"0.3\"" "$log/cmake3"; then
    pass cmake_version
  else
    fail cmake_version "refused, but not by the version file: $(tail -n 3 "$log/cmake3" | tr '\n' ' ')"
  fi
else
  skip cmake_build "cmake not installed (scripts/install-deps.sh installs it)"
fi

# --- Python -----------------------------------------------------------------
pydir=${pymod%/*}
if out=$(PYTHONPATH=$pydir "$py" -c 'import deltacast as dc, sys
path, how = dc.library_path()
print(dc.__file__, path, how, dc.version(), sep="\n")
from deltacast import *  # noqa: F403, __all__ names only
' 2>"$log/python"); then
  set -- $out
  if [ "$1" = "$pymod" ] && [ "$(readlink -f "$2")" = "$(readlink -f "$lib")" ] &&
     [ "$3 $4 $5 $6" = "installed beside this module" ] && [ ! -s "$log/python" ]; then
    pass python_import
  else
    fail python_import "module $1 loaded '$2' ($3 $4 $5 $6); stderr: $(cat "$log/python")"
  fi
else
  fail python_import "$(tail -n 3 "$log/python" | tr '\n' ' ')"
fi
if ! "$py" -c "import numpy" 2>/dev/null; then
  skip python_loopback "no numpy for $py"
elif [ -x cm/receiver ] || [ -x pc/receiver ]; then
  recv=cm/receiver
  [ -x "$recv" ] || recv=pc/receiver
  PYTHONPATH=$pydir pair python_loopback 1 "$recv" "$py" "$src/examples/sender.py"
else
  skip python_loopback "no C receiver was built"
fi
# torch: examples/trainer.py (AdamW steps, Sender.from_state_dict) to two
# examples/rollout.py nodes (Receiver.from_state_dict: the model's tensors
# refit in place, held around each generation); the rollouts' weights equal
# the trainer's byte for byte after every step (OUT.vN) and at the end
if ! "$py" -c "import torch" 2>/dev/null; then
  skip torch_loopback "no torch for $py (apt-get install python3-torch)"
else
  PYTHONPATH=$pydir pair torch_loopback 2 "$py $src/examples/rollout.py" \
    "$py" "$src/examples/trainer.py"
  bad=""
  for v in 1 2 3; do
    for r in 1 2; do
      cmp -s "$tmp/torch_loopback/out0.bin.v$v" "$tmp/torch_loopback/out$r.bin.v$v" ||
        bad="$bad rollout $r v$v"
    done
  done
  if [ -z "$bad" ]; then
    pass torch_every_step
  else
    fail torch_every_step "weights differ from the trainer's (or are missing):$bad"
  fi
fi

# --- launchers ---------------------------------------------------------------
recv=pc/receiver
[ -x "$recv" ] || recv=cm/receiver
if ! command -v mpirun >/dev/null; then
  skip mpirun_line "mpirun not installed"
elif [ ! -x "$recv" ]; then
  skip mpirun_line "no C examples were built"
else
  # examples/README.md's line (root needs --allow-run-as-root; 3 ranks on
  # fewer cores need --oversubscribe); OMPI_COMM_WORLD_RANK gives the rank
  mkdir -p mpi && cd mpi
  PORT=$((PORT + 10))
  root=""
  [ "$(id -u)" = 0 ] && root=--allow-run-as-root
  if timeout 120 mpirun $root --oversubscribe -x DELTACAST_SECRET_FILE -x DELTACAST_TRANSPORT \
       -np 1 ../${recv%/*}/sender local:2:$PORT 3 st/0 out0.bin : \
       -np 2 ../$recv local:2:$PORT auto st/%r out%r.bin >"$log/mpirun" 2>&1 &&
     cmp -s out0.bin out1.bin && cmp -s out0.bin out2.bin; then
    pass mpirun_line
  else
    fail mpirun_line "$(tail -n 4 "$log/mpirun" | tr '\n' ' ')"
  fi
  cd "$tmp"
fi
# the batch script: its syntax, and the topology it writes read by deltacast
dcbin=$dest$(installed /bin/deltacast)
if bash -n "$src/examples/refit.sbatch" 2>"$log/sbatch" &&
   "$src/examples/slurm-topology.sh" 7300 gpu-001 gpu-001 gpu-002 > slurm.yaml 2>>"$log/sbatch" &&
   "$dcbin" plan --topology slurm.yaml >>"$log/sbatch" 2>&1 &&
   grep -q "3 nodes" "$log/sbatch"; then
  pass slurm_script
else
  fail slurm_script "$(tail -n 3 "$log/sbatch" | tr '\n' ' ')"
fi
# a job with no topology file and no launcher (--nodelist, --port 0, a rendezvous)
mkdir -p loop
if (cd loop && DELTACAST=$dcbin timeout 120 "$src/examples/loopback-job.sh" 2 >"$log/loopback" 2>&1) &&
   grep -q "refit to 2 receivers, byte-exact" "$log/loopback"; then
  pass loopback_job
else
  fail loopback_job "$(tail -n 3 "$log/loopback" | tr '\n' ' ')"
fi
if [ ! -x "$recv" ]; then
  skip slurm_job "no C examples were built"
elif ! timeout 10 sinfo >/dev/null 2>&1; then
  skip slurm_job "no Slurm controller here (scripts/slurm-setup.sh starts one)"
else
  mkdir -p sbatch
  # EXAMPLES: the folder of the built programs beside the scripts, as
  # `make -C examples` leaves it
  cp "$src/examples/sender.py" "$src/examples/slurm-topology.sh" "${recv%/*}/"
  if (cd sbatch && PYTHONPATH=$pydir EXAMPLES=$tmp/${recv%/*} DELTACAST_PORT=$((PORT + 20)) \
        PYTHON=$py VERSIONS=3 timeout 300 sbatch --wait --nodes=1 --ntasks=3 --overcommit \
        --output=job.out "$src/examples/refit.sbatch" >"$log/sbatch-job" 2>&1) &&
     grep -q "3 versions refit to 2 receivers" sbatch/job.out; then
    pass slurm_job
  else
    fail slurm_job "$(tail -n 4 sbatch/job.out "$log/sbatch-job" 2>/dev/null | tr '\n' ' ')"
  fi
fi
finish
