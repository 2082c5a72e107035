#!/usr/bin/env bash
# A real one-node SLURM cluster on loopback, for the tests (tests/slurm/) and for trying the recipes by hand:
# SLURM 22.05 and MUNGE from Debian (apt), one controller and one node daemon under a state directory.
#   scripts/slurm/cluster.sh install           # apt-get install slurm-wlm munge when missing
#   scripts/slurm/cluster.sh start STATE_DIR   # install, then munged, slurmctld, slurmd; waits for an idle node
#   export SLURM_CONF=STATE_DIR/slurm.conf     # what sbatch, srun, squeue and sinfo read
#   scripts/slurm/cluster.sh stop STATE_DIR    # stops the three daemons of that directory
# The node has this machine's CPUs and memory, each CPU shared by up to 4 jobs (OverSubscribe=FORCE:4, so
# that an array of 4 and a finalize run side by side on 2 cores). KillWait is 5 s (SLURM's default is 30): a
# job past its time limit gets SIGTERM, then SIGKILL 5 s later; cred_expire=5 lets a requeued job start again
# after 5 s (120 by default). Runs as root (SlurmUser and SlurmdUser root).
set -euo pipefail
log() { echo "[slurm] $*" >&2; }
die() {
  log "$*"
  exit 1
}

install() {
  if command -v slurmctld >/dev/null && command -v slurmd >/dev/null && command -v munged >/dev/null; then
    return
  fi
  local sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  # Exit 2: this machine cannot install them (the tests skip, but on CI).
  command -v apt-get >/dev/null || { log "no apt-get here to install slurm-wlm and munge"; exit 2; }
  [ -z "$sudo" ] || command -v sudo >/dev/null || { log "not root and no sudo: cannot apt-get install slurm-wlm munge"; exit 2; }
  log "installing slurm-wlm and munge (apt, log: /tmp/lrs-slurm-apt.log)"
  { $sudo apt-get -o DPkg::Lock::Timeout=600 update -qq \
    && DEBIAN_FRONTEND=noninteractive $sudo apt-get -o DPkg::Lock::Timeout=600 install -y -qq \
      --no-install-recommends slurm-wlm munge; } >/tmp/lrs-slurm-apt.log 2>&1 \
    || {
      tail -n 20 /tmp/lrs-slurm-apt.log >&2
      die "apt-get install slurm-wlm munge failed (log: /tmp/lrs-slurm-apt.log)"
    }
}

free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# The node's name: this machine's short hostname where it resolves (jobs find their peers by it, as
# `scontrol show hostnames` gives it, e.g. a MASTER_ADDR), else localhost.
node_name() {
  local name
  name=$(hostname -s)
  getent hosts "$name" >/dev/null && echo "$name" || echo localhost
}

write_conf() {
  local state=$1 cpus mem_mb
  cpus=$(nproc)
  mem_mb=$(($(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 * 9 / 10))
  mkdir -p "$state/ctld" "$state/spool" "$state/munge"
  chmod 700 "$state/munge"
  cat >"$state/slurm.conf" <<EOF
ClusterName=lrs
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort=$(free_port)
SlurmdPort=$(free_port)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$state/munge/munge.sock,cred_expire=5
StateSaveLocation=$state/ctld
SlurmdSpoolDir=$state/spool
SlurmctldPidFile=$state/slurmctld.pid
SlurmdPidFile=$state/slurmd.pid
SlurmctldLogFile=$state/slurmctld.log
SlurmdLogFile=$state/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/builtin
SchedulerParameters=sched_interval=1
MpiDefault=none
ReturnToService=2
KillWait=5
MinJobAge=300
InactiveLimit=0
SlurmdTimeout=30
NodeName=$(node_name) NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$mem_mb State=UNKNOWN
PartitionName=lrs Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4
EOF
}

start() {
  local state=${1:?usage: cluster.sh start STATE_DIR}
  install
  state=$(realpath -m "$state")
  write_conf "$state"
  export SLURM_CONF=$state/slurm.conf
  # A key of our own: the system's /etc/munge/munge.key may be missing or another cluster's.
  [ -f "$state/munge/munge.key" ] || dd if=/dev/urandom of="$state/munge/munge.key" bs=1024 count=1 status=none
  chmod 400 "$state/munge/munge.key"
  munged --force --key-file="$state/munge/munge.key" --socket="$state/munge/munge.sock" \
    --pid-file="$state/munge/munged.pid" --log-file="$state/munge/munged.log" \
    --seed-file="$state/munge/munged.seed" || die "munged did not start (log: $state/munge/munged.log)"
  slurmctld -f "$SLURM_CONF" || die "slurmctld did not start (log: $state/slurmctld.log)"
  slurmd -f "$SLURM_CONF" -N "$(node_name)" || die "slurmd did not start (log: $state/slurmd.log)"
  local i
  for i in $(seq 300); do
    if [ "$(sinfo -h -o %t 2>/dev/null)" = idle ]; then
      log "node $(node_name) idle ($(nproc) CPUs); export SLURM_CONF=$SLURM_CONF"
      return
    fi
    sleep 0.1
  done
  tail -n 5 "$state/slurmctld.log" "$state/slurmd.log" >&2 || true
  die "node $(node_name) not idle after 30 s (sinfo: $(sinfo -h -o '%t %E' 2>&1 | head -1))"
}

# Whether process $1 runs (a daemon's zombie, which an init that does not reap leaves, does not).
alive() {
  local stat
  stat=$(ps -o stat= -p "$1" 2>/dev/null) && [[ $stat != Z* ]]
}

stop() {
  local state=${1:?usage: cluster.sh stop STATE_DIR} pidfile pid i
  # Jobs first: their processes outlive the daemons otherwise. SIGKILL, as none of them is to resume.
  if [ -f "$state/slurmctld.pid" ] && alive "$(cat "$state/slurmctld.pid")"; then
    export SLURM_CONF=$state/slurm.conf
    scancel --full --signal=KILL --user="$(id -un)" 2>/dev/null || true
    for i in $(seq 100); do
      [ -z "$(squeue -h -o %A 2>/dev/null)" ] && break
      sleep 0.05
    done
  fi
  for pidfile in "$state/slurmd.pid" "$state/slurmctld.pid" "$state/munge/munged.pid"; do
    [ -f "$pidfile" ] || continue
    pid=$(cat "$pidfile")
    kill "$pid" 2>/dev/null || continue
    for i in $(seq 40); do
      alive "$pid" || break
      sleep 0.05
    done
    kill -9 "$pid" 2>/dev/null || true
  done
}

case "${1:-}" in
  install) install ;;
  start) start "${2:-}" ;;
  stop) stop "${2:-}" ;;
  *) die "usage: cluster.sh install | start STATE_DIR | stop STATE_DIR" ;;
esac
