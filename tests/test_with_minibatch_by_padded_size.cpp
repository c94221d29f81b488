// Tests for biaffine/with_minibatch_by_padded_size.hpp: through a recording
// mock, the batches it runs are exactly spaCy's rule (padded items) or the
// same rule on the inner layer's reported bytes; outputs and gradients come
// back in input order; the byte budget holds per batch; oversize policies;
// a mock X·Xᵀ layer batched equals one unbatched call; bad input.
#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <iostream>
#include <map>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include "biaffine/biaffine.hpp"
#include "layer_helpers.hpp"

using namespace biaffine;
using th::grad_slots;
using th::random_lengths;
using th::random_score_grads;
using th::recording_layer;
using th::views_of;
using th::xxt_layer;
using sizes = std::vector<std::size_t>;

namespace {

/// Items with distinct data pointers (zero-length ones too), so a mock can
/// tell which item it was handed.
template <class T>
struct item_set {
    std::size_t n_in = 0;
    std::vector<std::vector<T>> store;
    std::vector<seq_view<const T>> views;
    std::map<const T*, std::size_t> index;
    sizes lengths;
};

template <class T>
item_set<T> make_items(std::mt19937& rng, const sizes& lengths, std::size_t n_in)
{
    item_set<T> s;
    s.n_in = n_in;
    s.lengths = lengths;
    s.store = th::random_buffers<T>(rng, lengths, n_in);
    for (std::size_t k = 0; k < lengths.size(); ++k) {
        s.views.push_back({s.store[k].data(), lengths[k], n_in, static_cast<std::ptrdiff_t>(n_in), 1});
        s.index[s.store[k].data()] = k;
    }
    return s;
}

template <class T>
std::vector<sizes> seen_as_indices(const std::vector<th::seen_batch<T>>& calls, const item_set<T>& items)
{
    std::vector<sizes> out;
    for (const auto& c : calls) {
        sizes b;
        for (const T* p : c.data) b.push_back(items.index.at(p));
        out.push_back(b);
    }
    return out;
}

std::size_t g_workloads = 0;

// One random workload through a recording layer with a padded-items budget.
template <class T>
void check_items_budget(std::mt19937& rng)
{
    const std::size_t n = std::uniform_int_distribution<std::size_t>(0, 400)(rng);
    const std::size_t n_in = std::uniform_int_distribution<std::size_t>(1, 4)(rng);
    const std::size_t labels = std::uniform_int_distribution<int>(0, 1)(rng) ? 1 : 3;
    const item_set<T> items = make_items<T>(rng, random_lengths(rng, n, 70), n_in);
    const std::uint64_t size = std::uniform_int_distribution<std::uint64_t>(1, 400)(rng);
    const std::size_t buffers[] = {1, 2, 7, 33, 256};
    batch_options opts;
    opts.buffer = buffers[std::uniform_int_distribution<int>(0, 4)(rng)];
    INFO("n=" << n << " size=" << size << " buffer=" << opts.buffer << " labels=" << labels);

    const auto want = minibatch_by_padded_size(items.lengths, size, opts.buffer);
    // The library's own planner is checked against an independent one in
    // test_batching; here check the layer follows it, via the reference too.
    REQUIRE(want == th::reference_batches(
                        items.lengths, opts.buffer,
                        [](std::size_t c, std::size_t l) { return std::uint64_t(c) * l; }, size));

    recording_layer<T> rec(n_in, labels);
    auto layer = with_minibatch_by_padded_size(rec, budget::items(size), opts);

    // predict: the batches, in order, and outputs in input order
    const score_list<T> Y = layer.predict(items.views);
    REQUIRE(seen_as_indices(rec.calls, items) == want);
    REQUIRE(layer.batch_count() == want.size());
    REQUIRE(Y.size() == n);
    double worst = 0;
    for (std::size_t k = 0; k < n; ++k) {
        const std::size_t len = items.lengths[k];
        REQUIRE(Y[k].shape()[0] == len);
        REQUIRE(Y[k].dimension() == (labels == 1 ? 2u : 3u));
        std::vector<double> want_y;
        for (std::size_t m = 0; m < len; ++m)
            for (std::size_t l = 0; l < len; ++l)
                for (std::size_t q = 0; q < labels; ++q)
                    want_y.push_back(recording_layer<T>::value(items.views[k], m, l, q));
        worst = std::max(worst, th::rel_err(th::to_vec(Y[k]), want_y));
    }
    REQUIRE(worst < 1e-6);

    // predict_stream: every item exactly once, same values, same batches
    rec.calls.clear();
    std::vector<int> seen(n, 0);
    bool stream_ok = true;
    layer.predict_stream(items.views, [&](std::size_t k, score_view<const T> s) {
        if (k >= n || s.n != items.lengths[k] || th::rel_err(th::to_vec(s), th::to_vec(Y[k])) != 0.0) {
            stream_ok = false;
            return;
        }
        ++seen[k];
    });
    REQUIRE(stream_ok);
    REQUIRE(std::count(seen.begin(), seen.end(), 1) == static_cast<std::ptrdiff_t>(n));
    REQUIRE(seen_as_indices(rec.calls, items) == want);

    // forward + backprop: same batches; gradients scattered back in order
    rec.calls.clear();
    auto [Yf, bp] = layer.forward(items.views, mode::train);
    REQUIRE(seen_as_indices(rec.calls, items) == want);
    REQUIRE(Yf.size() == n);
    double worst_f = 0;
    for (std::size_t k = 0; k < n; ++k) worst_f = std::max(worst_f, th::rel_err(th::to_vec(Yf[k]), th::to_vec(Y[k])));
    REQUIRE(worst_f == 0.0);
    const score_list<T> dY = random_score_grads<T>(rng, items.lengths, labels);
    const auto dYv = views_of(dY);
    grad_slots<T> dX(items.lengths, n_in);
    bp(span<const score_view<const T>>(dYv.data(), n), span<const seq_view<T>>(dX.views.data(), n));
    // every batch's backprop ran, once
    auto back = seen_as_indices(rec.backward_calls, items);
    std::sort(back.begin(), back.end());
    auto sorted_want = want;
    std::sort(sorted_want.begin(), sorted_want.end());
    REQUIRE(back == sorted_want);
    double worst_dx = 0;
    for (std::size_t k = 0; k < n; ++k) {
        const std::size_t len = items.lengths[k];
        const score_view<const T> g = dYv[k];
        std::vector<double> want_dx;
        for (std::size_t r = 0; r < len; ++r)
            for (std::size_t c = 0; c < n_in; ++c) {
                double acc = 0;
                for (std::size_t l = 0; l < len; ++l)
                    for (std::size_t q = 0; q < labels; ++q) acc += double(c + 1) * double(g(r, l, q)) + double(g(l, r, q));
                want_dx.push_back(acc);
            }
        worst_dx = std::max(worst_dx, th::rel_err(dX.get(k), want_dx));
    }
    REQUIRE(worst_dx < 1e-5);
    ++g_workloads;
}

// One random workload with a byte budget through `spy(inner)`: the batches are
// the reference rule on the inner layer's reported bytes, each within the
// budget minus the bookkeeping unless it is a lone oversize split.
template <class Inner>
void check_byte_budget(std::mt19937& rng, Inner& inner, const sizes& lengths, std::uint64_t budget_bytes,
                       std::size_t buffer, mode m)
{
    using T = typename Inner::value_type;
    const std::size_t n = lengths.size();
    th::spy_layer<Inner> spy(inner);
    batch_options opts;
    opts.buffer = buffer;
    auto layer = with_minibatch_by_padded_size(spy, budget::bytes(budget_bytes), opts);
    const item_set<T> items = make_items<T>(rng, lengths, inner.n_in());
    const std::uint64_t own = layer.bookkeeping_bytes(n);
    // A training forward also pays what it keeps until backprop.
    const std::uint64_t kept = m == mode::eval || n == 0 ? 0 : layer.kept_bytes(n, m);
    INFO("n=" << n << " budget=" << budget_bytes << " bookkeeping=" << own << " kept=" << kept << " buffer=" << buffer);
    if (own + kept >= budget_bytes) {
        if (m == mode::eval) {
            REQUIRE_THROWS_AS(layer.predict(items.views), budget_error);
        } else {
            REQUIRE_THROWS_AS(layer.forward(items.views, m), budget_error);
        }
        return;
    }
    const std::uint64_t limit = budget_bytes - own - kept;
    // What the planner charges a batch: the inner layer's report plus the
    // list of score tensors it hands back.
    auto cost = [&](std::size_t c, std::size_t l) {
        const std::uint64_t bytes = inner.cost(c, l, m).total() + c * sizeof(score_tensor<T>);
        REQUIRE(layer.planned_bytes(c, l, m) == bytes);
        return bytes;
    };
    const auto want = th::reference_batches(lengths, buffer, cost, limit);
    std::uint64_t lone_oversize = 0;
    for (const auto& b : want) {
        std::size_t mx = 0;
        for (auto i : b) mx = std::max(mx, lengths[i]);
        const std::uint64_t c = cost(b.size(), mx);
        if (c > limit) {
            // Only a lone split may exceed the budget.
            REQUIRE(b.size() == 1);
            ++lone_oversize;
        }
    }
    if (m == mode::eval) {
        (void)layer.predict(items.views);
    } else {
        auto fw = layer.forward(items.views, m);
        (void)fw;
    }
    const auto got = seen_as_indices(spy.calls, items);
    REQUIRE(got == want);
    // The reported cost of every batch the inner layer actually saw.
    for (const auto& c : spy.calls) {
        const std::uint64_t bytes = inner.cost(c.lengths.size(), c.max_len(), m).total();
        if (bytes > limit) {
            REQUIRE(c.lengths.size() == 1);
        } else {
            REQUIRE(bytes <= budget_bytes - own - kept);
        }
    }
    REQUIRE(layer.oversize_count() == lone_oversize);
    ++g_workloads;
}

template <class T>
void byte_budget_workloads(std::mt19937& rng, int trials)
{
    for (int t = 0; t < trials; ++t) {
        const std::size_t n = std::uniform_int_distribution<std::size_t>(0, 300)(rng);
        const sizes lengths = random_lengths(rng, n, 90);
        const std::size_t buffers[] = {1, 2, 7, 256};
        const std::size_t buffer = buffers[std::uniform_int_distribution<int>(0, 3)(rng)];
        const mode m = std::uniform_int_distribution<int>(0, 1)(rng) ? mode::train : mode::eval;
        const int which = std::uniform_int_distribution<int>(0, 2)(rng);
        const std::size_t labels = std::uniform_int_distribution<int>(0, 1)(rng) ? 1 : 2;
        std::uint64_t budget_bytes = std::uniform_int_distribution<std::uint64_t>(1, 1 << 20)(rng);
        if (std::uniform_int_distribution<int>(0, 3)(rng) == 0) {
            budget_bytes = std::uniform_int_distribution<std::uint64_t>(1, 40000)(rng);  // tight
        }
        if (which == 0) {
            recording_layer<T> rec(3, labels);
            check_byte_budget(rng, rec, lengths, budget_bytes, buffer, m);
        } else {
            scorer_config cfg;
            cfg.n_in = 5;
            cfg.hidden = 4;
            cfg.labels = labels;
            cfg.seed = static_cast<std::uint64_t>(t);
            biaffine_scorer<T> scorer(cfg);
            if (which == 1) {
                check_byte_budget(rng, scorer, lengths, budget_bytes, buffer, m);
            } else {
                auto pad = with_pad_seq_unpad_matrix(scorer);
                check_byte_budget(rng, pad, lengths, budget_bytes, buffer, m);
            }
        }
    }
}

}  // namespace

