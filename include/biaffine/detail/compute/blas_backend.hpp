// biaffine/detail/compute/blas_backend.hpp - the scorer's large products on a
// CBLAS library (OpenBLAS or BLIS from Debian), for users who already link
// one. Opt-in: define BIAFFINE_USE_BLAS and link a CBLAS (CMake option
// BIAFFINE_WITH_BLAS does both).
//
// The row-wise GEMMs of a batch (projections, U.W', their backward, the
// input gradient) go to cblas_?gemm; the per-split products stay on Eigen /
// row_dots (eigen_backend), where a BLAS call's overhead at n ~ 5-100 costs
// more than it saves. The BLAS's own thread pool is pinned to one thread on
// first use (BIAFFINE_BLAS_PIN_THREADS): the library runs batches on its own
// threads, and a pool per call would oversubscribe the cores.
#pragma once

#if defined(BIAFFINE_USE_BLAS)

#include "biaffine/abi.hpp"

#include <cblas.h>

#include <cstddef>
#include <mutex>
#include <string>

#include "biaffine/config.hpp"
#include "biaffine/detail/compute/eigen_backend.hpp"
#include "biaffine/detail/compute/operands.hpp"

// Present only when the linked BLAS is OpenBLAS / BLIS (weak: null otherwise).
extern "C" {
char* openblas_get_corename(void) __attribute__((weak));
void openblas_set_num_threads(int) __attribute__((weak));
void bli_thread_set_num_threads(long) __attribute__((weak));
}

BIAFFINE_NAMESPACE_BEGIN
namespace detail {

inline void blas_gemm(bool ta, bool tb, std::size_t m, std::size_t n, std::size_t k, float alpha, const float* a,
                      std::size_t lda, const float* b, std::size_t ldb, float beta, float* c, std::size_t ldc)
{
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, static_cast<int>(m),
                static_cast<int>(n), static_cast<int>(k), alpha, a, static_cast<int>(lda), b, static_cast<int>(ldb),
                beta, c, static_cast<int>(ldc));
}

inline void blas_gemm(bool ta, bool tb, std::size_t m, std::size_t n, std::size_t k, double alpha, const double* a,
                      std::size_t lda, const double* b, std::size_t ldb, double beta, double* c, std::size_t ldc)
{
    cblas_dgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, static_cast<int>(m),
                static_cast<int>(n), static_cast<int>(k), alpha, a, static_cast<int>(lda), b, static_cast<int>(ldb),
                beta, c, static_cast<int>(ldc));
}

/// Which BLAS is linked and which kernels it runs: "OpenBLAS, Haswell
/// kernels", "BLIS", or "a CBLAS (neither OpenBLAS nor BLIS)".
inline std::string blas_description()
{
    if (openblas_get_corename != nullptr) return std::string("OpenBLAS, ") + openblas_get_corename() + " kernels";
    if (bli_thread_set_num_threads != nullptr) return "BLIS";
    return "a CBLAS (neither OpenBLAS nor BLIS)";
}

/// Pins the BLAS pool to one thread, once per process.
inline void pin_blas_threads()
{
#if BIAFFINE_BLAS_PIN_THREADS
    static std::once_flag once;
    std::call_once(once, [] {
        if (openblas_set_num_threads != nullptr) openblas_set_num_threads(1);
        if (bli_thread_set_num_threads != nullptr) bli_thread_set_num_threads(1);
    });
#endif
}

/// eigen_backend with the batch-wide GEMMs on cblas_?gemm (T float or double).
template <class T>
struct blas_backend : eigen_backend<T> {
    static constexpr const char* name = "blas";
    /// What runs each operation, for benches and logs.
    static constexpr const char* operations =
        "projections, U.W', dU, dW, input backward: cblas gemm; per-split scores and their backward: row_dots "
        "(short splits: use_row_dots), else Eigen GEMM";

    static void projections(const scorer_dims& d, const weights_ref<T>& w, const T* xp, std::size_t N, T* u, T* v,
                            T*)
    {
        project(d, xp, N, w.wh, w.bh, d.bias_u, u);
        project(d, xp, N, w.wd, w.bd, d.bias_v, v);
    }

