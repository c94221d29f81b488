// biaffine/detail/tree_crf_inside_outside.hpp - log Z and arc marginals over
// projective trees with one root: inside-outside over Eisner's spans.
//
// The same spans as decode_eisner.hpp with max replaced by log-sum-exp, so
// every quantity is a log of a sum of positive terms: stable for any score
// magnitude (no cancellation, no overflow). The outside pass gathers each
// span's outside score from its parents (all wider, or of the same width for
// an incomplete span inside a complete one), so each span is one vectorised
// log-sum-exp over a contiguous buffer. O(n^3) time, O(n^2) memory.
//
// An exp per term is slow, so the same recursions run first on linear
// weights, each dependent's arcs divided by their largest (every arc weight
// in [0, 1]): dot products of contiguous rows, still sums of positive terms.
// When that range does not hold the split (Z overflows, or underflow could
// have dropped more than 1e-17 of Z: Z below 1e-200, or n^3 terms each below
// the smallest normal double times the largest outside value), the split is
// redone in the log domain.
#pragma once

#include "biaffine/abi.hpp"

#include <cmath>
#include <cstddef>
#include <limits>

#include "biaffine/detail/decode_common.hpp"
#include "biaffine/detail/eigen.hpp"

BIAFFINE_NAMESPACE_BEGIN
namespace detail {

/// log(sum(exp(v[0..len)))); -inf when every term is -inf (or len == 0).
/// Overwrites v.
inline double log_sum_exp_inplace(double* v, std::size_t len)
{
    if (len == 0) return -std::numeric_limits<double>::infinity();
    Eigen::Map<Eigen::ArrayXd> a(v, static_cast<Eigen::Index>(len));
    const double mx = a.maxCoeff();
    if (mx == -std::numeric_limits<double>::infinity()) return mx;
    return mx + std::log((a - mx).exp().sum());
}

/// Per-thread tables of the projective solver (grow-only, trimmed after big
/// splits as the decoders' scratch).
struct inside_outside_scratch {
    decode_buffer<double> cells;

