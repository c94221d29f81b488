// Tests for biaffine/with_pad_seq_unpad_matrix.hpp: a mock padded X·Xᵀ layer
// (NaN in every padded cell, so anything read from padding shows) checks the
// padding / unpadding in both directions; the real scorer through the adapter
// matches the naive reference and the unpadded split-list path; the reported
// cost covers the measured working set; bad input.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <iostream>
#include <random>
#include <vector>

#include "biaffine/biaffine.hpp"
#include "layer_helpers.hpp"

using namespace biaffine;
using th::grad_slots;
using th::padded_xxt_layer;
using th::random_lengths;
using th::random_score_grads;
using th::views_of;
using sizes = std::vector<std::size_t>;

namespace {

/// Random items `[n_k, n_in]` (row-major, or column-major views for variety).
template <class T>
struct items_t {
    std::vector<std::vector<T>> store;
    std::vector<seq_view<const T>> views;
    std::vector<std::vector<double>> rows;  // row-major copies in double
    sizes lengths;
};

template <class T>
items_t<T> make_items(std::mt19937& rng, const sizes& lengths, std::size_t n_in)
{
    items_t<T> it;
    it.lengths = lengths;
    it.store = th::random_buffers<T>(rng, lengths, n_in);
    for (std::size_t k = 0; k < lengths.size(); ++k) {
        const std::size_t n = lengths[k];
        const bool col_major = (k % 2) == 1;
        seq_view<const T> v{it.store[k].data(), n, n_in,
                            col_major ? 1 : static_cast<std::ptrdiff_t>(n_in),
                            col_major ? static_cast<std::ptrdiff_t>(std::max<std::size_t>(n, 1)) : 1};
        it.views.push_back(v);
        std::vector<double> r;
        for (std::size_t i = 0; i < n; ++i)
            for (std::size_t c = 0; c < n_in; ++c) r.push_back(static_cast<double>(v(i, c)));
        it.rows.push_back(std::move(r));
    }
    return it;
}

// Naive (q + 1) X Xᵀ and its input gradient, in double.
std::vector<double> xxt(const std::vector<double>& x, std::size_t n, std::size_t n_in, std::size_t o)
{
    std::vector<double> y;
    for (std::size_t m = 0; m < n; ++m)
        for (std::size_t l = 0; l < n; ++l) {
            double s = 0;
            for (std::size_t c = 0; c < n_in; ++c) s += x[m * n_in + c] * x[l * n_in + c];
            for (std::size_t q = 0; q < o; ++q) y.push_back(double(q + 1) * s);
        }
    return y;
}

template <class T>
std::vector<double> xxt_dx(const std::vector<double>& x, std::size_t n, std::size_t n_in, std::size_t o,
                           score_view<const T> g)
{
    std::vector<double> dx(n * n_in, 0.0);
    for (std::size_t r = 0; r < n; ++r)
        for (std::size_t c = 0; c < n_in; ++c)
            for (std::size_t l = 0; l < n; ++l)
                for (std::size_t q = 0; q < o; ++q)
                    dx[r * n_in + c] += double(q + 1) * (double(g(r, l, q)) + double(g(l, r, q))) * x[l * n_in + c];
    return dx;
}

std::size_t g_workloads = 0;

template <class T>
void mock_workload(std::mt19937& rng)
{
    const std::size_t count = std::uniform_int_distribution<std::size_t>(0, 12)(rng);
    const std::size_t n_in = std::uniform_int_distribution<std::size_t>(1, 5)(rng);
    const std::size_t o = std::uniform_int_distribution<int>(0, 1)(rng) ? 1 : 3;
    const items_t<T> it = make_items<T>(rng, random_lengths(rng, count, 40), n_in);
    padded_xxt_layer<T> mock(n_in, o);
    auto pad = with_pad_seq_unpad_matrix(mock);
    INFO("count=" << count << " n_in=" << n_in << " o=" << o);
    const double eps = th::tol<T>();

    const score_list<T> Y = pad.predict(it.views);
    REQUIRE(Y.size() == count);
    double worst = 0;
    for (std::size_t k = 0; k < count; ++k) {
        const std::size_t n = it.lengths[k];
        REQUIRE(Y[k].dimension() == (o == 1 ? 2u : 3u));
        REQUIRE(Y[k].shape()[0] == n);
        REQUIRE(Y[k].shape()[1] == n);
        worst = std::max(worst, th::rel_err(th::to_vec(Y[k]), xxt(it.rows[k], n, n_in, o)));
    }
    REQUIRE(worst < eps);
    REQUIRE_FALSE(mock.input_not_zero_padded);
    REQUIRE(mock.n_calls == (count == 0 ? mock.n_calls : 1u));

    std::vector<int> seen(count, 0);
    double worst_stream = 0;
    pad.predict_stream(it.views, [&](std::size_t k, score_view<const T> s) {
        ++seen[k];
        worst_stream = std::max(worst_stream, th::rel_err(th::to_vec(s), th::to_vec(Y[k])));
    });
    REQUIRE(std::count(seen.begin(), seen.end(), 1) == static_cast<std::ptrdiff_t>(count));
    REQUIRE(worst_stream == 0.0);

    auto [Yf, bp] = pad.forward(it.views, mode::train);
    REQUIRE(Yf.size() == count);
    for (std::size_t k = 0; k < count; ++k) worst = std::max(worst, th::rel_err(th::to_vec(Yf[k]), th::to_vec(Y[k])));
    REQUIRE(worst < eps);
    const score_list<T> dY = random_score_grads<T>(rng, it.lengths, o);
    const auto dYv = views_of(dY);
    grad_slots<T> dX(it.lengths, n_in);
    bp(span<const score_view<const T>>(dYv.data(), count), span<const seq_view<T>>(dX.views.data(), count));
    REQUIRE_FALSE(mock.dy_nonzero_outside);
    double worst_dx = 0;
    for (std::size_t k = 0; k < count; ++k) {
        worst_dx = std::max(worst_dx, th::rel_err(dX.get(k), xxt_dx<T>(it.rows[k], it.lengths[k], n_in, o, dYv[k])));
    }
    REQUIRE(worst_dx < eps);
    ++g_workloads;
}

template <class T>
void scorer_workload(std::mt19937& rng, int trial)
{
    const std::size_t count = std::uniform_int_distribution<std::size_t>(0, 10)(rng);
    scorer_config cfg;
    cfg.n_in = std::uniform_int_distribution<std::size_t>(1, 6)(rng);
    cfg.hidden = std::uniform_int_distribution<std::size_t>(1, 6)(rng);
    cfg.labels = std::uniform_int_distribution<int>(0, 1)(rng) ? 1 : 3;
    cfg.bias_u = std::uniform_int_distribution<int>(0, 3)(rng) != 0;
    cfg.bias_v = std::uniform_int_distribution<int>(0, 3)(rng) != 0;
    cfg.seed = static_cast<std::uint64_t>(trial) + 1;
    biaffine_scorer<T> scorer(cfg), plain(cfg);
    const th::ref_model M = th::ref_from(scorer);
    const std::size_t n_in = cfg.n_in, o = cfg.labels;
    const items_t<T> it = make_items<T>(rng, random_lengths(rng, count, 30), n_in);
    auto pad = with_pad_seq_unpad_matrix(scorer);
    const mode m = std::uniform_int_distribution<int>(0, 1)(rng) ? mode::train : mode::eval;
    const bool train = m == mode::train;
    const double eps = th::tol<T>();
    INFO("trial " << trial << " count=" << count << " o=" << o << " train=" << train);

    // eval: against the naive reference, split by split
    const score_list<T> Y = pad.predict(it.views);
    REQUIRE(Y.size() == count);
    double worst = 0;
    for (std::size_t k = 0; k < count; ++k) {
        worst = std::max(worst, th::rel_err(th::to_vec(Y[k]), th::ref_forward(M, it.rows[k], it.lengths[k], false).y));
    }
    REQUIRE(worst < eps);

    // forward + backward through the adapter vs the scorer's own split-list
    // path (unpadded) and vs the naive reference
    auto [Yf, bp] = pad.forward(it.views, m);
    auto [Yu, bpu] = plain.forward(it.views, m);
    th::ref_grads G(M);
    std::vector<std::vector<double>> ref_dx(count);
    const score_list<T> dY = random_score_grads<T>(rng, it.lengths, o);
    const auto dYv = views_of(dY);
    bool near_kink = false;
    for (std::size_t k = 0; k < count; ++k) {
        const th::ref_split r = th::ref_forward(M, it.rows[k], it.lengths[k], train);
        worst = std::max(worst, th::rel_err(th::to_vec(Yf[k]), r.y));
        worst = std::max(worst, th::rel_err(th::to_vec(Yf[k]), th::to_vec(Yu[k])));
        th::ref_backward(M, it.rows[k], r, train, th::to_vec(dYv[k]), ref_dx[k], G);
        near_kink = near_kink || r.min_abs_z < 1e-4;
    }
    REQUIRE(worst < eps);
    grad_slots<T> dX(it.lengths, n_in), dXu(it.lengths, n_in);
    bp(span<const score_view<const T>>(dYv.data(), count), span<const seq_view<T>>(dX.views.data(), count));
    bpu(span<const score_view<const T>>(dYv.data(), count), span<const seq_view<T>>(dXu.views.data(), count));
    double worst_dx = 0, worst_ref = 0;
    for (std::size_t k = 0; k < count; ++k) {
        worst_dx = std::max(worst_dx, th::rel_err(dX.get(k), dXu.get(k)));
        worst_ref = std::max(worst_ref, th::rel_err(dX.get(k), ref_dx[k]));
    }
    REQUIRE(worst_dx < eps);
    const double grad_err = std::max({th::rel_err(scorer.d_head_weight(), plain.d_head_weight()),
                                      th::rel_err(scorer.d_head_bias(), plain.d_head_bias()),
                                      th::rel_err(scorer.d_dependent_weight(), plain.d_dependent_weight()),
                                      th::rel_err(scorer.d_dependent_bias(), plain.d_dependent_bias()),
                                      th::rel_err(scorer.d_bilinear_weight(), plain.d_bilinear_weight())});
    REQUIRE(grad_err < eps);
    // A pre-activation within rounding of the relu kink may go either way in
    // float; the comparison with the unpadded float path above still holds.
    if (!near_kink || std::is_same<T, double>::value) {
        REQUIRE(worst_ref < eps);
        const double ref_err = std::max({th::rel_err(scorer.d_head_weight(), G.dwh),
                                         th::rel_err(scorer.d_head_bias(), G.dbh),
                                         th::rel_err(scorer.d_dependent_weight(), G.dwd),
                                         th::rel_err(scorer.d_dependent_bias(), G.dbd),
                                         th::rel_err(scorer.d_bilinear_weight(), G.dw)});
        REQUIRE(ref_err < eps);
    }
    ++g_workloads;
}

}  // namespace

