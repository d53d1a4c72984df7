#!/usr/bin/env bash
# A real two-node Slurm cluster on this machine, for the tests and by hand (docs/multi-node.md).
#
#   scripts/slurm-cluster.sh up DIR     start it; DIR/env has what a client needs (SLURM_CONF)
#   scripts/slurm-cluster.sh down DIR   stop every daemon and remove the namespaces
#   scripts/slurm-cluster.sh exec DIR CMD...  run CMD on the login node (sbatch, squeue, python)
#   scripts/slurm-cluster.sh node DIR n2       start node n2's slurmd again (after a lost node)
#   scripts/slurm-cluster.sh on DIR n1 CMD...  run CMD on node n1, as if logged in there
#   scripts/slurm-cluster.sh check-ssh  say why the nodes cannot run sshd (exit 1), or nothing
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
#
# Where Debian's openssh-server and pdsh are installed, each node also runs an sshd on its own
# address, so DeepSpeed's multi-node launcher (pdsh over ssh) reaches n1 and n2 as on a
# cluster. The keys are made here, in DIR/ssh: root's key, one host key per node, and an ssh
# client configuration every process of the cluster sees as /etc/ssh/ssh_config (the same
# private mount): nothing of the machine's own ssh setup (/root/.ssh, /etc/ssh) is read or changed.
set -euo pipefail

SLURM_PKGS="slurmctld slurmd slurm-client munge"
SSH_PKGS="openssh-server openssh-client pdsh"

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

check_ssh() {
  for cmd in /usr/sbin/sshd ssh ssh-keygen pdsh; do
    command -v "$cmd" >/dev/null || { echo "no $cmd: apt-get install -y $SSH_PKGS"; return 1; }
  done
  [ -f /etc/ssh/ssh_config ] || { echo "no /etc/ssh/ssh_config: apt-get install -y openssh-client"; return 1; }
}

in_ns() {  # in_ns NAME DIR CMD...: CMD on host NAME (ctl, n1, n2): its network namespace,
  # its own host name (a UTS namespace) and DIR/hosts as /etc/hosts (a mount namespace)
  local name=$1 dir=$2; shift 2
  # (and DIR/ssh/ssh_config as /etc/ssh/ssh_config, where the cluster has ssh)
  nsenter --net="/run/netns/wb$(tag_of "$dir")$name" unshare -m -u --propagation private \
    sh -c 'mount --bind "$0/hosts" /etc/hosts && hostname "$1" && shift &&
      if [ -f "$0/ssh/ssh_config" ]; then mount --bind "$0/ssh/ssh_config" /etc/ssh/ssh_config; fi &&
      exec "$@"' \
    "$dir" "$name" "$@"
}

tag_of() {  # the cluster's short tag (namespace names, its subnet), kept in DIR/tag by `up`
  cat "$1/tag" 2>/dev/null || echo none
}

