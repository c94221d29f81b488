// python/src/build_info.cpp - `_build_info()` of the extension: what this ISA
// variant was compiled for and which backend runs each operation, for
// biaffine.info() (python/biaffine/_loader.py).
#include "common.hpp"

#include <biaffine/abi.hpp>
#include <biaffine/scorer.hpp>

#include <string>
#include <type_traits>
#include <utility>

#ifndef BIAFFINE_PY_VARIANT
#define BIAFFINE_PY_VARIANT "native"  // built outside python/CMakeLists.txt's variants
#endif

namespace biaffine_py {
namespace {

/// The ISA extensions the compiler targeted, as /proc/cpuinfo names them.
py::list compiled_isa()
{
    py::list l;
#if defined(__AVX2__)
    l.append("avx2");
#endif
#if defined(__FMA__)
    l.append("fma");
#endif
#if defined(__AVX512F__)
    l.append("avx512f");
#endif
#if defined(__AVX512BW__)
    l.append("avx512bw");
#endif
#if defined(__AVX512CD__)
    l.append("avx512cd");
#endif
#if defined(__AVX512DQ__)
    l.append("avx512dq");
#endif
#if defined(__AVX512VL__)
    l.append("avx512vl");
#endif
#if defined(__AVX512BF16__)
    l.append("avx512_bf16");
#endif
#if defined(__AMX_TILE__) || defined(__AMXTILE__)  // GCC's spelling, Clang's
    l.append("amx_tile");
#endif
#if defined(__AMX_BF16__) || defined(__AMXBF16__)
    l.append("amx_bf16");
#endif
    return l;
}

template <class T>
py::dict backend_info()
{
    // The backend the module's scorer of T computes with (its default).
    using S = biaffine::biaffine_scorer<T>;
    using B = std::decay_t<decltype(std::declval<const S&>().compute_backend())>;
    py::dict d;
    d["name"] = B::name;
    d["operations"] = B::operations;
    // What runs compute_precision::bf16 (float scorers only): AMX tiles,
    // VDPBF16PS, or the fp32 kernels on bf16-rounded operands.
    if constexpr (std::is_same<T, float>::value) d["bf16"] = S::bf16_arithmetic();
    return d;
}

}  // namespace

/// Adds `_build_info()` to the module.
void bind_build_info(py::module_& m)
{
    m.def("_build_info", []() {
        py::dict d;
        d["variant"] = BIAFFINE_PY_VARIANT;
        d["compiled_isa"] = compiled_isa();
        py::dict backends;
        backends["float32"] = backend_info<float>();
        backends["float64"] = backend_info<double>();
        d["backends"] = backends;
#if defined(BIAFFINE_USE_BLAS)
        d["blas"] = true;
#else
        d["blas"] = false;
#endif
        d["abi_tag"] = std::string(biaffine::abi_tag);
        d["compiler"] = __VERSION__;
        d["pybind11"] = PYBIND11_TOSTRING(PYBIND11_VERSION_MAJOR) "." PYBIND11_TOSTRING(
            PYBIND11_VERSION_MINOR) "." PYBIND11_TOSTRING(PYBIND11_VERSION_PATCH);
        return d;
    }, "What this variant of the extension was compiled for: ISA, the backend of each operation, BLAS.");
}

}  // namespace biaffine_py
