// Tests for the scorer's output type apart from its compute type
// (biaffine_scorer<T, Backend, Out>, scorer.hpp) and its path through the
// layer protocol (layer.hpp's output_type, every combinator): double
// compute with float outputs, and float compute with bfloat16 outputs,
// against an independent computation - the scorer of the compute type with
// the same parameters, whose outputs rounded to Out must equal these bit for
// bit, and whose dX and gradients, given the same Out gradients widened to
// T, must equal these exactly (the backward runs in T on the same numbers).
// The golden cases run on the double/float instantiation in test_scorer.cpp;
// costs and memory here.
#include <catch2/catch.hpp>

#include <cstddef>
#include <cstdint>
#include <random>
#include <type_traits>
#include <vector>

#include <xtensor/xtensor.hpp>

#include "biaffine/biaffine.hpp"

using namespace biaffine;
// biaffine::bfloat16 spelled out: OpenBLAS's cblas.h (the BLAS backend's
// builds) declares a global `bfloat16` typedef too.

namespace {

/// A compute type T and an output type O: the wide scorer computes and hands
/// out T, the narrow one computes T and hands out O.
template <class T, class O>
struct types {
    using value = T;
    using out = O;
    using wide = biaffine_scorer<T>;
    using narrow = scorer_with_output<T, O>;
    static_assert(std::is_same<typename narrow::value_type, T>::value, "compute type");
    static_assert(std::is_same<typename narrow::output_type, O>::value, "output type");
    static_assert(check_split_layer<narrow>() && check_padded_layer<narrow>() && check_heads_layer<narrow>());
};
using f64_f32 = types<double, float>;
using f32_bf16 = types<float, biaffine::bfloat16>;

// Every combinator passes the output type through: scores out, their
// gradients in, while inputs and input gradients keep the value type.
template <class Ty>
using stack_t = decltype(with_splits(with_minibatch_by_padded_size(
    with_pad_seq_unpad_matrix(std::declval<typename Ty::narrow&>()), budget::items(1))));
static_assert(std::is_same<stack_t<f64_f32>::output_type, float>::value &&
              std::is_same<stack_t<f64_f32>::value_type, double>::value);
static_assert(std::is_same<stack_t<f32_bf16>::output_type, biaffine::bfloat16>::value &&
              std::is_same<stack_t<f32_bf16>::value_type, float>::value);
static_assert(std::is_same<decltype(std::declval<const stack_t<f32_bf16>&>().predict(
                               std::declval<const std::vector<xt::xtensor<float, 2>>&>(),
                               std::declval<const std::vector<std::vector<int>>&>())),
                           score_list<biaffine::bfloat16>>::value);

// A protocol layer that declares no output_type: its value type is its output type.
struct no_output_type {
    using value_type = float;
};
static_assert(std::is_same<detail::output_t<no_output_type>, float>::value);

// `x` rounded to O: a cast, or bfloat16's round to nearest even.
template <class O, class T>
O rounded(T x)
{
    if constexpr (std::is_same<O, biaffine::bfloat16>::value) {
        return biaffine::bfloat16(static_cast<float>(x));
    } else {
        return static_cast<O>(x);
    }
}

// O's value as T, exactly.
template <class T, class O>
T widened(O x)
{
    return static_cast<T>(static_cast<std::conditional_t<std::is_same<O, biaffine::bfloat16>::value, float, O>>(x));
}

template <class T>
struct problem {
    scorer_config cfg;
    std::vector<std::size_t> lengths;
    xt::xtensor<T, 2> doc;
    std::vector<seq_view<const T>> items;
};

template <class T>
problem<T> make_problem(std::size_t labels, std::vector<std::size_t> lengths, std::uint32_t seed, double dropout = 0.0)
{
    problem<T> p;
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
    p.doc = xt::xtensor<T, 2>::from_shape({N, p.cfg.n_in});
    for (auto& v : p.doc) v = static_cast<T>(nd(g));
    for (std::size_t k = 0, row = 0; k < p.lengths.size(); row += p.lengths[k], ++k) {
        p.items.push_back(as_const_view(p.doc).rows_view(row, p.lengths[k]));
    }
    return p;
}

// got (O) == want (T) rounded to O, element for element, bit for bit.
template <class A, class B>
void require_rounded_equal(const A& got, const B& want, const char* what)
{
    using O = std::remove_cv_t<std::remove_reference_t<decltype(*got.data())>>;
    INFO(what);
    REQUIRE(got.size() == want.size());
    std::size_t bad = 0;
    for (std::size_t i = 0; i < got.size(); ++i) {
        if (!(got.data()[i] == rounded<O>(want.data()[i]))) ++bad;
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

// Random O gradients shaped as Y, and the same values as T.
template <class T, class O, class List>
std::pair<std::vector<xt::xarray<O>>, std::vector<xt::xarray<T>>> grads_like(const List& Y, std::uint32_t seed)
{
    std::mt19937 g(seed);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::vector<xt::xarray<O>> f;
    std::vector<xt::xarray<T>> d;
    for (const auto& y : Y) {
        xt::xarray<O> a = xt::xarray<O>::from_shape(y.shape());
        xt::xarray<T> w = xt::xarray<T>::from_shape(y.shape());
        for (std::size_t i = 0; i < a.size(); ++i) {
            a.data()[i] = rounded<O>(nd(g));
            w.data()[i] = widened<T>(a.data()[i]);
        }
        d.push_back(std::move(w));
        f.push_back(std::move(a));
    }
    return {std::move(f), std::move(d)};
}

template <class W, class S>
void check_same_gradients(const W& wide, const S& narrow)
{
    const auto a = wide.parameters();
    const auto b = narrow.parameters();
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

TEMPLATE_TEST_CASE("narrow outputs (float of double, bfloat16 of float) are the wide outputs rounded, on every inference call",
                   "[scorer][output_type]", f64_f32, f32_bf16)
{
    using T = typename TestType::value;
    using O = typename TestType::out;
    using Wide = typename TestType::wide;
    using Narrow = typename TestType::narrow;
    for (std::size_t o : {std::size_t(1), std::size_t(3)}) {
        const problem p = make_problem<T>(o, {1, 4, 0, 9, 13, 2}, 11 + static_cast<std::uint32_t>(o));
        INFO("labels " << o);
        const Wide wide(p.cfg);
        const Narrow narrow(p.cfg);  // same seed: the same parameters
        const score_list<T> Y64 = wide.predict(p.items);
        const score_list<O> Y32 = narrow.predict(p.items);
        REQUIRE(Y32.size() == Y64.size());
        for (std::size_t k = 0; k < Y32.size(); ++k) require_rounded_equal(Y32[k], Y64[k], "predict");
        std::size_t streamed = 0;
        narrow.predict_stream(p.items, [&](std::size_t k, score_view<const O> v) {
            xt::xtensor<O, 1> a = xt::xtensor<O, 1>::from_shape({v.n * v.n * v.labels});
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
        const score_list<T> H64 = wide.predict_heads(p.items, heads);
        const score_list<O> H32 = narrow.predict_heads(p.items, heads);
        for (std::size_t k = 0; k < H32.size(); ++k) require_rounded_equal(H32[k], H64[k], "predict_heads");
        // Padded: every cell, the mask included.
        const std::size_t L = 13;
        xt::xtensor<T, 3> x = xt::zeros<T>({p.lengths.size(), L, p.cfg.n_in});
        std::vector<std::int64_t> lens;
        xt::xtensor<std::int64_t, 2> hp = xt::zeros<std::int64_t>({p.lengths.size(), L});
        for (std::size_t k = 0; k < p.items.size(); ++k) {
            lens.push_back(static_cast<std::int64_t>(p.lengths[k]));
            for (std::size_t m = 0; m < p.lengths[k]; ++m) {
                for (std::size_t c = 0; c < p.cfg.n_in; ++c) x(k, m, c) = p.items[k](m, c);
                hp(k, m) = heads[k][m];
            }
        }
        require_rounded_equal(narrow.predict_padded(x, lens), wide.predict_padded(x, lens), "predict_padded");
        require_rounded_equal(narrow.predict_heads_padded(x, lens, hp), wide.predict_heads_padded(x, lens, hp),
                              "predict_heads_padded");
        // Through the whole stack, batched under a small budget.
        std::vector<xt::xtensor<T, 2>> docs{p.doc};
        std::vector<std::vector<std::size_t>> split_lengths{p.lengths};
        auto pipe32 = with_splits(with_minibatch_by_padded_size(narrow, budget::items(8)));
        auto pipe64 = with_splits(with_minibatch_by_padded_size(wide, budget::items(8)));
        const score_list<O> P32 = pipe32.predict(docs, split_lengths);
        const score_list<T> P64 = pipe64.predict(docs, split_lengths);
        for (std::size_t k = 0; k < P32.size(); ++k) require_rounded_equal(P32[k], P64[k], "with_splits predict");
        auto padded32 = with_splits(with_minibatch_by_padded_size(with_pad_seq_unpad_matrix(narrow), budget::items(8)));
        const score_list<O> Q32 = padded32.predict(docs, split_lengths);
        for (std::size_t k = 0; k < Q32.size(); ++k) require_rounded_equal(Q32[k], P64[k], "padded stack predict");
    }
}

TEMPLATE_TEST_CASE("narrow gradients into a narrow scorer: dX and parameter gradients equal the wide scorer's exactly",
                   "[scorer][output_type]", f64_f32, f32_bf16)
{
    using T = typename TestType::value;
    using O = typename TestType::out;
    using Wide = typename TestType::wide;
    using Narrow = typename TestType::narrow;
    for (const train_output to : {train_output::probabilities, train_output::logits}) {
        for (std::size_t o : {std::size_t(1), std::size_t(4)}) {
            INFO("labels " << o << (to == train_output::logits ? ", logits" : ", probabilities"));
            problem p = make_problem<T>(o, {3, 8, 1, 6}, 21 + static_cast<std::uint32_t>(o), 0.25);
            p.cfg.train_outputs = to;
            std::vector<xt::xtensor<T, 2>> docs{p.doc};
            std::vector<std::vector<std::size_t>> split_lengths{p.lengths};
            for (bool recompute : {false, true}) {
                p.cfg.recompute_in_backward = recompute;
                INFO("recompute_in_backward " << recompute);
                Wide wide(p.cfg);
                Narrow narrow(p.cfg);
                // Full scores through the batcher (dropout masks drawn alike).
                auto pipe64 = with_splits(with_minibatch_by_padded_size(wide, budget::items(6)));
                auto pipe32 = with_splits(with_minibatch_by_padded_size(narrow, budget::items(6)));
                auto [Y64, bp64] = pipe64.forward(docs, split_lengths);
                auto [Y32, bp32] = pipe32.forward(docs, split_lengths);
                for (std::size_t k = 0; k < Y32.size(); ++k) require_rounded_equal(Y32[k], Y64[k], "forward");
                const auto [g32, g64] = grads_like<T, O>(Y32, 7);
                const auto dX64 = bp64(decltype(pipe64)::grad_views(g64));
                const auto dX32 = bp32(decltype(pipe32)::grad_views(g32));
                static_assert(std::is_same<typename std::decay_t<decltype(dX32)>::value_type::value_type, T>::value,
                              "input gradients keep the value type");
                REQUIRE(dX32.size() == dX64.size());
                require_equal(dX32[0], dX64[0], "dX");
                check_same_gradients(wide, narrow);
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
                wide.zero_grad();
                narrow.zero_grad();
                auto hp64 = with_splits(with_minibatch_by_padded_size(with_pad_seq_unpad_matrix(wide), budget::items(5)));
                auto hp32 =
                    with_splits(with_minibatch_by_padded_size(with_pad_seq_unpad_matrix(narrow), budget::items(5)));
                auto [L64, lb64] = hp64.forward_heads(docs, split_lengths, doc_heads);
                auto [L32, lb32] = hp32.forward_heads(docs, split_lengths, doc_heads);
                for (std::size_t k = 0; k < L32.size(); ++k) require_rounded_equal(L32[k], L64[k], "forward_heads");
                const auto [h32, h64] = grads_like<T, O>(L32, 9);
                const auto hX64 = lb64(decltype(hp64)::head_grad_views(h64));
                const auto hX32 = lb32(decltype(hp32)::head_grad_views(h32));
                require_equal(hX32[0], hX64[0], "heads dX");
                check_same_gradients(wide, narrow);
            }
        }
    }
}

TEMPLATE_TEST_CASE("output bytes count the output type; reported scratch covers the conversion",
                   "[scorer][output_type][memory]", f64_f32, f32_bf16)
{
    using T = typename TestType::value;
    using O = typename TestType::out;
    using Wide = typename TestType::wide;
    using Narrow = typename TestType::narrow;
    for (std::size_t o : {std::size_t(1), std::size_t(4)}) {
        const problem p = make_problem<T>(o, {6, 2, 6, 5, 6}, 31);
        INFO("labels " << o);
        const Wide wide(p.cfg);
        const Narrow narrow(p.cfg);
        const std::size_t count = p.items.size(), L = 6;
        for (mode m : {mode::eval, mode::train}) {
            CHECK(narrow.cost(count, L, m).outputs == count * L * L * o * sizeof(O));
            CHECK(wide.cost(count, L, m).outputs == 2 * narrow.cost(count, L, m).outputs);
            CHECK(narrow.heads_cost(count, L, m).outputs == count * L * o * sizeof(O));
        }
        // Inference keeps nothing but its outputs (O: half the bytes of T).
        {
            const std::uint64_t before = tracker().current_bytes();
            const score_list<O> Y = narrow.predict(p.items);
            std::uint64_t cells = 0;
            for (std::size_t n : p.lengths) cells += n * n * o;
            CHECK(tracker().current_bytes() - before == cells * sizeof(O) + Y.capacity() * sizeof(score_tensor<O>));
        }
        const batch_cost c = narrow.cost(count, L, mode::eval);
        {
            // Within a scope of the reported scratch nothing else is carved.
            workspace_scope ws(c.scratch);
            scoped_peak sp;
            const memory_stats s0 = tracker().stats();
            narrow.predict_stream(p.items, [](std::size_t, score_view<const O>) {});
            CHECK(sp.work_peak_bytes() == s0.current_bytes - s0.output_bytes);
            CHECK(tracker().stats().allocations == s0.allocations);
        }
        {
            // The report is the wide scorer's with the stream buffer in
            // O and one split of T for the conversion on top, and
            // so is what the call carves (no scope: scratch from the heap):
            // the O buffer more than the wide scorer's stream.
            const std::uint64_t cells = L * L * o;
            CHECK(c.scratch == wide.cost(count, L, mode::eval).scratch + detail::scratch_bytes<O>(cells));
            const auto peak_of = [&](const auto& s, auto view_tag) {
                scoped_peak sp;
                const memory_stats s0 = tracker().stats();
                s.predict_stream(p.items, [](std::size_t, decltype(view_tag)) {});
                return sp.work_peak_bytes() - (s0.current_bytes - s0.output_bytes);
            };
            const std::uint64_t p32 = peak_of(narrow, score_view<const O>{});
            const std::uint64_t p64 = peak_of(wide, score_view<const T>{});
            CHECK(p32 == p64 + cells * sizeof(O));
        }
        {
            // Training: the backward (the backend converts dY to T one
            // split at a time) fits the reported scratch.
            Narrow t(p.cfg);
            const batch_cost ct = t.cost(count, L, mode::train);
            auto [Y, bp] = t.forward(p.items, mode::train);
            std::vector<xt::xarray<O>> g;
            std::vector<score_view<const O>> gv;
            std::vector<xt::xtensor<T, 2>> dx;
            std::vector<seq_view<T>> dxv;
            for (std::size_t k = 0; k < count; ++k) {
                g.push_back(xt::xarray<O>::from_shape(Y[k].shape()));
                for (auto& e : g.back()) e = rounded<O>(1.0f);
                dx.push_back(xt::xtensor<T, 2>::from_shape({p.lengths[k], p.cfg.n_in}));
            }
            for (std::size_t k = 0; k < count; ++k) {
                const std::size_t n = p.lengths[k];
                gv.push_back({g[k].data(), n, o, static_cast<std::ptrdiff_t>(n * o)});
                dxv.push_back({dx[k].data(), n, p.cfg.n_in, static_cast<std::ptrdiff_t>(p.cfg.n_in), 1});
            }
            workspace_scope ws(ct.scratch);
            scoped_peak sp;
            const memory_stats s0 = tracker().stats();
            bp(span<const score_view<const O>>(gv.data(), count), span<const seq_view<T>>(dxv.data(), count));
            CHECK(sp.work_peak_bytes() == s0.current_bytes - s0.output_bytes);
            CHECK(ct.heap == 0);
        }
    }
}

TEST_CASE("bfloat16 outputs of bf16 compute are the fp32 outputs of the same bf16 compute rounded",
          "[scorer][output_type][bf16]")
{
    using Narrow = scorer_with_output<float, biaffine::bfloat16>;
    for (std::size_t o : {std::size_t(1), std::size_t(3)}) {
        INFO("labels " << o);
        problem<float> p = make_problem<float>(o, {5, 1, 17, 0, 33}, 41 + static_cast<std::uint32_t>(o));
        p.cfg.precision = compute_precision::bf16;
        const biaffine_scorer<float> wide(p.cfg);
        const Narrow narrow(p.cfg);
        const score_list<float> Y = wide.predict(p.items);
        const score_list<biaffine::bfloat16> B = narrow.predict(p.items);
        REQUIRE(B.size() == Y.size());
        for (std::size_t k = 0; k < B.size(); ++k) require_rounded_equal(B[k], Y[k], "predict, bf16 compute");
        std::vector<std::vector<int>> heads;
        for (std::size_t n : p.lengths) {
            std::vector<int> h(n);
            for (std::size_t m = 0; m < n; ++m) h[m] = static_cast<int>((m * 3 + 2) % n);
            heads.push_back(std::move(h));
        }
        const score_list<float> H = wide.predict_heads(p.items, heads);
        const score_list<biaffine::bfloat16> HB = narrow.predict_heads(p.items, heads);
        for (std::size_t k = 0; k < HB.size(); ++k) require_rounded_equal(HB[k], H[k], "predict_heads, bf16 compute");
        // Half the output bytes of the fp32 outputs.
        for (mode m : {mode::eval, mode::train}) CHECK(2 * narrow.cost(5, 33, m).outputs == wide.cost(5, 33, m).outputs);
    }
}
