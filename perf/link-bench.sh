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
# Fairness: both tools get the same streams (-P K), the same duration (-t S),
# the same block size (iperf3 -l = the deltacast message size, capped at
# 1 MiB, iperf3's maximum: hence the default --size 1MiB) and the kernel's
# default socket buffers unless DELTACAST_TCP_SOCKBUF says otherwise (iperf3
# leaves autotuning on).  deltacast moves more: a 32-byte header and a CRC32C
# trailer per message, CRC32C computed on both sides, ACKs back.  Each side's
# CPU seconds per GB of payload is printed too (from /usr/bin/time, when
# present): on a loaded machine it is steadier than Gb/s.
#
# Usage: perf/link-bench.sh [--runs R] [--duration S] [--streams K]
#                           [--size BYTES] [--zerocopy] [--tls] [--no-netns] [--bin PATH]
#   --zerocopy   also run deltacast with MSG_ZEROCOPY sends (a third row)
#   --tls        also run deltacast with TLS 1.3 (config tls=on on the client;
#                the server's tls=auto takes both) on both links: goodput vs
#                clear (target >= 0.95 on the shaped link) and CPU s/GB
# Env: DELTACAST_BIN (default build/cli/deltacast).  Part 2 needs root and
# creates (and deletes) namespaces dclb-<pid>-{a,b} holding 10.77.250.{1,2}.
set -eu

