# A cluster of hosts on one machine (issue 35), sourced by the multi-host tests. Each host is a set
# of namespaces of its own: network (one veth to a bridge that lives in a namespace of its own),
# UTS (its host name), mount (its own root: an overlay of this machine's / under the installed
# packages, so nothing is installed on this machine) and IPC; the only extra mount shared by the
# hosts is /shared (home directories and checkpoints, as NFS would be). Addresses are 10.213.0.0/24,
# assigned only inside these namespaces; no host has a default route, nothing is NATed, so no
# traffic can leave them.
#
# The packages are installed once into a base layer with `dpkg -i` (their maintainer scripts run:
# the mlsched user, /var/lib/mlsched), each host's root stacks its own upper layer on it, and the
# daemons are started from the installed systemd units (ExecStart, User, EnvironmentFile,
# RuntimeDirectory) with the configuration docs/operations.md describes.
#
# Needs root, util-linux (unshare, nsenter, setpriv), iproute2, overlayfs. Uses HOSTS_STATE (a
# directory; created) and sets nothing else global besides the functions below.
#   hosts_base DEB...            the base layer: dpkg -i of DEB..., a fresh MUNGE key, user alice
#   hosts_up HOST...             starts the hosts and the bridge (HOST_IP names their addresses)
#   on HOST CMD...               runs CMD inside HOST (its root, network, host name)
#   agent_configure NODE ARGS, client_configure HOST, munge_up HOST..., up_nodes: see below
#   unit_start HOST UNIT         starts UNIT's ExecStart as the unit file in HOST says; logs in
#                                $HOSTS_STATE/logs/HOST-UNIT.log; pid in $HOSTS_STATE/pids/HOST-UNIT
#                                (Restart=always|on-failure: run again after RestartSec, as systemd)
#   unit_stop HOST UNIT [SIG]    stops it (default SIGTERM; waits up to 10 s, then SIGKILL)
#   unit_reload HOST UNIT        runs its ExecReload with $MAINPID (systemctl reload)
#   unit_mainpid HOST UNIT       the daemon's pid
#   link_cut HOST [in|out|both]  drops HOST's packets from the bridge (in), to it (out) or both
#                                (iptables on the bridge's port of HOST); link_heal HOST undoes it
#   link_loss PERCENT            drops PERCENT % of packets on every port of the bridge
#   hosts_down                   stops every process of the hosts and removes the namespaces
# The HA test's nodes are named apart from the five-hosts test's: the two clusters may run at once
# on one kernel, where an agent's task cgroups are named by its node and work directory.
declare -A HOST_IP=([ctl]=10.213.0.10 [ctl1]=10.213.0.11 [ctl2]=10.213.0.12 [ctl3]=10.213.0.13
                    [gpu-a]=10.213.0.21 [gpu-b]=10.213.0.22 [cpu-a]=10.213.0.23
                    [gpu-c]=10.213.0.24 [gpu-d]=10.213.0.25 [cpu-b]=10.213.0.26 [login]=10.213.0.30)
HOSTS_STATE=${HOSTS_STATE:?set HOSTS_STATE}

