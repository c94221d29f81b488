#!/usr/bin/env bash
# Builds the test suite with AddressSanitizer and
# UndefinedBehaviorSanitizer (g++, -O1 -g1, assertions on, -fno-sanitize-recover=all
# from BIAFFINE_SANITIZE) in build-asan/ and runs every test through ctest.
# With the AVX2 kernel off (BIAFFINE_NO_GEMM_KERNEL): the Release run tests
# the kernel path, this one the float Eigen path, so CI runs both (the fuzz
# targets run the kernel path under the sanitizers too). Large blocks come
# from operator new here (BIAFFINE_HUGE_PAGE_MIN_BYTES=0, BIAFFINE_CACHED_BLOCK_MIN_BYTES=0), so ASan's redzones
# guard them too; the Release run tests their mapped path.
# The package-consumer tests (label "package") are left to the Release run:
# they build other projects without sanitizers.
#
# BIAFFINE_TEST_SCALE (default here 0.25) shrinks the heavy loops of the tests
# that read it, to keep the run within CI time.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh

export BIAFFINE_TEST_SCALE=${BIAFFINE_TEST_SCALE:-0.25}
# ASan's fake stack (detect_stack_use_after_return) is off where g++ before
# 14 targets AVX-512: there test_gradients crashed (SEGV on a garbage address
# while copying an initializer_list) on a Zen 4 EPYC at -march=native, every
# run, while the same test passed with the fake stack off, with
# -mno-avx512f, and under clang 14's ASan with the fake stack on. That looks
# like g++'s fake-stack handling of AVX-512 frames (GCC bug 110027 reports
# misaligned stack objects there), not a bug of ours; every other check stays.
# (The macros are read into a variable first: `grep -q` in a pipeline under
# pipefail fails when it stops reading early.)
uar=1
target_macros=$(echo | ${CXX:-g++} -march=native -dM -E - 2>/dev/null || true)
if grep -q '__AVX512F__' <<<"$target_macros" && [ "$(${CXX:-g++} -dumpversion | cut -d. -f1)" -lt 14 ]; then
  uar=0
  echo "ci_sanitize: AVX-512 target with g++ < 14: detect_stack_use_after_return=0"
fi
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:strict_string_checks=1:detect_stack_use_after_return=$uar:check_initialization_order=1:strict_init_order=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}

# -Wno-maybe-uninitialized: GCC 12 reports false positives in libstdc++
# (std::function inside <regex>) once ASan instruments it; warnings are
# checked without sanitizers by scripts/ci_werror.sh.
# -g1 (functions and line tables, no variable info): enough for the
# sanitizers' stack traces, and the build (the bulk of this step) is much
# faster than with full -g. The examples are left to the Release run.
gen=()
if [ ! -f build-asan/CMakeCache.txt ] && command -v ninja >/dev/null; then gen=(-G Ninja); fi
cmake -S . -B build-asan "${gen[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g1" \
  "-DCMAKE_CXX_FLAGS=-Wno-maybe-uninitialized -DBIAFFINE_NO_GEMM_KERNEL -DBIAFFINE_HUGE_PAGE_MIN_BYTES=0 -DBIAFFINE_CACHED_BLOCK_MIN_BYTES=0" -DBIAFFINE_SANITIZE=address,undefined \
  -DBIAFFINE_BUILD_TESTS=ON -DBIAFFINE_BUILD_EXAMPLES=OFF -DBIAFFINE_BUILD_BENCH=OFF -DBIAFFINE_WERROR=OFF -DBIAFFINE_BUILD_PYTHON=OFF -DBIAFFINE_CHECK_HEADERS=OFF >/dev/null
cmake --build build-asan -j2
ctest --test-dir build-asan --output-on-failure -j2 --timeout 1500 -LE package
