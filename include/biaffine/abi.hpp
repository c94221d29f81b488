// biaffine/abi.hpp - the inline namespace that names this build's ABI.
//
// The library is header-only and its compute path is chosen at compile time
// (detail/compute/backend.hpp): two translation units built with different
// -m flags, or one with BIAFFINE_USE_BLAS and one without, compile different
// code for the same biaffine_scorer<float>. Under one name the linker would
// keep one of the copies for both units: a silent mix, and on a CPU without
// the kept copy's instructions a crash. Everything the library declares
// therefore lives in an inline namespace whose name encodes the version, the
// float backend and the ISA level, e.g.
//
//   biaffine::v0_1_0_avx2kernel_avx512bf16::biaffine_scorer<float>
//
// User code keeps writing biaffine::biaffine_scorer<float> (the inline
// namespace is transparent); only the symbols differ. Units of different
// ABIs cannot share objects (their types differ), and each has its own
// process-wide state (memory tracker, workspace arena, caches).
//
// Not encoded: the tuned numbers of config.hpp (keep them equal across the
// units of one program, as any macro that changes an inline function), and
// Eigen's own templates, which live in Eigen's namespace.
//
// The header opens namespaces with BIAFFINE_NAMESPACE_BEGIN and closes them
// with BIAFFINE_NAMESPACE_END; version.hpp alone stays outside (macros and a
// constant equal in every build, and abi.hpp reads its version).
#pragma once

#include "biaffine/config.hpp"
#include "biaffine/version.hpp"

// ------------------------------------------------ the compute choice

/// 1 when float runs on the AVX2/FMA GEMM kernel (avx2_backend.hpp) in this
/// build: the compiler targets AVX2 and FMA, BIAFFINE_NO_GEMM_KERNEL and
/// BIAFFINE_USE_BLAS are not defined, and on AVX-512 targets
/// BIAFFINE_AVX2_KERNEL_ON_AVX512 is 1. The one place this rule is written;
/// detail/compute/backend.hpp chooses the backend by it.
#if !defined(BIAFFINE_USE_BLAS) && defined(__AVX2__) && defined(__FMA__) && !defined(BIAFFINE_NO_GEMM_KERNEL) && \
    (!defined(__AVX512F__) || BIAFFINE_AVX2_KERNEL_ON_AVX512)
#define BIAFFINE_GEMM_KERNEL 1
#else
#define BIAFFINE_GEMM_KERNEL 0
#endif

/// The float backend in the ABI name: blas, avx2kernel or eigen (double
/// runs on Eigen, or on the BLAS with BIAFFINE_USE_BLAS).
#if defined(BIAFFINE_USE_BLAS)
#define BIAFFINE_ABI_BACKEND blas
#elif BIAFFINE_GEMM_KERNEL
#define BIAFFINE_ABI_BACKEND avx2kernel
#else
#define BIAFFINE_ABI_BACKEND eigen
#endif

/// The ISA level in the ABI name: the highest level the compiler targets
/// among those the library's code (its kernels, and Eigen's packets inside
/// its templates) branches on, plus "bf16" where __AVX512BF16__ is defined
/// and "amxbf16" where AMX-TILE and AMX-BF16 are too (the bf16 products then
/// run on amx_bf16_gemm.hpp).
#if defined(__AVX512F__) && defined(__AVX512BF16__) && BIAFFINE_DETAIL_AMX_TARGET
#define BIAFFINE_ABI_ISA amxbf16
#elif defined(__AVX512F__) && defined(__AVX512BF16__)
#define BIAFFINE_ABI_ISA avx512bf16
#elif defined(__AVX512F__)
#define BIAFFINE_ABI_ISA avx512
#elif defined(__AVX2__) && defined(__FMA__)
#define BIAFFINE_ABI_ISA avx2
#elif defined(__AVX__)
#define BIAFFINE_ABI_ISA avx
#elif defined(__SSE4_2__)
#define BIAFFINE_ABI_ISA sse4
#elif defined(__SSE2__)
#define BIAFFINE_ABI_ISA sse2
#elif defined(__ARM_NEON)
#define BIAFFINE_ABI_ISA neon
#else
#define BIAFFINE_ABI_ISA generic
#endif

// ------------------------------------------------ the namespace

#define BIAFFINE_ABI_JOIN_(major, minor, patch, backend, isa) v##major##_##minor##_##patch##_##backend##_##isa
#define BIAFFINE_ABI_JOIN(major, minor, patch, backend, isa) BIAFFINE_ABI_JOIN_(major, minor, patch, backend, isa)
#define BIAFFINE_ABI_STRING_(x) #x
#define BIAFFINE_ABI_STRING(x) BIAFFINE_ABI_STRING_(x)

/// The inline namespace's name, e.g. v0_1_0_avx2kernel_avx512bf16.
#define BIAFFINE_ABI_NAMESPACE                                                                         \
    BIAFFINE_ABI_JOIN(BIAFFINE_VERSION_MAJOR, BIAFFINE_VERSION_MINOR, BIAFFINE_VERSION_PATCH, \
                      BIAFFINE_ABI_BACKEND, BIAFFINE_ABI_ISA)
/// The same name as a string literal.
#define BIAFFINE_ABI_TAG BIAFFINE_ABI_STRING(BIAFFINE_ABI_NAMESPACE)

/// Open / close `namespace biaffine` with this build's inline namespace.
#define BIAFFINE_NAMESPACE_BEGIN \
    namespace biaffine {         \
    inline namespace BIAFFINE_ABI_NAMESPACE {
#define BIAFFINE_NAMESPACE_END \
    }                          \
    }

BIAFFINE_NAMESPACE_BEGIN
/// This translation unit's ABI name, e.g. "v0_1_0_avx2kernel_avx512bf16"
/// (version, float backend, ISA level; see the top of abi.hpp).
inline constexpr const char* abi_tag = BIAFFINE_ABI_TAG;
BIAFFINE_NAMESPACE_END
