#!/usr/bin/env bash
# A private single-node Slurm test cluster (slurmctld + slurmd, no munge, no accounting) whose config,
# state, spool, logs and pid files all live under one directory. Needs root (SlurmUser=root) and
# Debian's slurm-wlm.
#
#   bash tests/integration/slurm_cluster.sh start DIR   # prints the SLURM_CONF path once the node is idle
#   bash tests/integration/slurm_cluster.sh stop DIR    # cancels jobs, stops both daemons and every
#                                                       # slurmstepd/job process they started
#
# Ports are picked free at start, so several clusters (or a site's real one) can coexist on a host.
# Environment: SLURM_TEST_CPUS (CPUs of the node, default: nproc, at least 2), SLURM_TEST_WAIT (seconds
# to wait for the node to become idle, default 60), SLURM_TEST_CRED_EXPIRE (seconds a requeued job
# waits before it may start again, default 10; Slurm's default is 120).
set -uo pipefail
# Run without SLURM_CONF in our own environment: `stop` finds the cluster's processes by it.
[ -n "${SLURM_CONF+x}" ] && exec env -u SLURM_CONF bash "$0" "$@"

die() { echo "slurm_cluster: $*" >&2; exit 1; }
cmd=${1:-}; dir=${2:-}
if [ -z "$cmd" ] || [ -z "$dir" ]; then die "usage: $0 start|stop DIR"; fi
mkdir -p "$dir" || die "cannot create $dir"
dir=$(cd "$dir" && pwd)
conf=$dir/slurm.conf

show_logs() {
  for f in "$dir/slurmctld.log" "$dir/slurmd.log"; do
    echo "---- $f (last 40 lines)" >&2
    tail -n 40 "$f" >&2 2>/dev/null || echo "(missing)" >&2
  done
}

pid_alive() { [ -n "${1:-}" ] && kill -0 "$1" 2>/dev/null; }

# Processes started by this cluster: the daemons (pid files) and every process whose environment names
# this cluster's SLURM_CONF (slurmd and slurmstepd were started with it, job scripts and tasks inherit
# the submitter's). This script and its callers (which may have SLURM_CONF exported) are never listed.
ancestors() {
  local p=$$
  while [ -n "$p" ] && [ "$p" -gt 1 ] 2>/dev/null; do
    echo "$p"
    p=$(awk '/^PPid:/ {print $2}' "/proc/$p/status" 2>/dev/null)
  done
}

cluster_pids() {
  local p f self
  self=" $(ancestors | tr '\n' ' ') "
  {
    for f in "$dir/slurmctld.pid" "$dir/slurmd.pid"; do
      [ -f "$f" ] && p=$(cat "$f" 2>/dev/null) && pid_alive "$p" && echo "$p"
    done
    for f in /proc/[0-9]*/environ; do
      p=${f#/proc/}; p=${p%/environ}
      grep -qzxF "SLURM_CONF=$conf" "$f" 2>/dev/null && echo "$p"
    done
  } | sort -un | while read -r p; do
    case $self in *" $p "*) continue ;; esac  # this script or its callers
    pid_alive "$p" && echo "$p"
  done
}

stop_cluster() {
  if [ -f "$conf" ] && command -v scancel >/dev/null; then
    SLURM_CONF=$conf timeout 10 scancel --quiet --full --user=root 2>/dev/null || true
  fi
  local pids p _
  pids=$(cluster_pids)
  [ -z "$pids" ] && { echo "slurm_cluster: stopped ($dir)"; return 0; }
  for p in $pids; do kill -TERM "$p" 2>/dev/null || true; done
  for _ in $(seq 50); do  # 5 s grace, then SIGKILL
    local alive=""
    for p in $pids; do pid_alive "$p" && alive="$alive $p"; done
    [ -z "$alive" ] && break
    sleep 0.1
  done
  for p in $pids; do pid_alive "$p" && kill -KILL "$p" 2>/dev/null; done
  # Anything the KILLed processes forked in the meantime.
  pids=$(cluster_pids)
  for p in $pids; do kill -KILL "$p" 2>/dev/null || true; done
  sleep 0.2
  pids=$(cluster_pids)
  [ -z "$pids" ] || die "processes survived stop: $pids"
  echo "slurm_cluster: stopped ($dir)"
}

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

start_cluster() {
  for b in slurmctld slurmd sinfo; do command -v "$b" >/dev/null || die "$b not installed (apt-get install slurm-wlm)"; done
  [ "$(id -u)" = 0 ] || die "needs root (the private cluster runs with SlurmUser=root)"
  [ -f "$dir/slurmctld.pid" ] && pid_alive "$(cat "$dir/slurmctld.pid")" && die "a cluster is already running in $dir"
  local host cpus ctld_port slurmd_port
  host=$(hostname -s)
  cpus=${SLURM_TEST_CPUS:-$(nproc)}
  [ "$cpus" -ge 2 ] || cpus=2
  ctld_port=$(free_port); slurmd_port=$(free_port)
  while [ "$slurmd_port" = "$ctld_port" ]; do slurmd_port=$(free_port); done
  mkdir -p "$dir/state" "$dir/spool" "$dir/tmp"
  local first_job=$(( (RANDOM * 32768 + RANDOM) % 50000000 + 1000 ))
  rm -f "$dir/slurmctld.log" "$dir/slurmd.log"
  cat > "$conf" <<EOF
# Private single-node test cluster written by tests/integration/slurm_cluster.sh
ClusterName=sinklabtest
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
SlurmUser=root
SlurmdUser=root
AuthType=auth/none
# A requeued job may start again only once the old job's credential expired (default 120 s).
AuthInfo=cred_expire=${SLURM_TEST_CRED_EXPIRE:-10}
CredType=cred/none
MpiDefault=pmix
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
# mpi/pmix puts its per-step directories under TmpFS (default /tmp), named by job id only: keep them
# private, and start job ids at a random offset so they differ from any other cluster's on this host.
TmpFS=$dir/tmp
FirstJobId=$first_job
MailProg=/bin/true
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=1
MessageTimeout=10
InactiveLimit=0
KillWait=5
MinJobAge=300
# config_overrides: the node has the CPUs written here even where the machine has fewer (jobs ask for 2).
SlurmdParameters=config_overrides
NodeName=$host NodeAddr=127.0.0.1 NodeHostname=$host CPUs=$cpus State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
EOF
  SLURM_CONF=$conf slurmctld -f "$conf" >> "$dir/slurmctld.out" 2>&1 || { show_logs; die "slurmctld failed to start"; }
  SLURM_CONF=$conf slurmd -f "$conf" -N "$host" >> "$dir/slurmd.out" 2>&1 || { show_logs; stop_cluster >&2; die "slurmd failed to start"; }
  local wait=${SLURM_TEST_WAIT:-60} t0=$SECONDS state=""
  while :; do
    state=$(SLURM_CONF=$conf timeout 10 sinfo -h -N -n "$host" -o '%T' 2>/dev/null | head -1)
    [ "$state" = idle ] && break
    if [ $((SECONDS - t0)) -ge "$wait" ]; then
      echo "slurm_cluster: node $host not idle after ${wait}s (state: '${state:-no answer}')" >&2
      show_logs; stop_cluster >&2; exit 1
    fi
    sleep 0.5
  done
  echo "$conf"
}

case $cmd in
  start) start_cluster ;;
  stop) stop_cluster ;;
  *) die "usage: $0 start|stop DIR" ;;
esac
