// Tests for biaffine/batching.hpp: the spaCy parity vector, an independent
// re-implementation of spaCy's minibatch_by_padded_size compared on random
// inputs, budgets (zero, megabytes overflow) and the generic planner with a
// byte-like cost.
#include <catch2/catch.hpp>

#include <cstddef>
#include <cstdint>
#include <iostream>
#include <limits>
#include <random>
#include <vector>

#include "biaffine/batching.hpp"
#include "layer_helpers.hpp"

using biaffine::budget;
using biaffine::budget_error;
using biaffine::minibatch_by_padded_size;
using sizes = std::vector<std::size_t>;
using batches = std::vector<sizes>;

namespace {

batches spacy_rule(const sizes& lengths, std::uint64_t size, std::size_t buffer)
{
    return th::reference_batches(
        lengths, buffer, [](std::size_t count, std::size_t len) { return std::uint64_t(count) * len; }, size);
}

}  // namespace

TEST_CASE("minibatch_by_padded_size: the spaCy parity vector", "[batching]")
{
    REQUIRE(minibatch_by_padded_size({5, 6, 5, 9}, 18) == batches{{3}, {0, 1, 2}});
    // The reference re-implementation agrees with the hand-worked result.
    REQUIRE(spacy_rule({5, 6, 5, 9}, 18, 256) == batches{{3}, {0, 1, 2}});
}

TEST_CASE("minibatch_by_padded_size: hand-worked cases", "[batching]")
{
    // Empty input: no batches.
    REQUIRE(minibatch_by_padded_size({}, 10).empty());
    // An item longer than the size still runs, alone.
    REQUIRE(minibatch_by_padded_size({50}, 10) == batches{{0}});
    REQUIRE(minibatch_by_padded_size({50, 1, 1}, 10) == batches{{0}, {1, 2}});
    // Ties are broken by index: equal lengths, 3 fit per batch (3 * 3 <= 9).
    REQUIRE(minibatch_by_padded_size({3, 3, 3, 3, 3}, 9) == batches{{3, 4}, {0, 1, 2}});
    // Zero lengths: 0 * (count + 1) <= size always, so they all go together.
    REQUIRE(minibatch_by_padded_size({0, 0, 0, 0}, 1) == batches{{0, 1, 2, 3}});
    // The buffer cuts the input into independent groups, in order.
    REQUIRE(minibatch_by_padded_size({1, 9, 1, 9}, 100, 2) == batches{{0, 1}, {2, 3}});
    REQUIRE(minibatch_by_padded_size({4, 1, 4, 1}, 4, 2) == batches{{0}, {1}, {2}, {3}});
}

TEST_CASE("minibatch_by_padded_size matches an independent re-implementation on random inputs", "[batching]")
{
    std::mt19937 rng(20240601);
    std::size_t checked = 0;
    for (int trial = 0; trial < 600; ++trial) {
        const std::size_t n = std::uniform_int_distribution<std::size_t>(0, 700)(rng);
        const std::size_t max_len = std::uniform_int_distribution<std::size_t>(1, 120)(rng);
        sizes lengths(n);
        for (auto& l : lengths) {
            // Some zeros and many repeats, so the tie-break matters.
            l = std::uniform_int_distribution<int>(0, 9)(rng) == 0
                    ? 0
                    : std::uniform_int_distribution<std::size_t>(1, max_len)(rng);
        }
        const std::uint64_t size = std::uniform_int_distribution<std::uint64_t>(1, 3000)(rng);
        const std::size_t buffers[] = {1, 2, 7, 64, 256, 1000};
        const std::size_t buffer = buffers[std::uniform_int_distribution<int>(0, 5)(rng)];
        const batches got = minibatch_by_padded_size(lengths, size, buffer);
        const batches want = spacy_rule(lengths, size, buffer);
        INFO("trial " << trial << " n=" << n << " size=" << size << " buffer=" << buffer);
        REQUIRE(got == want);
        // Independent sanity: every index exactly once; a batch over the size
        // is a lone item.
        std::vector<int> seen(n, 0);
        for (const auto& b : got) {
            std::size_t mx = 0;
            for (auto i : b) {
                ++seen[i];
                mx = std::max(mx, lengths[i]);
            }
            if (b.size() > 1) REQUIRE(mx * b.size() <= size);
        }
        for (int s : seen) REQUIRE(s == 1);
        ++checked;
    }
    std::cout << "[batching] random spaCy-rule comparisons: " << checked << "\n";
}

