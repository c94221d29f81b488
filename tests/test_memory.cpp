// Tests for biaffine/memory.hpp and biaffine/memory_log.hpp: exact counter
// deltas of the tracking allocator, categories, scoped peaks, the hard limit,
// thread safety, memory_log checkpoints / summary / CSV; and that the
// scorer's inference paths keep nothing but their outputs, with the scratch
// they carve within the cost they report.
//
// The tracker is process-wide, so every check is a delta from a baseline
// taken in the same test.
#include <catch2/catch.hpp>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <new>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <xtensor/xtensor.hpp>

#include "biaffine/biaffine.hpp"

using namespace biaffine;

namespace {

// Restores "no limit" even when a check fails mid-test.
struct limit_guard {
    ~limit_guard() { tracker().set_limit(0); }
};

bool same_counters(const memory_stats& a, const memory_stats& b)
{
    return a.current_bytes == b.current_bytes && a.peak_bytes == b.peak_bytes && a.output_bytes == b.output_bytes &&
           a.work_peak_bytes == b.work_peak_bytes && a.allocations == b.allocations && a.frees == b.frees;
}

}  // namespace

TEST_CASE("tracking_allocator: exact current, peak and count deltas", "[memory]")
{
    tracker().reset_peak();
    const memory_stats s0 = tracker().stats();
    REQUIRE(s0.peak_bytes == s0.current_bytes);

    tracking_allocator<double> ad;
    tracking_allocator<char> ac;
    double* p = ad.allocate(100);  // 800 bytes
    const memory_stats s1 = tracker().stats();
    CHECK(s1.current_bytes - s0.current_bytes == 800);
    CHECK(s1.peak_bytes - s0.current_bytes == 800);
    CHECK(s1.allocations - s0.allocations == 1);
    CHECK(s1.frees == s0.frees);
    CHECK(reinterpret_cast<std::uintptr_t>(p) % tracking_allocator<double>::alignment == 0);

    char* q = ac.allocate(37);
    const memory_stats s2 = tracker().stats();
    CHECK(s2.current_bytes - s0.current_bytes == 837);
    CHECK(s2.peak_bytes - s0.current_bytes == 837);
    CHECK(s2.allocations - s0.allocations == 2);

    ad.deallocate(p, 100);
    const memory_stats s3 = tracker().stats();
    CHECK(s3.current_bytes - s0.current_bytes == 37);
    CHECK(s3.peak_bytes - s0.current_bytes == 837);  // the peak stays
    CHECK(s3.frees - s0.frees == 1);

    ac.deallocate(q, 37);
    const memory_stats s4 = tracker().stats();
    CHECK(s4.current_bytes == s0.current_bytes);
    CHECK(s4.frees - s0.frees == 2);
    CHECK(s4.allocations - s0.allocations == 2);

    tracker().reset_peak();
    CHECK(tracker().stats().peak_bytes == s0.current_bytes);
}

TEST_CASE("tracking_allocator: output vs work categories and the work peak", "[memory]")
{
    tracker().reset_peak();
    const memory_stats s0 = tracker().stats();
    const std::uint64_t work0 = s0.current_bytes - s0.output_bytes;
    REQUIRE(s0.work_peak_bytes == work0);

    tracking_allocator<float, work_tag> aw;
    tracking_allocator<float, output_tag> ao;
    float* w = aw.allocate(250);   // 1000 work bytes
    float* o = ao.allocate(1250);  // 5000 output bytes
    const memory_stats s1 = tracker().stats();
    CHECK(s1.current_bytes - s0.current_bytes == 6000);
    CHECK(s1.output_bytes - s0.output_bytes == 5000);
    CHECK(s1.work_peak_bytes - work0 == 1000);
    CHECK(s1.peak_bytes - s0.current_bytes == 6000);

    aw.deallocate(w, 250);
    float* w2 = aw.allocate(100);  // 400 work bytes: below the work peak
    const memory_stats s2 = tracker().stats();
    CHECK(s2.work_peak_bytes - work0 == 1000);
    CHECK(s2.output_bytes - s0.output_bytes == 5000);
    aw.deallocate(w2, 100);
    ao.deallocate(o, 1250);
    const memory_stats s3 = tracker().stats();
    CHECK(s3.current_bytes == s0.current_bytes);
    CHECK(s3.output_bytes == s0.output_bytes);

    // Containers use the same counting.
    {
        score_tensor<double> t(std::vector<std::size_t>{4, 4, 2});
        tensor<double, 2> u = tensor<double, 2>::from_shape({3, 5});
        const memory_stats s4 = tracker().stats();
        CHECK(s4.output_bytes - s0.output_bytes == 32 * sizeof(double));
        CHECK(s4.current_bytes - s0.current_bytes == (32 + 15) * sizeof(double));
    }
    CHECK(tracker().stats().current_bytes == s0.current_bytes);
}

