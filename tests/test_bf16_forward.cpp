// Tests of detail/compute/bf16_forward.hpp: the bf16 inference forward, native
// (where the build targets AVX512_BF16) and emulated (everywhere), against a
// reference in double with an error bound derived from where bf16 rounds.
//
// The bound (bf16_bound below): with the operands X, Wh, Wd, W rounded to
// bf16 and everything after them exact (double), U, V, T and S are the
// reference. The forward differs from it by
//   - U, V: their fp32 sums (error gamma_K sum |x w|, bias included) and
//     their rounding to bf16 (u = 2^-8 of the value);
//   - T = U W': U's error through |W|, the fp32 sum, T's rounding;
//   - S = V . T: both errors through the other's magnitude, the fp32 sum.
// ReLU is 1-Lipschitz, so it never enlarges an error. Each term is computed
// per element from the reference's magnitudes; the bound is an upper bound,
// not a fitted tolerance. The same bound with u = 2^-24 and unrounded
// operands holds the scorer's fp32 path (which checks the reference reads
// the scorer's layout the way the scorer does).
#include <biaffine/detail/compute/bf16_forward.hpp>
#include <biaffine/scorer.hpp>

#include "bf16_helpers.hpp"

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

using namespace biaffine;
namespace bd = biaffine::detail;

namespace {

struct problem {
    bd::scorer_dims d;
    std::vector<std::size_t> lengths;
    std::vector<std::vector<float>> x;  // per split [n, n_in]
    std::vector<float> wh, bh, wd, bd, w;
};

problem make_problem(std::size_t n_in, std::size_t hidden, std::size_t labels, bool bias_u, bool bias_v,
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

double bf(float v, bool round) { return round ? double(biaffine::round_to_bfloat16(v)) : double(v); }

// One split's scores in double and their bound: S[m, (j, l)] and |err| allowed,
// for products in a precision whose storage rounds with unit roundoff
// `u_store` (2^-8 bf16, 2^-24 fp32) and sums in fp32.
struct reference {
    std::vector<double> s, bound;
};

reference bf16_reference(const problem& p, std::size_t k, bool round_operands, double u_store)
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
                const double sum_err = bf16_test::gamma_fp32(d.n_in + 1) * mag;
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
                eT[at] = (prop + bf16_test::gamma_fp32(hu) * mag) * (1 + u_store) + u_store * std::fabs(t);
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
                r.bound[(m * n + j) * o + l] = e + bf16_test::gamma_fp32(hv) * mag;
            }
    return r;
}

template <class Math>
struct bf16_run {
    std::vector<std::vector<float>> scores;  // per split [n, n, o]
    std::vector<std::vector<float>> heads;   // per split [n, o] at the given heads
};

template <class Math>
bf16_run<Math> run_bf16(const problem& p, const std::vector<std::vector<std::size_t>>& heads)
{
    using F = bd::bf16_forward<Math>;
    using E = typename Math::in_elem;
    using D = typename Math::dot_elem;
    bd::bf16_weights<E> w;
    F::pack_weights(p.d, bd::weights_ref<float>{p.wh.data(), p.bh.data(), p.wd.data(), p.bd.data(), p.w.data()}, w);
    std::size_t max_len = 0;
    for (std::size_t n : p.lengths) max_len = std::max(max_len, n);
    std::vector<unsigned char> scratch(F::scratch_bytes(p.d, max_len));
    const auto x = [&](std::size_t k) {
        return seq_view<const float>{p.x[k].data(), p.lengths[k], p.d.n_in, static_cast<std::ptrdiff_t>(p.d.n_in), 1};
    };
    bf16_run<Math> r;
    r.scores.resize(p.lengths.size());
    r.heads.resize(p.lengths.size());
    std::vector<bool> seen(p.lengths.size(), false);
    F::run(w, x, p.lengths.size(), scratch.data(), [&](std::size_t k, const D* vb, const D* tb, float* packed) {
        REQUIRE(!seen[k]);
        seen[k] = true;
        const std::size_t n = p.lengths[k], o = p.d.labels;
        r.scores[k].assign(n * n * o, -1.0f);
        F::split_scores(p.d, vb, tb, packed, score_view<float>{r.scores[k].data(), n, o, static_cast<std::ptrdiff_t>(n * o)});
        r.heads[k].assign(n * o, -1.0f);
        F::head_scores(p.d, vb, tb, heads[k].data(),
                       seq_view<float>{r.heads[k].data(), n, o, static_cast<std::ptrdiff_t>(o), 1});
    });
    for (bool s : seen) CHECK(s);
    return r;
}

std::vector<std::vector<std::size_t>> some_heads(const problem& p, std::uint32_t seed)
{
    std::mt19937 g(seed);
    std::vector<std::vector<std::size_t>> H;
    for (std::size_t n : p.lengths) {
        H.emplace_back(n);
        for (auto& h : H.back()) h = n == 0 ? 0 : g() % n;
    }
    return H;
}

