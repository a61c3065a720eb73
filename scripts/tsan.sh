#!/bin/bash
# ThreadSanitizer run of the threaded parts: the encoder pool
# (engine/encoder.c), the sender handle (engine/sender.c, engine/api.c), the
# receiver handle (engine/recv_api.c) and UCX progress (verbs/ucx*.c),
# through the tests that drive them:
#
#   scripts/tsan.sh [BUILD_DIR] [TEST...]
#
#   BUILD_DIR   default build-tsan, configured here on first use
#               (gcc, -Db_sanitize=thread -Dcuda=disabled)
#   TEST        meson test names (default: engine_api engine_refit
#               engine_shards engine_receiver verbs_ucx)
#
# The library, the deltacast command the proc tests start, and the test
# files are all instrumented; the test files run under tests/msan's
# Criterion-compatible runner (Criterion's own cannot run under TSan, see
# tests/meson.build).  Every process writes its reports to
# BUILD_DIR/tsan-reports/ (TSAN_OPTIONS log_path), so that a race in a
# node process whose exit status a test does not check still fails the
# run; they are printed at the end.  Suppressions (.ci/tsan.supp) are for
# third-party libraries only, each with its reason.  Exit 0 when every test
# passed and no process reported.
set -uo pipefail
cd "$(dirname "$0")/.."
src=$(pwd)
dir=${1:-build-tsan}
[ $# -gt 0 ] && shift
tests=("$@")
[ ${#tests[@]} -gt 0 ] || tests=(engine_api engine_refit engine_shards engine_receiver verbs_ucx)
if [ ! -f "$dir/build.ninja" ]; then
  CC=${CC:-gcc} meson setup "$dir" -Db_sanitize=thread -Db_lundef=false -Dwerror=true \
    -Dcuda=disabled >"$dir.setup.log" 2>&1 ||
    { tail -20 "$dir.setup.log"; echo "tsan.sh: meson setup $dir failed" >&2; exit 1; }
fi
reports="$src/$dir/tsan-reports"
case "$dir" in /*) reports="$dir/tsan-reports" ;; esac
rm -rf "$reports"
mkdir -p "$reports"
# halt_on_error=0: every report of a run is seen, not only the first;
# exitcode 66 (the default) fails the process that reported
export TSAN_OPTIONS="log_path=$reports/report second_deadlock_stack=1 history_size=4 suppressions=$src/.ci/tsan.supp"
# UCX's memory hooks (libucm, loaded with the library by every process)
# patch madvise(); glibc calls it from an exiting thread, after TSan has
# torn that thread's state down, and the process dies in TSan's
# pthread_rwlock_rdlock (any `deltacast gen --threads 1` did).  The tests
# need no UCX memory events (host memory, no registration cache).
export UCX_MEM_MMAP_HOOK_MODE=none
# GCC 12's TSan maps its shadow for at most 28 bits of mmap randomness;
# on kernels set to more (vm.mmap_rnd_bits, 32 on some distributions) it
# dies with "unexpected memory mapping": run without ASLR there.
norand=()
if [ "$(cat /proc/sys/vm/mmap_rnd_bits 2>/dev/null || echo 28)" -gt 28 ]; then
  norand=(setarch "$(uname -m)" -R)
fi
# The run can fail: a racy canary, built and run the same way, must leave
# a data-race report where the tests' reports are collected.
canary="$dir/tsan-canary"
printf '%s\n' '#include <pthread.h>' 'static int x;' \
  'static void *f(void *a) { x++; return a; }' \
  'int main(void) { pthread_t t; pthread_create(&t, 0, f, 0); x++; pthread_join(t, 0); return 0; }' \
  >"$canary.c"
rm -rf "$reports.canary"
mkdir -p "$reports.canary"
${CC:-gcc} -fsanitize=thread -g -O1 "$canary.c" -o "$canary" -pthread ||
  { echo "tsan.sh: cannot build a ThreadSanitizer program with ${CC:-gcc}" >&2; exit 1; }
TSAN_OPTIONS="log_path=$reports.canary/report" "${norand[@]}" "$canary" 2>/dev/null
if ! grep -qs 'data race' "$reports.canary"/report.*; then
  echo "tsan.sh: a racy canary left no report in $reports.canary: reports would be lost" >&2
  exit 1
fi
rc=0
"${norand[@]}" meson test -C "$dir" --print-errorlogs --num-processes 2 "${tests[@]}" || rc=1
n=$(find "$reports" -type f | wc -l)
if [ "$n" -gt 0 ]; then
  echo "tsan.sh: $n process(es) reported (files in $reports):"
  for f in "$reports"/*; do
    echo "--- $f"
    cat "$f"
  done
  rc=1
else
  echo "tsan.sh: no ThreadSanitizer report from any process"
fi
exit $rc