TEST_CASE("scoped_peak: peaks within nested scopes", "[memory]")
{
    tracking_allocator<char> a;
    tracker().reset_peak();
    const std::uint64_t base = tracker().current_bytes();
    char* before = a.allocate(10000);  // a peak before the scopes: must survive them
    a.deallocate(before, 10000);
    {
        scoped_peak outer;
        CHECK(outer.start_bytes() == base);
        CHECK(outer.peak_increase() == 0);  // the earlier 10000 is outside this scope
        char* x = a.allocate(1000);
        CHECK(outer.peak_increase() == 1000);
        {
            scoped_peak inner;
            CHECK(inner.start_bytes() == base + 1000);
            char* y = a.allocate(3000);
            a.deallocate(y, 3000);
            char* z = a.allocate(500);
            CHECK(inner.peak_increase() == 3000);
            CHECK(inner.peak_bytes() == base + 4000);
            a.deallocate(z, 500);
        }
        // The inner scope's peak counts in the outer one.
        CHECK(outer.peak_increase() == 4000);
        {
            scoped_peak inner2;
            CHECK(inner2.peak_increase() == 0);
            char* y = a.allocate(200);
            CHECK(inner2.peak_increase() == 200);
            a.deallocate(y, 200);
        }
        CHECK(outer.peak_increase() == 4000);
        a.deallocate(x, 1000);
    }
    // Outside every scope the enclosing peak is max(before, inside).
    CHECK(tracker().stats().peak_bytes == base + 10000);
    CHECK(tracker().current_bytes() == base);
}

TEST_CASE("set_limit: refuses before allocating and leaves counters unchanged", "[memory]")
{
    limit_guard guard;
    tracking_allocator<char> a;
    const std::uint64_t base = tracker().current_bytes();
    tracker().set_limit(base + 1000);
    CHECK(tracker().limit() == base + 1000);

    const memory_stats s0 = tracker().stats();
    CHECK_THROWS_AS(a.allocate(1001), std::bad_alloc);
    CHECK(same_counters(tracker().stats(), s0));

    char* p = a.allocate(600);
    CHECK(tracker().current_bytes() == base + 600);
    const memory_stats s1 = tracker().stats();
    CHECK_THROWS_AS(a.allocate(401), std::bad_alloc);
    CHECK(same_counters(tracker().stats(), s1));
    char* q = a.allocate(400);  // exactly at the limit is allowed
    CHECK(tracker().current_bytes() == base + 1000);
    a.deallocate(q, 400);
    a.deallocate(p, 600);

    // A library call under the limit fails cleanly and frees what it took.
    tracker().set_limit(0);
    {
        scorer_config cfg;
        cfg.n_in = 8;
        cfg.hidden = 8;
        biaffine_scorer<double> s(cfg);
        xt::xtensor<double, 2> doc = xt::ones<double>({50, 8});
        std::vector<seq_view<const double>> items{as_const_view(doc)};
        const std::uint64_t before = tracker().current_bytes();
        tracker().set_limit(before + 1024);
        CHECK_THROWS_AS(s.predict(items), std::bad_alloc);
        CHECK(tracker().current_bytes() == before);
        tracker().set_limit(0);
    }

    CHECK(tracker().limit() == 0);
    char* big = a.allocate(1 << 20);  // no limit any more
    a.deallocate(big, 1 << 20);
    CHECK(tracker().current_bytes() == base);
}

TEST_CASE("tracker is thread-safe: exact counts with concurrent allocations", "[memory]")
{
    const memory_stats s0 = tracker().stats();
    constexpr int n_threads = 4, n_iter = 20000, keep = 8;
    std::atomic<std::uint64_t> bytes_total{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < n_threads; ++t) {
        threads.emplace_back([t, &bytes_total] {
            tracking_allocator<std::uint64_t> a;
            std::mt19937 rng(static_cast<unsigned>(t));
            std::vector<std::pair<std::uint64_t*, std::size_t>> alive;
            std::uint64_t bytes = 0;
            for (int i = 0; i < n_iter; ++i) {
                const std::size_t n = 1 + rng() % 64;
                std::uint64_t* p = a.allocate(n);
                p[0] = n;  // touch it
                bytes += n * sizeof(std::uint64_t);
                alive.emplace_back(p, n);
                if (alive.size() > static_cast<std::size_t>(keep)) {
                    const std::size_t j = rng() % alive.size();
                    a.deallocate(alive[j].first, alive[j].second);
                    alive[j] = alive.back();
                    alive.pop_back();
                }
            }
            for (auto& pr : alive) a.deallocate(pr.first, pr.second);
            bytes_total += bytes;
        });
    }
    for (auto& th : threads) th.join();
    const memory_stats s1 = tracker().stats();
    CHECK(s1.current_bytes == s0.current_bytes);
    CHECK(s1.output_bytes == s0.output_bytes);
    CHECK(s1.allocations - s0.allocations == std::uint64_t(n_threads) * n_iter);
    CHECK(s1.frees - s0.frees == std::uint64_t(n_threads) * n_iter);
    // At most keep + 1 blocks of <= 64 words alive per thread at any time.
    CHECK(s1.peak_bytes <= std::max(s0.peak_bytes,
                                    s0.current_bytes + std::uint64_t(n_threads) * (keep + 1) * 64 * 8));
    CHECK(bytes_total.load() > 0);
}

