#!/usr/bin/env bash
# Brings up a real single-node Slurm cluster (munged, slurmctld, slurmd) on this machine, without
# systemd, so that `srun -n N dptrain --config ...` can be tried on one box. Run as root.
#
#   launch/local_slurm.sh start [--install]   start it (--install: apt-get slurm-wlm munge first)
#   launch/local_slurm.sh stop                stop every daemon and job step it started
#   launch/local_slurm.sh status              sinfo, or "not running" (exit 1)
#   launch/local_slurm.sh env                 print the `export SLURM_CONF=...` line
#
# Then:  export SLURM_CONF=/tmp/dptrain-slurm/slurm.conf;  srun -n 2 hostname
# `start` and `env` print only that export line on stdout (messages go to stderr), so
#   eval "$(launch/local_slurm.sh start)"
# starts the cluster and points this shell at it.
#
# Everything (slurm.conf, state, spool, pid and log files, munge socket) lives in one state
# directory; nothing under /etc, /run or /var is touched except that /etc/munge/munge.key is
# created if it is missing. munged gets its own socket there, so a system munged, if any, is
# neither used nor disturbed. Settings (environment):
#   DPTRAIN_SLURM_DIR          state directory                          [/tmp/dptrain-slurm]
#   DPTRAIN_SLURM_CPUS         CPUs the node advertises; more than nproc lets `srun -n 4` run
#                              on a 2-core box without --overcommit      [max(nproc, 8)]
#   DPTRAIN_SLURMCTLD_PORT     slurmctld port                           [6817]
#   DPTRAIN_SLURMD_PORT        slurmd port                              [6818]
#   DPTRAIN_SLURM_TIMEOUT      seconds `start` waits for the node       [20]
#   DPTRAIN_MUNGE_KEY          munge key file (created if absent)       [/etc/munge/munge.key]
set -euo pipefail

DIR=$(realpath -m -- "${DPTRAIN_SLURM_DIR:-/tmp/dptrain-slurm}")  # slurm.conf wants absolute paths
CTLD_PORT=${DPTRAIN_SLURMCTLD_PORT:-6817}
SLURMD_PORT=${DPTRAIN_SLURMD_PORT:-6818}
TIMEOUT=${DPTRAIN_SLURM_TIMEOUT:-20}
MUNGE_KEY=${DPTRAIN_MUNGE_KEY:-/etc/munge/munge.key}
NCPU=$(nproc)
CPUS=${DPTRAIN_SLURM_CPUS:-$((NCPU > 8 ? NCPU : 8))}
NODE=$(hostname -s)
CONF=$DIR/slurm.conf
MUNGE_DIR=$DIR/munge
MUNGE_SOCK=$MUNGE_DIR/munge.socket
PKGS=(slurm-wlm munge)

log() { echo "local_slurm: $*" >&2; }  # stdout carries only the export line
die() { echo "local_slurm: error: $*" >&2; exit 1; }

usage() {
  sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'
}

# --- processes ---------------------------------------------------------------------------------

# True when PID is a live (not zombie) process. Daemons that exit linger as zombies when nothing
# reaps them, so kill -0 is not enough.
alive() {
  local pid=$1 state
  [[ $pid =~ ^[0-9]+$ ]] || return 1
  state=$(awk '/^State:/ {print $2; exit}' "/proc/$pid/status" 2>/dev/null) || return 1
  [[ -n $state && $state != Z && $state != X ]]
}

pid_of() {  # pid from a pid file, empty if the file is missing
  local f=$1
  if [[ -s $f ]]; then tr -dc '0-9' <"$f"; fi
}

# daemon_pid PIDFILE NAME: the pid in the file when that process is alive and is NAME (a stale
# pid file whose pid now belongs to another program yields nothing).
daemon_pid() {
  local pid
  pid=$(pid_of "$1")
  if [[ -n $pid ]] && alive "$pid" && [[ $(cat "/proc/$pid/comm" 2>/dev/null) == "$2" ]]; then
    echo "$pid"
  fi
}

