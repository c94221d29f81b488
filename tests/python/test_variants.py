# The ISA variants of the extension (python/biaffine/_loader.py): the CPU
# probe against /proc/cpuinfo, which variant loads (the widest this CPU runs,
# or the one BIAFFINE_ISA forces), that forcing one that cannot run raises, and
# what biaffine.info() / `python -m biaffine` report. ctest runs the whole
# Python suite once per variant (python_pytest_<variant>).
import json
import os
import pathlib
import re
import subprocess
import sys

import pytest

import biaffine
from biaffine import _cpu, _loader

ROOT = pathlib.Path(__file__).resolve().parents[2]
FORCED = os.environ.get("BIAFFINE_ISA") or None


def proc_cpuinfo_flags():
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("flags"):
                return set(line.split(":", 1)[1].split())
    raise AssertionError("/proc/cpuinfo has no flags line")


# What each variant needs, written out here apart from _loader's table: the
# x86-64-v3 and -v4 levels the variants are compiled for.
NEEDS = {
    "avx2": {"sse4_2", "popcnt", "avx", "avx2", "fma", "bmi1", "bmi2", "f16c", "movbe", "abm"},
    "avx512": {"sse4_2", "popcnt", "avx", "avx2", "fma", "bmi1", "bmi2", "f16c", "movbe", "abm",
               "avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl"},
}
NEEDS["avx512bf16"] = NEEDS["avx512"] | {"avx512_bf16"}
NEEDS["amxbf16"] = NEEDS["avx512bf16"] | {"amx_tile", "amx_bf16"}


def test_cpu_probe_matches_proc_cpuinfo():
    # Linux lists a feature only when the OS also enables its registers, as
    # the probe does with xgetbv.
    flags = proc_cpuinfo_flags()
    features = _cpu.features()
    named = [k for k in features if not k.startswith("os_")]
    assert len(named) >= 15
    for k in named:
        assert features[k] == (k in flags), k


def test_loaded_variant_is_forced_or_widest():
    flags = proc_cpuinfo_flags()
    built = _loader.built_variants()
    runnable = [v for v in NEEDS if v in built and NEEDS[v] <= flags]
    expected = FORCED or runnable[-1]
    d = biaffine.info()
    assert d["variant"] == expected
    assert d["forced_by"] == (f"BIAFFINE_ISA={FORCED}" if FORCED else None)
    assert sys.modules["biaffine._biaffine"] is biaffine._biaffine
    assert pathlib.Path(biaffine._biaffine.__file__).name.startswith(f"_biaffine_{expected}.")
    assert set(runnable) <= set(d["variants_runnable"])


def test_variant_compiled_for_its_isa():
    d = biaffine.info()
    compiled = set(d["compiled_isa"])
    if d["variant"] == "avx2":
        assert {"avx2", "fma"} <= compiled and "avx512f" not in compiled
    elif d["variant"].startswith("avx512") or d["variant"] == "amxbf16":
        assert {"avx2", "fma", "avx512f", "avx512bw", "avx512dq", "avx512vl"} <= compiled
        assert ("avx512_bf16" in compiled) == (d["variant"] != "avx512")
        assert ({"amx_tile", "amx_bf16"} <= compiled) == (d["variant"] == "amxbf16")
    # The ABI namespace (abi.hpp) names the ISA level the variant compiled for.
    assert d["abi_tag"] == biaffine.abi_tag and d["abi_tag"].endswith("_" + d["variant"])
    # float32 runs on the library's kernel on both x86 variants (backend.hpp)
    # unless BLAS is linked, or the build turned the kernel off
    # (BIAFFINE_NO_GEMM_KERNEL: CI's sanitizer build says so in the tests'
    # environment); double on Eigen or BLAS.
    kernel_off = os.environ.get("BIAFFINE_TEST_NO_GEMM_KERNEL") == "1"
    assert d["backends"]["float32"]["name"] == ("blas" if d["blas"] else "eigen" if kernel_off else "avx2")
    assert d["backends"]["float64"]["name"] == ("blas" if d["blas"] else "eigen")
    for b in d["backends"].values():
        assert "projections" in b["operations"]


