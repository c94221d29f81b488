// biaffine/with_pad_seq_unpad_matrix.hpp - pad a batch of splits, unpad the score matrices.
//
// Adapts a layer with the reference (padded) interface - `[n_splits,
// max_len, n_in]` plus lengths in, `[n_splits, max_len, max_len(, o)]` out -
// to a split list. Forward pads the sequences (zeros past each length), calls
// the inner layer, and unpads the output in two dimensions back to one
// `[n, n(, o)]` matrix per split.
// Backprop pads the matrix gradients (zeros outside each split) and unpads the
// sequence gradients. It reports its working set (padded input, the inner
// layer's, the padded output) so a byte budget accounts for all of it.
#pragma once

#include "biaffine/abi.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <utility>

#include <xtensor/xadapt.hpp>

#include "biaffine/backprop.hpp"
#include "biaffine/detail/checked.hpp"
#include "biaffine/detail/output_kind.hpp"
#include "biaffine/errors.hpp"
#include "biaffine/layer.hpp"
#include "biaffine/tensor.hpp"
#include "biaffine/workspace.hpp"

BIAFFINE_NAMESPACE_BEGIN

namespace detail {

// A padded batch's backprop takes one score gradient (dY) and one input
// gradient slot (dX) per split of its forward; the error names the argument
// whose count differs.
inline void check_backprop_counts(std::size_t count, std::size_t dy, std::size_t dx)
{
    if (dy != count) {
        throw shape_error(msg("with_pad_seq_unpad_matrix backprop: expected ", count, " split gradients (dY), got ", dy));
    }
    if (dx != count) {
        throw shape_error(
            msg("with_pad_seq_unpad_matrix backprop: expected ", count, " input gradient slots (dX), got ", dx));
    }
}

}  // namespace detail

/// See the file comment. `Inner` is a padded layer (check_padded_layer):
/// `predict_padded(x, lengths)`, `forward_padded(x, lengths, mode)`,
/// `padded_cost`, `n_in`, `labels`, `score_shape` (biaffine_scorer has them).
///
/// Thread safety: as the inner layer's (`predict`, `predict_stream` const).
template <class Inner>
class with_pad_seq_unpad_matrix_layer : public detail::wrapping_layer<Inner> {
    static_assert(check_padded_layer<Inner>());
    using base = detail::wrapping_layer<Inner>;
    using base::inner_;
    using typename base::inner_type;

public:
    using typename base::value_type;
    using typename base::output_type;
    using T = value_type;
    using O = output_type;
    using backprop_type = split_backprop<T, O>;
    /// Backprop unpads every split's rows of the inner dx into its slot.
    static constexpr bool writes_every_slot = true;

    /// Wraps `inner` (held by reference when an lvalue).
    explicit with_pad_seq_unpad_matrix_layer(Inner&& inner) : base(std::forward<Inner>(inner)) {}

    /// Working set of a batch: padded input and lengths (scratch), the inner
    /// layer's own, its padded output (heap), the unpadded outputs.
    batch_cost cost(std::size_t count, std::size_t max_len, mode m = mode::eval) const
    {
        return cost_as<detail::full_scores_kind>(count, max_len, m);
    }

    /// Scores of every split, `[n_k, n_k(, o)]`, through one padded call.
    template <class Items>
    score_list<O> predict(const Items& X) const
    {
        return predict_as<detail::full_scores_kind>(X, detail::no_heads{});
    }

    /// Streaming: `sink(k, view)` per split, views into the padded output.
    template <class Items, class Sink>
    void predict_stream(const Items& X, Sink&& sink) const
    {
        predict_stream_as<detail::full_scores_kind>(X, detail::no_heads{}, sink);
    }

    /// Streaming into the caller's memory (as biaffine_scorer's): each
    /// split's scores are unpadded into `dest(k, n)` (an `O*` to n*n*o
    /// elements, dense), then `sink(k, view)` views them there.
    template <class Items, class Dest, class Sink>
    void predict_stream_into(const Items& X, Dest&& dest, Sink&& sink) const
    {
        predict_stream_into_as<detail::full_scores_kind>(X, detail::no_heads{}, dest, sink);
    }