daemon_alive() { [[ -n $(daemon_pid "$1" "$2") ]]; }  # daemon_alive PIDFILE NAME

stop_pid() {  # stop_pid NAME PID [SECONDS]: SIGTERM, wait (default 10 s), then SIGKILL
  local name=$1 pid=$2 wait_s=${3:-10} i
  alive "$pid" || return 0
  kill -TERM "$pid" 2>/dev/null || true
  for ((i = 0; i < wait_s * 10; i++)); do
    alive "$pid" || { log "stopped $name (pid $pid)"; return 0; }
    sleep 0.1
  done
  log "$name (pid $pid) still running after SIGTERM; sending SIGKILL"
  kill -KILL "$pid" 2>/dev/null || true
  for ((i = 0; i < 50; i++)); do
    alive "$pid" || return 0
    sleep 0.1
  done
  die "could not stop $name (pid $pid)"
}

descendants() {  # all live descendants of PID, children first
  local c
  for c in $(pgrep -P "$1" 2>/dev/null || true); do
    descendants "$c"
    alive "$c" && echo "$c"
  done
  return 0
}

# A job step left behind (slurmctld gone, so scancel could not end it): its tasks first, then
# slurmstepd itself, which ignores SIGTERM by design.
stop_step() {
  local stepd=$1 p
  for p in $(descendants "$stepd"); do stop_pid "task of slurmstepd $stepd" "$p" 2; done
  stop_pid slurmstepd "$stepd" 2
}

