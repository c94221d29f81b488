// biaffine/with_minibatch_by_padded_size.hpp - run an inner layer batch by batch under a budget.
//
// Takes a split list, plans batches buffer by buffer (biaffine/batching.hpp),
// calls the inner layer once per batch and puts outputs, and in backprop the
// input gradients, back in input order. Its own bookkeeping is O(buffer), not
// O(splits), and is paid out of a byte budget before batches are planned, so
// "working set <= budget" holds for the whole call, not just per batch.
#pragma once

#include <algorithm>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <limits>
#include <mutex>
#include <thread>
#include <vector>
#include <type_traits>
#include <utility>

#include "biaffine/backprop.hpp"
#include "biaffine/detail/counter.hpp"
#include "biaffine/detail/gradient_guard.hpp"
#include "biaffine/batching.hpp"
#include "biaffine/errors.hpp"
#include "biaffine/layer.hpp"
#include "biaffine/tensor.hpp"
#include "biaffine/workspace.hpp"

namespace biaffine {

namespace detail {

// Whether a split list reports the bytes behind it (split_sequence does).
template <class Items, class = void>
struct has_bookkeeping_bytes : std::false_type {};
template <class Items>
struct has_bookkeeping_bytes<Items, std::void_t<decltype(std::declval<const Items&>().bookkeeping_bytes())>>
    : std::true_type {};

// Thrown inside a batch whose buffer must not deliver because an earlier
// buffer failed; never leaves the layer (the earlier error does).
struct delivery_cancelled {};

}  // namespace detail

/// Options of with_minibatch_by_padded_size.
struct batch_options {
    std::size_t buffer = 256;                              ///< items sorted together
    oversize_policy oversize = oversize_policy::run_alone; ///< a split whose cost alone exceeds the budget
    /// Threads for inference (`predict`, `predict_stream`): batches run
    /// concurrently, one workspace per thread, so the bound becomes threads x
    /// budget. A thread with nothing left in the current buffer plans the
    /// next one, so the threads stay busy across buffers; buffers still
    /// deliver in order (a batch waits for every earlier buffer to deliver).
    /// Results are identical to one thread.
    /// Training (`forward` and its backprop) runs batches in order on the
    /// calling thread, so dropout draws and gradient sums stay deterministic.
    std::size_t threads = 1;
    /// With threads > 1, let `predict_stream` call the sink from several
    /// threads at once (it must then be thread-safe, e.g. write to per-split
    /// slots). Off: sink calls are serialised, so per-split work done in the
    /// sink (decoding) runs on one thread at a time.
    bool concurrent_sink = false;
};

/// See the file comment. `Inner` is a split-list layer (check_split_layer):
/// `predict`, `predict_stream`, `forward`, `cost`, `n_in`, `labels`,
/// `score_shape` (biaffine_scorer, with_pad_seq_unpad_matrix, or your own).
///
/// Thread safety: `predict` and `predict_stream` are const and may run
/// concurrently (the counters are atomic) when the inner layer's predict may;
/// each call's sink is never called concurrently. `forward` and its backprop
/// follow the inner layer's rules. Exception safety: a throwing backprop
/// leaves the parameter gradients as they were (all batches or none, when
/// the inner layer exposes `parameters()` or `inner()`); the input-gradient
/// slots are then unspecified.
template <class Inner>
class with_minibatch_by_padded_size_layer : public detail::wrapping_layer<Inner> {
    static_assert(check_split_layer<Inner>());
    using base = detail::wrapping_layer<Inner>;
    using typename base::inner_type;
    using base::inner_;

public:
    using typename base::value_type;
    using T = value_type;
    using backprop_type = split_backprop<T>;

    /// Wraps `inner` (held by reference when an lvalue); throws budget_error
    /// for a zero budget or buffer, error for zero threads.
    with_minibatch_by_padded_size_layer(Inner&& inner, budget b, batch_options opts = {})
        : base(std::forward<Inner>(inner)), budget_(b), opts_(opts)
    {
        if (b.value == 0) throw budget_error("with_minibatch_by_padded_size: the budget must be positive, got 0");
        if (opts.buffer == 0) throw budget_error("with_minibatch_by_padded_size: buffer must be positive, got 0");
        if (opts.threads == 0) throw error("with_minibatch_by_padded_size: threads must be at least 1, got 0");
    }