up() {
  local dir; dir=$(realpath -m "$1"); mkdir -p "$dir"
  check >&2 || exit 1
  # a tag from DIR, or the next free one: `ip netns add` of the controller's namespace fails
  # where another cluster (a test running beside this one) holds it
  local sum k ctl tries
  sum=$(printf '%s' "$dir" | cksum | cut -d' ' -f1)
  for tries in $(seq 0 199); do
    k=$(( (sum + tries) % 200 + 20 )); ctl="wb${k}ctl"
    if ip netns add "$ctl" 2>/dev/null; then break; fi
    [ "$tries" -lt 199 ] || { echo "no free cluster tag (200 clusters up?)" >&2; exit 1; }
  done
  echo "$k" > "$dir/tag"
  mkdir -p "$dir"/{state,spool,log,munge}
  chmod 700 "$dir/munge"

  # MUNGE: its own key and socket, so nothing of the machine's own is used or changed
  head -c 1024 /dev/urandom > "$dir/munge/munge.key"; chmod 400 "$dir/munge/munge.key"
  munged --force --socket="$dir/munge/sock" --key-file="$dir/munge/munge.key" \
    --pid-file="$dir/munge/munged.pid" --log-file="$dir/log/munged.log" \
    --seed-file="$dir/munge/seed"

  # the network: a bridge in the controller's namespace, one veth to each node
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
# cred_expire also delays a requeued job's restart (slurmctld/job_mgr.c: begin = now +
# cred_expire + 1), so that the controller's kill of the job's previous run reaches a node
# before the next run starts there; a kill to a node that was down is retried after 60 s
# (RPC_RETRY_INTERVAL, slurmctld/agent.c), so less than that lets a node back within a
# minute kill the requeued run (seen: 10 s, under load). Default 120 s.
AuthInfo=socket=$dir/munge/sock,cred_expire=70
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
  if check_ssh >/dev/null; then ssh_up "$dir" "$k"; else
    echo "the nodes run no sshd: $(check_ssh || true)" >&2; fi
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

ssh_up() {  # ssh_up DIR K: root's key, a host key and an sshd on each node's own address
  local dir=$1 k=$2 ssh="$1/ssh"
  mkdir -p "$ssh" /run/sshd; chmod 700 "$ssh"
  ssh-keygen -q -t ed25519 -N '' -C "root@wb$k" -f "$ssh/id_ed25519"
  cp "$ssh/id_ed25519.pub" "$ssh/authorized_keys"
  : > "$ssh/known_hosts"
  cat > "$ssh/ssh_config" <<EOF
Host *
  IdentityFile $ssh/id_ed25519
  IdentitiesOnly yes
  UserKnownHostsFile $ssh/known_hosts
  GlobalKnownHostsFile /dev/null
  StrictHostKeyChecking yes
  BatchMode yes
  ConnectTimeout 5
EOF
  local i
  for i in 1 2; do
    ssh-keygen -q -t ed25519 -N '' -C "n$i" -f "$ssh/host-n$i"
    echo "n$i,10.77.$k.1$i $(cut -d' ' -f1,2 "$ssh/host-n$i.pub")" >> "$ssh/known_hosts"
    cat > "$ssh/sshd-n$i.conf" <<EOF
ListenAddress 10.77.$k.1$i
HostKey $ssh/host-n$i
PidFile $dir/sshd-n$i.pid
AuthorizedKeysFile $ssh/authorized_keys
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
EOF
    in_ns "n$i" "$dir" /usr/sbin/sshd -f "$ssh/sshd-n$i.conf" -E "$dir/log/sshd-n$i.log"
  done
  echo "WB_SLURM_SSH=n1 n2" >> "$dir/env"
}

down() {
  local dir; dir=$(realpath -m "$1")
  local k; k=$(tag_of "$dir")
  [ "$k" != none ] || return 0  # never up (or its directory is gone)
  # every daemon asked to stop at once, then waited for (5 s at most, then killed)
  local pids=() pidfile pid
  for pidfile in "$dir"/sshd-*.pid "$dir"/slurmd-*.pid "$dir/slurmctld.pid" "$dir/munge/munged.pid"; do
    [ -f "$pidfile" ] || continue
    pid=$(cat "$pidfile"); pids+=("$pid"); rm -f "$pidfile"
    kill "$pid" 2>/dev/null || true
  done
  for _ in $(seq 1 50); do
    local alive=0
    for pid in "${pids[@]}"; do kill -0 "$pid" 2>/dev/null && alive=1; done
    [ "$alive" = 1 ] || break
    sleep 0.1
  done
  for pid in "${pids[@]}"; do kill -9 "$pid" 2>/dev/null || true; done
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
  on)
    dir=$(realpath -m "${2:?usage: $0 on DIR n1|n2 CMD...}"); name=${3:?usage: $0 on DIR n1|n2 CMD...}
    shift 3
    in_ns "$name" "$dir" "$@" ;;
  check) check ;;
  check-ssh) check_ssh ;;
  *) echo "usage: $0 up DIR | down DIR | exec DIR CMD... | node DIR NAME | on DIR NAME CMD..." \
       "| check | check-ssh" >&2
     exit 2 ;;
esac
