// biaffine/tree_crf.hpp - tree-structured probabilities of one split: the log
// partition over dependency trees with one root, the arc marginals, a fused
// tree CRF loss (full or partial annotation) and minimum-Bayes-risk decoding.
//
// Conventions as decode.hpp: one split's `[n, n]` arc scores, `scores(m, h)`
// the score of head h for dependent m, the diagonal `scores(m, m)` the score
// of m being the root; every tree has exactly one root. A tree's score is the
// sum of its arcs' scores, its probability exp(score - log Z).
//
// Two tree sets (`tree_kind`):
//   * non_projective: all spanning trees, by the Matrix-Tree theorem (single
//     root form), O(n^3) time, O(n^2) memory, in double on column-shifted
//     weights eliminated without subtraction (detail/tree_crf_matrix_tree.hpp),
//     so a cycle of strong arcs with weak exits does not cancel. Weights that
//     underflow (arcs ~745 nats below their token's best) are detected when
//     they change the result, which then throws std::domain_error;
//   * projective: the trees eisner_heads searches, by inside-outside over
//     Eisner's spans (detail/tree_crf_inside_outside.hpp): O(n^3) time,
//     O(n^2) memory, on linear weights when they hold the split and in the
//     log domain otherwise, so any finite magnitude.
// Per thread, the solvers keep their scratch between calls (a few `[n, n]`
// double matrices; freed again after splits of a few hundred tokens).
// Scores may be float or double (accumulated in double), finite or -inf (a
// masked arc); NaN and +inf throw error naming row and column.
#pragma once

#include "biaffine/abi.hpp"

#include <cmath>
#include <cstddef>
#include <iterator>
#include <limits>
#include <stdexcept>
#include <type_traits>
#include <utility>
#include <vector>

#include "biaffine/decode.hpp"
#include "biaffine/detail/decode_common.hpp"
#include "biaffine/detail/tree_crf_inside_outside.hpp"
#include "biaffine/detail/tree_crf_matrix_tree.hpp"
#include "biaffine/errors.hpp"
#include "biaffine/tensor.hpp"

BIAFFINE_NAMESPACE_BEGIN

/// Which trees a tree CRF sums over.
enum class tree_kind {
    non_projective,  ///< every spanning tree with one root (Matrix-Tree theorem)
    projective,      ///< projective trees with one root (inside-outside, Eisner's spans)
};

/// log Z of one split's `[n, n]` arc scores (a score_view with 1 label) over
/// the trees of `kind`: log of the sum over trees of exp(tree score). n == 0
/// -> 0. Throws shape_error for a label view or a short row stride, error for
/// a null view with n > 0, NaN or +inf (naming row and column),
/// std::domain_error when no tree has a finite score or (non_projective) the
/// scores are beyond the solver's range.
template <class T>
double tree_log_partition(score_view<const T> scores, tree_kind kind);

/// The arc marginals of one split: writes `marginals(m, h) = P(head(m) = h)`
/// (the diagonal P(m is the root); each row sums to 1) into a `[n, n]` view
/// of float or double (any row stride >= n; may not alias the scores) and
/// returns log Z. Errors as tree_log_partition, and shape_error for a
/// marginals view of another size.
template <class T, class U>
double tree_marginals(score_view<const T> scores, score_view<U> marginals, tree_kind kind);

/// Tree CRF loss of one split, fused like cross_entropy_heads: returns
/// `scale * (log Z - log Z_gold)` and writes `grad = scale * (marginals -
/// gold marginals)` (`[n, n]`, any row stride). `gold[m]` is token m's head
/// in `0..n-1` (the root points at itself) or -1 when unknown (partial
/// annotation): Z_gold sums over the trees that agree with every known head,
/// so with all heads known it is the gold tree's weight (gradient marginals
/// minus the gold one-hot) and with none known the loss and gradient are 0.
/// Throws length_error for a head outside -1..n-1, head_error naming the
/// token when the known heads give several roots, close a cycle, use a -inf
/// arc, or (projective) cross another arc or agree with no projective tree;
/// shape_error and std::domain_error as tree_marginals.
template <class T, class Gold>
double tree_crf_loss(score_view<const T> logits, const Gold& gold, score_view<T> grad, tree_kind kind,
                     double scale = 1.0);