def test_info_version_is_the_headers():
    text = (ROOT / "include" / "biaffine" / "version.hpp").read_text()
    parts = [re.search(rf"#define BIAFFINE_VERSION_{p} (\d+)", text).group(1) for p in ("MAJOR", "MINOR", "PATCH")]
    assert biaffine.info()["version"] == ".".join(parts) == biaffine.__version__


AVX2_CPU = {k: k in NEEDS["avx2"] for k in NEEDS["avx512"]}
AVX512_CPU = {k: True for k in NEEDS["avx512"]}


def test_choose_widest_runnable():
    assert _loader.choose(["avx2", "avx512"], AVX512_CPU) == "avx512"
    assert _loader.choose(["avx2", "avx512"], AVX2_CPU) == "avx2"
    # AVX2 shown but x86-64-v2's POPCNT masked (a VM's CPU model): no variant fits.
    with pytest.raises(_loader.ISAError):
        _loader.choose(["avx2", "avx512"], dict(AVX2_CPU, popcnt=False))
    assert _loader.choose(["avx2", "avx512", "avx512bf16"], AVX512_CPU) == "avx512"  # no avx512_bf16
    bf16_cpu = dict(AVX512_CPU, avx512_bf16=True)
    assert _loader.choose(["avx2", "avx512", "amxbf16"], bf16_cpu) == "avx512"  # no AMX
    assert _loader.choose(["avx2", "avx512", "amxbf16"], dict(bf16_cpu, amx_tile=True, amx_bf16=True)) == "amxbf16"
    assert _loader.choose(["avx2", "avx512"], AVX512_CPU, forced="AVX2") == "avx2"


@pytest.mark.parametrize("built, features, forced, message", [
    (["avx2", "avx512"], AVX2_CPU, "avx512", "lacks avx512f, avx512bw, avx512cd, avx512dq, avx512vl"),
    (["avx2", "avx512"], AVX512_CPU, "avx512bf16", "has no avx512bf16 variant"),
    (["avx2", "avx512"], AVX512_CPU, "sse9", "no such variant"),
    (["avx2", "avx512"], dict(AVX2_CPU, fma=False), None, "lacks fma"),
])
def test_choose_refuses(built, features, forced, message):
    with pytest.raises(biaffine.ISAError, match=message):
        _loader.choose(built, features, forced)
    assert issubclass(biaffine.ISAError, ImportError)


def run_python(args, isa):
    env = dict(os.environ)
    env.pop("BIAFFINE_ISA", None)
    if isa:
        env["BIAFFINE_ISA"] = isa
    return subprocess.run([sys.executable] + args, env=env, capture_output=True, text=True, timeout=120)


def test_forcing_what_cannot_run_fails_the_import():
    d = biaffine.info()
    # A variant this CPU lacks if there is one, else one not built here.
    unrunnable = [v for v in d["variants_built"] if v not in d["variants_runnable"]]
    isa = unrunnable[0] if unrunnable else next(v for v in _loader.VARIANTS if v not in d["variants_built"])
    r = run_python(["-c", "import biaffine"], isa)
    assert r.returncode != 0
    assert "ISAError" in r.stderr and f"BIAFFINE_ISA='{isa}'" in r.stderr, r.stderr


@pytest.mark.parametrize("variant", ["avx2", "avx512", "amxbf16"])
def test_python_m_biaffine_per_variant(variant):
    if variant not in biaffine.info()["variants_runnable"]:
        # Neither built nor runnable here: what the run must say instead.
        r = run_python(["-m", "biaffine"], variant)
        assert r.returncode != 0 and "ISAError" in r.stderr
        return
    r = run_python(["-m", "biaffine", "--json"], variant)
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["variant"] == variant and d["forced_by"] == f"BIAFFINE_ISA={variant}"
    r = run_python(["-m", "biaffine"], variant)
    assert r.returncode == 0, r.stderr
    assert re.search(rf"^variant: +{variant} \(forced by BIAFFINE_ISA={variant}\)$", r.stdout, re.M), r.stdout
    assert f"biaffine {biaffine.__version__}" in r.stdout
