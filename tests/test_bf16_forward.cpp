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

#include "bf16_reference.hpp"
#include "bf16_scorer.hpp"

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

using namespace biaffine;
namespace bd = biaffine::detail;

namespace {

using bf16_test::bf16_reference;
using bf16_test::make_problem;
using bf16_test::problem;

template <class Math>
struct bf16_run {
    std::vector<std::vector<float>> scores;  // per split [n, n, o]
    std::vector<std::vector<float>> heads;   // per split [n, o] at the given heads
};

template <class Math>
bf16_run<Math> run_bf16(const problem& p, const std::vector<std::vector<std::size_t>>& heads)
{
    using F = bd::bf16_forward<Math>;
    using D = typename Math::dot_elem;
    bd::bf16_weights<Math> w;
    w.pack(p.d, bd::weights_ref<float>{p.wh.data(), p.bh.data(), p.wd.data(), p.bd.data(), p.w.data()});
    std::size_t max_len = 0;
    for (std::size_t n : p.lengths) max_len = std::max(max_len, n);
    std::size_t N = 0;
    for (std::size_t n : p.lengths) N += n;
    const std::size_t G = F::capacity(p.d, N, max_len);
    std::vector<unsigned char> scratch(F::scratch_bytes(p.d, G, max_len));
    const auto x = [&](std::size_t k) {
        return seq_view<const float>{p.x[k].data(), p.lengths[k], p.d.n_in, static_cast<std::ptrdiff_t>(p.d.n_in), 1};
    };
    bf16_run<Math> r;
    r.scores.resize(p.lengths.size());
    r.heads.resize(p.lengths.size());
    std::vector<bool> seen(p.lengths.size(), false);
    F::run(w, x, p.lengths.size(), scratch.data(), G, [&](std::size_t k, const D* vb, const D* tb, float* packed) {
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
    for (const auto& p : cases()) check_against_reference<bd::bf16_emulated_math<bd::bf16_split_ops>>(p, "emulated");
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
        const auto b = run_bf16<bd::bf16_emulated_math<bd::bf16_split_ops>>(p, H);
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
    check_native<bd::bf16_amx_math<bd::bf16_split_ops>>("amx_bf16");
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
        const auto s = bf16_test::scorer_of(p, bf16_test::config_of(p));
        const auto items = bf16_test::items_of(p);
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
