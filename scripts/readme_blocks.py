#!/usr/bin/env python3
"""Runs the README's quick starts, so that they cannot rot.

    scripts/readme_blocks.py --work DIR [--readme README.md] [--python-path build/python]
                             [--cxx g++] [--max-lines 250]

Every ```cpp block of the README is a whole program: it is compiled with the
project's headers (-Werror) and run. Every ```python block runs with
/usr/bin/python3 and PYTHONPATH set to the built module. Blocks of any other
language (sh, cmake: install steps) are never run. Fails, saying why, when
the README is longer than --max-lines, links to a file that does not exist,
or holds no C++ or no Python block (a
rewrite must not silently turn this check off), or when a block fails to
compile or exits non-zero.
"""
import argparse
import os
import pathlib
import re
import subprocess
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
# An opening fence (```lang, up to 3 spaces in) to the next closing fence.
FENCE = re.compile(r"^ {0,3}```([A-Za-z0-9_+-]*)[^\n]*\n(.*?)^ {0,3}```[ \t]*$", re.S | re.M)


def fail(msg):
    print(f"readme_blocks: FAILED: {msg}", file=sys.stderr)
    sys.exit(1)


def blocks(text):
    """(language, first line number, code) of every fenced block."""
    for m in FENCE.finditer(text):
        yield m.group(1).lower(), text.count("\n", 0, m.start()) + 2, m.group(2)


def run(cmd, what, env=None):
    start = time.time()
    print(f"$ {' '.join(cmd)}", flush=True)
    r = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    sys.stdout.write(r.stdout)
    if r.returncode != 0:
        fail(f"{what} exited with {r.returncode}")
    print(f"({what}: ok, {time.time() - start:.1f} s)", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--readme", default=str(ROOT / "README.md"))
    ap.add_argument("--work", required=True, help="folder for the extracted blocks and the binaries")
    ap.add_argument("--python-path", default=str(ROOT / "build" / "python"),
                    help="PYTHONPATH holding the built biaffine package")
    ap.add_argument("--python", default="/usr/bin/python3")
    ap.add_argument("--cxx", default=os.environ.get("CXX", "g++"))
    ap.add_argument("--max-lines", type=int, default=250)
    args = ap.parse_args()

    readme = pathlib.Path(args.readme)
    text = readme.read_text(encoding="utf-8")
    n_lines = len(text.splitlines())
    if n_lines > args.max_lines:
        fail(f"{readme} has {n_lines} lines, more than {args.max_lines}: move detail to docs/")
    print(f"{readme}: {n_lines} lines (at most {args.max_lines})")

    # Relative links (mkdocs does not see the README): the file must exist.
    prose = FENCE.sub("", text)
    dead = [t for t in re.findall(r"\]\(([^)\s]+)\)", prose)
            if not re.match(r"[a-z][a-z0-9+.-]*:|#", t) and not (readme.parent / t.split("#")[0]).exists()]
    if dead:
        fail(f"{readme} links to files that do not exist: {', '.join(dead)}")

    found = list(blocks(text))
    cpp = [(line, code) for lang, line, code in found if lang in ("cpp", "c++")]
    py = [(line, code) for lang, line, code in found if lang == "python"]
    skipped = sorted({lang or "(none)" for lang, _, _ in found if lang not in ("cpp", "c++", "python")})
    if not cpp:
        fail(f"{readme} has no ```cpp block: the C++ quick start is gone or its fence renamed")
    if not py:
        fail(f"{readme} has no ```python block: the Python quick start is gone or its fence renamed")
    print(f"{len(cpp)} C++ and {len(py)} Python block(s) to run; not run: {', '.join(skipped) or 'nothing'}")

    work = pathlib.Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    for i, (line, code) in enumerate(cpp, 1):
        src = work / f"readme_{i}.cpp"
        src.write_text(f'#line {line} "{readme.name}"\n' + code, encoding="utf-8")
        exe = work / f"readme_{i}"
        run([args.cxx, "-std=c++17", "-O1", "-march=native", "-Wall", "-Wextra", "-Wpedantic", "-Werror",
             "-I", str(ROOT / "include"), "-isystem", "/usr/include/eigen3", str(src), "-o", str(exe)],
            f"compiling the C++ block at {readme.name}:{line}")
        run([str(exe)], f"running the C++ block at {readme.name}:{line}")
    env = dict(os.environ, PYTHONPATH=args.python_path)
    for i, (line, code) in enumerate(py, 1):
        src = work / f"readme_{i}.py"
        # Blank lines first, so that a traceback's line numbers are the README's.
        src.write_text("\n" * (line - 1) + code, encoding="utf-8")
        run([args.python, str(src)], f"running the Python block at {readme.name}:{line}", env)
    print("readme_blocks: every quick start compiled and ran")


if __name__ == "__main__":
    main()
