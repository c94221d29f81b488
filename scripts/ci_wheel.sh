#!/usr/bin/env bash
# The Python package as a user gets it: `pip wheel .` in a fresh venv of
# Debian's python3, the wheel installed into another fresh venv, `python -m
# biaffine`, then the Python tests on that install, once per ISA variant this
# CPU runs (BIAFFINE_ISA), with the newest numpy and again with numpy 1.x.
# Needs PyPI (scikit-build-core, pybind11, numpy, pytest, thinc); without it
# prints SKIPPED. Work dir: build-wheel/ (the CMake build of the wheel stays in
# build/wheel-<tag>/ and is reused by the next run on the same checkout).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh
w=build-wheel
rm -rf "$w"
mkdir -p "$w"
py=/usr/bin/python3
$py -m venv "$w/build-venv"
# The build tools in a venv of their own, not pip's throw-away isolated env:
# their paths stay the same from run to run, so the CMake build is reused.
if ! "$w/build-venv/bin/pip" install -q "scikit-build-core>=0.10" "pybind11>=2.10" 2>"$w/pip.err"; then
  echo "SKIPPED: cannot install scikit-build-core and pybind11 from PyPI: $(tail -1 "$w/pip.err")"
  exit 0
fi
"$w/build-venv/bin/pip" wheel -q --no-build-isolation --no-deps -w "$w/dist" .
wheel=$(ls "$w"/dist/biaffine-*.whl)
echo "ci_wheel: built $wheel ($(du -k "$wheel" | cut -f1) KiB)"

$py -m venv "$w/run-venv"
# ml_dtypes: output='bfloat16' returns its arrays (tests/python/test_bf16.py
# checks the error without it on Debian's python3, the arrays with it here).
"$w/run-venv/bin/pip" install -q "$wheel" pytest thinc ml_dtypes
run() { (cd "$w" && "run-venv/bin/python" "$@"); }  # outside the source tree: the installed package only
run -m biaffine
variants=$(run -c "import biaffine; print(' '.join(biaffine.info()['variants_runnable']))")
tests=$PWD/tests/python
for v in $variants; do
  echo "ci_wheel: tests on the installed wheel, BIAFFINE_ISA=$v, numpy $(run -c 'import numpy; print(numpy.__version__)')"
  (cd "$w" && BIAFFINE_ISA=$v BIAFFINE_TEST_DATA_DIR=$PWD/../tests/data run-venv/bin/python -m pytest -q -p no:cacheprovider "$tests")
done
# thinc 9.1 needs numpy 2; 9.0 runs on either (ml_dtypes 0.6 and later too).
"$w/run-venv/bin/pip" install -q "numpy<2" "thinc<9.1" "ml_dtypes<0.6"
echo "ci_wheel: tests on the installed wheel, numpy $(run -c 'import numpy; print(numpy.__version__)')"
(cd "$w" && BIAFFINE_TEST_DATA_DIR=$PWD/../tests/data run-venv/bin/python -m pytest -q -p no:cacheprovider "$tests")
