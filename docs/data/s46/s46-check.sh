#!/bin/bash
# Check sweeps of the second kind's tables refitted to eight runs (the forty-second session's four sweeps and
# the four check sweeps of the forty-second and forty-fourth sessions; scripts/fit-measured.py): 2 and 4 ranks,
# cold and hot, both transports, the refitted tables built in; then both tables' choices were timed on the forced
# columns (docs/algorithms.md, "Eight runs behind the second kind's tables").
CHORUS_COPY_GBPS=${CHORUS_COPY_GBPS:-40} exec "$(dirname "$0")/../../../scripts/algo-sweeps.sh" s46 -check