    const budget& get_budget() const noexcept { return budget_; }    ///< the batch budget
    const batch_options& options() const noexcept { return opts_; } ///< buffer, oversize, threads
    /// The inner layer's cost of a batch of `count` splits of at most `max_len`.
    batch_cost cost(std::size_t count, std::size_t max_len, mode m = mode::eval) const
    {
        return inner_.cost(count, max_len, m);
    }

    /// Splits that exceeded the budget on their own and ran alone, since
    /// construction (or the last reset).
    std::uint64_t oversize_count() const noexcept { return oversize_.load(); }
    /// Batches run since construction (or the last reset).
    std::uint64_t batch_count() const noexcept { return batches_.load(); }
    /// Zeroes oversize_count() and batch_count().
    void reset_counts() noexcept
    {
        oversize_ = 0;
        batches_ = 0;
    }

    /// What a batch of `count` splits of at most `max_len` tokens is charged
    /// against a byte budget: the inner layer's reported total, plus the list
    /// of `count` score tensors it hands back (output category) before they
    /// move to their input positions.
    std::uint64_t planned_bytes(std::size_t count, std::size_t max_len, mode m = mode::eval) const
    {
        return detail::checked_add(inner_.cost(count, max_len, m).total(),
                                   detail::checked_mul(count, sizeof(score_tensor<T>), "batch cost"), "batch cost");
    }

    /// Bytes of this layer's own bookkeeping for `n_items` items (the
    /// per-buffer arrays of a call, one set per thread): paid out of each
    /// thread's byte budget before planning.
    std::uint64_t bookkeeping_bytes(std::size_t n_items) const
    {
        const std::uint64_t n = std::min<std::uint64_t>(opts_.buffer, n_items);
        const std::uint64_t per_item =
            2 * sizeof(seq_view<const T>) + 3 * sizeof(std::size_t) + sizeof(planned_batch);
        return detail::checked_mul(n, per_item, "batch bookkeeping");
    }

    /// Scores of every split, in input order: `[n_k, n_k(, o)]` each.
    template <class Items>
    score_list<T> predict(const Items& X) const
    {
        score_list<T> Y = placeholders(X.size());
        run(X, mode::eval, opts_.threads,
            [&](span<const seq_view<const T>> items, span<const std::size_t> index, std::size_t, auto&&) {
            score_list<T> Yb = inner_.predict(items);
            for (std::size_t j = 0; j < items.size(); ++j) Y[index[j]] = std::move(Yb[j]);
        });
        return Y;
    }

    /// Streaming: `sink(k, score_view<const T>)` for every split k (in batch
    /// order, not input order); each view lives only during its call. The
    /// sink is never called concurrently unless `options().concurrent_sink`.
    template <class Items, class Sink>
    void predict_stream(const Items& X, Sink&& sink) const
    {
        std::mutex sink_mutex;  // the sink is never called concurrently
        run(X, mode::eval, opts_.threads,
            [&](span<const seq_view<const T>> items, span<const std::size_t> index, std::size_t, auto&& my_turn) {
                bool turn_taken = false;
                inner_.predict_stream(items, [&](std::size_t j, score_view<const T> s) {
                    // Wait outside the sink lock: the batch whose turn it is needs it.
                    if (!turn_taken) {
                        if (!my_turn()) throw detail::delivery_cancelled{};
                        turn_taken = true;
                    }
                    if (opts_.concurrent_sink) {
                        sink(index[j], s);
                    } else {
                        std::lock_guard<std::mutex> lock(sink_mutex);
                        sink(index[j], s);
                    }
                });
            });
    }

