#!/usr/bin/env bash
# Reruns the chorus-overlap measurements of docs/overlap.md. Each run's output goes to
# docs/data/overlap/<name>.txt, preceded by the date, the load average and the exact command.
#
#   scripts/overlap-tables.sh [BUILD_DIR] [NAME...]     (default BUILD_DIR: build; default: every run)
#
# About three minutes in all on the 2-core reference machine. Run it on an otherwise idle machine: the
# figures are times.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-build}
shift || true
[[ $build = /* ]] || build=$root/$build
out=$root/docs/data/overlap
mkdir -p "$out"

steps=(--steps 10 --warmup 3)
declare -A runs=(
  [resnet50-shm-2]="shm 2 --model resnet50 --mode all --policy all"
  [resnet50-tcp-2]="tcp 2 --model resnet50 --mode all --policy all"
  [resnet50-shm-4]="shm 4 --model resnet50 --mode all --policy all"
  [resnet50-tcp-4]="tcp 4 --model resnet50 --mode all --policy all"
  [resnet50-sweep-shm-2]="shm 2 --model resnet50 --mode fine --policy all --bucket-mb 1,5,25,100"
  [resnet50-sweep-tcp-4]="tcp 4 --model resnet50 --mode fine --policy all --bucket-mb 1,5,25,100"
  [bert-shm-2]="shm 2 --model bert-base --scale 0.25 --mode all --policy all"
  [resnet50-real-shm-2]="shm 2 --model resnet50 --compute real --mode all --policy all"
)
names=("$@")
if [[ ${#names[@]} -eq 0 ]]; then
  names=(resnet50-shm-2 resnet50-tcp-2 resnet50-shm-4 resnet50-tcp-4 resnet50-sweep-shm-2 resnet50-sweep-tcp-4
         bert-shm-2 resnet50-real-shm-2)
fi

for name in "${names[@]}"; do
  spec=${runs[$name]:?unknown run $name}
  read -r transport ranks args <<<"$spec"
  # shellcheck disable=SC2206
  cmd=(env CHORUS_TRANSPORT="$transport" "$build/bin/chorus-run" -n "$ranks" --timeout 600 --
       "$build/bin/chorus-overlap" $args "${steps[@]}")
  {
    echo "# date: $(date -u '+%Y-%m-%d %H:%M UTC'); load average before: $(cut -d' ' -f1-3 /proc/loadavg); $(nproc) cores"
    echo "# command: CHORUS_TRANSPORT=$transport build/bin/chorus-run -n $ranks -- build/bin/chorus-overlap $args ${steps[*]}"
    "${cmd[@]}" 2>&1
  } | tee "$out/$name.txt"
done
