// tests/test_hardening.cpp - exception safety under injected allocation
// failure, NaN / Inf isolation between splits, concurrent inference.
//
// Allocation failure is injected through the tracker's hard limit: for
// k = 0, 1, 2, ... bytes above what is alive at the call, every tracked
// allocation that would cross the limit throws std::bad_alloc, so the loop
// walks the failure point through every allocation of the call until it
// succeeds. After each failure the parameters and gradient buffers must be
// bitwise what they were and the tracker back to its bytes before the call.
//
// BIAFFINE_TEST_SCALE (default 1) scales the repetition counts of the
// concurrency test (CI sets it below 1 under the sanitizers).
#include <catch2/catch.hpp>

#include "test_scale.hpp"

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <new>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "biaffine/detail/eigen.hpp"  // Eigen, without GCC 12's AVX-512 false positives
#include <xtensor/xtensor.hpp>

#include "biaffine/biaffine.hpp"

using namespace biaffine;

namespace {

using biaffine_test::scaled;

using doc_t = xt::xtensor<double, 2>;

struct corpus {
    std::vector<doc_t> docs;
    std::vector<std::vector<int>> lengths;
};

/// Documents with the given split lengths, values in [-1, 1) from `seed`.
corpus make_corpus(std::size_t n_in, const std::vector<std::vector<int>>& lengths, unsigned seed)
{
    std::mt19937 rng(seed);
    std::uniform_real_distribution<double> val(-1.0, 1.0);
    corpus c;
    c.lengths = lengths;
    for (const auto& ls : lengths) {
        std::size_t rows = 0;
        for (int l : ls) rows += static_cast<std::size_t>(l);
        doc_t d = doc_t::from_shape({rows, n_in});
        for (auto& v : d) v = val(rng);
        c.docs.push_back(std::move(d));
    }
    return c;
}

std::size_t n_splits(const corpus& c)
{
    std::size_t n = 0;
    for (const auto& ls : c.lengths) n += ls.size();
    return n;
}

/// Every parameter (or gradient) value of a scorer, in order.
template <class S>
std::vector<double> flat(S& s, bool grads)
{
    std::vector<double> out;
    for (const auto& p : s.parameters()) {
        const double* a = grads ? p.grad : p.data;
        out.insert(out.end(), a, a + p.size);
    }
    return out;
}

template <class S>
void set_grads(S& s, const std::vector<double>& g)
{
    std::size_t at = 0;
    for (const auto& p : s.parameters()) {
        std::copy(g.begin() + static_cast<std::ptrdiff_t>(at), g.begin() + static_cast<std::ptrdiff_t>(at + p.size),
                  p.grad);
        at += p.size;
    }
}

/// Bitwise equality (NaN payloads included).
bool same_bits(const std::vector<double>& a, const std::vector<double>& b)
{
    return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(double)) == 0);
}

template <class A>
std::vector<double> values(const A& a)
{
    return std::vector<double>(a.begin(), a.end());
}

template <class List>
std::vector<std::vector<double>> all_values(const List& l)
{
    std::vector<std::vector<double>> out;
    for (const auto& a : l) out.push_back(values(a));
    return out;
}

/// Per-split score gradients (untracked arrays) matching the outputs' shapes.
std::vector<xt::xarray<double>> random_grads(const score_list<double>& Y, unsigned seed)
{
    std::mt19937 rng(seed);
    std::uniform_real_distribution<double> val(-1.0, 1.0);
    std::vector<xt::xarray<double>> g;
    for (const auto& y : Y) {
        xt::xarray<double> a = xt::xarray<double>::from_shape(y.shape());
        for (auto& v : a) v = val(rng);
        g.push_back(std::move(a));
    }
    return g;
}

/// Clears the tracker's limit when the scope ends, whatever happens.
struct limit_scope {
    explicit limit_scope(std::uint64_t bytes) { tracker().set_limit(bytes); }
    limit_scope(const limit_scope&) = delete;
    limit_scope& operator=(const limit_scope&) = delete;
    ~limit_scope() { tracker().set_limit(0); }
};

/// One configuration of the composed pipeline.
struct setup {
    std::string name;
    scorer_config cfg;
    budget b;
    batch_options opts;
    bool padded = false;  // with_pad_seq_unpad_matrix between the batcher and the scorer
};

