// biaffine/detail/output_kind.hpp - what a scorer computes per split, as a
// policy: full scores `[n, n(, o)]` (full_scores_kind, here) or labels at
// given heads `[n, o]` (labels_at_heads_kind.hpp, included here).
//
// The scorer, its padded interface, the backend (host_batch), with_splits,
// the batcher and with_pad_seq_unpad_matrix each have one forward and one
// backward path, templated on the kind, and never ask which kind it is; a
// kind says what one split's output looks like (view, layout, padded
// layout), how its softmax and the softmax backward run, which backend
// product makes it from the packed rows and which one takes its gradient
// back, whether it reads T at rows named per token (gathers_rows), how its
// arguments (heads) are checked and handed down, and which member of a layer
// computes it (the layer calls). A new kind is one more policy: see
// docs/architecture.md, "Adding an output kind".
#pragma once

#include "biaffine/abi.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "biaffine/detail/kind_support.hpp"
#include "biaffine/detail/labels_at_heads_kind.hpp"
#include "biaffine/detail/split_checks.hpp"
#include "biaffine/mode.hpp"
#include "biaffine/tensor.hpp"

BIAFFINE_NAMESPACE_BEGIN
namespace detail {

/// Full scores: split k's `[n, n(, o)]` block, every head candidate.
struct full_scores_kind : kind_without_args {
    /// One split's output (and, const, its gradient).
    template <class T>
    using view = score_view<T>;
    static constexpr const char* grad_name = "score";     ///< in backprop's messages
    static constexpr const char* output_name = "split scores";
    /// false: the kept outputs of a batch are laid out split by split (the
    /// scorer's y_off); true: `elements(1, o)` per packed row.
    static constexpr bool per_row = false;
    static constexpr const char* saved_name = "saved scores";

    /// Elements of one split's output, checked.
    static std::uint64_t elements(std::size_t n, std::size_t o, const char* what)
    {
        return checked_product(what, n, n, o);
    }
    /// A dense view of one split's output at `p`.
    template <class T>
    static view<T> dense(T* p, std::size_t n, std::size_t o)
    {
        return {p, n, o, static_cast<std::ptrdiff_t>(n * o)};
    }
    /// Split `k` of a padded output `[b, L, L(, o)]` (padded rows and columns left out).
    template <class T>
    static view<T> padded(T* base, std::size_t k, std::size_t n, std::size_t L, std::size_t o)
    {
        return padded_scores(base, k, n, L, o);
    }
    template <class T, class... A>
    static void check_grad(A&&... a)
    {
        check_score_grad<T>(a...);
    }
    /// check_grad naming the document `doc` split k belongs to (with_splits).
    template <class T, class G>
    static void check_document_grad(const char* who, std::size_t k, const G& g, std::size_t n, std::size_t o,
                                    std::size_t doc)
    {
        check_score_grad<T>(who, k, g, n, o, doc);
    }
    template <class T>
    static void softmax(view<T> y)
    {
        softmax_last_axis(y);
    }
    template <class T>
    static void softmax_backward(view<const T> y, view<const T> dy, view<T> ds)
    {
        detail::softmax_backward<T>(y, dy, ds);
    }
    template <class T>
    static view<const T> read_only(view<T> y)
    {
        return {y.data, y.n, y.labels, y.row_stride};
    }
    /// A read-only view of an owning `[n, n(, o)]` array; shape_error if it is not one.
    template <class A>
    static auto const_view_of(const A& a)
    {
        return as_score_view(a);
    }
    /// dst = src, both `[n, n(, o)]`.
    template <class T>
    static void assign(view<T> dst, view<const T> src)
    {
        if (src.n != 0) dst.map() = src.map();
    }
    /// A dense copy of `y` at `dst`.
    template <class T>
    static void copy(view<const T> y, T* dst)
    {
        if (y.n != 0) row_block(dst, y.n, y.n * y.labels) = y.map();
    }
    /// dst = src converted to dst's scalar (an output type apart from the
    /// compute type), both `[n, n(, o)]`.
    template <class O, class T>
    static void convert(view<O> dst, view<const T> src)
    {
        convert_rows(dst.data, dst.row_stride, src.data, src.row_stride, src.n, src.n * src.labels);
    }
    /// Tokens of one split's output.
    template <class T>
    static std::size_t tokens(const view<T>& y) noexcept
    {
        return y.n;
    }
    /// One split's owning output `[n, n(, o)]`, its size checked before
    /// xtensor multiplies the shape out unchecked.
    template <class O>
    static score_tensor<O> new_output(std::size_t n, std::size_t o)
    {
        to_index_size(checked_product("split scores", n, n, o, sizeof(O)), "split scores");
        if (o == 1) return score_tensor<O>::from_shape({n, n});
        return score_tensor<O>::from_shape({n, n, o});
    }
    /// The padded output `[b, L, L(, o)]`, padded cells not yet filled.
    template <class O>
    static score_array<O> new_padded(std::size_t b, std::size_t L, std::size_t o)
    {
        checked_product("padded scores", b, L, L, o, sizeof(O));
        if (o == 1) return score_array<O>::from_shape({b, L, L});
        return score_array<O>::from_shape({b, L, L, o});
    }
    /// Padded cells of `y` (outside each split's `[n, n]`) set to `pad`.
    template <class O, class Views>
    static void fill_padding(score_array<O>& y, const Views& views, O pad)
    {
        const std::size_t b = y.shape()[0], L = y.shape()[1];
        const std::size_t o = y.dimension() == 4 ? y.shape()[3] : 1;
        for (std::size_t k = 0; k < b; ++k) {
            const std::size_t n = views[k].rows;
            O* base = y.data() + k * L * L * o;
            for (std::size_t r = 0; r < L; ++r) {
                O* row = base + r * L * o;
                const std::size_t first = r < n ? n * o : 0;
                std::fill(row + first, row + L * o, pad);
            }
        }
    }

