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
#                                     build-avx512/, whatever CPU CI runs on:
#                                     what has code of its own per ISA (the
#                                     compute group's tests, the kernel
#                                     variants' tests, the kernel benches) and
#                                     GCC 12's false positives on it (bug
#                                     105593). The rest of the library's
#                                     AVX-512 + AMX code (the public API: what
#                                     the examples and the other tests
#                                     instantiate) is compiled with -Werror at
#                                     -O3 by the wheel step's avx512 and
#                                     amxbf16 variants of the Python module.
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
    # What has code of its own per ISA: the compute group (the AVX-512 and
    # bf16 kernels, the AMX GEMM, the backends that choose them), the kernel
    # variants' tests and the benches that call kernels directly. The rest
    # (scorer, layers, kinds, decoders: everything the public API
    # instantiates, Eigen's AVX-512 packets in it) gets g++ -Werror for
    # AVX-512 + AVX512_BF16 + AMX from the wheel step, whose avx512 and
    # amxbf16 variants compile the whole API at -O3; building the other
    # test groups here again cost 4.6 CPU-minutes on a CPU without AVX-512.
    help=$(cmake --build build-avx512 --target help)
    targets=(tests_compute)
    for t in $(grep -oE '(test_avx2_kernel_[a-z_]+|test_backend_no_zmm_small)' <<< "$help" | sort -u) \
        bench_kernels bench_vs_reference bench_bf16; do
      if grep -qE "(^|\.\.\. )$t(:|$)" <<< "$help"; then targets+=("$t"); fi
    done
    echo "ci_werror avx512: ${targets[*]}"
    cmake --build build-avx512 -j2 --target "${targets[@]}" -- $(keep_going build-avx512)
    ;;
  *)
    echo "usage: $0 gcc|avx512 (clang -Werror: scripts/ci_sanitize.sh)" >&2
    exit 2
    ;;
esac
