#!/usr/bin/env bash
# A real two-node Slurm cluster on this machine, for the tests and by hand (docs/multi-node.md).
#
#   scripts/slurm-cluster.sh up DIR     start it; DIR/env has what a client needs (SLURM_CONF)
#   scripts/slurm-cluster.sh down DIR   stop every daemon and remove the namespaces
#   scripts/slurm-cluster.sh exec DIR CMD...  run CMD on the login node (sbatch, squeue, python)
#   scripts/slurm-cluster.sh node DIR n2       start node n2's slurmd again (after a lost node)
#   scripts/slurm-cluster.sh check      say why this machine cannot run it (exit 1), or nothing
#
# Debian's own Slurm (slurmctld, slurmd, sbatch: bookworm has 22.05) and MUNGE, run as root.
# Three network namespaces the script makes: the controller (which is also the login node:
# sbatch, squeue and scancel run there: `slurm-cluster.sh exec DIR ...`) and two compute nodes,
# joined by a bridge inside the controller's namespace, addresses only inside them
# (10.77.K.0/24, K from DIR). Every process shares this machine's filesystem, as a cluster
# shares its storage, but sees DIR/hosts as /etc/hosts (a private mount namespace), so ctl,
# n1 and n2 resolve as on a cluster. Not `ip netns exec`: it mounts a new /sys, which hides
# the cgroup mounts slurmd needs. Nothing is left behind by `down`: daemons (by their pid
# files, then whatever still runs in the namespaces), namespaces.
set -euo pipefail

SLURM_PKGS="slurmctld slurmd slurm-client munge"

check() {
  [ "$(id -u)" = 0 ] || { echo "needs root (daemons, network namespaces)"; return 1; }
  for cmd in ip nsenter unshare slurmctld slurmd sbatch munged; do
    command -v "$cmd" >/dev/null || {
      echo "no $cmd: apt-get install -y $SLURM_PKGS iproute2"; return 1; }
  done
  local probe="wbprobe$$"
  ip netns add "$probe" 2>/dev/null || { echo "cannot make network namespaces (ip netns add)"; return 1; }
  ip netns del "$probe"
}

in_ns() {  # in_ns NAME DIR CMD...: CMD on host NAME (ctl, n1, n2): its network namespace,
  # its own host name (a UTS namespace) and DIR/hosts as /etc/hosts (a mount namespace)
  local name=$1 dir=$2; shift 2
  nsenter --net="/run/netns/wb$(tag_of "$dir")$name" unshare -m -u --propagation private \
    sh -c 'mount --bind "$0" /etc/hosts && hostname "$1" && shift && exec "$@"' \
    "$dir/hosts" "$name" "$@"
}

tag_of() {  # a short tag from DIR: namespace names and the subnet of this cluster
  local sum; sum=$(printf '%s' "$(realpath -m "$1")" | cksum | cut -d' ' -f1)
  echo "$((sum % 200 + 20))"
}

