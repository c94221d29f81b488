// biaffine/detail/scorer_cost.hpp - what a batch costs the scorer, in bytes by
// lifetime: the unit of the batcher's byte budget. Exact for the scratch the
// scorer carves (the tests compare it with the tracker).
#pragma once

#include "biaffine/abi.hpp"

#include <cstddef>
#include <cstdint>

#include "biaffine/detail/checked.hpp"
#include "biaffine/detail/compute/backend.hpp"
#include "biaffine/scorer.hpp"
#include "biaffine/workspace.hpp"

BIAFFINE_NAMESPACE_BEGIN

template <class T>
batch_cost biaffine_scorer<T>::cost(std::size_t count, std::size_t max_len, mode m) const
{
    using detail::checked_add;
    using detail::checked_mul;
    using detail::scratch_bytes;
    const std::uint64_t rows = checked_mul(count, max_len, "batch cost");
    const std::uint64_t o = cfg_.labels;
    batch_cost c;
    c.outputs =
        detail::checked_product("batch cost", checked_mul(max_len, max_len, "batch cost"), o, count, sizeof(T));
    const std::uint64_t xp = scratch_bytes<T>(checked_mul(rows, cfg_.n_in, "batch cost"));
    // X is gathered (inference and both training passes) only where the
    // backend cannot read the splits in place.
    const std::uint64_t input = detail::compute_backend<T>::reads_items ? 0 : xp;
    const std::uint64_t u = scratch_bytes<T>(checked_mul(rows, hu(), "batch cost"));
    const std::uint64_t v = scratch_bytes<T>(checked_mul(rows, hv(), "batch cost"));
    const std::uint64_t t = scratch_bytes<T>(detail::checked_product("batch cost", rows, o, hv()));
    // Inference holds T for a group of splits at a time where the backend groups.
    const std::uint64_t eval_t = scratch_bytes<T>(detail::checked_product(
        "batch cost", eval_t_rows(detail::to_index_size(rows, "batch cost"), max_len), o, hv()));
    const std::uint64_t offsets = scratch_bytes<std::size_t>(checked_add(count, 1, "batch cost"));
    // One split's scores (max_len^2 * o): predict_stream's buffer, or in
    // training one split's dS (and its recomputed scores).
    const std::uint64_t one = scratch_bytes<T>(detail::checked_product("batch cost", max_len, max_len, o));
    const std::uint64_t uvt = checked_add(checked_add(u, v, "batch cost"), t, "batch cost");
    if (m == mode::eval) {
        // The backend's packed block beside X (when gathered), U, V, T.
        const std::uint64_t packed = scratch_bytes<T>(packed_elements(max_len));
        const std::uint64_t uv_t = checked_add(checked_add(u, v, "batch cost"), eval_t, "batch cost");
        c.scratch = checked_add(checked_add(checked_add(offsets, input, "batch cost"),
                                            checked_add(one, packed, "batch cost"), "batch cost"),
                                uv_t, "batch cost");
        return c;
    }
    // Train: the split views and offsets stay for backward, and unless
    // recomputing, U, V, T and the softmax outputs too. Backward carves dT,
    // dV, dU, one split's dS (softmax), X (gathered, unless the backend
    // reads the splits in place) and the backend's packed block (and
    // when recomputing U, V, T and one split's scores again). The forward
    // carves X (unless the backend reads the splits in place) and a packed
    // block no larger (train_packed_elements bounds
    // both), plus U, V, T when recomputing: never more than backward.
    // Training on logits (no softmax) has no dS, no recomputed scores and
    // keeps no copy of the outputs.
    const bool softmax = softmax_in(m);
    const std::uint64_t one_ds = softmax ? one : 0;
    const std::uint64_t views = checked_mul(count, sizeof(seq_view<const T>) + sizeof(std::size_t), "batch cost");
    const std::uint64_t packed =
        scratch_bytes<T>(train_packed_elements(max_len, detail::to_index_size(rows, "batch cost")));
    const std::uint64_t backward =
        checked_add(checked_add(checked_add(uvt, one_ds, "batch cost"), checked_add(input, offsets, "batch cost"),
                                "batch cost"),
                    packed, "batch cost");
    if (cfg_.recompute_in_backward) {
        c.saved = views;
        c.scratch = checked_add(backward, checked_add(uvt, one_ds, "batch cost"), "batch cost");
    } else {
        c.saved = checked_add(checked_add(uvt, softmax ? c.outputs : 0, "batch cost"), views, "batch cost");
        c.scratch = backward;
    }
    return c;
}

template <class T>
batch_cost biaffine_scorer<T>::padded_cost(std::size_t count, std::size_t max_len, mode m) const
{
    batch_cost c = cost(count, max_len, m);
    const std::uint64_t views = detail::checked_mul(count, sizeof(seq_view<const T>), "batch cost");
    c.heap = detail::checked_add(c.heap, views, "batch cost");
    if (m == mode::train) {
        const std::uint64_t grads =
            detail::checked_mul(count, sizeof(score_view<const T>) + sizeof(seq_view<T>), "batch cost");
        c.saved = detail::checked_add(c.saved, detail::checked_mul(count, sizeof(std::size_t), "batch cost"),
                                      "batch cost");
        c.heap = detail::checked_add(c.heap, grads, "batch cost");
    }
    return c;
}

// Elements of the packed block the backend carves for splits of up to
// max_len tokens (and in training a batch of up to `rows` rows), inference
// and training (0 for Eigen).
template <class T>
std::size_t biaffine_scorer<T>::packed_elements(std::size_t max_len) const noexcept
{
    return detail::compute_backend<T>::packed_elements(dims(), max_len);
}
template <class T>
std::size_t biaffine_scorer<T>::train_packed_elements(std::size_t max_len, std::size_t rows) const noexcept
{
    return detail::compute_backend<T>::train_packed_elements(dims(), max_len, rows);
}

BIAFFINE_NAMESPACE_END
