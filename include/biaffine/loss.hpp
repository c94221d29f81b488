// biaffine/loss.hpp - a fused, numerically stable cross-entropy over heads for
// training on logits (scorer_config::train_outputs = train_output::logits).
//
// With softmax outputs, a cross-entropy gradient is -1/p at the gold head;
// when p underflows to 0 (a confident mistake, easy in float) that is -inf,
// and the softmax backward turns it into NaN in every gradient. Here the
// gradient with respect to the logits, softmax(S[m]) - onehot(gold[m]), is
// formed directly: every entry is in [-1, 1] for finite scores. The loss
// itself is logsumexp(S[m]) - S[m, gold[m]], computed from the row maximum.
#pragma once

#include "biaffine/abi.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <iterator>
#include <type_traits>
#include <utility>

#include "biaffine/detail/checked.hpp"
#include "biaffine/detail/eigen.hpp"
#include "biaffine/errors.hpp"
#include "biaffine/tensor.hpp"

BIAFFINE_NAMESPACE_BEGIN

namespace detail {

// One row of logits `s [len]`: returns logsumexp(s) - s[gold] and writes
// d = scale * (softmax(s) - onehot(gold)), from the row maximum.
template <class T>
double cross_entropy_row(const T* s_data, T* d_data, std::size_t len, std::size_t gold, double scale)
{
    using array = Eigen::Array<T, Eigen::Dynamic, 1>;
    const Eigen::Map<const array> s(s_data, static_cast<Eigen::Index>(len));
    Eigen::Map<array> d(d_data, static_cast<Eigen::Index>(len));
    const T mx = s.maxCoeff();
    d = (s - mx).exp();
    const T sum = d.sum();
    // Past the maximum every term is <= 1 and one is 1: sum is in [1, len].
    const double loss = std::log(static_cast<double>(sum)) + static_cast<double>(mx) -
                        static_cast<double>(s[static_cast<Eigen::Index>(gold)]);
    d *= static_cast<T>(scale) / sum;
    d[static_cast<Eigen::Index>(gold)] -= static_cast<T>(scale);
    return loss;
}

}  // namespace detail

/// Cross-entropy of the gold heads over one split's arc logits `[n, n]`
/// (rows dependents, columns heads; `logits.labels` must be 1): returns
/// `scale * sum_m (logsumexp(S[m, :]) - S[m, gold[m]])` and writes
/// `grad[m, l] = scale * (softmax(S[m, :])[l] - [l == gold[m]])` (grad may
/// be a view of the same shape anywhere, dense or padded). `gold[m]` in
/// `0..n-1` (the head's index within the split; a root points at itself, as
/// mst_heads returns it).
template <class T, class Gold>
double cross_entropy_heads(score_view<const T> logits, const Gold& gold, score_view<T> grad, double scale = 1.0)
{
    const std::size_t n = logits.n;
    if (logits.labels != 1 || grad.labels != 1) {
        throw shape_error(detail::msg("cross_entropy_heads: expected arc scores [n, n] (1 label), got ",
                                      logits.labels, " labels"));
    }
    if (grad.n != n) {
        throw shape_error(detail::msg("cross_entropy_heads: the gradient is [", grad.n, ", ", grad.n,
                                      "], the scores [", n, ", ", n, "]"));
    }
    if (static_cast<std::size_t>(std::distance(std::begin(gold), std::end(gold))) != n) {
        throw shape_error(detail::msg("cross_entropy_heads: ", std::distance(std::begin(gold), std::end(gold)),
                                      " gold heads for a split of ", n, " tokens"));
    }
    if (n != 0 && (logits.row_stride < static_cast<std::ptrdiff_t>(n) || grad.row_stride < static_cast<std::ptrdiff_t>(n))) {
        throw shape_error(detail::msg("cross_entropy_heads: row stride ",
                                      std::min(logits.row_stride, grad.row_stride), " is shorter than a row of ", n));
    }
    double loss = 0.0;
    std::size_t m = 0;
    for (const auto& head : gold) {
        bool negative = false;
        if constexpr (std::is_signed<std::decay_t<decltype(head)>>::value) negative = head < 0;
        if (negative || static_cast<std::size_t>(head) >= n) {
            throw length_error(detail::msg("cross_entropy_heads: token ", m, " has gold head ", head,
                                           ", expected 0..", n == 0 ? 0 : n - 1));
        }
        loss += detail::cross_entropy_row(logits.data + static_cast<std::ptrdiff_t>(m) * logits.row_stride,
                                          grad.data + static_cast<std::ptrdiff_t>(m) * grad.row_stride, n,
                                          static_cast<std::size_t>(head), scale);
        ++m;
    }
    return scale * loss;
}

