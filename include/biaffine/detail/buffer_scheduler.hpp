// biaffine/detail/buffer_scheduler.hpp - the batcher's schedule: plan a split
// list buffer by buffer, run each buffer's batches on one or more threads, and
// deliver them in buffer order.
//
// A buffer is `buffer` consecutive items of the list (batch_options::buffer);
// the scheduler plans them one at a time, in order, under a mutex (reading a
// lazy split list moves its cursor, so reads must not race), and plans a
// buffer only once every batch of the previous one has been claimed. A thread
// that finds nothing left to claim plans the next buffer, so with threads > 1
// the batches of buffer b+1 start while the last one of buffer b still runs.
// Every batch has a place in the one-thread order (its sequence number) and
// a turn to deliver (delivery_turn): once every earlier batch has finished
// (`batch_order`, a serialised sink: the one-thread order split for split),
// or once every earlier buffer has (batches of one buffer deliver together,
// a concurrent sink). A batch asks for its turn without blocking (poll) and
// computes on while it has room to hold what it cannot deliver yet
// (detail/stream_delivery.hpp), or blocks (wait). A thread ends up waiting
// when it finishes a batch before an earlier, longer one: a buffer's first
// batch (its longest splits, what is left when the full batches are cut) is
// often far smaller than the next, so a thread passes over such a batch
// once (pick_batch) and the next free thread takes it, and the two finish
// together instead of one idling while the other runs the big one. Errors
// keep the one-thread
// contract: nothing is delivered after the first failing batch (batch order)
// or from a buffer after the first failing one's; the earliest batch's error
// is the one rethrown.
//
// It knows batching.hpp and the workspace, not the layer: what it needs from
// the layer comes in as numbers (buffer_schedule) and callables.
#pragma once

#include "biaffine/abi.hpp"

#include <algorithm>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <limits>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "biaffine/batching.hpp"
#include "biaffine/detail/counter.hpp"
#include "biaffine/detail/function_ref.hpp"
#include "biaffine/errors.hpp"
#include "biaffine/tensor.hpp"
#include "biaffine/workspace.hpp"

BIAFFINE_NAMESPACE_BEGIN
namespace detail {

/// The layer's settings for one call of the scheduler.
struct buffer_schedule {
    std::size_t buffer = 256;                              ///< items planned together
    std::size_t threads = 1;                               ///< at most the number of items
    std::uint64_t limit = 0;                               ///< what the budget leaves for each batch
    std::uint64_t budget = 0;                              ///< the user's budget (limit + bookkeeping)
    const char* unit = "bytes";                            ///< the limit's unit, for messages
    oversize_policy oversize = oversize_policy::run_alone; ///< a lone item over the limit
    counter* oversize_count = nullptr;                     ///< + 1 per oversize item run alone
    counter* batch_count = nullptr;                        ///< + the batches of every planned buffer
    /// Every thread holds one workspace block for the whole call, sized for
    /// the largest batch of the plan (a first planning pass over the list,
    /// outputs-free), so the peak is threads x that block whichever batches
    /// run together, and no block is freed and re-grown between batches. A
    /// lone oversize split, or a batch whose batch_workspace::keep is below
    /// the block (other memory beside it would pass the limit), gets a block
    /// of its own for its run only. For callers that allocate no outputs
    /// per batch (streaming), whose `keep` counts only the rest.
    bool reserve = false;
    /// A batch's turn comes when every earlier batch has finished, not only
    /// every earlier buffer (see the file comment).
    bool batch_order = false;
};

/// Where a batch stands in the delivery order: not yet its turn, its turn,
/// or never (an earlier batch failed: it must deliver nothing).
enum class turn_state { wait, go, cancelled };

/// The workspace of one batch: `scratch` bytes reserved; a block kept from an
/// earlier batch on the thread is reused only while it is at most `keep`.
struct batch_workspace {
    std::uint64_t scratch = 0;
    std::uint64_t keep = std::numeric_limits<std::uint64_t>::max();
};

/// One call's schedule (see the file comment) over `size` items, item `i`
/// read as `item(i)`. `cost(count, max_len)` is a batch's cost in the
/// limit's unit; `workspace(count, max_len)` its batch_workspace;
/// `batch(items, input_indices, max_len, turn)` runs a batch and, before it
/// delivers anything, asks `turn.poll()` (at once) or `turn.wait()` (blocks
/// while turn_state::wait) whether it may. Templated on the scalar only: the
/// callables come in as function_ref (see there why).
template <class T>
class buffer_scheduler {
public:
    class delivery_turn;
    using item_fn = function_ref<seq_view<const T>(std::size_t)>;
    using size_fn = function_ref<std::uint64_t(std::size_t, std::size_t)>;
    using workspace_fn = function_ref<batch_workspace(std::size_t, std::size_t)>;
    using batch_fn =
        function_ref<void(span<const seq_view<const T>>, span<const std::size_t>, std::size_t, const delivery_turn&)>;