    /// Forward through the padded inner layer; the callback pads the score
    /// gradients and unpads the input gradients.
    template <class Items>
    std::pair<score_list<O>, backprop_type> forward(const Items& X, mode m = mode::train)
    {
        return forward_as<detail::full_scores_kind>(X, detail::no_heads{}, m);
    }

    // ------------------------------------------- labels at given heads

    /// Backprop of forward_heads(): per-split `[n, o]` gradients.
    using heads_backprop_type = split_heads_backprop<T, O>;

    /// Working set of a batch of labels at given heads: padded input,
    /// lengths and heads (scratch), the inner layer's, its padded `[b, L, o]`
    /// output (heap), the unpadded outputs.
    batch_cost heads_cost(std::size_t count, std::size_t max_len, mode m = mode::eval) const
    {
        static_assert(check_padded_heads_layer<inner_type>());
        return cost_as<detail::labels_at_heads_kind>(count, max_len, m);
    }

    /// Labels at given heads of every split, `[n_k, o]`, through one padded
    /// call with heads `[b, L]`.
    template <class Items, class Heads>
    score_list<O> predict_heads(const Items& X, const Heads& H) const
    {
        static_assert(check_padded_heads_layer<inner_type>());
        return predict_as<detail::labels_at_heads_kind>(X, H);
    }

    /// Streaming labels at given heads: `sink(k, seq_view<const O>)`, views
    /// into the padded `[b, L, o]` output.
    template <class Items, class Heads, class Sink>
    void predict_heads_stream(const Items& X, const Heads& H, Sink&& sink) const
    {
        static_assert(check_padded_heads_layer<inner_type>());
        predict_stream_as<detail::labels_at_heads_kind>(X, H, sink);
    }

    /// Streaming labels at given heads into the caller's memory: `dest(k,
    /// n)` gives an `O*` to n*o elements (see predict_stream_into).
    template <class Items, class Heads, class Dest, class Sink>
    void predict_heads_stream_into(const Items& X, const Heads& H, Dest&& dest, Sink&& sink) const
    {
        static_assert(check_padded_heads_layer<inner_type>());
        predict_stream_into_as<detail::labels_at_heads_kind>(X, H, dest, sink);
    }

    /// Forward of labels at given heads through the padded inner layer; the
    /// callback pads the `[n, o]` gradients to `[b, L, o]` and unpads dX.
    template <class Items, class Heads>
    std::pair<score_list<O>, heads_backprop_type> forward_heads(const Items& X, const Heads& H, mode m = mode::train)
    {
        static_assert(check_padded_heads_layer<inner_type>());
        return forward_as<detail::labels_at_heads_kind>(X, H, m);
    }

    // ------------------------------------------- any output kind
    //
    // The calls above for an output kind `Kind` (detail/output_kind.hpp)
    // with its arguments (heads, or detail::no_heads{}): the inner layer's
    // padded call of that kind (Kind's layer calls), the arguments padded
    // by the kind.

    /// Working set of a batch of Kind: padded input, lengths and arguments
    /// (scratch), the inner layer's, its padded output (heap), the unpadded outputs.
    template <class Kind>
    batch_cost cost_as(std::size_t count, std::size_t max_len, mode m = mode::eval) const
    {
        batch_cost c = padded_batch_cost(
            Kind::padded_cost(inner_, count, max_len, m), count, max_len, m,
            detail::checked_product("padded batch", Kind::elements(max_len, inner_.labels(), "padded batch"), count,
                                    sizeof(O)));
        c.scratch = detail::checked_add(
            c.scratch, detail::scratch_bytes<std::int64_t>(Kind::padded_arg_elements(count, max_len)), "padded batch");
        return c;
    }

    template <class Kind, class Items, class Heads>
    score_list<O> predict_as(const Items& X, const Heads& H) const
    {
        const std::size_t o = inner_.labels();
        score_list<O> Y;
        Y.reserve(X.size());
        predict_stream_as<Kind>(X, H, [&](std::size_t, typename Kind::template view<const O> y) {
            const std::size_t n = X[Y.size()].rows;
            score_tensor<O> yk = Kind::template new_output<O>(n, o);
            Kind::assign(Kind::dense(yk.data(), n, o), y);
            Y.push_back(std::move(yk));
        });
        return Y;
    }