namespace {

// Minimal CSV field splitter with quotes ("" inside quotes is a quote).
std::vector<std::string> split_csv(const std::string& line)
{
    std::vector<std::string> out;
    std::string cur;
    bool quoted = false;
    for (std::size_t i = 0; i < line.size(); ++i) {
        const char c = line[i];
        if (quoted) {
            if (c == '"' && i + 1 < line.size() && line[i + 1] == '"') {
                cur += '"';
                ++i;
            } else if (c == '"') {
                quoted = false;
            } else {
                cur += c;
            }
        } else if (c == '"') {
            quoted = true;
        } else if (c == ',') {
            out.push_back(cur);
            cur.clear();
        } else {
            cur += c;
        }
    }
    out.push_back(cur);
    return out;
}

}  // namespace

TEST_CASE("memory_log: checkpoints, summary and CSV with exact numbers", "[memory][memory_log]")
{
    tracking_allocator<char> a;
    const std::uint64_t base = tracker().current_bytes();
    memory_log log;

    char* p = a.allocate(1000);
    const memory_checkpoint c1 = log.checkpoint("alloc 1000");
    CHECK(c1.label == "alloc 1000");
    CHECK(c1.current_bytes == base + 1000);
    CHECK(c1.change_bytes == 1000);
    CHECK(c1.peak_bytes == base + 1000);
    CHECK(c1.seconds >= 0.0);

    char* q = a.allocate(5000);
    a.deallocate(q, 5000);
    const memory_checkpoint c2 = log.checkpoint("temp 5000");
    CHECK(c2.current_bytes == base + 1000);
    CHECK(c2.change_bytes == 0);
    CHECK(c2.peak_bytes == base + 6000);  // the transient is caught
    CHECK(c2.seconds >= c1.seconds);

    a.deallocate(p, 1000);
    const std::string odd = "he said \"hi\", twice";
    const memory_checkpoint c3 = log.checkpoint(odd);
    CHECK(c3.current_bytes == base);
    CHECK(c3.change_bytes == -1000);
    CHECK(c3.peak_bytes == base + 1000);  // window restarted after c2
    CHECK(c3.seconds >= c2.seconds);
    CHECK(log.peak_bytes() == base + 6000);

    const auto& rows = log.checkpoints();
    REQUIRE(rows.size() == 3);

    const std::string sum = log.summary();
    for (const auto& r : rows) CHECK(sum.find(r.label) != std::string::npos);
    CHECK(sum.find("checkpoint") != std::string::npos);

    std::stringstream csv;
    log.write_csv(csv);
    std::string line;
    REQUIRE(std::getline(csv, line));
    CHECK(line == "label,current_bytes,peak_bytes,change_bytes,seconds");
    const std::uint64_t cur[] = {base + 1000, base + 1000, base};
    const std::uint64_t peak[] = {base + 1000, base + 6000, base + 1000};
    const std::int64_t change[] = {1000, 0, -1000};
    const std::string labels[] = {"alloc 1000", "temp 5000", odd};
    for (int i = 0; i < 3; ++i) {
        REQUIRE(std::getline(csv, line));
        const auto f = split_csv(line);
        REQUIRE(f.size() == 5);
        CHECK(f[0] == labels[i]);
        CHECK(std::stoull(f[1]) == cur[i]);
        CHECK(std::stoull(f[2]) == peak[i]);
        CHECK(std::stoll(f[3]) == change[i]);
        CHECK(std::stod(f[4]) == Approx(rows[static_cast<std::size_t>(i)].seconds).epsilon(1e-5).margin(1e-9));
    }
    CHECK_FALSE(std::getline(csv, line));
}

TEST_CASE("format_bytes uses powers of 1024 with one decimal", "[memory][memory_log]")
{
    CHECK(format_bytes(0) == "0.0 B");
    CHECK(format_bytes(512) == "512.0 B");
    CHECK(format_bytes(1024) == "1.0 KB");
    CHECK(format_bytes(1536) == "1.5 KB");
    CHECK(format_bytes(3.0 * 1024 * 1024) == "3.0 MB");
    CHECK(format_bytes(-2048) == "-2.0 KB");
}

