#!/bin/sh
# refit-bench.sh - the headline refit benchmark of issue 6, side by side in
# one run: delta vs dense over the same engine and tree, on this machine.
#
#   perf/refit-bench.sh [PARAMS] [WAN_RATE]      (defaults 2.5e8, 100mbit)
#
# Cases: 4 regions x 1 receiver (optimizer 1%, inject 3%) and 4 regions x 4
# receivers (optimizer 1%).  As root each region is a network namespace
# behind a tbf-shaped veth (the WAN); otherwise loopback (said so in the
# output).  Results: perf/results/refit-*.json and .png, and a summary table
# with the targets of the issue next to the measured figures.  All node
# processes share this machine's cores: figures from a loaded machine.
set -eu
cd "$(dirname "$0")/.."
params=${1:-2.5e8}
wan=${2:-100mbit}
bin=${DELTACAST_BIN:-./build/cli/deltacast}
[ -x "$bin" ] || ./scripts/build.sh
mkdir -p perf/results
run() { # name, args...
  name=$1; shift
  echo "== $name: $*" >&2
  "$bin" perf refit --params "$params" --wan-rate "$wan" --json \
      --plot "perf/results/refit-$name.png" "$@" > "perf/results/refit-$name.json"
}
run 4x1-optimizer --receivers 4 --regions 4 --model optimizer --change-rate 0.01 --versions 2
run 4x1-inject --receivers 4 --regions 4 --model inject --change-rate 0.03 --versions 1
run 4x4-optimizer --receivers 16 --regions 4 --model optimizer --change-rate 0.01 --versions 1 --no-dense
python3 - "$params" "$wan" <<'PY'
import json, sys
r = {n: json.load(open(f"perf/results/refit-{n}.json")) for n in
     ("4x1-optimizer", "4x1-inject", "4x4-optimizer")}
print(f"\nrefit benchmark: {sys.argv[1]} params, WAN {sys.argv[2]}, network {r['4x1-optimizer']['network']}")
print(f"{'case':16} {'delta s':>9} {'dense s':>9} {'speedup':>8} {'target':>7} "
      f"{'payload MB':>11} {'t/bound':>8} {'exact':>6}")
tgt = {"4x1-optimizer": 50, "4x1-inject": 25}
for n, d in r.items():
    sp = d.get("speedup_vs_dense")
    print(f"{n:16} {d['seconds']:9.3f} {d['dense_seconds'] or 0:9.3f} "
          f"{(sp or 0):7.1f}x {('>=%dx' % tgt[n]) if n in tgt else '-':>7} "
          f"{d['payload_bytes']/1e6:11.2f} {d.get('ratio_to_wan_bound') or 0:8.2f} "
          f"{'yes' if d['exact'] else 'NO':>6}")
a = r["4x1-optimizer"]["versions"][0]["seconds"]
b = r["4x4-optimizer"]["versions"][0]
print(f"4x4 vs 4x1 (v1): {b['seconds']/a:.2f}x (target <= 1.5x); per WAN link bytes "
      f"{sorted(b['wan_bytes'].values())} vs payload {b['payload_bytes']}")
print("t/bound = time / (busiest WAN link bytes / WAN rate + first chunk encode); target <= 1.3")
print("(all node processes share this machine's cores; figures from a loaded machine)")
PY
