// biaffine/memory.hpp - the tracking allocator every library buffer goes through.
//
// One process-wide tracker counts current bytes, peak bytes and allocations,
// exactly (not sampled). Bytes are split in two categories: `work` (scratch,
// activations, bookkeeping) and `output` (score tensors handed to the caller),
// so the batching bound "peak working set <= budget" can be checked at every
// moment, not just at the end. Thread-safe.
#pragma once

#include "biaffine/abi.hpp"

#include <cstddef>
#include <cstdint>
#include <limits>
#include <mutex>
#include <new>
#include <type_traits>
#include <utility>

#include "biaffine/detail/block_cache.hpp"
#include "biaffine/detail/large_blocks.hpp"
#include "biaffine/detail/output_chunks.hpp"
#include "biaffine/errors.hpp"

BIAFFINE_NAMESPACE_BEGIN

/// Category tag of tracking_allocator: scratch, activations, bookkeeping.
struct work_tag {};
/// Category tag of tracking_allocator: buffers handed to the caller (scores).
struct output_tag {};
/// Category tag of tracking_allocator: blocks the library allocates again and
/// again at similar sizes (what a training forward keeps for its backward).
/// Counted as work; blocks of
/// BIAFFINE_CACHED_BLOCK_MIN_BYTES or more are mapped on huge pages and, once
/// freed, cached for reuse (detail/block_cache.hpp).
struct cached_tag {};

/// A snapshot of the tracker's counters.
struct memory_stats {
    std::uint64_t current_bytes = 0;   ///< all tracked bytes alive now
    std::uint64_t peak_bytes = 0;      ///< max of current_bytes since the last reset
    std::uint64_t output_bytes = 0;    ///< output-category bytes alive now
    std::uint64_t work_peak_bytes = 0; ///< max of (current - output) since the last reset
    std::uint64_t allocations = 0;     ///< number of allocations since process start
    std::uint64_t frees = 0;           ///< number of deallocations since process start
};

/// The process-wide byte counter behind tracking_allocator.
///
/// A `limit` turns it into a hard cap: an allocation that would take current
/// bytes above it throws std::bad_alloc before touching the heap (used to test
/// exception safety and to keep a service inside a memory quota).
class memory_tracker {
public:
    /// The process-wide tracker (also `biaffine::tracker()`).
    static memory_tracker& instance()
    {
        static memory_tracker tracker;
        return tracker;
    }

    /// A consistent snapshot of every counter.
    memory_stats stats() const
    {
        std::lock_guard<std::mutex> lock(mutex_);
        return stats_;
    }
    /// Tracked bytes alive now.
    std::uint64_t current_bytes() const { return stats().current_bytes; }
    /// Highest current_bytes since the last reset_peak().
    std::uint64_t peak_bytes() const { return stats().peak_bytes; }
    /// Allocations since process start.
    std::uint64_t allocations() const { return stats().allocations; }

    /// Resets both peaks to the current values (start of a measured region).
    void reset_peak()
    {
        std::lock_guard<std::mutex> lock(mutex_);
        stats_.peak_bytes = stats_.current_bytes;
        stats_.work_peak_bytes = stats_.current_bytes - stats_.output_bytes;
    }

    /// Hard cap on current bytes; 0 means none.
    void set_limit(std::uint64_t bytes)
    {
        std::lock_guard<std::mutex> lock(mutex_);
        limit_ = bytes;
    }
    /// The hard cap set by set_limit (0: none).
    std::uint64_t limit() const
    {
        std::lock_guard<std::mutex> lock(mutex_);
        return limit_;
    }

    /// Records an allocation of `bytes` in a category; throws std::bad_alloc
    /// when a limit is set and would be exceeded.
    void on_allocate(std::uint64_t bytes, bool is_output)
    {
        std::lock_guard<std::mutex> lock(mutex_);
        if (limit_ != 0 && (bytes > limit_ || stats_.current_bytes > limit_ - bytes)) {
            throw std::bad_alloc();
        }
        stats_.current_bytes += bytes;
        if (is_output) {
            stats_.output_bytes += bytes;
        }
        ++stats_.allocations;
        if (stats_.current_bytes > stats_.peak_bytes) {
            stats_.peak_bytes = stats_.current_bytes;
        }
        const std::uint64_t work = stats_.current_bytes - stats_.output_bytes;
        if (work > stats_.work_peak_bytes) {
            stats_.work_peak_bytes = work;
        }
    }

    /// Records the release of `bytes` in a category.
    void on_deallocate(std::uint64_t bytes, bool is_output) noexcept
    {
        std::lock_guard<std::mutex> lock(mutex_);
        stats_.current_bytes -= bytes;
        if (is_output) {
            stats_.output_bytes -= bytes;
        }
        ++stats_.frees;
    }

    /// Sets both peaks and returns the old ones (scoped_peak swaps a scope's
    /// peaks in and out with it).
    std::pair<std::uint64_t, std::uint64_t> exchange_peaks(std::uint64_t peak, std::uint64_t work_peak)
    {
        std::lock_guard<std::mutex> lock(mutex_);
        std::pair<std::uint64_t, std::uint64_t> old{stats_.peak_bytes, stats_.work_peak_bytes};
        stats_.peak_bytes = peak;
        stats_.work_peak_bytes = work_peak;
        return old;
    }

private:
    memory_tracker() = default;
    mutable std::mutex mutex_;
    memory_stats stats_;
    std::uint64_t limit_ = 0;
};