TEST_CASE("with_minibatch_by_padded_size (items): spaCy's batches, in order; outputs and gradients restored",
          "[with_minibatch_by_padded_size]")
{
    std::mt19937 rng(1234);
    const std::size_t before = g_workloads;
    for (int t = 0; t < 120; ++t) check_items_budget<float>(rng);
    for (int t = 0; t < 60; ++t) check_items_budget<double>(rng);
    std::cout << "[with_minibatch_by_padded_size] items-budget random workloads: " << g_workloads - before << "\n";
}

TEST_CASE("with_minibatch_by_padded_size: the parity vector through the recording layer",
          "[with_minibatch_by_padded_size]")
{
    std::mt19937 rng(5);
    const item_set<double> items = make_items<double>(rng, {5, 6, 5, 9}, 2);
    recording_layer<double> rec(2, 1);
    auto layer = with_minibatch_by_padded_size(rec, budget::items(18));
    const score_list<double> Y = layer.predict(items.views);
    REQUIRE(seen_as_indices(rec.calls, items) == std::vector<sizes>{{3}, {0, 1, 2}});
    REQUIRE(rec.calls[1].max_len() == 6);
    for (std::size_t k = 0; k < 4; ++k) {
        REQUIRE(Y[k].shape()[0] == items.lengths[k]);
        REQUIRE(static_cast<double>(Y[k](1, 2)) == Approx(recording_layer<double>::value(items.views[k], 1, 2, 0)));
    }
}

