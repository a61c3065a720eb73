#!/usr/bin/env bash
# perf/ucx-bench.sh - `deltacast perf link --transport ucx` against
# `ucx_perftest -t tag_bw` at 4 MiB messages, server and client on loopback,
# both measured in the same run; prints the medians side by side and the
# ratio (target >= 0.9x).
#
# Both tools are pinned to the same UCX transports (UCX_TLS), so the ratio
# compares the transport code, not two different paths:
#   TLS=tcp   (default) UCX over tcp/lo.  deltacast's endpoints use UCX's
#             peer-failure detection, which excludes shared memory in UCX 1.13.
#   TLS=sm    shared memory (posix/sysv/cma) + tcp for the sockaddr handshake;
#             deltacast then runs with DELTACAST_UCX_ERR_MODE=none.
# Both tools are also pinned to the same network devices (UCX_NET_DEVICES,
# from NET_DEVICES, default lo): left alone, UCX opens a tcp lane on every
# interface (lo and eth0 here) and the two tools may not stripe alike.
# NET_DEVICES=all leaves UCX_NET_DEVICES as it is.
#
# PIN=1 pins each tool's server to CPU 0 and its client to CPU 1 (taskset),
# for both tools alike: on a small shared machine this takes scheduler
# migrations out of the comparison.  Each run line shows the 1-minute load
# average, so that runs disturbed by other work can be spotted.
#
# Both tools move the same messages the same way: ITERS messages of SIZE
# bytes after WARMUP untimed ones (default ITERS/10; ucx_perftest -w, perf
# link --warmup, drained before the timer starts), goodput = timed bytes /
# time from the first timed send to the last completion.  (DURATION=S times
# deltacast for S seconds instead of ITERS messages.)  ucx_perftest keeps one
# tag_bw message in flight per iteration window; perf link keeps its default
# depth (32 MiB of messages) and the transport bounds what is posted to UCP.
#
# Each run measures the two tools back to back (the order alternates from
# run to run, so neither always runs first), and the per-run ratio is
# printed: on a shared machine the median of the per-run ratios is the
# figure to read; the ratio of the two medians is printed too.
#
# Each run (the pair) holds flock(1) on LOCK (default /tmp/bench.lock; LOCK=
# turns it off), so that benchmarks sharing the machine do not overlap.
#
# deltacast's ucx transport sends a message as pieces of DELTACAST_UCX_PIECE
# bytes (default 512 KiB), at most DELTACAST_UCX_AHEAD bytes posted ahead
# (default 1 MiB), and a blocking wait polls for DELTACAST_UCX_SPIN_US
# microseconds (default 200) before it sleeps: all are passed through from the
# environment.
#
# Usage: perf/ucx-bench.sh [RUNS]      environment: TLS, SIZE, ITERS,
#        WARMUP, DURATION, NET_DEVICES, PIN, DELTACAST_BIN (default
#        build/cli/deltacast).
set -euo pipefail

RUNS=${1:-${RUNS:-5}}
SIZE=${SIZE:-4194304}
DURATION=${DURATION:-}
ITERS=${ITERS:-1000}
WARMUP=${WARMUP:-$((ITERS / 10))}
LOCK=${LOCK-/tmp/bench.lock}
TLS=${TLS:-tcp}
BIN=${DELTACAST_BIN:-build/cli/deltacast}
PIN=${PIN:-0}

die() { echo "ucx-bench: $*" >&2; exit 1; }
command -v ucx_perftest >/dev/null || die "ucx_perftest not found (apt-get install ucx-utils)"
command -v python3 >/dev/null || die "python3 is needed to read the JSON report"
[ -x "$BIN" ] || die "$BIN not found (build first, or set DELTACAST_BIN)"
if ! grep -q -- '--warmup' <<<"$("$BIN" perf link --help 2>&1)"; then
    die "'$BIN perf link' has no --warmup option (an older build: rebuild)"
fi

case "$TLS" in
tcp) export UCX_TLS=tcp ;;
sm) export UCX_TLS=sm,self,tcp DELTACAST_UCX_ERR_MODE=none ;;
*) die "TLS=$TLS: want tcp or sm" ;;
esac
NET_DEVICES=${NET_DEVICES:-lo}
[ "$NET_DEVICES" = all ] || export UCX_NET_DEVICES="$NET_DEVICES"
export DELTACAST_SECRET="ucx-bench-$$-$RANDOM"

# pin CPU: run the rest of the command line on that CPU when PIN=1
pin() {
    local cpu=$1
    shift
    if [ "$PIN" = 1 ]; then taskset -c "$cpu" "$@"; else "$@"; fi
}

free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

SERVER_PID=
cleanup() { [ -n "$SERVER_PID" ] && kill "$SERVER_PID" 2>/dev/null; wait 2>/dev/null || true; }
trap cleanup EXIT

