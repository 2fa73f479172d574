#!/bin/bash
# The forty-eighth session's A/B of a shm wait that stops polling when the awaited peer last waited on the
# waiter's own CPU (docs/performance.md, "Shared memory beside a busy process"; tried, not kept): "new" with the
# experimental build, "base" with DBG_NOPC=1, which that build read to skip the check. 2-rank shm all_reduce
# 8 B-1 MiB beside one busy process (/tmp/h48/hog: the busy loop of hog-tradeoff.sh, compiled), alternating.
# One line per run: the setting, time_us per size, the busy process's rate. Needs that build to rerun.
R=$1
for i in $(seq $R); do for s in new base; do
  e=X=0; [ $s = base ] && e=DBG_NOPC=1
  /tmp/h48/hog > /tmp/h48/rate & H=$!
  sleep 0.2
  r=$(env $e CHORUS_TRANSPORT=shm build/bin/chorus-run -n 2 -- build/bin/chorus-perf allreduce -b 8 -e 1M -f 2 -c 1 --rotate 0 -R 0 --iters-by-size --average 3 2>&1 | grep -v "#" | awk '{printf "%s ", $7}')
  kill $H; wait $H
  echo "$s $r $(cat /tmp/h48/rate)"
done; done
