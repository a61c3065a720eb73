#!/bin/sh
# link-bench.sh - TCP transport goodput side by side with iperf3, in one run.
#
#   1. loopback: iperf3 -P K  vs  deltacast perf link --streams K  (>= 0.9x)
#   2. two network namespaces joined by a veth pair shaped with
#      `tc qdisc tbf rate 1gbit`: deltacast with 4 streams vs the shaped rate
#      (>= 0.93), with iperf3 -P 4 over the same link as a reference.
#
# Runs alternate (deltacast, baseline, deltacast, ...) so both see the same
# machine load; medians of RUNS runs are printed with their ratios.
#
# Usage: perf/link-bench.sh [--runs R] [--duration S] [--streams K]
#                           [--size BYTES] [--no-netns] [--bin PATH]
# Env: DELTACAST_BIN (default build/cli/deltacast).  Part 2 needs root and
# creates (and deletes) namespaces dclb-<pid>-{a,b} holding 10.77.250.{1,2}.
set -eu

RUNS=3 DUR=5 K=4 SIZE=4MiB NETNS=1
BIN=${DELTACAST_BIN:-}
while [ $# -gt 0 ]; do
    case "$1" in
    --runs) RUNS=$2; shift 2 ;;
    --duration) DUR=$2; shift 2 ;;
    --streams) K=$2; shift 2 ;;
    --size) SIZE=$2; shift 2 ;;
    --no-netns) NETNS=0; shift ;;
    --bin) BIN=$2; shift 2 ;;
    -h|--help) sed -n '2,18p' "$0"; exit 0 ;;
    *) echo "link-bench.sh: unknown option $1" >&2; exit 2 ;;
    esac
done
if [ -z "$BIN" ]; then
    here=$(cd "$(dirname "$0")/.." && pwd)
    BIN=$here/build/cli/deltacast
fi
[ -x "$BIN" ] || { echo "link-bench.sh: no deltacast binary at $BIN" >&2; exit 1; }
command -v iperf3 >/dev/null || { echo "link-bench.sh: iperf3 not found" >&2; exit 1; }
command -v python3 >/dev/null || { echo "link-bench.sh: python3 not found" >&2; exit 1; }

TMP=$(mktemp -d /tmp/dc-linkbench-XXXXXX)
NSA=dclb-$$-a NSB=dclb-$$-b
cleanup() {
    [ -n "${SRV:-}" ] && kill "$SRV" 2>/dev/null || true
    [ -n "${IPS:-}" ] && kill "$IPS" 2>/dev/null || true
    ip netns del "$NSA" 2>/dev/null || true
    ip netns del "$NSB" 2>/dev/null || true
    rm -rf "$TMP"
}
trap cleanup EXIT INT TERM
export DELTACAST_SECRET=${DELTACAST_SECRET:-link-bench-secret}

# median of numbers on stdin
median() { python3 -c 'import sys,statistics; v=[float(x) for x in sys.stdin.read().split()]; print("%.3f" % statistics.median(v) if v else "nan")'; }
ratio() { python3 -c "import sys; a,b=float(sys.argv[1]),float(sys.argv[2]); print('%.3f' % (a/b) if b>0 else 'nan')" "$1" "$2"; }
jget() { python3 -c "import sys,json; t=sys.stdin.read(); print(json.loads(t[t.index('{'):])$1)"; }

# $1: netns exec prefix (or ""), $2: server bind, $3: client target host
run_pair_dc() {
    pre=$1 bind=$2
    rm -f "$TMP/addr"
    $pre "$BIN" perf link --server --transport tcp --bind "$bind" --addr-file "$TMP/addr" --once \
        >"$TMP/srv.log" 2>&1 &
    SRV=$!
    i=0; while [ ! -s "$TMP/addr" ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i+1)); done
    addr=$(cat "$TMP/addr")
    $pre2 "$BIN" perf link --client "$addr" --transport tcp --streams "$K" --size "$SIZE" \
        --duration "$DUR" --lat-iters 200 --json 2>/dev/null >"$TMP/dc.json"
    wait "$SRV" || true; SRV=
    jget '["gbps"]' <"$TMP/dc.json"
}
run_pair_iperf() {
    pre=$1 host=$2
    $pre iperf3 -s -1 -p 5301 >/dev/null 2>&1 &
    IPS=$!
    sleep 0.5
    $pre2 iperf3 -c "$host" -p 5301 -P "$K" -t "$DUR" -J >"$TMP/ip.json" 2>/dev/null || true
    wait "$IPS" 2>/dev/null || true; IPS=
    python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print("%.4f" % (d["end"]["sum_received"]["bits_per_second"]/1e9))' "$TMP/ip.json"
}