    buffer_scheduler(std::size_t size, item_fn item, const buffer_schedule& s, size_fn cost, workspace_fn workspace,
                     batch_fn batch)
        : size_(size), item_(item), s_(s), cost_(cost), workspace_(workspace), batch_(batch)
    {
    }

    /// Runs every batch; rethrows the earliest batch's error after every
    /// thread has stopped.
    void run()
    {
        const std::size_t size = std::min(s_.buffer, size_);
        buffers_.resize(s_.threads);
        for (buffer& b : buffers_) {
            b.items.resize(size);
            b.batch_items.resize(size);
            b.lengths.resize(size);
            b.order.resize(size);
            b.global.resize(size);
            b.plan.resize(size);
        }
        if (s_.reserve) reserve_ = largest_scratch();
        // This thread's block, held until every helper has joined: with a
        // reserve, every thread's block is then alive at once in every run,
        // however late a helper starts.
        workspace_scope keep_scratch(reserve_);
        std::vector<std::thread> helpers;
        helpers.reserve(s_.threads - 1);
        try {
            for (std::size_t t = 1; t < s_.threads; ++t) helpers.emplace_back([this] { work(); });
        } catch (...) {
            fail(0, std::current_exception());  // no thread: stop the started ones
        }
        work();
        for (std::thread& t : helpers) t.join();
        if (first_error_) std::rethrow_exception(first_error_);
    }

private:
    // The arrays the batcher's bookkeeping_bytes() accounts for, one set per
    // thread: a buffer's batches may still run while the next one is planned.
    struct buffer {
        tracked_vector<seq_view<const T>> items;
        tracked_vector<seq_view<const T>> batch_items;  // items grouped by batch
        // Lengths to plan; once planned, per batch: unclaimed, claimed or
        // finished (no array of its own, so the bookkeeping stays as it is
        // accounted).
        tracked_vector<std::size_t> lengths;
        tracked_vector<std::size_t> order;
        tracked_vector<std::size_t> global;  // input index of batch_items[i]
        tracked_vector<planned_batch> plan;
        std::size_t index = 0;      // which buffer of the list this one holds
        std::size_t first_seq = 0;  // the sequence number of its batch 0
        std::size_t n_batches = 0;
        std::size_t next = 0;       // first batch not yet claimed
        std::size_t claimed = 0;    // batches claimed
        std::size_t running = 0;    // claimed, not finished
        std::size_t finished = 0;   // batches 0..finished-1 have all finished
        bool passed_over = false;   // batch `next` was passed over once: the next claim takes it
        bool live = false;
    };
    static constexpr std::size_t batch_unclaimed = 0, batch_claimed = 1, batch_finished = 2;  // in `lengths`

public:
    /// A batch's view of its turn (see the class comment).
    class delivery_turn {
    public:
        turn_state poll() const { return self_->turn_of(*buffer_, batch_, false); }
        turn_state wait() const { return self_->turn_of(*buffer_, batch_, true); }

    private:
        friend class buffer_scheduler;
        delivery_turn(buffer_scheduler* self, const buffer* b, std::size_t batch) noexcept
            : self_(self), buffer_(b), batch_(batch)
        {
        }
        buffer_scheduler* self_;
        const buffer* buffer_;
        std::size_t batch_;
    };

private:
    // Records the error of batch `seq` when it is the earliest so far, and
    // wakes the threads waiting for their turn (they may give up).
    void fail(std::size_t seq, std::exception_ptr e)
    {
        std::lock_guard<std::mutex> lock(mutex_);
        record_failure(seq, std::move(e));
    }
    void record_failure(std::size_t seq, std::exception_ptr e)
    {
        if (seq < failed_seq_) {
            failed_seq_ = seq;
            first_error_ = std::move(e);
        }
        turn_.notify_all();
    }

