// biaffine/detail/scorer/cost.hpp - what a batch costs the scorer, in bytes by
// lifetime: the unit of the batcher's byte budget. Exact for the scratch the
// scorer carves (the tests compare it with the tracker).
#pragma once

#include "biaffine/abi.hpp"

#include <cstddef>
#include <cstdint>

#include "biaffine/detail/checked.hpp"
#include "biaffine/detail/compute/backend.hpp"
#include "biaffine/detail/output_kind.hpp"
#include "biaffine/detail/scorer/declaration.hpp"
#include "biaffine/workspace.hpp"

BIAFFINE_NAMESPACE_BEGIN

template <class T, class Backend, class Out>
batch_cost biaffine_scorer<T, Backend, Out>::cost(std::size_t count, std::size_t max_len, mode m) const
{
    return kind_cost<detail::full_scores_kind>(count, max_len, m);
}

// The cost of a batch for one output kind (detail/output_kind.hpp): a kind
// that reads only its split's rows of T (full scores) holds T a group of
// splits at a time in inference and gives the backend a packed block for a
// split's products; one that gathers rows (labels at given heads) holds T
// for every row and the packed row each token reads.
template <class T, class Backend, class Out>
template <class Kind>
batch_cost biaffine_scorer<T, Backend, Out>::kind_cost(std::size_t count, std::size_t max_len, mode m) const
{
    using detail::checked_add;
    using detail::checked_mul;
    using detail::scratch_bytes;
    const char* what = "batch cost";
    const std::uint64_t rows = checked_mul(count, max_len, what);
    const std::size_t o = cfg_.labels;
    batch_cost c;
    c.outputs = detail::checked_product(what, Kind::elements(max_len, o, what), count, sizeof(Out));
    // What the backend holds on a device (none on the host).
    c.device = backend_.device_bytes(count, max_len, m);
    const std::uint64_t xp = scratch_bytes<T>(checked_mul(rows, cfg_.n_in, what));
    // X is gathered (inference and both training passes) only where the
    // backend cannot read the splits in place.
    const std::uint64_t input = Backend::reads_items ? 0 : xp;
    const std::uint64_t u = scratch_bytes<T>(checked_mul(rows, hu(), what));
    const std::uint64_t v = scratch_bytes<T>(checked_mul(rows, hv(), what));
    const std::uint64_t t = scratch_bytes<T>(detail::checked_product(what, rows, o, hv()));
    const std::uint64_t uvt = checked_add(checked_add(u, v, what), t, what);
    const std::uint64_t offsets = scratch_bytes<std::size_t>(checked_add(count, 1, what));
    // The packed row each token reads (a kind that gathers rows).
    const std::uint64_t head_rows = Kind::gathers_rows ? checked_mul(rows, sizeof(std::size_t), what) : 0;
    // The longest split a backend product sees in the packed block (none
    // where the kind gathers rows).
    const std::size_t split_len = Kind::gathers_rows ? 0 : max_len;
    // One split's output: predict_stream's buffer (Out), or in training one
    // split's dS (and its recomputed output).
    const std::uint64_t one = scratch_bytes<T>(Kind::elements(max_len, o, what));
    const std::uint64_t stream = scratch_bytes<Out>(Kind::elements(max_len, o, what));
    // An output type apart from T: one split's output in T before it is
    // converted (inference and the training forward), and in backward the
    // batch's gradients converted to T with their views.
    const std::uint64_t convert_one = converts ? one : 0;
    // What the kind's product carves for one split on top of all that (its
    // normalisation's working memory; most kinds none), in every mode.
    const std::uint64_t product_own = detail::kind_product_scratch_bytes<Kind>(max_len, o);
    if (m == mode::eval) {
        // The backend's inference scratch (offsets, head rows, X when
        // gathered, U, V, T, its packed block; bf16: its group scratch),
        // the stream buffer and one split's converted output.
        c.scratch = checked_add(backend_.template predict_scratch_bytes<Kind>(count, max_len),
                                checked_add(checked_add(stream, convert_one, what), product_own, what), what);
        return c;
    }
    // Train: the split views, offsets (and head rows) stay for backward, and
    // unless recomputing, U, V, T and the softmax outputs too. Backward
    // carves dT, dV, dU, one split's dS (softmax), X (gathered, unless the
    // backend reads the splits in place) and the backend's packed block
    // (and when recomputing U, V, T and one split's output again). The
    // forward carves X (unless the backend reads the splits in place) and a
    // packed block no larger (train_packed_elements bounds both), plus U, V,
    // T when recomputing: never more than backward. Training on logits (no
    // softmax) has no dS, no recomputed outputs and keeps no copy of them.
    const bool softmax = softmax_in(m);
    const std::uint64_t one_ds = softmax ? one : 0;
    // The split views, their count + 1 row offsets (and the rows each token reads).
    const std::uint64_t views = checked_add(
        checked_add(checked_mul(count, sizeof(seq_view<const T>) + sizeof(std::size_t), what), sizeof(std::size_t),
                    what),
        head_rows, what);
    const std::uint64_t packed = scratch_bytes<T>(train_packed_elements(split_len, detail::to_index_size(rows, what)));
    // Converting backward: one split's dY in T (the backend's loop converts
    // them one at a time; the forward's one split of T is no more).
    const std::uint64_t convert_dy = convert_one;
    // Backward of a kind that reads its split's rows also counts the
    // offsets (as full scores always have: an upper bound the tests hold it to).
    const std::uint64_t backward = checked_add(
        checked_add(checked_add(checked_add(uvt, one_ds, what), checked_add(input, Kind::gathers_rows ? 0 : offsets, what),
                                what),
                    packed, what),
        convert_dy, what);
    // The kept softmax outputs are T, whatever the output type (and, for a
    // kind whose outputs are laid out split by split, their count + 1 offsets).
    const std::uint64_t y_off = Kind::per_row ? 0 : checked_mul(checked_add(count, 1, what), sizeof(std::size_t), what);
    const std::uint64_t kept_y =
        softmax ? checked_add(detail::checked_product(what, Kind::elements(max_len, o, what), count, sizeof(T)), y_off,
                              what)
                : 0;
    if (cfg_.recompute_in_backward) {
        c.saved = views;
        c.scratch = checked_add(checked_add(backward, checked_add(uvt, one_ds, what), what), product_own, what);
    } else {
        c.saved = checked_add(checked_add(uvt, kept_y, what), views, what);
        c.scratch = checked_add(backward, product_own, what);
    }
    return c;
}