namespace {

template <class T>
std::uint64_t output_bytes_of(const score_list<T>& Y)
{
    std::uint64_t b = Y.capacity() * sizeof(score_tensor<T>);
    for (const auto& y : Y) {
        std::uint64_t cells = 1;
        for (std::size_t d : y.shape()) cells *= d;
        b += cells * sizeof(T);
    }
    return b;
}

// Independent count: n * n * o * sizeof(T) per split.
template <class T>
std::uint64_t expected_scores(const std::vector<std::size_t>& lengths, std::size_t o)
{
    std::uint64_t b = 0;
    for (std::size_t n : lengths) b += std::uint64_t(n) * n * o * sizeof(T);
    return b;
}

// A document of ones with one row per token, and a view per split.
template <class T>
struct ones_document {
    xt::xtensor<T, 2> doc;
    std::vector<seq_view<const T>> items;
    ones_document(const std::vector<std::size_t>& lengths, std::size_t n_in)
    {
        std::size_t N = 0;
        for (std::size_t n : lengths) N += n;
        doc = xt::ones<T>({N, n_in});
        for (std::size_t k = 0, row = 0; k < lengths.size(); row += lengths[k], ++k) {
            items.push_back(as_const_view(doc).rows_view(row, lengths[k]));
        }
    }
};

template <class T>
void check_predict_keeps_only_outputs(std::size_t o)
{
    INFO("labels " << o << ", " << sizeof(T) * 8 << "-bit");
    scorer_config cfg;
    cfg.n_in = 8;
    cfg.hidden = 16;
    cfg.labels = o;
    biaffine_scorer<T> s(cfg);
    const std::vector<std::size_t> lengths{5, 0, 1, 7, 3, 12};
    const ones_document<T> d(lengths, cfg.n_in);
    const auto& items = d.items;
    const std::uint64_t scores = expected_scores<T>(lengths, o);

    {
        const std::uint64_t before = tracker().current_bytes();
        const std::uint64_t out_before = tracker().stats().output_bytes;
        const score_list<T> Y = s.predict(items);
        const std::uint64_t after = tracker().current_bytes();
        REQUIRE(Y.size() == lengths.size());
        CHECK(after - before == scores + Y.capacity() * sizeof(score_tensor<T>));
        CHECK(after - before == output_bytes_of(Y));
        CHECK(tracker().stats().output_bytes - out_before == after - before);  // all of it is output
    }
    {
        // predict_padded: the padded array [b, L, L(, o)] only.
        const std::size_t b = lengths.size(), L = 12;
        xt::xtensor<T, 3> x = xt::ones<T>({b, L, cfg.n_in});
        const std::uint64_t before = tracker().current_bytes();
        const score_array<T> y = s.predict_padded(x, lengths);
        const std::uint64_t after = tracker().current_bytes();
        CHECK(after - before == std::uint64_t(b) * L * L * o * sizeof(T));
        CHECK(y.size() == b * L * L * o);
    }
    {
        // Streaming keeps nothing at all.
        const std::uint64_t before = tracker().current_bytes();
        std::size_t calls = 0;
        s.predict_stream(items, [&](std::size_t, score_view<const T>) { ++calls; });
        CHECK(calls == lengths.size());
        CHECK(tracker().current_bytes() == before);
    }
    // The full stack: documents in, per-split scores out, nothing else kept.
    std::vector<xt::xtensor<T, 2>> docs;
    std::vector<std::vector<int>> split_lengths{{5, 0, 1}, {7}, {}, {3, 12}};
    for (const auto& ls : split_lengths) {
        std::size_t rows = 0;
        for (int n : ls) rows += static_cast<std::size_t>(n);
        docs.push_back(xt::ones<T>({rows, cfg.n_in}));
    }
    for (int variant = 0; variant < 3; ++variant) {
        INFO("pipeline variant " << variant);
        const std::uint64_t before = tracker().current_bytes();
        score_list<T> Y;
        if (variant == 0) {
            auto pipe = with_splits(with_minibatch_by_padded_size(s, budget::bytes(1 << 14)));
            Y = pipe.predict(docs, split_lengths);
        } else if (variant == 1) {
            auto pipe = with_splits(with_minibatch_by_padded_size(with_pad_seq_unpad_matrix(s), budget::items(16)));
            Y = pipe.predict(docs, split_lengths);
        } else {
            auto pipe = with_splits(s);
            Y = pipe.predict(docs, split_lengths);
        }
        const std::uint64_t after = tracker().current_bytes();
        REQUIRE(Y.size() == lengths.size());
        CHECK(after - before == scores + Y.capacity() * sizeof(score_tensor<T>));
    }
}

}  // namespace

TEST_CASE("inference keeps nothing but its outputs", "[memory][scorer]")
{
    check_predict_keeps_only_outputs<double>(1);
    check_predict_keeps_only_outputs<double>(3);
    check_predict_keeps_only_outputs<float>(1);
    check_predict_keeps_only_outputs<float>(2);
}

