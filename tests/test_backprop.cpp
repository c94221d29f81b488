// Tests for biaffine/backprop.hpp: call-once semantics, release of captured
// state, and the scorer's / layers' callbacks refusing a second call.
#include <catch2/catch.hpp>

#include <cstddef>
#include <stdexcept>
#include <utility>
#include <vector>

#include <xtensor/xtensor.hpp>

#include "biaffine/biaffine.hpp"

using namespace biaffine;

TEST_CASE("backprop_fn runs once, then throws backprop_error", "[backprop]")
{
    int calls = 0;
    backprop_fn<int(int)> f([&calls](int x) {
        ++calls;
        return 2 * x;
    });
    CHECK(static_cast<bool>(f));
    CHECK(f(21) == 42);
    CHECK(calls == 1);
    CHECK_FALSE(static_cast<bool>(f));
    CHECK_THROWS_AS(f(1), backprop_error);
    CHECK(calls == 1);

    backprop_fn<void()> empty;
    CHECK_FALSE(static_cast<bool>(empty));
    CHECK_THROWS_AS(empty(), backprop_error);

    // Moved-from callbacks are empty; the moved-to one still runs once.
    backprop_fn<int(int)> g([](int x) { return x + 1; });
    backprop_fn<int(int)> h = std::move(g);
    CHECK_THROWS_AS(g(0), backprop_error);  // NOLINT(bugprone-use-after-move): tested on purpose
    CHECK(h(1) == 2);
    CHECK_THROWS_AS(h(1), backprop_error);
}

TEST_CASE("backprop_fn releases captured state after the call, even when it throws", "[backprop][memory]")
{
    const std::uint64_t base = tracker().current_bytes();
    {
        tensor<double, 2> saved = xt::zeros<double>({100, 10});  // 8000 bytes
        backprop_fn<double(double)> f([s = std::move(saved)](double x) { return x + s(0, 0); });
        CHECK(tracker().current_bytes() - base == 8000);
        CHECK(f(1.0) == 1.0);
        CHECK(tracker().current_bytes() == base);  // released when the call returned
        CHECK_THROWS_AS(f(1.0), backprop_error);
    }
    {
        tensor<float, 1> saved = xt::zeros<float>({1000});  // 4000 bytes
        backprop_fn<void()> f([s = std::move(saved)]() { throw std::runtime_error("boom"); });
        CHECK(tracker().current_bytes() - base == 4000);
        CHECK_THROWS_AS(f(), std::runtime_error);
        CHECK(tracker().current_bytes() == base);
        CHECK_THROWS_AS(f(), backprop_error);
    }
    CHECK(tracker().current_bytes() == base);
}

TEST_CASE("scorer and layer callbacks refuse a second call", "[backprop][scorer]")
{
    scorer_config cfg;
    cfg.n_in = 4;
    cfg.hidden = 5;
    cfg.labels = 2;
    biaffine_scorer<double> s(cfg);
    s.zero_grad();  // gradients exist from here (the first forward would allocate them inside the checks)
    xt::xtensor<double, 2> doc = xt::ones<double>({7, 4});
    const std::vector<seq_view<const double>> items{as_const_view(doc).rows_view(0, 3),
                                                    as_const_view(doc).rows_view(3, 4)};

    SECTION("split-list forward")
    {
        const std::uint64_t before = tracker().current_bytes();
        std::uint64_t with_outputs = 0;
        {
            auto [Y, bp] = s.forward(items, mode::train);
            with_outputs = tracker().current_bytes();
            auto dY = with_splits_layer<biaffine_scorer<double>&>::grad_views(Y);
            std::vector<xt::xtensor<double, 2>> dx{xt::zeros<double>({3, 4}), xt::zeros<double>({4, 4})};
            std::vector<seq_view<double>> dxv{as_view(dx[0]), as_view(dx[1])};
            const std::uint64_t before_bp = tracker().current_bytes();
            bp(span<const score_view<const double>>(dY), span<const seq_view<double>>(dxv));
            // The saved activations (U, V, T, softmax outputs) are gone.
            CHECK(tracker().current_bytes() < before_bp);
            const std::uint64_t after_bp = tracker().current_bytes();
            CHECK_THROWS_AS(bp(span<const score_view<const double>>(dY), span<const seq_view<double>>(dxv)),
                            backprop_error);
            CHECK(tracker().current_bytes() == after_bp);
        }
        CHECK(with_outputs > before);
        CHECK(tracker().current_bytes() == before);
    }
    SECTION("padded forward")
    {
        xt::xtensor<double, 3> x = xt::ones<double>({2, 4, 4});
        auto [y, bp] = s.forward_padded(x, std::vector<int>{3, 4}, mode::eval);
        const score_array<double> dy = xt::ones<double>(y.shape());
        const tensor<double, 3> dx = bp(dy);
        CHECK(dx.shape()[0] == 2);
        CHECK_THROWS_AS(bp(dy), backprop_error);
    }
    SECTION("with_splits / with_minibatch_by_padded_size forward")
    {
        auto pipe = with_splits(with_minibatch_by_padded_size(s, budget::items(4)));
        const std::vector<std::vector<int>> lens{{3, 4}};
        const std::vector<xt::xtensor<double, 2>> docs{doc};
        auto [Y, bp] = pipe.forward(docs, lens, mode::train);
        const auto dY = decltype(pipe)::grad_views(Y);
        const auto dX = bp(span<const score_view<const double>>(dY));
        CHECK(dX.size() == 1);
        CHECK_THROWS_AS(bp(span<const score_view<const double>>(dY)), backprop_error);
    }
}
