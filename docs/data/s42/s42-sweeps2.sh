#!/bin/bash
# Second part: 3 and 8 ranks into the first round's directories, then a second round at 2, 3 and 4 ranks.
set -e
RANKS="3 8" "$(dirname "$0")/../../../scripts/algo-sweeps.sh" s42
RANKS="2 3 4" "$(dirname "$0")/../../../scripts/algo-sweeps.sh" s42 2
