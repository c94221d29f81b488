#!/usr/bin/env bash
# Builds and runs the main job: score a generated document with the
# split-batched pipeline and print what it did (see examples/score_document.cpp).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release
cmake --build build -j2 --target score_document
./build/examples/score_document "$@"
