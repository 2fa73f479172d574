#!/bin/bash
# docs/data/s47/haltpoll-ab.sh ROUNDS COLL: alternating runs (tcp, 2 ranks, bench.sh flags as in tcp-spin-ab.sh):
# CHORUS_TCP_SPIN=64 with the guest halt-polling off (guest_halt_poll_ns=0, the host default), the same with 200 us of
# halt-polling, and the default adaptive poll with it off. Needs root; restores 0 at exit.
R=$1 C=$2
P=/sys/module/haltpoll/parameters/guest_halt_poll_ns
W=$(mktemp /tmp/chorus-perf-wrapper.XXXXXX)
printf '#!/bin/sh\nexec %q --rotate 0 -R 0 --iters-by-size --average 3 "$@"\n' "$PWD/build/bin/chorus-perf" >"$W"
chmod +x "$W"
trap 'echo 0 > $P; rm -f "$W"' EXIT
for i in $(seq "$R"); do
  for s in "p64h0:64:0" "p64h200:64:200000" "dh0::0"; do
    IFS=: read -r name spin h <<<"$s"
    echo "$h" > $P
    e=; [ -n "$spin" ] && e="CHORUS_TCP_SPIN=$spin"
    r=$(env $e CHORUS_TRANSPORT=tcp build/bin/chorus-run -n 2 -- "$W" "$C" -b "${MINB:-8}" -e "${MAXB:-4096}" -f 2 -c 1 |
      sed -E 's/^\[[^]]*\]:? ?//' | awk '!/^#/ && NF >= 9 && $1 ~ /^[0-9]+$/ {printf "%s ", $6}')
    echo "$name $r"
  done
done
