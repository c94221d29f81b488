// Tests for the scorer's output type apart from its compute type
// (biaffine_scorer<T, Backend, Out>, scorer.hpp) and its path through the
// layer protocol (layer.hpp's output_type, every combinator): double
// compute with float outputs, against an independent computation - the
// double scorer of the same parameters, whose outputs rounded to float must
// equal these bit for bit, and whose dX and gradients, given the same float
// gradients widened to double, must equal these exactly (the backward runs
// in double on the same numbers). The golden cases run on this instantiation
// in test_scorer.cpp; costs and memory here.
#include <catch2/catch.hpp>

#include <cstddef>
#include <cstdint>
#include <random>
#include <type_traits>
#include <vector>

#include <xtensor/xtensor.hpp>

#include "biaffine/biaffine.hpp"

using namespace biaffine;

namespace {

using S64 = biaffine_scorer<double>;
using S32o = biaffine_scorer<double, detail::scorer_backend_choice<double>::type, float>;

static_assert(std::is_same<S32o::value_type, double>::value, "compute type");
static_assert(std::is_same<S32o::output_type, float>::value, "output type");
static_assert(check_split_layer<S32o>() && check_padded_layer<S32o>() && check_heads_layer<S32o>());

// Every combinator passes the output type through: scores out, their
// gradients in, while inputs and input gradients keep the value type.
using stack_t = decltype(with_splits(with_minibatch_by_padded_size(with_pad_seq_unpad_matrix(std::declval<S32o&>()),
                                                                   budget::items(1))));
static_assert(std::is_same<stack_t::output_type, float>::value && std::is_same<stack_t::value_type, double>::value);
static_assert(std::is_same<decltype(std::declval<const stack_t&>().predict(
                               std::declval<const std::vector<xt::xtensor<double, 2>>&>(),
                               std::declval<const std::vector<std::vector<int>>&>())),
                           score_list<float>>::value);

// A protocol layer that declares no output_type: its value type is its output type.
struct no_output_type {
    using value_type = float;
};
static_assert(std::is_same<detail::output_t<no_output_type>, float>::value);

struct problem {
    scorer_config cfg;
    std::vector<std::size_t> lengths;
    xt::xtensor<double, 2> doc;
    std::vector<seq_view<const double>> items;
};

problem make_problem(std::size_t labels, std::vector<std::size_t> lengths, std::uint32_t seed, double dropout = 0.0)
{
    problem p;
    p.cfg.n_in = 7;
    p.cfg.hidden = 5;
    p.cfg.labels = labels;
    p.cfg.seed = seed;
    p.cfg.dropout = dropout;
    p.lengths = std::move(lengths);
    std::size_t N = 0;
    for (std::size_t n : p.lengths) N += n;
    std::mt19937 g(seed);
    std::normal_distribution<double> nd(0.0, 1.0);
    p.doc = xt::xtensor<double, 2>::from_shape({N, p.cfg.n_in});
    for (auto& v : p.doc) v = nd(g);
    for (std::size_t k = 0, row = 0; k < p.lengths.size(); row += p.lengths[k], ++k) {
        p.items.push_back(as_const_view(p.doc).rows_view(row, p.lengths[k]));
    }
    return p;
}

template <class A, class B>
void require_rounded_equal(const A& got_float, const B& want_double, const char* what)
{
    INFO(what);
    REQUIRE(got_float.size() == want_double.size());
    std::size_t bad = 0;
    for (std::size_t i = 0; i < got_float.size(); ++i) {
        if (got_float.data()[i] != static_cast<float>(want_double.data()[i])) ++bad;
    }
    CHECK(bad == 0);
}

template <class A, class B>
void require_equal(const A& a, const B& b, const char* what)
{
    INFO(what);
    REQUIRE(a.size() == b.size());
    std::size_t bad = 0;
    for (std::size_t i = 0; i < a.size(); ++i) bad += a.data()[i] != b.data()[i];
    CHECK(bad == 0);
}

// Random float gradients shaped as Y, and the same values as double.
template <class List>
std::pair<std::vector<xt::xarray<float>>, std::vector<xt::xarray<double>>> grads_like(const List& Y, std::uint32_t seed)
{
    std::mt19937 g(seed);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::vector<xt::xarray<float>> f;
    std::vector<xt::xarray<double>> d;
    for (const auto& y : Y) {
        xt::xarray<float> a = xt::xarray<float>::from_shape(y.shape());
        for (auto& v : a) v = nd(g);
        d.push_back(xt::cast<double>(a));
        f.push_back(std::move(a));
    }
    return {std::move(f), std::move(d)};
}

template <class S>
void check_same_gradients(const S64& s64, const S& s32o)
{
    const auto a = s64.parameters();
    const auto b = s32o.parameters();
    REQUIRE(a.size() == b.size());
    for (std::size_t i = 0; i < a.size(); ++i) {
        INFO("gradient of " << a[i].name);
        REQUIRE(a[i].grad != nullptr);
        REQUIRE(b[i].grad != nullptr);
        std::size_t bad = 0;
        for (std::size_t j = 0; j < a[i].size; ++j) bad += a[i].grad[j] != b[i].grad[j];
        CHECK(bad == 0);
    }
}

}  // namespace

