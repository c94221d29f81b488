// biaffine/detail/labels_at_heads_kind.hpp - the output kind of labels at
// given heads: per split `[n, o]`, row m the labels of token m at its head
// (one head per token, split-relative). Its arguments are the heads; its
// product reads T at each head's packed row (gathers_rows).
#pragma once

#include "biaffine/abi.hpp"

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <type_traits>
#include <vector>

#include "biaffine/detail/kind_support.hpp"
#include "biaffine/detail/split_checks.hpp"
#include "biaffine/errors.hpp"
#include "biaffine/mode.hpp"
#include "biaffine/tensor.hpp"

#include <xtensor/xadapt.hpp>

BIAFFINE_NAMESPACE_BEGIN
namespace detail {

/// One batch's heads: the caller's list seen through the batch's input
/// indices (no copy; read-only, so batches on several threads may share it).
template <class Heads>
struct indexed_heads {
    const Heads* all;
    span<const std::size_t> index;
    std::size_t size() const noexcept { return index.size(); }
    decltype(auto) operator[](std::size_t j) const { return (*all)[index[j]]; }
};

/// Labels at given heads: split k's `[n, o]`, row m the labels of token m at
/// its head.
struct labels_at_heads_kind {
    /// Token m's output reads T at its head's packed row (fill_rows): T for
    /// every row of the batch first, no packed block for the product.
    static constexpr bool gathers_rows = true;
    template <class T>
    using view = seq_view<T>;
    static constexpr const char* grad_name = "label";
    static constexpr const char* output_name = "split labels";
    static constexpr bool per_row = true;
    static constexpr const char* saved_name = "saved labels";

    static std::uint64_t elements(std::size_t n, std::size_t o, const char* what)
    {
        return checked_product(what, n, o);
    }
    template <class T>
    static view<T> dense(T* p, std::size_t n, std::size_t o)
    {
        return dense_rows(p, n, o);
    }
    /// Split `k` of a padded output `[b, L, o]`.
    template <class T>
    static view<T> padded(T* base, std::size_t k, std::size_t n, std::size_t L, std::size_t o)
    {
        return dense_rows(base + k * L * o, n, o);
    }
    template <class T, class... A>
    static void check_grad(A&&... a)
    {
        check_head_grad<T>(a...);
    }
    template <class T, class G>
    static void check_document_grad(const char* who, std::size_t k, const G& g, std::size_t n, std::size_t o,
                                    std::size_t /*doc*/)
    {
        check_head_grad<T>(who, k, g, n, o);
    }
    template <class T>
    static void softmax(view<T> y)
    {
        softmax_rows(y);
    }
    template <class T>
    static void softmax_backward(view<const T> y, view<const T> dy, view<T> ds)
    {
        softmax_rows_backward<T>(y, dy, ds);
    }
    template <class T>
    static view<const T> read_only(view<T> y)
    {
        return detail::read_only(y);
    }
    /// A read-only view of an owning `[n, o]` array; shape_error if it is not one.
    template <class A>
    static auto const_view_of(const A& a)
    {
        if (a.dimension() != 2) {
            throw shape_error(msg("expected [n, o], got ", a.dimension(), " dimensions"));
        }
        return as_const_view(a);
    }
    /// dst = src, both `[n, o]`.
    template <class T>
    static void assign(view<T> dst, view<const T> src)
    {
        if (src.rows != 0) dst.map() = src.map();
    }
    template <class T>
    static void copy(view<const T> y, T* dst)
    {
        if (y.rows != 0) row_block(dst, y.rows, y.cols) = y.map();
    }
    template <class O, class T>
    static void convert(view<O> dst, view<const T> src)
    {
        if (dst.col_stride == 1 && src.col_stride == 1) {
            convert_rows(dst.data, dst.row_stride, src.data, src.row_stride, src.rows, src.cols);
            return;
        }
        for (std::size_t m = 0; m < src.rows; ++m)
            for (std::size_t c = 0; c < src.cols; ++c) convert_run(&dst(m, c), &src(m, c), 1);
    }
    template <class T>
    static std::size_t tokens(const view<T>& y) noexcept
    {
        return y.rows;
    }
    template <class O>
    static score_tensor<O> new_output(std::size_t n, std::size_t o)
    {
        return score_tensor<O>::from_shape({n, o});
    }
    /// The padded output `[b, L, o]`: zeros from the start (padded rows hold 0).
    template <class O>
    static score_array<O> new_padded(std::size_t b, std::size_t L, std::size_t o)
    {
        to_index_size(checked_product("padded labels", b, L, o, sizeof(O)), "padded labels");
        return xt::zeros<O>({b, L, o});
    }
    template <class O, class Views>
    static void fill_padding(score_array<O>&, const Views&, O) noexcept
    {
    }

