#!/usr/bin/env bash
# The documentation, as CI checks it:
#   1. `mkdocs build --strict` (mkdocs.yml at the top; the tools pinned in
#      docs/requirements.txt, installed into a venv under build-docs/ and
#      reused while that file is unchanged): a page left out of the nav, a dead
#      link or a missing anchor fails;
#   2. the README's quick starts (scripts/readme_blocks.py): the C++ block
#      compiled with the project's headers and run, the Python block run with
#      /usr/bin/python3 on the built module; the README at most 250 lines.
# The Python module comes from build/python (the test step's build; another
# folder with BIAFFINE_DOCS_BUILD_DIR). Where it is missing, outside CI this
# script builds only the module in build-docs/module; in CI (CI=true) it fails,
# since the earlier step should have built it.
# Without PyPI it prints SKIPPED and exits 0, or fails when CI=true.
set -euo pipefail
cd "$(dirname "$0")/.."
out=build-docs
mkdir -p "$out"
py=/usr/bin/python3

skip() {
  if [ "${CI:-}" = "true" ]; then
    echo "ci_docs: FAILED (CI=true, so not skipped): $1" >&2
    exit 1
  fi
  echo "SKIPPED: $1"
  exit 0
}

# 1. The site.
venv=$out/venv
stamp=$venv/requirements.sha256
want=$(sha256sum docs/requirements.txt | cut -d' ' -f1)
if [ ! -x "$venv/bin/mkdocs" ] || [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  rm -rf "$venv"
  if ! $py -m venv "$venv" 2>"$out/venv.err"; then
    skip "cannot create a venv with $py (Debian: apt-get install python3-venv): $(tail -1 "$out/venv.err")"
  fi
  if ! "$venv/bin/pip" install -q --disable-pip-version-check -r docs/requirements.txt 2>"$out/pip.err"; then
    skip "cannot install the pinned mkdocs (docs/requirements.txt) from PyPI: $(tail -1 "$out/pip.err")"
  fi
  echo "$want" > "$stamp"
fi
echo "== mkdocs build --strict ($("$venv/bin/mkdocs" --version | cut -d' ' -f1-3))"
"$venv/bin/mkdocs" build --strict --site-dir "$out/site"
echo "ci_docs: site in $out/site ($(find "$out/site" -name '*.html' | wc -l) HTML files)"

# 2. The README's code blocks.
module_dir=${BIAFFINE_DOCS_BUILD_DIR:-build}/python
if ! ls "$module_dir"/biaffine/_biaffine_*.so > /dev/null 2>&1; then
  if [ "${CI:-}" = "true" ]; then
    echo "ci_docs: FAILED: no Python module in $module_dir/biaffine (CI builds it in the test step, scripts/test.sh, before this one; or set BIAFFINE_DOCS_BUILD_DIR)" >&2
    exit 1
  fi
  echo "== $module_dir/biaffine is missing: building only the Python module in $out/module"
  cmake -S . -B "$out/module" -G Ninja -DCMAKE_BUILD_TYPE=Release -DBIAFFINE_BUILD_TESTS=OFF \
    -DBIAFFINE_BUILD_BENCH=OFF -DBIAFFINE_BUILD_EXAMPLES=OFF -DBIAFFINE_PYTHON_VARIANTS=avx2 > "$out/module.log"
  cmake --build "$out/module" -j2 --target biaffine_python >> "$out/module.log"
  module_dir=$out/module/python
fi
echo "== the README's quick starts (Python module: $module_dir)"
$py scripts/readme_blocks.py --work "$out/readme" --python-path "$(realpath "$module_dir")" --python "$py"
