// biaffine/layer.hpp - what every layer shares: the forward mode, the cost a
// layer reports for a batch, the backprop callback of a split-list layer, and
// the compile-time check of what a combinator needs from its inner layer.
//
// A combinator (with_splits, with_minibatch_by_padded_size,
// with_pad_seq_unpad_matrix) knows this protocol and the view types of
// tensor.hpp, never a concrete layer: the scorer is one implementation of it,
// your own layer can be another.
#pragma once

#include "biaffine/abi.hpp"

#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>
#include <utility>

#include "biaffine/backprop.hpp"
#include "biaffine/detail/checked.hpp"
#include "biaffine/detail/split_checks.hpp"
#include "biaffine/errors.hpp"
#include "biaffine/mode.hpp"
#include "biaffine/tensor.hpp"

BIAFFINE_NAMESPACE_BEGIN

/// Memory a batch of `count` splits padded to `max_len` needs, in bytes,
/// by lifetime. The batcher budgets with `total()`.
struct batch_cost {
    std::uint64_t scratch = 0; ///< temporaries carved from the workspace, freed when the call returns
    std::uint64_t heap = 0;    ///< other temporaries on the tracked heap, freed when the call returns
    std::uint64_t saved = 0;   ///< kept for backward until the callback runs (train only)
    std::uint64_t outputs = 0; ///< score tensors handed to the caller
    /// Bytes the compute backend holds on a device for the call (weights'
    /// copies excepted); 0 for the CPU backends.
    std::uint64_t device = 0;
    /// Everything, the unit a byte budget counts.
    std::uint64_t total() const
    {
        return detail::checked_add(detail::checked_add(detail::checked_add(scratch, heap, "batch cost"),
                                                       detail::checked_add(saved, outputs, "batch cost"),
                                                       "batch cost"),
                                   device, "batch cost");
    }
};

/// Backprop of a split-list layer: per-split score gradients in (`[n, n(, o)]`
/// views of the output type O), per-split input gradients written out
/// (`[n, n_in]` views of the value type T).
template <class T, class O = T>
using split_backprop = backprop_fn<void(span<const score_view<const O>>, span<const seq_view<T>>)>;

/// Backprop of a split-list layer's labels at given heads: per-split `[n, o]`
/// gradients in (O), per-split input gradients written out (`[n, n_in]`, T).
template <class T, class O = T>
using split_heads_backprop = backprop_fn<void(span<const seq_view<const O>>, span<const seq_view<T>>)>;