TEST_CASE("float outputs of a double scorer are its double outputs rounded, on every inference call",
          "[scorer][output_type]")
{
    for (std::size_t o : {std::size_t(1), std::size_t(3)}) {
        const problem p = make_problem(o, {1, 4, 0, 9, 13, 2}, 11 + static_cast<std::uint32_t>(o));
        INFO("labels " << o);
        const S64 s64(p.cfg);
        const S32o s32o(p.cfg);  // same seed: the same parameters
        const score_list<double> Y64 = s64.predict(p.items);
        const score_list<float> Y32 = s32o.predict(p.items);
        REQUIRE(Y32.size() == Y64.size());
        for (std::size_t k = 0; k < Y32.size(); ++k) require_rounded_equal(Y32[k], Y64[k], "predict");
        std::size_t streamed = 0;
        s32o.predict_stream(p.items, [&](std::size_t k, score_view<const float> v) {
            xt::xtensor<float, 1> a = xt::xtensor<float, 1>::from_shape({v.n * v.n * v.labels});
            for (std::size_t m = 0; m < v.n; ++m)
                for (std::size_t l = 0; l < v.n; ++l)
                    for (std::size_t c = 0; c < v.labels; ++c) a((m * v.n + l) * v.labels + c) = v(m, l, c);
            require_rounded_equal(a, Y64[k], "predict_stream");
            ++streamed;
        });
        CHECK(streamed == p.items.size());
        // Labels at given heads.
        std::vector<std::vector<int>> heads;
        std::mt19937 g(5);
        for (std::size_t n : p.lengths) {
            std::vector<int> h(n);
            for (auto& v : h) v = static_cast<int>(g() % n);
            heads.push_back(std::move(h));
        }
        const score_list<double> H64 = s64.predict_heads(p.items, heads);
        const score_list<float> H32 = s32o.predict_heads(p.items, heads);
        for (std::size_t k = 0; k < H32.size(); ++k) require_rounded_equal(H32[k], H64[k], "predict_heads");
        // Padded: every cell, the mask included.
        const std::size_t L = 13;
        xt::xtensor<double, 3> x = xt::zeros<double>({p.lengths.size(), L, p.cfg.n_in});
        std::vector<std::int64_t> lens;
        xt::xtensor<std::int64_t, 2> hp = xt::zeros<std::int64_t>({p.lengths.size(), L});
        for (std::size_t k = 0; k < p.items.size(); ++k) {
            lens.push_back(static_cast<std::int64_t>(p.lengths[k]));
            for (std::size_t m = 0; m < p.lengths[k]; ++m) {
                for (std::size_t c = 0; c < p.cfg.n_in; ++c) x(k, m, c) = p.items[k](m, c);
                hp(k, m) = heads[k][m];
            }
        }
        require_rounded_equal(s32o.predict_padded(x, lens), s64.predict_padded(x, lens), "predict_padded");
        require_rounded_equal(s32o.predict_heads_padded(x, lens, hp), s64.predict_heads_padded(x, lens, hp),
                              "predict_heads_padded");
        // Through the whole stack, batched under a small budget.
        std::vector<xt::xtensor<double, 2>> docs{p.doc};
        std::vector<std::vector<std::size_t>> split_lengths{p.lengths};
        auto pipe32 = with_splits(with_minibatch_by_padded_size(s32o, budget::items(8)));
        auto pipe64 = with_splits(with_minibatch_by_padded_size(s64, budget::items(8)));
        const score_list<float> P32 = pipe32.predict(docs, split_lengths);
        const score_list<double> P64 = pipe64.predict(docs, split_lengths);
        for (std::size_t k = 0; k < P32.size(); ++k) require_rounded_equal(P32[k], P64[k], "with_splits predict");
        auto padded32 = with_splits(with_minibatch_by_padded_size(with_pad_seq_unpad_matrix(s32o), budget::items(8)));
        const score_list<float> Q32 = padded32.predict(docs, split_lengths);
        for (std::size_t k = 0; k < Q32.size(); ++k) require_rounded_equal(Q32[k], P64[k], "padded stack predict");
    }
}

