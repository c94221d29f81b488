// biaffine/detail/compute/host_activations.hpp - a batch's activations on the
// host: what host_batch's hold() and carve() allocate and its operations
// read through batch_pointers (interface.hpp). The scorer holds these
// objects but never reads the pointers inside (the batch is the
// backend's); a device backend has its own owners.
#pragma once

#include "biaffine/abi.hpp"

#include <cstddef>
#include <cstdint>

#include "biaffine/detail/checked.hpp"
#include "biaffine/detail/compute/interface.hpp"
#include "biaffine/detail/compute/operands.hpp"
#include "biaffine/detail/split_checks.hpp"
#include "biaffine/memory.hpp"
#include "biaffine/tensor.hpp"
#include "biaffine/workspace.hpp"

BIAFFINE_NAMESPACE_BEGIN
namespace detail {

/// Activations kept from a training forward for its backward: U, V, T and
/// `ys` kept output elements in one block that moves with the backward
/// callback, on huge pages when large (cached_tag). Each part starts on a
/// scratch boundary, so the block is what the cost model counts for U, V
/// and T, plus the outputs. Empty (default-built) when recomputing.
template <class T>
class host_held {
public:
    host_held() = default;
    host_held(const scorer_dims& d, std::size_t N, std::size_t ys)
    {
        const char* what = "kept activations";
        // Elements of each part, rounded up to the scratch alignment.
        const auto part = [&](std::size_t n) { return to_index_size(scratch_bytes<T>(n), what) / sizeof(T); };
        const std::size_t nu = part(packed_count<T>("packed U", N, d.hu()));
        const std::size_t nv = part(packed_count<T>("packed V", N, d.hv()));
        const std::size_t nt = part(packed_count<T>("packed T", N, d.labels, d.hv()));
        const std::uint64_t total = checked_add(checked_add(checked_add(nu, nv, what), nt, what), ys, what);
        block_ = block_type::from_shape({packed_count<T>(what, total)});
        a_.u = block_.data();
        a_.v = a_.u + nu;
        a_.t = a_.v + nv;
        a_.ys = ys == 0 ? nullptr : a_.t + nt;
    }
    // Moving the block keeps its buffer, so the pointers stay valid.
    const batch_pointers<T>& acts() const noexcept { return a_; }

private:
    using block_type = xt::xtensor<T, 1, xt::layout_type::row_major, tracking_allocator<T, cached_tag>>;
    block_type block_;
    batch_pointers<T> a_;
};

/// Activations of one call in workspace scratch (inference, a forward that
/// recomputes in backward, backward's recompute): U, V, T, freed with it.
/// Not movable (scratch is a stack): built in place from carve().
template <class T>
class host_carved {
public:
    host_carved(const scorer_dims& d, std::size_t N)
        : u_(packed_count<T>("packed U", N, d.hu())),
          v_(packed_count<T>("packed V", N, d.hv())),
          t_(packed_count<T>("packed T", N, d.labels, d.hv()))
    {
        a_.u = u_.data();
        a_.v = v_.data();
        a_.t = t_.data();
    }
    const batch_pointers<T>& acts() const noexcept { return a_; }

private:
    scratch<T> u_, v_, t_;
    batch_pointers<T> a_;
};

}  // namespace detail
BIAFFINE_NAMESPACE_END
