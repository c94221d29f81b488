// Tests for biaffine/layer.hpp: the checks every layer's backprop makes of the
// gradient views it is handed (hand-made views with a null pointer, a row
// stride shorter than a row, input-gradient slots whose strides overlap),
// through the scorer and through with_splits; each must throw shape_error
// naming the split and leave every parameter gradient bitwise unchanged.
// (The protocol's compile-time checks are tested by the layer_protocol_*
// ctest entries, see tests/CMakeLists.txt.)
#include <catch2/catch.hpp>

#include <cstddef>
#include <cstring>
#include <vector>

#include <xtensor/xtensor.hpp>

#include "biaffine/biaffine.hpp"

using namespace biaffine;

namespace {

scorer_config tiny()
{
    scorer_config c;
    c.n_in = 3;
    c.hidden = 2;
    c.seed = 4;
    return c;
}

std::vector<std::vector<unsigned char>> grads_of(biaffine_scorer<double>& s)
{
    std::vector<std::vector<unsigned char>> out;
    for (const auto& p : s.parameters()) {
        const auto* b = reinterpret_cast<const unsigned char*>(p.grad);
        out.emplace_back(b, b + p.size * sizeof(double));
    }
    return out;
}

}  // namespace

TEST_CASE("scorer backprop rejects hand-made gradient views it cannot read or write", "[layer][views]")
{
    std::vector<double> x(4 * 3);
    for (std::size_t i = 0; i < x.size(); ++i) x[i] = 0.3 * static_cast<double>(i % 7) - 0.8;
    const std::vector<seq_view<const double>> X{{x.data(), 4, 3, 3, 1}};
    std::vector<double> dy(16), dx(12, 0.0);
    for (std::size_t i = 0; i < dy.size(); ++i) dy[i] = 0.1 * static_cast<double>(i % 5);  // not constant per row: the softmax passes it
    struct bad {
        score_view<const double> g;
        seq_view<double> slot;
        const char* needle;
    };
    const std::vector<bad> cases = {
        {{dy.data(), 4, 1, 0}, {dx.data(), 4, 3, 3, 1}, "row stride 0 is shorter than a row of 4 cells"},
        {{dy.data(), 4, 1, 1}, {dx.data(), 4, 3, 3, 1}, "row stride 1 is shorter than a row of 4 cells"},
        {{nullptr, 4, 1, 4}, {dx.data(), 4, 3, 3, 1}, "has no data"},
        {{dy.data(), 4, 1, 4}, {nullptr, 4, 3, 3, 1}, "input gradient slot has no data"},
        {{dy.data(), 4, 1, 4}, {dx.data(), 4, 3, 1, 1}, "strides (1, 1), which make cells overlap"},
        {{dy.data(), 4, 1, 4}, {dx.data(), 4, 3, 0, 1}, "make cells overlap"},
    };
    for (const bad& b : cases) {
        INFO("expecting: " << b.needle);
        biaffine_scorer<double> s(tiny());
        auto [Y, bp] = s.forward(X, mode::train);
        const auto before = grads_of(s);
        const std::vector<score_view<const double>> g{b.g};
        const std::vector<seq_view<double>> slots{b.slot};
        REQUIRE_THROWS_WITH(bp(g, slots), Catch::Contains("scorer backprop: split 0") && Catch::Contains(b.needle));
        REQUIRE(grads_of(s) == before);
    }
    // Column-major and padded slots are fine.
    biaffine_scorer<double> s(tiny());
    auto [Y, bp] = s.forward(X, mode::train);
    std::vector<double> wide(4 * 5, 0.0);
    const std::vector<score_view<const double>> g{{dy.data(), 4, 1, 4}};
    const std::vector<seq_view<double>> slots{{wide.data(), 4, 3, 1, 5}};  // column-major, 5 rows apart
    bp(g, slots);
    for (const auto& p : s.parameters()) {
        bool any = false;
        for (std::size_t i = 0; i < p.size; ++i) any |= p.grad[i] != 0.0;
        CHECK(any);
    }
}

TEST_CASE("with_splits backprop rejects a gradient view with a short row stride, naming the document", "[layer][views]")
{
    biaffine_scorer<double> s(tiny());
    auto model = with_splits(with_minibatch_by_padded_size(s, budget::megabytes(1)));
    const std::vector<xt::xtensor<double, 2>> docs{xt::ones<double>({5, 3})};
    const std::vector<std::vector<int>> lens{{2, 3}};
    auto [Y, bp] = model.forward(docs, lens, mode::train);
    std::vector<double> g0(4, 1.0), g1(9, 1.0);
    const std::vector<score_view<const double>> dY{{g0.data(), 2, 1, 2}, {g1.data(), 3, 1, 2}};
    const auto before = grads_of(s);
    REQUIRE_THROWS_WITH(bp(dY), "with_splits backprop: split 1 (document 0): the gradient view's row stride 2 is "
                                "shorter than a row of 3 cells");
    REQUIRE(grads_of(s) == before);
}
