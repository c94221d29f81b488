// Tests of a float scorer's training in bf16 (compute_precision::bf16,
// detail/compute/bf16_train.hpp): its packing and products against sums in
// double of the rounded operands within fp32's bound (the native arithmetic
// this build has, and the emulated one every CPU has); the training forward
// against the inference path and the bf16 bound around exact scores; the
// gradients against the fp32 scorer's within bf16's rounding; recompute and
// dropout; the scratch it reports against what it takes.
#include <catch2/catch.hpp>

#include <biaffine/biaffine.hpp>
#include <biaffine/detail/compute/bf16_train.hpp>

#include "bf16_reference.hpp"
#include "bf16_scorer.hpp"

#include <cmath>
#include <cstdint>
#include <random>
#include <type_traits>
#include <vector>

using namespace biaffine;
using bf16_test::bf16_reference;
using bf16_test::gamma_fp32;
using bf16_test::items_of;
using bf16_test::make_problem;
using bf16_test::problem;
using bf16_test::scorer_of;
namespace bd = biaffine::detail;

namespace {

constexpr double bf16_u = 1.0 / 256;  // unit roundoff of bf16's 8 significant bits

// The product C (+)= A^T B with A [K, M1] and B [K, M2] (tokens as the
// depth: the weight gradients' shape), and C = round(relu(X W^T + b)) (the
// forward's), on Math's arithmetic; each element against the double sum
// of the rounded operands within gamma_fp32 of the products' magnitudes.
template <class Math>
void check_products(const char* what, std::uint32_t seed)
{
    using P = bd::bf16_train<Math>;
    using E = typename P::E;
    INFO(what);
    std::mt19937 gen(seed);
    const std::size_t shapes[][3] = {{1, 1, 1}, {37, 7, 33}, {64, 16, 32}, {100, 129, 129}, {1030, 20, 5}, {1024, 128, 256}};
    for (const auto& sh : shapes) {
        const std::size_t K = sh[0], M1 = sh[1], M2 = sh[2];
        INFO("K " << K << " M1 " << M1 << " M2 " << M2);
        const std::size_t lda_src = M1 + 3, ldb_src = M2 + 1, ldc = M2 + 2;
        const std::vector<float> A = bf16_test::random_rows(K, M1, lda_src, gen);
        const std::vector<float> B = bf16_test::random_rows(K, M2, ldb_src, gen);
        const std::vector<float> C0 = bf16_test::random_rows(M1, M2, ldc, gen);
        const std::size_t lda = Math::depth(K);
        std::vector<E> at((M1 + P::slack) * lda);
        Math::pack_transposed(A.data(), lda_src, K, M1, at.data(), lda);
        std::vector<E> bp(Math::packed_size(K, M2));
        Math::pack_pairs([&](std::size_t k) { return B.data() + k * ldb_src; }, K, M2, bp.data());
        std::vector<float> C = C0;
        {
            bd::bf16_gemm_epilogue ep;
            ep.accumulate = true;
            P::product(at.data(), lda, M1, K, bp.data(), M2, ep, C.data(), ldc);
        }
        std::size_t out = 0;
        for (std::size_t i = 0; i < M1; ++i)
            for (std::size_t j = 0; j < M2; ++j) {
                double s = C0[i * ldc + j], mag = std::fabs(s);
                for (std::size_t k = 0; k < K; ++k) {
                    const double x = double(round_to_bfloat16(A[k * lda_src + i])) *
                                     double(round_to_bfloat16(B[k * ldb_src + j]));
                    s += x;
                    mag += std::fabs(x);
                }
                out += std::fabs(double(C[i * ldc + j]) - s) > gamma_fp32(K + 1) * mag ? 1 : 0;
            }
        CHECK(out == 0);
        // Only the rows and columns asked for are written.
        for (std::size_t i = 0; i < M1; ++i)
            for (std::size_t j = M2; j < ldc && i * ldc + j < C.size(); ++j) CHECK(C[i * ldc + j] == C0[i * ldc + j]);

        // The forward's shape: rows of X [M1, K] times W [M2, K]^T, bias,
        // ReLU, rounded to bf16 values.
        const std::vector<float> X = bf16_test::random_rows(M1, K, K, gen);
        const std::vector<float> W = bf16_test::random_rows(M2, K, K, gen);
        const std::vector<float> bias = bf16_test::random_rows(1, M2, M2, gen);
        std::vector<E> xb((M1 + P::slack) * lda);
        Math::round_rows(seq_view<const float>{X.data(), M1, K, static_cast<std::ptrdiff_t>(K), 1}, xb.data(), lda);
        biaffine::tracked_vector<E> wb;
        Math::pack_b([&](std::size_t k, std::size_t m) { return W[m * K + k]; }, K, M2, wb);
        std::vector<float> Y(M1 * ldc, bf16_test::sentinel);
        bd::bf16_gemm_epilogue fe;
        fe.bias = bias.data();
        fe.relu = true;
        fe.round = true;
        P::product(xb.data(), lda, M1, K, wb.data(), M2, fe, Y.data(), ldc);
        out = 0;
        for (std::size_t i = 0; i < M1; ++i)
            for (std::size_t j = 0; j < M2; ++j) {
                const auto r = bf16_test::bf16_dot(X.data() + i * K, W.data() + j * K, K);
                const double y = std::max(0.0, r.value + bias[j]);
                const double g = gamma_fp32(K + 1) * (r.magnitude + std::fabs(bias[j]));
                const float got = Y[i * ldc + j];
                out += round_to_bfloat16(got) != got || std::fabs(double(got) - y) > g * (1 + bf16_u) + bf16_u * y ? 1 : 0;
            }
        CHECK(out == 0);
    }
}

// The problem's scorer config, training on logits (the scores themselves).
scorer_config logits_config(const problem& p)
{
    scorer_config cfg = bf16_test::config_of(p);
    cfg.train_outputs = train_output::logits;
    return cfg;
}

// One training step's gradients: parameters (in order Wh, bh, Wd, bd, W)
// and dX, from the score gradients dY (fixed by `seed`).
struct step_grads {
    std::vector<std::vector<float>> params;
    std::vector<float> dx;
};

step_grads train_step(biaffine_scorer<float>& s, const problem& p, std::uint32_t seed)
{
    const auto items = items_of(p);
    const std::size_t count = items.size(), o = p.d.labels, n_in = p.d.n_in;
    s.zero_grad();
    auto [Y, bp] = s.forward(items, mode::train);
    std::mt19937 gen(seed);
    std::uniform_real_distribution<float> U(-1.0f, 1.0f);
    std::vector<std::vector<float>> g(count);
    std::vector<score_view<const float>> gv;
    std::vector<float> dx;
    std::size_t total = 0;
    for (std::size_t n : p.lengths) total += n;
    dx.assign(total * n_in, 0.0f);
    std::vector<seq_view<float>> dxv;
    for (std::size_t k = 0, r = 0; k < count; r += p.lengths[k++]) {
        const std::size_t n = p.lengths[k];
        g[k].resize(n * n * o);
        for (auto& e : g[k]) e = U(gen);
        gv.push_back({g[k].data(), n, o, static_cast<std::ptrdiff_t>(n * o)});
        dxv.push_back({dx.data() + r * n_in, n, n_in, static_cast<std::ptrdiff_t>(n_in), 1});
    }
    bp(span<const score_view<const float>>(gv.data(), count), span<const seq_view<float>>(dxv.data(), count));
    step_grads r;
    const auto flat = [](const auto& t) { return std::vector<float>(t.begin(), t.end()); };
    r.params = {flat(s.d_head_weight()), flat(s.d_head_bias()), flat(s.d_dependent_weight()),
                flat(s.d_dependent_bias()), flat(s.d_bilinear_weight())};
    r.dx = std::move(dx);
    return r;
}

double relative_distance(const std::vector<float>& a, const std::vector<float>& b)
{
    double num = 0.0, den = 0.0;
    for (std::size_t i = 0; i < a.size(); ++i) {
        num += (double(a[i]) - double(b[i])) * (double(a[i]) - double(b[i]));
        den += double(b[i]) * double(b[i]);
    }
    return den == 0.0 ? (num == 0.0 ? 0.0 : 1.0) : std::sqrt(num / den);
}

std::vector<problem> cases()
{
    return {
        make_problem(48, 24, 1, true, true, {6, 1, 19, 0, 33, 12}, 11),
        make_problem(31, 17, 4, true, false, {9, 14, 3}, 12),
        make_problem(256, 128, 3, true, true, {25, 40, 7, 300}, 13),
        make_problem(20, 9, 2, false, true, {1500}, 14),
    };
}

}  // namespace

