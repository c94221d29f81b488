// biaffine/detail/output_kind.hpp - what a scorer computes per split, as a
// policy: full scores `[n, n(, o)]` or labels at given heads `[n, o]`.
//
// The scorer, its padded interface, with_splits and with_pad_seq_unpad_matrix
// each have one forward and one backward path, templated on the kind (as
// the batcher's `template <bool Heads>`); a kind says what one split's
// output looks like, how its softmax and the softmax backward run, which
// backend product makes it from the packed rows and which one takes its
// gradient back. A third kind (top-k heads, marginals) is one more policy.
#pragma once

#include "biaffine/abi.hpp"

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "biaffine/bfloat16.hpp"
#include "biaffine/detail/eigen.hpp"
#include "biaffine/detail/softmax.hpp"
#include "biaffine/detail/split_checks.hpp"
#include "biaffine/errors.hpp"
#include "biaffine/mode.hpp"
#include "biaffine/tensor.hpp"

BIAFFINE_NAMESPACE_BEGIN
namespace detail {

// In-place softmax of one split's scores over the last axis: heads when there
// is one label, labels otherwise.
template <class T>
void softmax_last_axis(score_view<T> s)
{
    const std::size_t group = s.labels == 1 ? s.n : s.labels;
    const std::size_t groups_per_row = s.labels == 1 ? 1 : s.n;
    for (std::size_t m = 0; m < s.n; ++m) {
        T* row = s.data + static_cast<std::ptrdiff_t>(m) * s.row_stride;
        for (std::size_t g = 0; g < groups_per_row; ++g) softmax_group(row + g * group, group);
    }
}

// dS = Y * (dY - sum(dY * Y)) over the softmax axis, into `ds` (dense).
template <class T>
void softmax_backward(score_view<const T> y, score_view<const T> dy, score_view<T> ds)
{
    const std::size_t group = y.labels == 1 ? y.n : y.labels;
    const std::size_t groups_per_row = y.labels == 1 ? 1 : y.n;
    for (std::size_t m = 0; m < y.n; ++m) {
        const T* yr = y.data + static_cast<std::ptrdiff_t>(m) * y.row_stride;
        const T* dyr = dy.data + static_cast<std::ptrdiff_t>(m) * dy.row_stride;
        T* dsr = ds.data + static_cast<std::ptrdiff_t>(m) * ds.row_stride;
        for (std::size_t g = 0; g < groups_per_row; ++g) {
            using array = Eigen::Array<T, Eigen::Dynamic, 1>;
            const auto len = static_cast<Eigen::Index>(group);
            const Eigen::Map<const array> yg(yr + g * group, len), dyg(dyr + g * group, len);
            Eigen::Map<array>(dsr + g * group, len) = yg * (dyg - (yg * dyg).sum());
        }
    }
}

// In-place softmax of each row of `[n, o]` over the labels.
template <class T>
void softmax_rows(seq_view<T> y)
{
    if (y.col_stride == 1) {
        for (std::size_t m = 0; m < y.rows; ++m) {
            softmax_group(y.data + static_cast<std::ptrdiff_t>(m) * y.row_stride, y.cols);
        }
        return;
    }
    auto ym = y.map();
    for (Eigen::Index m = 0; m < ym.rows(); ++m) {
        if (ym.cols() == 0) continue;
        auto r = ym.row(m).array();
        r = (r - r.maxCoeff()).exp();
        r /= r.sum();
    }
}

// dS = Y * (dY - sum(dY * Y)) per row of `[n, o]`, into `ds`.
template <class T>
void softmax_rows_backward(seq_view<const T> y, seq_view<const T> dy, seq_view<T> ds)
{
    const auto ym = y.map();
    const auto dym = dy.map();
    auto dsm = ds.map();
    for (Eigen::Index m = 0; m < ym.rows(); ++m) {
        const T dot = (ym.row(m).array() * dym.row(m).array()).sum();
        dsm.row(m).array() = ym.row(m).array() * (dym.row(m).array() - dot);
    }
}

// A dense `[n, o]` view at `p`.
template <class T>
seq_view<T> dense_rows(T* p, std::size_t n, std::size_t o)
{
    return {p, n, o, static_cast<std::ptrdiff_t>(o), 1};
}

/// dst[i] = src[i] in dst's scalar, i < len: a cast between float and
/// double, bfloat16's round to nearest even from float, exact widening from
/// bfloat16 (the one loop per scalar pair, vectorised by the compiler).
template <class O, class T>
void convert_run(O* dst, const T* src, std::size_t len) noexcept
{
    if constexpr (std::is_same<O, bfloat16>::value) {
        static_assert(std::is_same<T, float>::value, "bfloat16 outputs are rounded from float");
        to_bfloat16(src, len, dst);
    } else if constexpr (std::is_same<T, bfloat16>::value) {
        if constexpr (std::is_same<O, float>::value) {
            to_float(src, len, dst);
        } else {
            for (std::size_t i = 0; i < len; ++i) dst[i] = static_cast<O>(static_cast<float>(src[i]));
        }
    } else {
        for (std::size_t i = 0; i < len; ++i) dst[i] = static_cast<O>(src[i]);
    }
}

/// Each of `rows` rows of `len` contiguous elements converted (convert_run),
/// rows `dst_stride` / `src_stride` elements apart.
template <class O, class T>
void convert_rows(O* dst, std::ptrdiff_t dst_stride, const T* src, std::ptrdiff_t src_stride, std::size_t rows,
                  std::size_t len) noexcept
{
    for (std::size_t m = 0; m < rows; ++m) {
        convert_run(dst + static_cast<std::ptrdiff_t>(m) * dst_stride, src + static_cast<std::ptrdiff_t>(m) * src_stride,
                    len);
    }
}

/// The heads argument of a full-scores call: none.
struct no_heads {};

/// Full scores: split k's `[n, n(, o)]` block, every head candidate.
struct full_scores_kind {
    static constexpr bool heads = false;
    /// One split's output (and, const, its gradient).
    template <class T>
    using view = score_view<T>;
    static constexpr const char* grad_name = "score";     ///< in backprop's messages
    static constexpr const char* output_name = "split scores";

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
};

/// Labels at given heads: split k's `[n, o]`, row m the labels of token m at
/// its head.
struct labels_at_heads_kind {
    static constexpr bool heads = true;
    template <class T>
    using view = seq_view<T>;
    static constexpr const char* grad_name = "label";
    static constexpr const char* output_name = "split labels";

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
};

/// Checks the heads `H` of a labels-at-heads call on the splits `X` (nothing
/// for another kind); `who` names the caller in head_error's message.
template <class Kind, class Items, class Heads>
void check_kind_heads(const char* who, const Items& X, const Heads& H)
{
    if constexpr (Kind::heads) {
        check_heads(who, X.size(), H, [&](std::size_t k) { return X[k].rows; },
                    [](std::size_t k) { return msg("split ", k); });
    } else {
        (void)who;
        (void)X;
        (void)H;
    }
}

/// The dense view of split k's output at `p`, a destination the caller of a
/// stream handed out (predict_stream_into): null is refused for a split with
/// anything to write; `who` names the call.
template <class Kind, class T>
typename Kind::template view<T> caller_destination(const char* who, T* p, std::size_t k, std::size_t n, std::size_t o)
{
    if (p == nullptr && n != 0) {
        throw error(msg(who, ": the destination given for split ", k, " (", n, " tokens) is null"));
    }
    return Kind::dense(p, n, o);
}

}  // namespace detail
BIAFFINE_NAMESPACE_END
