// biaffine/detail/tree_crf_matrix_tree.hpp - log Z and arc marginals over
// non-projective trees with one root: the Matrix-Tree theorem (Koo et al.
// 2007, single-root form), eliminated without subtractions.
//
// Weights w(m, h) = exp(s(m, h)) (head h of dependent m) and root weights
// r(m) = exp(s(m, m)). The tokens' Laplacian L (column m: L[h][m] =
// -w(m, h), L[m][m] = sum_h w(m, h)) with any one row z replaced by r is A_z,
// and det A_z = Z for every z. Eliminating the tokens other than z from A_z
// in the order of GTH (Grassmann-Taksar-Heyman):
//   * L's Schur complements keep zero column sums, so each pivot is the sum
//     of its column's (non-negative) off-diagonal magnitudes, and every
//     update adds non-negative products: no subtraction anywhere;
//   * the row r gains non-negative multiples of the pivot rows.
// What is left is one number F_z = r(z) + sum_h k_z[h] w(z, h), with k_z[h]
// >= 0 the weight of pivot row h inside the eliminated r row, and Z = (product
// of pivots) F_z. Since the pivots never read column z, F_z is linear in
// z's own weights and P(head(z) = h) = w(z, h) k_z[h] / F_z, P(z root) =
// r(z) / F_z: sums of positive terms, accurate to a few ulps times n for any
// score magnitude, with no cancellation (the plain LU of Koo's matrix cancels
// when the best heads close a cycle whose other arcs are weak).
//
// Every token must be the one left once, which by itself would take n
// eliminations of O(n^3). Divide and conquer shares them: eliminate one half
// of the tokens and recurse into the other, then the other way round; a
// level of size r costs O(r (r + n)) per eliminated token, O(n^3) in all
// (about 3.5 n^3 multiply-adds), O(n^2) memory.
//
// Range: column m is scaled by exp(-max_l s(m, l)) and the r row by its
// largest scaled entry, so every weight is in [0, 1] and no exp overflows.
// Weights more than ~745 nats below their column's best underflow to zero;
// the result stays exact unless that changes which trees carry the mass, and
// every left-over token gives its own value of log Z, so a disagreement
// between them (or a vanishing pivot) throws std::domain_error instead of
// returning a result that cannot be vouched for.
#pragma once

#include "biaffine/abi.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <initializer_list>
#include <limits>
#include <stdexcept>
#include <vector>

#include "biaffine/detail/checked.hpp"
#include "biaffine/detail/decode_common.hpp"
#include "biaffine/errors.hpp"

BIAFFINE_NAMESPACE_BEGIN
namespace detail {

/// Largest accepted spread of log Z between the left-over tokens, per token
/// and relative to max(1, |log Z|); beyond it the scores are out of the
/// solver's range.
inline constexpr double matrix_tree_tolerance = 1e-14;

/// sum += x with Neumaier's compensation term `comp` (the result is sum + comp).
inline void neumaier_add(double& sum, double& comp, double x)
{
    const double t = sum + x;
    comp += std::fabs(sum) >= std::fabs(x) ? (sum - t) + x : (x - t) + sum;
    sum = t;
}

inline double compensated_sum(std::initializer_list<double> xs)
{
    double sum = 0.0, comp = 0.0;
    for (double x : xs) neumaier_add(sum, comp, x);
    return sum + comp;
}

/// Per-thread working memory of the non-projective solver (when the caller
/// gives none).
struct matrix_tree_scratch {
    std::vector<double> cells;

