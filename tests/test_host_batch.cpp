// Tests for biaffine/detail/compute/host_batch.hpp: the batch-level backend
// object the scorer holds. A counting backend (the build's own backend,
// wrapped, counting prepare calls) in a scorer shows that prepare runs
// again exactly when the parameter version moves (set_parameter, load_npy,
// non-const parameters(), initialize, parameters_changed) and at no other
// call, and that its scores, dX and gradients are the wrapped backend's,
// byte for byte. Device bytes: 0 on the CPU backends, and what a backend
// reports is summed into the cost. A backend whose batch is indices into its
// own arena (tests/arena_backend.hpp) gives the host backend's bytes on every
// training path (kept or recomputed activations, dropout, probabilities or
// logits, labels at given heads) and gets back every slot it handed out.
#include <catch2/catch.hpp>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include <xtensor/xtensor.hpp>

#include "biaffine/biaffine.hpp"
#include "biaffine/detail/compute/host_batch.hpp"
#include "biaffine/detail/compute/interface.hpp"
#include "arena_backend.hpp"

using namespace biaffine;

namespace {

// The build's backend for T, counting prepare() calls and the versions they
// carried; `device` is what it reports as device bytes per batch.
template <class T>
struct counting_backend : detail::scorer_backend<T> {
    using base = detail::scorer_backend<T>;
    using base::base;
    std::size_t prepares = 0;
    std::vector<std::uint64_t> versions;
    std::uint64_t device = 0;
    void prepare(std::uint64_t version, const detail::weights_ref<T>& w)
    {
        ++prepares;
        versions.push_back(version);
        base::prepare(version, w);
    }
    std::uint64_t device_bytes(std::size_t, std::size_t, mode) const noexcept { return device; }
};
static_assert(detail::check_backend<counting_backend<float>, float>());
static_assert(detail::check_backend<counting_backend<double>, double>());

template <class T>
using counting_scorer = biaffine_scorer<T, counting_backend<T>>;

scorer_config small_config(std::size_t labels, double dropout = 0.0)
{
    scorer_config c;
    c.n_in = 12;
    c.hidden = 7;
    c.labels = labels;
    c.dropout = dropout;
    c.seed = 11;
    return c;
}

template <class T>
struct inputs {
    std::vector<xt::xtensor<T, 2>> data;
    std::vector<seq_view<const T>> views;
    inputs(std::size_t n_in, std::vector<std::size_t> lengths, unsigned seed)
    {
        std::mt19937 rng(seed);
        std::uniform_real_distribution<double> u(-1.0, 1.0);
        for (std::size_t n : lengths) {
            xt::xtensor<T, 2> x = xt::xtensor<T, 2>::from_shape({n, n_in});
            for (auto& e : x) e = static_cast<T>(u(rng));
            data.push_back(std::move(x));
        }
        for (const auto& x : data) views.push_back(as_const_view(x));
    }
};

template <class A, class B>
bool same_bytes(const A& a, const B& b)
{
    // memcmp may not see a null pointer, even for zero bytes (UBSan).
    return a.size() == b.size() && (a.size() == 0 || std::memcmp(a.data(), b.data(), a.size() * sizeof(*a.data())) == 0);
}

// Outputs, dX and every parameter gradient of one training step through
// `forward(s)` (gradient of the outputs: their own values, as views
// `as_grad(y)`, so every element contributes).
template <class S, class Forward, class AsGrad>
std::vector<std::vector<typename S::value_type>> step(S& s, const inputs<typename S::value_type>& in,
                                                      Forward&& forward, AsGrad&& as_grad)
{
    using T = typename S::value_type;
    s.zero_grad();
    auto fw = forward(s);
    std::vector<decltype(as_grad(fw.first[0]))> g;
    for (const auto& y : fw.first) g.push_back(as_grad(y));
    std::vector<xt::xtensor<T, 2>> dx;
    std::vector<seq_view<T>> dxv;
    for (const auto& x : in.data) dx.push_back(xt::xtensor<T, 2>::from_shape(x.shape()));
    for (auto& d : dx) dxv.push_back(as_view(d));
    fw.second(span<const typename decltype(g)::value_type>(g.data(), g.size()),
              span<const seq_view<T>>(dxv.data(), dxv.size()));
    std::vector<std::vector<T>> out;
    for (const auto& y : fw.first) out.emplace_back(y.begin(), y.end());
    for (const auto& d : dx) out.emplace_back(d.begin(), d.end());
    for (const auto& p : std::as_const(s).parameters()) out.emplace_back(p.grad, p.grad + p.size);
    return out;
}

// Full scores, one training step.
template <class S>
std::vector<std::vector<typename S::value_type>> train_step(S& s, const inputs<typename S::value_type>& in)
{
    return step(
        s, in, [&](S& t) { return t.forward(in.views, mode::train); },
        [](const auto& y) { return as_score_view(y); });
}

template <class S>
std::vector<std::vector<typename S::value_type>> scores_of(const S& s, const inputs<typename S::value_type>& in)
{
    std::vector<std::vector<typename S::value_type>> out;
    for (const auto& y : s.predict(in.views)) out.emplace_back(y.begin(), y.end());
    return out;
}

template <class V>
bool same_lists(const V& a, const V& b)
{
    if (a.size() != b.size()) return false;
    for (std::size_t i = 0; i < a.size(); ++i) {
        if (!same_bytes(a[i], b[i])) return false;
    }
    return true;
}

}  // namespace