    // Batch `b` of `s`: its turn (see the file comment), waiting for it when
    // `block`. One thread: always its turn (batches run in order).
    turn_state turn_of(const buffer& s, std::size_t b, bool block)
    {
        if (s_.threads == 1) return turn_state::go;
        const std::size_t seq = s.first_seq + b;
        const auto state = [&] {
            if (failed_seq_ < (s_.batch_order ? seq : s.first_seq)) return turn_state::cancelled;
            if (earlier_live(s.index) || (s_.batch_order && s.finished != b)) return turn_state::wait;
            return turn_state::go;
        };
        std::unique_lock<std::mutex> lock(mutex_);
        turn_state t = state();
        if (block) turn_.wait(lock, [&] { return (t = state()) != turn_state::wait; });
        return t;
    }

    bool earlier_live(std::size_t index) const
    {
        for (const buffer& b : buffers_) {
            if (b.live && b.index < index) return true;
        }
        return false;
    }

    void work()
    {
        workspace_scope keep_scratch(reserve_);  // this thread's block lives across batches
        std::unique_lock<std::mutex> lock(mutex_);
        for (;;) {
            buffer* s = newest_;
            // Nothing is claimed in or after a buffer with a failed batch, nor
            // planned after any failure (its batches could not deliver).
            const bool failed = failed_seq_ != std::numeric_limits<std::size_t>::max();
            if (s == nullptr || s->claimed == s->n_batches || failed_seq_ < s->first_seq + s->next) {
                if (all_planned() || failed) return;
                try {
                    plan_next();
                } catch (...) {
                    record_failure(next_seq_, std::current_exception());  // before any of its batches
                    return;
                }
                continue;
            }
            const std::size_t b = pick_batch(*s);
            ++s->running;
            lock.unlock();
            try {
                run_batch(*s, b);
            } catch (...) {
                fail(s->first_seq + b, std::current_exception());
            }
            lock.lock();
            s->lengths[b] = batch_finished;
            while (s->finished < s->n_batches && s->lengths[s->finished] == batch_finished) ++s->finished;
            if (--s->running == 0 && s->claimed == s->n_batches) s->live = false;
            if (s_.threads > 1) turn_.notify_all();  // the next batch's turn may have come
        }
    }

    // Claims a batch of `s` (mutex held): the first unclaimed one, or once,
    // the one after it when that has at least 1.5 times its padded rows and
    // nothing failed (a batch before a failed one must still run).
    std::size_t pick_batch(buffer& s)
    {
        std::size_t b = s.next;
        const std::size_t after = b + 1;
        const auto rows = [&](std::size_t i) { return s.plan[i].count * s.plan[i].max_len; };
        if (s_.threads > 1 && !s.passed_over && after < s.n_batches && s.lengths[after] == batch_unclaimed &&
            failed_seq_ == std::numeric_limits<std::size_t>::max() && 2 * rows(after) >= 3 * rows(b)) {
            s.passed_over = true;
            b = after;
        } else {
            s.passed_over = false;
            while (++s.next < s.n_batches && s.lengths[s.next] != batch_unclaimed) {
            }
        }
        s.lengths[b] = batch_claimed;
        ++s.claimed;
        return b;
    }

    // The largest workspace of any batch within the limit, from planning
    // every buffer once (O(items log buffer), nothing kept). An error is left
    // to the real pass, which raises it in buffer order: then 0, no reserve.
    std::uint64_t largest_scratch()
    {
        buffer& s = buffers_.front();
        const std::size_t size = s.items.size();
        std::uint64_t largest = 0;
        try {
            for (std::size_t begin = 0; begin < size_; begin += size) {
                const std::size_t count = std::min(size, size_ - begin);
                for (std::size_t i = 0; i < count; ++i) s.lengths[i] = item_(begin + i).rows;
                const std::size_t nb = plan_buffer(span<const std::size_t>(s.lengths.data(), count), s_.limit, cost_,
                                                   span<std::size_t>(s.order.data(), count),
                                                   span<planned_batch>(s.plan.data(), count));
                for (std::size_t b = 0; b < nb; ++b) {
                    const planned_batch& pb = s.plan[b];
                    if (!pb.oversize) largest = std::max(largest, workspace_(pb.count, pb.max_len).scratch);
                }
            }
        } catch (...) {
            return 0;
        }
        return largest;
    }

    bool all_planned() const { return next_buffer_ * buffers_.front().items.size() >= size_; }

    // "budget of B unit", and what bookkeeping left of it when that differs,
    // so the figure the user set is the one they read first.
    std::string oversize_limit() const
    {
        if (s_.budget <= s_.limit) return msg("budget of ", s_.limit, " ", s_.unit);
        return msg("budget of ", s_.budget, " ", s_.unit, ", ", s_.limit, " after ", s_.budget - s_.limit, " ",
                   s_.unit, " of bookkeeping");
    }

