// fuzz/fuzz_batching.cpp - the batching rule on arbitrary lengths, budgets and buffers.
//
// Two ways in, picked by the first byte:
//   - minibatch_by_padded_size (spaCy's padded-items rule) on any lengths
//     (up to 2^64 - 1), sizes and buffers;
//   - with_minibatch_by_padded_size with a byte budget (or an items budget)
//     around a recording layer whose cost is a fuzzed polynomial
//     a*count*L^2 + b*count*L + c*count + d (charged as planned_bytes), so
//     the byte planner, its bookkeeping deduction, the oversize policies and
//     overflowing costs are all reached.
// Properties: every index appears exactly once; a batch stays within one
// buffer, keeps input order, and either fits the budget or is a lone item
// (counted as oversize, or refused under the throw policy); batches come out
// exactly as an independent re-implementation of the rule says.
#include <algorithm>
#include <cstdio>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <utility>
#include <vector>

#include "biaffine/biaffine.hpp"
#include "fuzz_input.hpp"

using namespace biaffine;
using u128 = unsigned __int128;

namespace {

using batch_list = std::vector<std::vector<std::size_t>>;

/// The rule, written directly from its description: per buffer of `buffer`
/// items, sort by (length, index), grow a batch while cost(count + 1, len)
/// stays within the limit (an item alone always starts one), emit the
/// batches longest first, input order inside.
template <class Cost>
batch_list reference_plan(const std::vector<std::uint64_t>& lengths, std::size_t buffer, u128 limit, Cost cost)
{
    batch_list out;
    for (std::size_t begin = 0; begin < lengths.size(); begin += buffer) {
        const std::size_t end = std::min(lengths.size(), begin + buffer);
        std::vector<std::size_t> idx;
        for (std::size_t i = begin; i < end; ++i) idx.push_back(i);
        std::stable_sort(idx.begin(), idx.end(), [&](std::size_t a, std::size_t b) { return lengths[a] < lengths[b]; });
        batch_list planned;
        std::vector<std::size_t> cur;
        for (std::size_t i : idx) {
            if (!cur.empty() && cost(cur.size() + 1, lengths[i]) > limit) {
                planned.push_back(cur);
                cur.clear();
            }
            cur.push_back(i);
        }
        if (!cur.empty()) planned.push_back(cur);
        std::reverse(planned.begin(), planned.end());
        for (auto& b : planned) {
            std::sort(b.begin(), b.end());
            out.push_back(b);
        }
    }
    return out;
}

void check_partition(const batch_list& batches, std::size_t n, std::size_t buffer)
{
    std::vector<int> seen(n, 0);
    std::size_t last_buffer = 0;
    for (const auto& b : batches) {
        FUZZ_CHECK(!b.empty());
        const std::size_t which = b.front() / buffer;
        FUZZ_CHECK(which >= last_buffer);  // buffers run in order
        last_buffer = which;
        for (std::size_t j = 0; j < b.size(); ++j) {
            FUZZ_CHECK(b[j] < n);
            FUZZ_CHECK(b[j] / buffer == which);  // never across buffers
            if (j > 0) FUZZ_CHECK(b[j - 1] < b[j]);  // input order inside
            ++seen[b[j]];
        }
    }
    for (int s : seen) FUZZ_CHECK(s == 1);  // every index exactly once
}

std::uint64_t draw_length(fuzz::input& in, bool allow_huge)
{
    const std::uint8_t kind = in.u8();
    if (kind < 200) return kind % 40;                              // typical
    if (kind < 240) return in.u16();                               // long
    if (!allow_huge) return in.u32();  // L^2 may overflow 64 bits, not 128
    return kind < 250 ? in.u64() >> (in.u8() % 64) : in.u64();  // anything
}

void fuzz_spacy_rule(fuzz::input& in)
{
    const std::size_t n = in.small(0, 80);
    std::uint64_t size;
    switch (in.u8() % 4) {
    case 0: size = in.u64(); break;
    case 1: size = 0; break;
    default: size = 1 + in.u16() % 600; break;
    }
    const std::size_t buffer = in.flag() ? in.small(0, 12) : 256;
    std::vector<std::uint64_t> lengths(n);
    for (auto& l : lengths) l = draw_length(in, true);
    const std::vector<std::size_t> ls(lengths.begin(), lengths.end());
    if (size == 0 || buffer == 0) {
        bool threw = false;
        try {
            minibatch_by_padded_size(ls, size, buffer);
        } catch (const budget_error&) {
            threw = true;
        }
        FUZZ_CHECK(threw);
        return;
    }
    const batch_list got = minibatch_by_padded_size(ls, size, buffer);  // must not throw
    check_partition(got, n, buffer);
    for (const auto& b : got) {
        u128 max_len = 0;
        for (std::size_t i : b) max_len = std::max<u128>(max_len, lengths[i]);
        FUZZ_CHECK(b.size() == 1 || static_cast<u128>(b.size()) * max_len <= size);
    }
    const auto cost = [](std::size_t count, std::uint64_t len) { return static_cast<u128>(count) * len; };
    FUZZ_CHECK(got == reference_plan(lengths, buffer, size, cost));
}

/// A split-list layer that records the batches it is handed and reports a
/// fuzzed polynomial cost (heap bytes, so no workspace is reserved). Only
/// predict_stream runs; predict and forward complete the layer protocol.
struct recording_layer {
    using value_type = double;
    using backprop_type = split_backprop<double>;
    const double* base = nullptr;
    std::uint64_t a = 0, b = 0, c = 0, d = 0;
    mutable std::mutex mutex;
    mutable batch_list batches;