std::vector<setup> setups()
{
    scorer_config c;
    c.n_in = 3;
    c.hidden = 4;
    c.labels = 2;
    std::vector<setup> s;
    s.push_back({"items budget, scorer", c, budget::items(6), {}, false});
    batch_options two;
    two.threads = 2;
    s.push_back({"items budget, scorer, 2 threads", c, budget::items(6), two, false});
    s.push_back({"items budget, padded scorer", c, budget::items(6), {}, true});
    scorer_config c1 = c;
    c1.labels = 1;
    c1.bias_v = false;
    c1.recompute_in_backward = true;
    s.push_back({"byte budget, one label, recompute in backward", c1, budget::bytes(6000), {}, false});
    batch_options small_buffer;
    small_buffer.buffer = 3;
    s.push_back({"byte budget, buffer 3, padded", c1, budget::bytes(6000), small_buffer, true});
    return s;
}

// Several documents (an empty one, zero-length splits) so that every budget
// above gives several batches.
const std::vector<std::vector<int>> k_lengths = {{3, 0, 2}, {}, {4, 1, 5}, {0}, {2, 2}};

/// Calls f(pipeline) with the with_splits(with_minibatch(...)) pipeline of a
/// setup around `scorer`.
template <class F>
void with_pipeline(const setup& st, biaffine_scorer<double>& scorer, F&& f)
{
    if (st.padded) {
        auto p = with_splits(with_minibatch_by_padded_size(with_pad_seq_unpad_matrix(scorer), st.b, st.opts));
        f(p);
    } else {
        auto p = with_splits(with_minibatch_by_padded_size(scorer, st.b, st.opts));
        f(p);
    }
}

/// Runs `attempt` under the limit (bytes alive now) + k for k = 0, 1, ...
/// until it returns normally; after every std::bad_alloc calls
/// `after_failure(bytes_before)`. Returns the number of failures.
template <class Attempt, class After>
std::size_t inject(Attempt&& attempt, After&& after_failure)
{
    std::size_t failures = 0;
    for (std::uint64_t k = 0;; ++k) {
        const std::uint64_t before = tracker().current_bytes();
        REQUIRE(before > 0);  // a limit of 0 would mean "no limit"
        bool ok = false;
        try {
            limit_scope limit(before + k);
            attempt();
            ok = true;
        } catch (const std::bad_alloc&) {
        }
        if (ok) return failures;
        ++failures;
        after_failure(before);
        REQUIRE(failures < 1000000);
    }
}

// Keeps the tracker's current bytes above zero so that "limit = current + 0"
// is a real limit.
struct sentinel {
    tracked_vector<char> bytes = tracked_vector<char>(1);
};

/// Calls f(pipeline, scorer, corpus) with a fresh scorer for a setup, the
/// corpus of k_lengths from `seed` and the setup's pipeline around the
/// scorer, a sentinel alive throughout.
template <class F>
void with_fresh_pipeline(const setup& st, unsigned seed, F&& f)
{
    sentinel keep;
    biaffine_scorer<double> scorer(st.cfg);
    const corpus c = make_corpus(st.cfg.n_in, k_lengths, seed);
    with_pipeline(st, scorer, [&](auto& pipe) { f(pipe, scorer, c); });
}

}  // namespace

TEST_CASE("exception safety: predict under injected allocation failure at every point", "[hardening][memory]")
{
    for (const setup& st : setups()) {
        SECTION(st.name)
        {
            with_fresh_pipeline(st, 1, [&](auto& pipe, biaffine_scorer<double>& scorer, const corpus& c) {
                const auto expected = all_values(pipe.predict(c.docs, c.lengths));
                REQUIRE(expected.size() == n_splits(c));
                const auto params = flat(scorer, false);
                const auto grads = flat(scorer, true);

                std::vector<std::vector<double>> got;
                const std::size_t failures = inject(
                    [&] { got = all_values(pipe.predict(c.docs, c.lengths)); },
                    [&](std::uint64_t before) {
                        REQUIRE(tracker().current_bytes() == before);
                        REQUIRE(same_bits(flat(scorer, false), params));
                        REQUIRE(same_bits(flat(scorer, true), grads));
                    });
                CHECK(failures > 10);  // the walk went through many allocations
                REQUIRE(got.size() == expected.size());
                for (std::size_t k = 0; k < got.size(); ++k) REQUIRE(same_bits(got[k], expected[k]));

                // The streaming path too: nothing delivered to the sink may
                // survive a failure, and the tracker must come back.
                std::size_t delivered = 0;
                inject(
                    [&] {
                        delivered = 0;
                        pipe.predict_stream(c.docs, c.lengths,
                                            [&](std::size_t, std::size_t, score_view<const double>) { ++delivered; });
                    },
                    [&](std::uint64_t before) { REQUIRE(tracker().current_bytes() == before); });
                CHECK(delivered == n_splits(c));
            });
        }
    }
}