TEST_CASE("with_minibatch_by_padded_size (bytes): batches follow the reported cost and stay within budget",
          "[with_minibatch_by_padded_size]")
{
    std::mt19937 rng(99);
    const std::size_t before = g_workloads;
    byte_budget_workloads<float>(rng, 120);
    byte_budget_workloads<double>(rng, 60);
    std::cout << "[with_minibatch_by_padded_size] byte-budget random workloads: " << g_workloads - before << "\n";
}

TEST_CASE("with_minibatch_by_padded_size: X·Xᵀ mock batched equals one unbatched call",
          "[with_minibatch_by_padded_size]")
{
    std::mt19937 rng(31337);
    std::size_t count = 0;
    for (int t = 0; t < 80; ++t) {
        const std::size_t n = std::uniform_int_distribution<std::size_t>(0, 120)(rng);
        const std::size_t n_in = std::uniform_int_distribution<std::size_t>(1, 5)(rng);
        const std::size_t labels = std::uniform_int_distribution<int>(0, 1)(rng) ? 1 : 2;
        const item_set<double> items = make_items<double>(rng, random_lengths(rng, n, 40), n_in);
        const bool bytes = std::uniform_int_distribution<int>(0, 1)(rng) != 0;
        const budget b = bytes ? budget::bytes(std::uniform_int_distribution<std::uint64_t>(20000, 200000)(rng))
                               : budget::items(std::uniform_int_distribution<std::uint64_t>(1, 200)(rng));
        batch_options opts;
        opts.buffer = std::uniform_int_distribution<std::size_t>(1, 64)(rng);
        xxt_layer<double> batched_inner(n_in, labels, 0.75), plain(n_in, labels, 0.75);
        auto layer = with_minibatch_by_padded_size(batched_inner, b, opts);
        INFO("trial " << t << " n=" << n);

        auto [Y, bp] = layer.forward(items.views, mode::train);
        auto [Yu, bpu] = plain.forward(items.views, mode::train);
        REQUIRE(Y.size() == Yu.size());
        for (std::size_t k = 0; k < n; ++k) REQUIRE(th::rel_err(th::to_vec(Y[k]), th::to_vec(Yu[k])) < 1e-12);
        // batched predict agrees with batched forward
        const score_list<double> Yp = layer.predict(items.views);
        for (std::size_t k = 0; k < n; ++k) REQUIRE(th::rel_err(th::to_vec(Yp[k]), th::to_vec(Yu[k])) < 1e-12);

        const score_list<double> dY = random_score_grads<double>(rng, items.lengths, labels);
        const auto dYv = views_of(dY);
        grad_slots<double> dX(items.lengths, n_in), dXu(items.lengths, n_in);
        bp(span<const score_view<const double>>(dYv.data(), n), span<const seq_view<double>>(dX.views.data(), n));
        bpu(span<const score_view<const double>>(dYv.data(), n), span<const seq_view<double>>(dXu.views.data(), n));
        for (std::size_t k = 0; k < n; ++k) REQUIRE(th::rel_err(dX.get(k), dXu.get(k)) < 1e-12);
        REQUIRE(batched_inner.d_alpha == Approx(plain.d_alpha).epsilon(1e-12).margin(1e-12));
        if (n > 0 && !bytes) REQUIRE(batched_inner.n_calls >= 2);  // forward + predict, at least one batch each
        ++count;
    }
    g_workloads += count;
    std::cout << "[with_minibatch_by_padded_size] X·Xᵀ random workloads: " << count << "\n";
}