    // ---- arguments: one head per token, split-relative

    template <class Items, class Heads>
    static void check_args(const char* who, const Items& X, const Heads& H)
    {
        check_heads(who, X.size(), H, [&](std::size_t k) { return X[k].rows; },
                    [](std::size_t k) { return msg("split ", k); });
    }
    /// For every packed row (`off`: the splits' row offsets), the packed row
    /// of its head.
    template <class Items, class Heads>
    static void fill_rows(const Items& X, const Heads& H, const std::size_t* off, std::size_t* rows)
    {
        split_head_rows(X, H, off, rows);
    }
    template <class Heads, class Index>
    static indexed_heads<Heads> batch_args(const Heads& H, const Index& index) noexcept
    {
        return {&H, index};
    }

    /// Split k's heads as a span into its document's heads (with_splits:
    /// `p` the documents' index), every index checked (document, split
    /// inside it, token). Heads of one document are one contiguous range of
    /// any integer type.
    template <class P, class Lengths, class Heads>
    static auto document_args(const P& p, const Lengths& split_lengths, const Heads& heads)
    {
        using E = std::remove_cv_t<std::remove_reference_t<decltype(*std::data(*std::begin(heads)))>>;
        static_assert(std::is_integral<E>::value, "with_splits: heads must be integers");
        const std::size_t n_docs = p.docs.size();
        if (range_size(heads) != n_docs) {
            throw head_error(msg("with_splits: ", n_docs, " documents but ", range_size(heads), " lists of heads"));
        }
        tracked_vector<span<const E>> lists;
        lists.reserve(p.first.back());
        auto hit = std::begin(heads);
        std::size_t d = 0;
        for (const auto& ls : split_lengths) {
            const auto& hd = *hit;
            const std::size_t got = static_cast<std::size_t>(std::size(hd));
            if (got != p.docs[d].rows) {
                throw head_error(msg("with_splits: document ", d, ": ", got, " heads for ", p.docs[d].rows, " tokens"));
            }
            std::size_t row = 0;
            for (const auto& len : ls) {
                const auto n = static_cast<std::size_t>(len);
                lists.push_back(span<const E>(std::data(hd) + row, n));
                row += n;
            }
            ++hit;
            ++d;
        }
        check_heads(
            "with_splits", lists.size(), lists, [&](std::size_t k) { return lists[k].size(); },
            [&](std::size_t k) {
                const std::size_t doc = p.document_of(k);
                return msg("document ", doc, ", split ", k - p.first[doc]);
            });
        return lists;
    }
    /// Tracked bytes of the per-split heads spans (alive for the whole call).
    template <class Lists>
    static std::uint64_t args_bytes(const Lists& lists) noexcept
    {
        return static_cast<std::uint64_t>(lists.size()) * sizeof(typename Lists::value_type);
    }
    template <class Lists>
    static span<const typename Lists::value_type> args_of(const Lists& lists) noexcept
    {
        return span<const typename Lists::value_type>(lists.data(), lists.size());
    }

    // ---- the backend products

    template <class Ops, class VA, class T>
    static void product(const VA& va, const T* t, const std::size_t* rows, std::size_t o, view<T> y, T* /*packed*/)
    {
        Ops::head_scores(va, t, rows, o, y);
    }
    template <class Ops, class VA, class T, class DVA>
    static void product_backward(const VA& va, const T* t, const std::size_t* rows, std::size_t o, view<const T> g,
                                 DVA&& dva, T* dt, T* /*packed*/)
    {
        Ops::head_scores_backward(va, t, rows, o, g, dva, dt);
    }
    /// bf16 inference; `rows` holds one split's heads (max_len entries).
    template <class F, class Dims, class D, class Heads>
    static void bf16_product(const Dims& d, const D* vb, const D* tb, const Heads& H, std::size_t k,
                             std::size_t* rows, float* /*packed*/, view<float> y)
    {
        for (std::size_t m = 0; m < y.rows; ++m) rows[m] = static_cast<std::size_t>(H[k][m]);
        F::head_scores(d, vb, tb, rows, y);
    }