namespace detail {

/// Whether L's split backprop writes every element of every input-gradient
/// slot it is given (L declares `static constexpr bool writes_every_slot =
/// true`). with_splits zero-fills the documents' dX only for layers that do
/// not: the protocol lets a backprop leave slots alone, and their rows then
/// read as zero.
template <class L, class = void>
struct writes_every_slot : std::false_type {};
template <class L>
struct writes_every_slot<L, std::enable_if_t<std::remove_reference_t<L>::writes_every_slot>> : std::true_type {};

// Detection of one member each, so that a missing one is named in the
// static_assert message rather than in a page of template errors.
template <class L, class = void>
struct has_value_type : std::false_type {};
template <class L>
struct has_value_type<L, std::void_t<typename L::value_type>> : std::true_type {};

// L::value_type, or a stand-in when L has none: wrapping_layer then leaves
// the combinator's protocol check to name what is missing (void would make
// the combinator's own types fail first, in a page of template errors).
struct missing_value_type {};
template <class L, class = void>
struct value_type_of {
    using type = missing_value_type;
};
template <class L>
struct value_type_of<L, std::void_t<typename L::value_type>> {
    using type = typename L::value_type;
};

// L::output_type (the scalar of its scores, what streams out and their
// gradients), else L's value_type: a layer whose outputs are of its value
// type need not declare it.
template <class L, class = void>
struct output_type_of {
    using type = typename value_type_of<L>::type;
};
template <class L>
struct output_type_of<L, std::void_t<typename L::output_type>> {
    using type = typename L::output_type;
};
template <class L>
using output_t = typename output_type_of<L>::type;

template <class L, class = void>
struct has_n_in : std::false_type {};
template <class L>
struct has_n_in<L, std::void_t<decltype(std::size_t{std::declval<const L&>().n_in()})>> : std::true_type {};

template <class L, class = void>
struct has_labels : std::false_type {};
template <class L>
struct has_labels<L, std::void_t<decltype(std::size_t{std::declval<const L&>().labels()})>> : std::true_type {};

template <class L, class = void>
struct has_score_shape : std::false_type {};
template <class L>
struct has_score_shape<L, std::void_t<decltype(std::declval<const L&>().score_shape(std::size_t{}))>>
    : std::true_type {};

template <class L, class = void>
struct has_cost : std::false_type {};
template <class L>
struct has_cost<L, std::enable_if_t<std::is_same<decltype(std::declval<const L&>().cost(std::size_t{}, std::size_t{},
                                                                                         mode::eval)),
                                                 batch_cost>::value>> : std::true_type {};

template <class L, class = void>
struct has_padded_cost : std::false_type {};
template <class L>
struct has_padded_cost<L, std::enable_if_t<std::is_same<decltype(std::declval<const L&>().padded_cost(
                                                            std::size_t{}, std::size_t{}, mode::eval)),
                                                        batch_cost>::value>> : std::true_type {};

// The split list a combinator hands down (the batcher's own type).
template <class L>
using probe_items = span<const seq_view<const typename L::value_type>>;

template <class L, class = void>
struct has_predict : std::false_type {};
template <class L>
struct has_predict<L, std::void_t<decltype(std::declval<const L&>().predict(std::declval<const probe_items<L>&>()))>>
    : std::true_type {};

template <class T>
struct probe_sink {
    void operator()(std::size_t, score_view<const T>) const {}
};
template <class L, class = void>
struct has_predict_stream : std::false_type {};
template <class L>
struct has_predict_stream<L, std::void_t<decltype(std::declval<const L&>().predict_stream(
                                 std::declval<const probe_items<L>&>(), probe_sink<output_t<L>>{}))>>
    : std::true_type {};

template <class L, class = void>
struct has_forward : std::false_type {};
template <class L>
struct has_forward<L, std::void_t<typename L::backprop_type,
                                  decltype(std::declval<L&>().forward(std::declval<const probe_items<L>&>(),
                                                                      mode::train))>> : std::true_type {};

template <class T>
using probe_padded = tensor<T, 3>;
template <class L, class = void>
struct has_predict_padded : std::false_type {};
template <class L>
struct has_predict_padded<L, std::void_t<decltype(std::declval<const L&>().predict_padded(
                                 std::declval<const probe_padded<typename L::value_type>&>(),
                                 std::declval<const tracked_vector<std::int64_t>&>()))>> : std::true_type {};

template <class L, class = void>
struct has_forward_padded : std::false_type {};
template <class L>
struct has_forward_padded<L, std::void_t<decltype(std::declval<L&>().forward_padded(
                                 std::declval<const probe_padded<typename L::value_type>&>(),
                                 std::declval<const tracked_vector<std::int64_t>&>(), mode::train))>>
    : std::true_type {};

}  // namespace detail

/// Compile-time check of a split-list layer (what with_splits and
/// with_minibatch_by_padded_size wrap): `value_type` (inputs, parameters,
/// input gradients; `output_type`, the scalar of the scores, what streams
/// out and their gradients, may differ and defaults to it), `n_in()`, `labels()`,
/// `score_shape(n)`, `cost(count, max_len, mode)`, `predict(items)`,
/// `predict_stream(items, sink)`, `forward(items, mode)` with its
/// `backprop_type`. Each missing member fails with its own message.
template <class Layer>
constexpr bool check_split_layer()
{
    using L = std::remove_cv_t<std::remove_reference_t<Layer>>;
    static_assert(detail::has_value_type<L>::value, "biaffine layer protocol: the inner layer has no value_type");
    if constexpr (detail::has_value_type<L>::value) {
        static_assert(detail::has_n_in<L>::value, "biaffine layer protocol: the inner layer has no n_in() const");
        static_assert(detail::has_labels<L>::value, "biaffine layer protocol: the inner layer has no labels() const");
        static_assert(detail::has_score_shape<L>::value,
                      "biaffine layer protocol: the inner layer has no score_shape(n) const");
        static_assert(detail::has_cost<L>::value,
                      "biaffine layer protocol: the inner layer has no cost(count, max_len, mode) const -> batch_cost");
        static_assert(detail::has_predict<L>::value,
                      "biaffine layer protocol: the inner layer has no predict(split list) const");
        static_assert(detail::has_predict_stream<L>::value,
                      "biaffine layer protocol: the inner layer has no predict_stream(split list, sink) const");
        static_assert(detail::has_forward<L>::value,
                      "biaffine layer protocol: the inner layer has no forward(split list, mode) with a backprop_type");
    }
    return true;
}

