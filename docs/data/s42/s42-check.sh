#!/bin/bash
# Check sweeps: the refitted tables (built in), 2 and 4 ranks, cold and hot, both transports.
exec "$(dirname "$0")/../../../scripts/algo-sweeps.sh" s42 -check
