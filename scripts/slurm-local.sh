#!/usr/bin/env bash
# A real single-node Slurm on this machine, for developers and CI: munge, slurmctld and slurmd on
# localhost, one CPU partition ("debug", plus "urgent", which preempts it), and one GPU gres so
# `--gres gpu:1` is accepted.
#
#   scripts/slurm-local.sh start     # install (Debian: slurm-wlm, munge) if absent, configure, start, wait for idle
#   scripts/slurm-local.sh stop      # stop the daemons this script started (by their pid files)
#   scripts/slurm-local.sh status    # the node as `sinfo --json` sees it
#
# Runs as root (CI). Idempotent: `start` on a running cluster only checks that the node is idle.
# The GPU gres is backed by /dev/null: it lets the scheduler allocate "gpu:1" (SLURM_JOB_GPUS=0,
# CUDA_VISIBLE_DEVICES=0) but there is no GPU behind it. A real cluster declares its real GPUs in
# gres.conf (AutoDetect=nvml or File=/dev/nvidia[0-7]); see docs/cluster.md.
#
# Accounting: no slurmdbd (it needs MariaDB). AccountingStorageType=accounting_storage/none, so
# `sacct` reports nothing; `invoke status` reads `squeue --json` for live jobs, `scontrol show job
# --json` for jobs that ended within MinJobAge (here one hour), and each task's own end record.
set -euo pipefail

STATE=${OPENJEV_SLURM_STATE:-/var/lib/openjev-slurm-local}
CONF_DIR=/etc/slurm
CONF=$CONF_DIR/slurm.conf
MARK="# written by openjev-repro scripts/slurm-local.sh"
NODE=$(hostname -s)

say() { echo "slurm-local: $*" >&2; }
die() { echo "error: $*" >&2; exit 1; }

[ "$(id -u)" = 0 ] || die "run as root (it writes $CONF_DIR and starts the daemons)"

install_packages() {
    if command -v slurmctld >/dev/null && command -v slurmd >/dev/null && command -v munged >/dev/null; then
        return
    fi
    command -v apt-get >/dev/null || die "slurmctld/slurmd/munged are missing and this is not a Debian system"
    say "installing slurm-wlm and munge (apt-get)"
    DEBIAN_FRONTEND=noninteractive apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq slurm-wlm munge >/dev/null
}