TEST_CASE("bf16 training products: packing and products against double sums of the rounded operands",
          "[bf16_train]")
{
    check_products<bd::bf16_emulated_math<bd::bf16_split_ops>>("emulated", 1);
#if BIAFFINE_DETAIL_BF16_GEMM
    check_products<bd::bf16_best_math>(bd::bf16_best_math::active(), 2);
#else
    WARN("SKIPPED: native bf16 products: this build does not target AVX512_BF16 (the emulated ones ran)");
#endif
}

TEST_CASE("bf16 training: the forward gives the bf16 inference scores", "[bf16_train]")
{
    for (const problem& p : cases()) {
        scorer_config cfg = logits_config(p);
        cfg.precision = compute_precision::bf16;
        auto s = scorer_of(p, cfg);
        const auto items = items_of(p);
        const score_list<float> want = s.predict(items);
        auto [Y, bp] = s.forward(items, mode::train);
        std::size_t out = 0, differ = 0, checked = 0;
        for (std::size_t k = 0; k < items.size(); ++k) {
            const auto ref = bf16_reference(p, k, true, bf16_u);
            for (std::size_t i = 0; i < Y[k].size(); ++i, ++checked) {
                out += std::fabs(double(Y[k].data()[i]) - ref.s[i]) > ref.bound[i] ? 1 : 0;
                differ += Y[k].data()[i] != want[k].data()[i] ? 1 : 0;
            }
        }
        INFO(checked << " scores, " << differ << " differ from predict's");
        CHECK(checked > 0);
        CHECK(out == 0);
#if BIAFFINE_DETAIL_AMX_BF16
        // The same kernels at the same rounding points: the same bytes. (The
        // inference path scores each split on the avx2 backend's kernels;
        // a build whose backend is another - Eigen, a BLAS - scores training
        // on its own, within the bound above.)
        using backend = bd::scorer_backend_choice<float>::type;
        if (std::is_same<backend::ops, bd::avx2_backend>::value && bd::amx_usable()) CHECK(differ == 0);
#endif
    }
}

