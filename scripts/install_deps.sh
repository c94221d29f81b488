#!/usr/bin/env bash
# Installs what biaffine needs on Debian 12, only what is missing. Idempotent;
# needs root (or sudo) only when something is missing.
set -euo pipefail

need=()
have_pkg() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }
# The Python module and its tests (python/, tests/python/) build and run
# against Debian's /usr/bin/python3 with these; python3-venv for `python3 -m venv` (pip install .).
# BIAFFINE_WITH_BLAS=1 (the CMake option of that name): OpenBLAS's CBLAS too.
blas=""
if [ "${BIAFFINE_WITH_BLAS:-0}" = 1 ]; then blas="libopenblas-dev"; fi
# BIAFFINE_WITH_ONEDNN=1 (the CMake option of that name): oneDNN for bench_bf16.
# (Debian's dnnl CMake package asks for OpenCL even for the CPU engine.)
if [ "${BIAFFINE_WITH_ONEDNN:-0}" = 1 ]; then blas="$blas libdnnl-dev ocl-icd-opencl-dev opencl-c-headers"; fi
for p in cmake g++ make ninja-build libeigen3-dev libxtensor-dev catch2 libbenchmark-dev \
  python3-dev python3-numpy pybind11-dev python3-thinc python3-pytest python3-venv $blas ${BIAFFINE_EXTRA_PACKAGES:-}; do
  have_pkg "$p" || need+=("$p")
done
if [ ${#need[@]} -eq 0 ]; then
  exit 0
fi
echo "install_deps: installing ${need[*]}"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${need[@]}"