echo "deltacast link-bench: $RUNS runs x ${DUR}s, $K streams, ${SIZE} messages ($(date -u +%FT%TZ))"
echo "note: $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg): a shared machine makes absolute numbers noisy"
echo

# --- 1. loopback -------------------------------------------------------------
: >"$TMP/l.dc"; : >"$TMP/l.ip"
pre2=""
for r in $(seq 1 "$RUNS"); do
    run_pair_dc "" 127.0.0.1:0 >>"$TMP/l.dc"
    run_pair_iperf "" 127.0.0.1 >>"$TMP/l.ip"
done
DC=$(median <"$TMP/l.dc"); IP=$(median <"$TMP/l.ip")
printf "%-44s %10s %10s %8s %8s\n" "case" "deltacast" "baseline" "ratio" "target"
printf "%-44s %10s %10s %8s %8s\n" "loopback tcp x$K (Gb/s) vs iperf3 -P $K" "$DC" "$IP" "$(ratio "$DC" "$IP")" ">=0.90"
echo "   runs deltacast: $(tr '\n' ' ' <"$TMP/l.dc")"
echo "   runs iperf3:    $(tr '\n' ' ' <"$TMP/l.ip")"

# --- 2. shaped veth between namespaces ------------------------------------------
if [ "$NETNS" = 1 ]; then
    if [ "$(id -u)" != 0 ]; then
        echo "shaped veth: skipped (needs root for ip netns)"
    elif ! ip netns add "$NSA" 2>/dev/null || ! ip netns add "$NSB" 2>/dev/null; then
        echo "shaped veth: skipped (ip netns add failed)"
    else
        ip link add dclba netns "$NSA" type veth peer name dclbb netns "$NSB"
        ip -n "$NSA" addr add 10.77.250.1/24 dev dclba
        ip -n "$NSB" addr add 10.77.250.2/24 dev dclbb
        for n in "$NSA:dclba" "$NSB:dclbb"; do
            ip -n "${n%%:*}" link set "${n#*:}" up
            ip -n "${n%%:*}" link set lo up
            tc -n "${n%%:*}" qdisc add dev "${n#*:}" root tbf rate 1gbit burst 256kb latency 20ms
        done
        KS=$K; K=4
        : >"$TMP/s.dc"; : >"$TMP/s.ip"
        pre2="ip netns exec $NSA"
        for r in $(seq 1 "$RUNS"); do
            run_pair_dc "ip netns exec $NSB" 10.77.250.2:0 >>"$TMP/s.dc"
            run_pair_iperf "ip netns exec $NSB" 10.77.250.2 >>"$TMP/s.ip"
        done
        K=$KS
        DC=$(median <"$TMP/s.dc"); IP=$(median <"$TMP/s.ip")
        printf "%-44s %10s %10s %8s %8s\n" "tbf 1gbit veth, tcp x4 (Gb/s) vs shaped rate" "$DC" "1.000" "$(ratio "$DC" 1.0)" ">=0.93"
        printf "%-44s %10s %10s %8s\n" "  same link: deltacast vs iperf3 -P 4" "$DC" "$IP" "$(ratio "$DC" "$IP")"
        echo "   runs deltacast: $(tr '\n' ' ' <"$TMP/s.dc")"
        echo "   runs iperf3:    $(tr '\n' ' ' <"$TMP/s.ip")"
    fi
fi