    /// Forward over all splits, batch by batch; the callback runs each
    /// batch's backprop and scatters input gradients to input order.
    template <class Items>
    std::pair<score_list<T>, backprop_type> forward(const Items& X, mode m = mode::train)
    {
        const std::size_t n = X.size();
        score_list<T> Y = placeholders(n);
        struct batch_record {
            std::size_t first;  // into `index`
            std::size_t count;
            std::size_t max_len;
            typename inner_type::backprop_type bp;
        };
        tracked_vector<batch_record> records;
        tracked_vector<std::size_t> index;
        index.reserve(n);
        run(X, m, 1, [&](span<const seq_view<const T>> items, span<const std::size_t> idx, std::size_t max_len, auto&&) {
            auto [Yb, bp] = inner_.forward(items, m);
            records.push_back({index.size(), items.size(), max_len, std::move(bp)});
            for (std::size_t j = 0; j < items.size(); ++j) {
                Y[idx[j]] = std::move(Yb[j]);
                index.push_back(idx[j]);
            }
        });
        inner_type* inner = &inner_;
        backprop_type bp([records = std::move(records), index = std::move(index), n, m,
                          inner](span<const score_view<const T>> dY, span<const seq_view<T>> dX) mutable {
            if (dY.size() != n || dX.size() != n) {
                throw shape_error(detail::msg("with_minibatch_by_padded_size backprop: expected ", n,
                                              " split gradients, got ", dY.size(), " (and ", dX.size(),
                                              " input gradient slots)"));
            }
            std::size_t widest = 0;
            for (const batch_record& r : records) widest = std::max(widest, r.count);
            tracked_vector<score_view<const T>> dYb(widest);
            tracked_vector<seq_view<T>> dXb(widest);
            // All or nothing: with several batches, a throw in a later one
            // (e.g. std::bad_alloc under a memory limit) restores the
            // parameter gradients the earlier ones already accumulated into.
            detail::gradient_guard<T> guard;
            if (records.size() > 1) guard.capture(*inner);
            workspace_scope keep_scratch;  // one block reused by every batch
            for (batch_record& r : records) {
                for (std::size_t j = 0; j < r.count; ++j) {
                    dYb[j] = dY[index[r.first + j]];
                    dXb[j] = dX[index[r.first + j]];
                }
                workspace_scope ws(inner->cost(r.count, r.max_len, m).scratch);
                r.bp(span<const score_view<const T>>(dYb.data(), r.count), span<const seq_view<T>>(dXb.data(), r.count));
            }
            guard.dismiss();
        });
        return {std::move(Y), std::move(bp)};
    }

private:
    // Empty outputs, filled batch by batch: a default-constructed xarray
    // would allocate (and count) one element each.
    static score_list<T> placeholders(std::size_t n)
    {
        score_list<T> Y;
        Y.reserve(n);
        for (std::size_t k = 0; k < n; ++k) Y.push_back(score_tensor<T>::from_shape({0}));
        return Y;
    }

    // Plans every buffer and calls `batch(items, input_indices, max_len,
    // my_turn)` once per batch inside a workspace sized by the batch's
    // reported scratch; with threads > 1 batches run concurrently. A batch
    // calls `my_turn()` before it delivers anything: it returns when every
    // earlier buffer has delivered, false if an earlier one failed.
    template <class Items, class Batch>
    void run(const Items& X, mode m, std::size_t threads, Batch&& batch) const
    {
        const std::size_t n = X.size();
        if (n == 0) return;
        const std::size_t nbuf = std::min(opts_.buffer, n);
        std::uint64_t limit = budget_.value;
        if (budget_.kind == budget_kind::bytes) {
            const std::uint64_t own = bookkeeping_bytes(n);
            if (own >= limit) {
                throw budget_error(detail::msg("with_minibatch_by_padded_size: a budget of ", limit,
                                               " bytes does not cover the batcher's own bookkeeping (", own,
                                               " bytes for a buffer of ", nbuf, ")"));
            }
            limit -= own;
            // A split list built over documents (with_splits) holds an index
            // per document for the whole call: it counts against the budget too.
            if constexpr (detail::has_bookkeeping_bytes<Items>::value) {
                const std::uint64_t index = X.bookkeeping_bytes();
                if (index >= limit) {
                    throw budget_error(detail::msg("with_minibatch_by_padded_size: a budget of ", budget_.value,
                                                   " bytes does not cover the bookkeeping (", own + index,
                                                   " bytes: the batcher's for a buffer of ", nbuf, ", and ", index,
                                                   " for the split list's index of its documents)"));
                }
                limit -= index;
            }
        }
        auto cost = [&](std::size_t count, std::size_t len) -> std::uint64_t {
            if (budget_.kind == budget_kind::padded_items) return detail::checked_mul(count, len, "padded size");
            try {
                return planned_bytes(count, len, m);
            } catch (const overflow_error& e) {
                throw overflow_error(detail::msg("with_minibatch_by_padded_size: ", count, " split(s) of length ", len,
                                                 " cannot be sized: ", e.what()));
            }
        };
        windows_run<Items, decltype(cost), Batch> state{*this, X, m, limit, cost, batch, std::min(threads, n)};
        state.go();
    }

