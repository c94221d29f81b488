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
//
// compute_precision::bf16 (float scorers): the batch-wide products run on
// bf16_products<Math, Ops> (bf16_products.hpp), Math chosen here too: AMX
// tiles where the target has them, VDPBF16PS where it has AVX512_BF16, else
// emulated on the fp32 kernels (bf16_math.hpp). A float scorer's backend
// holds both precisions' host_batch and runs the one its dims ask for
// (precision_switch): inference (predict: bf16_forward.hpp) and training
// through the same calls, on the same Math and the same packed weights.
#pragma once

#include "biaffine/abi.hpp"  // BIAFFINE_GEMM_KERNEL: the rule, beside the ABI name it sets
#include "biaffine/config.hpp"
#include "biaffine/detail/compute/bf16_forward.hpp"
#include "biaffine/detail/compute/bf16_math.hpp"
#include "biaffine/detail/compute/bf16_products.hpp"
#include "biaffine/detail/compute/bf16_train.hpp"
#include "biaffine/detail/compute/eigen_backend.hpp"
#include "biaffine/detail/compute/host_batch.hpp"

#if defined(BIAFFINE_USE_BLAS)
#include "biaffine/detail/compute/blas_backend.hpp"
#endif
#if BIAFFINE_GEMM_KERNEL || (defined(__AVX2__) && defined(__FMA__))
#include "biaffine/detail/compute/avx2_backend.hpp"
#endif

#include <optional>
#include <type_traits>

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

// ------------------------------------------------------------ bf16

/// The fp32 per-split kernel under the bf16 arithmetic's float dots
/// (emulated and AMX Math): the GEMM kernel wherever AVX2 and FMA are
/// targeted (whatever the fp32 path runs), else Eigen.
#if defined(__AVX2__) && defined(__FMA__)
using bf16_split_ops = avx2_backend;
#else
using bf16_split_ops = eigen_backend<float>;
#endif

/// The bf16 arithmetic of this build (bf16_math.hpp).
#if BIAFFINE_DETAIL_AMX_BF16
using bf16_best_math = bf16_amx_math<bf16_split_ops>;
#elif BIAFFINE_DETAIL_BF16_GEMM
using bf16_best_math = bf16_vnni_math;
#else
using bf16_best_math = bf16_emulated_math<bf16_split_ops>;
#endif

/// A float scorer's bf16 inference, training products and packed weights
/// in this build.
using scorer_bf16_forward = bf16_forward<bf16_best_math>;
using scorer_bf16_train = bf16_train<bf16_best_math>;
using scorer_bf16_weights = bf16_weights<bf16_best_math>;

/// The batch-level backend of a float scorer: Fp32's operations, or Bf16's
/// where its dims ask for compute_precision::bf16 (built only then). Both
/// run the same Ops; they differ in their Products.
template <class Fp32, class Bf16>
class precision_switch {
public:
    using ops = typename Fp32::ops;
    using value_type = float;
    static constexpr const char* name = Fp32::name;
    static constexpr const char* operations = Fp32::operations;
    static constexpr bool reads_items = Fp32::reads_items;
    static constexpr bool runs_bf16 = backend_runs_bf16<Bf16>::value;
    // Either precision's batch is host memory of the same shapes.
    using acts = typename Fp32::acts;
    using held_batch = typename Fp32::held_batch;
    using carved_batch = typename Fp32::carved_batch;
    static_assert(std::is_same<held_batch, typename Bf16::held_batch>::value &&
                      std::is_same<carved_batch, typename Bf16::carved_batch>::value,
                  "precision_switch: both precisions hold a batch alike");

    explicit precision_switch(const scorer_dims& d) : fp32_(d)
    {
        if (d.bf16) bf16_.emplace(d);
    }
    const scorer_dims& dims() const noexcept { return fp32_.dims(); }