    static matrix_tree_scratch& local()
    {
        thread_local matrix_tree_scratch s;
        return s;
    }
    void trim(std::size_t n)
    {
        // One huge split must not pin its matrices to the thread for good.
        if (n * n > (std::size_t(1) << 16)) *this = matrix_tree_scratch();
    }
};

/// One level of the divide and conquer: r tokens left (`ids`, original
/// indices). `lap` is [r + 1, r]: rows 0..r-1 the Laplacian's off-diagonal
/// magnitudes between the left tokens (lap[i * r + j]: weight of head i for
/// dependent j after the eliminations), row r the special row (the root
/// weights, or the forced root's Laplacian row). `coef` is [r + 1, n]: each
/// row as a combination of the original Laplacian rows.
struct matrix_tree_level {
    std::size_t r = 0;
    double* ids = nullptr;  // original indices (exact in a double)
    double* lap = nullptr;
    double* coef = nullptr;
    double log_pivots = 0.0;
};

struct matrix_tree_problem {
    std::size_t n = 0;
    const double* w = nullptr;  // [n, n] scaled weights
    bool forced = false;        // the special row is a token's Laplacian row (that token is the root)
    std::size_t forced_root = 0;
    double* mu = nullptr;
    double* log_det = nullptr;  // [n]: log Z from each left-over token (NaN if not a leaf)
    double* pool = nullptr;     // scratch for the levels' copies
    const char* where = "";
    unsigned char* gone = nullptr;  // [n] scratch of matrix_tree_eliminate
};

/// Eliminates the tokens at local positions [from, to) of `lv` into `out`
/// (which gets the r - (to - from) tokens left). GTH order: each pivot is its
/// column's off-diagonal sum over the rows still in the Laplacian.
inline void matrix_tree_eliminate(const matrix_tree_problem& pb, const matrix_tree_level& lv, std::size_t from,
                                  std::size_t to, matrix_tree_level& out)
{
    const std::size_t r = lv.r, n = pb.n;
    unsigned char* gone = pb.gone;  // [r] flags, this call's only
    std::fill(gone, gone + r, static_cast<unsigned char>(0));
    double* lap = lv.lap;
    double* coef = lv.coef;
    double log_pivots = lv.log_pivots;
    for (std::size_t k = from; k < to; ++k) {
        double p = 0.0;
        for (std::size_t i = 0; i < r; ++i) {
            if (!gone[i] && i != k) p += lap[i * r + k];
        }
        if (pb.forced) p += lap[r * r + k];
        if (!(p > std::numeric_limits<double>::min()) || !std::isfinite(p)) {
            throw std::domain_error(msg(pb.where, ": the scores are beyond the non-projective solver's range (token ",
                                        static_cast<std::size_t>(lv.ids[k]), " keeps no weight from the other tokens: a pivot of ", p, ")"));
        }
        log_pivots += std::log(p);
        gone[k] = 1;
        const double inv = 1.0 / p;
        const double* lk = lap + k * r;
        const double* ck = coef + k * n;
        for (std::size_t i = 0; i <= r; ++i) {
            if (i < r && gone[i]) continue;
            const double f = lap[i * r + k] * inv;
            if (f == 0.0) continue;
            double* li = lap + i * r;
            for (std::size_t j = 0; j < r; ++j) li[j] += f * lk[j];
            double* ci = coef + i * n;
            for (std::size_t j = 0; j < n; ++j) ci[j] += f * ck[j];
        }
    }
    // Compact what is left (the diagonal is never read: it stays whatever
    // the updates left there).
    const std::size_t left = r - (to - from);
    out.r = left;
    out.log_pivots = log_pivots;
    std::size_t a = 0;
    for (std::size_t i = 0; i <= r; ++i) {
        if (i < r && gone[i]) continue;
        if (i < r) out.ids[a] = lv.ids[i];
        std::size_t b = 0;
        for (std::size_t j = 0; j < r; ++j) {
            if (!gone[j]) out.lap[a * left + b++] = lap[i * r + j];
        }
        std::copy(coef + i * n, coef + (i + 1) * n, out.coef + a * n);
        ++a;
    }
}

/// Doubles one level of r tokens needs: ids, lap, coef.
inline std::size_t matrix_tree_level_cells(std::size_t r, std::size_t n) { return r + (r + 1) * r + (r + 1) * n; }

/// Doubles of the divide and conquer's levels from a first level of r tokens:
/// that level, and a copy and a child per halving.
inline std::size_t matrix_tree_stack_cells(std::size_t r, std::size_t n)
{
    std::size_t cells = matrix_tree_level_cells(r, n);
    for (std::size_t k = r, guard = 0; k >= 1 && guard < 64; k = (k + 1) / 2, ++guard) {
        cells += 2 * matrix_tree_level_cells(k, n);
        if (k == 1) break;
    }
    return cells + n;
}

/// Doubles of working memory matrix_tree_solve needs for n tokens: the
/// scaled weights `[n, n]`, log Z per left-over token, the shifts, the
/// elimination flags (a double each) and the levels (from n tokens: a forced
/// root's n - 1 need no more).
inline std::size_t matrix_tree_cells(std::size_t n) { return n * n + 3 * n + matrix_tree_stack_cells(n, n); }

inline matrix_tree_level matrix_tree_level_at(double* p, std::size_t r)
{
    matrix_tree_level lv;
    lv.r = r;
    lv.ids = p;
    lv.lap = p + r;
    lv.coef = p + r + (r + 1) * r;
    return lv;
}

/// The leaves below `lv`: each of its tokens left over once.
inline void matrix_tree_recurse(const matrix_tree_problem& pb, matrix_tree_level& lv, double* pool)
{
    const std::size_t n = pb.n;
    if (lv.r == 1) {
        const auto z = static_cast<std::size_t>(lv.ids[0]);
        const double* k = lv.coef + n;  // the special row's combination
        const double* wz = pb.w + z * n;
        const double root = pb.forced ? 0.0 : wz[z];
        double f = root;
        for (std::size_t h = 0; h < n; ++h) {
            if (h != z) f += k[h] * wz[h];
        }
        if (!(f > std::numeric_limits<double>::min()) || !std::isfinite(f)) {
            throw std::domain_error(msg(pb.where, ": the scores are beyond the non-projective solver's range (token ",
                                        z, " is left with a weight of ", f, ")"));
        }
        pb.log_det[z] = lv.log_pivots + std::log(f);
        if (pb.mu != nullptr) {
            double* out = pb.mu + z * n;
            const double inv = 1.0 / f;
            for (std::size_t h = 0; h < n; ++h) out[h] = h == z ? root * inv : k[h] * wz[h] * inv;
        }
        return;
    }
    const std::size_t half = lv.r / 2;
    // First the tokens [0, half) stay: copy the level, eliminate the rest.
    matrix_tree_level copy = matrix_tree_level_at(pool, lv.r);
    double* next = pool + matrix_tree_level_cells(lv.r, n);
    std::copy(lv.ids, lv.ids + lv.r, copy.ids);
    std::copy(lv.lap, lv.lap + (lv.r + 1) * lv.r, copy.lap);
    std::copy(lv.coef, lv.coef + (lv.r + 1) * n, copy.coef);
    copy.log_pivots = lv.log_pivots;
    {
        matrix_tree_level sub = matrix_tree_level_at(next, half);
        matrix_tree_eliminate(pb, copy, half, lv.r, sub);
        matrix_tree_recurse(pb, sub, next + matrix_tree_level_cells(half, n));
    }
    // Then the tokens [half, r) stay, from the level itself.
    matrix_tree_level sub = matrix_tree_level_at(next, lv.r - half);
    matrix_tree_eliminate(pb, lv, 0, half, sub);
    matrix_tree_recurse(pb, sub, next + matrix_tree_level_cells(lv.r - half, n));
}

/// Matrix-Tree on loaded scores `S` ([n, n] row-major doubles, S[d * n + h]
/// head h for dependent d, the diagonal the root arcs; finite or -inf),
/// n >= 1. Returns log Z (-inf when no tree has a finite score); writes
/// P(head(d) = h) into `mu[d * n + h]` when mu is not null. Throws
/// std::domain_error (prefixed by `where`) when the scores are beyond the
/// solver's range. `work`: matrix_tree_cells(n) doubles of the caller's (an
/// output kind's counted scratch), or null for the thread's own.
inline double matrix_tree_solve(std::size_t n, const double* S, double* mu, const char* where,
                                double* work = nullptr)
{
    constexpr double ninf = -std::numeric_limits<double>::infinity();
    if (n == 1) {
        if (mu != nullptr) mu[0] = 1.0;
        return S[0];
    }
    const bool own = work == nullptr;
    if (own) {
        auto& cells = matrix_tree_scratch::local().cells;
        cells.resize(matrix_tree_cells(n));
        work = cells.data();
    }
    struct {
        double* shift;
        double* log_det;
        unsigned char* gone;
        double* stack;
    } ws{work + n * n, work + n * n + n, reinterpret_cast<unsigned char*>(work + n * n + 2 * n), work + n * n + 3 * n};
    double* w = work;
    // Column shifts: each dependent's best score.
    double root_shift = ninf;
    std::size_t root_at = 0;
    for (std::size_t m = 0; m < n; ++m) {
        const double* row = S + m * n;
        const double c = *std::max_element(row, row + n);
        if (c == ninf) return ninf;  // token m has no head at all
        ws.shift[m] = c;
        for (std::size_t h = 0; h < n; ++h) w[m * n + h] = row[h] - c;  // log weights for now
        if (w[m * n + m] > root_shift) {
            root_shift = w[m * n + m];
            root_at = m;
        }
    }
    // Tokens that no other token may head must be the root.
    std::size_t headless = 0, forced_root = n;
    for (std::size_t m = 0; m < n; ++m) {
        bool any = false;
        for (std::size_t h = 0; h < n && !any; ++h) any = h != m && w[m * n + h] != ninf;
        if (!any) {
            ++headless;
            forced_root = m;
        }
    }
    if (headless > 1) return ninf;
    const bool forced = headless == 1;
    if (root_shift == ninf) return ninf;  // no token may be the root
    // The root weights shifted by their largest (for a forced root, that
    // root's weight is a factor of Z and leaves the tokens' weights alone).
    if (forced) {
        root_shift = w[forced_root * n + forced_root];
        root_at = forced_root;
    }
    if (root_shift == ninf) return ninf;
    // The shifts sum to the scores of the other columns' best heads plus
    // s(root_at, root_at): added with Neumaier's compensation, so that large
    // scores whose trees nearly cancel (log Z near 0 from scores of 1e4)
    // keep log Z's relative accuracy.
    double log_z = 0.0, comp = 0.0;
    for (std::size_t m = 0; m <= n; ++m) {
        neumaier_add(log_z, comp, m == n ? S[root_at * n + root_at] : (m == root_at ? 0.0 : ws.shift[m]));
    }
    for (std::size_t m = 0; m < n; ++m) {
        // A root weight's exponent s(m, m) - c_m - (s(r, r) - c_r) from the
        // scores themselves (compensated): the two differences may each be
        // ~1e4 while their sum is small.
        if (S[m * n + m] != ninf) {
            w[m * n + m] = compensated_sum({S[m * n + m], -ws.shift[m], -S[root_at * n + root_at], ws.shift[root_at]});
        }
        exp_in_place_exact(w + m * n, n);
    }

    // The first level: every token but a forced root.
    const std::size_t r = forced ? n - 1 : n;
    std::fill(ws.log_det, ws.log_det + n, std::numeric_limits<double>::quiet_NaN());
    matrix_tree_level top = matrix_tree_level_at(ws.stack, r);
    std::fill(top.lap, top.lap + (r + 1) * r + (r + 1) * n, 0.0);
    std::size_t a = 0;
    for (std::size_t t = 0; t < n; ++t) {
        if (forced && t == forced_root) continue;
        top.ids[a++] = static_cast<double>(t);
    }
    for (std::size_t i = 0; i < r; ++i) {
        const auto hi = static_cast<std::size_t>(top.ids[i]);
        top.coef[i * n + hi] = 1.0;
        for (std::size_t j = 0; j < r; ++j) {
            if (i != j) top.lap[i * r + j] = w[static_cast<std::size_t>(top.ids[j]) * n + hi];  // head hi of dependent ids[j]
        }
    }
    for (std::size_t j = 0; j < r; ++j) {
        const auto d = static_cast<std::size_t>(top.ids[j]);
        top.lap[r * r + j] = forced ? w[d * n + forced_root] : w[d * n + d];
    }
    if (forced) top.coef[r * n + forced_root] = 1.0;

    matrix_tree_problem pb;
    pb.n = n;
    pb.w = w;
    pb.forced = forced;
    pb.forced_root = forced_root;
    pb.mu = mu;
    pb.log_det = ws.log_det;
    pb.where = where;
    pb.gone = ws.gone;
    matrix_tree_recurse(pb, top, ws.stack + matrix_tree_level_cells(r, n));

    // Every left-over token computed the same determinant; they differ by a
    // few ulps times n unless underflow changed the result.
    double lo = std::numeric_limits<double>::infinity(), hi = -lo;
    for (std::size_t t = 0; t < n; ++t) {
        if (forced && t == forced_root) continue;
        lo = std::min(lo, ws.log_det[t]);
        hi = std::max(hi, ws.log_det[t]);
    }
    if (!(hi - lo <= matrix_tree_tolerance * static_cast<double>(n) * std::max(1.0, std::fabs(log_z + hi)))) {
        throw std::domain_error(msg(where, ": the scores are beyond the non-projective solver's range (log Z "
                                           "differs by ",
                                    hi - lo, " between elimination orders: weights underflowed)"));
    }
    if (forced && mu != nullptr) {
        double* out = mu + forced_root * n;
        for (std::size_t h = 0; h < n; ++h) out[h] = h == forced_root ? 1.0 : 0.0;
    }
    if (own) matrix_tree_scratch::local().trim(n);
    return log_z + (hi + comp);
}

}  // namespace detail
BIAFFINE_NAMESPACE_END
