// Tests of a float scorer's inference in bf16 (compute_precision::bf16,
// detail/scorer/bf16.hpp): every inference call against a double reference
// within the bound of bf16's rounding (bf16_reference.hpp), the calls against
// each other, the memory it reports against what it takes, concurrent calls
// against one call (issue 47), and what it refuses.
#include <catch2/catch.hpp>

#include <biaffine/biaffine.hpp>

#include "bf16_reference.hpp"
#include "bf16_scorer.hpp"
#include "test_scale.hpp"

#include <atomic>
#include <cmath>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

using namespace biaffine;
using bf16_test::bf16_reference;
using bf16_test::items_of;
using bf16_test::make_problem;
using bf16_test::problem;

namespace {

biaffine_scorer<float> scorer_of(const problem& p, compute_precision prec)
{
    scorer_config cfg = bf16_test::config_of(p);
    cfg.precision = prec;
    return bf16_test::scorer_of(p, cfg);
}

std::vector<std::vector<int>> heads_of(const problem& p)
{
    std::vector<std::vector<int>> H;
    std::uint32_t state = 12345;
    for (std::size_t n : p.lengths) {
        H.emplace_back(n);
        for (auto& h : H.back()) {
            state = state * 1103515245u + 12345u;
            h = static_cast<int>((state >> 8) % n);
        }
    }
    return H;
}

std::vector<problem> cases()
{
    return {
        make_problem(48, 24, 1, true, true, {6, 1, 19, 0, 33, 12}, 11),
        make_problem(31, 17, 4, true, false, {9, 14, 3}, 12),
        make_problem(256, 128, 3, true, true, {25, 40, 7}, 13),
    };
}

}  // namespace

TEST_CASE("bf16 inference: predict and predict_heads within the bound of bf16 rounding", "[scorer_bf16]")
{
    for (const problem& p : cases()) {
        const auto s = scorer_of(p, compute_precision::bf16);
        const auto items = items_of(p);
        const auto H = heads_of(p);
        const score_list<float> Y = s.predict(items);
        const score_list<float> L = s.predict_heads(items, H);
        const std::size_t o = p.d.labels;
        std::size_t out = 0, checked = 0;
        for (std::size_t k = 0; k < p.lengths.size(); ++k) {
            const auto ref = bf16_reference(p, k, true, std::ldexp(1.0, -8));
            const std::size_t n = p.lengths[k];
            REQUIRE(Y[k].size() == n * n * o);
            for (std::size_t i = 0; i < n * n * o; ++i, ++checked)
                out += std::fabs(double(Y[k].data()[i]) - ref.s[i]) > ref.bound[i] ? 1 : 0;
            for (std::size_t m = 0; m < n; ++m)
                for (std::size_t l = 0; l < o; ++l, ++checked) {
                    const std::size_t i = (m * n + static_cast<std::size_t>(H[k][m])) * o + l;
                    out += std::fabs(double(L[k].data()[m * o + l]) - ref.s[i]) > ref.bound[i] ? 1 : 0;
                }
        }
        INFO(checked << " values");
        CHECK(checked > 0);
        CHECK(out == 0);
    }
}

TEST_CASE("bf16 inference: the fp32 default is not it, and bf16 moves scores by bf16's rounding only",
          "[scorer_bf16]")
{
    // The same weights in fp32 and bf16: they differ (bf16 rounds), by no
    // more than the bf16 bound around the exact scores plus fp32's.
    const problem p = cases()[2];
    const auto s32 = scorer_of(p, compute_precision::fp32);
    const auto s16 = scorer_of(p, compute_precision::bf16);
    const auto items = items_of(p);
    const score_list<float> a = s32.predict(items), b = s16.predict(items);
    std::size_t differ = 0, out = 0;
    for (std::size_t k = 0; k < items.size(); ++k) {
        const auto r16 = bf16_reference(p, k, true, std::ldexp(1.0, -8));
        const auto r32 = bf16_reference(p, k, false, std::ldexp(1.0, -24));
        for (std::size_t i = 0; i < a[k].size(); ++i) {
            differ += a[k].data()[i] != b[k].data()[i] ? 1 : 0;
            // |b - a| <= |b - r16| + |r16 - exact| + |exact - a|: bf16's
            // bound, the operands' rounding (the two references in double),
            // fp32's bound.
            const double allowed = r16.bound[i] + std::fabs(r16.s[i] - r32.s[i]) + r32.bound[i];
            out += std::fabs(double(a[k].data()[i]) - double(b[k].data()[i])) > allowed ? 1 : 0;
        }
    }
    CHECK(differ > 0);
    CHECK(out == 0);
}