    // ---- the layer calls

    template <class L>
    static auto cost(const L& l, std::size_t count, std::size_t max_len, mode m)
    {
        return l.heads_cost(count, max_len, m);
    }
    template <class L, class Items, class Heads>
    static auto predict(const L& l, const Items& X, const Heads& H)
    {
        return l.predict_heads(X, H);
    }
    template <class L, class Items, class Heads, class Sink>
    static void predict_stream(const L& l, const Items& X, const Heads& H, Sink&& sink)
    {
        l.predict_heads_stream(X, H, sink);
    }
    template <class L, class Items, class Heads, class Dest, class Sink>
    static void predict_stream_into(const L& l, const Items& X, const Heads& H, Dest&& dest, Sink&& sink)
    {
        l.predict_heads_stream_into(X, H, dest, sink);
    }
    template <class L, class Items, class Heads>
    static auto forward(L& l, const Items& X, const Heads& H, mode m)
    {
        return l.forward_heads(X, H, m);
    }
    template <class L>
    static auto padded_cost(const L& l, std::size_t count, std::size_t max_len, mode m)
    {
        return l.padded_heads_cost(count, max_len, m);
    }
    template <class L, class X3, class Lengths, class Heads2>
    static auto predict_padded(const L& l, const X3& x, const Lengths& lengths, const Heads2& h)
    {
        return l.predict_heads_padded(x, lengths, h);
    }
    template <class L, class X3, class Lengths, class Heads2>
    static auto forward_padded(L& l, const X3& x, const Lengths& lengths, const Heads2& h, mode m)
    {
        return l.forward_heads_padded(x, lengths, h, m);
    }

    // ---- padded: heads `[count, L]` (int64), 0 past each length

    static std::uint64_t padded_arg_elements(std::size_t count, std::size_t L)
    {
        return checked_mul(count, L, "padded batch");
    }
    /// Per-sequence head lists of a padded `heads [b, L]` (integers; read
    /// through xtensor's indexing, any layout; lengths checked before),
    /// copied into `flat` as int64.
    template <class X3, class Lengths, class Heads2>
    static tracked_vector<span<const std::int64_t>> padded_split_args(const X3& x, const Lengths& lengths,
                                                                      const Heads2& heads,
                                                                      tracked_vector<std::int64_t>& flat)
    {
        const std::size_t b = x.shape()[0], L = x.shape()[1];
        if (heads.dimension() != 2 || heads.shape()[0] != b || heads.shape()[1] != L) {
            throw head_error(msg("padded input: heads must be [", b, ", ", L, "], got ",
                                 shape_str(std::vector<std::size_t>(heads.shape().begin(), heads.shape().end()))));
        }
        flat.assign(b * L, 0);
        tracked_vector<span<const std::int64_t>> lists(b);
        for (std::size_t k = 0; k < b; ++k) {
            const auto n = static_cast<std::size_t>(lengths[k]);
            for (std::size_t m = 0; m < n; ++m) flat[k * L + m] = static_cast<std::int64_t>(heads(k, m));
            lists[k] = span<const std::int64_t>(flat.data() + k * L, n);
        }
        return lists;
    }
    /// The scorer's padded interface copies the heads flat (int64) and lists them per sequence.
    static std::uint64_t padded_args_bytes(std::size_t count, std::size_t max_len)
    {
        const char* what = "batch cost";
        return checked_add(checked_mul(count, sizeof(span<const std::int64_t>), what),
                           checked_product(what, count, max_len, sizeof(std::int64_t)), what);
    }
    template <class Heads>
    static auto pad_args(const Heads& H, std::size_t count, std::size_t L, const std::int64_t* lens, std::int64_t* hp)
    {
        for (std::size_t k = 0; k < count; ++k) {
            const auto& hk = H[k];
            const auto n = static_cast<std::size_t>(lens[k]);
            for (std::size_t m = 0; m < n; ++m) hp[k * L + m] = static_cast<std::int64_t>(hk[m]);
            std::fill(hp + k * L + n, hp + (k + 1) * L, std::int64_t(0));
        }
        return xt::adapt(hp, count * L, xt::no_ownership(), std::array<std::size_t, 2>{count, L});
    }
};

}  // namespace detail
BIAFFINE_NAMESPACE_END
