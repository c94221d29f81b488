// biaffine/decode.hpp - head decoding from one split's scores: greedy argmax,
// the single-root maximum spanning tree (MST) and the single-root projective
// tree (Eisner).
//
// Scores are one split's `[n, n]` arc matrix: `scores(m, l)` is the score of
// head l for dependent m (rows dependents, columns head candidates), and the
// diagonal `scores(m, m)` is the score of m being the root. A head vector
// `[n]` holds each token's head, with heads[r] == r for the root.
//
// Every decoder takes `(pointer, n, row_stride)` (a score_view's fields), a
// 2-d xtensor container or expression, or an Eigen matrix, and reads float,
// double or integer scores. Cost per score cell, measured in
// bench/bench_decode.cpp: MST a few ns (O(n^2)), Eisner O(n) per cell
// (O(n^3)), argmax a fraction of a ns (one vectorised pass per row). Each
// decoder is reentrant; MST and Eisner keep one scratch buffer per thread, so
// decoding from several threads at once (a concurrent sink) is safe.
#pragma once

#include "biaffine/abi.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <utility>
#include <vector>
#include <iterator>

#include "biaffine/bfloat16.hpp"
#include "biaffine/detail/eigen.hpp"

#include "biaffine/detail/decode_common.hpp"
#include "biaffine/detail/decode_eisner.hpp"
#include "biaffine/detail/decode_mst.hpp"
#include "biaffine/errors.hpp"
#include "biaffine/tensor.hpp"