/// The same over every split of a forward's outputs (`Y` a range of `[n, n]`
/// arrays, `gold_heads` a range of per-split head ranges, -1 unknown):
/// returns the summed loss times `scale` and one gradient per split, shaped
/// like Y. Errors name the split.
template <class T, class Scores, class Heads>
std::pair<double, score_list<T>> tree_crf_loss(const Scores& Y, const Heads& gold_heads, tree_kind kind,
                                               double scale = 1.0);

/// Minimum-Bayes-risk heads: the tree of `kind` maximising the sum of its
/// arcs' marginal probabilities (the expected number of correct heads),
/// found by mst_heads (non_projective) or eisner_heads (projective) on the
/// marginals P, not log P. Errors as tree_marginals.
template <class T>
std::vector<std::size_t> mbr_heads(score_view<const T> scores, tree_kind kind);

// ---------------------------------------------------------------------------
// Implementation.

namespace detail {

inline const char* tree_kind_name(tree_kind k)
{
    return k == tree_kind::projective ? "projective" : "non-projective";
}

/// Per-thread double copies: the scores, the marginals and the constrained
/// scores and marginals of the loss, `[n, n]` each.
struct tree_crf_scratch {
    decode_buffer<double> cells;

    static tree_crf_scratch& local()
    {
        thread_local tree_crf_scratch s;
        return s;
    }
    /// After a call: one huge split must not pin its matrices to the thread.
    void trim() { cells.trim(4 * decode_keep_cells); }
};

template <class T>
void check_tree_view(const score_view<T>& s, const char* where, const char* what)
{
    if (s.labels != 1) {
        throw shape_error(msg(where, ": expected ", what, " [n, n] (1 label), got a view of [", s.n, ", ", s.n, ", ",
                              s.labels, "]"));
    }
    if (s.n != 0 && s.data == nullptr) throw error(msg(where, ": null ", what, " for a split of ", s.n, " tokens"));
    if (s.n != 0 && s.row_stride < static_cast<std::ptrdiff_t>(s.n)) {
        throw shape_error(msg(where, ": ", what, " row stride ", s.row_stride, " is shorter than a row of ", s.n));
    }
}

/// The view's scores into `S` ([n, n] dense doubles); NaN and +inf throw.
template <class T>
void tree_crf_load(const score_view<const T>& s, double* S, const char* where)
{
    static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>, "tree CRF: float or double scores");
    const std::size_t n = s.n;
    for (std::size_t m = 0; m < n; ++m) {
        const T* r = s.data + static_cast<std::ptrdiff_t>(m) * s.row_stride;
        double* out = S + m * n;
        bool bad = false;
        for (std::size_t l = 0; l < n; ++l) {
            out[l] = static_cast<double>(r[l]);
            bad |= !(out[l] < std::numeric_limits<double>::infinity());  // NaN or +inf
        }
        if (bad) {
            for (std::size_t l = 0; l < n; ++l) {
                check_not_nan(out[l], m, l, where);
                if (out[l] > 0 && std::isinf(out[l])) {
                    throw error(msg(where, ": score is +inf at row (dependent) ", m, ", column (head) ", l,
                                    "; a tree CRF needs finite scores (or -inf for a masked arc)"));
                }
            }
        }
    }
}

/// log Z (and the marginals into mu unless null) of loaded scores; -inf when
/// no tree has a finite score. `work`: tree_solver_cells(kind, n) doubles of
/// the caller's, or null for the solver's per-thread scratch.
inline double tree_crf_solve(tree_kind kind, std::size_t n, const double* S, double* mu, const char* where,
                             double* work = nullptr)
{
    if (kind == tree_kind::projective) return inside_outside_solve(n, S, mu, work);
    return matrix_tree_solve(n, S, mu, where, work);
}

/// Doubles of working memory tree_crf_solve needs for a split of n tokens.
inline std::size_t tree_solver_cells(tree_kind kind, std::size_t n)
{
    return kind == tree_kind::projective ? inside_outside_cells(n) : matrix_tree_cells(n);
}