TEST_CASE("float gradients into a double scorer: dX and parameter gradients equal the double scorer's exactly",
          "[scorer][output_type]")
{
    for (const train_output to : {train_output::probabilities, train_output::logits}) {
        for (std::size_t o : {std::size_t(1), std::size_t(4)}) {
            INFO("labels " << o << (to == train_output::logits ? ", logits" : ", probabilities"));
            problem p = make_problem(o, {3, 8, 1, 6}, 21 + static_cast<std::uint32_t>(o), 0.25);
            p.cfg.train_outputs = to;
            std::vector<xt::xtensor<double, 2>> docs{p.doc};
            std::vector<std::vector<std::size_t>> split_lengths{p.lengths};
            for (bool recompute : {false, true}) {
                p.cfg.recompute_in_backward = recompute;
                INFO("recompute_in_backward " << recompute);
                S64 s64(p.cfg);
                S32o s32o(p.cfg);
                // Full scores through the batcher (dropout masks drawn alike).
                auto pipe64 = with_splits(with_minibatch_by_padded_size(s64, budget::items(6)));
                auto pipe32 = with_splits(with_minibatch_by_padded_size(s32o, budget::items(6)));
                auto [Y64, bp64] = pipe64.forward(docs, split_lengths);
                auto [Y32, bp32] = pipe32.forward(docs, split_lengths);
                for (std::size_t k = 0; k < Y32.size(); ++k) require_rounded_equal(Y32[k], Y64[k], "forward");
                const auto [g32, g64] = grads_like(Y32, 7);
                const auto dX64 = bp64(decltype(pipe64)::grad_views(g64));
                const auto dX32 = bp32(decltype(pipe32)::grad_views(g32));
                static_assert(std::is_same<typename std::decay_t<decltype(dX32)>::value_type::value_type, double>::value,
                              "input gradients keep the value type");
                REQUIRE(dX32.size() == dX64.size());
                require_equal(dX32[0], dX64[0], "dX");
                check_same_gradients(s64, s32o);
                // Labels at given heads, and the padded stack.
                std::vector<std::vector<int>> heads;
                for (std::size_t n : p.lengths) {
                    std::vector<int> h(n);
                    for (std::size_t m = 0; m < n; ++m) h[m] = static_cast<int>((m * 5 + 1) % n);
                    heads.push_back(std::move(h));
                }
                std::vector<int> flat_heads;
                for (const auto& h : heads) flat_heads.insert(flat_heads.end(), h.begin(), h.end());
                const std::vector<std::vector<int>> doc_heads{flat_heads};
                s64.zero_grad();
                s32o.zero_grad();
                auto hp64 = with_splits(with_minibatch_by_padded_size(with_pad_seq_unpad_matrix(s64), budget::items(5)));
                auto hp32 =
                    with_splits(with_minibatch_by_padded_size(with_pad_seq_unpad_matrix(s32o), budget::items(5)));
                auto [L64, lb64] = hp64.forward_heads(docs, split_lengths, doc_heads);
                auto [L32, lb32] = hp32.forward_heads(docs, split_lengths, doc_heads);
                for (std::size_t k = 0; k < L32.size(); ++k) require_rounded_equal(L32[k], L64[k], "forward_heads");
                const auto [h32, h64] = grads_like(L32, 9);
                const auto hX64 = lb64(decltype(hp64)::head_grad_views(h64));
                const auto hX32 = lb32(decltype(hp32)::head_grad_views(h32));
                require_equal(hX32[0], hX64[0], "heads dX");
                check_same_gradients(s64, s32o);
            }
        }
    }
}

