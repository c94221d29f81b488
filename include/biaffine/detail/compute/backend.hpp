// biaffine/detail/compute/backend.hpp - the one place that chooses the
// scorer's compute backend per scalar type.
//
// A backend is a type with the static operations listed on eigen_backend.
// double always runs on Eigen; float runs on the AVX2/FMA kernel where the
// compiler targets AVX2 and FMA (unless BIAFFINE_NO_GEMM_KERNEL), else on
// Eigen. Adding a backend: one header beside this one, and its line here.
#pragma once

#include "biaffine/config.hpp"
#include "biaffine/detail/compute/eigen_backend.hpp"

#if defined(__AVX2__) && defined(__FMA__) && !defined(BIAFFINE_NO_GEMM_KERNEL)
#include "biaffine/detail/compute/avx2_backend.hpp"
/// 1 when float runs on the AVX2/FMA kernel in this build.
#define BIAFFINE_GEMM_KERNEL 1
#else
#define BIAFFINE_GEMM_KERNEL 0
#endif

namespace biaffine {
namespace detail {

template <class T>
struct backend_choice {
    using type = eigen_backend<T>;
};
#if BIAFFINE_GEMM_KERNEL
template <>
struct backend_choice<float> {
    using type = avx2_backend;
};
#endif

/// The compute backend the scorer uses for T in this build (its `name` says
/// which: "eigen" or "avx2").
template <class T>
using compute_backend = typename backend_choice<T>::type;

}  // namespace detail
}  // namespace biaffine
