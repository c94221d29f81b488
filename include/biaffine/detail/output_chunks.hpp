// biaffine/detail/output_chunks.hpp - score tensors carved from mapped
// chunks that stay mapped once their scores are freed.
//
// A caller scores a document, reads the scores and frees them, then scores
// the next one. From the heap, each split's scores (n^2 o floats: 100 KiB at
// n = 22, 50 labels) came back to glibc, which returned the top of its heap
// to the system once they were all freed, so every call faulted its outputs
// in afresh and had the kernel zero them: 21,500 faults per call over 20k
// tokens at 50 labels, about a tenth of the call (perf, AVX-512 Xeon model
// 207). Here output blocks of up to a quarter of BIAFFINE_OUTPUT_CHUNK_BYTES
// are cut one after the other from chunks of that size (mapped, aligned to
// their size, so a block finds its chunk by masking its address). A chunk
// counts its live blocks; when the last one is freed it starts over if
// blocks are being cut from it, else it is kept for the next calls, up to
// BIAFFINE_OUTPUT_CHUNK_CACHE_BYTES of kept chunks, and unmapped beyond
// that. The price: a block held on to keeps its whole chunk mapped.
// release_cached_blocks() (memory.hpp) unmaps the kept chunks. The tracker
// counts what was asked for, not the chunks.
#pragma once

#include "biaffine/abi.hpp"

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <new>

#include "biaffine/config.hpp"
#include "biaffine/detail/large_blocks.hpp"

#if defined(__SANITIZE_ADDRESS__)
#define BIAFFINE_DETAIL_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define BIAFFINE_DETAIL_ASAN 1
#endif
#endif
#ifndef BIAFFINE_DETAIL_ASAN
#define BIAFFINE_DETAIL_ASAN 0
#endif

// Off without mapped blocks (not Linux), and under AddressSanitizer, which
// checks each block's bounds only when it comes from operator new.
#if BIAFFINE_DETAIL_LARGE_BLOCKS && BIAFFINE_OUTPUT_CHUNK_BYTES > 0 && !BIAFFINE_DETAIL_ASAN
#define BIAFFINE_DETAIL_OUTPUT_CHUNKS 1
#else
#define BIAFFINE_DETAIL_OUTPUT_CHUNKS 0
#endif

BIAFFINE_NAMESPACE_BEGIN
namespace detail {

class output_chunks {
public:
    static constexpr std::size_t chunk_bytes = static_cast<std::size_t>(BIAFFINE_OUTPUT_CHUNK_BYTES);
    static constexpr std::size_t alignment = 64;  // of every block, as tracking_allocator's
    static_assert(chunk_bytes == 0 || (chunk_bytes % huge_page_bytes == 0 && (chunk_bytes & (chunk_bytes - 1)) == 0),
                  "BIAFFINE_OUTPUT_CHUNK_BYTES: 0, or a power of two of at least 2 MiB");

    /// Whether a block of `bytes` is cut from a chunk.
    static constexpr bool fits(std::size_t bytes) noexcept
    {
#if BIAFFINE_DETAIL_OUTPUT_CHUNKS
        return bytes <= chunk_bytes / 4;
#else
        (void)bytes;
        return false;
#endif
    }

    // Never destroyed: scores freed during static destruction still find it.
    static output_chunks& instance()
    {
        static output_chunks* chunks = new output_chunks;
        return *chunks;
    }

    /// A 64-byte aligned block of `bytes` (fits(bytes)); throws
    /// std::bad_alloc when the kernel refuses a new chunk.
    void* allocate(std::size_t bytes)
    {
        // At least one alignment step: an empty block too lies inside its chunk.
        const std::size_t need = bytes == 0 ? alignment : (bytes + alignment - 1) / alignment * alignment;
        std::lock_guard<std::mutex> lock(mutex_);
        // A full current chunk still has live blocks (an empty one starts
        // over when its last block is freed): it goes to the kept list when
        // they are freed.
        if (current_ == nullptr || current_->used + need > chunk_bytes) {
            chunk* next = kept_;
            if (next != nullptr) {
                kept_ = next->next;
                kept_bytes_ -= chunk_bytes;
            } else {
                void* raw = large_block_allocate(chunk_bytes, chunk_bytes, BIAFFINE_OUTPUT_CHUNK_HUGE_PAGES != 0);
                next = new (raw) chunk;
                mapped_bytes_ += chunk_bytes;
            }
            next->used = header_bytes;
            next->next = nullptr;
            current_ = next;
        }
        char* p = reinterpret_cast<char*>(current_) + current_->used;
        current_->used += need;
        ++current_->live;
        return p;
    }

    /// Frees a block from allocate().
    void free(void* p) noexcept
    {
        chunk* c = chunk_of(p);
        std::lock_guard<std::mutex> lock(mutex_);
        if (--c->live != 0) return;
        if (c == current_) {  // start it over: the next scores reuse the memory just freed, still in cache
            c->used = header_bytes;
            return;
        }
        if (kept_bytes_ + chunk_bytes <= static_cast<std::size_t>(BIAFFINE_OUTPUT_CHUNK_CACHE_BYTES)) {
            c->next = kept_;
            kept_ = c;
            kept_bytes_ += chunk_bytes;
        } else {
            unmap(c);
        }
    }

    /// Unmaps the kept chunks, and the current one if nothing in it lives;
    /// returns the bytes unmapped.
    std::size_t release() noexcept
    {
        std::lock_guard<std::mutex> lock(mutex_);
        std::size_t bytes = 0;
        while (kept_ != nullptr) {
            chunk* c = kept_;
            kept_ = c->next;
            unmap(c);
            bytes += chunk_bytes;
        }
        kept_bytes_ = 0;
        if (current_ != nullptr && current_->live == 0) {
            unmap(current_);
            current_ = nullptr;
            bytes += chunk_bytes;
        }
        return bytes;
    }

    /// Chunks mapped now (live, current or kept), in bytes; and of those,
    /// the kept ones.
    std::size_t mapped_bytes() const
    {
        std::lock_guard<std::mutex> lock(mutex_);
        return mapped_bytes_;
    }
    std::size_t kept_bytes() const
    {
        std::lock_guard<std::mutex> lock(mutex_);
        return kept_bytes_;
    }

private:
    // At the start of every chunk; blocks follow it.
    struct chunk {
        std::size_t used = 0;   // bytes cut so far, this header included
        std::size_t live = 0;   // blocks cut and not yet freed
        chunk* next = nullptr;  // in the kept list
    };
    static constexpr std::size_t header_bytes = (sizeof(chunk) + alignment - 1) / alignment * alignment;

    static chunk* chunk_of(void* p) noexcept
    {
        const auto a = reinterpret_cast<std::uintptr_t>(p);
        return reinterpret_cast<chunk*>(a & ~(static_cast<std::uintptr_t>(chunk_bytes) - 1));
    }
    void unmap(chunk* c) noexcept
    {
        c->~chunk();
        large_block_free(c, chunk_bytes);
        mapped_bytes_ -= chunk_bytes;
    }

    mutable std::mutex mutex_;
    chunk* current_ = nullptr;  // blocks are cut from it
    chunk* kept_ = nullptr;     // freed chunks, kept for reuse
    std::size_t kept_bytes_ = 0;
    std::size_t mapped_bytes_ = 0;
};

}  // namespace detail
BIAFFINE_NAMESPACE_END