TEST_CASE("bf16 inference: streams, padded calls and split lists give the same bytes", "[scorer_bf16]")
{
    for (const problem& p : cases()) {
        const auto s = scorer_of(p, compute_precision::bf16);
        const auto items = items_of(p);
        const auto H = heads_of(p);
        const score_list<float> Y = s.predict(items);
        const score_list<float> L = s.predict_heads(items, H);
        std::size_t calls = 0;
        s.predict_stream(items, [&](std::size_t k, score_view<const float> v) {
            ++calls;
            REQUIRE(v.n == p.lengths[k]);
            for (std::size_t m = 0; m < v.n; ++m)
                for (std::size_t j = 0; j < v.n * v.labels; ++j)
                    CHECK(v.data[static_cast<std::ptrdiff_t>(m) * v.row_stride + static_cast<std::ptrdiff_t>(j)] ==
                          Y[k].data()[m * v.n * v.labels + j]);
        });
        CHECK(calls == items.size());
        s.predict_heads_stream(items, H, [&](std::size_t k, seq_view<const float> v) {
            for (std::size_t m = 0; m < v.rows; ++m)
                for (std::size_t l = 0; l < v.cols; ++l) CHECK(v(m, l) == L[k].data()[m * v.cols + l]);
        });
        // Padded: [b, L, n_in] with the lengths; the cells inside each
        // sequence are the split's scores (padding aside, the same batch).
        std::size_t Lmax = 0;
        for (std::size_t n : p.lengths) Lmax = std::max(Lmax, n);
        xt::xtensor<float, 3> x = xt::zeros<float>({p.lengths.size(), Lmax, p.d.n_in});
        for (std::size_t k = 0; k < p.lengths.size(); ++k)
            for (std::size_t i = 0; i < p.lengths[k] * p.d.n_in; ++i) x(k, i / p.d.n_in, i % p.d.n_in) = p.x[k][i];
        xt::xtensor<std::size_t, 1> lens = xt::adapt(p.lengths, {p.lengths.size()});
        const auto P = s.predict_padded(x, lens);
        const std::size_t o = p.d.labels;
        for (std::size_t k = 0; k < p.lengths.size(); ++k) {
            const std::size_t n = p.lengths[k];
            for (std::size_t m = 0; m < n; ++m)
                for (std::size_t j = 0; j < n; ++j)
                    for (std::size_t l = 0; l < o; ++l) {
                        const float padded = o == 1 ? P(k, m, j) : P(k, m, j, l);
                        CHECK(padded == Y[k].data()[(m * n + j) * o + l]);
                    }
        }
    }
}

TEST_CASE("bf16 inference: the cost it reports is what it takes", "[scorer_bf16]")
{
    // Splits of one length, so that cost(count, L) is the batch exactly: the
    // scratch all carved from a workspace of cost().scratch, nothing else
    // (the packed weights are the scorer's, made with it).
    const problem p = make_problem(40, 20, 3, true, true, {15, 15, 15, 15}, 21);
    const auto s = scorer_of(p, compute_precision::bf16);
    const auto items = items_of(p);
    const auto H = heads_of(p);
    const std::size_t L = 15, count = items.size();
    for (bool heads : {false, true}) {
        INFO((heads ? "predict_heads_stream" : "predict_stream"));
        const batch_cost c = heads ? s.heads_cost(count, L, mode::eval) : s.cost(count, L, mode::eval);
        CHECK(c.heap == 0);
        workspace_scope ws(c.scratch);
        scoped_peak sp;
        const memory_stats s0 = tracker().stats();
        if (heads) {
            s.predict_heads_stream(items, H, [](std::size_t, seq_view<const float>) {});
        } else {
            s.predict_stream(items, [](std::size_t, score_view<const float>) {});
        }
        CHECK(sp.work_peak_bytes() == s0.current_bytes - s0.output_bytes);
        CHECK(tracker().stats().output_bytes == s0.output_bytes);
    }
    // The bf16 copy of the weights (one pack for inference and training, in
    // the backend) is allocated with the scorer: what a bf16 scorer holds
    // beyond an fp32 one is exactly its size.
    scorer_config cfg;
    cfg.n_in = p.d.n_in;
    cfg.hidden = p.d.hidden;
    cfg.labels = p.d.labels;
    const std::uint64_t b0 = tracker().current_bytes();
    std::uint64_t fp32_bytes = 0;
    {
        biaffine_scorer<float> a(cfg);
        fp32_bytes = tracker().current_bytes() - b0;
    }
    cfg.precision = compute_precision::bf16;
    biaffine_scorer<float> b(cfg);
    const biaffine::detail::scorer_dims d{cfg.n_in, cfg.hidden, cfg.labels, cfg.bias_u, cfg.bias_v, true};
    CHECK(tracker().current_bytes() - b0 - fp32_bytes == biaffine::detail::scorer_bf16_weights::bytes(d));
}