BIAFFINE_NAMESPACE_BEGIN
namespace detail {

/// Index of the first maximum of row `r` (n >= 1 values; m names the row in
/// errors). Floating rows, in Eigen packets: one pass keeps the running
/// maximum and whether every value equals itself (a NaN does not; then the
/// row is searched for the first NaN, which throws), a second pass stops at
/// the first packet holding the maximum (ties keep the lowest column).
template <class V>
std::size_t argmax_row(const V* r, std::size_t n, std::size_t m)
{
    constexpr const char* where = "argmax_heads";
    if constexpr (std::is_same_v<V, float> || std::is_same_v<V, double>) {
        using namespace Eigen::internal;
        using P = typename packet_traits<V>::type;
        constexpr std::size_t w = static_cast<std::size_t>(packet_traits<V>::size);
        const std::size_t full = n / w * w;
        V best = r[0];
        bool nan = false;
        if (full != 0) {
            // Two running maxima: pmax's latency, not its throughput, bounds
            // one chain on rows of a few packets.
            P vmax = ploadu<P>(r), vmax2 = vmax;
            P vok = pcmp_eq(vmax, vmax);
            std::size_t l = w;
            for (; l + w < full; l += 2 * w) {
                const P x = ploadu<P>(r + l), y = ploadu<P>(r + l + w);
                vmax = pmax(vmax, x);
                vmax2 = pmax(vmax2, y);
                vok = pand(vok, pand(pcmp_eq(x, x), pcmp_eq(y, y)));
            }
            if (l < full) {
                const P x = ploadu<P>(r + l);
                vmax = pmax(vmax, x);
                vok = pand(vok, pcmp_eq(x, x));
            }
            best = predux_max(pmax(vmax, vmax2));
            // vok is all ones where every value so far equalled itself.
            nan = predux_any(pandnot(ptrue(vok), vok));
        }
        for (std::size_t l = full; l < n; ++l) {
            nan = nan || r[l] != r[l];
            best = r[l] > best ? r[l] : best;
        }
        if (nan) {
            for (std::size_t l = 0; l < n; ++l) check_not_nan(r[l], m, l, where);
        }
        std::size_t l = 0;
        const P vb = pset1<P>(best);
        while (l < full && !predux_any(pcmp_eq(ploadu<P>(r + l), vb))) l += w;
        while (r[l] != best) ++l;  // best is one of the row's values
        return l;
    } else {
        std::size_t best = 0;
        for (std::size_t l = 1; l < n; ++l) {
            if (r[best] < r[l]) best = l;
        }
        return best;
    }
}

template <class V, class Row>
std::vector<std::size_t> argmax_heads_rows(std::size_t n, const Row& row, V* buf)
{
    std::vector<std::size_t> heads(n);
    for (std::size_t m = 0; m < n; ++m) heads[m] = argmax_row(row(m, buf), n, m);
    return heads;
}

/// Runs `decode(n, row, buf)` on the strided `[n, n]` scores at `data`:
/// rows are read in place.
template <class T, class Decode>
std::vector<std::size_t> decode_pointer(const T* data, std::size_t n, std::size_t row_stride,
                                        const char* where, const Decode& decode)
{
    check_dense_args(data, n, row_stride, where);
    if constexpr (std::is_same_v<std::remove_cv_t<T>, bfloat16>) {
        // bfloat16 scores (a scorer's bfloat16 outputs): each row widened
        // exactly to float as it is read, so every decoder sees the same
        // numbers as on the widened matrix.
        std::vector<float> buf(n);
        const auto row = [data, row_stride, n](std::size_t m, float* b) -> const float* {
            to_float(data + m * row_stride, n, b);
            return b;
        };
        return decode(n, row, buf.data());
    } else {
        const auto row = [data, row_stride](std::size_t m, T*) -> const T* { return data + m * row_stride; };
        return decode(n, row, static_cast<T*>(nullptr));
    }
}

/// Runs `decode(n, row, buf)` on a square xtensor-like or Eigen-like matrix:
/// each row is gathered into one `[n]` buffer before it is read.
template <class E, class Decode>
std::vector<std::size_t> decode_matrix(const E& scores, const char* where, const Decode& decode)
{
    return with_square_matrix(scores, where, [&](std::size_t n, const auto& get) {
        using V = std::decay_t<decltype(get(std::size_t(0), std::size_t(0)))>;
        static_assert(std::is_arithmetic_v<V>, "decode: scores must be arithmetic");
        std::vector<V> buf(n);
        const auto row = [&get, n](std::size_t m, V* b) -> const V* {
            for (std::size_t l = 0; l < n; ++l) b[l] = get(m, l);
            return b;
        };
        return decode(n, row, buf.data());
    });
}

struct argmax_decoder {
    template <class V, class Row>
    std::vector<std::size_t> operator()(std::size_t n, const Row& row, V* buf) const
    {
        return argmax_heads_rows(n, row, buf);
    }
};
struct mst_decoder {
    template <class V, class Row>
    std::vector<std::size_t> operator()(std::size_t n, const Row& row, V* buf) const
    {
        return mst_heads_rows(n, row, buf);
    }
};
struct eisner_decoder {
    template <class V, class Row>
    std::vector<std::size_t> operator()(std::size_t n, const Row& row, V* buf) const
    {
        return eisner_heads_rows(n, row, buf);
    }
};

}  // namespace detail

/// Greedy heads: for each dependent row m of the `[n, n]` scores at
/// `data[m * row_stride + l]`, the column with the highest score (the diagonal
/// means root). Ties: lowest column. Returns `[n]`; the result need not be a
/// tree. One vectorised pass per row. Throws error on NaN (naming row and
/// column), shape_error if row_stride < n, error on a null pointer with n > 0.
template <class T>
std::vector<std::size_t> argmax_heads(const T* data, std::size_t n, std::size_t row_stride)
{
    return detail::decode_pointer(data, n, row_stride, "argmax_heads", detail::argmax_decoder{});
}

/// argmax_heads of a square `[n, n]` matrix: a 2-d xtensor expression or
/// container (`.shape()`, `e(m, l)`) or an Eigen-like matrix (`.rows()`,
/// `.cols()`). Throws shape_error unless 2-d and square.
template <class E>
std::vector<std::size_t> argmax_heads(const E& scores)
{
    return detail::decode_matrix(scores, "argmax_heads", detail::argmax_decoder{});
}