    static inside_outside_scratch& local()
    {
        thread_local inside_outside_scratch s;
        return s;
    }
};

/// Doubles of working memory inside_outside_solve needs for n tokens: the
/// linear pass's 17 `[n, n]` tables (the log domain's 11 and n + 1 fit in them).
inline std::size_t inside_outside_cells(std::size_t n) noexcept { return 17 * n * n; }

/// Inside-outside in the log domain (see inside_outside_solve), any
/// magnitude: one log-sum-exp per span and table; `base` holds
/// inside_outside_cells(n) doubles (null: the thread's buffer).
inline double inside_outside_log(std::size_t n, const double* S, double* mu, double* base = nullptr)
{
    if (base == nullptr) base = inside_outside_scratch::local().cells.get(inside_outside_cells(n));
    constexpr double ninf = -std::numeric_limits<double>::infinity();
    const std::size_t nn = n * n;
    // Inside: cr, cl, ir, il and transposes cr_t, cl_t, il_t; outside: ocr
    // (and its transpose), ocl and g, the two incomplete spans' outsides
    // combined with their arcs; one buffer.
    double* cr = base;            // complete, head s, tokens s..t   [s][t]
    double* cl = base + nn;       // complete, head t                [s][t]
    double* ir = base + 2 * nn;   // incomplete, arc s -> t          [s][t]
    double* il = base + 3 * nn;   // incomplete, arc t -> s          [s][t]
    double* cr_t = base + 4 * nn;  // the same, [t][s]
    double* cl_t = base + 5 * nn;
    double* il_t = base + 6 * nn;
    double* ocr = base + 7 * nn;
    double* ocl = base + 8 * nn;
    double* g = base + 9 * nn;       // log(exp(o_ir + S[t][s]) + exp(o_il + S[s][t])) [s][t]
    double* ocr_t = base + 10 * nn;
    double* buf = base + 11 * nn;  // n + 1 terms of one log-sum-exp

    for (std::size_t s = 0; s < n; ++s) {
        cr[s * n + s] = cl[s * n + s] = cr_t[s * n + s] = cl_t[s * n + s] = 0.0;
    }
    for (std::size_t w = 1; w < n; ++w) {
        for (std::size_t s = 0; s + w < n; ++s) {
            const std::size_t t = s + w;
            for (std::size_t k = 0; k < w; ++k) buf[k] = cr[s * n + s + k] + cl_t[t * n + s + 1 + k];
            const double inner = log_sum_exp_inplace(buf, w);
            ir[s * n + t] = inner + S[t * n + s];
            const double l = inner + S[s * n + t];
            il[s * n + t] = l;
            il_t[t * n + s] = l;
        }
        for (std::size_t s = 0; s + w < n; ++s) {
            const std::size_t t = s + w;
            for (std::size_t k = 0; k < w; ++k) buf[k] = ir[s * n + s + 1 + k] + cr_t[t * n + s + 1 + k];
            const double r = log_sum_exp_inplace(buf, w);
            cr[s * n + t] = r;
            cr_t[t * n + s] = r;
            for (std::size_t k = 0; k < w; ++k) buf[k] = cl[s * n + s + k] + il_t[t * n + s + k];
            const double l = log_sum_exp_inplace(buf, w);
            cl[s * n + t] = l;
            cl_t[t * n + s] = l;
        }
    }
    // The root's single arc, to r: its left span 0..r and right span r..n-1.
    for (std::size_t r = 0; r < n; ++r) buf[r] = S[r * n + r] + cl[r] + cr[r * n + n - 1];
    const double log_z = log_sum_exp_inplace(buf, n);
    if (mu == nullptr || log_z == ninf) return log_z;

    for (std::size_t i = 0; i < nn; ++i) ocr[i] = ocl[i] = g[i] = ocr_t[i] = ninf;
    for (std::size_t r = 0; r < n; ++r) {
        const double root = S[r * n + r];
        mu[r * n + r] = std::exp(root + cl[r] + cr[r * n + n - 1] - log_z);
    }
    // Outside, widest spans first: complete spans of width w have parents
    // that are wider (or the root), incomplete spans of width w the complete
    // spans of width >= w. Spans of width 0 have no children: skipped.
    for (std::size_t w = n - 1; w > 0; --w) {
        for (std::size_t s = 0; s + w < n; ++s) {
            const std::size_t t = s + w;
            // Right complete [s..t], head s.
            std::size_t c = 0;
            if (t == n - 1) buf[c++] = S[s * n + s] + cl[s];
            for (std::size_t p = 0; p < s; ++p) buf[c++] = ir[p * n + s] + ocr_t[t * n + p];  // inside cr[p][t]
            for (std::size_t q = t + 1; q < n; ++q) buf[c++] = g[s * n + q] + cl[(t + 1) * n + q];  // ir/il[s][q]
            const double o_r = log_sum_exp_inplace(buf, c);
            ocr[s * n + t] = o_r;
            ocr_t[t * n + s] = o_r;
            // Left complete [s..t], head t.
            c = 0;
            if (s == 0) buf[c++] = S[t * n + t] + cr[t * n + n - 1];
            for (std::size_t q = t + 1; q < n; ++q) buf[c++] = ocl[s * n + q] + il[t * n + q];  // inside cl[s][q]
            for (std::size_t p = 0; p < s; ++p) buf[c++] = g[p * n + t] + cr[p * n + s - 1];  // ir/il[p][t]
            ocl[s * n + t] = log_sum_exp_inplace(buf, c);
        }
        for (std::size_t s = 0; s + w < n; ++s) {
            const std::size_t t = s + w;
            // Incomplete s -> t inside cr[s][q], q >= t: right part cr[t][q].
            std::size_t c = 0;
            for (std::size_t q = t; q < n; ++q) buf[c++] = ocr[s * n + q] + cr[t * n + q];
            const double o_r = log_sum_exp_inplace(buf, c);
            // Incomplete t -> s inside cl[p][t], p <= s: left part cl[p][s].
            c = 0;
            for (std::size_t p = 0; p <= s; ++p) buf[c++] = ocl[p * n + t] + cl[p * n + s];
            const double o_l = log_sum_exp_inplace(buf, c);
            mu[t * n + s] = std::exp(ir[s * n + t] + o_r - log_z);  // head s, dependent t
            mu[s * n + t] = std::exp(il[s * n + t] + o_l - log_z);  // head t, dependent s
            buf[0] = o_r + S[t * n + s];
            buf[1] = o_l + S[s * n + t];
            g[s * n + t] = log_sum_exp_inplace(buf, 2);
        }
    }
    return log_z;
}

/// sum_k a[k] b[k], vectorised.
inline double io_dot(const double* a, const double* b, std::size_t len)
{
    const auto L = static_cast<Eigen::Index>(len);
    return Eigen::Map<const Eigen::VectorXd>(a, L).dot(Eigen::Map<const Eigen::VectorXd>(b, L));
}

/// The recursions of inside_outside_log on linear weights, each dependent's
/// scores shifted by their maximum. Returns false (writing nothing of use)
/// when the split is out of the linear range; otherwise sets log_z and the
/// marginals (when mu is not null). `base` as inside_outside_log's.
inline bool inside_outside_linear(std::size_t n, const double* S, double* mu, double& log_z, double* base = nullptr)
{
    if (base == nullptr) base = inside_outside_scratch::local().cells.get(inside_outside_cells(n));
    constexpr double ninf = -std::numeric_limits<double>::infinity();
    const std::size_t nn = n * n;
    double* W = base;               // arc weights, W[d * n + h]
    double* cr = base + nn;         // [s][t] as in inside_outside_log, linear
    double* cl = base + 2 * nn;
    double* ir = base + 3 * nn;
    double* il = base + 4 * nn;
    double* cr_t = base + 5 * nn;   // transposes, [t][s]
    double* cl_t = base + 6 * nn;
    double* il_t = base + 7 * nn;
    double* ir_t = base + 8 * nn;
    double* ocr = base + 9 * nn;
    double* ocl = base + 10 * nn;
    double* ocr_t = base + 11 * nn;
    double* ocl_t = base + 12 * nn;
    double* g = base + 13 * nn;     // o_ir W[t][s] + o_il W[s][t], [s][t]
    double* g_t = base + 14 * nn;
    double shift = 0.0;
    for (std::size_t d = 0; d < n; ++d) {
        const double* row = S + d * n;
        const double c = Eigen::Map<const Eigen::ArrayXd>(row, static_cast<Eigen::Index>(n)).maxCoeff();
        if (c == ninf) return false;  // no head at all: the log domain says so
        shift += c;
        for (std::size_t h = 0; h < n; ++h) W[d * n + h] = row[h] - c;
        exp_in_place_exact(W + d * n, n);
    }
    for (std::size_t s = 0; s < n; ++s) cr[s * n + s] = cl[s * n + s] = cr_t[s * n + s] = cl_t[s * n + s] = 1.0;
    for (std::size_t w = 1; w < n; ++w) {
        for (std::size_t s = 0; s + w < n; ++s) {
            const std::size_t t = s + w;
            const double inner = io_dot(cr + s * n + s, cl_t + t * n + s + 1, w);
            const double r = inner * W[t * n + s];
            ir[s * n + t] = r;
            ir_t[t * n + s] = r;
            const double l = inner * W[s * n + t];
            il[s * n + t] = l;
            il_t[t * n + s] = l;
        }
        for (std::size_t s = 0; s + w < n; ++s) {
            const std::size_t t = s + w;
            const double r = io_dot(ir + s * n + s + 1, cr_t + t * n + s + 1, w);
            cr[s * n + t] = r;
            cr_t[t * n + s] = r;
            const double l = io_dot(cl + s * n + s, il_t + t * n + s, w);
            cl[s * n + t] = l;
            cl_t[t * n + s] = l;
        }
    }
    double z = 0.0;
    for (std::size_t r = 0; r < n; ++r) z += W[r * n + r] * cl[r] * cr[r * n + n - 1];
    if (!(z >= 1e-200) || !(z <= std::numeric_limits<double>::max())) return false;
    log_z = shift + std::log(z);
    if (mu == nullptr) return true;

    for (std::size_t i = 0; i < nn; ++i) ocr[i] = ocl[i] = ocr_t[i] = ocl_t[i] = g[i] = g_t[i] = 0.0;
    const double inv_z = 1.0 / z;
    double out_max = 1.0;
    for (std::size_t r = 0; r < n; ++r) mu[r * n + r] = W[r * n + r] * cl[r] * cr[r * n + n - 1] * inv_z;
    for (std::size_t w = n - 1; w > 0; --w) {
        for (std::size_t s = 0; s + w < n; ++s) {
            const std::size_t t = s + w;
            double o = t == n - 1 ? W[s * n + s] * cl[s] : 0.0;
            o += io_dot(ir_t + s * n, ocr_t + t * n, s);                     // inside cr[p][t], p < s
            o += io_dot(g + s * n + t + 1, cl + (t + 1) * n + t + 1, n - 1 - t);  // ir/il[s][q], q > t
            ocr[s * n + t] = o;
            ocr_t[t * n + s] = o;
            double q = s == 0 ? W[t * n + t] * cr[t * n + n - 1] : 0.0;
            q += io_dot(ocl + s * n + t + 1, il + t * n + t + 1, n - 1 - t);  // inside cl[s][q], q > t
            if (s > 0) q += io_dot(g_t + t * n, cr_t + (s - 1) * n, s);       // ir/il[p][t], p < s
            ocl[s * n + t] = q;
            ocl_t[t * n + s] = q;
            out_max = std::max(out_max, std::max(o, q));
        }
        for (std::size_t s = 0; s + w < n; ++s) {
            const std::size_t t = s + w;
            const double o_r = io_dot(ocr + s * n + t, cr + t * n + t, n - t);  // cr[s][q], q >= t
            const double o_l = io_dot(ocl_t + t * n, cl_t + s * n, s + 1);      // cl[p][t], p <= s
            mu[t * n + s] = ir[s * n + t] * o_r * inv_z;
            mu[s * n + t] = il[s * n + t] * o_l * inv_z;
            const double gg = o_r * W[t * n + s] + o_l * W[s * n + t];
            g[s * n + t] = gg;
            g_t[t * n + s] = gg;
            out_max = std::max(out_max, std::max(o_r, o_l));
        }
    }
    // Terms that underflowed are each below the smallest normal double; at
    // most n^3 of them, each reaching Z through an outside factor <= out_max.
    const double nd = static_cast<double>(n);
    return std::isfinite(out_max) &&
           nd * nd * nd * std::numeric_limits<double>::min() * out_max <= 1e-17 * z;
}

/// Inside-outside on loaded log weights `S` ([n, n] row-major, S[d * n + h]
/// head h for dependent d, the diagonal the root arcs; finite or -inf),
/// n >= 1. Returns log Z; writes P(head(d) = h) into `mu[d * n + h]` when mu
/// is not null. Log Z is -inf when no projective tree has a finite score
/// (the marginals are then left unwritten). Linear weights when the split
/// fits their range, the log domain otherwise. `work`: inside_outside_cells(n)
/// doubles of the caller's (an output kind's counted scratch), or null for
/// the thread's own buffer.
inline double inside_outside_solve(std::size_t n, const double* S, double* mu, double* work = nullptr)
{
    double log_z = 0.0;
    if (!inside_outside_linear(n, S, mu, log_z, work)) log_z = inside_outside_log(n, S, mu, work);
    if (work == nullptr) inside_outside_scratch::local().cells.trim(17 * decode_keep_cells / 8);  // up to ~4 MB kept
    return log_z;
}

}  // namespace detail
BIAFFINE_NAMESPACE_END
