#!/bin/bash
# Real fuzzing (libFuzzer) of every fuzz target, for a bounded time each:
#
#   scripts/fuzz.sh [-t SECONDS] [-b BUILD_DIR] [--merge] [TARGET...]
#
#   -t SECONDS   time per target (default 25; CI's value); run longer to
#                look harder, e.g. -t 1800
#   -b DIR       the clang build with coverage on the library (default
#                build-fuzz; configured here on first use, see the comment
#                at the top of tests/fuzz/meson.build)
#   --merge      afterwards, merge what each run found into its corpus
#                (tests/fuzz/corpus/TARGET: only inputs that add coverage)
#   TARGET       delta safetensors topology wire rdma ... (default: every
#                tests/fuzz/fuzz_TARGET.c)
#
# Each target runs from a copy of its corpus (the checked-in corpus is left
# as it is), under ASan + UBSan (halting on the first report), with a
# per-input timeout of 10 s and 2 GiB of RSS.  A crash, leak, timeout or
# out-of-memory fails the target: its log tail and the input that did it
# (hex and base64, so that it can be rebuilt from a CI log) are printed, and
# the input is kept under DIR/fuzz-runs/TARGET/.  Add it to
# tests/fuzz/corpus/TARGET/ with the fix (the replay tests then run it).
# A "slow unit" alone (one input over 10 s while the run went on) is
# replayed twice: it fails only when a replay is slow too (over 2 s), else
# the target passes and its line says so (these machines are shared: one
# stalled 13 s on a 41-byte input that replays in 0.14 s).
# Prints one line per target and "N passed, N failed, 0 skipped" last, also
# written to DIR/fuzz-count.txt (.ci/count.py counts each target as a test).
set -uo pipefail
cd "$(dirname "$0")/.."
secs=25
dir=build-fuzz
merge=0
targets=()
while [ $# -gt 0 ]; do
  case "$1" in
    -t) secs=$2; shift 2 ;;
    -b) dir=$2; shift 2 ;;
    --merge) merge=1; shift ;;
    -h|--help) sed -n '2,/^set /p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    -*) echo "fuzz.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
    *) targets+=("$1"); shift ;;
  esac