TEST_CASE("with_minibatch_by_padded_size: threads give the one-thread results, small and large buffers",
          "[with_minibatch_by_padded_size][threads]")
{
    // buffer 4 over ~60 splits (many buffers, few batches each) and buffer
    // 256 (one buffer, its batches shared out): both must equal the
    // one-thread scores bit for bit, in predict and in the stream, and the
    // stream must keep the tracker's working set within threads x budget.
    std::mt19937 rng(2024);
    scorer_config c;
    c.n_in = 6;
    c.hidden = 5;
    c.labels = 2;
    c.seed = 5;
    biaffine_scorer<float> sc(c);
    const item_set<float> items = make_items<float>(rng, random_lengths(rng, 60, 17), c.n_in);
    const budget b = budget::bytes(48 * 1024);
    for (std::size_t buffer : {std::size_t(4), std::size_t(256)}) {
        // The same batches on one thread (a batch's GEMM sizes decide its
        // rounding, so compare like with like).
        batch_options o1;
        o1.buffer = buffer;
        const score_list<float> Y1 = with_minibatch_by_padded_size(sc, b, o1).predict(items.views);
        for (std::size_t threads : {std::size_t(2), std::size_t(3)}) {
            INFO("buffer " << buffer << " threads " << threads);
            batch_options o;
            o.buffer = buffer;
            o.threads = threads;
            auto layer = with_minibatch_by_padded_size(sc, b, o);
            const score_list<float> Y = layer.predict(items.views);
            REQUIRE(Y.size() == Y1.size());
            for (std::size_t k = 0; k < Y.size(); ++k) REQUIRE(Y[k] == Y1[k]);
            std::vector<int> seen(items.views.size(), 0);
            std::size_t mismatches = 0;
            const std::uint64_t before = tracker().current_bytes();
            tracker().reset_peak();
            layer.predict_stream(items.views, [&](std::size_t k, score_view<const float> s) {
                ++seen[k];
                for (std::size_t m = 0; m < s.n; ++m)
                    for (std::size_t l = 0; l < s.n; ++l)
                        for (std::size_t q = 0; q < s.labels; ++q)
                            if (s(m, l, q) != Y1[k](m, l, q)) ++mismatches;
            });
            REQUIRE(mismatches == 0);
            for (int x : seen) REQUIRE(x == 1);
            REQUIRE(tracker().peak_bytes() - before <= threads * b.value);
        }
    }
}

