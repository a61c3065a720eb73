#!/bin/sh
# plan-bench.sh - how long `deltacast plan` takes to plan synthetic
# topologies (R receiver regions x N nodes + a trainer region of N), and how
# long the flow-level simulator takes on smaller ones.  Prints the median of
# REPS runs (wall and CPU ms, as reported by the command itself) next to a
# baseline measured in the same run: the trivial 1:1 topology.
#
# usage: perf/plan-bench.sh [DELTACAST_BIN] [REPS]
set -eu
BIN=${1:-${DELTACAST_BIN:-build/cli/deltacast}}
REPS=${2:-5}

median() { sort -n | awk '{v[NR]=$1} END {if (NR==0) print "nan"; else if (NR%2) print v[(NR+1)/2]; else print (v[NR/2]+v[NR/2+1])/2}'; }

plan_case() {
    spec=$1
    wall=""; cpu=""
    i=0
    while [ $i -lt "$REPS" ]; do
        line=$("$BIN" plan --synthetic "$spec" | tail -1)
        # "planned in W ms (C ms CPU)"
        wall="$wall $(echo "$line" | awk '{print $3}')"
        cpu="$cpu $(echo "$line" | awk '{print $5}' | tr -d '(')"
        i=$((i + 1))
    done
    w=$(echo $wall | tr ' ' '\n' | median)
    c=$(echo $cpu | tr ' ' '\n' | median)
    nodes=$("$BIN" plan --synthetic "$spec" | head -1 | awk '{print $3}')
    edges=$("$BIN" plan --synthetic "$spec" | head -1 | sed 's/.*streams, \([0-9]*\) edges.*/\1/')
    printf "%-12s %8s nodes %9s edges   plan median %9s ms wall %9s ms CPU   (baseline 1:1: %s ms wall)\n" \
        "$spec" "$nodes" "$edges" "$w" "$c" "$BASE"
}

base=""
i=0
while [ $i -lt "$REPS" ]; do
    base="$base $("$BIN" plan --synthetic 1:1 | tail -1 | awk '{print $3}')"
    i=$((i + 1))
done
BASE=$(echo $base | tr ' ' '\n' | median)

echo "# deltacast plan: planning time (median of $REPS; $(nproc) CPUs, load $(cut -d' ' -f1 /proc/loadavg))"
for spec in 1:8 9:100 99:100 19:500; do
    plan_case "$spec"
done

echo "# deltacast plan --simulate: simulation time (one run each; 1e11 params, 3% change)"
for spec in 1:8 3:8 10:16; do
    "$BIN" plan --synthetic "$spec" --simulate --params 1e11 --change-rate 0.03 |
        awk -v s="$spec" '/predicted/ {p=$4} /simulated in/ {print s ": predicted " p " s; " $0}'
done
