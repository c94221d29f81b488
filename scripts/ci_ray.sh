#!/usr/bin/env bash
# examples/python/parse_corpus_ray.py's tests (tests/ray) as a user runs the
# script: the biaffine wheel installed with its [ray] extra (Ray Data, thinc,
# tqdm from PyPI) into a fresh venv of Debian's /usr/bin/python3, then pytest
# on tests/ray from outside the checkout (the installed package only).
#
#   bash scripts/ci_ray.sh
#
# The wheel: BIAFFINE_WHEEL, else the wheel step's repaired one
# (build-wheel/wheelhouse/biaffine-*.whl; under CI=true it must be there).
# Without a wheel, BIAFFINE_PYTHONPATH=<build>/python uses a CMake build's
# module instead (built with Debian's pybind11 2.10: numpy < 2, so pandas < 3,
# thinc < 9.1 and pyarrow < 20 are pinned). Without PyPI, a wheel or a module,
# or when pytest skips (Ray not importable): prints SKIPPED (fails under CI=true).
# Work dir: build-ray/ (ignored by git).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
w=build-ray
py=/usr/bin/python3
skip() {
  echo "SKIPPED: $1"
  if [ "${CI:-}" = true ]; then exit 1; fi
  exit 0
}
t0=$SECONDS
wheel=${BIAFFINE_WHEEL:-}
if [ -z "$wheel" ]; then
  # (|| true: under pipefail a failing ls would end the script here, silently)
  wheel=$(ls build-wheel/wheelhouse/biaffine-*.whl 2>/dev/null | head -1 || true)
fi
pythonpath=
if [ -n "$wheel" ]; then
  [ -f "$wheel" ] || { echo "ci_ray: BIAFFINE_WHEEL=$wheel is not a file" >&2; exit 1; }
  wheel=$(realpath "$wheel")
elif [ -n "${BIAFFINE_PYTHONPATH:-}" ] && [ "${CI:-}" != true ]; then
  pythonpath=$(realpath "$BIAFFINE_PYTHONPATH")
else
  skip "no biaffine wheel (build-wheel/wheelhouse: run scripts/ci_wheel.sh, or set BIAFFINE_WHEEL or BIAFFINE_PYTHONPATH)"
fi
rm -rf "$w"
mkdir -p "$w"
$py -m venv "$w/venv"
if [ -n "$wheel" ]; then
  install=("$wheel[ray]" pytest)
else
  install=("ray[data]>=2.9" tqdm pytest "numpy<2" "pandas<3" "thinc<9.1" "pyarrow<20")
fi
if ! "$w/venv/bin/pip" install -q "${install[@]}" 2>"$w/pip.err"; then
  skip "cannot install ${install[*]} from PyPI: $(tail -1 "$w/pip.err")"
fi
echo "ci_ray: installed $("$w/venv/bin/python" -c 'import ray; print("ray", ray.__version__)') in $((SECONDS - t0)) s"
# -rs: a skip's reason in the output (SKIPPED [...]), which fails the step under CI=true.
set +e
(cd "$w" && PYTHONPATH=$pythonpath PYTHONDONTWRITEBYTECODE=1 venv/bin/python -m pytest -q -rs -p no:cacheprovider \
  "$root/tests/ray") | tee "$w/pytest.log"
status=${PIPESTATUS[0]}
set -e
[ "$status" -eq 0 ] || exit "$status"
if grep -q "SKIPPED \[" "$w/pytest.log"; then
  skip "tests/ray skipped: $(grep -m1 'SKIPPED \[' "$w/pytest.log")"
fi
echo "ci_ray: passed in $((SECONDS - t0)) s"