TEST_CASE("reported scratch covers what predict carves from a workspace", "[memory][workspace][scorer]")
{
    for (std::size_t o : {std::size_t(1), std::size_t(4)}) {
        scorer_config cfg;
        cfg.n_in = 10;
        cfg.hidden = 12;
        cfg.labels = o;
        biaffine_scorer<float> s(cfg);
        for (const std::vector<std::size_t>& lengths :
             {std::vector<std::size_t>{6, 6, 6, 6}, std::vector<std::size_t>{6, 2, 0, 5}, std::vector<std::size_t>{9}}) {
            std::size_t N = 0, L = 0;
            for (std::size_t n : lengths) {
                N += n;
                L = std::max(L, n);
            }
            INFO("labels " << o << ", " << lengths.size() << " splits, max_len " << L);
            xt::xtensor<float, 2> doc = xt::ones<float>({N, cfg.n_in});
            std::vector<seq_view<const float>> items;
            for (std::size_t k = 0, row = 0; k < lengths.size(); row += lengths[k], ++k) {
                items.push_back(as_const_view(doc).rows_view(row, lengths[k]));
            }
            const batch_cost c = s.cost(lengths.size(), L, mode::eval);
            REQUIRE(c.scratch > 0);
            {
                // No scope: scratch falls back to the heap; its peak is what
                // the scorer needs, and must not exceed the report.
                scoped_peak sp;
                const memory_stats s0 = tracker().stats();
                const std::uint64_t work0 = s0.current_bytes - s0.output_bytes;
                const score_list<float> Y = s.predict(items);
                CHECK(sp.work_peak_bytes() - work0 > 0);
                CHECK(sp.work_peak_bytes() - work0 <= c.scratch);
            }
            {
                // A scope of the reported size: everything is carved from the
                // block, no further work allocation happens.
                workspace_scope ws(c.scratch);
                scoped_peak sp;
                const memory_stats s0 = tracker().stats();
                const std::uint64_t work0 = s0.current_bytes - s0.output_bytes;
                const std::uint64_t allocs0 = s0.allocations;
                const score_list<float> Y = s.predict(items);
                CHECK(sp.work_peak_bytes() == work0);
                // Only the outputs were allocated: the list and one tensor per
                // non-empty split (an empty xtensor allocates nothing).
                std::size_t non_empty = 0;
                for (std::size_t n : lengths) non_empty += n != 0;
                CHECK(tracker().stats().allocations - allocs0 == 1 + non_empty);
            }
            {
                // Streaming carves one split's scores on top: same bounds.
                std::uint64_t no_scope = 0;
                {
                    scoped_peak sp;
                    const memory_stats s0 = tracker().stats();
                    s.predict_stream(items, [](std::size_t, score_view<const float>) {});
                    no_scope = sp.work_peak_bytes() - (s0.current_bytes - s0.output_bytes);
                }
                CHECK(no_scope > 0);
                CHECK(no_scope <= c.scratch);
                workspace_scope ws(c.scratch);
                scoped_peak sp;
                const memory_stats s0 = tracker().stats();
                s.predict_stream(items, [](std::size_t, score_view<const float>) {});
                CHECK(sp.work_peak_bytes() == s0.current_bytes - s0.output_bytes);
                CHECK(tracker().stats().allocations == s0.allocations);
            }
            if (lengths.size() > 1 && lengths.front() == L && lengths.back() == L) {
                // All splits at max_len: the report is exact for the stream
                // path (the documented contract); one alignment unit less and
                // something must fall back to the heap.
                workspace_scope ws(c.scratch - 64);
                scoped_peak sp;
                const memory_stats s0 = tracker().stats();
                s.predict_stream(items, [](std::size_t, score_view<const float>) {});
                CHECK(sp.work_peak_bytes() > s0.current_bytes - s0.output_bytes);
            }
        }
    }
}

TEST_CASE("gradient buffers: none until a forward or a call that hands them out, then zeroed", "[memory][scorer]")
{
    scorer_config cfg;
    cfg.n_in = 12;
    cfg.hidden = 6;
    cfg.labels = 3;
    const std::uint64_t before = tracker().current_bytes();
    biaffine_scorer<float> s(cfg);
    std::uint64_t values = 0;
    for (const auto& p : std::as_const(s).parameters()) {
        values += p.size * sizeof(float);
        REQUIRE(p.grad == nullptr);  // the const listing allocates nothing
    }
    // Construction: the parameter values only.
    REQUIRE(tracker().current_bytes() - before == values);
    REQUIRE_FALSE(s.has_gradients());

    // Inference, set_parameter and initialize leave them unallocated.
    std::mt19937 rng(4);
    std::uniform_real_distribution<float> u(-1.f, 1.f);
    std::vector<float> x(7 * cfg.n_in);
    for (float& v : x) v = u(rng);
    const std::vector<seq_view<const float>> items{{x.data(), 4, cfg.n_in, static_cast<std::ptrdiff_t>(cfg.n_in), 1},
                                                   {x.data() + 4 * cfg.n_in, 3, cfg.n_in,
                                                    static_cast<std::ptrdiff_t>(cfg.n_in), 1}};
    (void)s.predict(items);
    s.predict_stream(items, [](std::size_t, score_view<const float>) {});
    s.set_parameter("head_bias", xt::xtensor<double, 1>(xt::ones<double>({cfg.hidden})));
    s.initialize(9);
    REQUIRE_FALSE(s.has_gradients());
    REQUIRE(tracker().current_bytes() - before == values);

    // The non-const parameters() hands out valid, zeroed gradients: one
    // more parameter-sized allocation, exactly.
    auto params = s.parameters();
    REQUIRE(s.has_gradients());
    REQUIRE(tracker().current_bytes() - before == 2 * values);
    for (const auto& p : params) {
        REQUIRE(p.grad != nullptr);
        for (std::size_t i = 0; i < p.size; ++i) REQUIRE(p.grad[i] == 0.f);
    }
    (void)s.parameters();
    s.zero_grad();
    REQUIRE(tracker().current_bytes() - before == 2 * values);  // allocated once

    // A forward in any mode allocates them (its callback accumulates into them).
    biaffine_scorer<float> t(cfg);
    auto fw = t.forward(items, mode::eval);
    REQUIRE(t.has_gradients());
    // So do the d_*() accessors, with zeros.
    biaffine_scorer<float> r(cfg);
    REQUIRE(r.d_bilinear_weight().size() == cfg.labels * (cfg.hidden + 1) * (cfg.hidden + 1));
    REQUIRE(r.has_gradients());
    for (float g : r.d_head_weight()) REQUIRE(g == 0.f);
}

