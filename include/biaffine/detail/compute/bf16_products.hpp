// biaffine/detail/compute/bf16_products.hpp - host_batch's Products policy for
// compute_precision::bf16 (float scorers): the batch-wide products -
// projections, U W' and their backward - on bf16 operands with fp32 sums
// (bf16_train<Math>), the per-split products, softmax and dropout on Ops in
// fp32 as ever. Full scores take T for every row first (eval_t_rows), then
// score the splits on Ops. backend.hpp chooses Math and Ops.
#pragma once

#include "biaffine/abi.hpp"

#include <algorithm>
#include <cstddef>

#include "biaffine/detail/compute/bf16_train.hpp"
#include "biaffine/detail/compute/operands.hpp"
#include "biaffine/tensor.hpp"

BIAFFINE_NAMESPACE_BEGIN
namespace detail {

/// The products of fp32_products (host_batch.hpp) in bf16: same calls,
/// `p` the weights packed for Math with each parameter version.
template <class Math, class Ops>
struct bf16_products {
    using train = bf16_train<Math>;
    using packed_weights = typename train::weights;

    static std::size_t packed_elements(const scorer_dims& d, std::size_t max_len) noexcept
    {
        return std::max(Ops::packed_elements(d, max_len), elements_of(train::forward_bytes(d)));
    }
    static std::size_t train_packed_elements(const scorer_dims& d, std::size_t max_len, std::size_t rows) noexcept
    {
        return std::max({Ops::train_packed_elements(d, max_len, rows), packed_elements(d, max_len),
                         elements_of(train::scratch_bytes(d, rows))});
    }
    /// T for every row, then the splits (scores).
    static std::size_t eval_t_rows(const scorer_dims&, std::size_t N, std::size_t) noexcept { return N; }

    template <class Items>
    static void project(const scorer_dims& d, const weights_ref<float>& w, const packed_weights& p, const Items& X,
                        const std::size_t*, std::size_t N, float* u, float* v, float* packed)
    {
        train::project(d, p, w, X, N, u, v, packed);
    }
    static void left(const scorer_dims& d, const weights_ref<float>&, const packed_weights& p, const float* u,
                     std::size_t N, float* t, float* packed)
    {
        train::left(d, p, u, N, t, packed);
    }
    template <class Split>
    static void scores(const scorer_dims& d, const weights_ref<float>& w, const packed_weights& p, const float* u,
                       const std::size_t* off, std::size_t count, float* t, bool, float* packed, Split&& split)
    {
        const std::size_t ldt = d.labels * d.hv();
        left(d, w, p, u, off[count], t, packed);
        for (std::size_t k = 0; k < count; ++k) split(k, static_cast<const float*>(t + off[k] * ldt), packed);
    }
    template <class Items>
    static void backward(const scorer_dims& d, const weights_ref<float>&, const packed_weights& p, const Items& X,
                         const std::size_t*, std::size_t N, const float* u, float* dt, float* dv, float* du,
                         const relu_ref<float>& a, const grads_ref<float>& g, span<const seq_view<float>> dX,
                         float* packed)
    {
        train::left_backward(d, p, u, N, dt, du, g.w, packed);
        train::input_backward(d, p, g, X, N, a, du, dv, packed, dX);
    }

private:
    static std::size_t elements_of(std::size_t bytes) noexcept { return (bytes + sizeof(float) - 1) / sizeof(float); }
};

}  // namespace detail
BIAFFINE_NAMESPACE_END