/// Maximum spanning tree heads with exactly one root, from the `[n, n]` scores
/// at `data[m * row_stride + l]` (score of head l for dependent m; the diagonal
/// is the score of m attaching to the artificial root). Returns `[n]` with
/// heads[r] == r for the single root r; every token reaches r, no cycles. The
/// total score (sum of scores(m, heads[m])) is the maximum over all single-root
/// trees. Infinite scores rank by tier: fewer -inf (more +inf) arcs first, then
/// the finite sum, so -inf arcs are avoided whenever a tree without them exists.
///
/// Tie rule: deterministic. Edmonds' search follows a path from token 0 along
/// each node's best in-arc; among equal best arcs into a node the lowest head
/// index wins (the root only once nothing else is left), and a contracted
/// cycle's reduced arcs keep the first member in path order. Continuous scores
/// have one optimum, so this matters only for exact ties (integer scores,
/// masks, infinities), where the tree may differ from the one earlier versions
/// returned, with the same score. Not otherwise specified (e.g. not the
/// lexicographically smallest tree).
///
/// n == 0 -> {}, n == 1 -> {0}. O(n^2) time; per thread, a double copy of the
/// scores plus one row per contracted cycle, at most `[2n+2, n+1]` doubles
/// (kept between calls up to 2 MB). Throws error on NaN (naming row and column),
/// shape_error if row_stride < n, error on a null pointer with n > 0.
template <class T>
std::vector<std::size_t> mst_heads(const T* data, std::size_t n, std::size_t row_stride)
{
    return detail::decode_pointer(data, n, row_stride, "mst_heads", detail::mst_decoder{});
}

/// mst_heads of a square `[n, n]` matrix: a 2-d xtensor expression or container
/// or an Eigen-like matrix. Throws shape_error unless 2-d and square.
template <class E>
std::vector<std::size_t> mst_heads(const E& scores)
{
    return detail::decode_matrix(scores, "mst_heads", detail::mst_decoder{});
}

/// Best projective tree with exactly one root (Eisner's algorithm,
/// first-order), from the `[n, n]` scores at `data[m * row_stride + l]` (same
/// layout as mst_heads). Projective: for every arc h -> d, every token between
/// h and d descends from h; the root's arc counts as coming from a position
/// before token 0. The total score is the maximum over all such trees, with
/// infinities ranked by tier as in mst_heads. Equals mst_heads' score whenever
/// the best tree is projective.
///
/// Tie rule: deterministic; each chart cell keeps its first best split (lowest
/// index) and the root is the lowest-index token among the best.
///
/// n == 0 -> {}, n == 1 -> {0}. O(n^3) time, `[n, n]` x 8 doubles and 3 x
/// `[n, n]` 32-bit split points per thread. Throws error on NaN (naming row
/// and column), shape_error if row_stride < n, error on a null pointer with
/// n > 0.
template <class T>
std::vector<std::size_t> eisner_heads(const T* data, std::size_t n, std::size_t row_stride)
{
    return detail::decode_pointer(data, n, row_stride, "eisner_heads", detail::eisner_decoder{});
}

/// eisner_heads of a square `[n, n]` matrix: a 2-d xtensor expression or
/// container or an Eigen-like matrix. Throws shape_error unless 2-d and square.
template <class E>
std::vector<std::size_t> eisner_heads(const E& scores)
{
    return detail::decode_matrix(scores, "eisner_heads", detail::eisner_decoder{});
}

namespace detail {

// A score_view handed to a decoder must hold arc scores: one label.
template <class T>
void check_arc_view(const score_view<T>& s, const char* where)
{
    if (s.labels != 1) {
        throw shape_error(msg(where, ": expected arc scores [n, n] (1 label), got a view of [", s.n, ", ", s.n, ", ",
                              s.labels, "]; pick labels at decoded heads with labels_at_heads"));
    }
    if (s.row_stride < 0) throw shape_error(msg(where, ": negative row stride ", s.row_stride));
}

}  // namespace detail

/// argmax_heads of one split's arc scores as a scorer hands them over (a
/// score_view, e.g. in a predict_stream sink). Throws shape_error for a view
/// of a label scorer (labels != 1), and as the pointer form otherwise.
template <class T>
std::vector<std::size_t> argmax_heads(const score_view<T>& s)
{
    detail::check_arc_view(s, "argmax_heads");
    return argmax_heads(s.data, s.n, static_cast<std::size_t>(s.row_stride));
}

