#!/usr/bin/env bash
# Builds the libFuzzer targets (tests/fuzz, preset fuzz: clang, ASan + UBSan) and runs each for a while.
#   ./scripts/fuzz.sh [seconds per target, default 600] [target ...]
# Each target starts from its seed corpus tests/fuzz/corpus/<target>/ (read-only here) and grows its own
# corpus in build-fuzz/corpus-<target>/, outside git. A crash leaves its input in build-fuzz/crash-<target>/;
# once fixed, copy it into the seed corpus as tests/fuzz/corpus/<target>/regression-<what>.
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-600}
shift || true
targets=("$@")
((${#targets[@]})) || targets=(frame_fuzz store_request_fuzz tuning_fuzz)
launcher=(); command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
cmake --preset fuzz "${launcher[@]}" >/dev/null
cmake --build build-fuzz -j"$(nproc)" --target "${targets[@]}"
export ASAN_OPTIONS="halt_on_error=1:detect_leaks=1${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1${UBSAN_OPTIONS:+:$UBSAN_OPTIONS}"
status=0
summary=()
for t in "${targets[@]}"; do
  corpus=build-fuzz/corpus-$t crashes=build-fuzz/crash-$t log=build-fuzz/fuzz-$t.log
  mkdir -p "$corpus" "$crashes"
  echo "== $t: ${secs} s"
  rc=0
  # New inputs go to the first corpus directory only; the seeds are read from the second.
  build-fuzz/bin/$t "$corpus" "tests/fuzz/corpus/$t" -max_total_time="$secs" -print_final_stats=1 \
    -max_len=4096 -timeout=10 -rss_limit_mb=2048 -artifact_prefix="$crashes/" >"$log" 2>&1 || rc=$?
  execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo '?')
  n=$(find "$crashes" -type f | wc -l)
  grep -E '^#[0-9]+ +DONE|stat::' "$log" || true
  if ((rc != 0)); then
    status=1
    grep -E 'ERROR|runtime error|SUMMARY|Test unit written' "$log" || tail -20 "$log"
  fi
  summary+=("$t: $execs executions in ${secs} s, exit $rc, $n crash input(s) in $crashes, corpus $(ls "$corpus" | wc -l) files")
done
printf '%s\n' "${summary[@]}"
exit $status
