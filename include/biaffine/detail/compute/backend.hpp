// biaffine/detail/compute/backend.hpp - the one place that chooses the
// scorer's compute backend per scalar type.
//
// A host backend is a type with the static per-split operations listed on
// eigen_backend (check_host_ops); host_batch turns it into the batch-level
// backend object the scorer holds (check_backend, interface.hpp).
// double always runs on Eigen. float runs on the GEMM kernel of
// avx2_kernel.hpp wherever the compiler targets AVX2 and FMA (on AVX-512
// targets with its 512-bit body), unless BIAFFINE_NO_GEMM_KERNEL; it was
// measured faster than Eigen on an AVX2 EPYC, a Zen 4 EPYC and an AVX-512
// Xeon (config.hpp has the figures; BIAFFINE_AVX2_KERNEL_ON_AVX512 = 0 puts
// AVX-512 targets on Eigen). With
// BIAFFINE_USE_BLAS both types run their batch-wide products on the linked
// CBLAS. Adding a backend: one header beside this one, and its line here.
#pragma once

#include "biaffine/abi.hpp"  // BIAFFINE_GEMM_KERNEL: the rule, beside the ABI name it sets
#include "biaffine/config.hpp"
#include "biaffine/detail/compute/eigen_backend.hpp"
#include "biaffine/detail/compute/host_batch.hpp"

#if defined(BIAFFINE_USE_BLAS)
#include "biaffine/detail/compute/blas_backend.hpp"
#elif BIAFFINE_GEMM_KERNEL
#include "biaffine/detail/compute/avx2_backend.hpp"
#endif

BIAFFINE_NAMESPACE_BEGIN
namespace detail {

#if defined(BIAFFINE_USE_BLAS)
template <class T>
struct backend_choice {
    using type = blas_backend<T>;
};
#else
template <class T>
struct backend_choice {
    using type = eigen_backend<T>;
};
#endif
#if BIAFFINE_GEMM_KERNEL
template <>
struct backend_choice<float> {
    using type = avx2_backend;
};
#endif

/// The compute backend the scorer uses for T in this build (its `name` says
/// which: "eigen", "avx2" or "blas"; `operations` what runs each product).
template <class T>
using compute_backend = typename backend_choice<T>::type;

/// The batch-level backend object the scorer holds for T by default: the
/// host ops above under host_batch (biaffine_scorer's second template
/// argument; fwd.hpp names it).
template <class T>
struct scorer_backend_choice {
    using type = host_batch<compute_backend<T>, T>;
};
template <class T>
using scorer_backend = typename scorer_backend_choice<T>::type;

}  // namespace detail
BIAFFINE_NAMESPACE_END
