#!/usr/bin/env bash
# The README's test command: builds what the test suite runs (Release) and
# runs it through ctest. Only what ctest runs is built (target
# biaffine_test_deps); `cmake --build build` builds everything, CI does.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh
source scripts/cmake_generator.sh
cmake_generator build
cmake -S . -B build "${gen[@]}" -DCMAKE_BUILD_TYPE=Release
if ! grep -q '^BIAFFINE_BUILD_PYTHON:BOOL=ON' build/CMakeCache.txt; then
  # Configure said why (its "biaffine: Python module: OFF: ..." line).
  echo "SKIPPED: the Python module and its tests (see configure's 'biaffine: Python module' line)"
  if [ "${CI:-}" = true ]; then exit 1; fi
fi
cmake --build build -j2 --target biaffine_test_deps
ctest --test-dir build --output-on-failure -j2