namespace {

// Each thread holds one block sized for the largest batch of the plan for the
// whole call, so the tracker's peak is threads x (that block + the per-thread
// bookkeeping), exactly, in every run: it does not depend on which batches
// happened to run at the same time, nor grow with the number of buffers. On
// several threads a batch's block also holds the room to park its splits
// until its turn: what the plan charges it for its outputs and their list,
// at most what the limit leaves beside its scratch (the documented rule). The
// long list repeats the short one 8 times (buffer 8 divides 40, so it plans
// the same batches, 8 times over). `Heads`: predict_heads_stream (labels at
// given heads, batched by heads_cost), else predict_stream.
template <bool Heads>
void check_stream_peak()
{
    std::mt19937 rng(77);
    scorer_config c;
    c.n_in = 16;
    c.hidden = 8;
    c.labels = 2;
    c.seed = 3;
    biaffine_scorer<float> sc(c);
    const sizes base = random_lengths(rng, 40, 30);
    sizes repeated;
    for (int r = 0; r < 8; ++r) repeated.insert(repeated.end(), base.begin(), base.end());
    // A heads batch costs far less than a scores batch: a budget that buys
    // batches of a few splits either way.
    const budget b = budget::bytes(Heads ? 24 * 1024 : 96 * 1024);
    batch_options o;
    o.buffer = 8;
    o.threads = 2;
    auto layer = with_minibatch_by_padded_size(sc, b, o);
    for (const sizes* lengths : {&base, static_cast<const sizes*>(&repeated)}) {
        const item_set<float> items = make_items<float>(rng, *lengths, c.n_in);
        const std::size_t n = lengths->size();
        std::vector<std::vector<std::size_t>> heads(n);
        for (std::size_t k = 0; k < n; ++k) {
            for (std::size_t i = 0; i < (*lengths)[k]; ++i) {
                heads[k].push_back(std::uniform_int_distribution<std::size_t>(0, (*lengths)[k] - 1)(rng));
            }
        }
        const std::uint64_t own = layer.bookkeeping_bytes(n);
        // What the layer plans a batch at (its documented rule: the inner
        // layer's cost and one score tensor per split) and the batch's scratch.
        auto inner_cost = [&](std::size_t count, std::size_t len) {
            return Heads ? sc.heads_cost(count, len, mode::eval) : sc.cost(count, len, mode::eval);
        };
        auto cost = [&](std::size_t count, std::size_t len) {
            return inner_cost(count, len).total() + count * sizeof(score_tensor<float>);
        };
        const std::uint64_t threads = layer.threads_for(n);
        const std::uint64_t limit = b.value - own;
        std::uint64_t largest = 0;
        for (const auto& batch : th::reference_batches(*lengths, o.buffer, cost, limit)) {
            std::size_t mx = 0;
            for (auto i : batch) mx = std::max(mx, (*lengths)[i]);
            REQUIRE(cost(batch.size(), mx) <= limit);  // no oversize split in this workload
            const batch_cost bc = inner_cost(batch.size(), mx);
            const std::uint64_t outputs = detail::round_up_bytes(bc.outputs + batch.size() * sizeof(score_tensor<float>));
            const std::uint64_t left = (limit - bc.scratch - bc.heap) / 64 * 64;
            const std::uint64_t room = threads > 1 ? std::min(outputs, left) : 0;
            largest = std::max(largest, bc.scratch + room);
        }
        const std::uint64_t want = threads * (own + detail::round_up_bytes(largest));
        for (int run = 0; run < 3; ++run) {
            INFO("n=" << n << " threads=" << threads << " run " << run);
            std::size_t delivered = 0;
            const std::uint64_t before = tracker().current_bytes();
            tracker().reset_peak();
            if constexpr (Heads) {
                layer.predict_heads_stream(items.views, heads, [&](std::size_t, seq_view<const float>) { ++delivered; });
            } else {
                layer.predict_stream(items.views, [&](std::size_t, score_view<const float>) { ++delivered; });
            }
            REQUIRE(delivered == n);
            REQUIRE(tracker().peak_bytes() - before == want);
            REQUIRE(tracker().current_bytes() == before);
            REQUIRE(want <= threads * b.value);
        }
    }
}

}  // namespace

TEST_CASE("with_minibatch_by_padded_size: a stream on threads peaks at every thread's block for the largest batch, "
          "however long the list", "[with_minibatch_by_padded_size][threads][memory]")
{
    check_stream_peak<false>();
}

TEST_CASE("with_minibatch_by_padded_size: a heads stream on threads peaks at every thread's block for the largest "
          "batch, as a scores stream", "[with_minibatch_by_padded_size][threads][memory][heads]")
{
    check_stream_peak<true>();
}

namespace {

// What a stream hands its sink, call by call: the split and a copy of its
// elements (the view lives only during the call).
struct streamed_split {
    std::size_t split;
    std::vector<float> values;
    bool operator==(const streamed_split& o) const { return split == o.split && values == o.values; }
};

enum class stream_kind { scores, scores_into, heads };

// Runs one kind of stream of `layer` over `items`, recording every sink call
// (under a lock, so a concurrent sink is recorded safely); `pause` makes the
// sink slow, so batches on other threads get ahead of the one delivering.
template <class Layer>
std::vector<streamed_split> record_stream(const Layer& layer, stream_kind kind,
                                          const std::vector<seq_view<const float>>& items,
                                          const std::vector<std::vector<std::size_t>>& heads,
                                          std::chrono::microseconds pause)
{
    std::mutex m;
    std::vector<streamed_split> calls;
    auto keep = [&](std::size_t k, std::vector<float> values) {
        if (pause.count() != 0) std::this_thread::sleep_for(pause);
        std::lock_guard<std::mutex> lock(m);
        calls.push_back({k, std::move(values)});
    };
    auto scores = [&](std::size_t k, score_view<const float> s) {
        std::vector<float> v;
        for (std::size_t i = 0; i < s.n; ++i)
            for (std::size_t j = 0; j < s.n; ++j)
                for (std::size_t q = 0; q < s.labels; ++q) v.push_back(s(i, j, q));
        keep(k, std::move(v));
    };
    if (kind == stream_kind::scores) {
        layer.predict_stream(items, scores);
    } else if (kind == stream_kind::scores_into) {
        // The caller's memory: one buffer per split, so none is reused early.
        std::vector<std::vector<float>> out(items.size());
        layer.predict_stream_into(
            items,
            [&](std::size_t k, std::size_t n) {
                out[k].resize(std::max<std::size_t>(1, n * n * layer.labels()));
                return out[k].data();
            },
            scores);
    } else {
        layer.predict_heads_stream(items, heads, [&](std::size_t k, seq_view<const float> y) {
            std::vector<float> v;
            for (std::size_t i = 0; i < y.rows; ++i)
                for (std::size_t q = 0; q < y.cols; ++q) v.push_back(y(i, q));
            keep(k, std::move(v));
        });
    }
    return calls;
}

// The small scorer of the stream-order tests: 3 labels, so a split's
// scores are n x n x 3.
biaffine_scorer<float> stream_order_scorer(std::uint64_t seed)
{
    scorer_config c;
    c.n_in = 8;
    c.hidden = 6;
    c.labels = 3;
    c.seed = seed;
    return biaffine_scorer<float>(c);
}

// A serialised sink's calls: the one-thread splits, bytes and order.
void require_one_thread_calls(const std::vector<streamed_split>& got, const std::vector<streamed_split>& want)
{
    REQUIRE(got.size() == want.size());
    for (std::size_t i = 0; i < got.size(); ++i) {
        INFO("call " << i);
        REQUIRE(got[i].split == want[i].split);
        REQUIRE(got[i].values == want[i].values);
    }
}

}  // namespace

