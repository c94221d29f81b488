// Shared by the bf16 scorer tests (test_bf16_forward.cpp,
// test_scorer_bf16.cpp): a scorer's inputs and weights, and its scores in
// double with the bound a bf16 (or fp32) forward must meet - see
// test_bf16_forward.cpp's top comment for how the bound is derived.
#pragma once

#include <biaffine/bfloat16.hpp>
#include <biaffine/detail/compute/operands.hpp>

#include "bf16_helpers.hpp"

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

namespace bf16_test {

namespace bd = biaffine::detail;

struct problem {
    bd::scorer_dims d;
    std::vector<std::size_t> lengths;
    std::vector<std::vector<float>> x;  // per split [n, n_in]
    std::vector<float> wh, bh, wd, bd, w;
};

inline problem make_problem(std::size_t n_in, std::size_t hidden, std::size_t labels, bool bias_u, bool bias_v,
                     std::vector<std::size_t> lengths, std::uint32_t seed)
{
    problem p;
    p.d.n_in = n_in;
    p.d.hidden = hidden;
    p.d.labels = labels;
    p.d.bias_u = bias_u;
    p.d.bias_v = bias_v;
    p.lengths = std::move(lengths);
    std::mt19937 g(seed);
    std::uniform_real_distribution<float> U(-1.0f, 1.0f);
    const auto fill = [&](std::vector<float>& v, std::size_t n, float scale) {
        v.resize(n);
        for (auto& e : v) e = scale * U(g);
    };
    for (std::size_t n : p.lengths) {
        p.x.emplace_back();
        fill(p.x.back(), n * n_in, 1.0f);
    }
    const float sw = 1.0f / std::sqrt(float(n_in)), sb = 1.0f / std::sqrt(float(hidden));
    fill(p.wh, hidden * n_in, sw);
    fill(p.bh, hidden, 0.2f);
    fill(p.wd, hidden * n_in, sw);
    fill(p.bd, hidden, 0.2f);
    fill(p.w, labels * p.d.hu() * p.d.hv(), sb);
    return p;
}

inline double bf(float v, bool round) { return round ? double(biaffine::round_to_bfloat16(v)) : double(v); }

// One split's scores in double and their bound: S[m, (j, l)] and |err| allowed,
// for products in a precision whose storage rounds with unit roundoff
// `u_store` (2^-8 bf16, 2^-24 fp32) and sums in fp32.
struct reference {
    std::vector<double> s, bound;
};

inline reference bf16_reference(const problem& p, std::size_t k, bool round_operands, double u_store)
{
    const auto& d = p.d;
    const std::size_t n = p.lengths[k], h = d.hidden, hu = d.hu(), hv = d.hv(), o = d.labels;
    // Projections: value, magnitude (sum |x w| + |b|) and error bound.
    const auto project = [&](const std::vector<float>& W, const std::vector<float>& B, bool ones, std::size_t width,
                             std::vector<double>& val, std::vector<double>& err) {
        val.assign(n * width, 0.0);
        err.assign(n * width, 0.0);
        for (std::size_t i = 0; i < n; ++i) {
            for (std::size_t j = 0; j < h; ++j) {
                double z = B[j], mag = std::fabs(B[j]);
                for (std::size_t c = 0; c < d.n_in; ++c) {
                    const double t = bf(p.x[k][i * d.n_in + c], round_operands) * bf(W[j * d.n_in + c], round_operands);
                    z += t;
                    mag += std::fabs(t);
                }
                const double sum_err = gamma_fp32(d.n_in + 1) * mag;
                val[i * width + j] = z > 0 ? z : 0.0;
                err[i * width + j] = sum_err * (1 + u_store) + u_store * std::fabs(val[i * width + j]);
            }
            if (ones) val[i * width + h] = 1.0;
        }
    };
    std::vector<double> U, eU, V, eV;
    project(p.wh, p.bh, d.bias_u, hu, U, eU);
    project(p.wd, p.bd, d.bias_v, hv, V, eV);
    // T [n, o, hv] = U W_l.
    std::vector<double> T(n * o * hv), eT(n * o * hv);
    for (std::size_t i = 0; i < n; ++i)
        for (std::size_t l = 0; l < o; ++l)
            for (std::size_t c = 0; c < hv; ++c) {
                double t = 0, prop = 0, mag = 0;
                for (std::size_t r = 0; r < hu; ++r) {
                    const double wr = bf(p.w[(l * hu + r) * hv + c], round_operands);
                    t += U[i * hu + r] * wr;
                    prop += eU[i * hu + r] * std::fabs(wr);
                    mag += (std::fabs(U[i * hu + r]) + eU[i * hu + r]) * std::fabs(wr);
                }
                const std::size_t at = (i * o + l) * hv + c;
                T[at] = t;
                eT[at] = (prop + gamma_fp32(hu) * mag) * (1 + u_store) + u_store * std::fabs(t);
            }
    reference r;
    r.s.assign(n * n * o, 0.0);
    r.bound.assign(n * n * o, 0.0);
    for (std::size_t m = 0; m < n; ++m)
        for (std::size_t j = 0; j < n; ++j)
            for (std::size_t l = 0; l < o; ++l) {
                double s = 0, e = 0, mag = 0;
                for (std::size_t c = 0; c < hv; ++c) {
                    const double v = V[m * hv + c], ev = eV[m * hv + c], t = T[(j * o + l) * hv + c],
                                 et = eT[(j * o + l) * hv + c];
                    s += v * t;
                    e += ev * std::fabs(t) + std::fabs(v) * et + ev * et;
                    mag += (std::fabs(v) + ev) * (std::fabs(t) + et);
                }
                r.s[(m * n + j) * o + l] = s;
                r.bound[(m * n + j) * o + l] = e + gamma_fp32(hv) * mag;
            }
    return r;
}

}  // namespace bf16_test
