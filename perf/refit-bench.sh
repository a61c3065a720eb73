#!/bin/sh
# refit-bench.sh - the headline refit benchmark of issue 6, side by side in
# one run: delta vs dense over the same engine and tree, on this machine.
#
#   perf/refit-bench.sh [PARAMS] [WAN_RATE] [SLOW_WAN_RATE]
#        (defaults 2.5e8, 100mbit, 10mbit; RUNS=3 repetitions, medians quoted)
#
# Cases, each run RUNS times (the job is regenerated from the same seed):
#   4x1-optimizer   4 regions x 1 receiver, optimizer 1%, 2 versions, + dense
#   4x1-inject      4 regions x 1 receiver, inject 3%, 1 version, + dense
#   4x4-optimizer   4 regions x 4 receivers, optimizer 1%
#   4x1-unshaped, 4x4-unshaped   the 4x1 / 4x4 optimizer jobs with no WAN at
#                   all (loopback): the compute floor of this machine (every
#                   process shares its 2 cores and its memory bandwidth),
#                   next to the WAN bound
#   4x1-memory      the 4x1 optimizer job with the trainer sending from its
#                   memory through the library (node --from-memory), next to
#                   the file sender
#   4x1-slow, 4x4-slow   the 4x1 / 4x4 optimizer jobs at SLOW_WAN_RATE, where
#                   local compute is fast relative to the WAN as on real
#                   rollout nodes (each with its own cores): the issue's
#                   "choose a WAN rate that keeps compute fast" regime
# As root each region is a network namespace behind a tbf-shaped veth (the
# WAN); otherwise loopback (said so in the output).  Results:
# perf/results/refit-<case>-<run>.json (+ .png for the first run) and a
# summary table with the issue's targets next to the medians.
set -eu
cd "$(dirname "$0")/.."
params=${1:-2.5e8}
wan=${2:-100mbit}
slow=${3:-10mbit}
runs=${RUNS:-3}
bin=${DELTACAST_BIN:-./build/cli/deltacast}
[ -x "$bin" ] || ./scripts/build.sh
mkdir -p perf/results
run() { # name, wan, args...
  name=$1; rate=$2; shift 2
  i=1
  while [ "$i" -le "$runs" ]; do
    echo "== $name run $i/$runs: --wan-rate $rate $*" >&2
    plot=/dev/null
    [ "$i" = 1 ] && plot="perf/results/refit-$name.png"
    "$bin" perf refit --params "$params" --wan-rate "$rate" --json --plot "$plot" "$@" \
        > "perf/results/refit-$name-$i.json"
    i=$((i + 1))
  done
}
run 4x1-optimizer "$wan" --receivers 4 --regions 4 --model optimizer --change-rate 0.01 --versions 2
run 4x1-inject "$wan" --receivers 4 --regions 4 --model inject --change-rate 0.03 --versions 1
run 4x1-memory "$wan" --receivers 4 --regions 4 --model optimizer --change-rate 0.01 --versions 2 --no-dense --from-memory
run 4x4-optimizer "$wan" --receivers 16 --regions 4 --model optimizer --change-rate 0.01 --versions 2 --no-dense
run 4x1-unshaped "$wan" --receivers 4 --regions 4 --model optimizer --change-rate 0.01 --versions 2 --no-dense --no-netns
run 4x4-unshaped "$wan" --receivers 16 --regions 4 --model optimizer --change-rate 0.01 --versions 2 --no-dense --no-netns
run 4x1-slow "$slow" --receivers 4 --regions 4 --model optimizer --change-rate 0.01 --versions 2 --no-dense
run 4x4-slow "$slow" --receivers 16 --regions 4 --model optimizer --change-rate 0.01 --versions 2 --no-dense
python3 - "$params" "$wan" "$slow" "$runs" <<'PY'
import json, statistics, sys
params, wan, slow, runs = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
names = ("4x1-optimizer", "4x1-inject", "4x1-memory", "4x4-optimizer", "4x1-unshaped",
         "4x4-unshaped", "4x1-slow", "4x4-slow")
r = {n: [json.load(open(f"perf/results/refit-{n}-{i}.json")) for i in range(1, runs + 1)]
     for n in names}
med = statistics.median
def vmed(n, key, skip_first=False):
    """median over runs and versions of a per-version figure"""
    xs = [v[key] for d in r[n] for v in d["versions"][(1 if skip_first and len(d["versions"]) > 1 else 0):]
          if v.get(key) is not None]
    return med(xs) if xs else None
print(f"\nrefit benchmark: {params} params, WAN {wan} (slow cases {slow}), "
      f"network {r['4x1-optimizer'][0]['network']}, medians of {runs} runs x versions")
print(f"{'case':15} {'delta s':>8} {'dense s':>8} {'speedup':>8} {'target':>7} "
      f"{'payload MB':>10} {'bound s':>8} {'t/bound':>8} {'exact':>6}")
tgt = {"4x1-optimizer": ">=50x", "4x1-inject": ">=25x"}
for n in names:
    sp = vmed(n, "speedup_vs_dense")
    ds = vmed(n, "dense_seconds")
    exact = all(d["exact"] for d in r[n])
    print(f"{n:15} {vmed(n, 'seconds'):8.3f} {ds or 0:8.3f} {(sp or 0):7.1f}x "
          f"{tgt.get(n, '-'):>7} {vmed(n, 'payload_bytes')/1e6:10.2f} "
          f"{vmed(n, 'wan_bound_seconds') or 0:8.3f} {vmed(n, 'ratio_to_wan_bound') or 0:8.2f} "
          f"{'yes' if exact else 'NO':>6}")
def ratio(a, b):
    return vmed(a, "seconds") / vmed(b, "seconds")
floor = vmed("4x1-unshaped", "seconds")
bound = vmed("4x1-optimizer", "wan_bound_seconds")
print(f"\nt/bound target <= 1.3 (time / (busiest WAN link bytes / WAN rate + first chunk encode)):")
print(f"  at {wan}: {vmed('4x1-optimizer', 'ratio_to_wan_bound'):.2f}; this machine's compute floor "
      f"(same job, no WAN) is {floor:.3f} s = {floor / bound:.2f}x the {wan} bound")
print(f"  at {slow}: {vmed('4x1-slow', 'ratio_to_wan_bound'):.2f}")
b = r["4x4-optimizer"][0]["versions"][0]
floor16 = vmed("4x4-unshaped", "seconds")
print(f"  4x4 compute floor (no WAN) {floor16:.3f} s = {floor16 / bound:.2f}x the {wan} bound")
print(f"4x4 vs 4x1 target <= 1.5x: at {wan} {ratio('4x4-optimizer', '4x1-optimizer'):.2f}x, "
      f"at {slow} {ratio('4x4-slow', '4x1-slow'):.2f}x; 4x4 WAN link bytes "
      f"{sorted(b['wan_bytes'].values())} vs payload {b['payload_bytes']} (each byte once per link)")
print(f"sender from memory (library) / from files: {ratio('4x1-memory', '4x1-optimizer'):.2f}x "
      f"the time")
print("(all node processes share this machine's 2 cores and memory bandwidth)")
PY