TEST_CASE("training with recompute_in_backward peaks within outputs + budget + dX", "[memory][scorer][with_splits]")
{
    // Everything a training step keeps beyond its batch (the batcher's
    // input-order index, the saved split views, with_splits' lengths and dX
    // views, the gradient snapshot) is paid out of the budget: the peak from
    // forward to the end of backprop is at most the outputs, the budget, the
    // input-sized dX and the caller's own per-split gradient views.
    std::mt19937 rng(11);
    for (const train_output to : {train_output::probabilities, train_output::logits}) {
        for (const std::size_t o : {std::size_t(1), std::size_t(3)}) {
            scorer_config cfg;
            cfg.n_in = 32;
            cfg.hidden = 16;
            cfg.labels = o;
            cfg.recompute_in_backward = true;
            cfg.train_outputs = to;
            biaffine_scorer<float> s(cfg);
            s.zero_grad();  // the gradients are parameters: allocated before the step, not counted
            std::vector<xt::xtensor<float, 2>> docs;
            std::vector<std::vector<int>> lengths;
            std::uint64_t dx_bytes = 0;
            std::size_t n_splits = 0;
            for (int d = 0; d < 3; ++d) {
                std::vector<int> l(300);
                int rows = 0;
                for (int& n : l) rows += n = std::uniform_int_distribution<int>(1, 25)(rng);
                xt::xtensor<float, 2> doc = xt::zeros<float>({static_cast<std::size_t>(rows), cfg.n_in});
                for (float& v : doc) v = std::uniform_real_distribution<float>(-1.f, 1.f)(rng);
                docs.push_back(std::move(doc));
                lengths.push_back(std::move(l));
                dx_bytes += static_cast<std::uint64_t>(rows) * cfg.n_in * sizeof(float);
                n_splits += 300;
            }
            const std::uint64_t B = 256 << 10;
            auto batcher = with_minibatch_by_padded_size(s, budget::bytes(B));
            auto pipe = with_splits(batcher);
            INFO("o=" << o << " logits=" << (to == train_output::logits));
            const std::uint64_t before = tracker().current_bytes();
            const std::uint64_t out_before = tracker().stats().output_bytes;
            std::uint64_t peak = 0, outputs = 0;
            {
                scoped_peak sp;
                auto fw = pipe.forward(docs, lengths, mode::train);
                outputs = tracker().stats().output_bytes - out_before;
                const auto views = decltype(pipe)::grad_views(fw.first);
                const auto dX = fw.second(span<const score_view<const float>>(views.data(), views.size()));
                REQUIRE(dX.size() == docs.size());
                peak = sp.peak_increase();
            }
            REQUIRE(batcher.batch_count() > 10);  // many batches, the bound is not trivial
            const std::uint64_t view_bytes = n_splits * sizeof(score_view<const float>);
            INFO("peak " << peak << " outputs " << outputs << " dX " << dx_bytes << " views " << view_bytes);
            REQUIRE(peak <= outputs + B + dx_bytes + view_bytes);
            REQUIRE(tracker().current_bytes() == before);
        }
    }
}

TEST_CASE("tracking_allocator: large blocks are 2 MiB-aligned mappings, reused once freed, counted exactly",
          "[memory]")
{
    const std::size_t big = static_cast<std::size_t>(BIAFFINE_HUGE_PAGE_MIN_BYTES);
    if (!detail::is_large_block(big)) {
        WARN("SKIPPED: large blocks are off here (not Linux, or BIAFFINE_HUGE_PAGE_MIN_BYTES 0): operator new "
             "serves every block");
        return;
    }
    CHECK_FALSE(detail::is_large_block(big - 1));
    release_cached_blocks();  // nothing cached: the first block is a fresh mapping
    tracker().reset_peak();
    const memory_stats s0 = tracker().stats();
    tracking_allocator<float> af;
    // Just over the threshold and an odd count: the mapping ends on a small page.
    const std::size_t n = big / sizeof(float) + 12345;
    float* p = af.allocate(n);
    const memory_stats s1 = tracker().stats();
    CHECK(s1.current_bytes - s0.current_bytes == n * sizeof(float));  // the request, not the mapping
    CHECK(s1.allocations - s0.allocations == 1);
    CHECK(reinterpret_cast<std::uintptr_t>(p) % (std::uintptr_t(2) << 20) == 0);
    // Every element, the last one included, is writable.
    p[0] = 1.0f;
    p[n - 1] = 2.0f;
    CHECK(p[0] + p[n - 1] == 3.0f);
    // A small block beside it still comes from operator new.
    double* q = tracking_allocator<double>().allocate(3);
    CHECK(reinterpret_cast<std::uintptr_t>(q) % tracking_allocator<double>::alignment == 0);
    tracking_allocator<double>().deallocate(q, 3);
    af.deallocate(p, n);
    const memory_stats s2 = tracker().stats();
    CHECK(s2.current_bytes == s0.current_bytes);  // cached, not counted
    CHECK(s2.frees - s0.frees == 2);
    // A second block of the same size takes the cached one, as it was left
    // (no fault, no zeroing): callers that need zeros fill them.
    float* r = af.allocate(n);
    CHECK(r == p);
    CHECK(r[n - 1] == 2.0f);
    af.deallocate(r, n);
    CHECK(release_cached_blocks() == detail::large_block_span(n * sizeof(float)));
}