TEST_CASE("bf16 training: gradients within bf16's rounding of the fp32 scorer's", "[bf16_train]")
{
    // Along any path from an operand to a gradient there are at most eight
    // roundings to bf16 (X or W, the projection, T, dT or dZ, and the
    // other operand of the gradient's product), each of relative size at
    // most 2^-8: to first order the gradients move by at most 8 x 2^-8 =
    // 2^-5 of their norm. A product on the wrong operand, a transposed
    // panel or a lost chunk moves them by their whole norm.
    // The biases are shifted so that ReLU passes every unit: a unit whose
    // pre-activation lies within rounding of 0 switches its gradient on or
    // off, an O(1) change on a small share of units that no norm-wise bound
    // of the rounding covers (3-5% of the norm at n_in = 256 unshifted).
    for (problem p : cases()) {
        for (auto* b : {&p.bh, &p.bd})
            for (float& e : *b) e += 3.0f;
        INFO("n_in " << p.d.n_in << " h " << p.d.hidden << " o " << p.d.labels);
        scorer_config cfg = logits_config(p);
        auto s32 = scorer_of(p, cfg);
        cfg.precision = compute_precision::bf16;
        auto s16 = scorer_of(p, cfg);
        const step_grads a = train_step(s32, p, 7), b = train_step(s16, p, 7);
        const char* names[] = {"d_head_weight", "d_head_bias", "d_dependent_weight", "d_dependent_bias",
                               "d_bilinear_weight"};
        double moved = 0.0;
        for (std::size_t i = 0; i < 5; ++i) {
            const double r = relative_distance(b.params[i], a.params[i]);
            INFO(names[i] << ": relative distance " << r);
            CHECK(r <= std::ldexp(1.0, -5));
            moved += r;
        }
        const double rx = relative_distance(b.dx, a.dx);
        INFO("dX: relative distance " << rx);
        CHECK(rx <= std::ldexp(1.0, -5));
        CHECK(moved > 0.0);  // bf16 ran: the gradients are not fp32's
    }
}

TEST_CASE("bf16 training: recompute and dropout give the kept forward's gradients", "[bf16_train]")
{
    const problem p = cases()[2];
    for (double rate : {0.0, 0.25}) {
        INFO("dropout " << rate);
        scorer_config cfg = logits_config(p);
        cfg.precision = compute_precision::bf16;
        cfg.dropout = rate;
        cfg.seed = 3;
        auto kept = scorer_of(p, cfg);
        cfg.recompute_in_backward = true;
        auto again = scorer_of(p, cfg);
        const step_grads a = train_step(kept, p, 9), b = train_step(again, p, 9);
        for (std::size_t i = 0; i < 5; ++i) CHECK(a.params[i] == b.params[i]);
        CHECK(a.dx == b.dx);
    }
}

