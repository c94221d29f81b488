"""Picks the ISA variant of the C++ extension when biaffine is imported.

The package carries the extension compiled several times from the same
sources (python/CMakeLists.txt), as ``_biaffine_<variant>``; a variant built
for a wider ISA than the CPU has would die with SIGILL, so the CPU is asked
first (``biaffine._cpu``, compiled for plain x86-64: cpuid, and xgetbv for
whether the OS saves the AVX / AVX-512 registers). The widest variant the CPU
runs is loaded and registered as ``biaffine._biaffine``. The environment
variable ``BIAFFINE_ISA=<variant>`` forces one (a narrower one, e.g. to test
it); forcing one this CPU cannot run, one not built, or an unknown name raises
:class:`ISAError` (an ImportError) at import.
"""
import importlib
import importlib.machinery
import os
import sys

ENV = "BIAFFINE_ISA"

# x86-64-v3 includes v2 (SSE4.2, POPCNT among it): a CPU model that masks
# those but shows AVX2 would take SIGILL, not an ISAError, without them here.
_AVX2 = ("sse4_2", "popcnt", "avx", "avx2", "fma", "bmi1", "bmi2", "f16c", "movbe", "abm")
_AVX512 = _AVX2 + ("avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl")
# Each variant, narrowest first, and what it needs from the CPU (and its OS),
# named as in /proc/cpuinfo. python/CMakeLists.txt has the matching flags:
# avx2 = x86-64-v3, avx512 = x86-64-v4, avx512bf16 = x86-64-v4 + AVX512_BF16,
# amxbf16 = that + AMX-TILE and AMX-BF16.
VARIANTS = {
    "generic": (),
    "avx2": _AVX2,
    "avx512": _AVX512,
    "avx512bf16": _AVX512 + ("avx512_bf16",),
    "amxbf16": _AVX512 + ("avx512_bf16", "amx_tile", "amx_bf16"),
}


class ISAError(ImportError):
    """No variant of the extension fits: the one BIAFFINE_ISA names is unknown,
    not built, or needs what this CPU lacks; or the CPU runs none."""


def built_variants(directory=None):
    """The variants whose extension file is in the package, narrowest first."""
    directory = directory or os.path.dirname(os.path.abspath(__file__))
    names = set(os.listdir(directory))
    return [v for v in VARIANTS
            if any(f"_biaffine_{v}{suffix}" in names for suffix in importlib.machinery.EXTENSION_SUFFIXES)]


def missing(variant, features):
    """What `variant` needs that `features` (name -> bool) lacks."""
    return [f for f in VARIANTS[variant] if not features.get(f)]


def choose(built, features, forced=None):
    """The variant to load: `forced` (BIAFFINE_ISA's value) if given and
    runnable, else the widest of `built` that `features` allows.

    Raises ISAError saying what is wrong and what would work."""
    runnable = [v for v in built if not missing(v, features)]
    widest = runnable[-1] if runnable else None
    if forced:
        v = forced.strip().lower()
        if v not in VARIANTS:
            raise ISAError(f"{ENV}={forced!r}: no such variant (known: {', '.join(VARIANTS)}; "
                           f"built into this package: {', '.join(built) or 'none'})")
        if v not in built:
            raise ISAError(f"{ENV}={forced!r}: this package has no {v} variant "
                           f"(built: {', '.join(built) or 'none'}; python/CMakeLists.txt's BIAFFINE_PYTHON_VARIANTS)")
        lack = missing(v, features)
        if lack:
            raise ISAError(f"{ENV}={forced!r}: this CPU (or its OS) lacks {', '.join(lack)}, which the {v} variant "
                           f"needs; the widest variant it runs is {widest or 'none'}")
        return v
    if widest is None:
        narrowest = built[0] if built else None
        need = ", ".join(missing(narrowest, features)) if narrowest else "a built extension"
        raise ISAError(f"biaffine: this CPU (or its OS) lacks {need}, which even the narrowest variant "
                       f"({narrowest or 'none built'}) needs")
    return widest