TEST_CASE("exception safety: forward under injected allocation failure at every point", "[hardening][memory]")
{
    for (const setup& st : setups()) {
        for (mode m : {mode::eval, mode::train}) {
            DYNAMIC_SECTION(st.name << (m == mode::train ? ", train" : ", eval"))
            {
                with_fresh_pipeline(st, 2, [&](auto& pipe, biaffine_scorer<double>& scorer, const corpus& c) {
                    std::vector<std::vector<double>> expected;
                    {
                        auto fw = pipe.forward(c.docs, c.lengths, m);
                        expected = all_values(fw.first);
                    }
                    const auto params = flat(scorer, false);
                    const auto grads = flat(scorer, true);
                    std::vector<std::vector<double>> got;
                    const std::size_t failures = inject(
                        [&] {
                            auto fw = pipe.forward(c.docs, c.lengths, m);
                            got = all_values(fw.first);
                        },
                        [&](std::uint64_t before) {
                            REQUIRE(tracker().current_bytes() == before);
                            REQUIRE(same_bits(flat(scorer, false), params));
                            REQUIRE(same_bits(flat(scorer, true), grads));
                        });
                    CHECK(failures > 10);
                    REQUIRE(got.size() == expected.size());
                    for (std::size_t k = 0; k < got.size(); ++k) REQUIRE(same_bits(got[k], expected[k]));
                });
            }
        }
    }
}

TEST_CASE("exception safety: backprop under injected allocation failure at every point", "[hardening][memory]")
{
    for (const setup& st : setups()) {
        DYNAMIC_SECTION(st.name)
        {
            with_fresh_pipeline(st, 3, [&](auto& pipe, biaffine_scorer<double>& scorer, const corpus& c) {
                using pipe_t = std::remove_reference_t<decltype(pipe)>;
                // Non-zero gradients to start from, then the reference step.
                {
                    auto [Y, bp] = pipe.forward(c.docs, c.lengths, mode::train);
                    const auto g = random_grads(Y, 4);
                    bp(pipe_t::grad_views(g));
                }
                const auto params = flat(scorer, false);
                const auto g0 = flat(scorer, true);
                std::vector<std::vector<double>> dx_expected;
                std::vector<double> g1;
                {
                    auto [Y, bp] = pipe.forward(c.docs, c.lengths, mode::train);
                    const auto g = random_grads(Y, 5);
                    dx_expected = all_values(bp(pipe_t::grad_views(g)));
                    g1 = flat(scorer, true);
                }
                REQUIRE(!same_bits(g0, g1));
                set_grads(scorer, g0);

                std::size_t failures = 0;
                for (std::uint64_t k = 0;; ++k) {
                    const std::uint64_t start = tracker().current_bytes();
                    bool ok = false;
                    {
                        auto fw = pipe.forward(c.docs, c.lengths, mode::train);
                        const auto g = random_grads(fw.first, 5);
                        const auto views = pipe_t::grad_views(g);
                        const std::uint64_t before = tracker().current_bytes();
                        try {
                            limit_scope limit(before + k);
                            const auto dx = fw.second(views);
                            ok = true;
                            const auto got = all_values(dx);
                            REQUIRE(got.size() == dx_expected.size());
                            for (std::size_t d = 0; d < got.size(); ++d) REQUIRE(same_bits(got[d], dx_expected[d]));
                        } catch (const std::bad_alloc&) {
                            ++failures;
                            // The callback released what it held; nothing else survives.
                            REQUIRE(tracker().current_bytes() <= before);
                            REQUIRE(same_bits(flat(scorer, true), g0));
                            REQUIRE(same_bits(flat(scorer, false), params));
                        }
                    }
                    REQUIRE(tracker().current_bytes() == start);
                    if (ok) break;
                    REQUIRE(failures < 1000000);
                }
                CHECK(failures > 5);
                REQUIRE(same_bits(flat(scorer, true), g1));
                REQUIRE(same_bits(flat(scorer, false), params));
            });
        }
    }
}

