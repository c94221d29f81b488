// biaffine/detail/kind_support.hpp - what every output kind
// (detail/output_kind.hpp) is built from: the softmax over one split's
// output and its backward, the conversion to an output type, the base of a
// kind without arguments (kind_without_args) and the layer calls of a kind
// the layers know by no member name (kind_layer_calls: their `*_as<Kind>`
// members), and the checks every layer runs on a kind's arguments.
#pragma once

#include "biaffine/abi.hpp"

#include <algorithm>
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

/// What a kind without arguments (no heads) does with them: nothing to
/// check, nothing per row, nothing to hand down.
struct kind_without_args {
    /// Outputs read T only at their own split's rows: the backend computes T
    /// a group of splits at a time and serves each split's product from its
    /// packed block (true: T at rows named per token, see
    /// labels_at_heads_kind).
    static constexpr bool gathers_rows = false;
    template <class Items, class Args>
    static void check_args(const char*, const Items&, const Args&) noexcept
    {
    }
    /// The packed row each token's product reads (gathers_rows only).
    template <class Items, class Args>
    static void fill_rows(const Items&, const Args&, const std::size_t*, std::size_t*) noexcept
    {
    }
    /// The arguments of a batch's splits, `index[j]` the input position of
    /// the batch's split j.
    template <class Args, class Index>
    static no_heads batch_args(const Args&, const Index&) noexcept
    {
        return {};
    }
    /// Elements of the padded arguments of a batch (with_pad_seq_unpad_matrix).
    static std::uint64_t padded_arg_elements(std::size_t, std::size_t) noexcept { return 0; }
    template <class Args>
    static no_heads pad_args(const Args&, std::size_t, std::size_t, const std::int64_t*, std::int64_t*) noexcept
    {
        return {};
    }
    /// The per-split arguments of a padded call (the scorer's padded interface).
    template <class X3, class Lengths, class Args, class Flat>
    static no_heads padded_split_args(const X3&, const Lengths&, const Args&, Flat&) noexcept
    {
        return {};
    }
    /// Heap bytes of those arguments for `count` sequences of `max_len`.
    static std::uint64_t padded_args_bytes(std::size_t, std::size_t) noexcept { return 0; }
    /// The per-split arguments of documents' arguments (with_splits: `p` the
    /// documents' index), what they hold (tracked bytes), and what the inner
    /// layer is handed.
    template <class P, class Lengths, class Args>
    static no_heads document_args(const P&, const Lengths&, const Args&) noexcept
    {
        return {};
    }
    static std::uint64_t args_bytes(no_heads) noexcept { return 0; }
    static no_heads args_of(no_heads) noexcept { return {}; }
};

/// The layer calls of a kind with no named members: each layer's generic
/// `*_as<Kind>` member (a kind defined outside the library inherits it;
/// the library's own kinds name the members a user's layer also has).
template <class Kind>
struct kind_layer_calls {
    template <class L>
    static auto cost(const L& l, std::size_t count, std::size_t max_len, mode m)
    {
        return l.template cost_as<Kind>(count, max_len, m);
    }
    template <class L, class Items, class Args>
    static auto predict(const L& l, const Items& X, const Args& a)
    {
        return l.template predict_as<Kind>(X, a);
    }
    template <class L, class Items, class Args, class Sink>
    static void predict_stream(const L& l, const Items& X, const Args& a, Sink&& sink)
    {
        l.template predict_stream_as<Kind>(X, a, sink);
    }
    template <class L, class Items, class Args, class Dest, class Sink>
    static void predict_stream_into(const L& l, const Items& X, const Args& a, Dest&& dest, Sink&& sink)
    {
        l.template predict_stream_into_as<Kind>(X, a, dest, sink);
    }
    template <class L, class Items, class Args>
    static auto forward(L& l, const Items& X, const Args& a, mode m)
    {
        return l.template forward_as<Kind>(X, a, m);
    }
    template <class L>
    static auto padded_cost(const L& l, std::size_t count, std::size_t max_len, mode m)
    {
        return l.template padded_cost_as<Kind>(count, max_len, m);
    }
    template <class L, class X3, class Lengths, class Args>
    static auto predict_padded(const L& l, const X3& x, const Lengths& lengths, const Args& a)
    {
        return l.template predict_padded_as<Kind>(x, lengths, a);
    }
    template <class L, class X3, class Lengths, class Args>
    static auto forward_padded(L& l, const X3& x, const Lengths& lengths, const Args& a, mode m)
    {
        return l.template forward_padded_as<Kind>(x, lengths, a, m);
    }
};

template <class Kind, class = void>
struct has_product_scratch : std::false_type {};
template <class Kind>
struct has_product_scratch<Kind, std::void_t<decltype(Kind::product_scratch_bytes(std::size_t(), std::size_t()))>>
    : std::true_type {};

/// Bytes a kind's product carves for itself on top of the backend's packed
/// block, for splits of up to max_len tokens and o labels: its optional
/// member `product_scratch_bytes(max_len, o)` (a normalisation that needs
/// working memory, e.g. the tree marginals' solver), 0 for a kind without
/// it. The scorer's cost counts it in every mode's scratch.
template <class Kind>
std::uint64_t kind_product_scratch_bytes(std::size_t max_len, std::size_t o)
{
    if constexpr (has_product_scratch<Kind>::value) {
        return Kind::product_scratch_bytes(max_len, o);
    } else {
        (void)max_len;
        (void)o;
        return 0;
    }
}

/// Checks the arguments `H` of a call of a kind on the splits `X` (heads:
/// head_error); `who` names the caller in the message.
template <class Kind, class Items, class Heads>
void check_kind_heads(const char* who, const Items& X, const Heads& H)
{
    Kind::check_args(who, X, H);
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