TEST_CASE("bf16 inference: the packed weights follow every parameter change", "[scorer_bf16]")
{
    // A scorer whose weights change after it has scored (set_parameter,
    // load through parameters(), initialize) scores as a new scorer made
    // with the new weights: its packed copy never goes stale.
    const problem p = cases()[1], q = make_problem(31, 17, 4, true, false, {9, 14, 3}, 99);
    const auto items = items_of(p);
    auto s = scorer_of(p, compute_precision::bf16);
    const auto fresh = scorer_of(q, compute_precision::bf16);
    const score_list<float> want = fresh.predict(items);
    const auto same = [&](const score_list<float>& y) {
        for (std::size_t k = 0; k < y.size(); ++k)
            for (std::size_t i = 0; i < y[k].size(); ++i)
                if (y[k].data()[i] != want[k].data()[i]) return false;
        return true;
    };
    CHECK(!same(s.predict(items)));  // p's weights, packed
    s.set_parameter("head_weight", xt::xarray<float>(xt::adapt(q.wh, {q.d.hidden, q.d.n_in})));
    s.set_parameter("head_bias", xt::xarray<float>(xt::adapt(q.bh, {q.d.hidden})));
    s.set_parameter("dependent_weight", xt::xarray<float>(xt::adapt(q.wd, {q.d.hidden, q.d.n_in})));
    s.set_parameter("dependent_bias", xt::xarray<float>(xt::adapt(q.bd, {q.d.hidden})));
    CHECK(!same(s.predict(items)));  // W still p's
    auto params = s.parameters();    // an optimiser's way in
    std::copy(q.w.begin(), q.w.end(), params[4].data);
    CHECK(same(s.predict(items)));
    s.initialize(5);
    CHECK(!same(s.predict(items)));
    biaffine_scorer<float> copy = fresh;  // a copy packs its own
    CHECK(same(copy.predict(items)));
}

TEST_CASE("bf16 inference: what it refuses", "[scorer_bf16]")
{
    scorer_config cfg;
    cfg.n_in = 8;
    cfg.hidden = 4;
    cfg.precision = compute_precision::bf16;
    try {
        biaffine_scorer<double> d(cfg);
        FAIL("a double scorer took compute_precision::bf16");
    } catch (const error& e) {
        CHECK(std::string(e.what()).find("needs a float scorer") != std::string::npos);
    }
    // A float backend without bf16 products would compute in fp32 unasked.
    using fp32_only = detail::host_batch<detail::compute_backend<float>, float>;
    static_assert(!detail::backend_runs_bf16<fp32_only>::value, "host_batch on fp32 products does not run bf16");
    static_assert(detail::backend_runs_bf16<detail::scorer_backend<float>>::value, "the default float backend does");
    try {
        biaffine_scorer<float, fp32_only> f(cfg);
        FAIL("a float scorer on fp32-only products took compute_precision::bf16");
    } catch (const error& e) {
        CHECK(std::string(e.what()).find("needs a backend that computes in bf16") != std::string::npos);
    }
    cfg.precision = compute_precision::fp32;
    CHECK_NOTHROW(biaffine_scorer<float, fp32_only>(cfg));
    cfg.precision = compute_precision::bf16;
    biaffine_scorer<float> s(cfg);
    const std::vector<float> x(3 * 7, 0.5f);
    const std::vector<seq_view<const float>> bad{{x.data(), 3, 7, 7, 1}};
    CHECK_THROWS_AS(s.predict(bad), shape_error);  // the same checks as fp32, before any bf16 work
    const std::vector<float> ok(3 * 8, 0.5f);
    const std::vector<seq_view<const float>> items{{ok.data(), 3, 8, 8, 1}};
    const std::vector<std::vector<int>> H{{0, 5, 1}};
    CHECK_THROWS_AS(s.predict_heads(items, H), head_error);
}