TEST_CASE("cached blocks: reused when freed, never more mapped than the most live at once, released on request",
          "[memory]")
{
    const std::size_t min = static_cast<std::size_t>(BIAFFINE_CACHED_BLOCK_MIN_BYTES);
    if (!detail::is_large_block(min, min)) {
        WARN("SKIPPED: cached blocks come from operator new here (not Linux, or BIAFFINE_CACHED_BLOCK_MIN_BYTES 0)");
        return;
    }
    const std::size_t page = detail::large_block_span(1);
    const std::size_t A = min + 3 * page;  // one block's mapped length
    detail::block_cache cache;        // a cache of its own: its peak starts at zero
    const auto bound = [&] { return cache.live_bytes + cache.cached_bytes <= cache.peak_bytes; };

    void* a = cache.allocate(A);
    void* b = cache.allocate(2 * A);
    CHECK(reinterpret_cast<std::uintptr_t>(a) % detail::huge_page_bytes == 0);
    std::memset(a, 1, A);
    std::memset(b, 2, 2 * A);
    CHECK(cache.peak_bytes == 3 * A);
    cache.free(a);
    CHECK(cache.cached_bytes == A);
    // A request a little smaller takes the freed block (its memory as left).
    void* a2 = cache.allocate(A - A / 10);
    CHECK(a2 == a);
    CHECK(static_cast<unsigned char*>(a2)[0] == 1);
    CHECK(cache.cached_bytes == 0);
    cache.free(a2);
    cache.free(b);
    CHECK(cache.cached_bytes == 3 * A);
    CHECK(cache.live_bytes == 0);
    // Fits neither (the larger is too small): both are unmapped to stay under the peak.
    void* c = cache.allocate(3 * A);
    CHECK(cache.cached_bytes == 0);
    CHECK(bound());
    void* d = cache.allocate(A);  // a new peak: 4A
    CHECK(cache.peak_bytes == 4 * A);
    cache.free(c);
    cache.free(d);
    // 1.2A fits A not at all and 3A only with more than a quarter to spare:
    // a new block, and the largest cached one goes to keep live + cached <= 4A.
    void* e = cache.allocate(A + A / 5 / page * page);
    CHECK(cache.cached_bytes == A);
    CHECK(bound());
    cache.free(e);
    CHECK(cache.release() == A + A + A / 5 / page * page);
    CHECK(cache.cached_bytes == 0);

    // Through the allocator: the process-wide cache, counted only while allocated.
    release_cached_blocks();
    tracking_allocator<float, cached_tag> ak;
    const std::size_t n = min / sizeof(float) + 777;
    const memory_stats s0 = tracker().stats();
    float* p = ak.allocate(n);
    CHECK(tracker().stats().current_bytes - s0.current_bytes == n * sizeof(float));
    ak.deallocate(p, n);
    CHECK(tracker().stats().current_bytes == s0.current_bytes);
    float* q = ak.allocate(n);
    CHECK(q == p);
    ak.deallocate(q, n);
    CHECK(release_cached_blocks() == detail::large_block_span(n * sizeof(float)));
    CHECK(release_cached_blocks() == 0);
}

