#!/usr/bin/env bash
# Installs what is missing, builds Release, and runs the main job: 4 local ranks running
# chorus-perf allreduce over a size sweep with checking on.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/build.sh
exec build/bin/chorus-run -n 4 -- build/bin/chorus-perf allreduce -b 4 -e 64M -f 4 -c 1 "$@"