namespace {

// One call's outputs as bytes: predict, predict_heads and predict_stream.
struct outputs {
    std::vector<float> scores, heads, stream;
    bool operator==(const outputs& o) const { return scores == o.scores && heads == o.heads && stream == o.stream; }
};

std::vector<float> flat(const score_list<float>& y)
{
    std::vector<float> out;
    for (const auto& a : y) out.insert(out.end(), a.data(), a.data() + a.size());
    return out;
}

outputs call_once(const biaffine_scorer<float>& s, const std::vector<seq_view<const float>>& items,
                  const std::vector<std::vector<int>>& H, int which)
{
    outputs r;
    if (which == 0) r.scores = flat(s.predict(items));
    if (which == 1) r.heads = flat(s.predict_heads(items, H));
    if (which == 2) {
        s.predict_stream(items, [&](std::size_t, score_view<const float> v) {
            for (std::size_t m = 0; m < v.n; ++m) {
                const float* row = v.data + static_cast<std::ptrdiff_t>(m) * v.row_stride;
                r.stream.insert(r.stream.end(), row, row + v.n * v.labels);
            }
        });
    }
    return r;
}

}  // namespace

TEST_CASE("bf16 inference: concurrent calls give one call's bytes, across parameter changes", "[scorer_bf16]")
{
    // Issue 47: the packed copy was rewritten in place by whichever call saw
    // the version move, while other calls read it (from Python, every call
    // moved it): wrong scores in a few percent of calls. Threads x calls of
    // every kind on one scorer, with parameters_changed() from another
    // thread throughout (the calls see the version move under them) and the
    // weights changed between rounds; every call's bytes equal a
    // single-thread run of a copy of the scorer (its own packed copy).
    // Weights large beside the tokens (16 labels): packing takes a good share
    // of a call, as in the Python case of the issue.
    const problem p = make_problem(64, 96, 16, true, true, {30, 7, 45, 19, 38, 12}, 31);
    auto s = scorer_of(p, compute_precision::bf16);
    const auto items = items_of(p);
    const auto H = heads_of(p);
    // Calls per thread scaled by BIAFFINE_TEST_SCALE (6 under the sanitizers,
    // where 24 took 55 s at -O0).
    constexpr int threads = 4, rounds = 3;
    const int calls = biaffine_test::scaled(24);
    for (int round = 0; round < rounds; ++round) {
        INFO("round " << round);
        if (round > 0) {  // between rounds, not concurrently: new weights
            auto params = s.parameters();
            for (std::size_t i = 0; i < params[4].size; ++i) params[4].data[i] *= -0.75f;
            s.parameters_changed();
        }
        const biaffine_scorer<float> ref = s;
        const outputs want[3] = {call_once(ref, items, H, 0), call_once(ref, items, H, 1), call_once(ref, items, H, 2)};
        if (round > 0) CHECK(!(want[0].scores == flat(scorer_of(p, compute_precision::bf16).predict(items))));
        std::atomic<int> running{threads}, wrong{0};
        std::atomic<std::uint64_t> bumps{0};
        std::vector<std::thread> pool;
        for (int t = 0; t < threads; ++t)
            pool.emplace_back([&, t] {
                for (int c = 0; c < calls; ++c) {
                    const int which = (t + c) % 3;
                    if (!(call_once(s, items, H, which) == want[which])) ++wrong;
                }
                --running;
            });
        // Marks the parameters changed while the calls run (the values stay):
        // each call sees a version that another call may already be packing.
        std::thread bumper([&] {
            while (running.load() > 0) {
                s.parameters_changed();
                ++bumps;
                std::this_thread::yield();
            }
        });
        for (auto& th : pool) th.join();
        bumper.join();
        CHECK(bumps.load() > 0);
        CHECK(wrong.load() == 0);
    }
}

