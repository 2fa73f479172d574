#!/usr/bin/env bash
# Installs the build into a scratch prefix, builds tests/external (an outside project using
# find_package(chorus)) and a pkg-config program against it, and runs the former under chorus-run for
# 1, 2, 3 and 5 ranks.
#   install_test.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
BUILD=$1 SRC=$2
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
cmake --install "$BUILD" --prefix "$WORK/prefix" >/dev/null
test -f "$WORK/prefix/include/chorus/chorus.h"
# Only the public API is installed.
if find "$WORK/prefix/include" -name '*.h' | grep -v '/chorus/' | grep -q .; then
  echo "internal headers were installed" >&2; exit 1
fi
cmake -S "$SRC/tests/external" -B "$WORK/ext" -DCMAKE_PREFIX_PATH="$WORK/prefix" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$WORK/ext" >/dev/null

# pkg-config: compile a one-line program with the flags it gives.
export PKG_CONFIG_PATH="$WORK/prefix/lib/pkgconfig:$WORK/prefix/lib/x86_64-linux-gnu/pkgconfig"
cat >"$WORK/pc.cc" <<'CC'
#include <chorus/chorus.h>
#include <cstdio>
int main() { std::printf("chorus %s\n", chorus::version_string()); return 0; }
CC
# shellcheck disable=SC2046
g++ "$WORK/pc.cc" -o "$WORK/pc" $(pkg-config --cflags --libs chorus) -Wl,-rpath,"$(pkg-config --variable=libdir chorus)"
"$WORK/pc"

for n in 1 2 3 5; do
  echo "== check_all on $n ranks"
  "$BUILD/bin/chorus-run" -n "$n" --timeout 600 -- "$WORK/ext/check_all"
done