TEST_CASE("plan_buffer with a non-linear (byte-like) cost matches the reference rule", "[batching]")
{
    std::mt19937 rng(77);
    for (int trial = 0; trial < 300; ++trial) {
        const std::size_t n = std::uniform_int_distribution<std::size_t>(1, 300)(rng);
        sizes lengths(n);
        for (auto& l : lengths) l = std::uniform_int_distribution<std::size_t>(0, 80)(rng);
        // count * L^2 + count * L * 3: the shape of a scorer's working set.
        auto cost = [](std::size_t count, std::size_t len) {
            return std::uint64_t(count) * len * len + std::uint64_t(count) * len * 3;
        };
        const std::uint64_t limit = std::uniform_int_distribution<std::uint64_t>(1, 60000)(rng);
        sizes order(n);
        std::vector<biaffine::planned_batch> plan(n);
        const std::size_t nb = biaffine::detail::plan_buffer(biaffine::span<const std::size_t>(lengths.data(), n),
                                                              limit, cost, biaffine::span<std::size_t>(order.data(), n),
                                                              biaffine::span<biaffine::planned_batch>(plan.data(), n));
        batches got;
        for (std::size_t b = 0; b < nb; ++b) {
            sizes batch(order.begin() + static_cast<std::ptrdiff_t>(plan[b].first),
                        order.begin() + static_cast<std::ptrdiff_t>(plan[b].first + plan[b].count));
            std::size_t mx = 0;
            for (auto i : batch) mx = std::max(mx, lengths[i]);
            REQUIRE(plan[b].max_len == mx);
            // oversize <=> a lone item whose cost exceeds the limit
            REQUIRE(plan[b].oversize == (cost(plan[b].count, mx) > limit));
            if (plan[b].oversize) REQUIRE(plan[b].count == 1);
            got.push_back(batch);
        }
        INFO("trial " << trial << " limit " << limit);
        REQUIRE(got == th::reference_batches(lengths, n, cost, limit));
    }
}

TEST_CASE("budgets: zero is refused, megabytes overflow is checked", "[batching][errors]")
{
    REQUIRE_THROWS_AS(budget::items(0), budget_error);
    REQUIRE_THROWS_AS(budget::bytes(0), budget_error);
    REQUIRE_THROWS_AS(budget::megabytes(0), budget_error);
    REQUIRE_THROWS_WITH(budget::bytes(0), Catch::Contains("must be positive") && Catch::Contains("0"));
    REQUIRE_THROWS_AS(minibatch_by_padded_size({1, 2}, 0), budget_error);
    REQUIRE_THROWS_AS(minibatch_by_padded_size({1, 2}, 5, 0), budget_error);
    // 2^44 MB = 2^64 bytes: one past what 64 bits hold.
    REQUIRE_THROWS_AS(budget::megabytes(std::uint64_t(1) << 44), biaffine::overflow_error);
    REQUIRE_THROWS_WITH(budget::megabytes(std::uint64_t(1) << 44), Catch::Contains("overflows 64 bits"));
    REQUIRE(budget::megabytes((std::uint64_t(1) << 44) - 1).value ==
            ((std::uint64_t(1) << 44) - 1) * (std::uint64_t(1) << 20));
    REQUIRE(budget::megabytes(3).value == 3u * 1024u * 1024u);
    REQUIRE(budget::items(7).kind == biaffine::budget_kind::padded_items);
    REQUIRE(budget::bytes(7).kind == biaffine::budget_kind::bytes);
}
