#!/bin/bash
# Per run (R runs): a 2-rank tcp 1 MiB all_reduce of N calls, and 0.5 s into it the two data connections' socket
# buffers, rtt, cwnd, receive-side rtt and space and send window (ss -tinm; the connections using reno are the
# ranks' data connections). For telling a slow run's TCP state from a fast one's (forty-fifth session).
#   R=30 docs/data/s45/tcp-ss-states.sh
cd "$(dirname "$0")/../../.."; export PATH=$PWD/build/bin:$PATH; mkdir -p /tmp/ss
for i in $(seq 1 ${R:-40}); do
  CHORUS_TRANSPORT=tcp chorus-run -n 2 --no-prefix -- chorus-perf allreduce -b 1M -e 1M -c 0 --rotate 0 -R 0 -w 20 -n ${N:-3000} > /tmp/ss/run$i.out 2>&1 &
  sleep 0.5
  ss -tinm state established 2>/dev/null | grep -A1 "127.0.0.1" | grep -E "reno" | sed -E 's/.*skmem:\(r([0-9]+),rb([0-9]+),t[0-9]+,tb([0-9]+).*rtt:([0-9.\/]+).*cwnd:([0-9]+).*rcv_rtt:([0-9.]+) rcv_space:([0-9]+).*snd_wnd:([0-9]+).*/rb=\2 tb=\3 rtt=\4 cwnd=\5 rcv_rtt=\6 rcv_space=\7 snd_wnd=\8/' > /tmp/ss/s$i
  wait
  echo "run $i: $(grep -v '^#' /tmp/ss/run$i.out | awk 'NF>5{print $6}') | $(cat /tmp/ss/s$i | tr '\n' ';')"
done