up() {
  local dir; dir=$(realpath -m "$1"); mkdir -p "$dir"
  check >&2 || exit 1
  local k; k=$(tag_of "$dir")
  local ctl="wb${k}ctl"
  mkdir -p "$dir"/{state,spool,log,munge}
  chmod 700 "$dir/munge"

  # MUNGE: its own key and socket, so nothing of the machine's own is used or changed
  head -c 1024 /dev/urandom > "$dir/munge/munge.key"; chmod 400 "$dir/munge/munge.key"
  munged --force --socket="$dir/munge/sock" --key-file="$dir/munge/munge.key" \
    --pid-file="$dir/munge/munged.pid" --log-file="$dir/log/munged.log" \
    --seed-file="$dir/munge/seed"

  # the network: a bridge in the controller's namespace, one veth to each node
  ip netns add "$ctl"
  ip -n "$ctl" link set lo up
  ip -n "$ctl" link add br0 type bridge
  ip -n "$ctl" addr add "10.77.$k.1/24" dev br0
  ip -n "$ctl" link set br0 up
  printf '127.0.0.1 localhost\n10.77.%s.1 ctl\n10.77.%s.11 n1\n10.77.%s.12 n2\n' \
    "$k" "$k" "$k" > "$dir/hosts"
  for i in 1 2; do
    local ns="wb${k}n$i"
    ip netns add "$ns"
    ip -n "$ns" link set lo up
    ip -n "$ctl" link add "vn$i" type veth peer name eth0 netns "$ns"
    ip -n "$ctl" link set "vn$i" master br0 up
    ip -n "$ns" addr add "10.77.$k.1$i/24" dev eth0
    ip -n "$ns" link set eth0 up
  done

  local cpus mem
  cpus=$(nproc); mem=$(( $(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 / 4 ))
  cat > "$dir/slurm.conf" <<EOF
ClusterName=wb$k
SlurmctldHost=ctl(10.77.$k.1)
SlurmctldPort=$((6900 + k))
SlurmdPort=$((6900 + k + 1))
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
# cred_expire also delays a requeued job's restart (default 120 s)
AuthInfo=socket=$dir/munge/sock,cred_expire=10
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool/%n
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd-%n.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd-%n.log
# processes are tracked without cgroups (a container may not delegate them)
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
ReturnToService=2
# a node whose slurmd stops answering is DOWN after this long (the fault tests wait on it)
SlurmdTimeout=10
MessageTimeout=5
KillWait=5
InactiveLimit=0
MinJobAge=300
SchedulerParameters=batch_sched_delay=0
NodeName=n1 NodeAddr=10.77.$k.11 CPUs=$cpus RealMemory=$mem State=UNKNOWN
NodeName=n2 NodeAddr=10.77.$k.12 CPUs=$cpus RealMemory=$mem State=UNKNOWN
PartitionName=debug Nodes=n1,n2 Default=YES MaxTime=INFINITE State=UP
EOF
  cat > "$dir/env" <<EOF
SLURM_CONF=$dir/slurm.conf
WB_SLURM_LOGIN=$ctl
WB_SLURM_NODES=wb${k}n1 wb${k}n2
EOF
  in_ns ctl "$dir" slurmctld -f "$dir/slurm.conf" -i
  for i in 1 2; do
    mkdir -p "$dir/spool/n$i"
    in_ns "n$i" "$dir" slurmd -f "$dir/slurm.conf"
  done
  # up when both nodes are idle (or the wait runs out, with the logs' last lines)
  local i
  for i in $(seq 1 150); do
    if SLURM_CONF="$dir/slurm.conf" in_ns ctl "$dir" sinfo -h -N -o '%N %t' 2>/dev/null \
        | awk '$2 == "idle"' | wc -l | grep -qx 2; then
      return 0
    fi
    sleep 0.2
  done
  echo "the cluster did not come up; its logs:" >&2
  for log in "$dir"/log/*.log; do echo "== $log" >&2; tail -n 5 "$log" >&2; done
  down "$dir"
  exit 1
}

down() {
  local dir; dir=$(realpath -m "$1")
  local k; k=$(tag_of "$dir")
  for pidfile in "$dir"/slurmd-*.pid "$dir/slurmctld.pid" "$dir/munge/munged.pid"; do
    [ -f "$pidfile" ] || continue
    local pid; pid=$(cat "$pidfile")
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
    rm -f "$pidfile"
  done
  # anything a job left running inside the nodes' namespaces (slurmstepd, its tasks)
  for ns in "wb${k}n1" "wb${k}n2" "wb${k}ctl"; do
    if ip netns list | grep -qw "$ns"; then
      local pids; pids=$(ip netns pids "$ns" 2>/dev/null || true)
      [ -z "$pids" ] || kill -9 $pids 2>/dev/null || true
      ip netns del "$ns" 2>/dev/null || true
    fi
  done
}

case "${1:-}" in
  up) up "${2:?usage: $0 up DIR}" ;;
  down) down "${2:?usage: $0 down DIR}" ;;
  exec)
    dir=$(realpath -m "${2:?usage: $0 exec DIR CMD...}"); shift 2
    SLURM_CONF="$dir/slurm.conf" in_ns ctl "$dir" "$@" ;;
  node)
    dir=$(realpath -m "${2:?usage: $0 node DIR n1|n2}")
    in_ns "${3:?usage: $0 node DIR n1|n2}" "$dir" slurmd -f "$dir/slurm.conf" ;;
  check) check ;;
  *) echo "usage: $0 up DIR | down DIR | exec DIR CMD... | node DIR NAME | check" >&2; exit 2 ;;
esac
