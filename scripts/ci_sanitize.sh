#!/usr/bin/env bash
# clang++ -Werror and the sanitizers in one build (build-san/): every target
# (tests, examples, benches, the Python module's avx2 variant) compiled by
# clang++ with -Werror and with AddressSanitizer + UndefinedBehaviorSanitizer (-O1 -g1, assertions on,
# -fno-sanitize-recover=all from BIAFFINE_SANITIZE), then the whole test
# suite through ctest on it: the C++ tests, the examples' runs, and the
# Python tests against the ASan-built module (python/CMakeLists.txt loads
# the ASan runtime first for them).
#
# Which compute path: the AVX2 kernel off (BIAFFINE_NO_GEMM_KERNEL), so the
# whole suite runs the float Eigen path here; the Release run tests the kernel
# path and the fuzz targets run it under the sanitizers. The compute group on
# the optional BLAS backend (BIAFFINE_TEST_BLAS_COMPUTE) runs in the Release
# build (scripts/ci_werror.sh gcc): that backend's memory accesses happen
# inside OpenBLAS, which ASan does not instrument, and the group's second
# ASan compile cost 3.5 CPU-minutes here. Large blocks come from operator new here
# (BIAFFINE_HUGE_PAGE_MIN_BYTES=0, BIAFFINE_CACHED_BLOCK_MIN_BYTES=0), so
# ASan's redzones guard them too; the Release run tests their mapped path.
# The package-consumer tests (label "package") are left to the Release run:
# they build other projects without sanitizers.
#
# Left to the Release build (scripts/ci_werror.sh gcc, which builds and runs
# them): every header compiled alone (whether a header includes what it uses
# does not depend on the compiler: both use libstdc++; 2.5 CPU-minutes here)
# and the ODR test (symbol names and -Wodr under LTO, where ASan adds nothing;
# 3 CPU-minutes for its ASan LTO link here). Both say so in ctest's output.
#
# One build for both (it was two: a g++ ASan build and a clang -O0 one):
# clang's warnings come from its front end, whatever the optimisation level.
# g++'s -Werror is ci_werror.sh's and the wheel step's. The Python module's
# other variants differ by ISA flags only: the wheel step compiles each with
# g++ -Werror (the amxbf16 one could not run here, and cost 3 CPU-minutes).
#
# BIAFFINE_TEST_SCALE (default here 0.25) shrinks the heavy loops of the tests
# that read it, to keep the run within CI time.
set -euo pipefail
cd "$(dirname "$0")/.."
BIAFFINE_WITH_BLAS=1 BIAFFINE_EXTRA_PACKAGES="clang libclang-rt-14-dev ${BIAFFINE_EXTRA_PACKAGES:-}" \
  bash scripts/install_deps.sh

export BIAFFINE_TEST_SCALE=${BIAFFINE_TEST_SCALE:-0.25}
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:strict_string_checks=1:detect_stack_use_after_return=1:check_initialization_order=1:strict_init_order=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}

# -g1 (functions and line tables, no variable info): enough for the
# sanitizers' stack traces, and a much faster build than full -g. The benches
# no test runs are here for clang's -Werror only: -O0 (bench_kernels 20 s of
# CPU against 133 s at -O1, bench_memory's test-run one stays at -O1; the
# examples stay at -O1 too: at -O0 their --quick runs take minutes). The
# kernel-variant tests at -O0 too (BIAFFINE_VARIANT_TEST_OPTIMIZATION: small
# shapes; 4 of their 6 CPU-minutes here were the -O1 compile), and the
# compute group (BIAFFINE_TEST_OPTIMIZATION_compute: 216 s of CPU to build
# and run at -O0 against 280 at -O1; tests/CMakeLists.txt).
source scripts/cmake_generator.sh
cmake_generator build-san
cmake -S . -B build-san "${gen[@]}" -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g1" \
  "-DCMAKE_CXX_FLAGS=-DBIAFFINE_NO_GEMM_KERNEL -DBIAFFINE_HUGE_PAGE_MIN_BYTES=0 -DBIAFFINE_CACHED_BLOCK_MIN_BYTES=0" \
  -DBIAFFINE_SANITIZE=address,undefined -DBIAFFINE_WERROR=ON \
  -DBIAFFINE_BUILD_PYTHON=ON -DBIAFFINE_PYTHON_VARIANTS=avx2 \
  -DBIAFFINE_BUILD_TESTS=ON -DBIAFFINE_BUILD_EXAMPLES=ON -DBIAFFINE_BUILD_BENCH=ON -DBIAFFINE_BUILD_FUZZ=OFF \
  -DBIAFFINE_COMPILE_ONLY_BENCH_OPTIMIZATION=-O0 -DBIAFFINE_VARIANT_TEST_OPTIMIZATION=-O0 -DBIAFFINE_TEST_OPTIMIZATION_compute=-O0 \
  -DBIAFFINE_CHECK_HEADERS=OFF -DBIAFFINE_TEST_ODR=OFF >/dev/null
# Keep going after a failing target, so one run reports every warning.
cmake --build build-san -j2 -- $(keep_going build-san)
ctest --test-dir build-san --output-on-failure -j2 --timeout 1500 -LE package