TEST_CASE("exception safety: a bad gradient in a later batch leaves the gradients as they were", "[hardening]")
{
    // The batcher's own backprop runs batch after batch; the second batch's
    // gradient has the wrong shape, so the first one has already accumulated
    // when it throws.
    scorer_config cfg;
    cfg.n_in = 3;
    cfg.hidden = 4;
    cfg.labels = 1;
    biaffine_scorer<double> scorer(cfg);
    const corpus c = make_corpus(3, {{4, 4, 1, 1}}, 6);
    std::vector<seq_view<const double>> items;
    for (std::size_t r = 0, k = 0; k < c.lengths[0].size(); ++k) {
        const auto n = static_cast<std::size_t>(c.lengths[0][k]);
        items.push_back(as_const_view(c.docs[0]).rows_view(r, n));
        r += n;
    }
    auto layer = with_minibatch_by_padded_size(scorer, budget::items(8));
    auto [Y, bp] = layer.forward(items, mode::train);
    REQUIRE(layer.batch_count() == 2);  // {0, 1} (length 4) first, then {2, 3}
    auto g = random_grads(Y, 7);
    std::vector<score_view<const double>> dY;
    for (const auto& a : g) dY.push_back(as_score_view(a));
    dY[3].n = 2;  // wrong shape, in the batch that runs second
    std::vector<xt::xarray<double>> dx;
    std::vector<seq_view<double>> dX;
    for (const auto& it : items) dx.push_back(xt::zeros<double>({it.rows, std::size_t(3)}));
    for (auto& a : dx) dX.push_back(as_view(a));
    const auto g0 = flat(scorer, true);
    REQUIRE_THROWS_AS(bp(dY, dX), shape_error);
    REQUIRE(same_bits(flat(scorer, true), g0));
}

namespace {

/// Clean and poisoned copies of a corpus: `value` written at (doc, row, col).
struct poisoned {
    corpus clean, bad;
    std::size_t split = 0;  // flat index of the split holding the bad row
    std::size_t row_in_split = 0;
};

poisoned poison(const corpus& c, std::size_t doc, std::size_t row, std::size_t col, double value)
{
    poisoned p{c, c, 0, 0};
    p.bad.docs[doc](row, col) = value;
    std::size_t flat = 0;
    for (std::size_t d = 0; d < doc; ++d) flat += c.lengths[d].size();
    std::size_t r = row;
    for (int len : c.lengths[doc]) {
        if (r < static_cast<std::size_t>(len)) break;
        r -= static_cast<std::size_t>(len);
        ++flat;
    }
    p.split = flat;
    p.row_in_split = r;
    return p;
}

}  // namespace