    std::uint64_t prepared_version() const { return run([](auto& b) { return b.prepared_version(); }); }
    void prepare(std::uint64_t version, const weights_ref<float>& w)
    {
        run([&](auto& b) { b.prepare(version, w); });
    }
    /// The weights prepare() took.
    weights_ref<float> weights() const
    {
        return run([](auto& b) { return b.weights(); });
    }
    void watch(bool on) noexcept
    {
        run([&](auto& b) { b.watch(on); });
    }
    template <class Kind, class Items, class Heads, class Dest, class Done>
    void predict(const Items& X, const Heads& H, Dest&& dest, Done&& done) const
    {
        run([&](auto& b) { b.template predict<Kind>(X, H, dest, done); });
    }
    template <class Kind>
    std::uint64_t predict_scratch_bytes(std::size_t count, std::size_t max_len) const
    {
        return run([&](auto& b) { return b.template predict_scratch_bytes<Kind>(count, max_len); });
    }
    std::uint64_t device_bytes(std::size_t count, std::size_t max_len, mode m) const noexcept
    {
        return run([&](auto& b) { return b.device_bytes(count, max_len, m); });
    }
    std::size_t packed_elements(std::size_t max_len) const noexcept
    {
        return run([&](auto& b) { return b.packed_elements(max_len); });
    }
    std::size_t train_packed_elements(std::size_t max_len, std::size_t rows) const noexcept
    {
        return run([&](auto& b) { return b.train_packed_elements(max_len, rows); });
    }
    // Allocation only, no arithmetic: the same in either precision.
    held_batch hold(std::size_t N, std::size_t ys) const { return fp32_.hold(N, ys); }
    carved_batch carve(std::size_t N) const { return fp32_.carve(N); }
    template <class Items>
    void project(const Items& X, const std::size_t* off, std::size_t N, const acts& a, float* packed) const
    {
        run([&](auto& b) { b.project(X, off, N, a, packed); });
    }
    void dropout(double rate, std::uint64_t seed, const acts& a, const std::size_t* off, std::size_t count) const
    {
        run([&](auto& b) { b.dropout(rate, seed, a, off, count); });
    }
    void bilinear_left(const acts& a, std::size_t N, float* packed) const
    {
        run([&](auto& b) { b.bilinear_left(a, N, packed); });
    }
    template <class Kind, class Dest, class Keep, class Each>
    void score_outputs(const acts& a, const std::size_t* off, std::size_t count, const std::size_t* head_rows,
                       bool keep_t, bool softmax, float* packed, Dest&& dest, Keep&& keep, Each&& each) const
    {
        run([&](auto& b) {
            b.template score_outputs<Kind>(a, off, count, head_rows, keep_t, softmax, packed, dest, keep, each);
        });
    }
    template <class Kind, class Grad, class Kept>
    void outputs_backward(const acts& a, const std::size_t* off, std::size_t count, const std::size_t* head_rows,
                          span<const Grad> dY, bool softmax, Kept&& kept, float* y_tmp, float* ds, float* dv,
                          float* dt, float* packed) const
    {
        run([&](auto& b) {
            b.template outputs_backward<Kind>(a, off, count, head_rows, dY, softmax, kept, y_tmp, ds, dv, dt,
                                              packed);
        });
    }
    template <class Items>
    void projections_backward(const Items& X, const std::size_t* off, std::size_t N, const acts& a, float* dt,
                              float* dv, float* du, double rate, const grads_ref<float>& g,
                              span<const seq_view<float>> dX, float* packed) const
    {
        run([&](auto& b) { b.projections_backward(X, off, N, a, dt, dv, du, rate, g, dX, packed); });
    }

private:
    // The one precision branch: every operation goes to the backend of the
    // scorer's precision.
    template <class F>
    decltype(auto) run(F&& f) const
    {
        return bf16_ ? f(*bf16_) : f(fp32_);
    }
    template <class F>
    decltype(auto) run(F&& f)
    {
        return bf16_ ? f(*bf16_) : f(fp32_);
    }

    Fp32 fp32_;
    std::optional<Bf16> bf16_;
};

/// The batch-level backend object the scorer holds for T by default: the
/// host ops above under host_batch (biaffine_scorer's second template
/// argument; fwd.hpp names it), for float with its bf16 twin.
template <class T>
struct scorer_backend_choice {
    using type = host_batch<compute_backend<T>, T>;
};
template <>
struct scorer_backend_choice<float> {
    using ops = compute_backend<float>;
    using type = precision_switch<host_batch<ops, float>,
                                  host_batch<ops, float, bf16_products<bf16_best_math, ops>>>;
};
template <class T>
using scorer_backend = typename scorer_backend_choice<T>::type;

}  // namespace detail
BIAFFINE_NAMESPACE_END