TEST_CASE("host_batch holds no weights until prepared, then the ones it was given", "[host_batch]")
{
    const detail::scorer_dims d{12, 7, 3, true, true, false};
    detail::scorer_backend<float> b(d);
    CHECK(b.prepared_version() == 0);
    CHECK(b.weights().w == nullptr);
    std::vector<float> wh(84), bh(7), wd(84), bd(7), w(3 * 8 * 8);
    b.prepare(4, {wh.data(), bh.data(), wd.data(), bd.data(), w.data()});
    CHECK(b.prepared_version() == 4);
    CHECK(b.weights().wh == wh.data());
    CHECK(b.weights().w == w.data());
    // A copy belongs to other parameters: unprepared.
    const detail::scorer_backend<float> c(b);
    CHECK(c.prepared_version() == 0);
    CHECK(c.weights().w == nullptr);
    CHECK(b.device_bytes(10, 50, mode::train) == 0);
}

TEST_CASE("the scorer prepares its backend again exactly when the parameter version changes", "[host_batch]")
{
    counting_scorer<float> s(small_config(3));
    const inputs<float> in(12, {5, 0, 3, 8}, 1);
    const auto& be = s.compute_backend();
    CHECK(s.parameter_version() == 1);  // initialize() in the constructor
    CHECK(be.prepares == 0);            // nothing until the first call that computes

    std::size_t expected = 0;
    auto calls_leave_it = [&](const char* what) {
        INFO(what);
        (void)s.predict(in.views);
        s.predict_stream(in.views, [](std::size_t, score_view<const float>) {});
        (void)s.cost(4, 8, mode::train);
        (void)s.padded_cost(4, 8, mode::eval);
        (void)std::as_const(s).parameters();
        (void)s.head_weight();
        (void)s.d_head_weight();
        s.zero_grad();
        auto fw = s.forward(in.views, mode::eval);
        (void)fw;
        CHECK(be.prepares == expected);
        CHECK(be.prepared_version() == s.parameter_version());
        CHECK(be.versions.back() == s.parameter_version());
    };
    auto change = [&](const char* what, auto&& f) {
        INFO(what);
        const std::uint64_t before = s.parameter_version();
        f();
        CHECK(s.parameter_version() > before);
        CHECK(be.prepares == expected);  // not yet: at the next call that computes
        (void)s.predict(in.views);
        ++expected;
        CHECK(be.prepares == expected);
        CHECK(be.versions.back() == s.parameter_version());
        calls_leave_it(what);
    };

    (void)s.predict(in.views);
    expected = 1;
    calls_leave_it("first predict");
    CHECK(be.weights().wh == s.head_weight().data());
    CHECK(be.weights().w == s.bilinear_weight().data());

    // A training step: forward and its backward use the prepared weights.
    (void)train_step(s, in);
    CHECK(be.prepares == expected);

    change("set_parameter", [&] { s.set_parameter("head_bias", xt::xtensor<float, 1>::from_shape({7}) * 0.0f + 0.5f); });
    change("non-const parameters()", [&] {
        for (auto& p : s.parameters()) p.data[0] += 0.25f;  // an optimiser step
    });
    change("initialize", [&] { s.initialize(99); });
    change("parameters_changed", [&] { s.parameters_changed(); });

    const auto dir = std::filesystem::temp_directory_path() / "biaffine_host_batch_npy";
    std::filesystem::create_directories(dir);
    save_npy(s, dir.string());  // const: no change
    CHECK(be.prepares == expected);
    change("load_npy", [&] { load_npy(s, dir.string()); });
    std::filesystem::remove_all(dir);

    // Several changes before a call: one prepare.
    const std::uint64_t v0 = s.parameter_version();
    s.set_parameter("dependent_bias", xt::xtensor<float, 1>::from_shape({7}) * 0.0f + 0.125f);
    s.initialize(5);
    CHECK(s.parameter_version() >= v0 + 2);
    (void)s.predict(in.views);
    CHECK(be.prepares == expected + 1);
}