TEST_CASE("with_pad_seq_unpad_matrix: padding and unpadding, both directions, via a NaN-padded mock",
          "[with_pad_seq_unpad_matrix]")
{
    std::mt19937 rng(4242);
    const std::size_t before = g_workloads;
    for (int t = 0; t < 150; ++t) mock_workload<float>(rng);
    for (int t = 0; t < 150; ++t) mock_workload<double>(rng);
    std::cout << "[with_pad_seq_unpad_matrix] mock workloads: " << g_workloads - before << "\n";
}

TEST_CASE("with_pad_seq_unpad_matrix(scorer) matches the naive reference and the unpadded path",
          "[with_pad_seq_unpad_matrix]")
{
    std::mt19937 rng(777);
    const std::size_t before = g_workloads;
    for (int t = 0; t < 100; ++t) scorer_workload<float>(rng, t);
    for (int t = 0; t < 100; ++t) scorer_workload<double>(rng, 1000 + t);
    std::cout << "[with_pad_seq_unpad_matrix] scorer workloads: " << g_workloads - before << "\n";
}

TEST_CASE("with_pad_seq_unpad_matrix: the reported cost covers the measured working set",
          "[with_pad_seq_unpad_matrix][memory]")
{
    std::mt19937 rng(2718);
    std::uint64_t worst_slack = ~std::uint64_t(0);
    for (int t = 0; t < 60; ++t) {
        scorer_config cfg;
        cfg.n_in = std::uniform_int_distribution<std::size_t>(1, 40)(rng);
        cfg.hidden = std::uniform_int_distribution<std::size_t>(1, 24)(rng);
        cfg.labels = std::uniform_int_distribution<int>(0, 1)(rng) ? 1 : 2;
        biaffine_scorer<float> scorer(cfg);
        auto pad = with_pad_seq_unpad_matrix(scorer);
        const std::size_t count = std::uniform_int_distribution<std::size_t>(1, 20)(rng);
        const items_t<float> it = make_items<float>(rng, random_lengths(rng, count, 60), cfg.n_in);
        std::size_t L = 0;
        for (auto n : it.lengths) L = std::max(L, n);
        INFO("trial " << t << " count=" << count << " L=" << L);

        // inference, inside the workspace a batcher would open
        const batch_cost c = pad.cost(count, L, mode::eval);
        const memory_stats base = tracker().stats();
        tracker().reset_peak();
        memory_stats after;
        {
            workspace_scope ws(c.scratch);
            const score_list<float> Y = pad.predict(it.views);
            after = tracker().stats();
        }
        const std::uint64_t work = after.work_peak_bytes - (base.current_bytes - base.output_bytes);
        const std::uint64_t outputs = after.output_bytes - base.output_bytes;
        // working set (outputs excluded) and the plain form, peak - outputs
        REQUIRE(work <= c.total() - c.outputs);
        REQUIRE(after.peak_bytes - base.current_bytes - outputs <= c.total() - c.outputs);
        REQUIRE(tracker().stats().current_bytes == base.current_bytes);  // nothing kept
        if (L > 0) worst_slack = std::min(worst_slack, c.total() - c.outputs - work);
    }
    std::cout << "[with_pad_seq_unpad_matrix] smallest (reported - measured) inference working set, outputs excluded: " << worst_slack
              << " bytes\n";
}

