#!/bin/sh
# ab-bench.sh - a change's cost, measured: two builds of deltacast (before
# and after) run the same benchmarks alternately in one session, so the
# machine's noise falls on both alike.  Prints, per figure, the median of
# each build and after/before.
#
#   perf/ab-bench.sh BEFORE_BIN AFTER_BIN [--rounds R] [--params N] [--json FILE]
#
# BEFORE_BIN, AFTER_BIN: two `deltacast` binaries (e.g. an old commit's
# build/cli/deltacast and this one's).  Each round runs each benchmark for
# both builds back to back (which build first alternates between rounds):
#   codec   `perf codec --params N --cases opt1` on one pair generated in
#           the run: encode and apply GB/s (one thread), delta bytes
#   link    `perf link` over tcp on loopback, 4 streams, 3 s: Gb/s, p50 µs
#   refit   `perf refit --receivers 4 --regions 2 --params N`: seconds of
#           the delta versions, speedup against dense; every run must be
#           exact, or the script fails
# Defaults: --rounds 3, --params 5e7.  Needs root for refit's namespaces.
set -eu

[ $# -ge 2 ] || { sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
case "$1" in -h|--help) sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;; esac
A=$1 B=$2
shift 2
ROUNDS=3
PARAMS=5e7
JSON=
while [ $# -gt 0 ]; do
    case "$1" in
    --rounds) ROUNDS=$2; shift 2 ;;
    --params) PARAMS=$2; shift 2 ;;
    --json) JSON=$2; shift 2 ;;
    *) echo "ab-bench.sh: unknown option '$1' (try --help)" >&2; exit 2 ;;
    esac
done
for b in "$A" "$B"; do
    [ -x "$b" ] || { echo "ab-bench.sh: $b is not an executable" >&2; exit 2; }
done
PY=/usr/bin/python3
[ -x $PY ] || PY=python3
OUT=$(mktemp -d /tmp/ab-bench.XXXXXX)
trap 'rm -rf "$OUT"' EXIT
export DELTACAST_SECRET=${DELTACAST_SECRET:-ab-bench-secret}
export DELTACAST_LOG=${DELTACAST_LOG:-error}

codec() { # BIN TAG ROUND
    echo "ab-bench: round $3, $2: codec" >&2
    "$1" perf codec --params "$PARAMS" --cases opt1 --no-baselines --dir "$OUT/pairs" \
        --json >"$OUT/codec.$2.$3" 2>/dev/null
}
link() { # BIN TAG ROUND
    echo "ab-bench: round $3, $2: link" >&2
    "$1" perf link --server --bind 127.0.0.1:0 --once --transport tcp \
        --addr-file "$OUT/addr.$2.$3" >/dev/null 2>&1 &
    spid=$!
    i=0
    while [ ! -s "$OUT/addr.$2.$3" ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
    "$1" perf link --client "$(cat "$OUT/addr.$2.$3")" --transport tcp --streams 4 \
        --duration 3 --lat-iters 500 --json >"$OUT/link.$2.$3" 2>/dev/null
    wait $spid
}
refit() { # BIN TAG ROUND
    echo "ab-bench: round $3, $2: refit" >&2
    "$1" perf refit --receivers 4 --regions 2 --params "$PARAMS" --json \
        >"$OUT/refit.$2.$3" 2>/dev/null
}

# Each benchmark runs for both builds back to back (so that the pair shares
# the machine's state), the order of the builds alternating by round.
r=1
while [ $r -le "$ROUNDS" ]; do
    for bench in codec link refit; do
        if [ $((r % 2)) -eq 1 ]; then $bench "$A" before $r; $bench "$B" after $r
        else $bench "$B" after $r; $bench "$A" before $r; fi
    done
    r=$((r + 1))
done

$PY - "$OUT" "$ROUNDS" "$JSON" <<'EOF'
import json, statistics, sys
out, rounds, jpath = sys.argv[1], int(sys.argv[2]), sys.argv[3]
def load(kind, tag, r):
    with open(f"{out}/{kind}.{tag}.{r}") as f:
        return json.load(f)
def figures(tag):
    rows = {}
    for r in range(1, rounds + 1):
        c = load("codec", tag, r)["cases"][0]
        l = load("link", tag, r)
        f = load("refit", tag, r)
        if not (c["exact"] and f["exact"]):
            sys.exit(f"ab-bench: {tag} round {r} was not exact")
        for k, v in (("codec encode 1t GB/s", c["encode_1t_gbps"]["median"]),
                     ("codec apply 1t GB/s", c["apply_1t_gbps"]["median"]),
                     ("codec delta bytes", c["delta_bytes"]),
                     ("link tcp x4 Gb/s", l["gbps"]),
                     ("link tcp p50 us", l["latency_us"]["p50"]),
                     ("refit delta s", f["seconds"]),
                     ("refit speedup vs dense", f["speedup_vs_dense"])):
            rows.setdefault(k, []).append(v)
    return {k: statistics.median(v) for k, v in rows.items()}
a, b = figures("before"), figures("after")
print(f"{'figure':26} {'before':>12} {'after':>12} {'after/before':>13}")
for k in a:
    ratio = b[k] / a[k] if a[k] else float("nan")
    print(f"{k:26} {a[k]:12.4g} {b[k]:12.4g} {ratio:13.3f}")
print(f"(medians of {rounds} rounds, builds alternating; all runs exact)")
if jpath:
    with open(jpath, "w") as f:
        json.dump({"rounds": rounds, "before": a, "after": b}, f, indent=2)
EOF
