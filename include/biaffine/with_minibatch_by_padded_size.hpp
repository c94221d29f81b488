// biaffine/with_minibatch_by_padded_size.hpp - run an inner layer batch by batch under a budget.
//
// Takes a split list, plans batches buffer by buffer (biaffine/batching.hpp),
// calls the inner layer once per batch and puts outputs, and in backprop the
// input gradients, back in input order. Its own bookkeeping is O(buffer), not
// O(splits), and is paid out of a byte budget before batches are planned, so
// "working set <= budget" holds for the whole call, not just per batch.
#pragma once

#include "biaffine/abi.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <type_traits>
#include <thread>
#include <utility>

#include "biaffine/backprop.hpp"
#include "biaffine/batching.hpp"
#include "biaffine/detail/buffer_scheduler.hpp"
#include "biaffine/detail/counter.hpp"
#include "biaffine/detail/gradient_guard.hpp"
#include "biaffine/detail/output_kind.hpp"
#include "biaffine/detail/stream_delivery.hpp"
#include "biaffine/errors.hpp"
#include "biaffine/layer.hpp"
#include "biaffine/tensor.hpp"
#include "biaffine/workspace.hpp"

BIAFFINE_NAMESPACE_BEGIN

namespace detail {

// Whether a split list reports the bytes behind it (split_sequence does).
template <class Items, class = void>
struct has_bookkeeping_bytes : std::false_type {};
template <class Items>
struct has_bookkeeping_bytes<Items, std::void_t<decltype(std::declval<const Items&>().bookkeeping_bytes())>>
    : std::true_type {};


}  // namespace detail

/// Options of with_minibatch_by_padded_size.
struct batch_options {
    std::size_t buffer = 256;                              ///< items sorted together
    oversize_policy oversize = oversize_policy::run_alone; ///< a split whose cost alone exceeds the budget
    /// Threads for inference (`predict`, `predict_stream`): batches run
    /// concurrently, one workspace per thread, so the bound becomes threads x
    /// budget. A thread with nothing left in the current buffer plans the
    /// next one, so the threads stay busy across buffers. A stream delivers
    /// in the one-thread order: a batch computed before its turn holds its
    /// splits in its thread's block (within the budget) until then.
    /// Results are identical to one thread. At most
    /// `std::thread::hardware_concurrency()` threads run (larger values,
    /// e.g. SIZE_MAX for "all cores", are clamped to it), and never more
    /// than there are splits: see threads_for().
    /// Training (`forward` and its backprop) runs batches in order on the
    /// calling thread, so dropout draws and gradient sums stay deterministic.
    std::size_t threads = 1;
    /// With threads > 1, let `predict_stream` call the sink from several
    /// threads at once (it must then be thread-safe, e.g. write to per-split
    /// slots): the batches of one buffer deliver together, buffers in order.
    /// Off: sink calls are serialised and come in the one-thread order, so
    /// per-split work done in the sink (decoding) runs on one thread at a time.
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
    using typename base::output_type;
    using T = value_type;
    using O = output_type;
    using backprop_type = split_backprop<T, O>;
    /// Each split goes to one batch: every dX slot is written where the inner layer writes every one.
    static constexpr bool writes_every_slot = detail::writes_every_slot<Inner>::value;

    /// Wraps `inner` (held by reference when an lvalue); throws budget_error
    /// for a zero budget or buffer, or a byte budget that cannot cover the
    /// bookkeeping of even one split (min_bookkeeping_bytes(): no call could
    /// ever run, so it is refused here rather than at the first call); error
    /// for zero threads.
    with_minibatch_by_padded_size_layer(Inner&& inner, budget b, batch_options opts = {})
        : base(std::forward<Inner>(inner)), budget_(b), opts_(opts)
    {
        if (b.value == 0) throw budget_error("with_minibatch_by_padded_size: the budget must be positive, got 0");
        if (opts.buffer == 0) throw budget_error("with_minibatch_by_padded_size: buffer must be positive, got 0");
        if (opts.threads == 0) throw error("with_minibatch_by_padded_size: threads must be at least 1, got 0");
        if (b.kind == budget_kind::bytes && b.value <= min_bookkeeping_bytes()) {
            throw budget_error(detail::msg("with_minibatch_by_padded_size: a budget of ", b.value,
                                           " bytes does not cover the batcher's own bookkeeping for one split (",
                                           min_bookkeeping_bytes(), " bytes)"));
        }
    }