namespace {

scorer_config small_config(std::size_t n_in, std::size_t hidden, std::size_t labels)
{
    scorer_config cfg;
    cfg.n_in = n_in;
    cfg.hidden = hidden;
    cfg.labels = labels;
    return cfg;
}

}  // namespace

TEST_CASE("with_pad_seq_unpad_matrix: edge cases and bad input", "[with_pad_seq_unpad_matrix][errors]")
{
    std::mt19937 rng(1);
    padded_xxt_layer<double> mock(3, 1);
    auto pad = with_pad_seq_unpad_matrix(mock);

    SECTION("no items, and only zero-length items")
    {
        const std::vector<seq_view<const double>> none;
        REQUIRE(pad.predict(none).empty());
        const items_t<double> zeros = make_items<double>(rng, {0, 0, 0}, 3);
        const score_list<double> Y = pad.predict(zeros.views);
        REQUIRE(Y.size() == 3);
        for (const auto& y : Y) REQUIRE(y.size() == 0);
        auto [Yf, bp] = pad.forward(zeros.views, mode::train);
        const score_list<double> dY = random_score_grads<double>(rng, zeros.lengths, 1);
        const auto dYv = views_of(dY);
        grad_slots<double> dX(zeros.lengths, 3);
        bp(span<const score_view<const double>>(dYv.data(), 3), span<const seq_view<double>>(dX.views.data(), 3));
        REQUIRE(dX.store[0][0] == grad_slots<double>::unwritten);  // nothing written for an empty split
    }
    SECTION("width mismatch")
    {
        const items_t<double> it = make_items<double>(rng, {2, 3}, 4);
        REQUIRE_THROWS_AS(pad.predict(it.views), shape_error);
        REQUIRE_THROWS_WITH(pad.predict(it.views), Catch::Contains("split 0") && Catch::Contains("width 4") &&
                                                       Catch::Contains("n_in = 3"));
        REQUIRE_THROWS_AS(pad.forward(it.views, mode::train), shape_error);
    }
    SECTION("gradients of the wrong count or shape; a second backprop")
    {
        const items_t<double> it = make_items<double>(rng, {2, 3}, 3);
        grad_slots<double> dX(it.lengths, 3);
        {
            auto [Y, bp] = pad.forward(it.views, mode::train);
            const score_list<double> dY = random_score_grads<double>(rng, {2}, 1);
            const auto dYv = views_of(dY);
            REQUIRE_THROWS_WITH(bp(span<const score_view<const double>>(dYv.data(), 1),
                                   span<const seq_view<double>>(dX.views.data(), 1)),
                                Catch::Contains("expected 2") && Catch::Contains("got 1"));
        }
        {
            auto [Y, bp] = pad.forward(it.views, mode::train);
            const score_list<double> dY = random_score_grads<double>(rng, {2, 2}, 1);  // split 1 is 3 long
            const auto dYv = views_of(dY);
            REQUIRE_THROWS_AS(bp(span<const score_view<const double>>(dYv.data(), 2),
                                 span<const seq_view<double>>(dX.views.data(), 2)),
                              shape_error);
        }
        {
            auto [Y, bp] = pad.forward(it.views, mode::train);
            const score_list<double> dY = random_score_grads<double>(rng, {2, 3}, 2);  // two labels, the layer has one
            const auto dYv = views_of(dY);
            REQUIRE_THROWS_WITH(bp(span<const score_view<const double>>(dYv.data(), 2),
                                   span<const seq_view<double>>(dX.views.data(), 2)),
                                Catch::Contains("split 0") && Catch::Contains("expected a gradient of [2, 2, 1]") &&
                                    Catch::Contains("got [2, 2, 2]"));
        }
        {
            // dY right, dX short: the message names dX and its count.
            auto [Y, bp] = pad.forward(it.views, mode::train);
            const score_list<double> dY = random_score_grads<double>(rng, {2, 3}, 1);
            const auto dYv = views_of(dY);
            REQUIRE_THROWS_WITH(bp(span<const score_view<const double>>(dYv.data(), 2),
                                   span<const seq_view<double>>(dX.views.data(), 1)),
                                Catch::Contains("expected 2 input gradient slots (dX), got 1"));
        }
        auto [Y, bp] = pad.forward(it.views, mode::train);
        const score_list<double> dY = random_score_grads<double>(rng, {2, 3}, 1);
        const auto dYv = views_of(dY);
        bp(span<const score_view<const double>>(dYv.data(), 2), span<const seq_view<double>>(dX.views.data(), 2));
        REQUIRE_THROWS_AS(bp(span<const score_view<const double>>(dYv.data(), 2),
                             span<const seq_view<double>>(dX.views.data(), 2)),
                          backprop_error);
    }
    SECTION("labels at given heads: gradients of the wrong count name the argument")
    {
        biaffine_scorer<double> scorer(small_config(3, 2, 2));
        auto p = with_pad_seq_unpad_matrix(scorer);
        const items_t<double> it = make_items<double>(rng, {2, 3}, 3);
        const std::vector<std::vector<std::size_t>> heads{{1, 1}, {0, 0, 1}};
        grad_slots<double> dX(it.lengths, 3);
        std::vector<std::vector<double>> dy{std::vector<double>(2 * 2), std::vector<double>(3 * 2)};
        const std::vector<seq_view<const double>> dYv{{dy[0].data(), 2, 2, 2, 1}, {dy[1].data(), 3, 2, 2, 1}};
        {
            auto [Y, bp] = p.forward_heads(it.views, heads, mode::train);
            REQUIRE_THROWS_WITH(bp(span<const seq_view<const double>>(dYv.data(), 2),
                                   span<const seq_view<double>>(dX.views.data(), 1)),
                                Catch::Contains("expected 2 input gradient slots (dX), got 1"));
        }
        auto [Y, bp] = p.forward_heads(it.views, heads, mode::train);
        REQUIRE_THROWS_WITH(bp(span<const seq_view<const double>>(dYv.data(), 1),
                               span<const seq_view<double>>(dX.views.data(), 2)),
                            Catch::Contains("expected 2 split gradients (dY), got 1"));
    }
    SECTION("size computations that would overflow 64 bits")
    {
        biaffine_scorer<float> scorer(small_config(2, 2, 4));
        auto p = with_pad_seq_unpad_matrix(scorer);
        // count * L^2 * o * sizeof(T) = 2^20 * 2^46 * 4 * 4 > 2^64
        REQUIRE_THROWS_AS(p.cost(std::size_t(1) << 20, std::size_t(1) << 23), overflow_error);
        REQUIRE_THROWS_WITH(p.cost(std::size_t(1) << 20, std::size_t(1) << 23, mode::train),
                            Catch::Contains("overflows 64 bits"));
        REQUIRE_THROWS_AS(scorer.cost(1, std::size_t(1) << 31), overflow_error);  // 2^62 * 4 labels * 4 bytes
        REQUIRE_NOTHROW(scorer.cost(1, std::size_t(1) << 29));
    }
}