    // Scratch for a kind's padded arguments `[count, L]` (heads; none without).
    template <class Kind>
    static std::size_t padded_args_size(std::size_t count, std::size_t L)
    {
        return detail::to_index_size(Kind::padded_arg_elements(count, L), "padded batch");
    }

    template <class Kind, class Items, class Heads, class Sink>
    void predict_stream_as(const Items& X, const Heads& H, Sink&& sink) const
    {
        const std::size_t count = X.size(), L = max_len(X), n_in = inner_.n_in(), o = inner_.labels();
        detail::check_kind_heads<Kind>("with_pad_seq_unpad_matrix", X, H);
        scratch<T> xp(padded_size(count, L));
        scratch<std::int64_t> lens(count);
        scratch<std::int64_t> hp(padded_args_size<Kind>(count, L));
        pad(X, L, xp.data(), lens.data());
        auto x = xt::adapt(xp.data(), xp.size(), xt::no_ownership(), std::array<std::size_t, 3>{count, L, n_in});
        const span<const std::int64_t> ll(lens.data(), count);
        const score_array<O> y = Kind::predict_padded(inner_, x, ll, Kind::pad_args(H, count, L, lens.data(), hp.data()));
        for (std::size_t k = 0; k < count; ++k) sink(k, Kind::padded(y.data(), k, X[k].rows, L, o));
    }

    // The padded output of a stream unpadded into the caller's `dest(k, n)`.
    template <class Kind, class Items, class Heads, class Dest, class Sink>
    void predict_stream_into_as(const Items& X, const Heads& H, Dest&& dest, Sink&& sink) const
    {
        const std::size_t o = inner_.labels();
        predict_stream_as<Kind>(X, H, [&](std::size_t k, typename Kind::template view<const O> y) {
            const std::size_t n = X[k].rows;
            const auto d = detail::caller_destination<Kind>("with_pad_seq_unpad_matrix stream",
                                                            static_cast<O*>(dest(k, n)), k, n, o);
            Kind::assign(d, y);
            sink(k, Kind::read_only(d));
        });
    }

