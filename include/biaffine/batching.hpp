// biaffine/batching.hpp - the batching rule: which splits go together.
//
// Items are taken `buffer` at a time, sorted by (length, index) and added
// greedily to the current batch while the batch stays within the budget; an
// item alone is always a batch; batches come out longest first and keep input
// order inside. With a padded-items budget this is exactly spaCy's
// minibatch_by_padded_size (length * (count + 1) <= size). With a byte budget
// the cost of a batch is whatever the inner layer reports for (count,
// max_len): the true working set, so memory is bounded outright rather than
// through count * L.
#pragma once

#include "biaffine/abi.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <numeric>
#include <utility>

#include "biaffine/detail/checked.hpp"
#include "biaffine/errors.hpp"
#include "biaffine/tensor.hpp"

BIAFFINE_NAMESPACE_BEGIN

/// What a budget counts.
enum class budget_kind {
    padded_items, ///< count * max_len (spaCy's rule, for parity)
    bytes         ///< the inner layer's reported working set in bytes
};

/// A batch budget: `budget::items(n)` or `budget::bytes(b)`. Zero is refused.
struct budget {
    budget_kind kind = budget_kind::bytes; ///< what value counts
    std::uint64_t value = 0;               ///< padded items or bytes

    /// At most `n` padded items (count * max_len) per batch: spaCy's rule.
    static budget items(std::uint64_t n) { return check({budget_kind::padded_items, n}); }
    /// At most `b` bytes of reported working set per batch.
    static budget bytes(std::uint64_t b) { return check({budget_kind::bytes, b}); }
    /// `mb` MiB (2^20 bytes), checked for overflow.
    static budget megabytes(std::uint64_t mb)
    {
        return bytes(detail::checked_mul(mb, std::uint64_t(1) << 20, "budget in megabytes"));
    }

private:
    static budget check(budget b)
    {
        if (b.value == 0) {
            throw budget_error("batch budget: must be positive, got 0");
        }
        return b;
    }
};

/// What happens to a split whose cost alone exceeds the budget.
enum class oversize_policy {
    run_alone,  ///< score it in a batch of its own (spaCy's behaviour); counted
    throw_error ///< refuse with a budget_error naming the split
};

/// One planned batch: item positions (into the buffer) and its max length.
struct planned_batch {
    std::size_t first = 0;   ///< first position in the plan's index array
    std::size_t count = 0;   ///< items in the batch
    std::size_t max_len = 0; ///< its longest item
    bool oversize = false;   ///< a lone item over the budget
};

namespace detail {

// Whether growing a batch to (count, len) would exceed the limit. A cost that
// overflows 64 bits exceeds any limit: close the batch rather than throw (the
// item then starts a batch of its own, where a cost that still overflows
// throws overflow_error).
template <class Cost>
bool would_exceed(Cost& cost, std::size_t count, std::size_t len, std::uint64_t limit)
{
    try {
        return cost(count, len) > limit;
    } catch (const overflow_error&) {
        return true;
    }
}

/// Plans one buffer. `lengths[i]` is item i's length; `cost(count, max_len)`
/// returns a batch's cost in the budget's unit (checked). On return
/// `order[first .. first + count)` holds each batch's item positions in
/// ascending order and `batches` lists the batches longest first.
/// `order` must hold `lengths.size()` entries; `batches` at least as many.
template <class Cost>
std::size_t plan_buffer(span<const std::size_t> lengths, std::uint64_t limit, Cost&& cost, span<std::size_t> order,
                        span<planned_batch> batches)
{
    const std::size_t n = lengths.size();
    for (std::size_t i = 0; i < n; ++i) order[i] = i;
    std::sort(order.begin(), order.begin() + n, [&](std::size_t a, std::size_t b) {
        return lengths[a] != lengths[b] ? lengths[a] < lengths[b] : a < b;
    });
    std::size_t n_batches = 0;
    std::size_t start = 0;
    for (std::size_t i = 0; i < n; ++i) {
        const std::size_t len = lengths[order[i]];  // ascending: the newest item is the longest
        const std::size_t count = i - start;
        if (count != 0 && would_exceed(cost, count + 1, len, limit)) {
            batches[n_batches++] = {start, count, lengths[order[i - 1]], false};
            start = i;
        }
    }
    if (n != start) batches[n_batches++] = {start, n - start, lengths[order[n - 1]], false};
    for (std::size_t b = 0; b < n_batches; ++b) {
        planned_batch& pb = batches[b];
        std::sort(order.begin() + pb.first, order.begin() + pb.first + pb.count);
        pb.oversize = cost(pb.count, pb.max_len) > limit;
    }
    std::reverse(batches.begin(), batches.begin() + n_batches);
    return n_batches;
}

}  // namespace detail

/// The spaCy rule on a whole list of lengths, for inspection and parity
/// tests: returns the batches (input indices, ascending inside) in the order
/// they would run. `size` counts padded items. Any lengths are fine: a
/// product that overflows 64 bits is simply over the size.
///   minibatch_by_padded_size({5, 6, 5, 9}, 18) == {{3}, {0, 1, 2}}
inline std::vector<std::vector<std::size_t>> minibatch_by_padded_size(const std::vector<std::size_t>& lengths,
                                                                      std::uint64_t size, std::size_t buffer = 256)
{
    if (size == 0) throw budget_error("minibatch_by_padded_size: size must be positive, got 0");
    if (buffer == 0) throw budget_error("minibatch_by_padded_size: buffer must be positive, got 0");
    std::vector<std::vector<std::size_t>> out;
    std::vector<std::size_t> order(std::min(buffer, lengths.size()));
    std::vector<planned_batch> batches(order.size());
    for (std::size_t begin = 0; begin < lengths.size(); begin += buffer) {
        const std::size_t n = std::min(buffer, lengths.size() - begin);
        const std::size_t nb = detail::plan_buffer(
            span<const std::size_t>(lengths.data() + begin, n), size,
            [](std::size_t count, std::size_t len) { return detail::checked_mul(count, len, "padded size"); },
            span<std::size_t>(order.data(), n), span<planned_batch>(batches.data(), n));
        for (std::size_t b = 0; b < nb; ++b) {
            std::vector<std::size_t> batch;
            for (std::size_t j = 0; j < batches[b].count; ++j) batch.push_back(begin + order[batches[b].first + j]);
            out.push_back(std::move(batch));
        }
    }
    return out;
}

BIAFFINE_NAMESPACE_END