    // One call's schedule. A window is `buffer` consecutive items; windows are
    // planned one at a time, in order, under the mutex (reading a lazy split
    // list moves its cursor, so reads must not race), and a window is planned
    // only once every batch of the previous one has been claimed. A thread
    // that finds nothing left to claim plans the next window, so with threads
    // > 1 the batches of window w+1 start while the last one of window w still
    // runs. Delivery keeps the one-thread contract under errors: a batch
    // delivers (`wait_turn`) only after every earlier window has delivered,
    // and nothing from a window after the first failing one is delivered.
    template <class Items, class Cost, class Batch>
    struct windows_run {
        // The arrays bookkeeping_bytes() accounts for, one set per thread:
        // a window's batches may still run while the next one is planned.
        struct slot {
            tracked_vector<seq_view<const T>> items;
            tracked_vector<seq_view<const T>> batch_items;  // items grouped by batch
            tracked_vector<std::size_t> lengths;
            tracked_vector<std::size_t> order;
            tracked_vector<std::size_t> global;  // input index of batch_items[i]
            tracked_vector<planned_batch> plan;
            std::size_t window = 0;   // which window this slot holds
            std::size_t n_batches = 0;
            std::size_t next = 0;     // first batch not yet claimed
            std::size_t running = 0;  // claimed, not finished
            bool live = false;
        };

        const with_minibatch_by_padded_size_layer& layer;
        const Items& X;
        mode m;
        std::uint64_t limit;
        Cost& cost;
        Batch& batch;
        std::size_t threads;

        std::mutex mutex{};
        std::condition_variable turn{};   // a window finished, or a run failed
        std::vector<slot> slots{};
        slot* newest = nullptr;           // the last window planned
        std::size_t next_window = 0;
        std::size_t failed_window = std::numeric_limits<std::size_t>::max();
        std::exception_ptr first_error{};

        void go()
        {
            const std::size_t nbuf = std::min(layer.opts_.buffer, X.size());
            slots.resize(threads);
            for (slot& s : slots) {
                s.items.resize(nbuf);
                s.batch_items.resize(nbuf);
                s.lengths.resize(nbuf);
                s.order.resize(nbuf);
                s.global.resize(nbuf);
                s.plan.resize(nbuf);
            }
            std::vector<std::thread> helpers;
            helpers.reserve(threads - 1);
            try {
                for (std::size_t t = 1; t < threads; ++t) helpers.emplace_back([this] { work(); });
            } catch (...) {
                fail(0, std::current_exception());  // no thread: stop the started ones
            }
            work();
            for (std::thread& t : helpers) t.join();
            if (first_error) std::rethrow_exception(first_error);
        }

        // Records the error of `window` when it is the earliest so far, and
        // wakes the threads waiting for their turn (they give up).
        void fail(std::size_t window, std::exception_ptr e)
        {
            std::lock_guard<std::mutex> lock(mutex);
            if (window < failed_window) {
                failed_window = window;
                first_error = std::move(e);
            }
            turn.notify_all();
        }

        // Blocks until every window before `window` has delivered; false when
        // an earlier window failed (this batch must not deliver).
        bool wait_turn(std::size_t window)
        {
            std::unique_lock<std::mutex> lock(mutex);
            turn.wait(lock, [&] { return failed_window < window || !earlier_live(window); });
            return failed_window >= window;
        }

        bool earlier_live(std::size_t window) const
        {
            for (const slot& s : slots) {
                if (s.live && s.window < window) return true;
            }
            return false;
        }

        void work()
        {
            workspace_scope keep_scratch;  // this thread's block lives across batches
            std::unique_lock<std::mutex> lock(mutex);
            for (;;) {
                slot* s = newest;
                if (s == nullptr || s->next == s->n_batches || s->window >= failed_window) {
                    if (layer_done() || next_window >= failed_window) return;
                    try {
                        plan_next();
                    } catch (...) {
                        if (next_window < failed_window) {
                            failed_window = next_window;
                            first_error = std::current_exception();
                        }
                        turn.notify_all();
                        return;
                    }
                    continue;
                }
                const std::size_t b = s->next++;
                ++s->running;
                lock.unlock();
                try {
                    run_batch(*s, b);
                } catch (...) {
                    fail(s->window, std::current_exception());
                }
                lock.lock();
                if (--s->running == 0 && s->next == s->n_batches) {
                    s->live = false;
                    turn.notify_all();
                }
            }
        }