// Every score and head label within its bound; returns the largest
// |error| / bound seen (for the message).
template <class Math>
void check_against_reference(const problem& p, const char* what)
{
    const auto H = some_heads(p, 7);
    const auto r = run_bf16<Math>(p, H);
    std::size_t out = 0, checked = 0;
    double worst = 0;
    for (std::size_t k = 0; k < p.lengths.size(); ++k) {
        const auto ref = bf16_reference(p, k, true, std::ldexp(1.0, -8));
        const std::size_t n = p.lengths[k], o = p.d.labels;
        for (std::size_t i = 0; i < n * n * o; ++i) {
            const double e = std::fabs(double(r.scores[k][i]) - ref.s[i]);
            worst = std::max(worst, e / ref.bound[i]);
            out += e > ref.bound[i] ? 1 : 0;
            ++checked;
        }
        for (std::size_t m = 0; m < n; ++m)
            for (std::size_t l = 0; l < o; ++l) {
                const std::size_t i = (m * n + H[k][m]) * o + l;
                const double e = std::fabs(double(r.heads[k][m * o + l]) - ref.s[i]);
                worst = std::max(worst, e / ref.bound[i]);
                out += e > ref.bound[i] ? 1 : 0;
                ++checked;
            }
    }
    INFO(what << ": " << checked << " values, largest |error| / bound " << worst);
    CHECK(checked > 0);
    CHECK(out == 0);
}

std::vector<problem> cases()
{
    return {
        make_problem(64, 32, 1, true, true, {5, 1, 17, 0, 30, 9}, 1),
        make_problem(33, 15, 3, true, false, {4, 12, 7}, 2),   // odd depths everywhere
        make_problem(40, 16, 7, false, true, {11, 2, 25}, 3),
        make_problem(256, 128, 1, true, true, {20, 45, 3, 60}, 4),  // the scorer's default widths
    };
}

}  // namespace

TEST_CASE("bf16 forward, emulated: within the bound of bf16 rounding of a double reference", "[bf16_forward]")
{
    for (const auto& p : cases()) check_against_reference<bd::bf16_emulated_math>(p, "emulated");
}

namespace {
// Native and emulated round at the same points: they differ only by the
// order of the fp32 sums, which can move a rounding of U or T to the next
// bf16 (so the reference's bound, not equality, applies); most scores must
// agree to fp32 accumulation (2^-16 of their size).
template <class Math>
void check_native(const char* what)
{
    for (const auto& p : cases()) {
        check_against_reference<Math>(p, what);
        const auto H = some_heads(p, 7);
        const auto a = run_bf16<Math>(p, H);
        const auto b = run_bf16<bd::bf16_emulated_math>(p, H);
        std::size_t close = 0, total = 0;
        for (std::size_t k = 0; k < p.lengths.size(); ++k)
            for (std::size_t i = 0; i < a.scores[k].size(); ++i, ++total)
                close += std::fabs(a.scores[k][i] - b.scores[k][i]) <=
                                 std::ldexp(1.0f, -16) * std::max(1.0f, std::fabs(b.scores[k][i]))
                             ? 1
                             : 0;
        INFO(what << ": " << close << " of " << total << " scores agree with the emulated path to 2^-16");
        CHECK(close * 10 >= total * 9);
    }
}
}  // namespace

TEST_CASE("bf16 forward, VDPBF16PS: within the same bound, and with the emulated path", "[bf16_forward]")
{
#if BIAFFINE_DETAIL_BF16_GEMM
    check_native<bd::bf16_vnni_math>("avx512_bf16");
#else
    SUCCEED("SKIPPED: not built for AVX512_BF16 (the emulated path is tested above)");
#endif
}

TEST_CASE("bf16 forward, AMX: within the same bound, and with the emulated path", "[bf16_forward]")
{
#if BIAFFINE_DETAIL_AMX_BF16
    if (!bd::amx_usable()) {
        SUCCEED("SKIPPED: Linux withholds the AMX tiles (arch_prctl); the VDPBF16PS fallback runs instead");
    }
    check_native<bd::bf16_amx_math>("amx_bf16");
#else
    SUCCEED("SKIPPED: not built for AMX-BF16");
#endif
}

TEST_CASE("bf16 forward: the reference reads the scorer's layout (fp32 bound, the scorer's own scores)",
          "[bf16_forward]")
{
    // The same reference without rounded operands and with fp32 storage
    // bounds the scorer's fp32 predict: if the reference misread which side
    // is the head or how W is laid out, this would fail by far.
    for (const auto& p : cases()) {
        scorer_config cfg;
        cfg.n_in = p.d.n_in;
        cfg.hidden = p.d.hidden;
        cfg.labels = p.d.labels;
        cfg.bias_u = p.d.bias_u;
        cfg.bias_v = p.d.bias_v;
        biaffine_scorer<float> s(cfg);
        s.initialize(1);
        auto params = s.parameters();
        std::copy(p.wh.begin(), p.wh.end(), params[0].data);
        std::copy(p.bh.begin(), p.bh.end(), params[1].data);
        std::copy(p.wd.begin(), p.wd.end(), params[2].data);
        std::copy(p.bd.begin(), p.bd.end(), params[3].data);
        std::copy(p.w.begin(), p.w.end(), params[4].data);
        std::vector<seq_view<const float>> items;
        for (std::size_t k = 0; k < p.lengths.size(); ++k)
            items.push_back({p.x[k].data(), p.lengths[k], p.d.n_in, static_cast<std::ptrdiff_t>(p.d.n_in), 1});
        const auto Y = s.predict(items);
        std::size_t out = 0;
        for (std::size_t k = 0; k < p.lengths.size(); ++k) {
            const auto ref = bf16_reference(p, k, false, std::ldexp(1.0, -24));
            const auto& y = Y[k];
            REQUIRE(y.size() == ref.s.size());
            for (std::size_t i = 0; i < ref.s.size(); ++i)
                out += std::fabs(double(y.data()[i]) - ref.s[i]) > ref.bound[i] ? 1 : 0;
        }
        CHECK(out == 0);
    }
}