# slurmstepd processes of this cluster: they hold files under our spool directory open.
our_stepds() {
  local p fd
  for p in $(pgrep -x slurmstepd 2>/dev/null || true); do
    alive "$p" || continue
    for fd in /proc/"$p"/fd/*; do
      if [[ $(readlink "$fd" 2>/dev/null) == "$DIR"/* ]]; then echo "$p"; break; fi
    done
  done
}

# --- helpers -----------------------------------------------------------------------------------

is_installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }

install_packages() {
  local missing=() p
  for p in "${PKGS[@]}"; do is_installed "$p" || missing+=("$p"); done
  if ((${#missing[@]} == 0)); then return 0; fi
  log "installing ${missing[*]}"
  apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
}

need_tools() {
  local t missing=()
  for t in munged munge unmunge slurmctld slurmd srun sinfo scontrol; do
    command -v "$t" >/dev/null || missing+=("$t")
  done
  ((${#missing[@]} == 0)) ||
    die "missing ${missing[*]}: install Slurm and munge (apt-get install slurm-wlm munge), or run '$0 start --install'"
}

port_busy() { ss -Hltn "sport = :$1" 2>/dev/null | grep -q .; }

show_logs() {
  local f
  for f in "$MUNGE_DIR/munged.log" "$DIR/log/slurmctld.log" "$DIR/log/slurmd.log"; do
    [[ -s $f ]] || continue
    echo "----- last lines of $f -----" >&2
    tail -n 15 "$f" >&2
  done
}

fail_start() {
  echo "local_slurm: error: $*" >&2
  show_logs
  echo "local_slurm: tearing down what was started (logs are kept in $DIR)" >&2
  do_stop >/dev/null 2>&1 || true
  exit 1
}

running() {  # all three daemons alive and the controller answers
  daemon_alive "$MUNGE_DIR/munged.pid" munged && daemon_alive "$DIR/run/slurmctld.pid" slurmctld &&
    daemon_alive "$DIR/run/slurmd.pid" slurmd &&
    SLURM_CONF=$CONF timeout 5 sinfo -h -o %T >/dev/null 2>&1
}

print_env() {
  echo "export SLURM_CONF=$CONF"
}

# --- munge -------------------------------------------------------------------------------------

ensure_munge_key() {
  if [[ ! -e $MUNGE_KEY ]]; then
    log "creating munge key $MUNGE_KEY"
    install -d -o munge -g munge -m 0700 "$(dirname "$MUNGE_KEY")"
    if command -v mungekey >/dev/null; then
      mungekey --create --keyfile="$MUNGE_KEY"
    else
      dd if=/dev/urandom of="$MUNGE_KEY" bs=1024 count=1 status=none
    fi
  fi
  # munged refuses a key that is not owned by its user or that others can read.
  chown munge:munge "$MUNGE_KEY"
  chmod 0600 "$MUNGE_KEY"
}

start_munged() {
  ensure_munge_key
  # munged runs as the munge user and checks that its directories are not writable by others.
  install -d -o munge -g munge -m 0755 "$MUNGE_DIR"
  rm -f "$MUNGE_SOCK" "$MUNGE_SOCK.lock" "$MUNGE_DIR/munged.pid" "$MUNGE_DIR/munged.log"
  runuser -u munge -- munged --socket="$MUNGE_SOCK" --key-file="$MUNGE_KEY" \
    --pid-file="$MUNGE_DIR/munged.pid" --log-file="$MUNGE_DIR/munged.log" \
    --seed-file="$MUNGE_DIR/munged.seed" --num-threads=2 ||
    fail_start "munged did not start"
  local i
  for ((i = 0; i < 50; i++)); do
    if munge -n -S "$MUNGE_SOCK" 2>/dev/null | unmunge -S "$MUNGE_SOCK" >/dev/null 2>&1; then
      return 0
    fi
    sleep 0.1
  done
  fail_start "munged does not answer on $MUNGE_SOCK"
}

# --- slurm -------------------------------------------------------------------------------------

write_conf() {  # write_conf MPI_DEFAULT
  local mem
  mem=$(awk '/^MemTotal:/ {printf "%d", $2 / 1024; exit}' /proc/meminfo)
  cat >"$CONF" <<EOF
# Single-node Slurm written by launch/local_slurm.sh on $(date -u +%FT%TZ). Do not edit: 'start'
# rewrites it. Node: $NCPU real CPUs, advertised as $CPUS (SlurmdParameters=config_overrides).
ClusterName=dptrain-local
SlurmctldHost=$NODE(127.0.0.1)
SlurmctldPort=$CTLD_PORT
SlurmdPort=$SLURMD_PORT
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$MUNGE_SOCK
MpiDefault=$1
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SwitchType=switch/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmdParameters=config_overrides
ReturnToService=2
EnforcePartLimits=ALL
SchedulerType=sched/backfill
InactiveLimit=0
KillWait=5
MinJobAge=60
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool
TmpFS=$DIR/tmp
MailProg=/bin/true
SlurmctldPidFile=$DIR/run/slurmctld.pid
SlurmdPidFile=$DIR/run/slurmd.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
NodeName=$NODE NodeAddr=127.0.0.1 CPUs=$CPUS RealMemory=$mem State=UNKNOWN
PartitionName=local Nodes=$NODE Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4
EOF
}

pick_mpi_default() {  # pmix when srun lists it, none otherwise
  local list
  write_conf none
  list=$(SLURM_CONF=$CONF srun --mpi=list 2>&1 || true)
  if grep -qw pmix <<<"$list"; then echo pmix; else echo none; fi
}

do_start() {
  [[ $EUID -eq 0 ]] || die "run as root (it starts munged as the munge user and Slurm as root)"
  local install=0 arg
  for arg in "$@"; do
    case $arg in
      --install) install=1 ;;
      *) die "unknown option '$arg' for start" ;;
    esac
  done
  ((install)) && install_packages
  need_tools

  if running; then
    log "already running (state in $DIR)"
    print_env
    return 0
  fi
  # Leftovers of a half-started or crashed cluster: clear them first.
  do_stop >/dev/null 2>&1 || true

  local port
  for port in "$CTLD_PORT" "$SLURMD_PORT"; do
    port_busy "$port" && die "port $port is in use (another Slurm?); set DPTRAIN_SLURMCTLD_PORT / DPTRAIN_SLURMD_PORT"
  done

  local t0=$SECONDS
  # A fresh cluster each time: slurmctld -c restarts job ids at 1, so stale per-step files (PMIx
  # sockets of a step that was killed) would collide with new steps of the same id.
  rm -rf "$DIR/state" "$DIR/spool" "$DIR/tmp"
  install -d -m 0755 "$DIR" "$DIR/run" "$DIR/log" "$DIR/spool"
  install -d -m 0700 "$DIR/state"
  install -d -m 1777 "$DIR/tmp"  # TmpFS: PMIx puts its per-step app directories here
  : >"$DIR/log/slurmctld.log"
  : >"$DIR/log/slurmd.log"

  start_munged
  local mpi
  mpi=$(pick_mpi_default)
  write_conf "$mpi"
  export SLURM_CONF=$CONF

  slurmctld -c -f "$CONF" || fail_start "slurmctld did not start"
  slurmd -f "$CONF" || fail_start "slurmd did not start"

  # Wait until the node is idle and a real job step runs.
  local deadline=$((SECONDS + TIMEOUT)) state=""
  while :; do
    state=$(timeout 5 sinfo -h -n "$NODE" -o %T 2>/dev/null || true)
    [[ $state == idle ]] && break
    daemon_alive "$DIR/run/slurmctld.pid" slurmctld || fail_start "slurmctld exited"
    daemon_alive "$DIR/run/slurmd.pid" slurmd || fail_start "slurmd exited"
    ((SECONDS < deadline)) || fail_start "node $NODE not idle after ${TIMEOUT}s (state: '${state:-no answer}')"
    sleep 0.1
  done
  local left=$((deadline - SECONDS))
  ((left > 2)) || left=2
  timeout "$left" srun -n 2 true >"$DIR/log/check.log" 2>&1 ||
    { cat "$DIR/log/check.log" >&2; fail_start "'srun -n 2 true' failed"; }

  log "running: node $NODE ($CPUS CPUs advertised, $NCPU real), MpiDefault=$mpi, ready in $((SECONDS - t0))s"
  log "state, logs and slurm.conf in $DIR; use it with:"
  print_env
}

do_stop() {
  local pid any=0
  if [[ -s $CONF ]] && daemon_alive "$DIR/run/slurmctld.pid" slurmctld; then
    # Cancel this cluster's jobs first so their steps end cleanly.
    SLURM_CONF=$CONF timeout 5 scancel --full --user=root >/dev/null 2>&1 || true
  fi
  pid=$(daemon_pid "$DIR/run/slurmd.pid" slurmd)
  [[ -n $pid ]] && { any=1; stop_pid slurmd "$pid"; }
  for pid in $(our_stepds); do any=1; stop_step "$pid"; done
  pid=$(daemon_pid "$DIR/run/slurmctld.pid" slurmctld)
  [[ -n $pid ]] && { any=1; stop_pid slurmctld "$pid"; }
  pid=$(daemon_pid "$MUNGE_DIR/munged.pid" munged)
  [[ -n $pid ]] && { any=1; stop_pid munged "$pid"; }
  rm -f "$DIR/run/slurmd.pid" "$DIR/run/slurmctld.pid" "$MUNGE_DIR/munged.pid"
  ((any)) || log "not running"
  return 0
}

do_status() {
  if running; then
    SLURM_CONF=$CONF sinfo
    print_env
  else
    echo "not running"
    return 1
  fi
}

cmd=${1:-}
(($#)) && shift
case $cmd in
  start) do_start "$@" ;;
  stop) do_stop ;;
  status) do_status ;;
  env) print_env ;;
  -h | --help | help) usage ;;
  *) usage >&2; exit 2 ;;
esac
