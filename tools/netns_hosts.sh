#!/bin/sh
# Two hosts on one machine, for MPI runs across hosts without a cluster:
# each host is a Linux network namespace with a host name of its own (a UTS
# namespace per process tree), and the two are joined by a veth link, so
# Open MPI starts a daemon on each through its rsh launcher (this script is
# the agent, in place of ssh), ranks on different hosts talk TCP over the
# link, and flowgraph sees two host names. Files, /dev/shm and process ids
# stay shared, as on a cluster with a shared file system. Needs root (or
# CAP_SYS_ADMIN and CAP_NET_ADMIN), iproute2 and util-linux's unshare.
#
#   netns_hosts.sh up P            make hosts Ph0 (10.77.0.1) and Ph1 (10.77.0.2)
#   netns_hosts.sh down P          kill what runs in them and remove them
#                                  (the names go in the background)
#   netns_hosts.sh sweep S         take down the hosts of runs that are gone:
#                                  S<pid>h0/h1 whose pid no longer exists
#   netns_hosts.sh link P up|down  bring the link between them up or down
#   netns_hosts.sh mpirun P N ARGS...
#                                  mpirun ARGS on Ph0 with N slots on each host
#                                  (or N0,N1: N0 on Ph0, N1 on Ph1)
#   netns_hosts.sh rsh HOST CMD    Open MPI's agent: CMD on HOST (Ph0 or Ph1)
#
# P: at most 11 characters (interface names have 15); tests use their pid.
set -eu
self=$(readlink -f "$0")
cmd=${1:-}
[ $# -ge 2 ] && [ -n "$2" ] || { echo "usage: $0 up|down|sweep|link|mpirun|rsh P ..." >&2; exit 2; }
p=$2
# `up` exits 77 where this machine cannot make such hosts (no iproute2 or
# unshare, no permission for namespaces, no veth), so tests can skip; any
# other failure exits 1, and a failed `up` leaves nothing behind.
cannot() {
  echo "netns_hosts: $*" >&2
  exit 77
}
# A command in host i's network. nsenter joins the network namespace
# alone: `ip -n` and `ip netns exec` also make a mount namespace and unmount
# /sys in it, which waits for an expedited RCU grace period; that was seen
# to take 60 s while ranks spun on both cores.
in_host() {
  h=$1
  shift
  nsenter --net="/run/netns/${p}h$h" "$@"
}
case $cmd in
  up)
    [ ${#p} -le 11 ] || { echo "netns_hosts: prefix '$p' is longer than 11 characters" >&2; exit 2; }
    command -v ip >/dev/null || cannot "ip (iproute2) not found"
    command -v unshare >/dev/null || cannot "unshare (util-linux) not found"
    command -v nsenter >/dev/null || cannot "nsenter (util-linux) not found"
    command -v flock >/dev/null || cannot "flock (util-linux) not found"
    "$self" down "$p" 2>/dev/null || true
    trap '"$self" down "$p" 2>/dev/null || true' EXIT
    ip netns add "${p}h0" || cannot "ip netns add failed (needs CAP_SYS_ADMIN)"
    ip netns add "${p}h1" || cannot "ip netns add failed (needs CAP_SYS_ADMIN)"
    ip link add "${p}e0" netns "${p}h0" type veth peer name "${p}e1" netns "${p}h1" ||
      cannot "no veth link between network namespaces"
    in_host 0 unshare --uts true || cannot "unshare --uts failed in a namespace"
    for i in 0 1; do
      in_host "$i" ip addr add "10.77.0.$((i + 1))/24" dev "${p}e$i"
      in_host "$i" ip link set lo up
      in_host "$i" ip link set "${p}e$i" up
    done
    # Whether one host can reach the other: a TCP connection would need a
    # listener, so ask the kernel for the route through the link.
    in_host 0 ip route get 10.77.0.2 | grep -q "dev ${p}e0" ||
      { echo "netns_hosts: no route between the hosts" >&2; exit 1; }
    trap - EXIT
    ;;
  down)
    for i in 0 1; do
      if ip netns list | grep -q "^${p}h$i\b"; then
        # Until none is left: a process may fork between the listing and
        # the kill.
        for _ in 1 2 3 4 5; do
          pids=$(ip netns pids "${p}h$i" || true)
          [ -n "$pids" ] || break
          kill -9 $pids 2>/dev/null || true
          sleep 0.1
        done
      fi
    done
    # The names go in the background, in a session of its own: `ip netns
    # del` unmounts, and that waits for an expedited RCU grace period, seen
    # to take over 100 s while another test's ranks spun. Nothing runs in
    # the namespaces any more. The job is in its own session before this
    # returns (setsid runs in the foreground and only starts it): callers
    # kill their child's process group once it exits (tests/dist/mpi/mpi_run.h
    # run_limited), and a job started with `setsid ... &` dies when that
    # kill comes before its setsid (40 of 40 times with the kill at once;
    # under a full suite's load, now and then: both names stayed).
    if ip netns list | grep -q "^${p}h[01]\b"; then
      setsid -w sh -c '"$0" delete "$1" </dev/null >/dev/null 2>&1 &' "$self" "$p"
    fi
    ;;
  delete)
    # down's background job. One lock for all deletes, so a second `down`
    # (a test's fault thread, then the test) never deletes beside the first.
    exec 9>"${TMPDIR:-/tmp}/flowgraph-netns_hosts.lock"
    flock 9
    for n in "${p}h0" "${p}h1"; do
      ! ip netns list | grep -q "^$n\b" || ip netns del "$n"
    done
    ;;
  sweep)
    # Tests and benchmarks name their hosts after their pid (fg<pid>,
    # fgb<pid>). A run killed before its `down` leaves names behind; the
    # next run's sweep takes them down.
    for pid in $(ip netns list 2>/dev/null | sed -n "s/^${p}\([0-9][0-9]*\)h[01]\( .*\)\{0,1\}\$/\1/p" | sort -u); do
      [ -d "/proc/$pid" ] || "$self" down "${p}$pid"
    done
    ;;
  link)
    in_host 1 ip link set "${p}e1" "${3:?up or down}"
    ;;
  mpirun)
    n=${3:?slots per host}
    n0=${n%,*} n1=${n#*,}
    shift 3
    # The host name is set in a UTS namespace of mpirun's own, as `rsh`
    # does for the other host's daemon. Open MPI's run-time and byte
    # transfer layers keep to the link (lo would reach only one host).
    exec nsenter --net="/run/netns/${p}h0" unshare --uts sh -c 'hostname "$0" && exec "$@"' "${p}h0" \
      mpirun --host "${p}h0:$n0,${p}h1:$n1" --mca plm_rsh_agent "$self rsh" \
      --mca oob_tcp_if_include 10.77.0.0/24 --mca btl_tcp_if_include 10.77.0.0/24 "$@"
    ;;
  rsh)
    # Open MPI calls the agent as `AGENT HOST COMMAND...`, the command being
    # words for a remote shell (as ssh would pass them).
    shift 2
    exec nsenter --net="/run/netns/$p" unshare --uts sh -c "hostname $p && $*"
    ;;
  *)
    echo "netns_hosts: unknown command '$cmd'" >&2
    exit 2
    ;;
esac