TEST_CASE("NaN and Inf in one split never reach another split's scores or input gradients", "[hardening][nan]")
{
    scorer_config cfg;
    cfg.n_in = 5;
    cfg.hidden = 6;
    cfg.labels = 2;
    // Document 1's split of length 4 shares a batch with splits of other
    // documents under every budget below.
    const corpus c = make_corpus(cfg.n_in, {{3, 4}, {2, 4, 3}, {4}}, 8);
    const double nan = std::numeric_limits<double>::quiet_NaN();
    const double inf = std::numeric_limits<double>::infinity();
    struct budget_case {
        const char* name;
        budget b;
        std::size_t threads;
        bool padded;
    };
    const budget_case budgets[] = {{"one batch for everything", budget::items(1000), 1, false},
                                   {"several batches", budget::items(9), 1, false},
                                   {"several batches, padded", budget::items(9), 1, true},
                                   {"several batches, 2 threads", budget::items(9), 2, false}};
    for (const budget_case& bc : budgets) {
        for (double value : {nan, inf, -inf}) {
            DYNAMIC_SECTION(bc.name << ", value " << value)
            {
                biaffine_scorer<double> scorer(cfg);
                const poisoned p = poison(c, 1, 3, 2, value);  // document 1, split 1 (rows 2..5), its row 1
                REQUIRE(p.split == 3);
                REQUIRE(p.row_in_split == 1);
                batch_options opts;
                opts.threads = bc.threads;
                setup st{bc.name, cfg, bc.b, opts, bc.padded};
                with_pipeline(st, scorer, [&](auto& pipe) {
                    using pipe_t = std::remove_reference_t<decltype(pipe)>;
                    // Eval scores.
                    const auto clean = all_values(pipe.predict(p.clean.docs, p.clean.lengths));
                    const auto bad = all_values(pipe.predict(p.bad.docs, p.bad.lengths));
                    REQUIRE(clean.size() == bad.size());
                    for (std::size_t k = 0; k < clean.size(); ++k) {
                        if (k != p.split) {
                            REQUIRE(same_bits(clean[k], bad[k]));
                            continue;
                        }
                        // Inside the poisoned split: only the bad token's row
                        // and column can change; a NaN input makes both NaN.
                        const std::size_t n = 4, o = cfg.labels, r = p.row_in_split;
                        for (std::size_t m = 0; m < n; ++m) {
                            for (std::size_t l = 0; l < n; ++l) {
                                for (std::size_t q = 0; q < o; ++q) {
                                    const double a = clean[k][(m * n + l) * o + q], b = bad[k][(m * n + l) * o + q];
                                    if (m == r || l == r) {
                                        if (std::isnan(value)) CHECK(std::isnan(b));
                                    } else {
                                        REQUIRE(std::memcmp(&a, &b, sizeof(double)) == 0);
                                    }
                                }
                            }
                        }
                    }
                    // Train scores and per-document input gradients.
                    auto run_train = [&](const corpus& cc) {
                        auto [Y, bp] = pipe.forward(cc.docs, cc.lengths, mode::train);
                        const auto g = random_grads(Y, 9);
                        auto dx = bp(pipe_t::grad_views(g));
                        return std::make_pair(all_values(Y), all_values(dx));
                    };
                    const auto [yc, dxc] = run_train(p.clean);
                    const auto [yb, dxb] = run_train(p.bad);
                    for (std::size_t k = 0; k < yc.size(); ++k) {
                        if (k != p.split) REQUIRE(same_bits(yc[k], yb[k]));
                    }
                    // Documents 0 and 2 untouched; in document 1 only the
                    // poisoned split's rows (2..5) may differ.
                    REQUIRE(same_bits(dxc[0], dxb[0]));
                    REQUIRE(same_bits(dxc[2], dxb[2]));
                    const std::size_t n_in = cfg.n_in;
                    for (std::size_t row = 0; row < 9; ++row) {
                        if (row >= 2 && row < 6) continue;
                        for (std::size_t col = 0; col < n_in; ++col) {
                            const double a = dxc[1][row * n_in + col], b = dxb[1][row * n_in + col];
                            REQUIRE(std::memcmp(&a, &b, sizeof(double)) == 0);
                        }
                    }
                });
            }
        }
    }
}

TEST_CASE("concurrent predict from several threads on one scorer equals the single-threaded result",
          "[hardening][threads]")
{
    scorer_config cfg;
    cfg.n_in = 8;
    cfg.hidden = 16;
    cfg.labels = 3;
    biaffine_scorer<float> scorer(cfg);
    std::mt19937 rng(10);
    std::vector<std::vector<int>> lengths(6);
    for (auto& ls : lengths) {
        const int ns = std::uniform_int_distribution<int>(0, 8)(rng);
        for (int k = 0; k < ns; ++k) ls.push_back(std::uniform_int_distribution<int>(0, 20)(rng));
    }
    std::vector<Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic>> docs;  // column-major on purpose
    std::uniform_real_distribution<float> val(-1.f, 1.f);
    for (const auto& ls : lengths) {
        int rows = 0;
        for (int l : ls) rows += l;
        Eigen::MatrixXf d(rows, static_cast<Eigen::Index>(cfg.n_in));
        for (Eigen::Index i = 0; i < d.size(); ++i) d.data()[i] = val(rng);
        docs.push_back(std::move(d));
    }
    auto as_floats = [](const score_list<float>& Y) {
        std::vector<std::vector<float>> out;
        for (const auto& y : Y) out.emplace_back(y.begin(), y.end());
        return out;
    };
    for (std::size_t inner_threads : {1u, 2u}) {
        DYNAMIC_SECTION("batch_options.threads = " << inner_threads)
        {
            batch_options opts;
            opts.threads = inner_threads;
            const auto pipe = with_splits(with_minibatch_by_padded_size(scorer, budget::items(40), opts));
            const auto expected = as_floats(pipe.predict(docs, lengths));
            REQUIRE(pipe.inner().batch_count() > 2);
            const int n_threads = 4, rounds = scaled(6);
            std::vector<int> mismatches(n_threads, 0), streamed_wrong(n_threads, 0);
            std::vector<std::thread> pool;
            for (int t = 0; t < n_threads; ++t) {
                pool.emplace_back([&, t] {
                    for (int r = 0; r < rounds; ++r) {
                        const auto got = as_floats(pipe.predict(docs, lengths));
                        if (got != expected) ++mismatches[t];
                        std::vector<int> seen(expected.size(), 0);
                        pipe.predict_stream(docs, lengths, [&](std::size_t k, std::size_t, score_view<const float> s) {
                            ++seen[k];
                            std::vector<float> v;
                            for (std::size_t m = 0; m < s.n; ++m)
                                for (std::size_t l = 0; l < s.n * s.labels; ++l) v.push_back(s.data[static_cast<std::ptrdiff_t>(m) * s.row_stride + static_cast<std::ptrdiff_t>(l)]);
                            if (v != expected[k]) ++streamed_wrong[t];
                        });
                        for (int x : seen)
                            if (x != 1) ++streamed_wrong[t];
                    }
                });
            }
            for (auto& th : pool) th.join();
            for (int t = 0; t < n_threads; ++t) {
                CHECK(mismatches[t] == 0);
                CHECK(streamed_wrong[t] == 0);
            }
        }
    }
}

