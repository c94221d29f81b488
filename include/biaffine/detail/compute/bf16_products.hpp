// biaffine/detail/compute/bf16_products.hpp - host_batch's Products policy for
// compute_precision::bf16 (float scorers): the batch-wide products -
// projections, U W' and their backward - on bf16 operands with fp32 sums
// (bf16_train<Math>), the per-split products, softmax and dropout on Ops in
// fp32 as ever. Full scores take T for every row first (eval_t_rows), then
// score the splits on Ops. Inference (predict) runs bf16_forward<Math>: the
// splits a group at a time through the projections, U W' and the per-split
// products on Math. Both read the weights packed once per parameter version
// (bf16_weights, the backend's weights_cache); backend.hpp chooses Math and
// Ops.
#pragma once

#include "biaffine/abi.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "biaffine/detail/compute/bf16_forward.hpp"
#include "biaffine/detail/compute/bf16_train.hpp"
#include "biaffine/detail/compute/bf16_weights.hpp"
#include "biaffine/detail/compute/operands.hpp"
#include "biaffine/detail/checked.hpp"
#include "biaffine/detail/split_checks.hpp"
#include "biaffine/tensor.hpp"
#include "biaffine/workspace.hpp"

BIAFFINE_NAMESPACE_BEGIN
namespace detail {

/// The products of fp32_products (host_batch.hpp) in bf16: same calls,
/// `p` the weights packed for Math with each parameter version.
template <class Math, class Ops>
struct bf16_products {
    static constexpr bool runs_bf16 = true;
    using train = bf16_train<Math>;
    using forward = bf16_forward<Math>;
    using packed_weights = bf16_weights<Math>;

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
        (void)w;
        train::project(d, p, X, N, u, v, packed);
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

    /// Inference of one output kind: the splits a group at a time
    /// (bf16_forward::run), each split's output into dest(k, n), then
    /// done(k, y).
    template <class Kind, class Be, class Items, class Heads, class Dest, class Done>
    static void predict(const Be&, const scorer_dims& d, const weights_ref<float>&, const packed_weights& p,
                        const Items& X, const Heads& H, Dest&& dest, Done&& done)
    {
        using D = typename forward::D;
        std::size_t max_n = 0;
        std::uint64_t N = 0;
        for (std::size_t k = 0; k < X.size(); ++k) {
            max_n = std::max(max_n, X[k].rows);
            N += X[k].rows;
        }
        const std::size_t G = forward::capacity(d, N, max_n);
        scratch<unsigned char> s(to_index_size(forward::scratch_bytes(d, G, max_n), "bf16 scratch"));
        scratch<std::size_t> heads(Kind::gathers_rows ? max_n : 0);
        forward::run(
            p, [&](std::size_t k) { return read_only(X[k]); }, X.size(), s.data(), G,
            [&](std::size_t k, const D* vb, const D* tb, float* packed) {
                const std::size_t n = X[k].rows;
                auto y = dest(k, n);
                Kind::template bf16_product<forward>(d, vb, tb, H, k, heads.data(), packed, y);
                done(k, y);
            });
    }
    /// Scratch bytes predict carves: the group scratch and (labels at
    /// heads) one split's head list. The packed weights are the scorer's
    /// own, like its parameters, not a batch's.
    template <class Kind, class Be>
    static std::uint64_t predict_scratch_bytes(const Be&, const scorer_dims& d, std::size_t count,
                                               std::size_t max_len)
    {
        const char* what = "batch cost";
        const std::size_t G = forward::capacity(d, checked_mul(count, max_len, what), max_len);
        return checked_add(scratch_bytes<unsigned char>(forward::scratch_bytes(d, G, max_len)),
                           scratch_bytes<std::size_t>(Kind::gathers_rows ? max_len : 0), what);
    }

private:
    static std::size_t elements_of(std::size_t bytes) noexcept { return (bytes + sizeof(float) - 1) / sizeof(float); }
};

}  // namespace detail
BIAFFINE_NAMESPACE_END
