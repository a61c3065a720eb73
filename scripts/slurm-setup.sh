#!/bin/sh
# Start a real single-node Slurm (munge + slurmctld + slurmd on localhost)
# for launch tests.  Idempotent.  Needs root and the slurm-wlm + munge
# packages (scripts/install-deps.sh).  Prints "slurm: ready (N cpus)" and
# exits 0 when `srun` works, else prints why and exits 1.
set -u
[ "$(id -u)" = 0 ] || { echo "slurm: not root, cannot start daemons"; exit 1; }
command -v slurmctld >/dev/null || { echo "slurm: slurm-wlm not installed"; exit 1; }

if srun -N1 -n1 -t 1 true >/dev/null 2>&1; then
  echo "slurm: ready (already running)"; exit 0
fi

host=$(hostname -s)
cpus=$(nproc)
mem=$(awk '/MemTotal/ {print int($2/1024) - 1024}' /proc/meminfo)
mkdir -p /etc/slurm /var/spool/slurmctld /var/spool/slurmd /var/log/slurm /run/munge
chown -R munge:munge /run/munge 2>/dev/null || true
if [ ! -s /etc/munge/munge.key ]; then
  dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 2>/dev/null
  chown munge:munge /etc/munge/munge.key; chmod 400 /etc/munge/munge.key
fi
if ! pgrep -x munged >/dev/null; then
  su -s /bin/sh munge -c /usr/sbin/munged 2>/dev/null || /usr/sbin/munged --force 2>/dev/null
fi
cat > /etc/slurm/slurm.conf <<CONF
ClusterName=deltacast
SlurmctldHost=$host
AuthType=auth/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
ReturnToService=2
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
SlurmdSpoolDir=/var/spool/slurmd
StateSaveLocation=/var/spool/slurmctld
SlurmUser=root
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd.log
JobCompType=jobcomp/none
NodeName=$host CPUs=$cpus RealMemory=$mem State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:8
CONF
pgrep -x slurmctld >/dev/null || slurmctld
pgrep -x slurmd >/dev/null || slurmd
for i in $(seq 1 30); do
  if srun -N1 -n1 -t 1 true >/dev/null 2>&1; then
    echo "slurm: ready ($cpus cpus on $host)"; exit 0
  fi
  scontrol update NodeName="$host" State=RESUME >/dev/null 2>&1
  sleep 1
done
echo "slurm: srun does not work after 30 s; see /var/log/slurm/*.log"
exit 1