TEST_CASE("size computations that overflow throw overflow_error before any allocation is attempted",
          "[hardening][overflow]")
{
    // A split of 2^32 rows as a stride-0 view (no memory behind it): its
    // scores would need 2^64 cells. Under a 1 MB limit, an allocation of a
    // wrapped-around or real size would throw std::bad_alloc instead.
    scorer_config cfg;
    cfg.n_in = 3;
    cfg.hidden = 2;
    biaffine_scorer<double> scorer(cfg);
    const double row[3] = {0.5, -0.5, 0.25};
    const std::vector<seq_view<const double>> items{{row, std::size_t(1) << 32, 3, 0, 1}};
    sentinel keep;
    const std::uint64_t before = tracker().current_bytes();
    {
        limit_scope limit(before + (1u << 20));
        CHECK_THROWS_AS(scorer.predict(items), overflow_error);
        CHECK_THROWS_AS(scorer.forward(items, mode::train), overflow_error);
        CHECK_THROWS_AS(scorer.predict_stream(items, [](std::size_t, score_view<const double>) {}), overflow_error);
        CHECK_THROWS_AS(scorer.cost(1, std::size_t(1) << 32), overflow_error);
        CHECK_THROWS_AS(with_minibatch_by_padded_size(scorer, budget::megabytes(64)).predict(items), overflow_error);
        CHECK_THROWS_AS(with_minibatch_by_padded_size(scorer, budget::items(64)).predict(items), overflow_error);
        // The padded path's input alone (2^32 x 3 doubles) fits 64 bits but
        // not the limit: the tracker refuses it before the heap is touched.
        CHECK_THROWS_AS(with_pad_seq_unpad_matrix(scorer).predict(items), std::bad_alloc);
    }
    CHECK(tracker().current_bytes() == before);
}

TEST_CASE("a workspace size that overflows leaves the thread's workspace state intact", "[hardening][workspace]")
{
    sentinel keep;
    const std::uint64_t before = tracker().current_bytes();
    CHECK_THROWS_AS(workspace_scope(std::numeric_limits<std::uint64_t>::max()), overflow_error);
    {
        workspace_scope ws(256);
        scratch<double> s(8);
        CHECK(tracker().current_bytes() > before);
    }
    // Had the failed scope stayed counted, the block would outlive this scope.
    CHECK(tracker().current_bytes() == before);
}

TEST_CASE("the padded-items rule never overflows: huge lengths just close batches", "[hardening][batching]")
{
    const std::uint64_t big = std::uint64_t(1) << 63;
    const std::vector<std::size_t> lengths{big, 1, big, 2};
    const auto batches = minibatch_by_padded_size(lengths, std::numeric_limits<std::uint64_t>::max());
    // 2 * 2^63 overflows 64 bits, so the two long items cannot share a batch.
    REQUIRE(batches == std::vector<std::vector<std::size_t>>{{2}, {0}, {1, 3}});
}
