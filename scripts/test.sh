#!/usr/bin/env bash
# Installs what is missing, builds, and runs the whole test suite with ctest.
#   ./scripts/test.sh            everything
#   ./scripts/test.sh -R Store   only tests whose name matches (ctest -R)
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/build.sh
ctest --test-dir build --output-on-failure -j"$(nproc)" --timeout 900 "$@"
# Shared-memory segments are unlinked once every rank has mapped them, so none may outlive the suite, not even
# those of ranks the fault tests killed.
if left=$(ls /dev/shm 2>/dev/null | grep '^chorus-'); then
  echo "test.sh: shared-memory segments left behind in /dev/shm:" >&2
  echo "$left" >&2
  exit 1
fi