/// Compile-time check of a padded layer (what with_pad_seq_unpad_matrix
/// wraps): `value_type`, `n_in()`, `labels()`, `score_shape(n)`,
/// `padded_cost(count, max_len, mode)`, `predict_padded(x, lengths)`,
/// `forward_padded(x, lengths, mode)`.
template <class Layer>
constexpr bool check_padded_layer()
{
    using L = std::remove_cv_t<std::remove_reference_t<Layer>>;
    static_assert(detail::has_value_type<L>::value, "biaffine padded layer protocol: the inner layer has no value_type");
    if constexpr (detail::has_value_type<L>::value) {
        static_assert(detail::has_n_in<L>::value, "biaffine padded layer protocol: the inner layer has no n_in() const");
        static_assert(detail::has_labels<L>::value,
                      "biaffine padded layer protocol: the inner layer has no labels() const");
        static_assert(detail::has_score_shape<L>::value,
                      "biaffine padded layer protocol: the inner layer has no score_shape(n) const");
        static_assert(detail::has_padded_cost<L>::value, "biaffine padded layer protocol: the inner layer has no "
                                                         "padded_cost(count, max_len, mode) const -> batch_cost");
        static_assert(detail::has_predict_padded<L>::value,
                      "biaffine padded layer protocol: the inner layer has no predict_padded(x, lengths) const");
        static_assert(detail::has_forward_padded<L>::value,
                      "biaffine padded layer protocol: the inner layer has no forward_padded(x, lengths, mode)");
    }
    return true;
}

namespace detail {

// Members of the labels-at-given-heads protocol, probed with the batcher's
// own heads list (one range of indices per split).
template <class L>
using probe_heads = span<const span<const std::size_t>>;
template <class T>
struct probe_heads_sink {
    void operator()(std::size_t, seq_view<const T>) const {}
};

template <class L, class = void>
struct has_heads_cost : std::false_type {};
template <class L>
struct has_heads_cost<L, std::enable_if_t<std::is_same<decltype(std::declval<const L&>().heads_cost(
                                                           std::size_t{}, std::size_t{}, mode::eval)),
                                                       batch_cost>::value>> : std::true_type {};
template <class L, class = void>
struct has_predict_heads : std::false_type {};
template <class L>
struct has_predict_heads<L, std::void_t<decltype(std::declval<const L&>().predict_heads(
                                std::declval<const probe_items<L>&>(), std::declval<const probe_heads<L>&>()))>>
    : std::true_type {};
template <class L, class = void>
struct has_predict_heads_stream : std::false_type {};
template <class L>
struct has_predict_heads_stream<
    L, std::void_t<decltype(std::declval<const L&>().predict_heads_stream(
           std::declval<const probe_items<L>&>(), std::declval<const probe_heads<L>&>(),
           probe_heads_sink<output_t<L>>{}))>> : std::true_type {};
template <class L, class = void>
struct has_forward_heads : std::false_type {};
template <class L>
struct has_forward_heads<L, std::void_t<typename L::heads_backprop_type,
                                        decltype(std::declval<L&>().forward_heads(
                                            std::declval<const probe_items<L>&>(),
                                            std::declval<const probe_heads<L>&>(), mode::train))>>
    : std::true_type {};

template <class L, class = void>
struct has_padded_heads : std::false_type {};
template <class L>
struct has_padded_heads<
    L, std::void_t<decltype(std::declval<const L&>().padded_heads_cost(std::size_t{}, std::size_t{}, mode::eval)),
                   decltype(std::declval<const L&>().predict_heads_padded(
                       std::declval<const probe_padded<typename L::value_type>&>(),
                       std::declval<const tracked_vector<std::int64_t>&>(),
                       std::declval<const xt::xtensor<std::int64_t, 2>&>())),
                   decltype(std::declval<L&>().forward_heads_padded(
                       std::declval<const probe_padded<typename L::value_type>&>(),
                       std::declval<const tracked_vector<std::int64_t>&>(),
                       std::declval<const xt::xtensor<std::int64_t, 2>&>(), mode::train))>> : std::true_type {};

}  // namespace detail

