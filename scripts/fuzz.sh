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
source scripts/cmake_generator.sh
cmake_generator build-fuzz
cmake -S . -B build-fuzz "${gen[@]}" -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE= \
  -DBIAFFINE_BUILD_FUZZ=ON -DBIAFFINE_WERROR=ON -DBIAFFINE_BUILD_TESTS=OFF \
  -DBIAFFINE_BUILD_BENCH=OFF -DBIAFFINE_BUILD_EXAMPLES=OFF -DBIAFFINE_INSTALL=OFF -DBIAFFINE_BUILD_PYTHON=OFF >/dev/null
cmake --build build-fuzz -j2 --target "${targets[@]}"

mkdir -p build-fuzz/artifacts
summary=build-fuzz/fuzz_summary.txt
# FUZZ_JOBS targets at a time (default 2: one per core); each gets its own
# full time, so the run takes about seconds x targets / jobs.
jobs=${FUZZ_JOBS:-2}
run_target() {  # $1 = target; writes build-fuzz/$1.log and build-fuzz/$1.rc
  local t=$1 rc
  mkdir -p "build-fuzz/corpus/$t"
  set +e
  # shellcheck disable=SC2086
  "./build-fuzz/fuzz/$t" -max_total_time="$seconds" -timeout=30 -rss_limit_mb=2048 -print_final_stats=1 \
    ${FUZZ_FLAGS--entropic=0} -artifact_prefix="build-fuzz/artifacts/$t-" "build-fuzz/corpus/$t" "fuzz/corpus/$t" \
    >"build-fuzz/$t.log" 2>&1
  rc=$?
  set -e
  echo "$rc" > "build-fuzz/$t.rc"
}
running=0
for t in "${targets[@]}"; do
  rm -f "build-fuzz/$t.rc"
  if [ "$running" -ge "$jobs" ]; then wait -n || true; running=$((running - 1)); fi
  echo "fuzz: $t for ${seconds}s"
  run_target "$t" &
  running=$((running + 1))
done
wait
printf '%-18s %12s %10s  %s\n' target executions exec/s result > "$summary"
status=0
for t in "${targets[@]}"; do
  log="build-fuzz/$t.log"
  rc=$(cat "build-fuzz/$t.rc" 2>/dev/null || echo "missing")
  execs=$(awk '/stat::number_of_executed_units/ {print $2}' "$log" | tail -1)
  execs=${execs:-0}
  result=ok
  if [ "$rc" != 0 ]; then
    result="FOUND (exit $rc, see $log)"
    status=1
    grep -E 'fuzz check failed|ERROR:|SUMMARY:|what\(\)' "$log" | head -5 || true
  fi
  printf '%-18s %12s %10s  %s\n' "$t" "$execs" "$((execs / (seconds > 0 ? seconds : 1)))" "$result" >> "$summary"
done
cat "$summary"
exit $status
