// biaffine/workspace.hpp - per-thread scratch memory reused across batches.
//
// A batcher opens a workspace_scope sized by the working set its inner layer
// reports for the batch; every layer below carves its temporaries from that one
// block (a stack: last carved, first released). The block grows by freeing and
// re-allocating, never by holding two blocks, so the scratch peak is the
// largest batch's working set. When the outermost scope on a thread closes,
// the block is freed: inference keeps nothing once it returns. Without an
// open scope (a scorer called directly), scratch falls back to a tracked heap
// buffer per request.
#pragma once

#include "biaffine/abi.hpp"

#include <cstddef>
#include <cstdint>
#include <limits>
#include <new>

#include "biaffine/detail/checked.hpp"
#include "biaffine/memory.hpp"

BIAFFINE_NAMESPACE_BEGIN
namespace detail {

constexpr std::size_t scratch_alignment = 64;

inline std::uint64_t round_up_bytes(std::uint64_t bytes)
{
    return checked_mul((checked_add(bytes, scratch_alignment - 1, "scratch size")) / scratch_alignment,
                       scratch_alignment, "scratch size");
}

/// Bytes of `count` elements of T, rounded up to the carving alignment: the
/// unit every reported working set is summed in, so reports match carving.
template <class T>
std::uint64_t scratch_bytes(std::uint64_t count)
{
    return round_up_bytes(checked_mul(count, sizeof(T), "scratch size"));
}

struct arena_state {
    std::byte* block = nullptr;
    std::size_t capacity = 0;
    std::size_t top = 0;
    int scopes = 0;

    void release() noexcept
    {
        if (block != nullptr) {
            tracking_allocator<std::byte>().deallocate(block, capacity);
            block = nullptr;
            capacity = 0;
        }
    }
    ~arena_state() { release(); }
};

inline arena_state& arena()
{
    thread_local arena_state state;
    return state;
}

}  // namespace detail

/// While alive, scratch requests on this thread are carved from one reused
/// block of at least `bytes` bytes (the batch's reported working set).
class workspace_scope {
public:
    /// A block kept from an enclosing scope is reused if it holds `bytes`
    /// and is no larger than `max_keep`; otherwise (when nothing is carved
    /// from it) it is replaced by one of exactly `bytes`. A batcher under a
    /// byte budget passes as `max_keep` what the budget leaves beside the
    /// batch's other memory, so a block kept from a bigger batch never
    /// pushes a smaller one over the budget.
    explicit workspace_scope(std::uint64_t bytes = 0,
                             std::uint64_t max_keep = std::numeric_limits<std::uint64_t>::max())
    {
        // Sized before the scope is counted: a size that overflows throws
        // without leaving the thread's scope count (and block) behind.
        const std::size_t need = detail::to_index_size(detail::round_up_bytes(bytes), "workspace");
        detail::arena_state& a = detail::arena();
        ++a.scopes;
        if (a.top == 0 && a.capacity > max_keep && need <= a.capacity) a.release();
        if (need > a.capacity && a.top == 0) {
            // Free first, then allocate: never two blocks alive at once.
            a.release();
            try {
                a.block = tracking_allocator<std::byte>().allocate(need);
            } catch (...) {
                --a.scopes;
                throw;
            }
            a.capacity = need;
        }
    }
    workspace_scope(const workspace_scope&) = delete;
    workspace_scope& operator=(const workspace_scope&) = delete;
    ~workspace_scope()
    {
        detail::arena_state& a = detail::arena();
        if (--a.scopes == 0) {
            a.release();
            a.top = 0;
        }
    }
};

/// `n` elements of T of scratch, uninitialised, valid until destroyed.
/// Must be destroyed in reverse order of creation on its thread.
template <class T>
class scratch {
public:
    explicit scratch(std::size_t n) : n_(n)
    {
        detail::arena_state& a = detail::arena();
        const std::size_t bytes = detail::to_index_size(detail::scratch_bytes<T>(n), "scratch");
        if (n == 0) return;  // nothing to carve or free
        if (a.scopes > 0 && a.block != nullptr && a.capacity - a.top >= bytes) {
            data_ = reinterpret_cast<T*>(a.block + a.top);
            a.top += bytes;
            carved_ = bytes;
        } else {
            data_ = tracking_allocator<T>().allocate(n);
        }
    }
    scratch(const scratch&) = delete;
    scratch& operator=(const scratch&) = delete;
    ~scratch()
    {
        if (carved_ != 0) {
            detail::arena().top -= carved_;
        } else if (data_ != nullptr) {
            tracking_allocator<T>().deallocate(data_, n_);
        }
    }
    T* data() const noexcept { return data_; }
    std::size_t size() const noexcept { return n_; }
    T& operator[](std::size_t i) const noexcept { return data_[i]; }

private:
    T* data_ = nullptr;
    std::size_t n_ = 0;
    std::size_t carved_ = 0;
};

BIAFFINE_NAMESPACE_END
