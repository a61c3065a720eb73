#!/bin/bash
# devsend-bench.sh - what a device sender and a device receiver move across
# PCIe per 4 MiB chunk against the payload, on real optimizer steps: the
# BF16 tensors of step0 -> step1 of RDIR/lr1e-6 and RDIR/lr1e-5
# (perf/train-steps.py's output), cut into 4 MiB chunks, each encoded by
# the CPU and by the device sender (engine/devsend.c) and applied by a
# device receiver (engine/devpath.c) on the emulated CUDA runtime
# (tests/emu/; on a GPU machine DELTACAST_TEST_REAL_CUDA=1 uses the GPU's
# runtime), payloads and results byte-compared, bytes counted; then the
# synthetic chunk (1% changed).
#
#   perf/devsend-bench.sh [-b BUILD] [--real RDIR [--train]]
#
#   -b BUILD   the build directory (default build)
#   --real     the step pairs' directory (default /dev/shm/dc-real)
#   --train    run perf/train-steps.py --out RDIR first when RDIR holds no
#              pair (/usr/bin/python3 with torch; a few minutes on 2 cores)
#
# Prints two lines per pair: the sender's chunks, D2H bytes, payload bytes,
# their ratio; the receiver's H2D + D2H bytes against the same payload (the
# issue's target for both: within 1.5x of the payload).  The emulated kernels
# run on the CPU: a 4 MiB chunk takes ~30 s here.
set -uo pipefail
cd "$(dirname "$0")/.."
build=build
real=/dev/shm/dc-real
train=0
while [ $# -gt 0 ]; do
  case "$1" in
    -b) build=$2; shift 2 ;;
    --real) real=$2; shift 2 ;;
    --train) train=1; shift ;;
    -h|--help) sed -n '2,/^set /p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "devsend-bench.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
t="$build/tests/emu_test_emu_sender"
[ -x "$t" ] || { echo "devsend-bench.sh: $t is not built (ninja -C $build)" >&2; exit 1; }
if [ ! -f "$real/lr1e-6/step1.safetensors" ]; then
  if [ $train -eq 1 ]; then
    /usr/bin/python3 perf/train-steps.py --out "$real" || exit 1
  else
    echo "devsend-bench.sh: no pair under $real (perf/train-steps.py --out $real, or --train)" >&2
    exit 1
  fi
fi
rc=0
for lr in 1e-6 1e-5; do
  d="$real/lr$lr"
  [ -f "$d/step1.safetensors" ] || continue
  DELTACAST_DEVSEND_PAIR="$d/step0.safetensors,$d/step1.safetensors" \
    "$t" --filter 'emu_sender/d2h_of_4mib*' 2>&1 | grep -E '^emu_sender:|FAIL|Assert' || rc=1
done
"$t" --filter 'emu_sender/d2h_of_4mib*' 2>&1 | grep -E '^emu_sender:|FAIL|Assert' || rc=1
exit $rc