inline void throw_no_tree(tree_kind kind, const char* where)
{
    throw std::domain_error(msg(where, ": no ", tree_kind_name(kind), " tree has a finite score (every tree uses a -inf arc)"));
}

/// n * n, checked (the scratch holds four such matrices).
inline std::size_t tree_crf_cells(std::size_t n, const char* where)
{
    return to_index_size(checked_product("tree CRF: scores", n, n, 4, sizeof(double)), where) / (4 * sizeof(double));
}

/// Loads and solves one split into the thread's scratch: returns log Z; the
/// marginals are at cells + n * n when `marginals` is set.
template <class T>
double tree_crf_run(const score_view<const T>& s, tree_kind kind, bool marginals, const char* where,
                    double*& cells)
{
    check_tree_view(s, where, "scores");
    const std::size_t n = s.n;
    const std::size_t nn = tree_crf_cells(n, where);
    cells = tree_crf_scratch::local().cells.get(4 * nn);
    if (n == 0) return 0.0;
    tree_crf_load(s, cells, where);
    const double log_z = tree_crf_solve(kind, n, cells, marginals ? cells + nn : nullptr, where);
    if (log_z == -std::numeric_limits<double>::infinity()) throw_no_tree(kind, where);
    return log_z;
}

/// True if the arcs of the full tree `heads` (one root, no cycle) cross,
/// the root's arc counting as coming from before token 0; names one
/// crossing pair in `a`, `b`.
inline bool crossing_arcs(const std::vector<std::ptrdiff_t>& heads, std::size_t& a, std::size_t& b)
{
    const std::size_t n = heads.size();
    const auto span = [&](std::size_t d, std::ptrdiff_t& lo, std::ptrdiff_t& hi) {
        const auto h = heads[d] == static_cast<std::ptrdiff_t>(d) ? std::ptrdiff_t(-1) : heads[d];
        lo = std::min<std::ptrdiff_t>(h, static_cast<std::ptrdiff_t>(d));
        hi = std::max<std::ptrdiff_t>(h, static_cast<std::ptrdiff_t>(d));
    };
    for (std::size_t i = 0; i < n; ++i) {
        std::ptrdiff_t l1, h1;
        span(i, l1, h1);
        for (std::size_t j = 0; j < n; ++j) {
            std::ptrdiff_t l2, h2;
            span(j, l2, h2);
            if (l1 < l2 && l2 < h1 && h1 < h2) {
                a = i;
                b = j;
                return true;
            }
        }
    }
    return false;
}

/// Gold heads -> [n] of -1 (unknown) or 0..n-1, checked: range, roots,
/// cycles, projectivity of a full tree under the projective kind. Returns
/// the number of known heads.
template <class Gold>
std::size_t tree_crf_gold(const Gold& gold, std::size_t n, tree_kind kind, const char* where,
                          std::vector<std::ptrdiff_t>& heads)
{
    const auto count = static_cast<std::size_t>(std::distance(std::begin(gold), std::end(gold)));
    if (count != n) throw shape_error(msg(where, ": ", count, " gold heads for a split of ", n, " tokens"));
    heads.assign(n, -1);
    std::size_t m = 0, known = 0, root = n;
    for (const auto& h : gold) {
        using H = std::decay_t<decltype(h)>;
        // An unsigned head past n must not wrap to -1 (unknown).
        const bool wide = std::is_unsigned_v<H> && static_cast<unsigned long long>(h) >= n;
        const auto v = wide ? static_cast<long long>(n) : static_cast<long long>(h);
        if (v < -1 || v >= static_cast<long long>(n)) {
            throw length_error(msg(where, ": token ", m, " has gold head ", h, ", expected -1 (unknown) or 0..",
                                   n == 0 ? 0 : n - 1));
        }
        heads[m] = static_cast<std::ptrdiff_t>(v);
        if (v >= 0) ++known;
        if (v == static_cast<long long>(m)) {
            if (root != n) throw head_error(msg(where, ": tokens ", root, " and ", m, " are both gold roots"));
            root = m;
        }
        ++m;
    }
    // Cycles: follow known heads from each token; 0 unseen, 1 on this walk, 2 done.
    std::vector<unsigned char> state(n, 0);
    std::vector<std::size_t> walk;
    for (std::size_t i = 0; i < n; ++i) {
        walk.clear();
        std::size_t v = i;
        while (state[v] == 0 && heads[v] >= 0 && heads[v] != static_cast<std::ptrdiff_t>(v)) {
            state[v] = 1;
            walk.push_back(v);
            v = static_cast<std::size_t>(heads[v]);
        }
        if (state[v] == 1) {
            throw head_error(msg(where, ": the gold heads close a cycle through token ", v));
        }
        for (std::size_t w : walk) state[w] = 2;
        state[v] = 2;
    }
    if (known == n && kind == tree_kind::projective) {
        std::size_t a = 0, b = 0;
        if (crossing_arcs(heads, a, b)) {
            throw head_error(msg(where, ": the gold tree is not projective: the arcs into tokens ", a, " and ", b,
                                 " cross (skip the sentence or use the non-projective CRF)"));
        }
    }
    return known;
}

}  // namespace detail