class _State:
    variant = None
    forced = None
    built = ()
    features = {}


def load(package):
    """Loads the chosen variant as `<package>._biaffine` and returns it."""
    from . import _cpu

    _State.features = dict(_cpu.features())
    _State.built = built_variants()
    _State.forced = os.environ.get(ENV) or None
    _State.variant = choose(_State.built, _State.features, _State.forced)
    module = importlib.import_module(f"{package}._biaffine_{_State.variant}")
    sys.modules[f"{package}._biaffine"] = module
    setattr(sys.modules[package], "_biaffine", module)
    return module


def _cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform

    return platform.processor() or "unknown"


def _loaded_blas():
    """Shared libraries mapped into this process that look like a BLAS,
    other than numpy's own."""
    libs = set()
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                path = line.split()[-1] if len(line.split()) >= 6 else ""
                base = os.path.basename(path).lower()
                if any(k in base for k in ("blas", "blis", "mkl")) and "numpy" not in path and "scipy" not in path:
                    libs.add(path)
    except OSError:
        pass
    return sorted(libs)


def info():
    """What this installation of biaffine runs, as a dict:

    version, the variant in use (and whether BIAFFINE_ISA forced it), the
    variants built and those this CPU runs, the ISA extensions the variant
    was compiled for, the backend running each operation per dtype
    (``backends["float32"]["name"]`` / ``["operations"]``; ``["bf16"]``: what
    runs a float32 scorer's ``precision="bf16"`` inference: AMX tiles,
    VDPBF16PS, or emulated on the fp32 kernels), the BLAS if any,
    the compiler and pybind11 versions it was built with,
    the CPU's model and ISA extensions, and the extension's file."""
    module = sys.modules[f"{__package__}._biaffine"]
    b = module._build_info()
    blas = None
    if b["blas"]:
        blas = {"cblas": True, "libraries": _loaded_blas()}
    return {
        "version": module.__version__,
        "variant": _State.variant,
        "forced_by": f"{ENV}={_State.forced}" if _State.forced else None,
        "variants_built": list(_State.built),
        "variants_runnable": [v for v in _State.built if not missing(v, _State.features)],
        "compiled_isa": list(b["compiled_isa"]),
        "backends": {k: dict(v) for k, v in b["backends"].items()},
        "blas": blas,
        "abi_tag": b["abi_tag"],
        "compiler": b["compiler"],
        "pybind11": b["pybind11"],
        "cpu": {"model": _cpu_model(), "isa": sorted(k for k, v in _State.features.items() if v)},
        "extension": getattr(module, "__file__", None),
        "python": sys.version.split()[0],
    }


def format_info(d=None):
    """info() as text, as ``python -m biaffine`` prints it."""
    d = d or info()
    lines = [
        f"biaffine {d['version']}",
        f"variant:    {d['variant']}" + (f" (forced by {d['forced_by']})" if d["forced_by"] else " (the widest this CPU runs)"),
        f"built:      {', '.join(d['variants_built'])}; this CPU runs: {', '.join(d['variants_runnable'])}",
        f"compiled:   {' '.join(d['compiled_isa']) or 'baseline'} ({d['compiler']}; pybind11 {d['pybind11']})",
    ]
    if d["abi_tag"]:
        lines.append(f"ABI tag:    {d['abi_tag']}")
    for dtype, b in d["backends"].items():
        lines.append(f"{dtype}:    {b['name']}: {b['operations']}")
        if b.get("bf16"):
            lines.append(f"{dtype} precision='bf16': {b['bf16']}")
    if d["blas"]:
        lines.append(f"BLAS:       CBLAS ({', '.join(d['blas']['libraries']) or 'library not identified'})")
    else:
        lines.append("BLAS:       none")
    lines.append(f"CPU:        {d['cpu']['model']}")
    lines.append(f"CPU ISA:    {' '.join(d['cpu']['isa'])}")
    lines.append(f"extension:  {d['extension']}")
    lines.append(f"Python:     {d['python']}")
    return "\n".join(lines)
