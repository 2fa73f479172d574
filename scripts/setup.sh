#!/usr/bin/env bash
# Installs the Debian packages Chorus builds and tests with, if any are missing. Safe to run repeatedly.
set -euo pipefail
# openmpi-bin and mpich: the launcher tests start real jobs under mpirun and mpiexec.hydra (tests/launch_test.cc);
# iproute2: the multi-host test's network namespaces (tests/netns_test.sh).
PKGS=(build-essential cmake ninja-build pkg-config ccache libgtest-dev libgmock-dev libbenchmark-dev libfmt-dev
      libcli11-dev nlohmann-json3-dev libssl-dev python3 python3-matplotlib openmpi-bin mpich iproute2)
missing=()
for p in "${PKGS[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  SUDO=; [[ $(id -u) == 0 ]] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi
