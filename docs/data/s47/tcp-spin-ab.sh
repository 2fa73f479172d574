#!/bin/bash
# The tcp spin A/B of the forty-seventh and forty-eighth sessions (docs/performance.md, "Small tcp receives poll
# for a time that adapts" and what follows it).
#   docs/data/s47/tcp-spin-ab.sh ROUNDS COLL NRANKS SETTING...
# SETTING: a CHORUS_TCP_SPIN value, D for the default (nothing set), A for CHORUS_TCP_ADAPTIVE_SPIN=1 or O for
# CHORUS_TCP_ADAPTIVE_SPIN=0 (the fixed 64 polls). What D ran: in the s47 files before 710d9a9 the adaptive
# poll, in the later s47 files and in docs/data/s48/contended-* the fixed count, from 6a4cb66 the adaptive poll
# with its contention sign. Each round runs every setting once, in the order given:
# `chorus-run -n NRANKS -- chorus-perf COLL -b ${MINB:-8} -e ${MAXB:-4096} -f 2 -c 1` with bench.sh's flags
# (--rotate 0 -R 0 --iters-by-size --average 3), tcp; one line per run: SETTING, then the out-of-place time_us
# of every size. Summarise with docs/data/s47/tcp-spin-sum.py FILE, docs/data/s47/stalls.py
# FILE and docs/data/s48/paired.py FILE...
R=$1 C=$2 N=$3; shift 3
W=$(mktemp /tmp/chorus-perf-wrapper.XXXXXX)
printf '#!/bin/sh\nx=; [ "$1" = broadcast ] && x=--in-place-first\nexec %q --rotate 0 -R 0 --iters-by-size --average 3 $x "$@"\n' \
  "$PWD/build/bin/chorus-perf" >"$W"
chmod +x "$W"
trap 'rm -f "$W"' EXIT
for i in $(seq "$R"); do
  for s in "$@"; do
    case "$s" in
      D) e= ;;
      A) e=CHORUS_TCP_ADAPTIVE_SPIN=1 ;;
      O) e=CHORUS_TCP_ADAPTIVE_SPIN=0 ;;
      *) e="CHORUS_TCP_SPIN=$s" ;;
    esac
    r=$(env $e CHORUS_TRANSPORT=tcp build/bin/chorus-run -n "$N" -- "$W" "$C" -b "${MINB:-8}" -e "${MAXB:-4096}" -f 2 -c 1 |
      sed -E 's/^\[[^]]*\]:? ?//' | awk '!/^#/ && NF >= 9 && $1 ~ /^[0-9]+$/ {printf "%s ", $6}')
    echo "$s $r"
  done
done
