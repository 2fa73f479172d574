#!/usr/bin/env bash
# Multi-host tests on the network-namespace rig (scripts/netns-cluster.sh): every collective, dtype and op
# across 2 hosts x 2 ranks and 3 hosts x 1 and 2 ranks, and the check that traffic inside a host goes through
# shared memory and across hosts through tcp. Needs root, as CI has.
#   netns_test.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
BUILD=$1 SRC=$2
if [[ $(id -u) != 0 ]]; then
  echo "netns_test: network namespaces need root (CI runs as root)" >&2
  exit 1
fi
export CHORUS_RUN=$BUILD/bin/chorus-run CHORUS_TIMEOUT_MS=120000
rig="$SRC/scripts/netns-cluster.sh --rate 1gbit --timeout 600"

echo "== traffic: 2 hosts x 2 ranks"
# A failed run's output is printed before the test fails on it (out=$(...) alone would exit with it unseen).
run_rig() {
  local rc=0
  out=$("$@") || rc=$?
  if ((rc != 0)); then
    echo "$out"
    echo "netns_test: the rig exited with status $rc" >&2
    exit $rc
  fi
}
run_rig $rig -k 2 -m 2 -- "$BUILD/bin/chorus-test-worker" hybrid-traffic
echo "$out"
[[ $(grep -c 'HYBRID OK' <<<"$out") == 4 ]]
# Inside a host bytes went through shared memory, across hosts through tcp.
grep 'HYBRID OK' <<<"$out" | grep -q 'shm [1-9]'
grep 'HYBRID OK' <<<"$out" | grep -q 'tcp [1-9]'

for shape in "2 2" "3 1" "3 2"; do
  set -- $shape
  echo "== every collective, dtype and op: $1 hosts x $2 ranks"
  run_rig $rig -k "$1" -m "$2" -- "$BUILD/bin/chorus-check-all"
  echo "$out" | grep -E 'check_all|error|Error' || true
  [[ $(grep -c ', 0 failures' <<<"$out") == $(($1 * $2)) ]]
done
for shape in "2 2" "3 1" "3 2"; do
  set -- $shape
  echo "== the hierarchical algorithms (all_reduce, all_gather, reduce_scatter, broadcast): $1 hosts x $2 ranks"
  CHORUS_ALGO=hierarchical run_rig $rig -k "$1" -m "$2" -- "$BUILD/bin/chorus-check-all"
  echo "$out" | grep -E 'check_all|error|Error' || true
  [[ $(grep -c ', 0 failures' <<<"$out") == $(($1 * $2)) ]]
done
echo "netns_test: all passed"
