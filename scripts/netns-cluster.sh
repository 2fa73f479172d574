#!/usr/bin/env bash
# A multi-host rig on one machine: K network namespaces act as hosts, joined by veth pairs through a bridge,
# with tc (tbf) shaping every host's link. M ranks run in each host under chorus-run; host 0's chorus-run
# hosts the store, the others reach it across the bridge. Everything is torn down on exit, failed runs
# included. Needs root (ip netns, tc).
#
#   scripts/netns-cluster.sh [-k HOSTS] [-m RANKS_PER_HOST] [--rate RATE] [--timeout SECONDS] -- prog args...
#
# RATE is a tc rate ("1gbit", "200mbit"; "none" leaves links unshaped). Each rank's environment also gets
# CHORUS_HOST_INDEX. Exit status: the first non-zero status of the hosts' chorus-run, else 0.
set -euo pipefail
K=2 M=2 RATE=1gbit TIMEOUT=600
while [[ $# -gt 0 ]]; do
  case $1 in
    -k) K=$2; shift 2 ;;
    -m) M=$2; shift 2 ;;
    --rate) RATE=$2; shift 2 ;;
    --timeout) TIMEOUT=$2; shift 2 ;;
    --) shift; break ;;
    *) break ;;
  esac
done
[[ $# -gt 0 ]] || { echo "usage: $0 [-k HOSTS] [-m RANKS_PER_HOST] [--rate RATE] -- prog args..." >&2; exit 2; }
[[ $(id -u) == 0 ]] || { echo "$0: needs root (network namespaces)" >&2; exit 2; }
command -v ip >/dev/null && command -v tc >/dev/null || {
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq iproute2 >/dev/null
}

HERE=$(cd "$(dirname "$0")/.." && pwd)
RUN=${CHORUS_RUN:-$HERE/build/bin/chorus-run}
# Names unique to this run, so concurrent rigs (parallel tests) never collide.
ID=$$
BR=cbr$ID
SUBNET_BYTE=$((ID % 200 + 20))
PORT=$((20000 + ID % 20000))
ns() { echo "chorus${ID}h$1"; }
ip_of() { echo "10.$SUBNET_BYTE.0.$(($1 + 1))"; }

cleanup() {
  set +e
  for ((h = 0; h < K; h++)); do ip netns del "$(ns $h)" 2>/dev/null; done
  ip link del "$BR" 2>/dev/null
}
trap cleanup EXIT

ip link add "$BR" type bridge
ip link set "$BR" up
for ((h = 0; h < K; h++)); do
  n=$(ns $h)
  ip netns add "$n"
  ip link add "v${ID}h$h" type veth peer name "v${ID}b$h"
  ip link set "v${ID}h$h" netns "$n"
  ip link set "v${ID}b$h" master "$BR"
  ip link set "v${ID}b$h" up
  ip netns exec "$n" ip link set lo up
  ip netns exec "$n" ip addr add "$(ip_of $h)/24" dev "v${ID}h$h"
  ip netns exec "$n" ip link set "v${ID}h$h" up
  if [[ $RATE != none ]]; then
    # Egress shaping on the host's side of its link (the kernel has tbf, not netem).
    ip netns exec "$n" tc qdisc add dev "v${ID}h$h" root tbf rate "$RATE" burst 256kb latency 100ms
  fi
done

# One secret for the whole job: every launcher of a multi-host job needs the same one (chorus-run generates one
# only for a job whose store it hosts alone).
export CHORUS_AUTH_TOKEN=${CHORUS_AUTH_TOKEN:-$(od -An -N32 -tx1 /dev/urandom | tr -d ' \n')}
pids=()
for ((h = 0; h < K; h++)); do
  n=$(ns $h)
  if ((h == 0)); then
    store=(--store-host "$(ip_of 0)" --store-port "$PORT")
  else
    store=(--store-addr "$(ip_of 0):$PORT")
  fi
  # Output goes through a process substitution, so $! is chorus-run itself and `wait` returns its status.
  ip netns exec "$n" env CHORUS_HOST_INDEX=$h "$RUN" -n "$M" --world-size $((K * M)) --rank-offset $((h * M)) \
    "${store[@]}" --timeout "$TIMEOUT" -- "$@" > >(sed -u "s/^/[host $h] /") 2>&1 &
  pids+=($!)
done
status=0
for p in "${pids[@]}"; do
  wait "$p" || { s=$?; ((status == 0)) && status=$s; }
done
exit $status
