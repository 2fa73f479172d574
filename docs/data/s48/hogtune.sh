#!/bin/bash
# docs/data/s48/hogtune.sh (the forty-seventh session's, unchanged) ROUNDS SETTING...: chorus-tune's link probe (2 ranks, tcp) while one busy loop runs; prints alpha+2*overhead (us)
R=$1; shift
timeout 600 sh -c 'while :; do :; done' &
H=$!
for i in $(seq $R); do for s in "$@"; do name=${s%%=*}; e=${s#*=}; e=${e//,/ }
  r=$(env $e CHORUS_TRANSPORT=tcp build/bin/chorus-run -n 2 -- build/bin/chorus-tune -o /tmp/t48.json --iters 100 --no-choices --no-algorithms 2>&1 | awk '/alpha_us/{a=$3} /overhead_us/{o=$3} END{printf "%.1f", a+2*o}')
  echo "$name $r"; done; done
kill $H