TEST_CASE("bf16 training: the backward fits the scratch it reports", "[bf16_train]")
{
    // Splits of one length, so that cost(count, L) is the batch exactly;
    // recomputing, the backward runs the forward's products too.
    for (bool recompute : {false, true}) {
        INFO("recompute " << recompute);
        const problem p = make_problem(40, 20, 3, true, true, {15, 15, 15, 15}, 21);
        scorer_config cfg = logits_config(p);
        cfg.precision = compute_precision::bf16;
        cfg.recompute_in_backward = recompute;
        auto s = scorer_of(p, cfg);
        const auto items = items_of(p);
        const std::size_t count = items.size(), o = p.d.labels, n_in = p.d.n_in, L = 15;
        const batch_cost ct = s.cost(count, L, mode::train);
        auto [Y, bp] = s.forward(items, mode::train);
        std::vector<std::vector<float>> g(count, std::vector<float>(L * L * o, 0.5f));
        std::vector<std::vector<float>> dx(count, std::vector<float>(L * n_in));
        std::vector<score_view<const float>> gv;
        std::vector<seq_view<float>> dxv;
        for (std::size_t k = 0; k < count; ++k) {
            gv.push_back({g[k].data(), L, o, static_cast<std::ptrdiff_t>(L * o)});
            dxv.push_back({dx[k].data(), L, n_in, static_cast<std::ptrdiff_t>(n_in), 1});
        }
        (void)s.d_head_weight();  // the gradients exist before the measurement
        workspace_scope ws(ct.scratch);
        scoped_peak sp;
        const memory_stats s0 = tracker().stats();
        bp(span<const score_view<const float>>(gv.data(), count), span<const seq_view<float>>(dxv.data(), count));
        CHECK(sp.work_peak_bytes() == s0.current_bytes - s0.output_bytes);
    }
}

TEST_CASE("bf16 training: a split's scores and dX do not depend on its batch", "[bf16_train]")
{
    // Each split alone (an independent computation of the same rows): the
    // same bytes for its scores and its dX, whatever else the batch held
    // (every product is row-wise, the per-split ones are the split's own).
    // The parameter gradients sum over the batch's tokens in fp32 in
    // another order: within 2^-12 of their norm (gamma_N x sqrt(N) at most
    // for N = 1,500 terms of random signs is 3.5e-3; the sums met are far
    // closer).
    const problem p = make_problem(48, 24, 3, true, true, {6, 1, 19, 0, 33, 12, 1100, 40}, 31);
    scorer_config cfg = logits_config(p);
    cfg.precision = compute_precision::bf16;
    auto s = scorer_of(p, cfg);
    const step_grads all = train_step(s, p, 5);
    auto [Y, bp] = s.forward(items_of(p), mode::train);
    std::vector<std::vector<float>> sum(5);
    std::vector<float> dx;
    for (std::size_t k = 0; k < p.lengths.size(); ++k) {
        problem one = p;
        one.lengths = {p.lengths[k]};
        one.x = {p.x[k]};
        auto [Y1, bp1] = s.forward(items_of(one), mode::train);
        REQUIRE(Y1[0].size() == Y[k].size());
        std::size_t differ = 0;
        for (std::size_t i = 0; i < Y1[0].size(); ++i) differ += Y1[0].data()[i] != Y[k].data()[i] ? 1 : 0;
        INFO("split " << k << " of " << p.lengths[k] << " tokens");
        CHECK(differ == 0);
    }
    // dX and the parameter gradients of each split alone, with the score
    // gradients train_step drew for it in the batch.
    std::mt19937 gen(5);
    std::uniform_real_distribution<float> U(-1.0f, 1.0f);
    const std::size_t o = p.d.labels, n_in = p.d.n_in;
    for (std::size_t k = 0; k < p.lengths.size(); ++k) {
        const std::size_t n = p.lengths[k];
        std::vector<float> g(n * n * o);
        for (auto& e : g) e = U(gen);
        problem one = p;
        one.lengths = {n};
        one.x = {p.x[k]};
        s.zero_grad();
        auto [Y1, bp1] = s.forward(items_of(one), mode::train);
        std::vector<float> dx1(n * n_in);
        const score_view<const float> gv{g.data(), n, o, static_cast<std::ptrdiff_t>(n * o)};
        const seq_view<float> dxv{dx1.data(), n, n_in, static_cast<std::ptrdiff_t>(n_in), 1};
        bp1(span<const score_view<const float>>(&gv, 1), span<const seq_view<float>>(&dxv, 1));
        dx.insert(dx.end(), dx1.begin(), dx1.end());
        const std::vector<float> parts[] = {
            {s.d_head_weight().begin(), s.d_head_weight().end()}, {s.d_head_bias().begin(), s.d_head_bias().end()},
            {s.d_dependent_weight().begin(), s.d_dependent_weight().end()},
            {s.d_dependent_bias().begin(), s.d_dependent_bias().end()},
            {s.d_bilinear_weight().begin(), s.d_bilinear_weight().end()}};
        for (std::size_t i = 0; i < 5; ++i) {
            sum[i].resize(parts[i].size(), 0.0f);
            for (std::size_t e = 0; e < parts[i].size(); ++e) sum[i][e] += parts[i][e];
        }
    }
    CHECK(dx == all.dx);
    for (std::size_t i = 0; i < 5; ++i) {
        const double r = relative_distance(sum[i], all.params[i]);
        INFO("parameter " << i << ": relative distance " << r);
        CHECK(r <= std::ldexp(1.0, -12));
    }
}