    const budget& get_budget() const noexcept { return budget_; }    ///< the batch budget
    const batch_options& options() const noexcept { return opts_; } ///< buffer, oversize, threads
    /// The inner layer's cost of a batch of `count` splits of at most `max_len`.
    batch_cost cost(std::size_t count, std::size_t max_len, mode m = mode::eval) const
    {
        return inner_.cost(count, max_len, m);
    }

    /// Threads an inference call over `n_items` splits runs on: options().threads,
    /// clamped to std::thread::hardware_concurrency() (1 if unknown) and to
    /// n_items (at least 1).
    std::size_t threads_for(std::size_t n_items) const noexcept
    {
        const std::size_t hw = std::max<std::size_t>(1, std::thread::hardware_concurrency());
        return std::max<std::size_t>(1, std::min({opts_.threads, hw, n_items}));
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
        return planned<detail::full_scores_kind>(count, max_len, m);
    }

    /// Bytes of this layer's own bookkeeping for `n_items` items (the
    /// per-buffer arrays of a call, one set per thread): paid out of each
    /// thread's byte budget before planning.
    std::uint64_t bookkeeping_bytes(std::size_t n_items) const
    {
        const std::uint64_t n = std::min<std::uint64_t>(opts_.buffer, n_items);
        return detail::checked_mul(n, min_bookkeeping_bytes(), "batch bookkeeping");
    }

    /// The bookkeeping of a call with one split, the least any call needs:
    /// a byte budget must exceed it (checked when the layer is built).
    static constexpr std::uint64_t min_bookkeeping_bytes() noexcept
    {
        return 2 * sizeof(seq_view<const T>) + 3 * sizeof(std::size_t) + sizeof(planned_batch);
    }

    /// Bytes a forward over `n_items` splits keeps from its first batch to
    /// the end of backprop beyond each batch's own cost: the input-order
    /// index, what the inner layer saves per split whatever the batch
    /// (its cost at length 0: with recompute_in_backward, the split views),
    /// and the snapshot of the parameter gradients backprop takes. A forward
    /// under a byte budget pays it out of the budget before planning, so
    /// training with recomputation stays within outputs + budget + dX.
    /// `Kind`: the output kind of the forward (detail/output_kind.hpp; the
    /// inner layer's cost of that kind).
    template <class Kind = detail::full_scores_kind>
    std::uint64_t kept_bytes(std::size_t n_items, mode m = mode::train) const
    {
        std::uint64_t kept = detail::checked_add(detail::checked_mul(n_items, sizeof(std::size_t), "kept bytes"),
                                                 cost_as<Kind>(n_items, 0, m).saved, "kept bytes");
        return detail::checked_add(kept, detail::gradient_guard<T>::bytes(inner_), "kept bytes");
    }
    /// kept_bytes() as it was first spelled: true for a forward_heads.
    template <bool LabelsAtHeads>
    std::uint64_t kept_bytes(std::size_t n_items, mode m = mode::train) const
    {
        using kind = std::conditional_t<LabelsAtHeads, detail::labels_at_heads_kind, detail::full_scores_kind>;
        return kept_bytes<kind>(n_items, m);
    }

    /// Scores of every split, in input order: `[n_k, n_k(, o)]` each.
    template <class Items>
    score_list<O> predict(const Items& X) const
    {
        return predict_as<detail::full_scores_kind>(X, detail::no_heads{});
    }

