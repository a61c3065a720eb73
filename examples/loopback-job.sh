#!/bin/sh
# loopback-job.sh [RECEIVERS] - a refit job on this machine with no topology
# file and no launcher: `deltacast node --nodelist 127.0.0.1` makes the
# topology (node 0 the sender, nodes 1..RECEIVERS receivers, all on
# 127.0.0.1), `--port 0 --rendezvous DIR` lets each node bind a free port
# and publish it in DIR, `--rank R` says which node each process is.  Run
# from an empty directory; `deltacast` on PATH (DELTACAST: another binary).
# Leaves ckpt/ (v0, v1), w1.safetensors .. (each refit to v1), st/, rdv/.
set -eu
n=${1:-3}
dc=${DELTACAST:-deltacast}
case $n in *[!0-9]* | "" | 0) echo "$0: RECEIVERS '$n' is not a positive number" >&2; exit 2 ;; esac
if [ -z "${DELTACAST_SECRET_FILE:-}${DELTACAST_SECRET:-}" ]; then
  export DELTACAST_SECRET_FILE="$PWD/job.secret"
  (umask 077 && head -c 32 /dev/urandom | base64 > "$DELTACAST_SECRET_FILE")
fi
"$dc" gen --params 1e6 --change-rate 0.01 -o ckpt/ > /dev/null
mv ckpt/base.safetensors ckpt/v0.safetensors
mv ckpt/next.safetensors ckpt/v1.safetensors
rm -rf rdv  # a fresh rendezvous directory: no launcher's job id tells runs apart
pids=""
for r in $(seq 1 "$n"); do
  cp ckpt/v0.safetensors "w$r.safetensors"
  "$dc" node --nodelist 127.0.0.1 --world-size $((n + 1)) --rank "$r" --port 0 \
    --rendezvous rdv --weights "w$r.safetensors" --state "st/$r" &
  pids="$pids $!"
done
rc=0
"$dc" node --nodelist 127.0.0.1 --world-size $((n + 1)) --rank 0 --port 0 \
  --rendezvous rdv --versions ckpt/ --state st/0 || rc=1
for p in $pids; do wait "$p" || rc=1; done
for r in $(seq 1 "$n"); do
  cmp -s ckpt/v1.safetensors "w$r.safetensors" || { echo "$0: receiver $r does not hold v1" >&2; rc=1; }
done
[ $rc = 0 ] && echo "loopback-job.sh: v1 refit to $n receivers, byte-exact"
exit $rc
