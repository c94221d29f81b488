// biaffine/detail/stream_delivery.hpp - how one batch of a stream on several
// threads hands its splits to the sink.
//
// A batch may deliver only in its turn (detail/buffer_scheduler.hpp). Waiting
// for it at the first split kept a thread idle while the batch before it
// delivered: at one label, where a batch is mostly its GEMMs and delivering
// it is quick, two threads ran barely faster than one. So until its turn a
// batch parks each split (the index, the view and, when the scores sit in a
// buffer the next split overwrites, a copy) in room carved from its thread's
// workspace block, and computes on; when the turn comes it delivers what is
// parked, in order, then streams straight to the sink. Only a batch whose
// room is full, or that ends before its turn, waits. The room is bounded by
// what the budget charges the batch for its outputs (the layer sizes it), so
// the thread's block stays within the budget. One thread: always its turn,
// nothing parked.
#pragma once

#include "biaffine/abi.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <type_traits>

#include "biaffine/detail/buffer_scheduler.hpp"
#include "biaffine/tensor.hpp"

BIAFFINE_NAMESPACE_BEGIN
namespace detail {

// Thrown inside a batch whose turn never comes because an earlier batch
// failed; never leaves the layer (the earlier error does).
struct delivery_cancelled {};

// A view's elements, copied densely into parked room and viewed there:
// `[n, n * o]` scores or `[n, o]` labels at given heads.
template <class O>
std::size_t view_elements(const score_view<const O>& v) noexcept
{
    return v.n * v.n * v.labels;
}
template <class O>
std::size_t view_elements(const seq_view<const O>& v) noexcept
{
    return v.rows * v.cols;
}
template <class O>
score_view<const O> copy_view(const score_view<const O>& v, O* to)
{
    const std::size_t row = v.n * v.labels;
    copy_rows(seq_view<const O>{v.data, v.n, row, v.row_stride, 1}, to);
    return {to, v.n, v.labels, static_cast<std::ptrdiff_t>(row)};
}
template <class O>
seq_view<const O> copy_view(const seq_view<const O>& v, O* to)
{
    copy_rows(v, to);
    return {to, v.rows, v.cols, static_cast<std::ptrdiff_t>(v.cols), 1};
}

/// One batch's deliveries (see the file comment). `View`: score_view<const O>
/// or seq_view<const O>; `Turn`: the scheduler's delivery_turn.
template <class View, class Turn>
class stream_delivery {
public:
    using value_type = std::remove_const_t<std::remove_pointer_t<decltype(View::data)>>;
    /// What a parked split costs beside its elements.
    struct parked {
        std::size_t split;
        View view;
    };

    /// `room`: `bytes` carved for parking (64-byte aligned; 0: none, the
    /// batch waits for its turn at its first split). `copy`: the views point
    /// at memory the next split reuses (else at the caller's, kept as is).
    stream_delivery(const Turn& turn, void* room, std::size_t bytes, bool copy) noexcept
        : turn_(turn), records_(static_cast<parked*>(room)), copy_(copy)
    {
        // Records grow up from the start, copies down from the end.
        base_ = reinterpret_cast<std::uintptr_t>(room);
        top_ = room == nullptr ? 0 : base_ + bytes;
    }

    /// Split `split` (the batch's index) with its view: to `deliver(split,
    /// view)` now in the batch's turn, else parked. Throws
    /// delivery_cancelled when the turn never comes.
    template <class Deliver>
    void give(std::size_t split, const View& v, Deliver&& deliver)
    {
        if (!direct_) {
            turn_state t = turn_.poll();
            if (t == turn_state::wait && park(split, v)) return;
            if (t == turn_state::wait) t = turn_.wait();  // no room: wait here
            start(t, deliver);
        }
        deliver(split, v);
    }

    /// At the end of the batch: waits for its turn and delivers what is
    /// parked (nothing to do when nothing is).
    template <class Deliver>
    void finish(Deliver&& deliver)
    {
        if (!direct_ && n_ != 0) start(turn_.wait(), deliver);
    }

private:
    template <class Deliver>
    void start(turn_state t, Deliver& deliver)
    {
        if (t == turn_state::cancelled) throw delivery_cancelled{};
        direct_ = true;
        for (std::size_t i = 0; i < n_; ++i) deliver(records_[i].split, records_[i].view);
    }

    // Parks a split when it fits between the records and the copies.
    bool park(std::size_t split, const View& v)
    {
        if (records_ == nullptr) return false;
        const std::uintptr_t records_end = base_ + (n_ + 1) * sizeof(parked);
        std::uintptr_t at = top_;
        if (copy_) {
            const std::uintptr_t bytes = view_elements(v) * sizeof(value_type);
            if (top_ < records_end + bytes) return false;
            at = (top_ - bytes) / alignof(value_type) * alignof(value_type);
        }
        if (at < records_end) return false;
        View kept = copy_ ? copy_view(v, reinterpret_cast<value_type*>(at)) : v;
        ::new (static_cast<void*>(records_ + n_)) parked{split, kept};
        ++n_;
        top_ = at;
        return true;
    }

    const Turn& turn_;
    parked* records_;
    std::uintptr_t base_ = 0;
    std::uintptr_t top_ = 0;  // the lowest copy so far (the room's end at first)
    std::size_t n_ = 0;       // splits parked
    bool copy_;
    bool direct_ = false;     // the turn has come: straight to the sink
};

}  // namespace detail
BIAFFINE_NAMESPACE_END