template <class T>
double tree_log_partition(score_view<const T> scores, tree_kind kind)
{
    double* cells = nullptr;
    const double log_z = detail::tree_crf_run(scores, kind, false, "tree_log_partition", cells);
    detail::tree_crf_scratch::local().trim();
    return log_z;
}

template <class T, class U>
double tree_marginals(score_view<const T> scores, score_view<U> marginals, tree_kind kind)
{
    constexpr const char* where = "tree_marginals";
    detail::check_tree_view(marginals, where, "marginals");
    if (marginals.n != scores.n) {
        throw shape_error(detail::msg(where, ": the marginals are [", marginals.n, ", ", marginals.n,
                                      "], the scores [", scores.n, ", ", scores.n, "]"));
    }
    double* cells = nullptr;
    const double log_z = detail::tree_crf_run(scores, kind, true, where, cells);
    const std::size_t n = scores.n;
    for (std::size_t m = 0; m < n; ++m) {
        for (std::size_t h = 0; h < n; ++h) marginals(m, h) = static_cast<U>(cells[n * n + m * n + h]);
    }
    detail::tree_crf_scratch::local().trim();
    return log_z;
}

template <class T, class Gold>
double tree_crf_loss(score_view<const T> logits, const Gold& gold, score_view<T> grad, tree_kind kind, double scale)
{
    constexpr const char* where = "tree_crf_loss";
    detail::check_tree_view(grad, where, "gradient");
    if (grad.n != logits.n) {
        throw shape_error(detail::msg(where, ": the gradient is [", grad.n, ", ", grad.n, "], the scores [",
                                      logits.n, ", ", logits.n, "]"));
    }
    detail::check_tree_view(logits, where, "scores");
    const std::size_t n = logits.n;
    std::vector<std::ptrdiff_t> heads;
    const std::size_t known = detail::tree_crf_gold(gold, n, kind, where, heads);
    if (n == 0) return 0.0;
    if (known == 0) {  // every tree agrees: Z_gold == Z (the scores still checked)
        const std::size_t nn = detail::tree_crf_cells(n, where);
        detail::tree_crf_load(logits, detail::tree_crf_scratch::local().cells.get(nn), where);
        detail::tree_crf_scratch::local().trim();
        for (std::size_t m = 0; m < n; ++m) {
            for (std::size_t h = 0; h < n; ++h) grad(m, h) = T(0);
        }
        return 0.0;
    }
    double* cells = nullptr;
    const double log_z = detail::tree_crf_run(logits, kind, true, where, cells);
    const std::size_t nn = n * n;
    const double* S = cells;
    const double* mu = cells + nn;
    double* gold_s = cells + 2 * nn;
    double* gold_mu = cells + 3 * nn;
    for (std::size_t m = 0; m < n; ++m) {
        if (heads[m] >= 0 && S[m * n + static_cast<std::size_t>(heads[m])] == -std::numeric_limits<double>::infinity()) {
            throw head_error(detail::msg(where, ": token ", m, "'s gold head ", heads[m], " has score -inf"));
        }
    }
    double log_z_gold = 0.0;
    if (known == n) {
        // The gold tree alone: its score, and a one-hot gradient.
        for (std::size_t m = 0; m < n; ++m) log_z_gold += S[m * n + static_cast<std::size_t>(heads[m])];
        for (std::size_t i = 0; i < nn; ++i) gold_mu[i] = 0.0;
        for (std::size_t m = 0; m < n; ++m) gold_mu[m * n + static_cast<std::size_t>(heads[m])] = 1.0;
    } else {
        // The trees that agree with the known heads: every other arc of a
        // known token masked.
        for (std::size_t m = 0; m < n; ++m) {
            for (std::size_t h = 0; h < n; ++h) {
                gold_s[m * n + h] = heads[m] < 0 || static_cast<std::ptrdiff_t>(h) == heads[m]
                                        ? S[m * n + h]
                                        : -std::numeric_limits<double>::infinity();
            }
        }
        log_z_gold = detail::tree_crf_solve(kind, n, gold_s, gold_mu, where);
        if (log_z_gold == -std::numeric_limits<double>::infinity()) {
            throw head_error(detail::msg(where, ": no ", detail::tree_kind_name(kind),
                                         " tree with a finite score agrees with the known gold heads"));
        }
    }
    for (std::size_t m = 0; m < n; ++m) {
        for (std::size_t h = 0; h < n; ++h) grad(m, h) = static_cast<T>(scale * (mu[m * n + h] - gold_mu[m * n + h]));
    }
    detail::tree_crf_scratch::local().trim();
    return scale * (log_z - log_z_gold);
}