    /// Streaming: `sink(k, score_view<const O>)` for every split k (in batch
    /// order, not input order; with threads, the same order as one thread
    /// unless `options().concurrent_sink`); each view lives only during its
    /// call. The sink is never called concurrently unless
    /// `options().concurrent_sink`.
    template <class Items, class Sink>
    void predict_stream(const Items& X, Sink&& sink) const
    {
        predict_stream_as<detail::full_scores_kind>(X, detail::no_heads{}, sink);
    }

    /// Streaming into the caller's memory (the inner layer's
    /// predict_stream_into): `dest(k, n)` gives an `O*` to n*n*o elements
    /// for split k, `sink(k, view)` then views them there. dest is called
    /// as the split is computed, so with threads > 1 possibly for a later
    /// batch's split before an earlier batch's sink calls; dest and sink
    /// calls are serialised together unless `options().concurrent_sink`.
    template <class Items, class Dest, class Sink>
    void predict_stream_into(const Items& X, Dest&& dest, Sink&& sink) const
    {
        predict_stream_into_as<detail::full_scores_kind>(X, detail::no_heads{}, dest, sink);
    }

    /// Forward over all splits, batch by batch; the callback runs each
    /// batch's backprop and scatters input gradients to input order.
    template <class Items>
    std::pair<score_list<O>, backprop_type> forward(const Items& X, mode m = mode::train)
    {
        return forward_as<detail::full_scores_kind>(X, detail::no_heads{}, m);
    }

    // ------------------------------------------- labels at given heads

    /// Backprop of forward_heads(): per-split `[n, o]` gradients, input order.
    using heads_backprop_type = split_heads_backprop<T, O>;

    /// The inner layer's cost of a batch of labels at given heads.
    batch_cost heads_cost(std::size_t count, std::size_t max_len, mode m = mode::eval) const
    {
        return inner_.heads_cost(count, max_len, m);
    }

    /// Labels at given heads of every split, in input order: `[n_k, o]`
    /// each, batched by the inner layer's heads_cost (a byte budget buys far
    /// longer batches than for `[n, n, o]` scores). `H[k]` is split k's heads
    /// (`0..n_k-1`); checked before anything runs (head_error).
    template <class Items, class Heads>
    score_list<O> predict_heads(const Items& X, const Heads& H) const
    {
        static_assert(check_heads_layer<inner_type>());
        return predict_as<detail::labels_at_heads_kind>(X, H);
    }

    /// Streaming labels at given heads: `sink(k, seq_view<const O>)` with
    /// split k's `[n, o]` (batch order), as predict_stream.
    template <class Items, class Heads, class Sink>
    void predict_heads_stream(const Items& X, const Heads& H, Sink&& sink) const
    {
        static_assert(check_heads_layer<inner_type>());
        predict_stream_as<detail::labels_at_heads_kind>(X, H, sink);
    }

    /// Streaming labels at given heads into the caller's memory: `dest(k,
    /// n)` gives an `O*` to n*o elements (see predict_stream_into).
    template <class Items, class Heads, class Dest, class Sink>
    void predict_heads_stream_into(const Items& X, const Heads& H, Dest&& dest, Sink&& sink) const
    {
        static_assert(check_heads_layer<inner_type>());
        predict_stream_into_as<detail::labels_at_heads_kind>(X, H, dest, sink);
    }

    /// Training forward of labels at given heads, batch by batch (as forward).
    template <class Items, class Heads>
    std::pair<score_list<O>, heads_backprop_type> forward_heads(const Items& X, const Heads& H, mode m = mode::train)
    {
        static_assert(check_heads_layer<inner_type>());
        return forward_as<detail::labels_at_heads_kind>(X, H, m);
    }

    // ------------------------------------------- any output kind
    //
    // The calls above for an output kind `Kind` (detail/output_kind.hpp)
    // with its arguments `a` (heads, or detail::no_heads{}): the inner
    // layer's members of that kind (Kind's layer calls), batched by its cost.

    /// Backprop of forward_as<Kind>(): per-split gradients of Kind's view.
    template <class Kind>
    using kind_backprop = backprop_fn<void(span<const typename Kind::template view<const O>>, span<const seq_view<T>>)>;