hosts_base() {
  local S=$HOSTS_STATE
  mkdir -p "$S/base/upper" "$S/base/work" "$S/base/root" "$S/debs" "$S/logs" "$S/pids" "$S/shared" "$S/xfer"
  cp "$@" "$S/debs/"
  unshare --mount --fork bash -euc '
    S=$1
    mount -t overlay overlay -o "lowerdir=/,upperdir=$S/base/upper,workdir=$S/base/work" "$S/base/root"
    R=$S/base/root
    mount --rbind /dev "$R/dev"; mount --rbind /proc "$R/proc"; mount --rbind /sys "$R/sys"
    mount -t tmpfs -o mode=0755 tmpfs "$R/run"; mount -t tmpfs -o mode=1777 tmpfs "$R/tmp"
    mkdir -p "$R/tmp/debs"; mount --bind "$S/debs" "$R/tmp/debs"
    chroot "$R" sh -ec "
      dpkg -i /tmp/debs/*.deb
      mungekey --create --force --keyfile /etc/munge/munge.key
      chown munge:munge /etc/munge/munge.key; chmod 0400 /etc/munge/munge.key
      getent passwd alice >/dev/null || useradd --home-dir /shared/alice --no-create-home --shell /bin/sh alice
    "
  ' _ "$S" > "$S/logs/base.log" 2>&1 || { tail -30 "$S/logs/base.log" >&2; return 1; }
  # whatever dpkg left in the base's /run and /tmp is gone with their tmpfs; the layer stays
  mkdir -p "$S/shared/alice"
  chown "$(awk -F: '$1 == "alice" {print $3":"$4}' "$S/base/upper/etc/passwd")" "$S/shared/alice"
}

# hosts_up HOST...: the bridge's namespace (sw) and each HOST (see the header).
hosts_up() {
  local S=$HOSTS_STATE h pid i=0
  : > "$S/hosts"
  printf '127.0.0.1 localhost\n' >> "$S/hosts"
  for h in "${!HOST_IP[@]}"; do printf '%s %s\n' "${HOST_IP[$h]}" "$h" >> "$S/hosts"; done
  setsid unshare --net --fork sleep infinity > /dev/null 2>&1 < /dev/null &
  disown; echo $! > "$S/pids/sw"
  sleep 0.2
  pid=$(pgrep -P "$(cat "$S/pids/sw")" sleep)
  echo "$pid" > "$S/pids/sw"
  # bridged frames pass through iptables here (br_netfilter), where link_cut and link_loss act
  nsenter -t "$pid" -n sh -ec 'ip link set lo up; ip link add br0 type bridge; ip link set br0 up
    sysctl -qw net.bridge.bridge-nf-call-iptables=1'
  for h in "$@"; do
    # overlayfs takes no layer below / as a lower layer, so each host's upper starts as a copy of
    # the base layer (whiteouts and xattrs kept)
    mkdir -p "$S/hosts.d/$h/work" "$S/hosts.d/$h/root"
    cp -a "$S/base/upper" "$S/hosts.d/$h/upper"
    setsid unshare --mount --uts --net --ipc --fork bash -euc '
      S=$1 h=$2 R=$S/hosts.d/$2/root
      hostname "$h"
      mount -t overlay overlay -o "lowerdir=/,upperdir=$S/hosts.d/$h/upper,workdir=$S/hosts.d/$h/work" "$R"
      mount --rbind /dev "$R/dev"; mount --rbind /proc "$R/proc"; mount --rbind /sys "$R/sys"
      mount -t tmpfs -o mode=1777 tmpfs "$R/dev/shm"
      mount -t tmpfs -o mode=0755 tmpfs "$R/run"; mount -t tmpfs -o mode=1777 tmpfs "$R/tmp"
      mkdir -p "$R/shared" "$R/mnt/xfer"
      mount --bind "$S/shared" "$R/shared"; mount --bind -o ro "$S/xfer" "$R/mnt/xfer"
      mount --bind "$S/hosts" "$R/etc/hosts"
      ip link set lo up
      exec chroot "$R" sleep infinity
    ' _ "$S" "$h" > "$S/logs/$h-anchor.log" 2>&1 < /dev/null &
    disown; echo $! > "$S/pids/$h.unshare"
  done
  for h in "$@"; do
    for _ in $(seq 1 50); do
      pid=$(pgrep -P "$(cat "$S/pids/$h.unshare")" sleep || true)
      [ -n "$pid" ] && break
      sleep 0.1
    done
    [ -n "$pid" ] || { cat "$S/logs/$h-anchor.log" >&2; return 1; }
    echo "$pid" > "$S/pids/$h"
    i=$((i + 1))
    # The pair is made in the root namespace, where another cluster's hosts_up may be making its
    # own: names of this shell's pid until each end is in its namespace and renamed there.
    ip link add "v$$h$i" type veth peer name "v$$p$i"
    ip link set "v$$h$i" netns "$pid"
    ip link set "v$$p$i" netns "$(cat "$S/pids/sw")"
    nsenter -t "$pid" -n sh -ec "ip link set v$$h$i name eth0; ip addr add ${HOST_IP[$h]}/24 dev eth0; ip link set eth0 up"
    nsenter -t "$(cat "$S/pids/sw")" -n sh -ec "ip link set v$$p$i name p-$h; ip link set p-$h master br0; ip link set p-$h up"
  done
}

# agent_configure NODE ARGS: what the admin copies to a compute node (docs/operations.md, steps 3
# and 5): the cluster CA, the node's certificate and key from the CA host (/mnt/xfer), and ARGS as
# AGENTD_ARGS in its agentd.env. client_configure HOST: the CA, where users run the tools.
agent_configure() {
  on "$1" sh -ec "
    install -d -m 0755 /etc/mlsched/tls
    install -m 0644 /mnt/xfer/ca.pem /etc/mlsched/tls/ca.pem
    install -m 0644 /mnt/xfer/nodes/$1.pem /etc/mlsched/tls/node.pem
    install -m 0600 /mnt/xfer/nodes/$1.key /etc/mlsched/tls/node.key
    sed -i 's|^AGENTD_ARGS=.*|AGENTD_ARGS=\"$2\"|' /etc/mlsched/agentd.env"
}
client_configure() {
  on "$1" sh -ec 'install -d -m 0755 /etc/mlsched/tls; install -m 0644 /mnt/xfer/ca.pem /etc/mlsched/tls/ca.pem'
}

# munge_up HOST...: munged on each HOST from Debian's unit; returns 1 (saying which) when one has no
# socket within 5 s.
munge_up() {
  local h
  for h; do unit_start "$h" munge; done
  for h; do
    for _ in $(seq 1 50); do on "$h" test -S /run/munge/munge.socket.2 && break; sleep 0.1; done
    on "$h" test -S /run/munge/munge.socket.2 || { echo "munged did not start on $h" >&2; return 1; }
  done
}

# up_nodes: how many nodes serve (IDLE, MIXED or ALLOCATED) as `mladmin nodes` on login says; needs
# the caller's as_admin (the tool on login with the caller's MLSCHED_SERVER).
up_nodes() {
  as_admin mladmin nodes --json 2>/dev/null |
    python3 -c 'import json,sys; print(sum(1 for n in json.load(sys.stdin) if n.get("state") in ("IDLE", "MIXED", "ALLOCATED")))' 2>/dev/null ||
    echo 0
}

on() {
  local h=$1; shift
  nsenter -t "$(cat "$HOSTS_STATE/pids/$h")" -m -u -n -i -r -w "$@"
}

# unit_start HOST UNIT: what systemd would run for UNIT (see the header). $VAR in ExecStart is
# word-split as systemd does; the environment file is read as a shell would (KEY="value" lines).
unit_start() {
  local h=$1 unit=$2
  setsid nsenter -t "$(cat "$HOSTS_STATE/pids/$h")" -m -u -n -i -r -w bash -ec '
    u=/lib/systemd/system/$1.service
    [ -f "$u" ] || { echo "no unit $u" >&2; exit 1; }
    key() { sed -n "s/^$1=//p" "$u" | tail -1; }
    envf=$(key EnvironmentFile); envf=${envf#-}
    set -a; [ -z "$envf" ] || [ ! -f "$envf" ] || . "$envf"; set +a
    user=$(key User); group=$(key Group)
    rt=$(key RuntimeDirectory); st=$(key StateDirectory)
    rtm=$(key RuntimeDirectoryMode); stm=$(key StateDirectoryMode)
    [ -z "$rt" ] || install -d -m "${rtm:-0755}" -o "${user:-root}" -g "${group:-root}" "/run/$rt"
    [ -z "$st" ] || { mkdir -p "/var/lib/$st"; chown "${user:-root}:${group:-root}" "/var/lib/$st"; chmod "${stm:-0755}" "/var/lib/$st"; }
    cmd=$(awk "/^ExecStart=/ {on = 1; sub(/^ExecStart=/, \"\")} on {c = sub(/\\\\\$/, \"\"); printf \"%s \", \$0; if (!c) exit}" "$u")
    eval "set -- $cmd"
    [ -z "$user" ] || set -- setpriv --reuid="$user" --regid="${group:-$user}" --init-groups -- "$@"
    restart=$(key Restart); sec=$(key RestartSec)
    case "$restart" in
      always|on-failure)  # as systemd: run again after RestartSec (on-failure: a non-zero exit)
        while :; do
          rc=0; "$@" || rc=$?
          [ "$restart" = always ] || [ "$rc" != 0 ] || exit 0
          echo "[hosts_lib] $1 exited with status $rc; restarting in ${sec:-1} s (Restart=$restart)"
          sleep "${sec:-1}"
        done ;;
      *) exec "$@" ;;
    esac
  ' _ "$unit" >> "$HOSTS_STATE/logs/$h-$unit.log" 2>&1 < /dev/null &
  disown; echo $! > "$HOSTS_STATE/pids/$h-$unit"
}

# unit_mainpid HOST UNIT: the daemon's pid (systemd's $MAINPID): the child of unit_start's shell.
unit_mainpid() {
  pgrep -P "$(cat "$HOSTS_STATE/pids/$1-$2")" | head -1
}

# unit_reload HOST UNIT: the unit's ExecReload, as systemd runs it (`systemctl reload`), with
# $MAINPID set.
unit_reload() {
  local h=$1 unit=$2 cmd
  cmd=$(on "$h" sed -n 's/^ExecReload=//p' "/lib/systemd/system/$unit.service" | tail -1)
  [ -n "$cmd" ] || { echo "$unit has no ExecReload" >&2; return 1; }
  on "$h" bash -c "MAINPID=$(unit_mainpid "$h" "$unit"); $cmd"
}

unit_stop() {
  local f=$HOSTS_STATE/pids/$1-$2 pid
  [ -f "$f" ] || return 0
  pid=$(cat "$f")
  # the unit's processes: nsenter, the restart loop and the daemon (their process group)
  kill -"${3:-TERM}" -- "-$pid" 2>/dev/null || kill -"${3:-TERM}" "$pid" 2>/dev/null || true
  for _ in $(seq 1 100); do kill -0 -- "-$pid" 2>/dev/null || break; sleep 0.1; done
  kill -9 -- "-$pid" 2>/dev/null || true
  rm -f "$f"
}

# The bridge port p-HOST: "in" = what HOST sends, "out" = what HOST receives (both: a cut link).
link_cut() {
  local h=$1 dir=${2:-both}
  if [ "$dir" = in ] || [ "$dir" = both ]; then
    on_sw iptables -I FORWARD -m physdev --physdev-in "p-$h" -j DROP
  fi
  if [ "$dir" = out ] || [ "$dir" = both ]; then
    on_sw iptables -I FORWARD -m physdev --physdev-out "p-$h" -j DROP
  fi
}
link_heal() {
  local h=$1
  while on_sw iptables -D FORWARD -m physdev --physdev-in "p-$h" -j DROP 2>/dev/null; do :; done
  while on_sw iptables -D FORWARD -m physdev --physdev-out "p-$h" -j DROP 2>/dev/null; do :; done
}
# link_loss PERCENT [DELAY_MS]: every bridged packet is dropped with probability PERCENT %, and
# every other one held DELAY_MS ms (as sch_netem's delay would, which some kernels lack) by the
# test tool nfq_delay ($NFQ_DELAY) on NFQUEUE 0 in the bridge's namespace; link_loss 0 undoes both.
link_loss() {
  local pct=$1 delay=${2:-0} f="$HOSTS_STATE/pids/nfq-delay" pid
  on_sw iptables -F FORWARD
  if [ -f "$f" ]; then  # after the flush: it lets what it holds go, then exits
    pid=$(cat "$f"); kill "$pid" 2>/dev/null || true
    for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    rm -f "$f"
  fi
  [ "$pct" = 0 ] || on_sw iptables -A FORWARD -m statistic --mode random --probability "$(awk -v p="$pct" 'BEGIN{print p/100}')" -j DROP
  if [ "$delay" != 0 ]; then
    [ -x "${NFQ_DELAY:-}" ] || { echo "link_loss: NFQ_DELAY ('${NFQ_DELAY:-}') is not a program" >&2; return 1; }
    nsenter -t "$(cat "$HOSTS_STATE/pids/sw")" -n "$NFQ_DELAY" 0 "$delay" >> "$HOSTS_STATE/logs/nfq-delay.log" 2>&1 &
    echo $! > "$f"
    for _ in $(seq 1 50); do grep -q 'holding each packet' "$HOSTS_STATE/logs/nfq-delay.log" && break; sleep 0.1; done
    kill -0 "$(cat "$f")" 2>/dev/null || { echo "link_loss: nfq_delay did not start: $(tail -2 "$HOSTS_STATE/logs/nfq-delay.log")" >&2; return 1; }
    on_sw iptables -A FORWARD -j NFQUEUE --queue-num 0 --queue-bypass
  fi
}
on_sw() { nsenter -t "$(cat "$HOSTS_STATE/pids/sw")" -n "$@"; }

hosts_down() {
  local S=$HOSTS_STATE f
  for f in "$S"/pids/*-*; do
    [ -f "$f" ] || continue
    case "$f" in *.unshare) continue ;; esac
    # a host's own holder (gpu-a, cpu-a: names with '-' too) is needed below to find its namespace;
    # killing it here left every daemon of those hosts running after the test
    [ -n "${HOST_IP[$(basename "$f")]:-}" ] && continue
    kill -9 "$(cat "$f")" 2>/dev/null || true
  done
  for f in "$S"/pids/*; do
    [ -f "$f" ] || continue
    # every process inside a host's namespaces (daemons, tasks, munged) dies with it
    local ns
    ns=$(readlink "/proc/$(cat "$f")/ns/net" 2>/dev/null) || continue
    for p in /proc/[0-9]*; do
      [ "$(readlink "$p/ns/net" 2>/dev/null)" = "$ns" ] && kill -9 "${p#/proc/}" 2>/dev/null
    done
  done
  rm -f "$S"/pids/*
}