    // T[:, k] = Ua W_k, each label straight from W's memory.
    static void bilinear_left(const scorer_dims& d, const T* w, const T* u, std::size_t N, T* t, T*)
    {
        if (N == 0) return;
        pin_blas_threads();
        const std::size_t hu = d.hu(), hv = d.hv(), o = d.labels;
        for (std::size_t k = 0; k < o; ++k) {
            blas_gemm(false, false, N, hv, hu, T(1), u, hu, w + k * hu * hv, hv, T(0), t + k * hv, o * hv);
        }
    }

    template <class Each>
    static void bilinear_scores(const scorer_dims& d, const T* w, const T* u, const std::size_t* off,
                                std::size_t count, T* t, bool, T* packed, Each&& each)
    {
        bilinear_scores_whole<blas_backend>(d, w, u, off, count, t, packed, each);
    }

    // dUa = sum_k dT_k W_k^T (overwritten), dW_k += Ua^T dT_k.
    static void bilinear_left_backward(const scorer_dims& d, const T* w, const T* u, std::size_t N, const T* dt,
                                       T* du, T* dw, T*)
    {
        if (N == 0) return;
        pin_blas_threads();
        const std::size_t hu = d.hu(), hv = d.hv(), o = d.labels;
        for (std::size_t k = 0; k < o; ++k) {
            const T* dtk = dt + k * hv;
            blas_gemm(false, true, N, hu, hv, T(1), dtk, o * hv, w + k * hu * hv, hv, k == 0 ? T(0) : T(1), du, hu);
            blas_gemm(true, false, hu, hv, N, T(1), u, hu, dtk, o * hv, T(1), dw + k * hu * hv, hv);
        }
    }

    // dZ through relu, dWh += dZu^T X, dWd += dZv^T X, then xp = dZu Wh +
    // dZv Wd over X, out to the slots dX.
    template <class Items>
    static void input_backward(const scorer_dims& d, const weights_ref<T>& w, const grads_ref<T>& g, const Items& X,
                               const std::size_t* off, std::size_t N, const relu_ref<T>& a, T* dzu, T* dzv, T* xp,
                               T*, span<const seq_view<T>> dX)
    {
        if (N == 0) return;
        eigen_backend<T>::relu_backward_both(d, g, N, a, dzu, dzv);
        pin_blas_threads();
        const std::size_t h = d.hidden, n_in = d.n_in, hu = d.hu(), hv = d.hv();
        gather_rows(X, off, n_in, xp);
        blas_gemm(true, false, h, n_in, N, T(1), dzu, hu, xp, n_in, T(1), g.wh, n_in);
        blas_gemm(true, false, h, n_in, N, T(1), dzv, hv, xp, n_in, T(1), g.wd, n_in);
        blas_gemm(false, false, N, n_in, h, T(1), dzu, hu, w.wh, n_in, T(0), xp, n_in);
        blas_gemm(false, false, N, n_in, h, T(1), dzv, hv, w.wd, n_in, T(1), xp, n_in);
        scatter_rows<T>(xp, off, n_in, dX);
    }

private:
    // out [N, h + bias] = relu(xp W^T + b), with the trailing column of ones.
    static void project(const scorer_dims& d, const T* xp, std::size_t N, const T* w, const T* b, bool bias, T* out)
    {
        if (N == 0) return;
        pin_blas_threads();
        const std::size_t h = d.hidden, width = h + (bias ? 1 : 0);
        blas_gemm(false, true, N, h, d.n_in, T(1), xp, d.n_in, w, d.n_in, T(0), out, width);
        for (std::size_t r = 0; r < N; ++r) {
            T* row = out + r * width;
            for (std::size_t j = 0; j < h; ++j) {
                const T z = row[j] + b[j];
                row[j] = z > T(0) ? z : T(0);
            }
            if (bias) row[h] = T(1);
        }
    }
};

}  // namespace detail
BIAFFINE_NAMESPACE_END

#endif  // BIAFFINE_USE_BLAS
