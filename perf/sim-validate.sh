#!/bin/sh
# sim-validate.sh - `deltacast plan --simulate` against real refits on this
# machine (issue 5, "Validate the simulator": predicted within 20% of
# measured at small scale here).
#
#   perf/sim-validate.sh                    run the refits, then compare
#   perf/sim-validate.sh --analyze DIR      compare again from a previous run's
#                                           saved files (no refit is run)
#
# For each configuration (receiver regions x receivers per region, WAN rate,
# delta or dense) it runs `deltacast perf refit --json` (as root: one network
# namespace per region behind a tc-tbf-shaped veth), keeps the topology file
# that perf refit built and the root's per-version stats, then simulates the
# same refit with `deltacast plan --topology <that file> --stripes 1
# --simulate` (the engine plans with one stripe) and prints predicted vs
# measured.  Inputs of the simulation, none fitted to the measured time:
#   - topology: the very file perf refit ran (rates, regions, roles); the
#     script checks that the simulator's tree has the engine's edges;
#   - payload ratio and frame size: bytes on the busiest link (frames with
#     their headers) / checkpoint_bytes, and payload_bytes / frames, of the
#     same run;
#   - WAN goodput: tbf meters whole Ethernet frames, so a 1500-byte-MTU TCP
#     link (IPv4 + TCP timestamps: 1448 payload bytes in 1514 on the wire)
#     carries rate x 1448/1514 of payload: the simulated topology is perf
#     refit's with its WAN rates scaled by that (NAME.sim.yaml);
#   - CPU: all node processes share this machine's cores, so the simulator
#     runs with --cpu-cores $(nproc) (one pool for encode + every apply) and
#     per-core throughputs: for delta refits, the encode and in-place apply
#     (patch + verify, the receivers' path) rates that `deltacast perf
#     codec` measures with every core busy at once (memory bandwidth is
#     shared too), divided by the cores, in this same script run on the
#     same change model; for dense refits (not covered by
#     perf codec), dense bytes / the encode and apply phase seconds of the
#     same run.  A second prediction, "own-cpu", is the model without the
#     pool fed with the same run's phase rates (wall-clock, so contention is
#     already inside them): a consistency check, not an independent one.
# Each case runs SIMVAL_RUNS times (default 3); "measured" is the median
# run's time, and that run's files feed the simulation.
# Results: perf/results/simval/ (raw JSON per case + summary.json).  All
# processes share this machine's cores: figures from a shared machine.
set -eu
cd "$(dirname "$0")/.."
bin=${DELTACAST_BIN:-./build/cli/deltacast}
[ -x "$bin" ] || { echo "sim-validate: no $bin (build first or set DELTACAST_BIN)" >&2; exit 1; }
bin=$(readlink -f "$bin")
out=perf/results/simval
analyze=""
if [ "${1:-}" = "--analyze" ]; then
  analyze=${2:?--analyze DIR}
  out=$analyze
fi
delta_params=${SIMVAL_DELTA_PARAMS:-1e8}
dense_params=${SIMVAL_DENSE_PARAMS:-2e7}
runs=${SIMVAL_RUNS:-3}

