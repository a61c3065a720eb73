#!/bin/sh
# The kernel, codec and delta suites and the decoders' fuzz corpora under
# every kernel ISA this CPU has (DELTACAST_KERN_ISA) and several fixed
# MALLOC_PERTURB_ values: a kernel's output must be a function of its inputs
# only, so what the heap held before may change nothing.
#
#   scripts/sweep.sh [BUILD_DIR] [PERTURB...]   (default: build, 1 77 140 255)
#   SWEEP_ISAS="avx512" scripts/sweep.sh ...     (only these of the CPU's ISAs)
#
# BUILD_DIR must be built.  Each run's meson log is
# BUILD_DIR/meson-logs/sweep-<isa>-<perturb>.json (.ci/count.py counts them).
set -eu
cd "$(dirname "$0")/.."
dir=${1:-build}
[ $# -gt 0 ] && shift
perturbs=${*:-1 77 140 255}
# the ISAs the build's dispatcher runs on this CPU (an unsupported
# DELTACAST_KERN_ISA falls back with a warning, so ask it)
isas=$("$dir/cli/deltacast" --version | sed -n 's/^kernels: .*(this CPU runs: *\(.*\))$/\1/p')
[ -n "$isas" ] || { echo "sweep: $dir/cli/deltacast --version names no kernel ISA"; exit 1; }
if [ -n "${SWEEP_ISAS:-}" ]; then
  want=""
  for i in $SWEEP_ISAS; do
    case " $isas " in
      *" $i "*) want="$want $i" ;;
      *) echo "sweep: $i is not among this build's ISAs ($isas)"; exit 1 ;;
    esac
  done
  isas=$want
fi
tests=$(meson test -C "$dir" --list 2>/dev/null |
  sed -n 's/.* \/ \(kernels_[a-z0-9_]*\|fuzz_[a-z]*_replay\)$/\1/p' |
  grep -v -e '^kernels_gen_slow$' -e '^kernels_perf_codec$' -e '^kernels_kern_cuda$')
rc=0
for isa in $isas; do
  for p in $perturbs; do
    echo "sweep: DELTACAST_KERN_ISA=$isa MALLOC_PERTURB_=$p"
    # shellcheck disable=SC2086
    if ! DELTACAST_KERN_ISA=$isa MALLOC_PERTURB_=$p meson test -C "$dir" --no-rebuild \
        --num-processes 2 --print-errorlogs --logbase "sweep-$isa-$p" $tests >/dev/null; then
      echo "sweep: FAILED with DELTACAST_KERN_ISA=$isa MALLOC_PERTURB_=$p" \
           "(see $dir/meson-logs/sweep-$isa-$p.txt)"
      rc=1
    fi
  done
done
echo "sweep: ISAs: $isas; MALLOC_PERTURB_: $perturbs"
exit $rc