    std::size_t n_in() const { return 1; }
    std::size_t labels() const { return 1; }
    score_tensor<double>::shape_type score_shape(std::size_t n) const { return {n, n}; }

    u128 exact_cost(std::size_t count, std::uint64_t len) const
    {
        const u128 cl = static_cast<u128>(count) * len;
        return a * cl * len + b * cl + static_cast<u128>(c) * count + d;
    }
    batch_cost cost(std::size_t count, std::size_t len, mode = mode::eval) const
    {
        using detail::checked_add;
        using detail::checked_product;
        batch_cost r;
        r.heap = checked_add(checked_add(checked_product("mock", a, count, len, len), checked_product("mock", b, count, len),
                                         "mock"),
                             checked_add(checked_product("mock", c, count), d, "mock"), "mock");
        return r;
    }
    template <class Items, class Sink>
    void predict_stream(const Items& X, Sink&& sink) const
    {
        std::vector<std::size_t> got;
        for (std::size_t j = 0; j < X.size(); ++j) got.push_back(static_cast<std::size_t>(X[j].data - base));
        {
            std::lock_guard<std::mutex> lock(mutex);
            batches.push_back(got);
        }
        for (std::size_t j = 0; j < X.size(); ++j) sink(j, score_view<const double>{nullptr, 0, 1, 0});
    }
    template <class Items>
    score_list<double> predict(const Items&) const
    {
        throw error("recording_layer: only predict_stream is fuzzed");
    }
    template <class Items>
    std::pair<score_list<double>, backprop_type> forward(const Items&, mode = mode::train)
    {
        throw error("recording_layer: only predict_stream is fuzzed");
    }
};

void fuzz_byte_planner(fuzz::input& in)
{
    const std::size_t n = in.small(0, 60);
    recording_layer layer;
    layer.a = in.small(0, 16);
    layer.b = in.u8();
    layer.c = in.u8();
    layer.d = in.u16();
    const bool items = in.u8() % 4 == 0;
    std::uint64_t value;
    switch (in.u8() % 4) {
    case 0: value = in.u64(); break;
    case 1: value = in.u32(); break;
    default: value = 1 + in.u16(); break;
    }
    if (value == 0) value = 1;
    batch_options opts;
    opts.buffer = in.flag() ? in.small(1, 12) : 256;
    opts.oversize = in.flag() ? oversize_policy::throw_error : oversize_policy::run_alone;
    // Now and then: a thread start costs more than a whole run.
    opts.threads = in.u8() % 8 == 0 ? 2 + in.u8() % 2 : 1;
    std::vector<std::uint64_t> lengths(n);
    for (auto& l : lengths) l = draw_length(in, false);

    std::vector<double> storage(n + 1, 0.0);
    layer.base = storage.data();
    std::vector<seq_view<const double>> splits;
    for (std::size_t i = 0; i < n; ++i) splits.push_back({storage.data() + i, static_cast<std::size_t>(lengths[i]), 1, 0, 1});

    // A byte budget at or below one split's bookkeeping is refused when the
    // layer is built (whatever the split list), and nothing runs.
    using batcher_t = decltype(with_minibatch_by_padded_size(layer, budget::items(1), opts));
    if (!items && value <= batcher_t::min_bookkeeping_bytes()) {
        bool refused = false;
        try {
            with_minibatch_by_padded_size(layer, budget::bytes(value), opts);
        } catch (const budget_error&) {
            refused = true;
        }
        FUZZ_CHECK(refused);
        FUZZ_CHECK(layer.batches.empty());
        return;
    }
    auto batcher = with_minibatch_by_padded_size(layer, items ? budget::items(value) : budget::bytes(value), opts);
    u128 limit = value;
    bool bookkeeping_too_big = false;
    if (!items) {
        const std::uint64_t own = batcher.bookkeeping_bytes(n);
        if (n != 0 && own >= value) bookkeeping_too_big = true;
        else limit -= own;
    }
    const u128 max64 = ~std::uint64_t(0);
    // A byte budget is charged what the batcher documents (planned_bytes:
    // the layer's cost plus the list of score tensors it hands back); a
    // charge that overflows 64 bits counts as 2^64.
    const auto cost = [&](std::size_t count, std::uint64_t len) -> u128 {
        if (items) return static_cast<u128>(count) * len;
        if (layer.exact_cost(count, len) > max64) return max64 + 1;
        try {
            return batcher.planned_bytes(count, static_cast<std::size_t>(len));
        } catch (const overflow_error&) {
            return max64 + 1;
        }
    };

    std::vector<int> delivered(n, 0);
    const char* thrown = nullptr;
    try {
        batcher.predict_stream(splits, [&](std::size_t k, score_view<const double>) {
            FUZZ_CHECK(k < n);
            ++delivered[k];
        });
    } catch (const overflow_error& e) {
        thrown = "overflow";
        if (std::getenv("FUZZ_VERBOSE") != nullptr) std::fprintf(stderr, "(thrown: %s)\n", e.what());
    } catch (const budget_error& e) {
        thrown = "budget";
        if (std::getenv("FUZZ_VERBOSE") != nullptr) std::fprintf(stderr, "(thrown: %s)\n", e.what());
    }

    if (bookkeeping_too_big) {
        FUZZ_CHECK(thrown != nullptr && thrown[0] == 'b');
        FUZZ_CHECK(layer.batches.empty());
        return;
    }
    const batch_list expected = reference_plan(lengths, opts.buffer, limit, cost);
    // Where the reference says the run must stop: the first buffer holding a
    // lone item whose cost overflows 64 bits (it cannot be sized), or, under
    // the throw policy, one over the limit. The library plans a whole buffer
    // before running it, so every earlier buffer has run.
    std::size_t stop_buffer = SIZE_MAX;
    const char* stop_kind = nullptr;
    for (const auto& bt : expected) {
        const std::size_t w = bt.front() / opts.buffer;
        if (w > stop_buffer) break;
        if (bt.size() != 1) continue;
        const u128 c1 = cost(1, lengths[bt.front()]);
        if (c1 > max64) {
            stop_buffer = w;
            stop_kind = "overflow";
        } else if (c1 > limit && opts.oversize == oversize_policy::throw_error && stop_kind == nullptr) {
            stop_buffer = w;
            stop_kind = "budget";
        }
    }
    // Under an items budget a batch may fit the budget and still have a byte
    // cost that overflows 64 bits: running it (sizing its workspace) throws
    // overflow_error instead of allocating. The run stops in that buffer.
    if (items) {
        for (const auto& bt : expected) {
            const std::size_t w = bt.front() / opts.buffer;
            if (w >= stop_buffer) break;
            std::uint64_t max_len = 0;
            for (std::size_t i : bt) max_len = std::max(max_len, lengths[i]);
            if (layer.exact_cost(bt.size(), max_len) <= max64) continue;
            FUZZ_CHECK(thrown != nullptr && std::strcmp(thrown, "overflow") == 0);
            for (std::size_t i = 0; i < n; ++i) {
                if (i / opts.buffer < w) FUZZ_CHECK(delivered[i] == 1);
                if (i / opts.buffer > w) FUZZ_CHECK(delivered[i] == 0);
                FUZZ_CHECK(delivered[i] <= 1);
            }
            for (const auto& r : layer.batches) {
                FUZZ_CHECK(std::find(expected.begin(), expected.end(), r) != expected.end());
            }
            return;
        }
    }
    if (stop_kind == nullptr) {
        FUZZ_CHECK(thrown == nullptr);
        for (int dlv : delivered) FUZZ_CHECK(dlv == 1);
    } else {
        // Planning a buffer (which sizes every lone item) comes before the
        // throw policy looks at it, so an overflow there wins.
        FUZZ_CHECK(thrown != nullptr && std::strcmp(thrown, stop_kind) == 0);
        for (std::size_t i = 0; i < n; ++i) FUZZ_CHECK(delivered[i] == (i / opts.buffer < stop_buffer ? 1 : 0));
    }

    // The batches that ran, in order (with threads, order within a buffer
    // is free): the reference's, each within the limit or a lone item.
    batch_list ran = layer.batches;
    batch_list want;
    for (const auto& bt : expected) {
        if (bt.front() / opts.buffer < stop_buffer) want.push_back(bt);
    }
    if (opts.threads > 1) {
        auto by_buffer = [&](const std::vector<std::size_t>& x, const std::vector<std::size_t>& y) {
            return x.front() / opts.buffer != y.front() / opts.buffer ? x.front() / opts.buffer < y.front() / opts.buffer
                                                                      : x < y;
        };
        std::sort(ran.begin(), ran.end(), by_buffer);
        std::sort(want.begin(), want.end(), by_buffer);
    }
    if (ran != want) {  // say what differs before failing
        auto print = [](const char* what, const batch_list& bl) {
            std::fprintf(stderr, "%s:", what);
            for (const auto& bt : bl) {
                std::fprintf(stderr, " [");
                for (std::size_t i : bt) std::fprintf(stderr, " %zu", i);
                std::fprintf(stderr, " ]");
            }
            std::fprintf(stderr, "\n");
        };
        std::fprintf(stderr, "items=%d limit=%llu buffer=%zu threads=%zu cost=%llu*c*L^2+%llu*c*L+%llu*c+%llu\nlengths:",
                     items ? 1 : 0, static_cast<unsigned long long>(static_cast<std::uint64_t>(limit)), opts.buffer,
                     opts.threads, static_cast<unsigned long long>(layer.a), static_cast<unsigned long long>(layer.b),
                     static_cast<unsigned long long>(layer.c), static_cast<unsigned long long>(layer.d));
        for (auto l : lengths) std::fprintf(stderr, " %llu", static_cast<unsigned long long>(l));
        std::fprintf(stderr, "\n");
        print("ran ", ran);
        print("want", want);
    }
    FUZZ_CHECK(ran == want);
    std::uint64_t lone_over = 0;
    for (const auto& bt : ran) {
        std::uint64_t max_len = 0;
        for (std::size_t i : bt) max_len = std::max(max_len, lengths[i]);
        const u128 c = cost(bt.size(), max_len);
        FUZZ_CHECK(bt.size() == 1 || c <= limit);
        if (c > limit) ++lone_over;
    }
    FUZZ_CHECK(batcher.oversize_count() == lone_over);
    if (stop_kind == nullptr) check_partition(ran, n, opts.buffer);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size)
{
    fuzz::input in(data, size);
    if (in.u8() % 2 == 0) {
        fuzz_spacy_rule(in);
    } else {
        fuzz_byte_planner(in);
    }
    return 0;
}
