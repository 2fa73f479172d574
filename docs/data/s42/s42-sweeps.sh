#!/bin/bash
# The forty-second session's sweeps for this host's (40-kind) tables at 2 and 4 ranks.
exec "$(dirname "$0")/../../../scripts/algo-sweeps.sh" s42