/// The tracker every library buffer goes through.
inline memory_tracker& tracker() { return memory_tracker::instance(); }

/// Peak bytes within a scope. Nests: on destruction the enclosing peak becomes
/// max(enclosing peak, this scope's peak), as if the scope were never opened.
/// The peaks are process-wide: scopes opened concurrently on several threads
/// see each other's allocations (measure one thing at a time).
class scoped_peak {
public:
    /// Opens the scope: the peaks restart at the current bytes.
    scoped_peak()
    {
        const memory_stats s = tracker().stats();
        start_ = s.current_bytes;
        saved_ = tracker().exchange_peaks(s.current_bytes, s.current_bytes - s.output_bytes);
    }
    scoped_peak(const scoped_peak&) = delete;
    scoped_peak& operator=(const scoped_peak&) = delete;
    ~scoped_peak()
    {
        const memory_stats s = tracker().stats();
        tracker().exchange_peaks(s.peak_bytes > saved_.first ? s.peak_bytes : saved_.first,
                                 s.work_peak_bytes > saved_.second ? s.work_peak_bytes : saved_.second);
    }
    /// Current bytes when the scope opened.
    std::uint64_t start_bytes() const { return start_; }
    /// Peak of all tracked bytes within the scope.
    std::uint64_t peak_bytes() const { return tracker().stats().peak_bytes; }
    /// Peak within the scope minus the bytes alive at its start.
    std::uint64_t peak_increase() const { return peak_bytes() - start_; }
    /// Peak of (current - output bytes) within the scope: the working set.
    std::uint64_t work_peak_bytes() const { return tracker().stats().work_peak_bytes; }

private:
    std::uint64_t start_ = 0;
    std::pair<std::uint64_t, std::uint64_t> saved_;
};

/// Unmaps the freed blocks cached for reuse (cached_tag: kept activations,
/// see detail/block_cache.hpp; chunks of freed scores, see
/// detail/output_chunks.hpp), e.g. once a program is done training. Returns
/// the bytes unmapped. Safe at any time; blocks in use stay.
inline std::size_t release_cached_blocks() noexcept
{
    return detail::block_cache::instance().release() + detail::output_chunks::instance().release();
}

/// Standard allocator that reports to the tracker. 64-byte aligned so every
/// buffer suits the widest SIMD loads (AVX-512) and Eigen's aligned paths.
template <class T, class Tag = work_tag>
class tracking_allocator {
public:
    using value_type = T;
    static constexpr std::size_t alignment = 64;

    template <class U>
    struct rebind {
        using other = tracking_allocator<U, Tag>;
    };

    tracking_allocator() noexcept = default;
    template <class U>
    tracking_allocator(const tracking_allocator<U, Tag>&) noexcept
    {
    }

    /// `n` uninitialised elements, 64-byte aligned; counted before the heap
    /// is touched (throws std::bad_alloc over the tracker's limit).
    T* allocate(std::size_t n)
    {
        if (n > std::numeric_limits<std::size_t>::max() / sizeof(T)) {
            throw std::bad_array_new_length();
        }
        const std::size_t bytes = n * sizeof(T);
        tracker().on_allocate(bytes, is_output);
        try {
            if (is_output && detail::output_chunks::fits(bytes)) {
                return static_cast<T*>(detail::output_chunks::instance().allocate(bytes));
            }
            if (detail::is_large_block(bytes, large_min)) {
                return static_cast<T*>(detail::block_cache::instance().allocate(bytes));
            }
            return static_cast<T*>(::operator new(bytes, std::align_val_t(alignment)));
        } catch (...) {
            tracker().on_deallocate(bytes, is_output);
            throw;
        }
    }

    /// Frees `n` elements from allocate() and uncounts them.
    void deallocate(T* p, std::size_t n) noexcept
    {
        const std::size_t bytes = n * sizeof(T);
        tracker().on_deallocate(bytes, is_output);
        if (is_output && detail::output_chunks::fits(bytes)) {
            detail::output_chunks::instance().free(p);
        } else if (detail::is_large_block(bytes, large_min)) {
            detail::block_cache::instance().free(p);
        } else {
            ::operator delete(p, std::align_val_t(alignment));
        }
    }

    template <class U>
    bool operator==(const tracking_allocator<U, Tag>&) const noexcept
    {
        return true;
    }
    template <class U>
    bool operator!=(const tracking_allocator<U, Tag>&) const noexcept
    {
        return false;
    }

private:
    static constexpr bool is_output = std::is_same<Tag, output_tag>::value;
    static constexpr bool cached = std::is_same<Tag, cached_tag>::value;
    // Blocks from this size on bypass operator new: mapped, and cached when
    // freed (large_blocks.hpp, block_cache.hpp).
    static constexpr std::size_t large_min =
        static_cast<std::size_t>(cached ? BIAFFINE_CACHED_BLOCK_MIN_BYTES : BIAFFINE_HUGE_PAGE_MIN_BYTES);
};

BIAFFINE_NAMESPACE_END
