#!/bin/bash
# docs/data/s48/hog-tradeoff.sh ROUNDS SETTING...: 2-rank tcp small all_reduces beside one busy process, and
# what the busy process got done meanwhile. SETTING: name=ENV (commas for spaces), e.g. spin64=CHORUS_TCP_SPIN=64.
# Per run: the setting, the job's wall seconds, the mean of chorus-perf's out-of-place time_us over 8 B-4 KiB,
# and the busy process's rate (thousands of 1000-add blocks per second; alone on a CPU it does ~1690 here).
R=$1; shift
D=$(mktemp -d /tmp/hog-tradeoff.XXXXXX)
trap 'rm -rf "$D"' EXIT
cat >"$D/hog.c" <<'C'
#include <signal.h>
#include <stdio.h>
#include <time.h>
static volatile sig_atomic_t stop = 0;
static void h(int s) { (void)s; stop = 1; }
int main(void) {
  signal(SIGTERM, h);
  struct timespec a, b;
  clock_gettime(CLOCK_MONOTONIC, &a);
  unsigned long n = 0;
  volatile unsigned long x = 0;
  while (!stop) { for (int i = 0; i < 1000; i++) x += i; n++; }
  clock_gettime(CLOCK_MONOTONIC, &b);
  printf("%.1f\n", n / ((b.tv_sec - a.tv_sec) + (b.tv_nsec - a.tv_nsec) / 1e9) / 1e3);
  return 0;
}
C
gcc -O2 -o "$D/hog" "$D/hog.c"
for i in $(seq "$R"); do for s in "$@"; do name=${s%%=*}; e=${s#*=}; e=${e//,/ }
  "$D/hog" >"$D/rate" & H=$!
  t0=$(date +%s.%N)
  m=$(env $e CHORUS_TRANSPORT=tcp build/bin/chorus-run -n 2 -- build/bin/chorus-perf allreduce -b 8 -e 4096 -f 2 -n 2000 -w 100 -c 0 --rotate 0 -R 0 |
    sed -E 's/^\[[^]]*\]:? ?//' | awk '!/^#/ && NF >= 9 && $1 ~ /^[0-9]+$/ {s += $6; n++} END {printf "%.1f", s / n}')
  t1=$(date +%s.%N)
  kill -TERM $H; wait $H
  echo "$name $(echo "$t1 - $t0" | bc) $m $(cat "$D/rate")"
done; done
