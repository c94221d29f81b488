// Tests for biaffine/loss.hpp: cross_entropy_heads against central finite
// differences of its own loss in double (any stride), its bad input, and
// training on logits (train_output::logits) through the scorer: a
// deliberately over-confident wrong float model, whose softmax-output route
// (-1/p with p underflowed to 0) turns every gradient into NaN, gets finite
// gradients with dropout on, and the double scorer's gradients equal finite
// differences of the loss for every parameter and the input.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstddef>
#include <random>
#include <string>
#include <vector>

#include <xtensor/xarray.hpp>

#include "biaffine/biaffine.hpp"

using namespace biaffine;

namespace {

double ce_loss_only(const std::vector<double>& s, std::size_t n, std::ptrdiff_t stride, const std::vector<int>& gold)
{
    double loss = 0.0;
    for (std::size_t m = 0; m < n; ++m) {
        double mx = -INFINITY;
        for (std::size_t l = 0; l < n; ++l) mx = std::max(mx, s[m * stride + l]);
        double sum = 0.0;
        for (std::size_t l = 0; l < n; ++l) sum += std::exp(s[m * stride + l] - mx);
        loss += std::log(sum) + mx - s[m * stride + static_cast<std::size_t>(gold[m])];
    }
    return loss;
}

// Gold heads that the model scores worst: the argmin of each row.
template <class T>
std::vector<std::size_t> worst_heads(const score_tensor<T>& y)
{
    const std::size_t n = y.shape()[0];
    std::vector<std::size_t> g(n);
    for (std::size_t m = 0; m < n; ++m) {
        std::size_t best = 0;
        for (std::size_t l = 1; l < n; ++l) {
            if (y(m, l) < y(m, best)) best = l;
        }
        g[m] = best;
    }
    return g;
}

scorer_config confident_config(double dropout)
{
    scorer_config c;
    c.n_in = 6;
    c.hidden = 5;
    c.seed = 3;
    c.dropout = dropout;
    c.train_outputs = train_output::logits;
    return c;
}

// Scales the bilinear weight so that score margins are in the thousands.
template <class T>
void make_confident(biaffine_scorer<T>& s)
{
    for (auto& p : s.parameters()) {
        if (std::string(p.name) == "bilinear_weight") {
            for (std::size_t i = 0; i < p.size; ++i) p.data[i] *= T(3000);
        }
    }
}

template <class T>
std::vector<T> random_tokens(std::size_t rows, std::size_t cols, unsigned seed)
{
    std::mt19937 gen(seed);
    std::uniform_real_distribution<double> d(-1.0, 1.0);
    std::vector<T> x(rows * cols);
    for (T& v : x) v = static_cast<T>(d(gen));
    return x;
}

// Runs a split-list backprop on dY, returning each split's dX `[n, 6]`.
template <class T, class Backprop>
std::vector<std::vector<T>> backprop_splits(Backprop& bp, const std::vector<std::size_t>& lens, const score_list<T>& dY)
{
    std::vector<std::vector<T>> dx(lens.size());
    std::vector<seq_view<T>> dX;
    for (std::size_t k = 0; k < lens.size(); ++k) {
        dx[k].resize(lens[k] * 6);
        dX.push_back({dx[k].data(), lens[k], 6, 6, 1});
    }
    tracked_vector<score_view<const T>> views;
    for (auto& d : dY) views.push_back(as_score_view(d));
    bp(views, dX);
    return dx;
}

}  // namespace

