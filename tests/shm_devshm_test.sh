#!/usr/bin/env bash
# A /dev/shm too small for the shared-memory rings: communicator creation must fail at once on every rank with
# an error that names the cause, instead of a SIGBUS in the middle of a collective; with enough room the same
# job runs. A private mount namespace holds a 1 MiB tmpfs on /dev/shm (needs root, as CI has).
#   shm_devshm_test.sh BUILD_DIR
set -euo pipefail
BUILD=$1
if [[ $(id -u) != 0 ]]; then
  echo "shm_devshm_test: mounting a small /dev/shm needs root (CI runs as root)" >&2
  exit 1
fi
run() {  # run SIZE: a 2-rank shm all_reduce with a SIZE tmpfs on /dev/shm; prints its output and exit status
  unshare -m bash -c "mount -t tmpfs -o size=$1 tmpfs /dev/shm && CHORUS_TRANSPORT=shm timeout 120 \
    '$BUILD/bin/chorus-run' -n 2 -- '$BUILD/bin/chorus-perf' allreduce -b 8 -e 64K -f 8 -n 5 2>&1; echo \"exit \$?\""
}
echo "== 1 MiB /dev/shm (each rank's segment needs about 2 MiB)"
start=$(date +%s)
out=$(run 1M)
echo "$out"
grep -q 'exit 1$' <<<"$out"
grep -q 'cannot allocate .* bytes of shared memory .* is /dev/shm large enough' <<<"$out"
grep -q 'SystemError' <<<"$out"
(($(date +%s) - start < 60)) || { echo "the failure took $(($(date +%s) - start)) s" >&2; exit 1; }
echo "== 64 MiB /dev/shm"
out=$(run 64M)
echo "$out" | tail -4
grep -q 'exit 0$' <<<"$out"
grep -q 'Out of bounds values : 0 OK' <<<"$out"
echo "shm_devshm_test: OK"