/// mst_heads of one split's arc scores as a scorer hands them over (checked
/// as argmax_heads(score_view)).
template <class T>
std::vector<std::size_t> mst_heads(const score_view<T>& s)
{
    detail::check_arc_view(s, "mst_heads");
    return mst_heads(s.data, s.n, static_cast<std::size_t>(s.row_stride));
}

/// eisner_heads of one split's arc scores as a scorer hands them over
/// (checked as argmax_heads(score_view)).
template <class T>
std::vector<std::size_t> eisner_heads(const score_view<T>& s)
{
    detail::check_arc_view(s, "eisner_heads");
    return eisner_heads(s.data, s.n, static_cast<std::size_t>(s.row_stride));
}

/// The best label of each token at its given head, from a label scorer's
/// `[n, n, o]` view: `labels[m] = argmax_o s(m, heads[m], o)` (ties: lowest
/// label). `heads` `[n]`, each in `0..n-1` (as the decoders return them).
/// Throws shape_error for a wrong number of heads or a row stride shorter
/// than a row, length_error for a head out of range, error for a null view
/// with n > 0 or a NaN score (naming token and label).
template <class T, class Heads>
std::vector<std::size_t> labels_at_heads(const score_view<T>& s, const Heads& heads)
{
    const std::size_t n = s.n, o = s.labels;
    const auto count = static_cast<std::size_t>(std::distance(std::begin(heads), std::end(heads)));
    if (count != n) {
        throw shape_error(detail::msg("labels_at_heads: ", count, " heads for a split of ", n, " tokens"));
    }
    if (n == 0) return {};
    if (s.data == nullptr) throw error(detail::msg("labels_at_heads: null scores for a split of ", n, " tokens"));
    if (o == 0 || s.row_stride < static_cast<std::ptrdiff_t>(n * o)) {
        throw shape_error(detail::msg("labels_at_heads: row stride ", s.row_stride, " is shorter than a row of [", n,
                                      ", ", o, "]"));
    }
    std::vector<std::size_t> out(n);
    std::size_t m = 0;
    for (const auto& h : heads) {
        bool negative = false;
        if constexpr (std::is_signed<std::decay_t<decltype(h)>>::value) negative = h < 0;
        if (negative || static_cast<std::size_t>(h) >= n) {
            throw length_error(detail::msg("labels_at_heads: token ", m, " has head ", h, ", expected 0..", n - 1));
        }
        std::size_t best = 0;
        for (std::size_t k = 0; k < o; ++k) {
            const auto v = s(m, static_cast<std::size_t>(h), k);
            if (v != v) throw error(detail::msg("labels_at_heads: score is NaN at token ", m, ", label ", k));
            if (v > s(m, static_cast<std::size_t>(h), best)) best = k;
        }
        out[m++] = best;
    }
    return out;
}

/// True if heads `[n]` is a dependency tree: exactly one root (heads[r] == r),
/// every head in range, and every token reaches the root (so no cycles).
/// The empty vector counts as a tree (the decode of an empty split). O(n).
inline bool is_tree(const std::vector<std::size_t>& heads)
{
    const std::size_t n = heads.size();
    if (n == 0) return true;
    std::size_t roots = 0;
    for (std::size_t i = 0; i < n; ++i) {
        if (heads[i] >= n) return false;
        if (heads[i] == i) ++roots;
    }
    if (roots != 1) return false;
    // 0 unvisited, 1 on the current walk, 2 known to reach the root.
    std::vector<unsigned char> state(n, 0);
    std::vector<std::size_t> walk;
    for (std::size_t i = 0; i < n; ++i) {
        walk.clear();
        std::size_t v = i;
        while (state[v] == 0 && heads[v] != v) {
            state[v] = 1;
            walk.push_back(v);
            v = heads[v];
        }
        if (state[v] == 1) return false;  // came back onto this walk: a cycle
        state[v] = 2;
        for (std::size_t w : walk) state[w] = 2;
    }
    return true;
}

BIAFFINE_NAMESPACE_END