    /// The inner layer's cost of a batch of Kind.
    template <class Kind>
    batch_cost cost_as(std::size_t count, std::size_t max_len, mode m = mode::eval) const
    {
        return Kind::cost(inner_, count, max_len, m);
    }

    /// Every split's output of Kind, in input order.
    template <class Kind, class Items, class Args>
    score_list<O> predict_as(const Items& X, const Args& a) const
    {
        Kind::check_args("with_minibatch_by_padded_size", X, a);
        score_list<O> Y = placeholders(X.size());
        run<Kind>(X, mode::eval, opts_.threads, /*reserve=*/false, /*kept=*/0,
                  [&](span<const seq_view<const T>> items, span<const std::size_t> index, std::size_t, auto&&,
                      std::size_t) {
                      score_list<O> Yb = Kind::predict(inner_, items, Kind::batch_args(a, index));
                      for (std::size_t j = 0; j < items.size(); ++j) Y[index[j]] = std::move(Yb[j]);
                  });
        return Y;
    }

    /// Streaming of Kind, as predict_stream.
    template <class Kind, class Items, class Args, class Sink>
    void predict_stream_as(const Items& X, const Args& a, Sink&& sink) const
    {
        Kind::check_args("with_minibatch_by_padded_size", X, a);
        stream_batches<Kind>(X, sink, /*copy=*/true,
                             [&](const auto& items, span<const std::size_t> index, auto&&, auto& give) {
            Kind::predict_stream(inner_, items, Kind::batch_args(a, index), give);
        });
    }

    /// Streaming of Kind into the caller's memory, as predict_stream_into.
    template <class Kind, class Items, class Args, class Dest, class Sink>
    void predict_stream_into_as(const Items& X, const Args& a, Dest&& dest, Sink&& sink) const
    {
        Kind::check_args("with_minibatch_by_padded_size", X, a);
        stream_batches<Kind>(X, sink, /*copy=*/false,
                             [&](const auto& items, span<const std::size_t> index, auto&& place, auto& give) {
            Kind::predict_stream_into(
                inner_, items, Kind::batch_args(a, index),
                [&](std::size_t j, std::size_t n) { return place([&] { return dest(index[j], n); }); }, give);
        });
    }

    /// Training forward of Kind, batch by batch (as forward).
    template <class Kind, class Items, class Args>
    std::pair<score_list<O>, kind_backprop<Kind>> forward_as(const Items& X, const Args& a, mode m = mode::train)
    {
        Kind::check_args("with_minibatch_by_padded_size", X, a);
        return forward_batches<Kind, kind_backprop<Kind>>(X, m, [&](const auto& items, span<const std::size_t> idx,
                                                                    mode mm) {
            return Kind::forward(inner_, items, Kind::batch_args(a, idx), mm);
        });
    }

private:
    // planned_bytes() for any kind of output.
    template <class Kind>
    std::uint64_t planned(std::size_t count, std::size_t max_len, mode m) const
    {
        return detail::checked_add(cost_as<Kind>(count, max_len, m).total(),
                                   detail::checked_mul(count, sizeof(score_tensor<O>), "batch cost"), "batch cost");
    }

    // The streams: `call(items, index, place, give)` runs one batch, where
    // place(f) returns f() (a destination), serialised with the sink
    // calls, and give(j, view) hands the batch's split j to `sink(index[j],
    // view)` in the batch's turn (detail::stream_delivery: parked in
    // `room` bytes of the thread's block before it), serialised unless
    // concurrent_sink. `copy`: the views point at memory the inner layer
    // reuses for the next split (else at the caller's, from dest).
    template <class Kind, class Items, class Sink, class Call>
    void stream_batches(const Items& X, Sink& sink, bool copy, Call&& call) const
    {
        using view = typename Kind::template view<const O>;
        std::mutex sink_mutex;
        const auto serialised = [&](auto&& f) -> decltype(f()) {
            if (opts_.concurrent_sink) return f();
            std::lock_guard<std::mutex> lock(sink_mutex);
            return f();
        };
        run<Kind>(X, mode::eval, opts_.threads, /*reserve=*/true, /*kept=*/0,
                   [&](span<const seq_view<const T>> items, span<const std::size_t> index, std::size_t,
                       const auto& turn, std::size_t room) {
                       scratch<unsigned char> parking(room);  // carved before the inner layer's scratch
                       detail::stream_delivery<view, std::decay_t<decltype(turn)>> d(turn, parking.data(), room,
                                                                                      copy);
                       const auto deliver = [&](std::size_t j, const view& v) {
                           serialised([&] { sink(index[j], v); });
                       };
                       auto give = [&](std::size_t j, const view& v) { d.give(j, v, deliver); };
                       call(items, index, serialised, give);
                       d.finish(deliver);
                   });
    }

