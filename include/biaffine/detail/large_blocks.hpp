// biaffine/detail/large_blocks.hpp - blocks of BIAFFINE_HUGE_PAGE_MIN_BYTES
// or more straight from the kernel, on transparent huge pages.
//
// glibc maps every block over 32 MiB afresh and unmaps it on free, so a
// per-document gradient or a long document's packed input pays one page
// fault per 4 KiB on every call: 25,000 faults for a 100k-token dX, 8% of a
// training step on a Zen 4 EPYC (perf). Mapped 2 MiB-aligned with
// MADV_HUGEPAGE (honoured when the system's THP mode is `always` or
// `madvise`) the same block takes one fault per 2 MiB. The mapping ends at
// the block's last small page, so no more than that is ever resident: the
// whole 2 MiB pages in it are huge, the rest of it small. Freed, a block
// goes to the cache of block_cache.hpp, which reuses it (no faults at all)
// or unmaps it. Elsewhere than Linux, or with the macros 0, blocks come
// from operator new as before. Which blocks: BIAFFINE_HUGE_PAGE_MIN_BYTES
// (any tracked block) and BIAFFINE_CACHED_BLOCK_MIN_BYTES (cached_tag).
#pragma once

#include "biaffine/abi.hpp"

#include <cstddef>
#include <cstdint>
#include <new>

#include "biaffine/config.hpp"

#if defined(__linux__) && (BIAFFINE_HUGE_PAGE_MIN_BYTES > 0 || BIAFFINE_CACHED_BLOCK_MIN_BYTES > 0)
#include <sys/mman.h>
#include <unistd.h>
#define BIAFFINE_DETAIL_LARGE_BLOCKS 1
#else
#define BIAFFINE_DETAIL_LARGE_BLOCKS 0
#endif

BIAFFINE_NAMESPACE_BEGIN
namespace detail {

constexpr std::size_t huge_page_bytes = std::size_t(2) << 20;

/// True when a block of `bytes` is mapped by large_block_allocate (through
/// the block cache of block_cache.hpp) rather than taken from operator new,
/// with `min_bytes` the threshold of its kind (0: never).
constexpr bool is_large_block(std::size_t bytes,
                              std::size_t min_bytes = static_cast<std::size_t>(BIAFFINE_HUGE_PAGE_MIN_BYTES)) noexcept
{
#if BIAFFINE_DETAIL_LARGE_BLOCKS
    return min_bytes > 0 && bytes >= min_bytes;
#else
    (void)bytes;
    (void)min_bytes;
    return false;
#endif
}

// The small pages spanned by a block (the length mapped and unmapped).
inline std::size_t large_block_span(std::size_t bytes) noexcept
{
#if BIAFFINE_DETAIL_LARGE_BLOCKS
    static const std::size_t page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
    return (bytes + page - 1) / page * page;
#else
    return bytes;
#endif
}

/// A block of `bytes` aligned to `align`, a multiple of 2 MiB
/// (is_large_block(bytes), or an output chunk); throws std::bad_alloc when
/// the kernel refuses the mapping.
inline void* large_block_allocate(std::size_t bytes, std::size_t align = huge_page_bytes, bool huge = true)
{
#if BIAFFINE_DETAIL_LARGE_BLOCKS
    const std::size_t len = large_block_span(bytes);
    if (len < bytes || len + align < len) throw std::bad_alloc();
    // Over-map by the alignment, then cut the ends off to align the start
    // (the tail cut ends on a small page: len is a multiple of one).
    void* raw = ::mmap(nullptr, len + align, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (raw == MAP_FAILED) throw std::bad_alloc();
    const auto base = reinterpret_cast<std::uintptr_t>(raw);
    const std::uintptr_t start = (base + align - 1) / align * align;
    if (start > base) ::munmap(raw, start - base);
    const std::size_t tail = align - (start - base);
    if (tail > 0) ::munmap(reinterpret_cast<void*>(start + len), tail);
    // Advice only: without THP the block still works on 4 KiB pages.
    if (huge) ::madvise(reinterpret_cast<void*>(start), len, MADV_HUGEPAGE);
    return reinterpret_cast<void*>(start);
#else
    (void)align;
    (void)huge;
    return ::operator new(bytes);  // never called: is_large_block is false here
#endif
}

/// Frees a block from large_block_allocate(bytes).
inline void large_block_free(void* p, std::size_t bytes) noexcept
{
#if BIAFFINE_DETAIL_LARGE_BLOCKS
    ::munmap(p, large_block_span(bytes));
#else
    (void)bytes;
    ::operator delete(p);
#endif
}

}  // namespace detail
BIAFFINE_NAMESPACE_END