template <class T, class Scores, class Heads>
std::pair<double, score_list<T>> tree_crf_loss(const Scores& Y, const Heads& gold_heads, tree_kind kind, double scale)
{
    const auto n_splits = static_cast<std::size_t>(std::distance(std::begin(Y), std::end(Y)));
    const auto n_gold = static_cast<std::size_t>(std::distance(std::begin(gold_heads), std::end(gold_heads)));
    if (n_splits != n_gold) {
        throw shape_error(detail::msg("tree_crf_loss: ", n_gold, " gold head lists for ", n_splits, " splits"));
    }
    std::pair<double, score_list<T>> out{0.0, score_list<T>()};
    out.second.reserve(n_splits);
    auto g = std::begin(gold_heads);
    std::size_t k = 0;
    for (const auto& y : Y) {
        const score_view<const T> s = as_score_view(y);
        score_tensor<T> d = score_tensor<T>::from_shape({s.n, s.n});
        const score_view<T> dv{d.data(), s.n, 1, static_cast<std::ptrdiff_t>(s.n)};
        try {
            out.first += tree_crf_loss<T>(s, *g, dv, kind, scale);
        } catch (const head_error& e) {
            throw head_error(detail::msg("split ", k, ": ", e.what()));
        } catch (const length_error& e) {
            throw length_error(detail::msg("split ", k, ": ", e.what()));
        } catch (const shape_error& e) {
            throw shape_error(detail::msg("split ", k, ": ", e.what()));
        } catch (const error& e) {
            throw error(detail::msg("split ", k, ": ", e.what()));
        } catch (const std::domain_error& e) {
            throw std::domain_error(detail::msg("split ", k, ": ", e.what()));
        }
        out.second.push_back(std::move(d));
        ++g;
        ++k;
    }
    return out;
}

template <class T>
std::vector<std::size_t> mbr_heads(score_view<const T> scores, tree_kind kind)
{
    double* cells = nullptr;
    detail::tree_crf_run(scores, kind, true, "mbr_heads", cells);
    const std::size_t n = scores.n;
    const double* mu = cells + n * n;
    auto heads = kind == tree_kind::projective ? eisner_heads(mu, n, n) : mst_heads(mu, n, n);
    detail::tree_crf_scratch::local().trim();
    return heads;
}

BIAFFINE_NAMESPACE_END
