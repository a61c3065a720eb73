#!/bin/sh
# slurm-topology.sh PORT HOST... - print a topology (YAML) with one node per
# HOST argument, in order (task order: node i is Slurm task i): all in one
# region; node 0 is the trainer (the sender), the others receivers.  Node i
# listens on HOST:PORT+i, so tasks that share a host get distinct ports.
# Used by refit.sbatch; `deltacast plan --topology FILE` shows its tree.
set -eu
[ $# -ge 2 ] || { echo "usage: $0 PORT HOST..." >&2; exit 2; }
port=$1
shift
case $port in *[!0-9]* | "") echo "$0: PORT '$port' is not a number" >&2; exit 2 ;; esac
[ $((port + $#)) -le 65536 ] || { echo "$0: ports $port.. pass 65535" >&2; exit 2; }
echo "# written by slurm-topology.sh"
echo "regions:"
echo "  - name: job"
echo "    nodes:"
i=0
for h in "$@"; do
  role=receiver
  [ $i -eq 0 ] && role=sender
  echo "      - {host: \"$h#$i\", addr: \"$h:$((port + i))\", role: $role}"
  i=$((i + 1))
done
