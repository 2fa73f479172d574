#!/bin/bash
# (forty-fifth session) Restores the setting it found. Output: docs/data/s45/tcp-thp-ab.txt.
# Slow-state frequency of a 2-rank tcp 1 MiB all_reduce with THP madvise (as set) against always, blocks alternating.
cd "$(dirname "$0")/../../.."; export PATH=$PWD/build/bin:$PATH
orig=$(sed -E 's/.*\[(\w+)\].*/\1/' /sys/kernel/mm/transparent_hugepage/enabled)
for b in 1 2 3 4; do
  for mode in madvise always; do
    echo $mode > /sys/kernel/mm/transparent_hugepage/enabled
    ts=""
    for i in $(seq 1 15); do
      t=$(CHORUS_TRANSPORT=tcp chorus-run -n 2 --no-prefix -- chorus-perf allreduce -b 1M -e 1M -c 0 --rotate 0 -R 0 -w 20 -n 400 | grep -v '^#' | awk 'NF>5{print $6}')
      ts="$ts $t"
    done
    echo "block $b $mode:$ts"
  done
done
echo $orig > /sys/kernel/mm/transparent_hugepage/enabled
cat /sys/kernel/mm/transparent_hugepage/enabled
