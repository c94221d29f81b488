#!/usr/bin/env bash
# g++ -Werror builds. clang++ -Werror is scripts/ci_sanitize.sh's build (with
# the sanitizers), the fuzz targets' scripts/fuzz.sh's (clang), and g++'s on
# the Python module's variants at -O3 the wheel step's (scripts/ci_wheel.sh).
#
#   bash scripts/ci_werror.sh gcc     g++, Release, in build/ (the build the
#                                     README's test command then tests: it keeps
#                                     BIAFFINE_WERROR=ON in the CMake cache),
#                                     with the compute group on OpenBLAS too
#   bash scripts/ci_werror.sh avx512  g++ for an AVX-512 target with AVX512_BF16
#                                     and AMX (-march=skylake-avx512 -mavx512bf16
#                                     -mamx-tile -mamx-bf16: the bf16 kernels of
#                                     avx512_bf16*.hpp and amx_bf16_gemm.hpp too),
#                                     Release, compile and link only (nothing
#                                     AVX-512 can run on a CPU without it), in
#                                     build-avx512/: the code paths Eigen takes
#                                     there, and GCC 12's false positives on
#                                     them (bug 105593), whatever CPU CI runs
#                                     on. What has ISA-dependent code: the
#                                     tests (every instantiation the examples
#                                     make, and more) and the kernel benches.
#                                     Left out, since built elsewhere with these
#                                     flags: the examples and bench_decode (the
#                                     public API only, as the tests), the Python
#                                     variants (the wheel step compiles avx512
#                                     and amxbf16 with -Werror at -O3).
#                                     BIAFFINE_WITH_ONEDNN=1 adds oneDNN and
#                                     bench_bf16
set -euo pipefail
cd "$(dirname "$0")/.."

source scripts/cmake_generator.sh

case "${1:-}" in
  gcc)
    # With the compute group on OpenBLAS too (BIAFFINE_TEST_BLAS_COMPUTE; the
    # test step runs it on this build).
    BIAFFINE_WITH_BLAS=1 bash scripts/install_deps.sh
    cmake_generator build
    cmake -S . -B build "${gen[@]}" -DCMAKE_BUILD_TYPE=Release -DBIAFFINE_WERROR=ON -DBIAFFINE_TEST_BLAS_COMPUTE=ON >/dev/null
    cmake --build build -j2 -- $(keep_going build)
    ;;
  avx512)
    bash scripts/install_deps.sh
    onednn=OFF
    if [ "${BIAFFINE_WITH_ONEDNN:-0}" = 1 ]; then onednn=ON; fi
    # -O2 rather than -O3: the same inlining of Eigen's AVX-512 packets (where
    # GCC's warnings come from) in less compile time.
    cmake_generator build-avx512
    cmake -S . -B build-avx512 "${gen[@]}" -DCMAKE_BUILD_TYPE=Release "-DCMAKE_CXX_FLAGS_RELEASE=-O2 -DNDEBUG" \
      -DBIAFFINE_BUILD_PYTHON=OFF \
      -DBIAFFINE_NATIVE=OFF "-DCMAKE_CXX_FLAGS=-march=skylake-avx512 -mavx512bf16 -mamx-tile -mamx-bf16" -DBIAFFINE_WERROR=ON \
      -DBIAFFINE_WITH_ONEDNN=$onednn \
      -DBIAFFINE_BUILD_TESTS=ON -DBIAFFINE_BUILD_EXAMPLES=OFF -DBIAFFINE_BUILD_BENCH=ON -DBIAFFINE_BUILD_FUZZ=OFF -DBIAFFINE_CHECK_HEADERS=OFF >/dev/null
    # The tests (and bench_memory, which a test runs), and the benches that
    # call kernels directly where this build has them. Where build/ (the gcc
    # step's, before this one in CI) is itself an AVX-512 + AVX512_BF16
    # target, g++ -Werror has seen every AVX-512 path there but AMX's: then
    # only the compute group (the bf16 kernels' and the AMX GEMM's tests) and
    # the kernel benches, about a third of the compile. (grep -c, not -q: -q
    # exits at the first match, g++ then dies of SIGPIPE, and pipefail makes
    # the test false now and then.)
    targets=(biaffine_test_deps)
    if grep -q '^BIAFFINE_TARGET_AVX512:INTERNAL=1' build/CMakeCache.txt 2> /dev/null \
        && grep -q '^BIAFFINE_WERROR:BOOL=ON' build/CMakeCache.txt \
        && echo | g++ -march=native -dM -E - 2> /dev/null | grep -c '__AVX512BF16__' > /dev/null; then
      echo "ci_werror avx512: build/ is an AVX-512 + AVX512_BF16 -Werror build: only the AMX-dependent targets here"
      targets=(tests_compute)
    fi
    for t in bench_kernels bench_vs_reference bench_bf16; do
      if cmake --build build-avx512 --target help | grep -qE "(^|\.\.\. )$t(:|$)"; then targets+=("$t"); fi
    done
    cmake --build build-avx512 -j2 --target "${targets[@]}" -- $(keep_going build-avx512)
    ;;
  *)
    echo "usage: $0 gcc|avx512 (clang -Werror: scripts/ci_sanitize.sh)" >&2
    exit 2
    ;;
esac