# ucx_perftest reports MB/s with MB = 2^20 bytes.
perftest_once() {
    local port out
    port=$(free_port)
    pin 0 ucx_perftest -p "$port" -t tag_bw -s "$SIZE" -n "$ITERS" -w "$WARMUP" >/dev/null 2>&1 &
    SERVER_PID=$!
    sleep 0.5
    out=$(pin 1 ucx_perftest 127.0.0.1 -p "$port" -t tag_bw -s "$SIZE" -n "$ITERS" -w "$WARMUP" 2>&1) || {
        echo "$out" >&2
        die "ucx_perftest client failed"
    }
    wait "$SERVER_PID" 2>/dev/null || true
    SERVER_PID=
    echo "$out" | awk '/^Final:/ { printf "%.3f\n", $7 * 1048576 * 8 / 1e9 }'
}

deltacast_once() {
    local port json
    port=$(free_port)
    pin 0 "$BIN" perf link --server --bind "127.0.0.1:$port" --transport ucx --once >/dev/null 2>&1 &
    SERVER_PID=$!
    sleep 0.5
    local amount=(--bytes $((ITERS * SIZE)))
    [ -n "$DURATION" ] && amount=(--duration "$DURATION")
    json=$(pin 1 "$BIN" perf link --client "127.0.0.1:$port" --transport ucx --size "$SIZE" \
        --warmup "$WARMUP" "${amount[@]}" --lat-iters 0 --json) || die "deltacast perf link failed"
    kill "$SERVER_PID" 2>/dev/null || true
    wait "$SERVER_PID" 2>/dev/null || true
    SERVER_PID=
    echo "$json" | python3 -c '
import json, sys
j = json.load(sys.stdin)
if j.get("transport") != "ucx":
    sys.exit("perf link used transport %r, not ucx" % j.get("transport"))
print("%.3f\t%s" % (float(j["gbps"]), j.get("device", "?")))'
}

median() { sort -g | awk '{ v[NR] = $1 } END { if (NR % 2) print v[(NR + 1) / 2]; else printf "%.3f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

amount="$ITERS messages"
[ -n "$DURATION" ] && amount="${DURATION} s (deltacast), $ITERS messages (ucx_perftest)"
echo "ucx-bench: $RUNS runs, ${SIZE}-byte messages, $amount after $WARMUP warmup," \
     "UCX_TLS=$UCX_TLS (both tools), UCX_NET_DEVICES=${UCX_NET_DEVICES:-all}," \
     "deltacast error mode ${DELTACAST_UCX_ERR_MODE:-peer}, $(nproc) CPUs, PIN=$PIN," \
     "load $(cut -d' ' -f1-3 /proc/loadavg)"
pt=() dc=() rt=() device=?
for i in $(seq 1 "$RUNS"); do
    if [ -n "$LOCK" ]; then
        exec 9>"$LOCK"
        flock 9
    fi
    if [ $((i % 2)) = 1 ]; then
        p=$(perftest_once)
        d=$(deltacast_once)
    else
        d=$(deltacast_once)
        p=$(perftest_once)
    fi
    [ -n "$LOCK" ] && exec 9>&-
    device=$(echo "$d" | cut -f2)
    d=$(echo "$d" | cut -f1)
    r=$(awk -v a="$d" -v b="$p" 'BEGIN { if (b > 0) printf "%.3f", a / b; else print "nan" }')
    pt+=("$p")
    dc+=("$d")
    rt+=("$r")
    printf '  run %d: ucx_perftest %8.3f Gb/s   deltacast ucx %8.3f Gb/s   ratio %sx   (load %s)\n' \
        "$i" "$p" "$d" "$r" "$(cut -d' ' -f1 /proc/loadavg)"
done
mp=$(printf '%s\n' "${pt[@]}" | median)
md=$(printf '%s\n' "${dc[@]}" | median)
mr=$(printf '%s\n' "${rt[@]}" | median)
ratio=$(awk -v a="$md" -v b="$mp" 'BEGIN { if (b > 0) printf "%.3f", a / b; else print "nan" }')
printf '\n%-28s %10s\n' "median of $RUNS runs" "Gb/s"
printf '%-28s %10.3f   (UCX_TLS=%s)\n' "ucx_perftest -t tag_bw" "$mp" "$UCX_TLS"
printf '%-28s %10.3f   (UCX_TLS=%s, device: %s)\n' "deltacast perf link ucx" "$md" "$UCX_TLS" "$device"
printf 'ratio deltacast / ucx_perftest: median of per-run ratios %sx, ratio of medians %sx' \
    "$mr" "$ratio"
printf ' (target >= 0.9x)\n'