/// The same over every split of a forward's outputs: `Y` a range of `[n, n]`
/// arrays (a score_list), `gold_heads` a range of per-split ranges of head
/// indices. Returns the summed loss times `scale` and one gradient array per
/// split, shaped like Y (what backprop takes). Errors name the split.
template <class T, class Scores, class Heads>
std::pair<double, score_list<T>> cross_entropy_heads(const Scores& Y, const Heads& gold_heads, double scale = 1.0)
{
    const auto n_splits = static_cast<std::size_t>(std::distance(std::begin(Y), std::end(Y)));
    const auto n_gold = static_cast<std::size_t>(std::distance(std::begin(gold_heads), std::end(gold_heads)));
    if (n_splits != n_gold) {
        throw shape_error(detail::msg("cross_entropy_heads: ", n_gold, " gold head lists for ", n_splits, " splits"));
    }
    std::pair<double, score_list<T>> out{0.0, score_list<T>()};
    out.second.reserve(n_splits);
    auto g = std::begin(gold_heads);
    std::size_t k = 0;
    for (const auto& y : Y) {
        const score_view<const T> s = as_score_view(y);
        score_tensor<T> d = score_tensor<T>::from_shape({s.n, s.n});
        try {
            out.first += cross_entropy_heads<T>(s, *g, score_view<T>{d.data(), s.n, 1, static_cast<std::ptrdiff_t>(s.n)},
                                                scale);
        } catch (const length_error& e) {
            throw length_error(detail::msg("split ", k, ": ", e.what()));
        } catch (const shape_error& e) {
            throw shape_error(detail::msg("split ", k, ": ", e.what()));
        }
        out.second.push_back(std::move(d));
        ++g;
        ++k;
    }
    return out;
}

/// Cross-entropy of gold labels at given heads (the label loss of a
/// labelled parser, on forward_heads' `train_output::logits`): `Y` a range of
/// `[n, o]` label logits, one per split; `gold_labels` a range of per-split
/// ranges of label indices `0..o-1`. Returns `scale * sum (logsumexp(Y[m, :])
/// - Y[m, gold[m]])` and one gradient `[n, o]` per split, `scale *
/// (softmax(Y[m, :]) - onehot(gold[m]))` (what the heads backprop takes;
/// finite wherever the logits are). Errors name split and token.
template <class T, class Labels, class Gold>
std::pair<double, score_list<T>> cross_entropy_labels(const Labels& Y, const Gold& gold_labels, double scale = 1.0)
{
    const auto n_splits = static_cast<std::size_t>(std::distance(std::begin(Y), std::end(Y)));
    const auto n_gold = static_cast<std::size_t>(std::distance(std::begin(gold_labels), std::end(gold_labels)));
    if (n_splits != n_gold) {
        throw shape_error(detail::msg("cross_entropy_labels: ", n_gold, " gold label lists for ", n_splits, " splits"));
    }
    std::pair<double, score_list<T>> out{0.0, score_list<T>()};
    out.second.reserve(n_splits);
    auto g = std::begin(gold_labels);
    std::size_t k = 0;
    for (const auto& y : Y) {
        if (y.dimension() != 2) {
            throw shape_error(detail::msg("cross_entropy_labels: split ", k, ": expected labels [n, o], got ",
                                          y.dimension(), " dimensions"));
        }
        const std::size_t n = y.shape()[0], o = y.shape()[1];
        const auto n_labels = static_cast<std::size_t>(std::distance(std::begin(*g), std::end(*g)));
        if (n_labels != n) {
            throw shape_error(detail::msg("cross_entropy_labels: split ", k, ": ", n_labels, " gold labels for ", n,
                                          " tokens"));
        }
        score_tensor<T> d = score_tensor<T>::from_shape({n, o});
        std::size_t m = 0;
        for (const auto& label : *g) {
            bool negative = false;
            if constexpr (std::is_signed<std::decay_t<decltype(label)>>::value) negative = label < 0;
            if (negative || static_cast<std::size_t>(label) >= o) {
                throw length_error(detail::msg("cross_entropy_labels: split ", k, ", token ", m, " has gold label ",
                                               label, ", expected 0..", o == 0 ? 0 : o - 1));
            }
            out.first += scale * detail::cross_entropy_row(y.data() + m * o, d.data() + m * o, o,
                                                           static_cast<std::size_t>(label), scale);
            ++m;
        }
        out.second.push_back(std::move(d));
        ++g;
        ++k;
    }
    return out;
}

BIAFFINE_NAMESPACE_END