TEST_CASE("cross_entropy_heads equals central differences of its loss, at any stride", "[loss]")
{
    std::mt19937 gen(9);
    std::normal_distribution<double> d(0.0, 3.0);
    for (std::size_t n : {1u, 2u, 5u, 17u}) {
        const std::ptrdiff_t stride = static_cast<std::ptrdiff_t>(n + 3);
        std::vector<double> s(n * static_cast<std::size_t>(stride), 123.0), grad(s.size(), -5.0);
        for (std::size_t m = 0; m < n; ++m)
            for (std::size_t l = 0; l < n; ++l) s[m * stride + l] = d(gen);
        std::vector<int> gold(n);
        for (std::size_t m = 0; m < n; ++m) gold[m] = static_cast<int>((m * 7 + 1) % n);
        const double scale = 0.5;
        const double loss = cross_entropy_heads<double>(score_view<const double>{s.data(), n, 1, stride}, gold,
                                                        score_view<double>{grad.data(), n, 1, stride}, scale);
        REQUIRE(loss == Approx(scale * ce_loss_only(s, n, stride, gold)).epsilon(1e-12));
        const double h = 1e-6;
        for (std::size_t m = 0; m < n; ++m) {
            for (std::size_t l = 0; l < n; ++l) {
                std::vector<double> sp = s, sm = s;
                sp[m * stride + l] += h;
                sm[m * stride + l] -= h;
                const double fd = scale * (ce_loss_only(sp, n, stride, gold) - ce_loss_only(sm, n, stride, gold)) / (2 * h);
                REQUIRE(grad[m * stride + l] == Approx(fd).margin(1e-7));
            }
            for (std::ptrdiff_t l = static_cast<std::ptrdiff_t>(n); l < stride; ++l) REQUIRE(grad[m * stride + l] == -5.0);
        }
    }
}

TEST_CASE("cross_entropy_heads rejects bad gold heads and shapes, naming the split and token", "[loss]")
{
    score_list<float> Y;
    Y.push_back(score_tensor<float>::from_shape({3, 3}));
    Y.push_back(score_tensor<float>::from_shape({2, 2}));
    for (auto& y : Y) y.fill(0.0f);
    const std::vector<std::vector<int>> bad_head{{0, 1, 2}, {0, 2}};
    REQUIRE_THROWS_WITH((cross_entropy_heads<float>(Y, bad_head)),
                        "split 1: cross_entropy_heads: token 1 has gold head 2, expected 0..1");
    const std::vector<std::vector<int>> negative{{0, -1, 2}, {0, 1}};
    REQUIRE_THROWS_AS((cross_entropy_heads<float>(Y, negative)), length_error);
    const std::vector<std::vector<int>> short_list{{0, 1}, {0, 1}};
    REQUIRE_THROWS_WITH((cross_entropy_heads<float>(Y, short_list)),
                        "split 0: cross_entropy_heads: 2 gold heads for a split of 3 tokens");
    const std::vector<std::vector<int>> one_list{{0, 1, 2}};
    REQUIRE_THROWS_AS((cross_entropy_heads<float>(Y, one_list)), shape_error);
    score_list<float> labelled;
    labelled.push_back(score_tensor<float>::from_shape({2, 2, 3}));
    const std::vector<std::vector<int>> two{{0, 1}};
    REQUIRE_THROWS_AS((cross_entropy_heads<float>(labelled, two)), shape_error);
}