/// Compile-time check of the labels-at-given-heads members of a split-list
/// layer (checked where a combinator's heads entry points are used, so a
/// layer without them still wraps for full scores): `heads_cost(count,
/// max_len, mode)`, `predict_heads(items, heads)`, `predict_heads_stream(items,
/// heads, sink)`, `forward_heads(items, heads, mode)` with its
/// `heads_backprop_type`. `heads[k]` is split k's `[n]` head indices.
template <class Layer>
constexpr bool check_heads_layer()
{
    using L = std::remove_cv_t<std::remove_reference_t<Layer>>;
    static_assert(detail::has_heads_cost<L>::value,
                  "biaffine heads protocol: the inner layer has no heads_cost(count, max_len, mode) const -> batch_cost");
    static_assert(detail::has_predict_heads<L>::value,
                  "biaffine heads protocol: the inner layer has no predict_heads(split list, heads) const");
    static_assert(detail::has_predict_heads_stream<L>::value,
                  "biaffine heads protocol: the inner layer has no predict_heads_stream(split list, heads, sink) const");
    static_assert(detail::has_forward_heads<L>::value, "biaffine heads protocol: the inner layer has no "
                                                       "forward_heads(split list, heads, mode) with a heads_backprop_type");
    return true;
}

/// Compile-time check of a padded layer's labels at given heads (what
/// with_pad_seq_unpad_matrix's heads entry points need):
/// `padded_heads_cost(count, max_len, mode)`, `predict_heads_padded(x, lengths,
/// heads [b, L])`, `forward_heads_padded(x, lengths, heads, mode)`.
template <class Layer>
constexpr bool check_padded_heads_layer()
{
    using L = std::remove_cv_t<std::remove_reference_t<Layer>>;
    static_assert(detail::has_padded_heads<L>::value,
                  "biaffine padded heads protocol: the inner layer has no padded_heads_cost, predict_heads_padded(x, "
                  "lengths, heads) or forward_heads_padded(x, lengths, heads, mode)");
    return true;
}

namespace detail {

/// What every combinator passes through from the layer it wraps: the inner
/// layer itself (held by reference when constructed from an lvalue, moved in
/// from an rvalue), its value and output types, input width, label count
/// and score shape. A combinator derives from this, checks its inner layer
/// (check_split_layer or check_padded_layer) and adds its own forward.
template <class Inner>
class wrapping_layer {
protected:
    using inner_type = std::remove_reference_t<Inner>;

public:
    using value_type = typename value_type_of<inner_type>::type;
    using output_type = output_t<inner_type>;

    explicit wrapping_layer(Inner&& inner) : inner_(std::forward<Inner>(inner)) {}

    inner_type& inner() noexcept { return inner_; }                          ///< the wrapped layer
    const inner_type& inner() const noexcept { return inner_; }              ///< the wrapped layer
    std::size_t n_in() const { return inner_.n_in(); }                       ///< input width
    std::size_t labels() const { return inner_.labels(); }                   ///< o
    auto score_shape(std::size_t n) const { return inner_.score_shape(n); }  ///< `[n, n(, o)]`

protected:
    Inner inner_;
};

}  // namespace detail

BIAFFINE_NAMESPACE_END