template <class T, class Backend, class Out>
batch_cost biaffine_scorer<T, Backend, Out>::padded_cost(std::size_t count, std::size_t max_len, mode m) const
{
    return padded_cost_as<detail::full_scores_kind>(count, max_len, m);
}

// The padded interface's cost of a kind: its split cost, the per-sequence
// views (and the kind's padded arguments) as heap; training keeps the
// lengths and builds per-sequence gradient views in backward.
template <class T, class Backend, class Out>
template <class Kind>
batch_cost biaffine_scorer<T, Backend, Out>::padded_cost_as(std::size_t count, std::size_t max_len, mode m) const
{
    const char* what = "batch cost";
    batch_cost c = kind_cost<Kind>(count, max_len, m);
    const std::uint64_t views = detail::checked_mul(count, sizeof(seq_view<const T>), what);
    c.heap = detail::checked_add(c.heap, detail::checked_add(views, Kind::padded_args_bytes(count, max_len), what),
                                 what);
    if (m == mode::train) {
        const std::uint64_t grads =
            detail::checked_mul(count, sizeof(typename Kind::template view<const T>) + sizeof(seq_view<T>), what);
        c.saved = detail::checked_add(c.saved, detail::checked_mul(count, sizeof(std::size_t), what), what);
        c.heap = detail::checked_add(c.heap, grads, what);
    }
    return c;
}

// Elements of the packed block the backend carves for splits of up to
// max_len tokens (and in training a batch of up to `rows` rows), inference
// and training (0 for Eigen).
template <class T, class Backend, class Out>
std::size_t biaffine_scorer<T, Backend, Out>::packed_elements(std::size_t max_len) const noexcept
{
    return backend_.packed_elements(max_len);
}
template <class T, class Backend, class Out>
std::size_t biaffine_scorer<T, Backend, Out>::train_packed_elements(std::size_t max_len, std::size_t rows) const noexcept
{
    return backend_.train_packed_elements(max_len, rows);
}

BIAFFINE_NAMESPACE_END