if [ -z "$analyze" ]; then
  mkdir -p "$out"
  rm -f "$out"/*.json "$out"/*.runs
  # tmpfs: receivers hold their weights in memory, as perf refit does by
  # default (a disk file system adds the writeback of every dirtied page)
  tmpbase=/tmp
  [ -d /dev/shm ] && [ -w /dev/shm ] && tmpbase=/dev/shm
  tmp=$(mktemp -d "$tmpbase/deltacast-simval-XXXXXX")
  trap 'rm -rf "$tmp"' EXIT
  echo "== perf codec: per-core encode/apply (CPU time), opt1 and inj3, 3e7 params" >&2
  "$bin" perf codec --dir "$tmp/codec" --params 3e7 --cases opt1,inj3 --runs 3 \
      --no-baselines --json > "$out/codec.json"
  rm -rf "$tmp/codec"
  # name mode regions receivers wan model change params
  while read -r name mode R N wan model cr params; do
    [ -n "$name" ] || continue
    recv=$((R * N))
    extra="--no-dense"
    [ "$mode" = dense ] && extra=""
    echo "== $name: $mode, $R regions x $N, WAN $wan, $model $cr, $params params, $runs runs" >&2
    : > "$out/$name.runs"
    i=1
    while [ "$i" -le "$runs" ]; do
      "$bin" perf refit --receivers "$recv" --regions "$R" --params "$params" --wan-rate "$wan" \
          --model "$model" --change-rate "$cr" --versions 1 $extra --json \
          --workdir "$tmp/$name" --plot /dev/null > "$out/$name.r$i.refit.json"
      cp "$tmp/$name/topo.yaml" "$out/$name.topo.yaml"
      cp "$tmp/$name/stats-$mode-v1.json" "$out/$name.r$i.stats.json"
      python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["versions"][0]["seconds"], sys.argv[2])' \
          "$out/$name.r$i.stats.json" "$i" >> "$out/$name.runs"
      rm -rf "${tmp:?}/$name"
      i=$((i + 1))
    done
    # the median run's files are the case's (measured = its time)
    med=$(sort -g "$out/$name.runs" | sed -n "$(( (runs + 1) / 2 ))p" | cut -d' ' -f2)
    cp "$out/$name.r$med.refit.json" "$out/$name.refit.json"
    cp "$out/$name.r$med.stats.json" "$out/$name.stats.json"
    echo "$mode" > "$out/$name.mode"
  done <<EOF
delta-1x1-100m delta 1 1 100mbit optimizer 0.01 $delta_params
delta-2x1-100m delta 2 1 100mbit optimizer 0.01 $delta_params
delta-4x1-100m delta 4 1 100mbit optimizer 0.01 $delta_params
delta-2x2-100m delta 2 2 100mbit optimizer 0.01 $delta_params
delta-4x2-100m delta 4 2 100mbit optimizer 0.01 $delta_params
delta-2x1-50m delta 2 1 50mbit optimizer 0.01 $delta_params
delta-2x1-200m delta 2 1 200mbit optimizer 0.01 $delta_params
delta-4x1-100m-inj3 delta 4 1 100mbit inject 0.03 $delta_params
dense-1x1-100m dense 1 1 100mbit optimizer 0.01 $dense_params
dense-1x2-100m dense 1 2 100mbit optimizer 0.01 $dense_params
dense-2x1-100m dense 2 1 100mbit optimizer 0.01 $dense_params
dense-4x1-100m dense 4 1 100mbit optimizer 0.01 $dense_params
dense-2x2-100m dense 2 2 100mbit optimizer 0.01 $dense_params
dense-4x2-100m dense 4 2 100mbit optimizer 0.01 $dense_params
dense-2x1-50m dense 2 1 50mbit optimizer 0.01 $dense_params
dense-2x1-200m dense 2 1 200mbit optimizer 0.01 $dense_params
EOF
fi

python3 - "$bin" "$out" "$(nproc)" <<'PY'
import glob, json, os, re, statistics, subprocess, sys
bin_, out, cores = sys.argv[1], sys.argv[2], int(sys.argv[3])
codec_j = json.load(open(f"{out}/codec.json"))
codec = {c["case"]: c for c in codec_j["cases"]}
threads_all = codec_j["threads_all"]
rows = []
for rf in sorted(glob.glob(f"{out}/*.refit.json")):
    name = os.path.basename(rf)[:-len(".refit.json")]
    if re.search(r"\.r\d+$", name):
        continue  # one run of several; the case's own files are the median run's
    mode = open(f"{out}/{name}.mode").read().strip()
    refit = json.load(open(rf))
    st = json.load(open(f"{out}/{name}.stats.json"))
    v = st["versions"][0]
    topo = f"{out}/{name}.sim.yaml"
    with open(f"{out}/{name}.topo.yaml") as f, open(topo, "w") as g:
        for line in f:
            # "wan: 100000000bit" -> goodput; the file is perf refit's own
            g.write(re.sub(r"wan: (\d+)bit", lambda m: "wan: %dbit" % round(int(m.group(1)) * 1448 / 1514), line))
    dense_b = v["dense_bytes"]
    ratio = max(lk["bytes"] for lk in v["links"]) / dense_b
    frame = max(1, v["payload_bytes"] // max(1, v["frames"]))
    ph = v["phases"]
    nenc = cores  # the engine's encoder threads: one per core
    own_enc = dense_b / (ph["encode"] / nenc) / 1e9   # per sender, wall clock
    own_apply = dense_b / ph["apply"] / 1e9           # slowest receiver, wall clock
    if mode == "delta":
        case = codec["inj3" if refit["model"] == "inject" else "opt1"]
        # per core with every core busy at once (as in a refit on this
        # machine: memory bandwidth is shared too); the receivers patch in
        # place and verify (the engine's receive path)
        core_enc = case["encode_all_gbps"]["median"] / threads_all
        core_apply = case["apply_in_place_all_gbps"]["median"] / threads_all
        src = "perf codec (all cores)"
    else:
        core_enc = dense_b / ph["encode"] / 1e9
        core_apply = dense_b / ph["apply"] / 1e9
        src = "same run (phases)"
    common = ["plan", "--topology", topo, "--stripes", "1", "--simulate", "--json",
              "--params", str(refit["params"]), "--change-rate", str(refit["change_rate"]),
              "--payload-ratio", repr(ratio), "--chunk", str(frame)]
    def sim(extra):
        r = subprocess.run([bin_] + common + extra, capture_output=True, text=True)
        if r.returncode != 0:
            sys.exit(f"sim-validate: {name}: plan --simulate failed: {r.stderr.strip()}")
        return json.loads(r.stdout)
    pool = sim(["--cpu-cores", str(cores), "--encode-gbps", repr(core_enc), "--apply-gbps", repr(core_apply)])
    own = sim(["--encode-gbps", repr(own_enc), "--apply-gbps", repr(own_apply)])
    # the simulator's tree must be the engine's: the parent of every receiver
    tr = subprocess.run([bin_] + [a for a in common if a != "--simulate"], capture_output=True, text=True)
    pj = json.loads(tr.stdout) if tr.returncode == 0 else {}
    sim_par = {e["child"]: e["parent"] for e in pj.get("edges", [])}
    eng_par = {lk["node"]: lk["parent"] for lk in v["links"]}
    same_tree = sim_par == eng_par if sim_par else None
    wan_edge = {lk["node"]: lk.get("kind") == "wan" for lk in v["links"]}
    def depth(n):
        d = k = 0
        while n in eng_par and k < 1000:
            d += wan_edge.get(n, False)
            n, k = eng_par[n], k + 1
        return d
    hops = max(depth(n) for n in eng_par)  # most WAN hops trainer -> receiver
    meas = v["seconds"]
    rows.append(dict(name=name, mode=mode, measured=meas, predicted=pool["predicted_seconds"],
                     ratio=pool["predicted_seconds"] / meas, bottleneck=pool["bottleneck_kind"],
                     own_cpu_predicted=own["predicted_seconds"], own_cpu_ratio=own["predicted_seconds"] / meas,
                     own_cpu_bottleneck=own["bottleneck_kind"], payload_ratio=ratio, frame_bytes=frame,
                     encode_core_gbps=core_enc, apply_core_gbps=core_apply, cpu_rates_from=src,
                     own_encode_gbps=own_enc, own_apply_gbps=own_apply, payload_bytes=v["payload_bytes"],
                     params=refit["params"], wan_rate_bps=refit["wan_rate_bps"], network=refit["network"],
                     exact=refit["exact"], same_tree=same_tree, hops=hops))
print(f"\nsimulator vs real refits ({rows[0]['network'] if rows else '?'}; {cores} cores shared by every node "
      f"process; a shared machine)")
print(f"{'case':22} {'measured s':>10} {'predicted':>10} {'ratio':>6} {'bottleneck':>11} "
      f"{'own-cpu':>8} {'ratio':>6}  {'payload%':>8} {'wan hops':>8} {'tree':>5}")
for r in rows:
    print(f"{r['name']:22} {r['measured']:10.3f} {r['predicted']:10.3f} {r['ratio']:6.2f} {r['bottleneck']:>11} "
          f"{r['own_cpu_predicted']:8.3f} {r['own_cpu_ratio']:6.2f}  {r['payload_ratio']*100:8.3f} {r['hops']:8} "
          f"{'same' if r['same_tree'] else '?' if r['same_tree'] is None else 'DIFF':>5}")
def mae(rs, k):
    return statistics.median(abs(r[k] - 1) for r in rs) if rs else float("nan")
summ = {}
for label, rs in (("all", rows), ("delta", [r for r in rows if r["mode"] == "delta"]),
                  ("dense", [r for r in rows if r["mode"] == "dense"]),
                  ("1 WAN hop", [r for r in rows if r["hops"] <= 1]),
                  ("WAN relay", [r for r in rows if r["hops"] > 1])):
    within = sum(abs(r["ratio"] - 1) <= 0.2 for r in rs)
    summ[label] = dict(median_abs_error=mae(rs, "ratio"), within_20pct=within, cases=len(rs),
                       own_cpu_median_abs_error=mae(rs, "own_cpu_ratio"))
    print(f"{label:9} median |predicted/measured - 1| = {mae(rs, 'ratio')*100:5.1f}%  "
          f"({within}/{len(rs)} within 20%); own-cpu model: {mae(rs, 'own_cpu_ratio')*100:5.1f}%")
print("predicted: --cpu-cores %d with per-core rates (delta: perf codec, all cores busy; dense: same run's phases);"
      % cores)
print("own-cpu: no pool, the same run's wall-clock phase rates per node (consistency check)")
print("wan hops: most WAN hops from the trainer to a receiver in the engine's tree (> 1: a relay")
print("          forwards across the WAN, through the trainer's namespace)")
json.dump(dict(rows=rows, summary=summ, cores=cores), open(f"{out}/summary.json", "w"), indent=2)
PY