done
if [ ${#targets[@]} -eq 0 ]; then
  # every tests/fuzz/fuzz_NAME.c (a new target is picked up by itself)
  for f in tests/fuzz/fuzz_*.c; do
    t=${f#tests/fuzz/fuzz_}
    targets+=("${t%.c}")
  done
fi
for t in "${targets[@]}"; do
  if [ ! -f "tests/fuzz/fuzz_$t.c" ] || [ ! -d "tests/fuzz/corpus/$t" ]; then
    echo "fuzz.sh: no target $t (tests/fuzz/fuzz_$t.c and tests/fuzz/corpus/$t/)" >&2
    exit 2
  fi
done
count="$dir/fuzz-count.txt"
fail_all() { mkdir -p "$dir"; echo "$1" >&2; echo "0 passed, ${#targets[@]} failed, 0 skipped" | tee "$count"; exit 1; }

# clang and its runtimes (libFuzzer, ASan, UBSan) from Debian when missing
need=""
for p in clang libclang-rt-14-dev; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || need="$need $p"
done
if [ -n "$need" ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  echo "fuzz.sh: installing:$need" >&2
  # shellcheck disable=SC2086
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $need >/dev/null
fi
command -v clang >/dev/null || fail_all "fuzz.sh: clang is not installed (libFuzzer comes with it)"
if [ ! -f "$dir/build.ninja" ]; then
  # (C++: the emulated CUDA runtime of fuzz_devctx, instrumented as well)
  CC=clang CXX=clang++ meson setup "$dir" -Db_sanitize=address,undefined -Db_lundef=false \
    -Dcuda=disabled -Dc_args=-fsanitize=fuzzer-no-link -Dcpp_args=-fsanitize=fuzzer-no-link \
    >"$dir.setup.log" 2>&1 ||
    { tail -20 "$dir.setup.log"; fail_all "fuzz.sh: meson setup $dir failed (log: $dir.setup.log)"; }
fi
bins=()
for t in "${targets[@]}"; do bins+=("tests/fuzz/fuzz_$t"); done
if ! ninja -C "$dir" "${bins[@]}" >"$dir/fuzz-build.log" 2>&1; then
  tail -30 "$dir/fuzz-build.log"
  fail_all "fuzz.sh: building ${bins[*]} in $dir failed (is it a clang build with libFuzzer?)"
fi

export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:symbolize=1
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
# replay_slow TARGET RUN: replays every slow unit in RUN/found twice; prints
# "; ..." (what was slow, how long each replay took) when every replay took
# under 2 s, nothing otherwise
replay_slow() {
  local t=$1 run=$2 a ms worst=0 said=""
  for a in "$run"/found/slow-unit-*; do
    for _ in 1 2; do
      local t0 t1
      t0=$(date +%s%N)
      "$dir/tests/fuzz/fuzz_$t" -runs=1 -timeout=10 "$a" >>"$run/replay.log" 2>&1 || return 0
      t1=$(date +%s%N)
      ms=$(( (t1 - t0) / 1000000 ))
      [ $ms -gt $worst ] && worst=$ms
    done
    said="$said $(basename "$a")"
  done
  [ $worst -lt 2000 ] || return 0
  echo "; slow once (libFuzzer:$(grep -o 'Slow unit: [0-9]* s' "$run/log" | head -1 | cut -d' ' -f3) s):$said, replayed twice in at most $worst ms: a stall of the machine, not counted"
}

passed=0
failed=0
for t in "${targets[@]}"; do
  run="$dir/fuzz-runs/$t"
  rm -rf "$run"
  mkdir -p "$run/corpus" "$run/found"
  cp tests/fuzz/corpus/"$t"/* "$run/corpus/"
  n0=$(ls "$run/corpus" | wc -l)
  start=$(date +%s)
  "$dir/tests/fuzz/fuzz_$t" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 \
    -print_final_stats=1 -artifact_prefix="$run/found/" "$run/corpus" >"$run/log" 2>&1
  st=$?
  took=$(( $(date +%s) - start ))
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$run/log" | tail -1)
  cov=$(grep -o 'cov: [0-9]*' "$run/log" | tail -1 | cut -d' ' -f2)
  n1=$(ls "$run/corpus" | wc -l)
  # a slow unit alone (libFuzzer: one input over 10 s, the run went on)
  # is replayed: slow again is a failure; fast is a stall of this shared
  # machine, said and kept out of the count
  stall=""
  if [ $st -eq 0 ] && [ -n "$(ls "$run/found")" ] && [ -z "$(ls "$run/found" | grep -v '^slow-unit-')" ]; then
    stall=$(replay_slow "$t" "$run")
  fi
  if [ $st -eq 0 ] && { [ -z "$(ls "$run/found")" ] || [ -n "$stall" ]; }; then
    echo "fuzz_$t: ok: ${runs:-?} inputs in ${took} s, ${cov:-?} edges, corpus $n0 -> $n1${stall}"
    passed=$((passed + 1))
  else
    echo "fuzz_$t: FAILED (exit $st) after ${took} s; log tail ($run/log):"
    tail -40 "$run/log" | sed 's/^/  | /'
    for a in "$run"/found/*; do
      [ -f "$a" ] || continue
      echo "  input $a ($(stat -c %s "$a") bytes), hex:"
      xxd "$a" | head -64 | sed 's/^/    /'
      echo "  base64 (first 64 KiB; rebuild with base64 -d > FILE):"
      head -c 65536 "$a" | base64 -w 100 | sed 's/^/    /'
      echo "  replay: $dir/tests/fuzz/fuzz_$t $a"
    done
    failed=$((failed + 1))
  fi
  if [ $merge -eq 1 ] && [ $st -eq 0 ]; then
    "$dir/tests/fuzz/fuzz_$t" -merge=1 "tests/fuzz/corpus/$t" "$run/corpus" >"$run/merge.log" 2>&1 &&
      echo "fuzz_$t: merged into tests/fuzz/corpus/$t: $(ls "tests/fuzz/corpus/$t" | wc -l) inputs"
  fi
done
echo "$passed passed, $failed failed, 0 skipped" | tee "$count"
[ $failed -eq 0 ]
