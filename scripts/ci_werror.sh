#!/usr/bin/env bash
# Builds every target of the project (tests, examples, the benches that can be
# built here) with -Werror. The fuzz targets are built with -Werror by
# scripts/fuzz.sh (clang).
#
#   bash scripts/ci_werror.sh gcc     g++, Release, in build/ (the build the
#                                     README's test command then tests: it keeps
#                                     BIAFFINE_WERROR=ON in the CMake cache)
#   bash scripts/ci_werror.sh clang   clang++, in build-clang/, with the optional
#                                     BLAS backend on (OpenBLAS): compiles every
#                                     target, then runs the whole test suite on
#                                     that build (the BLAS backend's only run;
#                                     -O0, so the heavy loops at
#                                     BIAFFINE_TEST_SCALE=0.25 as under the
#                                     sanitizers; the package consumers are left
#                                     to the Release run)
#   bash scripts/ci_werror.sh avx512  g++ for an AVX-512 target with AVX512_BF16
#                                     and AMX (-march=skylake-avx512 -mavx512bf16
#                                     -mamx-tile -mamx-bf16: the bf16 kernels of
#                                     avx512_bf16*.hpp and amx_bf16_gemm.hpp too),
#                                     Release, every target, compile and link
#                                     only (nothing AVX-512 can run on a CPU
#                                     without it), in build-avx512/: the
#                                     code paths Eigen takes there, and GCC
#                                     12's false positives on them (bug 105593),
#                                     whatever CPU CI happens to run on;
#                                     BIAFFINE_WITH_ONEDNN=1 adds oneDNN and
#                                     bench_bf16
set -euo pipefail
cd "$(dirname "$0")/.."

# Ninja for a new build folder where it is installed (install_deps.sh
# installs it); an existing folder keeps the generator it was made with.
generator() {
  if [ ! -f "$1/CMakeCache.txt" ] && command -v ninja >/dev/null; then echo "-G Ninja"; fi
}
# Keep going after a failing target so one run reports every warning.
keep_going() {
  if [ -f "$1/build.ninja" ]; then echo "-k 0"; else echo "-k"; fi
}

case "${1:-}" in
  gcc)
    bash scripts/install_deps.sh
    cmake -S . -B build $(generator build) -DCMAKE_BUILD_TYPE=Release -DBIAFFINE_WERROR=ON >/dev/null
    cmake --build build -j2 -- $(keep_going build)
    ;;
  clang)
    BIAFFINE_WITH_BLAS=1 BIAFFINE_EXTRA_PACKAGES="clang libclang-rt-14-dev ${BIAFFINE_EXTRA_PACKAGES:-}" \
      bash scripts/install_deps.sh
    # No build type (no -O, no -g): the fastest compile; clang's warnings do
    # not depend on the optimisation level.
    # The Python variants at both ends (a native build makes only those this
    # CPU runs): clang's warnings on the AVX2 and the AVX-512 + AMX paths of
    # the bindings; g++ compiles the plain AVX-512 one (avx512 below).
    cmake -S . -B build-clang $(generator build-clang) -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE= -DBIAFFINE_WERROR=ON \
      -DBIAFFINE_WITH_BLAS=ON "-DBIAFFINE_PYTHON_VARIANTS=avx2;amxbf16" \
      -DBIAFFINE_BUILD_TESTS=ON -DBIAFFINE_BUILD_EXAMPLES=ON -DBIAFFINE_BUILD_BENCH=ON -DBIAFFINE_BUILD_FUZZ=OFF >/dev/null
    cmake --build build-clang -j2 -- $(keep_going build-clang)
    BIAFFINE_TEST_SCALE=${BIAFFINE_TEST_SCALE:-0.25} \
      ctest --test-dir build-clang --output-on-failure -j2 --timeout 1500 -LE package
    ;;
  avx512)
    bash scripts/install_deps.sh
    onednn=OFF
    if [ "${BIAFFINE_WITH_ONEDNN:-0}" = 1 ]; then onednn=ON; fi
    # -O2 rather than -O3: the same inlining of Eigen's AVX-512 packets (where
    # GCC's warnings come from) in less compile time.
    # The Python variants of the AVX-512 family only (avx2 is build/'s).
    cmake -S . -B build-avx512 $(generator build-avx512) -DCMAKE_BUILD_TYPE=Release "-DCMAKE_CXX_FLAGS_RELEASE=-O2 -DNDEBUG" \
      "-DBIAFFINE_PYTHON_VARIANTS=avx512;amxbf16" \
      -DBIAFFINE_NATIVE=OFF "-DCMAKE_CXX_FLAGS=-march=skylake-avx512 -mavx512bf16 -mamx-tile -mamx-bf16" -DBIAFFINE_WERROR=ON \
      -DBIAFFINE_WITH_ONEDNN=$onednn \
      -DBIAFFINE_BUILD_TESTS=ON -DBIAFFINE_BUILD_EXAMPLES=ON -DBIAFFINE_BUILD_BENCH=ON -DBIAFFINE_BUILD_FUZZ=OFF -DBIAFFINE_CHECK_HEADERS=OFF >/dev/null
    cmake --build build-avx512 -j2 -- $(keep_going build-avx512)
    ;;
  *)
    echo "usage: $0 gcc|clang|avx512" >&2
    exit 2
    ;;
esac