TEST_CASE("training on logits: an over-confident wrong float model gets finite gradients", "[loss][scorer]")
{
    const std::vector<std::size_t> lens{7, 12, 1, 30};
    std::size_t N = 0;
    for (std::size_t n : lens) N += n;
    const std::vector<float> x = random_tokens<float>(N, 6, 1);
    std::vector<seq_view<const float>> X;
    for (std::size_t k = 0, r = 0; k < lens.size(); r += lens[k++]) X.push_back({x.data() + r * 6, lens[k], 6, 6, 1});

    // The softmax-output route on the same model: -1/p at an underflowed p.
    {
        scorer_config c = confident_config(0.3);
        c.train_outputs = train_output::probabilities;
        biaffine_scorer<float> s(c);
        make_confident(s);
        auto [Y, bp] = s.forward(X, mode::train);
        score_list<float> dY;
        std::size_t zeros = 0;
        for (std::size_t k = 0; k < Y.size(); ++k) {
            const auto g = worst_heads(Y[k]);
            score_tensor<float> d = score_tensor<float>::from_shape(Y[k].shape());
            d.fill(0.0f);
            for (std::size_t m = 0; m < g.size(); ++m) {
                zeros += Y[k](m, g[m]) == 0.0f;
                d(m, g[m]) = -1.0f / Y[k](m, g[m]);
            }
            dY.push_back(std::move(d));
        }
        REQUIRE(zeros > 0);  // the premise: probabilities underflow in float
        backprop_splits(bp, lens, dY);
        bool any_nan = false;
        for (const auto& p : s.parameters())
            for (std::size_t i = 0; i < p.size; ++i) any_nan |= std::isnan(p.grad[i]);
        INFO("the softmax route is expected to produce NaN here; if it does not, the premise changed");
        CHECK(any_nan);
    }

    // The logits route with the fused loss, dropout on.
    biaffine_scorer<float> s(confident_config(0.3));
    make_confident(s);
    auto [Y, bp] = s.forward(X, mode::train);
    std::vector<std::vector<std::size_t>> gold;
    for (const auto& y : Y) gold.push_back(worst_heads(y));
    auto [loss, dY] = cross_entropy_heads<float>(Y, gold);
    REQUIRE(std::isfinite(loss));
    REQUIRE(loss > 1000.0);  // confident and wrong
    const auto dx = backprop_splits(bp, lens, dY);
    for (const auto& p : s.parameters()) {
        INFO(p.name);
        for (std::size_t i = 0; i < p.size; ++i) REQUIRE(std::isfinite(p.grad[i]));
    }
    for (const auto& d : dx)
        for (float v : d) REQUIRE(std::isfinite(v));
}

TEST_CASE("training on logits: gradients equal finite differences of the loss in double", "[loss][scorer]")
{
    const std::vector<std::size_t> lens{4, 6, 1};
    std::size_t N = 0;
    for (std::size_t n : lens) N += n;
    std::vector<double> x = random_tokens<double>(N, 6, 2);
    std::vector<seq_view<const double>> X;
    for (std::size_t k = 0, r = 0; k < lens.size(); r += lens[k++]) X.push_back({x.data() + r * 6, lens[k], 6, 6, 1});
    scorer_config c = confident_config(0.0);  // no dropout: every forward sees the same function
    biaffine_scorer<double> s(c);
    for (auto& p : s.parameters()) {
        if (std::string(p.name) == "bilinear_weight") {
            for (std::size_t i = 0; i < p.size; ++i) p.data[i] *= 20.0;  // large, still smooth enough for FD
        }
    }
    std::vector<std::vector<std::size_t>> gold;
    {
        auto Y = s.predict(X);
        for (const auto& y : Y) gold.push_back(worst_heads(y));
    }
    auto loss_at = [&] {
        auto [Y, bp] = s.forward(X, mode::train);
        return cross_entropy_heads<double>(Y, gold).first;
    };
    auto [Y, bp] = s.forward(X, mode::train);
    auto [loss, dY] = cross_entropy_heads<double>(Y, gold);
    std::vector<double> dxs;
    for (const auto& d : backprop_splits(bp, lens, dY)) dxs.insert(dxs.end(), d.begin(), d.end());
    const double h = 1e-6;
    for (auto& p : s.parameters()) {
        INFO(p.name);
        for (std::size_t i = 0; i < p.size; i += 1 + p.size / 17) {
            const double keep = p.data[i];
            p.data[i] = keep + h;
            const double up = loss_at();
            p.data[i] = keep - h;
            const double down = loss_at();
            p.data[i] = keep;
            REQUIRE(p.grad[i] == Approx((up - down) / (2 * h)).epsilon(1e-5).margin(1e-6));
        }
    }
    for (std::size_t i = 0; i < x.size(); i += 5) {
        const double keep = x[i];
        x[i] = keep + h;
        const double up = loss_at();
        x[i] = keep - h;
        const double down = loss_at();
        x[i] = keep;
        REQUIRE(dxs[i] == Approx((up - down) / (2 * h)).epsilon(1e-5).margin(1e-6));
    }
}