TEST_CASE("a counting backend's scores, dX and gradients are the wrapped backend's, byte for byte", "[host_batch]")
{
    for (std::size_t labels : {std::size_t(1), std::size_t(4)}) {
        INFO("labels " << labels);
        const scorer_config cfg = small_config(labels, 0.25);
        biaffine_scorer<double> plain(cfg);
        counting_scorer<double> counted(cfg);
        const inputs<double> in(12, {6, 1, 0, 9, 4}, 2);
        CHECK(same_lists(scores_of(plain, in), scores_of(counted, in)));
        CHECK(same_lists(train_step(plain, in), train_step(counted, in)));
        // After a change through set_parameter, both see the new values.
        const auto before = scores_of(counted, in);
        auto w = xt::xtensor<double, 3>::from_shape({labels, 8, 8});
        for (std::size_t i = 0; i < w.size(); ++i) w.data()[i] = 0.01 * static_cast<double>(i % 17) - 0.05;
        plain.set_parameter("bilinear_weight", w);
        counted.set_parameter("bilinear_weight", w);
        const auto after = scores_of(counted, in);
        CHECK_FALSE(same_lists(before, after));
        CHECK(same_lists(scores_of(plain, in), after));
        CHECK(same_lists(train_step(plain, in), train_step(counted, in)));
    }
}

namespace {

// Labels at given heads, one training step.
template <class S>
std::vector<std::vector<typename S::value_type>> heads_step(S& s, const inputs<typename S::value_type>& in,
                                                            const std::vector<std::vector<std::size_t>>& heads)
{
    return step(
        s, in, [&](S& t) { return t.forward_heads(in.views, heads, mode::train); },
        [](const auto& y) { return as_const_view(y); });
}

template <class T>
void check_arena_backend()
{
    using counts = arena_test::arena_counts<T>;
    static_assert(detail::check_backend<arena_test::arena_backend<T>, T>());
    const inputs<T> in(12, {6, 1, 0, 9, 4}, 5);
    const std::vector<std::vector<std::size_t>> heads{{0, 0, 1, 5, 2, 3}, {0}, {}, {1, 0, 8, 8, 2, 4, 6, 7, 0}, {3, 0, 1, 2}};
    for (std::size_t labels : {std::size_t(1), std::size_t(3)}) {
        for (bool recompute : {false, true}) {
            for (train_output outputs : {train_output::probabilities, train_output::logits}) {
                INFO("labels " << labels << ", recompute " << recompute << ", logits "
                               << (outputs == train_output::logits));
                scorer_config cfg = small_config(labels, 0.25);
                cfg.recompute_in_backward = recompute;
                cfg.train_outputs = outputs;
                biaffine_scorer<T> host(cfg);
                biaffine_scorer<T, arena_test::arena_backend<T>> arena(cfg);
                const std::size_t before = counts::allocated;
                CHECK(same_lists(scores_of(host, in), scores_of(arena, in)));
                CHECK(same_lists(train_step(host, in), train_step(arena, in)));
                CHECK(same_lists(heads_step(host, in, heads), heads_step(arena, in, heads)));
                // Training went through the arena (U, V, T at least, twice
                // when recomputing), and every slot came back.
                CHECK(counts::allocated - before >= (recompute ? 12u : 6u));
                CHECK(counts::live == 0);
            }
        }
    }
}

}  // namespace