TEST_CASE("with_minibatch_by_padded_size: a stream on 1, 2 and 4 threads hands the sink the one-thread splits, bytes "
          "and order; a concurrent sink gets the same splits, buffer by buffer",
          "[with_minibatch_by_padded_size][threads][stream]")
{
    // Buffers of 12 over ~150 splits under a budget that cuts each buffer
    // into several batches, so batches of later buffers and of the same
    // buffer are computed while an earlier one delivers. The slow sink
    // (sleeping) lets every other thread get as far ahead as it can.
    std::mt19937 rng(4242);
    const biaffine_scorer<float> sc = stream_order_scorer(11);
    const item_set<float> items = make_items<float>(rng, random_lengths(rng, 150, 24), sc.n_in());
    std::vector<std::vector<std::size_t>> heads(items.views.size());
    for (std::size_t k = 0; k < heads.size(); ++k) {
        for (std::size_t i = 0; i < items.lengths[k]; ++i) {
            heads[k].push_back(std::uniform_int_distribution<std::size_t>(0, items.lengths[k] - 1)(rng));
        }
    }
    batch_options one;
    one.buffer = 12;
    for (stream_kind kind : {stream_kind::scores, stream_kind::scores_into, stream_kind::heads}) {
        // Labels at given heads cost far less a batch: a budget that cuts
        // buffers as finely.
        const budget b = budget::bytes(kind == stream_kind::heads ? 12 * 1024 : 28 * 1024);
        const std::vector<streamed_split> want =
            record_stream(with_minibatch_by_padded_size(sc, b, one), kind, items.views, heads, {});
        REQUIRE(want.size() == items.views.size());
        auto layer1 = with_minibatch_by_padded_size(sc, b, one);
        record_stream(layer1, kind, items.views, heads, {});
        const std::uint64_t batches = layer1.batch_count();
        INFO("batches " << batches);
        REQUIRE(layer1.oversize_count() == 0);  // the bound below is for batches within the budget
        REQUIRE(batches >= 2 * ((items.views.size() + one.buffer - 1) / one.buffer));  // several per buffer
        for (std::size_t threads : {std::size_t(1), std::size_t(2), std::size_t(4)}) {
            for (bool concurrent : {false, true}) {
                for (int pause_us : {0, 300}) {
                    INFO("kind " << static_cast<int>(kind) << " threads " << threads << " concurrent sink "
                                 << concurrent << " pause " << pause_us << " us");
                    batch_options o = one;
                    o.threads = threads;
                    o.concurrent_sink = concurrent;
                    auto layer = with_minibatch_by_padded_size(sc, b, o);
                    const std::uint64_t before = tracker().current_bytes();
                    tracker().reset_peak();
                    const std::vector<streamed_split> got =
                        record_stream(layer, kind, items.views, heads, std::chrono::microseconds(pause_us));
                    REQUIRE(tracker().peak_bytes() - before <= layer.threads_for(items.views.size()) * b.value);
                    REQUIRE(tracker().current_bytes() == before);
                    if (!concurrent) {
                        require_one_thread_calls(got, want);
                    } else {
                        REQUIRE(got.size() == want.size());
                        // Every split once, with the one-thread bytes; buffers in order.
                        std::vector<const streamed_split*> by_split(want.size(), nullptr);
                        for (const streamed_split& w : want) by_split[w.split] = &w;
                        std::vector<int> seen(want.size(), 0);
                        std::size_t buffer = 0;
                        for (const streamed_split& g : got) {
                            REQUIRE(g.split < want.size());
                            ++seen[g.split];
                            REQUIRE(g.values == by_split[g.split]->values);
                            REQUIRE(g.split / one.buffer >= buffer);
                            buffer = g.split / one.buffer;
                        }
                        for (int x : seen) REQUIRE(x == 1);
                    }
                }
            }
        }
    }
}

