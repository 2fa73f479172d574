#!/usr/bin/env bash
# Installs what is missing, builds, and runs the whole test suite with ctest.
#   ./scripts/test.sh            everything
#   ./scripts/test.sh -R Store   only tests whose name matches (ctest -R)
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/build.sh
ctest --test-dir build --output-on-failure -j"$(nproc)" --timeout 900 "$@"