TEST_CASE("training on logits keeps no copy of the outputs: cost and tracker agree", "[loss][scorer]")
{
    scorer_config c = confident_config(0.0);
    biaffine_scorer<double> probs([&] {
        scorer_config p = c;
        p.train_outputs = train_output::probabilities;
        return p;
    }());
    biaffine_scorer<double> logits(c);
    const batch_cost a = probs.cost(3, 10, mode::train), b = logits.cost(3, 10, mode::train);
    // The softmax copy and its 3 + 1 offsets by split.
    REQUIRE(a.saved - b.saved == a.outputs + (3 + 1) * sizeof(std::size_t));
    REQUIRE(b.scratch < a.scratch);           // no dS, no recomputed scores
    // Eval is the same either way.
    REQUIRE(probs.cost(3, 10, mode::eval).total() == logits.cost(3, 10, mode::eval).total());
}

TEST_CASE("cross_entropy_labels: loss by direct log-sum-exp, gradient by central differences, bad labels named",
          "[loss][heads]")
{
    std::mt19937_64 rng(11);
    std::uniform_real_distribution<double> u(-3.0, 3.0);
    std::vector<xt::xarray<double>> Y;
    std::vector<std::vector<int>> gold;
    for (std::size_t n : {std::size_t(3), std::size_t(0), std::size_t(5)}) {
        xt::xarray<double> y = xt::zeros<double>({n, std::size_t(4)});
        for (auto& v : y) v = u(rng);
        std::vector<int> g;
        for (std::size_t m = 0; m < n; ++m) g.push_back(static_cast<int>(rng() % 4));
        Y.push_back(std::move(y));
        gold.push_back(std::move(g));
    }
    const double scale = 0.5;
    auto direct = [&](const std::vector<xt::xarray<double>>& ys) {
        double l = 0;
        for (std::size_t k = 0; k < ys.size(); ++k)
            for (std::size_t m = 0; m < ys[k].shape()[0]; ++m) {
                double z = 0;
                for (std::size_t c = 0; c < 4; ++c) z += std::exp(ys[k](m, c));
                l += std::log(z) - ys[k](m, static_cast<std::size_t>(gold[k][m]));
            }
        return scale * l;
    };
    const auto [loss, grads] = cross_entropy_labels<double>(Y, gold, scale);
    CHECK(std::abs(loss - direct(Y)) <= 1e-12 * std::max(1.0, std::abs(loss)));
    REQUIRE(grads.size() == 3);
    for (std::size_t k = 0; k < Y.size(); ++k) {
        REQUIRE(grads[k].shape()[0] == Y[k].shape()[0]);
        for (std::size_t i = 0; i < Y[k].size(); ++i) {
            auto yp = Y, ym = Y;
            yp[k].data()[i] += 1e-6;
            ym[k].data()[i] -= 1e-6;
            const double fd = (direct(yp) - direct(ym)) / 2e-6;
            CHECK(std::abs(fd - grads[k].data()[i]) <= 1e-7);
        }
    }
    // A confident float mistake still has a finite gradient of at most scale.
    std::vector<xt::xarray<float>> big{xt::xarray<float>({{1e4f, -1e4f}})};
    const auto [bl, bg] = cross_entropy_labels<float>(big, std::vector<std::vector<int>>{{1}});
    CHECK(std::isfinite(bl));
    CHECK(bg[0](0, 1) == -1.0f);
    try {
        cross_entropy_labels<double>(Y, std::vector<std::vector<int>>{{0, 1, 2}, {}, {0, 1, 4, 0, 0}});
        FAIL("no throw");
    } catch (const length_error& e) {
        CHECK(std::string(e.what()) == "cross_entropy_labels: split 2, token 2 has gold label 4, expected 0..3");
    }
    CHECK_THROWS_AS(cross_entropy_labels<double>(Y, std::vector<std::vector<int>>{{0}}), shape_error);
}