TEST_CASE("a backend whose batch is indices into its own arena gives the host backend's bytes", "[host_batch]")
{
    check_arena_backend<float>();
    check_arena_backend<double>();
}

TEST_CASE("a copied scorer's backend reads the copy's parameters, not the original's", "[host_batch]")
{
    biaffine_scorer<float> a(small_config(2));
    const inputs<float> in(12, {4, 7}, 3);
    const auto a_scores = scores_of(a, in);  // a's backend prepared with a's weights
    biaffine_scorer<float> b(a);
    CHECK(b.compute_backend().prepared_version() == 0);
    a.initialize(1234);  // a changes; b must keep scoring with its own copy
    CHECK(same_lists(scores_of(b, in), a_scores));
    CHECK(b.compute_backend().weights().wh == b.head_weight().data());
    CHECK_FALSE(same_lists(scores_of(a, in), a_scores));
}

TEST_CASE("device bytes: 0 on the CPU backends, and summed into the cost like the others", "[host_batch]")
{
    biaffine_scorer<float> s(small_config(3));
    for (mode m : {mode::eval, mode::train}) {
        CHECK(s.cost(5, 40, m).device == 0);
        CHECK(s.padded_cost(5, 40, m).device == 0);
        CHECK(s.heads_cost(5, 40, m).device == 0);
        CHECK(s.compute_backend().device_bytes(5, 40, m) == 0);
    }
    counting_scorer<float> d(small_config(3));
    // compute_backend() is const; the test's backend reports what it is told.
    const_cast<counting_backend<float>&>(d.compute_backend()).device = 1000;
    for (mode m : {mode::eval, mode::train}) {
        const batch_cost host = s.cost(5, 40, m), dev = d.cost(5, 40, m);
        CHECK(dev.device == 1000);
        CHECK(dev.total() == host.total() + 1000);
        CHECK(d.padded_cost(5, 40, m).device == 1000);
        CHECK(d.heads_cost(5, 40, m).total() == s.heads_cost(5, 40, m).total() + 1000);
    }
    batch_cost c;
    c.scratch = 1;
    c.heap = 2;
    c.saved = 4;
    c.outputs = 8;
    c.device = 16;
    CHECK(c.total() == 31);
}

namespace {

// A Packed whose pack throws while `fail` is set (an allocation that fails
// mid-repack); it records the first weight it packed.
struct failing_pack {
    static constexpr bool copies = true;
    static inline bool fail = false;
    float first = 0.0f;
    void reserve(const biaffine::detail::scorer_dims&) noexcept {}
    void pack(const biaffine::detail::scorer_dims&, const biaffine::detail::weights_ref<float>& w)
    {
        if (fail) throw std::bad_alloc();
        first = w.w[0];
    }
};

}  // namespace

TEST_CASE("weights_cache: a repack that throws leaves a stale entry, never none, and the next call packs again",
          "[host_batch]")
{
    biaffine::detail::scorer_dims d;
    d.n_in = 2;
    d.hidden = 1;
    std::vector<float> wh(2, 0.5f), bh(1, 0.25f), wd(2, -0.5f), bd(1, 0.0f), w(d.hu() * d.hv(), 1.0f);
    const biaffine::detail::weights_ref<float> ref{wh.data(), bh.data(), wd.data(), bd.data(), w.data()};
    biaffine::detail::weights_cache<float, failing_pack> cache(d);
    CHECK(cache.acquire(1, d, ref)->version == 1);  // its handle dropped: the next repack is in place
    w[0] = 2.0f;
    failing_pack::fail = true;
    CHECK_THROWS_AS(cache.acquire(2, d, ref), std::bad_alloc);
    failing_pack::fail = false;
    const auto stale = cache.current();
    REQUIRE(stale != nullptr);
    CHECK(stale->version == 0);
    CHECK(cache.prepared() == 0);
    const auto fresh = cache.acquire(2, d, ref);
    CHECK(fresh->version == 2);
    CHECK(fresh->packed.first == 2.0f);
}
