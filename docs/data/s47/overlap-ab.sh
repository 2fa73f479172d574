#!/bin/bash
# docs/data/s47/overlap-ab.sh [ROUNDS]: chorus-overlap, 2 ranks, tcp, real compute, 64 KiB buckets; CHORUS_TCP_SPIN=64 against the default
for i in $(seq ${1:-4}); do for v in 64 D; do if [ $v = D ]; then e=; else e="CHORUS_TCP_SPIN=$v"; fi; r=$(env $e CHORUS_TRANSPORT=tcp timeout 120 build/bin/chorus-run -n 2 -- build/bin/chorus-overlap --model resnet50 --scale 0.05 --compute real --compute-ms 20 --mode fine --policy ready_order --bucket-mb 0.0625 --first-bucket-mb 0.0625 --steps 10 2>&1 | grep "^\[0\] overlap:" | tail -1); echo "$v $r"; done; done