TEST_CASE("output bytes count the output type; reported scratch covers the conversion", "[scorer][output_type][memory]")
{
    for (std::size_t o : {std::size_t(1), std::size_t(4)}) {
        const problem p = make_problem(o, {6, 2, 6, 5, 6}, 31);
        INFO("labels " << o);
        const S64 s64(p.cfg);
        const S32o s32o(p.cfg);
        const std::size_t count = p.items.size(), L = 6;
        for (mode m : {mode::eval, mode::train}) {
            CHECK(s32o.cost(count, L, m).outputs == count * L * L * o * sizeof(float));
            CHECK(s64.cost(count, L, m).outputs == 2 * s32o.cost(count, L, m).outputs);
            CHECK(s32o.heads_cost(count, L, m).outputs == count * L * o * sizeof(float));
        }
        // Inference keeps nothing but its outputs (float: half the double bytes).
        {
            const std::uint64_t before = tracker().current_bytes();
            const score_list<float> Y = s32o.predict(p.items);
            std::uint64_t cells = 0;
            for (std::size_t n : p.lengths) cells += n * n * o;
            CHECK(tracker().current_bytes() - before == cells * sizeof(float) + Y.capacity() * sizeof(score_tensor<float>));
        }
        const batch_cost c = s32o.cost(count, L, mode::eval);
        {
            // Within a scope of the reported scratch nothing else is carved.
            workspace_scope ws(c.scratch);
            scoped_peak sp;
            const memory_stats s0 = tracker().stats();
            s32o.predict_stream(p.items, [](std::size_t, score_view<const float>) {});
            CHECK(sp.work_peak_bytes() == s0.current_bytes - s0.output_bytes);
            CHECK(tracker().stats().allocations == s0.allocations);
        }
        {
            // The report is the double scorer's with the stream buffer in
            // float and one split of double for the conversion on top, and
            // so is what the call carves (no scope: scratch from the heap):
            // the float buffer more than the double scorer's stream.
            const std::uint64_t cells = L * L * o;
            CHECK(c.scratch == s64.cost(count, L, mode::eval).scratch + detail::scratch_bytes<float>(cells));
            const auto peak_of = [&](const auto& s, auto view_tag) {
                scoped_peak sp;
                const memory_stats s0 = tracker().stats();
                s.predict_stream(p.items, [](std::size_t, decltype(view_tag)) {});
                return sp.work_peak_bytes() - (s0.current_bytes - s0.output_bytes);
            };
            const std::uint64_t p32 = peak_of(s32o, score_view<const float>{});
            const std::uint64_t p64 = peak_of(s64, score_view<const double>{});
            CHECK(p32 == p64 + cells * sizeof(float));
        }
        {
            // Training: the backward (the backend converts dY to double one
            // split at a time) fits the reported scratch.
            S32o t(p.cfg);
            const batch_cost ct = t.cost(count, L, mode::train);
            auto [Y, bp] = t.forward(p.items, mode::train);
            std::vector<xt::xarray<float>> g;
            std::vector<score_view<const float>> gv;
            std::vector<xt::xtensor<double, 2>> dx;
            std::vector<seq_view<double>> dxv;
            for (std::size_t k = 0; k < count; ++k) {
                g.push_back(xt::ones<float>(Y[k].shape()));
                dx.push_back(xt::xtensor<double, 2>::from_shape({p.lengths[k], p.cfg.n_in}));
            }
            for (std::size_t k = 0; k < count; ++k) {
                const std::size_t n = p.lengths[k];
                gv.push_back({g[k].data(), n, o, static_cast<std::ptrdiff_t>(n * o)});
                dxv.push_back({dx[k].data(), n, p.cfg.n_in, static_cast<std::ptrdiff_t>(p.cfg.n_in), 1});
            }
            workspace_scope ws(ct.scratch);
            scoped_peak sp;
            const memory_stats s0 = tracker().stats();
            bp(span<const score_view<const float>>(gv.data(), count), span<const seq_view<double>>(dxv.data(), count));
            CHECK(sp.work_peak_bytes() == s0.current_bytes - s0.output_bytes);
            CHECK(ct.heap == 0);
        }
    }
}