TEST_CASE("output chunks: blocks cut in order, a chunk kept once its last block is freed, reused, released",
          "[memory]")
{
    using detail::output_chunks;
    const std::size_t C = output_chunks::chunk_bytes;
    if (!output_chunks::fits(1)) {
        WARN("SKIPPED: scores come from operator new here (not Linux, BIAFFINE_OUTPUT_CHUNK_BYTES 0, or "
             "AddressSanitizer)");
        return;
    }
    CHECK(output_chunks::fits(C / 4));
    CHECK_FALSE(output_chunks::fits(C / 4 + 1));
    output_chunks chunks;  // chunks of its own: nothing mapped yet
    const auto base = [&](void* p) { return reinterpret_cast<std::uintptr_t>(p) / C; };
    const auto addr = [](void* p) { return reinterpret_cast<std::uintptr_t>(p); };

    // In order, 64-byte aligned, an empty block taking one step of 64, all
    // in one chunk that is aligned to its size.
    char* a = static_cast<char*>(chunks.allocate(100));
    char* b = static_cast<char*>(chunks.allocate(0));
    char* c = static_cast<char*>(chunks.allocate(C / 4));
    CHECK(addr(a) % 64 == 0);
    CHECK(addr(b) == addr(a) + 128);
    CHECK(addr(c) == addr(b) + 64);
    CHECK(base(a) == base(c));
    CHECK(chunks.mapped_bytes() == C);
    std::memset(a, 1, 100);
    std::memset(c, 3, C / 4);  // every byte of the largest block is writable
    CHECK(a[99] == 1);

    // Filling the chunk: the block that does not fit opens a second one.
    std::vector<char*> first{a, b, c};
    while (first.size() < 5) first.push_back(static_cast<char*>(chunks.allocate(C / 4)));
    CHECK(base(first.back()) == base(a));  // header, 128, 64 and three quarters: a fourth would not fit
    char* d = static_cast<char*>(chunks.allocate(C / 4));
    CHECK(base(d) != base(a));
    CHECK(chunks.mapped_bytes() == 2 * C);
    CHECK(chunks.kept_bytes() == 0);

    // One block of the first chunk held keeps it from the kept list.
    for (std::size_t i = 1; i < first.size(); ++i) chunks.free(first[i]);
    CHECK(chunks.kept_bytes() == 0);
    chunks.free(a);
    CHECK(chunks.kept_bytes() == C);
    CHECK(chunks.mapped_bytes() == 2 * C);

    // The second chunk full, the next block comes from the kept one, as it
    // was left: nothing new is mapped.
    std::vector<char*> second{d};
    while (second.size() < 3) second.push_back(static_cast<char*>(chunks.allocate(C / 4)));
    char* e = static_cast<char*>(chunks.allocate(C / 4));
    CHECK(base(e) == base(a));
    CHECK(static_cast<unsigned char>(e[0]) == 1);  // a's first byte: not zeroed
    CHECK(chunks.mapped_bytes() == 2 * C);
    CHECK(chunks.kept_bytes() == 0);

    // The current chunk, once empty, starts over.
    chunks.free(e);
    char* f = static_cast<char*>(chunks.allocate(C / 4));
    CHECK(f == e);
    chunks.free(f);
    for (char* p : second) chunks.free(p);
    CHECK(chunks.kept_bytes() == C);  // the second chunk; the first is current and empty
    CHECK(chunks.release() == 2 * C);
    CHECK(chunks.mapped_bytes() == 0);
    CHECK(chunks.release() == 0);

    // At most BIAFFINE_OUTPUT_CHUNK_CACHE_BYTES of freed chunks are kept; the
    // rest are unmapped (mapped, never touched: no memory is used).
    const std::size_t cap = static_cast<std::size_t>(BIAFFINE_OUTPUT_CHUNK_CACHE_BYTES) / C;
    std::vector<void*> blocks;
    for (std::size_t i = 0; i < 4 * (cap + 3); ++i) blocks.push_back(chunks.allocate(C / 4 - 64));
    CHECK(chunks.mapped_bytes() == (cap + 3) * C);
    for (void* p : blocks) chunks.free(p);
    CHECK(chunks.kept_bytes() == cap * C);
    CHECK(chunks.mapped_bytes() == (cap + 1) * C);  // and the current one
    CHECK(chunks.release() == (cap + 1) * C);
}

TEST_CASE("output chunks: scores counted as asked, and scoring again after freeing maps nothing new", "[memory]")
{
    using detail::output_chunks;
    if (!output_chunks::fits(1)) {
        WARN("SKIPPED: scores come from operator new here (not Linux, BIAFFINE_OUTPUT_CHUNK_BYTES 0, or "
             "AddressSanitizer)");
        return;
    }
    scorer_config cfg;
    cfg.n_in = 8;
    cfg.hidden = 16;
    cfg.labels = 50;
    biaffine_scorer<float> s(cfg);
    const std::vector<std::size_t> lengths{40, 3, 100, 17, 0, 64, 25};  // 100: 2 MB of scores, a quarter chunk at most
    const ones_document<float> d(lengths, cfg.n_in);
    const auto& items = d.items;
    // 3.3 MB of scores per call: once they are freed the chunk they were cut
    // from starts over, so the next call takes the same memory. (The first
    // call may start in a chunk where other scores live and move on to one
    // more.)
    auto& chunks = output_chunks::instance();
    const std::size_t mapped_before = chunks.mapped_bytes();
    std::size_t mapped_first = 0;
    const float* first_block = nullptr;
    for (int call = 0; call < 8; ++call) {
        INFO("call " << call);
        const std::uint64_t before = tracker().current_bytes();
        {
            const score_list<float> Y = s.predict(items);
            CHECK(tracker().current_bytes() - before == output_bytes_of(Y));  // what was asked, not the chunks
            for (const auto& y : Y) {
                CHECK(reinterpret_cast<std::uintptr_t>(y.data()) % tracking_allocator<float>::alignment == 0);
            }
            // Ones in: a label's score is the same for every pair, the last element included.
            CHECK(Y[2](99, 99, 49) == Approx(Y[2](0, 0, 49)).epsilon(1e-5));
            if (call == 1) first_block = Y[0].data();
            if (call > 1) CHECK(Y[0].data() == first_block);
        }
        CHECK(tracker().current_bytes() == before);
        if (call == 0) mapped_first = chunks.mapped_bytes();
        CHECK(chunks.mapped_bytes() == mapped_first);
    }
    CHECK(chunks.mapped_bytes() - mapped_before <= output_chunks::chunk_bytes);
}