TEST_CASE("with_minibatch_by_padded_size: a stream on threads whose lone oversize splits have no room to park "
          "waits for their turn: the one-thread order",
          "[with_minibatch_by_padded_size][threads][stream]")
{
    // Every 7th split is too long for the budget alone (run_alone): its batch
    // gets no parking room beside its scratch, so it must wait for its turn
    // at its first split rather than deliver early; the slow sink keeps the
    // batch before it delivering while the other thread gets there.
    std::mt19937 rng(777);
    const biaffine_scorer<float> sc = stream_order_scorer(5);
    std::vector<std::size_t> lengths = random_lengths(rng, 60, 24);
    for (std::size_t k = 3; k < lengths.size(); k += 7) lengths[k] = 70;
    const item_set<float> items = make_items<float>(rng, lengths, sc.n_in());
    const std::vector<std::vector<std::size_t>> heads;
    batch_options one;
    one.buffer = 12;
    const budget b = budget::bytes(28 * 1024);
    for (stream_kind kind : {stream_kind::scores, stream_kind::scores_into}) {
        auto layer1 = with_minibatch_by_padded_size(sc, b, one);
        const std::vector<streamed_split> want = record_stream(layer1, kind, items.views, heads, {});
        REQUIRE(want.size() == items.views.size());
        REQUIRE(layer1.oversize_count() >= 8);
        for (std::size_t threads : {std::size_t(2), std::size_t(4)}) {
            for (int pause_us : {0, 300}) {
                INFO("kind " << static_cast<int>(kind) << " threads " << threads << " pause " << pause_us << " us");
                batch_options o = one;
                o.threads = threads;
                auto layer = with_minibatch_by_padded_size(sc, b, o);
                const std::uint64_t before = tracker().current_bytes();
                const std::vector<streamed_split> got =
                    record_stream(layer, kind, items.views, heads, std::chrono::microseconds(pause_us));
                REQUIRE(tracker().current_bytes() == before);
                require_one_thread_calls(got, want);
            }
        }
    }
}

TEST_CASE("with_minibatch_by_padded_size: oversize policies", "[with_minibatch_by_padded_size][errors]")
{
    std::mt19937 rng(8);
    const item_set<float> items = make_items<float>(rng, {2, 50, 3, 1, 0}, 4);
    recording_layer<float> rec(4, 1);
    // Budget: the bookkeeping plus what a batch of the three short splits costs,
    // far below the 50-token split alone.
    batch_options opts;
    auto probe = with_minibatch_by_padded_size(rec, budget::items(1), opts);
    const std::uint64_t own = probe.bookkeeping_bytes(5);
    const std::uint64_t small = probe.planned_bytes(4, 3);
    REQUIRE(rec.cost(1, 50).total() > small);

    SECTION("run_alone: runs it in a batch of its own and counts it")
    {
        auto layer = with_minibatch_by_padded_size(rec, budget::bytes(own + small), opts);
        const score_list<float> Y = layer.predict(items.views);
        REQUIRE(layer.oversize_count() == 1);
        REQUIRE(seen_as_indices(rec.calls, items) == std::vector<sizes>{{1}, {0, 2, 3, 4}});
        REQUIRE(Y[1].shape()[0] == 50);
        layer.reset_counts();
        REQUIRE(layer.oversize_count() == 0);
        REQUIRE(layer.batch_count() == 0);
    }
    SECTION("throw_error: a budget_error naming the split")
    {
        opts.oversize = oversize_policy::throw_error;
        auto layer = with_minibatch_by_padded_size(rec, budget::bytes(own + small), opts);
        REQUIRE_THROWS_AS(layer.predict(items.views), budget_error);
        REQUIRE_THROWS_WITH(layer.predict(items.views),
                            Catch::Contains("split 1") && Catch::Contains("length 50") && Catch::Contains("budget"));
        REQUIRE_THROWS_WITH(layer.forward(items.views, mode::train), Catch::Contains("split 1"));
        std::vector<int> seen;
        REQUIRE_THROWS_AS(layer.predict_stream(items.views, [&](std::size_t k, score_view<const float>) {
            seen.push_back(static_cast<int>(k));
        }),
                          budget_error);
        REQUIRE(layer.oversize_count() == 0);
        // An items budget: 50 tokens alone over a size of 10.
        auto by_items = with_minibatch_by_padded_size(rec, budget::items(10), opts);
        REQUIRE_THROWS_WITH(by_items.predict(items.views), Catch::Contains("split 1") && Catch::Contains("50"));
    }
}