        bool layer_done() const { return next_window * slots.front().items.size() >= X.size(); }

        // Plans window `next_window` into a free slot. Called with the mutex
        // held; at most threads - 1 windows are running, so a slot is free.
        void plan_next()
        {
            slot* s = nullptr;
            for (slot& c : slots) {
                if (!c.live) {
                    s = &c;
                    break;
                }
            }
            if (s == nullptr) throw biaffine::error("with_minibatch_by_padded_size: internal error: no free window slot");
            const std::size_t nbuf = s->items.size();
            const std::size_t begin = next_window * nbuf;
            const std::size_t count = std::min(nbuf, X.size() - begin);
            for (std::size_t i = 0; i < count; ++i) {
                s->items[i] = detail::read_only(X[begin + i]);
                s->lengths[i] = s->items[i].rows;
            }
            const std::size_t nb = detail::plan_buffer(span<const std::size_t>(s->lengths.data(), count), limit, cost,
                                                       span<std::size_t>(s->order.data(), count),
                                                       span<planned_batch>(s->plan.data(), count));
            for (std::size_t b = 0; b < nb; ++b) {
                const planned_batch& pb = s->plan[b];
                if (pb.oversize) {
                    if (layer.opts_.oversize == oversize_policy::throw_error) {
                        const std::size_t k = begin + s->order[pb.first];
                        throw budget_error(detail::msg(
                            "with_minibatch_by_padded_size: split ", k, " of length ", pb.max_len, " costs ",
                            cost(1, pb.max_len), " alone, over the budget of ", limit,
                            layer.budget_.kind == budget_kind::bytes ? " bytes" : " padded items",
                            " (oversize policy: throw)"));
                    }
                    ++layer.oversize_;
                }
                for (std::size_t j = 0; j < pb.count; ++j) {
                    const std::size_t pos = s->order[pb.first + j];
                    s->batch_items[pb.first + j] = s->items[pos];
                    s->global[pb.first + j] = begin + pos;
                }
            }
            layer.batches_.add(nb);
            s->window = next_window++;
            s->n_batches = nb;
            s->next = 0;
            s->running = 0;
            s->live = nb != 0;
            newest = s;
        }

        // Runs batch `b` of slot `s` inside a workspace sized by its scratch.
        void run_batch(const slot& s, std::size_t b)
        {
            const planned_batch& pb = s.plan[b];
            const batch_cost c = layer.inner_.cost(pb.count, pb.max_len, m);
            // Under a byte budget the block kept from an earlier batch counts
            // against this one: reuse it only while it fits beside this
            // batch's other memory (heap, outputs), else size it to this batch.
            std::uint64_t keep = std::numeric_limits<std::uint64_t>::max();
            if (layer.budget_.kind == budget_kind::bytes) {
                const std::uint64_t others = layer.planned_bytes(pb.count, pb.max_len, m) - c.scratch;
                keep = std::max(c.scratch, others < limit ? limit - others : 0);
            }
            workspace_scope ws(c.scratch, keep);
            const std::size_t window = s.window;
            batch(span<const seq_view<const T>>(s.batch_items.data() + pb.first, pb.count),
                  span<const std::size_t>(s.global.data() + pb.first, pb.count), pb.max_len,
                  [this, window] { return threads == 1 || wait_turn(window); });
        }
    };

    budget budget_;
    batch_options opts_;
    mutable detail::counter oversize_;
    mutable detail::counter batches_;
};

/// Factory: `with_minibatch_by_padded_size(inner, budget::bytes(16 << 20))`.
/// An lvalue inner layer is held by reference (it must outlive this layer:
/// the usual way to keep a scorer you train and save); an rvalue is moved in.
template <class Inner>
auto with_minibatch_by_padded_size(Inner&& inner, budget b, batch_options opts = {})
{
    return with_minibatch_by_padded_size_layer<Inner>(std::forward<Inner>(inner), b, opts);
}

}  // namespace biaffine