    template <class Kind, class Items, class Heads>
    auto forward_as(const Items& X, const Heads& H, mode m = mode::train)
    {
        using grad = typename Kind::template view<const O>;
        const std::size_t count = X.size(), L = max_len(X), n_in = inner_.n_in(), o = inner_.labels();
        detail::check_kind_heads<Kind>("with_pad_seq_unpad_matrix", X, H);
        padded_size(count, L);  // checked before xtensor multiplies the shape out
        tensor<T, 3> x = tensor<T, 3>::from_shape({count, L, n_in});
        tracked_vector<std::int64_t> lens(count);
        pad(X, L, x.data(), lens.data());
        scratch<std::int64_t> hp(padded_args_size<Kind>(count, L));
        auto [y, inner_bp] =
            Kind::forward_padded(inner_, x, lens, Kind::pad_args(H, count, L, lens.data(), hp.data()), m);
        score_list<O> Y;
        Y.reserve(count);
        for (std::size_t k = 0; k < count; ++k) {
            const std::size_t n = X[k].rows;
            score_tensor<O> yk = Kind::template new_output<O>(n, o);
            Kind::assign(Kind::dense(yk.data(), n, o), Kind::padded(static_cast<const O*>(y.data()), k, n, L, o));
            Y.push_back(std::move(yk));
        }
        auto shape = y.shape();
        backprop_fn<void(span<const grad>, span<const seq_view<T>>)> bp(
            [x = std::move(x), lens = std::move(lens), inner_bp = std::move(inner_bp), shape, L, o,
             n_in](span<const grad> dY, span<const seq_view<T>> dX) mutable {
                const std::size_t count = lens.size();
                detail::check_backprop_counts(count, dY.size(), dX.size());
                score_array<O> dy = xt::zeros<O>(shape);
                for (std::size_t k = 0; k < count; ++k) {
                    const std::size_t n = static_cast<std::size_t>(lens[k]);
                    Kind::template check_grad<O>("with_pad_seq_unpad_matrix backprop", k, dY[k], n, o);
                    detail::check_grad_slot("with_pad_seq_unpad_matrix backprop", k, dX[k], n, n_in);
                    Kind::assign(Kind::padded(dy.data(), k, n, L, o), dY[k]);
                }
                const tensor<T, 3> dx = inner_bp(dy);
                unpad_grads(dx, lens, L, n_in, dX);
            });
        return std::make_pair(std::move(Y), std::move(bp));
    }

private:
    // A batch's working set around the inner layer's padded cost `in`,
    // whose padded output is `outputs` bytes once unpadded.
    batch_cost padded_batch_cost(const batch_cost& in, std::size_t count, std::size_t max_len, mode m,
                                 std::uint64_t outputs) const
    {
        using detail::checked_add;
        const std::uint64_t x =
            detail::scratch_bytes<T>(detail::checked_product("padded batch", count, max_len, inner_.n_in()));
        const std::uint64_t lens = detail::scratch_bytes<std::int64_t>(count);
        batch_cost c;
        c.outputs = outputs;
        c.device = in.device;
        c.heap = checked_add(in.heap, in.outputs, "padded batch");
        if (m == mode::eval) {
            c.scratch = checked_add(checked_add(in.scratch, x, "padded batch"), lens, "padded batch");
            return c;
        }
        // Train: the padded input is kept (the inner layer holds views of it);
        // backward builds the padded dY and gets a padded dX back.
        c.saved = checked_add(checked_add(in.saved, x, "padded batch"),
                              detail::checked_mul(count, sizeof(std::size_t), "padded batch"), "padded batch");
        c.scratch = checked_add(in.scratch, lens, "padded batch");
        c.heap = checked_add(c.heap, checked_add(in.outputs, x, "padded batch"), "padded batch");
        return c;
    }

    template <class Lens>
    static void unpad_grads(const tensor<T, 3>& dx, const Lens& lens, std::size_t L, std::size_t n_in,
                            span<const seq_view<T>> dX)
    {
        // dX[k] is [n_k, n_in] (checked before the inner backprop ran).
        for (std::size_t k = 0; k < lens.size(); ++k) detail::copy_rows(dx.data() + k * L * n_in, dX[k]);
    }

    template <class Items>
    std::size_t max_len(const Items& X) const
    {
        std::size_t L = 0;
        for (std::size_t k = 0; k < X.size(); ++k) {
            if (X[k].cols != inner_.n_in()) {
                throw shape_error(detail::msg("with_pad_seq_unpad_matrix: split ", k, " has width ", X[k].cols,
                                              ", the inner layer expects n_in = ", inner_.n_in()));
            }
            L = std::max(L, X[k].rows);
        }
        return L;
    }

    // Elements of the padded input `[count, L, n_in]`, checked (in bytes too).
    std::size_t padded_size(std::size_t count, std::size_t L) const
    {
        return detail::to_index_size(detail::checked_product("padded batch", count, L, inner_.n_in(), sizeof(T)),
                                     "padded batch") / sizeof(T);
    }

    template <class Items>
    void pad(const Items& X, std::size_t L, T* xp, std::int64_t* lens) const
    {
        const std::size_t n_in = inner_.n_in();
        for (std::size_t k = 0; k < X.size(); ++k) {
            const auto v = detail::read_only(X[k]);
            T* dst = xp + k * L * n_in;
            detail::copy_rows(v, dst);
            std::fill(dst + v.rows * n_in, dst + L * n_in, T(0));
            lens[k] = static_cast<std::int64_t>(v.rows);
        }
    }
};

/// Factory: `with_pad_seq_unpad_matrix(scorer)`. An lvalue is held by
/// reference (it must outlive the layer), an rvalue moved in.
template <class Inner>
auto with_pad_seq_unpad_matrix(Inner&& inner)
{
    return with_pad_seq_unpad_matrix_layer<Inner>(std::forward<Inner>(inner));
}

BIAFFINE_NAMESPACE_END
