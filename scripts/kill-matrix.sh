#!/usr/bin/env bash
# The long kill matrix: TRIALS seeded trials (default 1000) of tests/kill_matrix_test.cc, each killing one
# rank of 3 or 5 (tcp and shm alternately) at a random data frame of a random collective and algorithm.
# Prints the per-transport detection delays and writes the log to docs/data/kill-matrix-<trials>.txt.
#   ./scripts/kill-matrix.sh [TRIALS] [SEED]
set -euo pipefail
cd "$(dirname "$0")/.."
trials=${1:-1000}
seed=${2:-1}
./scripts/build.sh >/dev/null
out=docs/data/kill-matrix-${trials}.txt
mkdir -p docs/data
start=$(date +%s)
{
  echo "# ./scripts/kill-matrix.sh $trials $seed   ($(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores)"
  CHORUS_KILL_TRIALS=$trials CHORUS_KILL_SEED=$seed build/bin/kill_matrix_test 2>&1 |
    grep -E '^kill matrix|^\[  (PASSED|FAILED) |Failure|trial [0-9]+:' || true
  echo "# wall time: $(( $(date +%s) - start )) s"
} | tee "$out"
grep -q '^\[  PASSED' "$out"