alive() { [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

start_munge() {
    install -d -o munge -g munge -m 0700 /etc/munge /var/lib/munge /var/log/munge
    install -d -o munge -g munge -m 0755 /run/munge
    if [ ! -s /etc/munge/munge.key ]; then
        say "generating the munge key"
        if command -v mungekey >/dev/null; then mungekey --create --force --keyfile /etc/munge/munge.key
        else dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 status=none; fi
        chown munge:munge /etc/munge/munge.key
        chmod 0400 /etc/munge/munge.key
    fi
    if ! alive /run/munge/munged.pid; then
        say "starting munged"
        runuser -u munge -- /usr/sbin/munged
        install -d -m 0755 "$STATE"
        touch "$STATE/munged-started-here"   # so `stop` stops only a munged that we started
    fi
    for _ in $(seq 50); do munge -n </dev/null | unmunge >/dev/null 2>&1 && return; sleep 0.1; done
    die "munged does not answer (see /var/log/munge/munged.log)"
}

write_config() {
    if [ -f "$CONF" ] && ! grep -qF "$MARK" "$CONF"; then
        die "$CONF exists and was not written by this script; refusing to replace a real cluster's configuration"
    fi
    local cpus mem
    cpus=$(nproc)
    mem=$(( $(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 / 2 ))
    install -d -m 0755 "$CONF_DIR" "$STATE" "$STATE/ctld" "$STATE/d" "$STATE/log"
    cat >"$CONF.tmp" <<EOF
$MARK
# A single-node development cluster; not a template for a real one (docs/cluster.md).
ClusterName=openjev-local
SlurmctldHost=$NODE(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
StateSaveLocation=$STATE/ctld
SlurmdSpoolDir=$STATE/d
SlurmctldPidFile=$STATE/slurmctld.pid
SlurmdPidFile=$STATE/slurmd.pid
SlurmctldLogFile=$STATE/log/slurmctld.log
SlurmdLogFile=$STATE/log/slurmd.log
SlurmctldPort=6817
SlurmdPort=6818
ReturnToService=2
# No cgroups in containers and sandboxes: track job processes by parentage, no task binding.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
GresTypes=gpu
# Accounting: none (no slurmdbd); finished jobs stay visible to scontrol for MinJobAge seconds.
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
MinJobAge=3600
# scancel/timeout: SIGTERM, then SIGKILL after KillWait seconds (time to mark the run incomplete).
KillWait=30
MpiDefault=none
NodeName=$NODE NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$mem Gres=gpu:1 State=UNKNOWN
# Preemption as many GPU clusters run it: a higher-tier partition cancels jobs of a lower one
# (state PREEMPTED). "urgent" exists only so that tests can preempt; studies go to "debug".
PreemptType=preempt/partition_prio
PreemptMode=CANCEL
PartitionName=debug Nodes=$NODE Default=YES MaxTime=INFINITE State=UP PriorityTier=1
PartitionName=urgent Nodes=$NODE Default=NO MaxTime=INFINITE State=UP PriorityTier=2
EOF
    cat >"$CONF_DIR/gres.conf.tmp" <<EOF
$MARK
# One placeholder GPU so that --gres gpu:1 is accepted; /dev/null is no GPU. A real cluster
# lists its devices here (File=/dev/nvidia0 ... or AutoDetect=nvml).
NodeName=$NODE Name=gpu File=/dev/null
EOF
    # cgroup.conf is read by slurmd even with proctrack/linuxproc on some versions; keep it inert.
    printf '%s\nCgroupPlugin=autodetect\nConstrainCores=no\nConstrainDevices=no\n' "$MARK" >"$CONF_DIR/cgroup.conf.tmp"
    local changed=0
    for f in slurm.conf gres.conf cgroup.conf; do
        if ! cmp -s "$CONF_DIR/$f.tmp" "$CONF_DIR/$f"; then mv "$CONF_DIR/$f.tmp" "$CONF_DIR/$f"; changed=1
        else rm -f "$CONF_DIR/$f.tmp"; fi
    done
    echo $changed
}

node_state() {
    sinfo --json 2>/dev/null | python3 -c '
import json, sys
nodes = json.load(sys.stdin).get("nodes", [])
print(" ".join(str(n.get("state", "?")).lower() for n in nodes) or "none")' 2>/dev/null || echo unreachable
}

start() {
    install_packages
    start_munge
    local changed
    changed=$(write_config)
    if [ "$changed" = 1 ] && { alive "$STATE/slurmctld.pid" || alive "$STATE/slurmd.pid"; }; then
        say "configuration changed: restarting the daemons"
        stop
    fi
    if ! alive "$STATE/slurmctld.pid"; then
        say "starting slurmctld"
        slurmctld   # recovers its saved state: job ids keep counting, finished jobs stay known
    fi
    if ! alive "$STATE/slurmd.pid"; then
        say "starting slurmd"
        slurmd
    fi
    local state=""
    for _ in $(seq 120); do
        state=$(node_state)
        case "$state" in
            idle*|mixed*|allocated*) say "node $NODE is $state"; return 0 ;;
            down*|drain*) scontrol update nodename="$NODE" state=resume >/dev/null 2>&1 || true ;;
        esac
        sleep 0.5
    done
    die "node $NODE did not become idle (state: $state); see $STATE/log/"
}

stop_pidfile() {
    local pidfile=$1 name=$2
    if alive "$pidfile"; then
        local pid; pid=$(cat "$pidfile")
        say "stopping $name (pid $pid)"
        kill "$pid"
        for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.1; done
        kill -KILL "$pid" 2>/dev/null || true
    fi
}

stop() {
    stop_pidfile "$STATE/slurmd.pid" slurmd
    stop_pidfile "$STATE/slurmctld.pid" slurmctld
    if [ "${1:-}" = all ] && [ -f "$STATE/munged-started-here" ]; then
        stop_pidfile /run/munge/munged.pid munged
        rm -f "$STATE/munged-started-here"
    fi
}

case "${1:-}" in
    start) start ;;
    stop) stop all ;;
    status) node_state ;;
    *) echo "usage: $0 start|stop|status" >&2; exit 2 ;;
esac
