// biaffine/detail/tree_crf_inside_outside.hpp - log Z and arc marginals over
// projective trees with one root: inside-outside over Eisner's spans.
//
// The same spans as decode_eisner.hpp with max replaced by log-sum-exp, so
// every quantity is a log of a sum of positive terms: stable for any score
// magnitude (no cancellation, no overflow). The outside pass gathers each
// span's outside score from its parents (all wider, or of the same width for
// an incomplete span inside a complete one), so each span is one vectorised
// log-sum-exp over a contiguous buffer. O(n^3) time, O(n^2) memory.
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

/// Inside-outside on loaded log weights `S` ([n, n] row-major, S[d * n + h]
/// head h for dependent d, the diagonal the root arcs; finite or -inf),
/// n >= 1. Returns log Z; writes P(head(d) = h) into `mu[d * n + h]` when mu
/// is not null. Log Z is -inf when no projective tree has a finite score
/// (the marginals are then left unwritten).
inline double inside_outside_solve(std::size_t n, const double* S, double* mu)
{
    constexpr double ninf = -std::numeric_limits<double>::infinity();
    const std::size_t nn = n * n;
    auto& ws = inside_outside_scratch::local();
    // Inside: cr, cl, ir, il and transposes cr_t, cl_t, il_t; outside: ocr
    // (and its transpose), ocl and g, the two incomplete spans' outsides
    // combined with their arcs; one buffer.
    double* base = ws.cells.get(11 * nn + n + 1);
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

}  // namespace detail
BIAFFINE_NAMESPACE_END
