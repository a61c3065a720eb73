#!/bin/sh
# slurm-setup.sh - make a single-node Slurm (munge + slurmctld + slurmd) on
# this machine usable for the launch tests.  Idempotent: does nothing when
# `srun` already works.  Exit 0 when Slurm is usable, 1 (with a reason on
# stderr) when it cannot be started here.
set -u
if timeout 20 srun -n 1 true >/dev/null 2>&1; then
  exit 0
fi
[ "$(id -u)" = 0 ] || { echo "slurm-setup: not root" >&2; exit 1; }
for b in munged slurmctld slurmd srun; do
  command -v $b >/dev/null 2>&1 || { echo "slurm-setup: $b not installed (apt-get install slurm-wlm munge)" >&2; exit 1; }
done
host=$(hostname -s)
cpus=$(nproc)
mem=$(awk '/MemTotal/ {printf "%d", $2/1024 - 512}' /proc/meminfo)
conf=/etc/slurm/slurm.conf
if [ ! -f "$conf" ]; then
  mkdir -p /etc/slurm /var/spool/slurmd /var/spool/slurmctld /var/log/slurm
  cat > "$conf" <<CONF
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
fi
if [ ! -f /etc/munge/munge.key ]; then
  mkdir -p /etc/munge
  dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 2>/dev/null
  chown munge:munge /etc/munge/munge.key 2>/dev/null || true
  chmod 400 /etc/munge/munge.key
fi
pgrep -x munged >/dev/null || { mkdir -p /run/munge; chown munge:munge /run/munge 2>/dev/null || true; su -s /bin/sh munge -c munged 2>/dev/null || munged --force || true; }
pgrep -x slurmctld >/dev/null || slurmctld
pgrep -x slurmd >/dev/null || slurmd
for i in 1 2 3 4 5 6 7 8 9 10; do
  timeout 20 srun -n 1 true >/dev/null 2>&1 && exit 0
  scontrol update nodename="$host" state=resume >/dev/null 2>&1 || true
  sleep 1
done
echo "slurm-setup: srun still does not work (see /var/log/slurm/)" >&2
exit 1