    // Plans buffer `next_buffer_` into free storage. Called with the mutex
    // held; at most threads - 1 buffers are running, so one set is free.
    void plan_next()
    {
        buffer* s = nullptr;
        for (buffer& c : buffers_) {
            if (!c.live) {
                s = &c;
                break;
            }
        }
        if (s == nullptr) throw biaffine::error("with_minibatch_by_padded_size: internal error: no free buffer");
        const std::size_t size = s->items.size();
        const std::size_t begin = next_buffer_ * size;
        const std::size_t count = std::min(size, size_ - begin);
        for (std::size_t i = 0; i < count; ++i) {
            s->items[i] = item_(begin + i);
            s->lengths[i] = s->items[i].rows;
        }
        const std::size_t nb = plan_buffer(span<const std::size_t>(s->lengths.data(), count), s_.limit, cost_,
                                           span<std::size_t>(s->order.data(), count),
                                           span<planned_batch>(s->plan.data(), count));
        for (std::size_t b = 0; b < nb; ++b) {
            const planned_batch& pb = s->plan[b];
            if (pb.oversize) {
                if (s_.oversize == oversize_policy::throw_error) {
                    const std::size_t k = begin + s->order[pb.first];
                    throw budget_error(msg("with_minibatch_by_padded_size: split ", k, " of length ", pb.max_len,
                                           " costs ", cost_(1, pb.max_len), " ", s_.unit, " alone, over the ",
                                           oversize_limit(), " (oversize policy: throw)"));
                }
                ++*s_.oversize_count;
            }
            for (std::size_t j = 0; j < pb.count; ++j) {
                const std::size_t pos = s->order[pb.first + j];
                s->batch_items[pb.first + j] = s->items[pos];
                s->global[pb.first + j] = begin + pos;
            }
        }
        s_.batch_count->add(nb);
        std::fill(s->lengths.begin(), s->lengths.begin() + static_cast<std::ptrdiff_t>(nb), batch_unclaimed);
        s->index = next_buffer_++;
        s->first_seq = next_seq_;
        next_seq_ += nb;
        s->n_batches = nb;
        s->next = 0;
        s->claimed = 0;
        s->running = 0;
        s->finished = 0;
        s->passed_over = false;
        s->live = nb != 0;
        newest_ = s;
    }

    // Runs batch `b` of buffer `s` inside a workspace sized for it.
    void run_batch(const buffer& s, std::size_t b)
    {
        const planned_batch& pb = s.plan[b];
        batch_workspace w = workspace_(pb.count, pb.max_len);
        if (s_.reserve) {
            if (w.scratch <= reserve_ && reserve_ <= w.keep) {
                w.scratch = w.keep = reserve_;  // the thread's block
            } else {
                // An oversize batch, or one whose other memory (an inner
                // layer's heap) beside the reserved block would pass the
                // limit: a block of its own for this batch only.
                w.keep = w.scratch;
            }
        }
        workspace_scope ws(w.scratch, w.keep);
        batch_(span<const seq_view<const T>>(s.batch_items.data() + pb.first, pb.count),
               span<const std::size_t>(s.global.data() + pb.first, pb.count), pb.max_len,
               delivery_turn(this, &s, b));
    }

    const std::size_t size_;
    const item_fn item_;
    const buffer_schedule s_;
    const size_fn cost_;
    const workspace_fn workspace_;
    const batch_fn batch_;

    std::mutex mutex_{};
    std::condition_variable turn_{};  // a buffer finished, or a run failed
    std::vector<buffer> buffers_{};
    buffer* newest_ = nullptr;        // the last buffer planned
    std::uint64_t reserve_ = 0;       // each thread's block (schedule.reserve)
    std::size_t next_buffer_ = 0;
    std::size_t next_seq_ = 0;  // the sequence number of the next buffer's batch 0
    std::size_t failed_seq_ = std::numeric_limits<std::size_t>::max();
    std::exception_ptr first_error_{};
};

/// Runs `X` through a buffer_scheduler (see there).
template <class T, class Items, class Cost, class Workspace, class Batch>
void run_buffers(const Items& X, const buffer_schedule& s, Cost&& cost, Workspace&& workspace, Batch&& batch)
{
    const auto item = [&X](std::size_t i) -> seq_view<const T> { return read_only(X[i]); };
    buffer_scheduler<T>(X.size(), item, s, cost, workspace, batch).run();
}

}  // namespace detail
BIAFFINE_NAMESPACE_END