RUNS=3 DUR=5 K=4 SIZE=1MiB NETNS=1 ZC=0 TLS=0 CENV=
BIN=${DELTACAST_BIN:-}
while [ $# -gt 0 ]; do
    case "$1" in
    --runs) RUNS=$2; shift 2 ;;
    --duration) DUR=$2; shift 2 ;;
    --streams) K=$2; shift 2 ;;
    --size) SIZE=$2; shift 2 ;;
    --zerocopy) ZC=1; shift ;;
    --tls) TLS=1; shift ;;
    --no-netns) NETNS=0; shift ;;
    --bin) BIN=$2; shift 2 ;;
    -h|--help) sed -n '2,30p' "$0"; exit 0 ;;
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
# iperf3 -l equivalent of --size (bytes; iperf3 refuses blocks above 1 MiB)
SIZEB=$(python3 -c "import sys
s=sys.argv[1].strip(); m={'k':1<<10,'m':1<<20,'g':1<<30}
u=s.rstrip('iIbB')[-1:].lower(); n=s.rstrip('iIbB')
print(int(float(n[:-1])*m[u]) if u in m else int(n))" "$SIZE")
IPL=$(( SIZEB < 1048576 ? SIZEB : 1048576 ))
TIME=
[ -x /usr/bin/time ] && TIME="/usr/bin/time -f %U+%S -o"

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
median() { python3 -c 'import sys,statistics; v=[float(x) for x in sys.stdin.read().split() if x != "nan"]; print("%.3f" % statistics.median(v) if v else "nan")'; }
ratio() { python3 -c "import sys; a,b=float(sys.argv[1]),float(sys.argv[2]); print('%.3f' % (a/b) if b>0 else 'nan')" "$1" "$2"; }
jget() { python3 -c "import sys,json; t=sys.stdin.read(); print(json.loads(t[t.index('{'):])$1)"; }

# CPU seconds per GB of payload of one side: $1 time file, $2 bytes
cpu_per_gb() {
    [ -n "$TIME" ] && [ -s "$1" ] || { echo nan; return; }
    python3 -c "import sys; t=open(sys.argv[1]).read().split()[-1]; print('%.3f' % (eval(t)/(float(sys.argv[2])/1e9)))" "$1" "$2" 2>/dev/null || echo nan
}
# $1: netns exec prefix (or ""), $2: server bind, [$3: extra client flags]
# prints "gbps tx_cpu_s_per_gb rx_cpu_s_per_gb"
run_pair_dc() {
    pre=$1 bind=$2 extra=${3:-}
    rm -f "$TMP/addr" "$TMP/st" "$TMP/ct"
    $pre timeout $((DUR + 60)) $TIME "$TMP/st" "$BIN" perf link --server --transport tcp \
        --bind "$bind" --addr-file "$TMP/addr" --once >"$TMP/srv.log" 2>&1 &
    SRV=$!
    i=0; while [ ! -s "$TMP/addr" ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i+1)); done
    addr=$(cat "$TMP/addr")
    $pre2 env $CENV timeout $((DUR + 60)) $TIME "$TMP/ct" "$BIN" perf link --client "$addr" --transport tcp \
        --streams "$K" --size "$SIZE" --duration "$DUR" --lat-iters 200 --json $extra \
        2>/dev/null >"$TMP/dc.json" || true
    wait "$SRV" || true; SRV=
    b=$(jget '["bytes"]' <"$TMP/dc.json" 2>/dev/null || echo 0)
    echo "$(jget '["gbps"]' <"$TMP/dc.json" 2>/dev/null || echo nan) $(cpu_per_gb "$TMP/ct" "$b") $(cpu_per_gb "$TMP/st" "$b")"
}
run_pair_iperf() {
    pre=$1 host=$2
    rm -f "$TMP/st" "$TMP/ct"
    $pre timeout $((DUR + 60)) $TIME "$TMP/st" iperf3 -s -1 -p 5301 >/dev/null 2>&1 &
    IPS=$!
    # wait until it listens (a client that comes too early leaves it hanging)
    i=0; while [ $i -lt 50 ] && ! $pre ss -ltn 2>/dev/null | grep -q ':5301 '; do sleep 0.1; i=$((i+1)); done
    $pre2 timeout $((DUR + 60)) $TIME "$TMP/ct" iperf3 -c "$host" -p 5301 -P "$K" -t "$DUR" \
        -l "$IPL" -J >"$TMP/ip.json" 2>/dev/null || true
    wait "$IPS" 2>/dev/null || true; IPS=
    b=$(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(d["end"]["sum_received"]["bytes"])' "$TMP/ip.json" 2>/dev/null || echo 0)
    echo "$(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print("%.4f" % (d["end"]["sum_received"]["bits_per_second"]/1e9))' "$TMP/ip.json" 2>/dev/null || echo nan) $(cpu_per_gb "$TMP/ct" "$b") $(cpu_per_gb "$TMP/st" "$b")"
}
col() { cut -d' ' -f"$1" <"$2"; }

echo "deltacast link-bench: $RUNS runs x ${DUR}s, $K streams, ${SIZE} messages vs iperf3 -P $K -l $IPL ($(date -u +%FT%TZ))"
echo "note: $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg): a shared machine makes absolute numbers noisy"
echo

# --- 1. loopback -------------------------------------------------------------
: >"$TMP/l.dc"; : >"$TMP/l.ip"; : >"$TMP/l.zc"; : >"$TMP/l.tls"
pre2=""
for r in $(seq 1 "$RUNS"); do
    run_pair_dc "" 127.0.0.1:0 >>"$TMP/l.dc"
    run_pair_iperf "" 127.0.0.1 >>"$TMP/l.ip"
    [ "$ZC" = 1 ] && run_pair_dc "" 127.0.0.1:0 --zerocopy >>"$TMP/l.zc"
    if [ "$TLS" = 1 ]; then
        CENV=DELTACAST_TLS=on
        run_pair_dc "" 127.0.0.1:0 >>"$TMP/l.tls"
        CENV=
    fi
done
DC=$(col 1 "$TMP/l.dc" | median); IP=$(col 1 "$TMP/l.ip" | median)
printf "%-44s %10s %10s %8s %8s\n" "case" "deltacast" "baseline" "ratio" "target"
printf "%-44s %10s %10s %8s %8s\n" "loopback tcp x$K (Gb/s) vs iperf3 -P $K -l $IPL" "$DC" "$IP" "$(ratio "$DC" "$IP")" ">=0.90"
for side in 2:sender 3:receiver; do
    a=$(col "${side%%:*}" "$TMP/l.dc" | median); b=$(col "${side%%:*}" "$TMP/l.ip" | median)
    printf "%-44s %10s %10s %8s\n" "  ${side#*:} CPU s/GB (lower is better)" "$a" "$b" "$(ratio "$a" "$b")"
done
echo "   runs deltacast (Gb/s tx-cpu rx-cpu): $(tr '\n' ';' <"$TMP/l.dc")"
echo "   runs iperf3    (Gb/s tx-cpu rx-cpu): $(tr '\n' ';' <"$TMP/l.ip")"
if [ "$ZC" = 1 ]; then
    ZD=$(col 1 "$TMP/l.zc" | median)
    printf "%-44s %10s %10s %8s\n" "  deltacast --zerocopy vs iperf3" "$ZD" "$IP" "$(ratio "$ZD" "$IP")"
    printf "%-44s %10s %10s %8s\n" "  sender CPU s/GB, --zerocopy vs copy" "$(col 2 "$TMP/l.zc" | median)" "$(col 2 "$TMP/l.dc" | median)" ""
    echo "   runs zerocopy  (Gb/s tx-cpu rx-cpu): $(tr '\n' ';' <"$TMP/l.zc")"
fi
if [ "$TLS" = 1 ]; then
    TD=$(col 1 "$TMP/l.tls" | median)
    printf "%-44s %10s %10s %8s\n" "  deltacast TLS vs clear (Gb/s)" "$TD" "$DC" "$(ratio "$TD" "$DC")"
    for side in 2:sender 3:receiver; do
        printf "%-44s %10s %10s %8s\n" "  ${side#*:} CPU s/GB, TLS vs clear" "$(col "${side%%:*}" "$TMP/l.tls" | median)" "$(col "${side%%:*}" "$TMP/l.dc" | median)" ""
    done
    echo "   runs TLS       (Gb/s tx-cpu rx-cpu): $(tr '\n' ';' <"$TMP/l.tls")"
fi

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
        : >"$TMP/s.dc"; : >"$TMP/s.ip"; : >"$TMP/s.tls"
        pre2="ip netns exec $NSA"
        for r in $(seq 1 "$RUNS"); do
            run_pair_dc "ip netns exec $NSB" 10.77.250.2:0 >>"$TMP/s.dc"
            run_pair_iperf "ip netns exec $NSB" 10.77.250.2 >>"$TMP/s.ip"
            if [ "$TLS" = 1 ]; then
                CENV=DELTACAST_TLS=on
                run_pair_dc "ip netns exec $NSB" 10.77.250.2:0 >>"$TMP/s.tls"
                CENV=
            fi
        done
        K=$KS
        DC=$(col 1 "$TMP/s.dc" | median); IP=$(col 1 "$TMP/s.ip" | median)
        printf "%-44s %10s %10s %8s %8s\n" "tbf 1gbit veth, tcp x4 (Gb/s) vs shaped rate" "$DC" "1.000" "$(ratio "$DC" 1.0)" ">=0.93"
        printf "%-44s %10s %10s %8s\n" "  same link: deltacast vs iperf3 -P 4" "$DC" "$IP" "$(ratio "$DC" "$IP")"
        echo "   runs deltacast (Gb/s tx-cpu rx-cpu): $(tr '\n' ';' <"$TMP/s.dc")"
        echo "   runs iperf3    (Gb/s tx-cpu rx-cpu): $(tr '\n' ';' <"$TMP/s.ip")"
        if [ "$TLS" = 1 ]; then
            TD=$(col 1 "$TMP/s.tls" | median)
            printf "%-44s %10s %10s %8s %8s\n" "  same link: TLS vs clear (Gb/s)" "$TD" "$DC" "$(ratio "$TD" "$DC")" ">=0.95"
            for side in 2:sender 3:receiver; do
                printf "%-44s %10s %10s %8s\n" "  ${side#*:} CPU s/GB, TLS vs clear" "$(col "${side%%:*}" "$TMP/s.tls" | median)" "$(col "${side%%:*}" "$TMP/s.dc" | median)" ""
            done
            echo "   runs TLS       (Gb/s tx-cpu rx-cpu): $(tr '\n' ';' <"$TMP/s.tls")"
        fi
    fi
fi