    // forward_as(): `call(items, input_indices, m)` runs one batch's inner
    // forward; the callback (BP, taking the per-split gradients of Kind)
    // runs each batch's backprop in order.
    template <class Kind, class BP, class Items, class Call>
    std::pair<score_list<O>, BP> forward_batches(const Items& X, mode m, Call&& call)
    {
        const std::size_t n = X.size();
        score_list<O> Y = placeholders(n);
        using inner_bp = std::decay_t<decltype(call(std::declval<span<const seq_view<const T>>>(),
                                                    std::declval<span<const std::size_t>>(), m)
                                                   .second)>;
        struct batch_record {
            std::size_t first;  // into `index`
            std::size_t count;
            std::size_t max_len;
            inner_bp bp;
        };
        tracked_vector<batch_record> records;
        tracked_vector<std::size_t> index;
        index.reserve(n);
        run<Kind>(X, m, 1, /*reserve=*/false, kept_bytes<Kind>(n, m),
                   [&](span<const seq_view<const T>> items, span<const std::size_t> idx, std::size_t max_len, auto&&,
                       std::size_t) {
            auto [Yb, bp] = call(items, idx, m);
            records.push_back({index.size(), items.size(), max_len, std::move(bp)});
            for (std::size_t j = 0; j < items.size(); ++j) {
                Y[idx[j]] = std::move(Yb[j]);
                index.push_back(idx[j]);
            }
        });
        const auto* self = this;
        inner_type* inner = &inner_;
        // The gradient views BP takes: Kind's.
        using grad_view = typename Kind::template view<const O>;
        BP bp([records = std::move(records), index = std::move(index), n, m, inner,
               self](span<const grad_view> dY, span<const seq_view<T>> dX) mutable {
            if (dY.size() != n || dX.size() != n) {
                throw shape_error(detail::msg("with_minibatch_by_padded_size backprop: expected ", n,
                                              " split gradients, got ", dY.size(), " (and ", dX.size(),
                                              " input gradient slots)"));
            }
            std::size_t widest = 0;
            for (const batch_record& r : records) widest = std::max(widest, r.count);
            tracked_vector<grad_view> dYb(widest);
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
                workspace_scope ws(self->template cost_as<Kind>(r.count, r.max_len, m).scratch);
                r.bp(span<const grad_view>(dYb.data(), r.count), span<const seq_view<T>>(dXb.data(), r.count));
            }
            guard.dismiss();
        });
        return {std::move(Y), std::move(bp)};
    }

    // Empty outputs, filled batch by batch: a default-constructed xarray
    // would allocate (and count) one element each.
    static score_list<O> placeholders(std::size_t n)
    {
        score_list<O> Y;
        Y.reserve(n);
        for (std::size_t k = 0; k < n; ++k) Y.push_back(score_tensor<O>::from_shape({0}));
        return Y;
    }

    // Pays the bookkeeping out of the budget, then has detail::buffer_scheduler
    // plan every buffer and call `batch(items, input_indices, max_len, turn,
    // room)` once per batch inside a workspace sized by the batch's
    // reported scratch plus `room` bytes; with threads > 1 batches run
    // concurrently. A batch asks `turn` before it delivers anything (see
    // buffer_scheduler). `reserve` (streaming: no batch output is allocated
    // beside the workspace) gives each thread one block for the whole call,
    // sized for the largest batch of the plan (buffer_schedule::reserve),
    // under a byte budget; with threads > 1 a stream's batch also gets
    // `room` to park splits before its turn: what the budget charges it for
    // its outputs and their list, at most what the limit leaves beside its
    // scratch and heap. `kept` (forward: kept_bytes()) is paid out of a byte budget
    // with the bookkeeping. Batches cost the inner layer's cost of `Kind`.
    template <class Kind, class Items, class Batch>
    void run(const Items& X, mode m, std::size_t threads, bool reserve, std::uint64_t kept, Batch&& batch) const
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
            if (kept >= limit) {
                throw budget_error(detail::msg("with_minibatch_by_padded_size: a budget of ", budget_.value,
                                               " bytes does not cover what a forward over ", n, " splits keeps until "
                                               "backprop (", kept, " bytes: the input-order index, the inner layer's "
                                               "saved split views and the gradient snapshot) beside the bookkeeping"));
            }
            limit -= kept;
        }
        auto cost = [&](std::size_t count, std::size_t len) -> std::uint64_t {
            if (budget_.kind == budget_kind::padded_items) return detail::checked_mul(count, len, "padded size");
            try {
                return planned<Kind>(count, len, m);
            } catch (const overflow_error& e) {
                throw overflow_error(detail::msg("with_minibatch_by_padded_size: ", count, " split(s) of length ", len,
                                                 " cannot be sized: ", e.what()));
            }
        };
        const std::size_t n_threads = std::min(threads, threads_for(n));
        const bool park = reserve && n_threads > 1;
        auto room = [&](const batch_cost& c, std::size_t count) -> std::uint64_t {
            if (!park) return 0;
            const std::uint64_t want = detail::round_up_bytes(detail::checked_add(
                c.outputs, detail::checked_mul(count, sizeof(score_tensor<O>), "parking room"), "parking room"));
            if (budget_.kind != budget_kind::bytes) return want;
            const std::uint64_t used = detail::checked_add(c.scratch, c.heap, "parking room");
            const std::uint64_t left = used < limit ? (limit - used) / detail::scratch_alignment * detail::scratch_alignment : 0;
            return std::min(want, left);
        };
        auto workspace = [&](std::size_t count, std::size_t len) {
            const batch_cost c = cost_as<Kind>(count, len, m);
            detail::batch_workspace w{detail::checked_add(c.scratch, room(c, count), "parking room")};
            // Under a byte budget the block kept from an earlier batch counts
            // against this one: reuse it only while it fits beside this
            // batch's other memory (heap, outputs; a stream allocates no
            // outputs), else size it to this batch.
            if (budget_.kind == budget_kind::bytes) {
                const std::uint64_t others = reserve ? c.heap : planned<Kind>(count, len, m) - c.scratch;
                w.keep = std::max(w.scratch, others < limit ? limit - others : 0);
            }
            return w;
        };
        detail::buffer_schedule s;
        s.buffer = opts_.buffer;
        s.threads = n_threads;
        s.limit = limit;
        s.budget = budget_.value;
        s.unit = budget_.kind == budget_kind::bytes ? "bytes" : "padded items";
        s.oversize = opts_.oversize;
        s.oversize_count = &oversize_;
        s.batch_count = &batches_;
        // Only under a byte budget: its batches' workspaces are within the
        // budget, where an items budget bounds no bytes (a batch may need
        // more than memory holds, and must fail in its turn, not up front).
        s.reserve = reserve && budget_.kind == budget_kind::bytes;
        s.batch_order = !opts_.concurrent_sink;
        detail::run_buffers<T>(X, s, cost, workspace,
                               [&](span<const seq_view<const T>> items, span<const std::size_t> index,
                                   std::size_t max_len, const auto& turn) {
                                   const std::uint64_t r = room(cost_as<Kind>(items.size(), max_len, m), items.size());
                                   batch(items, index, max_len, turn, static_cast<std::size_t>(r));
                               });
    }

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

BIAFFINE_NAMESPACE_END