    // ---- the backend products (host ops, the bf16 forward) that serve it

    /// Split's `[n, n(, o)]` from its rows of V `va` and of T `t`.
    template <class Ops, class VA, class T>
    static void product(const VA& va, const T* t, const std::size_t* /*rows*/, std::size_t o, view<T> y, T* packed)
    {
        Ops::split_scores(va, t, o, y, packed);
    }
    /// dva = (overwritten), dt (the split's rows) from the gradient g.
    template <class Ops, class VA, class T, class DVA>
    static void product_backward(const VA& va, const T* t, const std::size_t* /*rows*/, std::size_t o,
                                 view<const T> g, DVA&& dva, T* dt, T* packed)
    {
        Ops::split_scores_backward(va, t, o, g, dva, dt, packed);
    }
    /// bf16 inference: split k's output from its bf16 rows of V and T.
    template <class F, class Dims, class D, class Args>
    static void bf16_product(const Dims& d, const D* vb, const D* tb, const Args&, std::size_t /*k*/,
                             std::size_t* /*rows*/, float* packed, view<float> y)
    {
        F::split_scores(d, vb, tb, packed, y);
    }

    // ---- the layer calls: a layer's members of this kind

    template <class L>
    static auto cost(const L& l, std::size_t count, std::size_t max_len, mode m)
    {
        return l.cost(count, max_len, m);
    }
    template <class L, class Items, class Args>
    static auto predict(const L& l, const Items& X, const Args&)
    {
        return l.predict(X);
    }
    template <class L, class Items, class Args, class Sink>
    static void predict_stream(const L& l, const Items& X, const Args&, Sink&& sink)
    {
        l.predict_stream(X, sink);
    }
    template <class L, class Items, class Args, class Dest, class Sink>
    static void predict_stream_into(const L& l, const Items& X, const Args&, Dest&& dest, Sink&& sink)
    {
        l.predict_stream_into(X, dest, sink);
    }
    template <class L, class Items, class Args>
    static auto forward(L& l, const Items& X, const Args&, mode m)
    {
        return l.forward(X, m);
    }
    template <class L>
    static auto padded_cost(const L& l, std::size_t count, std::size_t max_len, mode m)
    {
        return l.padded_cost(count, max_len, m);
    }
    template <class L, class X3, class Lengths, class Args>
    static auto predict_padded(const L& l, const X3& x, const Lengths& lengths, const Args&)
    {
        return l.predict_padded(x, lengths);
    }
    template <class L, class X3, class Lengths, class Args>
    static auto forward_padded(L& l, const X3& x, const Lengths& lengths, const Args&, mode m)
    {
        return l.forward_padded(x, lengths, m);
    }
};

}  // namespace detail
BIAFFINE_NAMESPACE_END
