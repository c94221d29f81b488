#!/usr/bin/env bash
# Builds every target of the project (tests, examples, the benches that can be
# built here) with -Werror. The fuzz targets are built with -Werror by
# scripts/fuzz.sh (clang).
#
#   bash scripts/ci_werror.sh gcc     g++, Release, in build/ (the build the
#                                     README's test command then tests: it keeps
#                                     BIAFFINE_WERROR=ON in the CMake cache)
#   bash scripts/ci_werror.sh clang   clang++, compile only, in build-clang/
set -euo pipefail
cd "$(dirname "$0")/.."

# Keep going after a failing target so one run reports every warning.
keep_going() {
  if [ -f "$1/build.ninja" ]; then echo "-k 0"; else echo "-k"; fi
}

case "${1:-}" in
  gcc)
    bash scripts/install_deps.sh
    cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DBIAFFINE_WERROR=ON >/dev/null
    cmake --build build -j2 -- $(keep_going build)
    ;;
  clang)
    BIAFFINE_EXTRA_PACKAGES="clang libclang-rt-14-dev ${BIAFFINE_EXTRA_PACKAGES:-}" bash scripts/install_deps.sh
    # No build type (no -O, no -g): the fastest compile; clang's warnings do
    # not depend on the optimisation level.
    cmake -S . -B build-clang -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE= -DBIAFFINE_WERROR=ON \
      -DBIAFFINE_BUILD_TESTS=ON -DBIAFFINE_BUILD_EXAMPLES=ON -DBIAFFINE_BUILD_BENCH=ON -DBIAFFINE_BUILD_FUZZ=OFF >/dev/null
    cmake --build build-clang -j2 -- $(keep_going build-clang)
    ;;
  *)
    echo "usage: $0 gcc|clang" >&2
    exit 2
    ;;
esac