TEST_CASE("with_minibatch_by_padded_size: bad input", "[with_minibatch_by_padded_size][errors]")
{
    std::mt19937 rng(3);
    const item_set<double> items = make_items<double>(rng, {3, 0, 4}, 2);
    recording_layer<double> rec(2, 1);
    batch_options zero_buffer;
    zero_buffer.buffer = 0;
    REQUIRE_THROWS_AS(with_minibatch_by_padded_size(rec, budget::items(5), zero_buffer), budget_error);
    REQUIRE_THROWS_AS(with_minibatch_by_padded_size(rec, budget{budget_kind::bytes, 0}), budget_error);
    REQUIRE_THROWS_WITH(with_minibatch_by_padded_size(rec, budget{budget_kind::padded_items, 0}),
                        Catch::Contains("budget must be positive"));

    // A byte budget below the bookkeeping of one split: refused when built.
    using layer_t = decltype(with_minibatch_by_padded_size(rec, budget::items(1)));
    const std::uint64_t one = layer_t::min_bookkeeping_bytes();
    REQUIRE(one == with_minibatch_by_padded_size(rec, budget::items(1)).bookkeeping_bytes(1));
    REQUIRE_THROWS_AS(with_minibatch_by_padded_size(rec, budget::bytes(8)), budget_error);
    REQUIRE_THROWS_WITH(with_minibatch_by_padded_size(rec, budget::bytes(one)),
                        Catch::Contains("bookkeeping for one split") && Catch::Contains(std::to_string(one)));
    // Enough for one split's bookkeeping but not for a buffer of three: the
    // call is refused, before any batch runs.
    auto tiny = with_minibatch_by_padded_size(rec, budget::bytes(one + 1));
    REQUIRE_THROWS_AS(tiny.predict(items.views), budget_error);
    REQUIRE_THROWS_WITH(tiny.predict(items.views), Catch::Contains("bookkeeping"));
    REQUIRE(rec.calls.empty());

    auto layer = with_minibatch_by_padded_size(rec, budget::items(4));
    auto [Y, bp] = layer.forward(items.views, mode::train);
    const score_list<double> dY = random_score_grads<double>(rng, items.lengths, 1);
    const auto dYv = views_of(dY);
    grad_slots<double> dX(items.lengths, 2);
    // Wrong number of split gradients.
    REQUIRE_THROWS_AS(bp(span<const score_view<const double>>(dYv.data(), 2),
                         span<const seq_view<double>>(dX.views.data(), 3)),
                      shape_error);
    auto [Y2, bp2] = layer.forward(items.views, mode::train);
    REQUIRE_THROWS_WITH(bp2(span<const score_view<const double>>(dYv.data(), 2),
                            span<const seq_view<double>>(dX.views.data(), 2)),
                        Catch::Contains("expected 3") && Catch::Contains("got 2"));
    // The callback is spent even though it threw: a second call is refused.
    REQUIRE_THROWS_AS(bp2(span<const score_view<const double>>(dYv.data(), 3),
                          span<const seq_view<double>>(dX.views.data(), 3)),
                      backprop_error);

    // A second call after a successful one.
    auto [Y3, bp3] = layer.forward(items.views, mode::train);
    bp3(span<const score_view<const double>>(dYv.data(), 3), span<const seq_view<double>>(dX.views.data(), 3));
    REQUIRE_THROWS_AS(bp3(span<const score_view<const double>>(dYv.data(), 3),
                          span<const seq_view<double>>(dX.views.data(), 3)),
                      backprop_error);
    REQUIRE_THROWS_WITH(bp3(span<const score_view<const double>>(dYv.data(), 3),
                            span<const seq_view<double>>(dX.views.data(), 3)),
                        Catch::Contains("second time"));

    // No items: no batches, empty results.
    const std::vector<seq_view<const double>> none;
    rec.calls.clear();
    REQUIRE(layer.predict(none).empty());
    REQUIRE(rec.calls.empty());

    // A size computation that would overflow 64 bits, refused before any
    // allocation: the scorer's cost for count * L^2 * o * sizeof(T) > 2^64.
    scorer_config cfg;
    cfg.n_in = 2;
    cfg.hidden = 2;
    biaffine_scorer<double> scorer(cfg);
    auto big = with_minibatch_by_padded_size(scorer, budget::bytes(1 << 20));
    REQUIRE_THROWS_AS(big.cost(std::size_t(1) << 20, std::size_t(1) << 23), overflow_error);
    REQUIRE_THROWS_WITH(big.cost(std::size_t(1) << 20, std::size_t(1) << 23), Catch::Contains("overflows 64 bits"));
    // An item that claims 2^33 rows (never read): planning its cost overflows.
    std::vector<double> dummy(4, 0.0);
    const std::vector<seq_view<const double>> huge{{dummy.data(), std::size_t(1) << 33, 2, 2, 1}};
    REQUIRE_THROWS_AS(big.predict(huge), overflow_error);
    auto big_items = with_minibatch_by_padded_size(scorer, budget::items(10));
    REQUIRE_THROWS_AS(big_items.predict(huge), overflow_error);
}

TEST_CASE("threads: SIZE_MAX runs at most the machine's threads, never more than the splits", "[minibatch][threads]")
{
    scorer_config c;
    c.n_in = 4;
    c.hidden = 3;
    c.seed = 2;
    biaffine_scorer<float> s(c);
    batch_options all;
    all.threads = static_cast<std::size_t>(-1);  // "all cores" with an unsigned field
    auto many = with_minibatch_by_padded_size(s, budget::megabytes(1), all);
    const std::size_t hw = std::max<std::size_t>(1, std::thread::hardware_concurrency());
    REQUIRE(many.threads_for(30000) == hw);
    REQUIRE(many.threads_for(1) == 1);
    REQUIRE(many.threads_for(0) == 1);
    // 30,000 splits: the same scores as one thread (and no 30,000 threads).
    const std::size_t n_splits = 30000;
    std::vector<float> x(n_splits * 2 * 4);
    for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>((i * 37 % 101) / 101.0);
    std::vector<seq_view<const float>> X;
    for (std::size_t k = 0; k < n_splits; ++k) X.push_back({x.data() + k * 8, 2, 4, 4, 1});
    auto one = with_minibatch_by_padded_size(s, budget::megabytes(1));
    const auto a = many.predict(X);
    const auto b = one.predict(X);
    REQUIRE(a.size() == n_splits);
    for (std::size_t k = 0; k < n_splits; ++k) REQUIRE(a[k] == b[k]);
}