TEST_CASE("bf16 inference: a call keeps the packed copy it started with; a newer one costs one pack more",
          "[scorer_bf16]")
{
    // Two groups of rows (more rows than group_rows), so the stream's second
    // group is projected after its first callbacks ran. In the first
    // callback the weights change and a nested predict packs them: the
    // stream in flight still scores with the pack it took (in place
    // repacking rewrote it under the call), and while it holds that pack
    // the scorer holds exactly one pack more (bf16_weights::bytes), freed when the
    // stream returns.
    using F = biaffine::detail::scorer_bf16_forward;
    const biaffine::detail::scorer_dims d{96, 64, 3, true, true, true};
    const std::vector<std::size_t> lengths(F::group_rows(d) / 100 + 2, 100);
    const problem p = make_problem(96, 64, 3, true, true, lengths, 32);
    REQUIRE(F::group_rows(d) < 100 * lengths.size() - 100);
    auto s = scorer_of(p, compute_precision::bf16);
    const auto items = items_of(p);
    const std::vector<std::vector<int>> H;
    const outputs want = call_once(biaffine_scorer<float>(s), items, H, 2);
    (void)s.predict(items);  // the current pack made
    outputs got;
    std::uint64_t extra = 0;
    const std::uint64_t before = tracker().current_bytes();
    s.predict_stream(items, [&](std::size_t k, score_view<const float> v) {
        if (k == 0) {
            auto params = s.parameters();
            for (std::size_t i = 0; i < params[0].size; ++i) params[0].data[i] *= 2.0f;
            const std::uint64_t at = tracker().current_bytes();
            (void)s.predict(items);
            extra = tracker().current_bytes() - at;
        }
        for (std::size_t m = 0; m < v.n; ++m) {
            const float* row = v.data + static_cast<std::ptrdiff_t>(m) * v.row_stride;
            got.stream.insert(got.stream.end(), row, row + v.n * v.labels);
        }
    });
    CHECK(got == want);
    CHECK(extra == biaffine::detail::scorer_bf16_weights::bytes(d));
    CHECK(tracker().current_bytes() == before);  // the old pack freed with the call
    // Between calls a change repacks the pack's own buffers: nothing more held.
    s.parameters_changed();
    (void)s.predict(items);
    CHECK(tracker().current_bytes() == before);
}

TEST_CASE("bf16 inference: watch_parameter_writes sees writes made without parameters_changed()", "[scorer_bf16]")
{
    // The Python module's way (numpy views written by optimisers): with
    // watching on, a write through a kept pointer reaches the next call
    // with no parameters_changed(); without it the copy stays (the C++
    // contract: call parameters_changed()). Watching holds an fp32 copy of
    // the weights with the pack, counted by the tracker.
    const problem p = cases()[1], q = make_problem(31, 17, 4, true, false, {9, 14, 3}, 99);
    const auto items = items_of(p);
    auto s = scorer_of(p, compute_precision::bf16);
    const auto want_p = flat(s.predict(items));
    const auto want_q = flat(scorer_of(q, compute_precision::bf16).predict(items));
    REQUIRE(want_p != want_q);
    auto params = s.parameters();  // kept pointers
    const std::vector<float>* src[] = {&q.wh, &q.bh, &q.wd, &q.bd, &q.w};
    const std::uint64_t held = tracker().current_bytes();
    s.watch_parameter_writes();
    CHECK(flat(s.predict(items)) == want_p);  // nothing written yet
    std::size_t weights = 0;
    for (const auto& par : params) weights += par.size;
    CHECK(tracker().current_bytes() - held == weights * sizeof(float));  // the fp32 copy
    for (std::size_t i = 0; i < 5; ++i) std::copy(src[i]->begin(), src[i]->end(), params[i].data);
    CHECK(flat(s.predict(items)) == want_q);
    // One element of one parameter, the last of W: seen too.
    params[4].data[params[4].size - 1] += 1.0f;
    CHECK(flat(s.predict(items)) != want_q);
    params[4].data[params[4].size - 1] -= 1.0f;
    CHECK(flat(s.predict(items)) == want_q);
    s.watch_parameter_writes(false);
    params[0].data[0] += 1.0f;
    CHECK(flat(s.predict(items)) == want_q);  // not watching: the pack of this version stays
    s.parameters_changed();
    CHECK(flat(s.predict(items)) != want_q);
}

TEST_CASE("bf16 inference: bf16_arithmetic names the arithmetic the build chose", "[scorer_bf16]")
{
    // The build's rule (detail/compute/backend.hpp): AMX tiles where the
    // target has them (VDPBF16PS when Linux withholds the tiles), else
    // VDPBF16PS where the target has it, else the fp32 kernels; each name
    // is followed by how, in parentheses.
    const std::string name = biaffine_scorer<float>::bf16_arithmetic();
    const auto starts = [&](const std::string& prefix) { return name.compare(0, prefix.size(), prefix) == 0; };
#if BIAFFINE_DETAIL_AMX_BF16
    CHECK((starts("amx_bf16 (") || starts("avx512_bf16 (")));
#elif BIAFFINE_DETAIL_BF16_GEMM
    CHECK(starts("avx512_bf16 ("));
#else
    CHECK(starts("emulated ("));
#endif
    CHECK(name.back() == ')');
    const std::string none = biaffine_scorer<double>::bf16_arithmetic();
    CHECK(none.compare(0, 6, "none (") == 0);
}
