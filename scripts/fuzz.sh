#!/usr/bin/env bash
# Builds the libFuzzer targets of fuzz/ (clang, -fsanitize=fuzzer,address,undefined,
# assertions on) in build-fuzz/ and runs each for a bounded time, starting from
# its seed corpus fuzz/corpus/<target>/.
#
#   bash scripts/fuzz.sh [seconds per target, default 60] [target ...]
#
# New interesting inputs go to build-fuzz/corpus/<target>/ (the committed seeds
# are only read), findings to build-fuzz/artifacts/<target>-crash-*; replay one
# with ./build-fuzz/fuzz/<target> <file>. Prints executions per target and
# exits non-zero if any target found something.
#
# FUZZ_FLAGS: extra libFuzzer flags (default -entropic=0: with the tens of
# thousands of coverage features of the instrumented Eigen / xtensor code,
# libFuzzer 14's entropic schedule spends most of its time on bookkeeping;
# plain scheduling runs two to three times as many inputs in a short run).
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=${1:-60}
shift || true
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  targets=(fuzz_batching fuzz_pipeline fuzz_lazy_split fuzz_mst fuzz_npy)
fi

BIAFFINE_EXTRA_PACKAGES="clang libclang-rt-14-dev ${BIAFFINE_EXTRA_PACKAGES:-}" bash scripts/install_deps.sh
# No build type: the targets' own -O1 -g, and no NDEBUG, so Eigen's and the
# library's assertions are live.
cmake -S . -B build-fuzz -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE= \
  -DBIAFFINE_BUILD_FUZZ=ON -DBIAFFINE_WERROR=ON -DBIAFFINE_BUILD_TESTS=OFF \
  -DBIAFFINE_BUILD_BENCH=OFF -DBIAFFINE_BUILD_EXAMPLES=OFF -DBIAFFINE_INSTALL=OFF -DBIAFFINE_BUILD_PYTHON=OFF >/dev/null
cmake --build build-fuzz -j2 --target "${targets[@]}"

mkdir -p build-fuzz/artifacts
summary=build-fuzz/fuzz_summary.txt
printf '%-18s %12s %10s  %s\n' target executions exec/s result > "$summary"
status=0
for t in "${targets[@]}"; do
  mkdir -p "build-fuzz/corpus/$t"
  log="build-fuzz/$t.log"
  echo "fuzz: $t for ${seconds}s"
  set +e
  # shellcheck disable=SC2086
  "./build-fuzz/fuzz/$t" -max_total_time="$seconds" -timeout=30 -rss_limit_mb=2048 -print_final_stats=1 \
    ${FUZZ_FLAGS--entropic=0} -artifact_prefix="build-fuzz/artifacts/$t-" "build-fuzz/corpus/$t" "fuzz/corpus/$t" \
    >"$log" 2>&1
  rc=$?
  set -e
  execs=$(awk '/stat::number_of_executed_units/ {print $2}' "$log" | tail -1)
  execs=${execs:-0}
  result=ok
  if [ $rc -ne 0 ]; then
    result="FOUND (exit $rc, see $log)"
    status=1
    grep -E 'fuzz check failed|ERROR:|SUMMARY:|what\(\)' "$log" | head -5 || true
  fi
  printf '%-18s %12s %10s  %s\n' "$t" "$execs" "$((execs / (seconds > 0 ? seconds : 1)))" "$result" >> "$summary"
done
cat "$summary"
exit $status
