#!/usr/bin/env bash
# The README's test command: builds what the test suite runs and runs it
# through ctest, in build-test/ (BIAFFINE_BUILD_DIR to change it). Only what
# ctest runs is built (target biaffine_test_deps). A test build: the tests,
# the examples and the benches it smoke-tests at -O1 like the tests
# (BIAFFINE_TOOLS_OPTIMIZATION), so their timings mean nothing there; build/
# (cmake -S . -B build -DCMAKE_BUILD_TYPE=Release) is the one to time and
# train with. CI runs this on its -Werror build/ (BIAFFINE_BUILD_DIR=build
# BIAFFINE_TOOLS_OPTIMIZATION=), where the examples and benches are at -O3.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh
dir=${BIAFFINE_BUILD_DIR:-build-test}
source scripts/cmake_generator.sh
cmake_generator "$dir"
cmake -S . -B "$dir" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release \
  "-DBIAFFINE_TOOLS_OPTIMIZATION=${BIAFFINE_TOOLS_OPTIMIZATION--O1}"
if ! grep -q '^BIAFFINE_BUILD_PYTHON:BOOL=ON' "$dir/CMakeCache.txt"; then
  # Configure said why (its "biaffine: Python module: OFF: ..." line).
  echo "SKIPPED: the Python module and its tests (see configure's 'biaffine: Python module' line)"
  if [ "${CI:-}" = true ]; then exit 1; fi
fi
cmake --build "$dir" -j2 --target biaffine_test_deps
ctest --test-dir "$dir" --output-on-failure -j2
