#!/usr/bin/env bash
# tcp read-ahead, off against the default 16 KiB, rounds alternating (scripts/env-ab.py): the rows where frames
# queue up (4-rank broadcast and reduce; 2-rank broadcast, where the root's sends set the pace) and rows where
# they should not (2-rank all_reduce, small and large; 4-rank all_reduce). Each row in two sets of rounds (A off,
# then A on; env-ab.py already alternates which runs first within a set), as single sets of the same row, minutes
# apart, disagreed by up to 0.2.
#   docs/data/s45/readahead-ab.sh > docs/data/s45/readahead-ab.txt
cd "$(dirname "$0")/../../.."
ab() {
  for order in "0 16K" "16K 0"; do
    python3 scripts/env-ab.py "$1" "$2" tcp "CHORUS_TCP_READ_AHEAD=${order% *}" "CHORUS_TCP_READ_AHEAD=${order#* }" -- \
      "${@:3}" -c 0 --rotate 0 -R 0 --iters-by-size --average 3
    echo
  done
}
date -u
ab 30 4 broadcast -b 8 -e 64K -f 4 --in-place-first
ab 20 4 reduce -b 8 -e 64K -f 4
ab 10 4 allreduce -b 8 -e 64K -f 4
ab 30 2 broadcast -b 8 -e 64K -f 4 --in-place-first
ab 20 2 allreduce -b 8 -e 4M -f 4
date -u
