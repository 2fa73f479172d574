#!/bin/bash
# The forty-seventh session's tcp spin A/B (docs/performance.md, "Small tcp receives poll for a time that adapts").
#   docs/data/s47/tcp-spin-ab.sh ROUNDS COLL NRANKS SETTING...
# SETTING: a CHORUS_TCP_SPIN value, D for the default (unset; the adaptive poll when these runs were made), or A
# for CHORUS_TCP_ADAPTIVE_SPIN=1 (the adaptive poll since it became opt-in). Each round runs every setting once, in the
# order given: `chorus-run -n NRANKS -- chorus-perf COLL -b ${MINB:-8} -e ${MAXB:-4096} -f 2 -c 1` with
# bench.sh's flags (--rotate 0 -R 0 --iters-by-size --average 3), tcp; one line per run: SETTING, then the
# out-of-place time_us of every size. Summarise with docs/data/s47/tcp-spin-sum.py FILE.
R=$1 C=$2 N=$3; shift 3
W=$(mktemp /tmp/chorus-perf-wrapper.XXXXXX)
printf '#!/bin/sh\nx=; [ "$1" = broadcast ] && x=--in-place-first\nexec %q --rotate 0 -R 0 --iters-by-size --average 3 $x "$@"\n' \
  "$PWD/build/bin/chorus-perf" >"$W"
chmod +x "$W"
trap 'rm -f "$W"' EXIT
for i in $(seq "$R"); do
  for s in "$@"; do
    if [ "$s" = D ]; then e=; elif [ "$s" = A ]; then e=CHORUS_TCP_ADAPTIVE_SPIN=1; else e="CHORUS_TCP_SPIN=$s"; fi
    r=$(env $e CHORUS_TRANSPORT=tcp build/bin/chorus-run -n "$N" -- "$W" "$C" -b "${MINB:-8}" -e "${MAXB:-4096}" -f 2 -c 1 |
      sed -E 's/^\[[^]]*\]:? ?//' | awk '!/^#/ && NF >= 9 && $1 ~ /^[0-9]+$/ {printf "%s ", $6}')
    echo "$s $r"
  done
done
