// biaffine/detail/block_cache.hpp - large blocks, mapped on huge pages and,
// once freed, cached for the next request: blocks the library allocates
// again and again at similar sizes (cached_tag: the activations a training
// forward keeps for its backward, U, V, T and the softmax outputs of one
// batch) and every tracked block of BIAFFINE_HUGE_PAGE_MIN_BYTES or more (a
// long document's dX). (The per-thread workspace through it too measured no
// faster, Zen 4: its sizes vary, and under the peak bound it pushed kept
// blocks out.)
//
// Dozens of kept blocks live from the forward to the backward of a long
// document. From the heap, glibc returned them to the system after the
// backward, so every step faulted them in and had the kernel zero them
// afresh: 4% of a training step over 100k tokens, o = 1 (perf, Zen 4 EPYC,
// AVX-512). A freed block is kept here instead and handed to the next
// request it fits (at most a quarter larger than asked). The blocks it maps
// (live + cached) never exceed the most that was ever live at once: a
// request no cached block fits unmaps cached blocks until the new one fits
// under that peak. release_cached_blocks() (memory.hpp) unmaps all of them.
// The tracker counts a block while it is allocated, never while cached.
#pragma once

#include "biaffine/abi.hpp"

#include <algorithm>
#include <cstddef>
#include <mutex>
#include <utility>
#include <vector>

#include "biaffine/detail/large_blocks.hpp"

BIAFFINE_NAMESPACE_BEGIN
namespace detail {

struct block_cache {
    std::mutex mutex;
    std::vector<std::pair<void*, std::size_t>> cached;  // free blocks and their mapped lengths
    std::vector<std::pair<void*, std::size_t>> live;    // handed out
    std::size_t cached_bytes = 0;
    std::size_t live_bytes = 0;
    std::size_t peak_bytes = 0;  // most live at once, ever: bounds live + cached

    // Never destroyed: a tracked block freed during static destruction (a
    // global tensor, say) still finds the cache.
    static block_cache& instance()
    {
        static block_cache* cache = new block_cache;
        return *cache;
    }

    // Unmaps cached blocks, largest first, until `cached_bytes <= keep`.
    // Caller holds the mutex.
    void trim_to(std::size_t keep) noexcept
    {
        std::sort(cached.begin(), cached.end(), [](const auto& a, const auto& b) { return a.second < b.second; });
        while (cached_bytes > keep && !cached.empty()) {
            large_block_free(cached.back().first, cached.back().second);
            cached_bytes -= cached.back().second;
            cached.pop_back();
        }
    }

    void* allocate(std::size_t bytes)
    {
        const std::size_t len = large_block_span(bytes);
        {
            std::lock_guard<std::mutex> lock(mutex);
            live.reserve(live.size() + 1);  // may throw: nothing changed yet
            // The smallest cached block that fits, if no more than a quarter larger.
            auto best = cached.end();
            for (auto it = cached.begin(); it != cached.end(); ++it) {
                if (it->second >= len && it->second - len <= len / 4 &&
                    (best == cached.end() || it->second < best->second)) {
                    best = it;
                }
            }
            if (best != cached.end()) {
                const std::pair<void*, std::size_t> b = *best;
                cached.erase(best);
                cached_bytes -= b.second;
                live.push_back(b);
                note_live(b.second);
                return b.first;
            }
            // Room under the peak for the new block beside what is live.
            const std::size_t after = live_bytes + len;
            trim_to(std::max(peak_bytes, after) - after);
        }
        void* p = large_block_allocate(len);
        std::lock_guard<std::mutex> lock(mutex);
        try {
            live.push_back({p, len});  // reserved above, unless another thread took the room
        } catch (...) {
            large_block_free(p, len);
            throw;
        }
        note_live(len);
        return p;
    }

    void free(void* p) noexcept
    {
        std::lock_guard<std::mutex> lock(mutex);
        const auto it = std::find_if(live.begin(), live.end(), [p](const auto& b) { return b.first == p; });
        if (it == live.end()) return;  // not ours: cannot happen through tracking_allocator
        const std::pair<void*, std::size_t> b = *it;
        *it = live.back();
        live.pop_back();
        live_bytes -= b.second;
        try {
            cached.push_back(b);
            cached_bytes += b.second;
        } catch (...) {  // no room to remember it: unmap it now
            large_block_free(b.first, b.second);
        }
    }

    std::size_t release() noexcept
    {
        std::lock_guard<std::mutex> lock(mutex);
        const std::size_t bytes = cached_bytes;
        trim_to(0);
        return bytes;
    }

private:
    void note_live(std::size_t len) noexcept
    {
        live_bytes += len;
        peak_bytes = std::max(peak_bytes, live_bytes);
    }
};

}  // namespace detail
BIAFFINE_NAMESPACE_END
