#!/bin/bash
# Check sweeps: the tables smoothed across sizes (built in), 2 and 4 ranks, cold and hot, both transports; the
# smoothed and unsmoothed tables' choices were then timed on the forced columns (docs/algorithms.md). The 40
# kind's tables (this host's) in the auto columns, without the copy-rate probe.
CHORUS_COPY_GBPS=${CHORUS_COPY_GBPS:-40} exec "$(dirname "$0")/../../../scripts/algo-sweeps.sh" s44 -check
