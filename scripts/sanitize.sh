#!/usr/bin/env bash
# Builds a sanitizer preset (CMakePresets.json) and runs the tests under it.
#   ./scripts/sanitize.sh asan [ctest args]   AddressSanitizer + UndefinedBehaviorSanitizer, the whole suite
#                                             but the two tests below; build-asan/
#   ./scripts/sanitize.sh tsan [ctest args]   ThreadSanitizer on the tests that exercise threads; build-tsan/
# Extra arguments go to ctest (e.g. -R Store). Any sanitizer report fails the test that triggered it.
set -euo pipefail
cd "$(dirname "$0")/.."
preset=${1:-}
case $preset in
  asan | tsan) shift ;;
  *) echo "usage: $0 asan|tsan [ctest args]" >&2; exit 2 ;;
esac
./scripts/setup.sh
jobs=$(nproc)

# Test executables under TSan: the ones whose threads share the library's state inside one process: the
# progress engine and asynchronous calls, the reducer's hook thread, the store server and its clients, the
# transports (inproc, tcp, shm) with ranks as threads, abort from another thread, fault injection and the
# authenticated handshakes. The other tests run more algorithms over the same transports and threads, are
# single-threaded, or are multi-process; they run under ASan. Keep docs/reliability.md in step.
TSAN_TESTS=(async_test call_gate_test reducer_test store_test trace_test communicator_test errors_test collectives_test
            fault_injection_test recovery_test auth_test registered_memory_test)
# Under ASan everything runs but two tests, which the release run covers: InstallAndExternalProject builds an
# outside, uninstrumented project against the installed library, and such a program cannot load an
# instrumented library (the ASan runtime must be the first library loaded); MultiHostNetns, the slowest test
# (a minute in Release: every collective on rate-limited links between network namespaces), runs programs
# whose code the rest of the suite already runs under ASan.
ASAN_EXCLUDE='^(InstallAndExternalProject|MultiHostNetns)$'

launcher=(); command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
start=$(date +%s)
cmake --preset "$preset" "${launcher[@]}" >/dev/null
ctest_args=(--test-dir "build-$preset" --output-on-failure -j"$jobs" --timeout 1800)
if [[ $preset == asan ]]; then
  cmake --build build-asan -j"$jobs"
  ctest_args+=(-E "$ASAN_EXCLUDE")
  # halt_on_error: the first report ends the process, so its test fails; leaks fail the test at exit.
  export ASAN_OPTIONS="halt_on_error=1:detect_leaks=1:check_initialization_order=1:strict_init_order=1${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
  export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1${UBSAN_OPTIONS:+:$UBSAN_OPTIONS}"
else
  targets=("${TSAN_TESTS[@]}")
  # The multi-process tests launch these; they are instrumented too.
  cmake --build build-tsan -j"$jobs" --target "${targets[@]}" chorus-test-worker
  ctest_args+=(-L "^($(IFS='|'; echo "${targets[*]}"))\$")
  export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:suppressions=$PWD/tests/tsan.supp${TSAN_OPTIONS:+:$TSAN_OPTIONS}"
fi
built=$(date +%s)
echo "sanitize.sh $preset: built in $((built - start)) s"
status=0
ctest "${ctest_args[@]}" "$@" || status=$?
echo "sanitize.sh $preset: tests took $(($(date +%s) - built)) s (exit $status)"
if left=$(ls /dev/shm 2>/dev/null | grep '^chorus-'); then
  echo "sanitize.sh: shared-memory segments left behind in /dev/shm:" >&2
  echo "$left" >&2
  status=1
fi
exit $status
