// bench/counting_new.hpp - a counting global operator new / delete.
//
// Include in exactly ONE translation unit of a bench binary: it defines the
// replaceable global allocation functions (all sized / aligned / nothrow
// variants), so every `new` in the process - the library's tracking allocator,
// xtensor's std::allocator, the standard library, Google Benchmark - is
// counted: current bytes, peak bytes, allocation count, total bytes. It is an
// independent cross-check of the library's own tracker (which only sees
// library buffers). Memory from malloc directly (Eigen's GEMM blocking
// buffers, libtorch's CPU allocator) is not seen here; max RSS catches it.
//
// Each block carries a 16-byte header just before the user pointer: the raw
// pointer to free and the requested size, so unsized deletes know the size.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <new>

namespace biaffine_bench {
namespace heap {

struct counters {
    std::atomic<std::int64_t> current{0};
    std::atomic<std::int64_t> peak{0};
    std::atomic<std::int64_t> allocs{0};
    std::atomic<std::int64_t> total{0};  ///< bytes allocated, ever
};

// Constant-initialised: usable by allocations made before main().
inline counters g_counters;

inline std::int64_t current() { return g_counters.current.load(std::memory_order_relaxed); }
inline std::int64_t peak() { return g_counters.peak.load(std::memory_order_relaxed); }
inline std::int64_t allocs() { return g_counters.allocs.load(std::memory_order_relaxed); }
inline std::int64_t total() { return g_counters.total.load(std::memory_order_relaxed); }
/// Peak := current (start of a measured region).
inline void reset_peak() { g_counters.peak.store(current(), std::memory_order_relaxed); }

namespace detail {

constexpr std::size_t header = 16;

inline void on_alloc(std::size_t n)
{
    const std::int64_t now = g_counters.current.fetch_add(static_cast<std::int64_t>(n), std::memory_order_relaxed) +
                             static_cast<std::int64_t>(n);
    g_counters.allocs.fetch_add(1, std::memory_order_relaxed);
    g_counters.total.fetch_add(static_cast<std::int64_t>(n), std::memory_order_relaxed);
    std::int64_t p = g_counters.peak.load(std::memory_order_relaxed);
    while (now > p && !g_counters.peak.compare_exchange_weak(p, now, std::memory_order_relaxed)) {
    }
}

inline void* alloc(std::size_t n, std::size_t align) noexcept
{
    void* raw = nullptr;
    std::size_t offset = header;
    if (align <= header) {
        raw = std::malloc(n + header);
    } else {
        offset = align;  // >= 32: room for the header inside the alignment gap
        if (posix_memalign(&raw, align, n + align) != 0) raw = nullptr;
    }
    if (raw == nullptr) return nullptr;
    auto* user = static_cast<unsigned char*>(raw) + offset;
    reinterpret_cast<void**>(user - header)[0] = raw;
    reinterpret_cast<std::size_t*>(user - header)[1] = n;
    on_alloc(n);
    return user;
}

inline void release(void* p) noexcept
{
    if (p == nullptr) return;
    auto* user = static_cast<unsigned char*>(p);
    void* raw = reinterpret_cast<void**>(user - header)[0];
    const std::size_t n = reinterpret_cast<std::size_t*>(user - header)[1];
    g_counters.current.fetch_sub(static_cast<std::int64_t>(n), std::memory_order_relaxed);
    std::free(raw);
}

inline void* alloc_or_throw(std::size_t n, std::size_t align)
{
    for (;;) {
        if (void* p = alloc(n, align)) return p;
        std::new_handler h = std::get_new_handler();
        if (h == nullptr) throw std::bad_alloc();
        h();
    }
}

}  // namespace detail
}  // namespace heap
}  // namespace biaffine_bench

// The replacements (not inline: exactly one definition per program).
void* operator new(std::size_t n) { return biaffine_bench::heap::detail::alloc_or_throw(n, 16); }
void* operator new[](std::size_t n) { return biaffine_bench::heap::detail::alloc_or_throw(n, 16); }
void* operator new(std::size_t n, const std::nothrow_t&) noexcept { return biaffine_bench::heap::detail::alloc(n, 16); }
void* operator new[](std::size_t n, const std::nothrow_t&) noexcept
{
    return biaffine_bench::heap::detail::alloc(n, 16);
}
void* operator new(std::size_t n, std::align_val_t a)
{
    return biaffine_bench::heap::detail::alloc_or_throw(n, static_cast<std::size_t>(a));
}
void* operator new[](std::size_t n, std::align_val_t a)
{
    return biaffine_bench::heap::detail::alloc_or_throw(n, static_cast<std::size_t>(a));
}
void* operator new(std::size_t n, std::align_val_t a, const std::nothrow_t&) noexcept
{
    return biaffine_bench::heap::detail::alloc(n, static_cast<std::size_t>(a));
}
void* operator new[](std::size_t n, std::align_val_t a, const std::nothrow_t&) noexcept
{
    return biaffine_bench::heap::detail::alloc(n, static_cast<std::size_t>(a));
}
void operator delete(void* p) noexcept { biaffine_bench::heap::detail::release(p); }
void operator delete[](void* p) noexcept { biaffine_bench::heap::detail::release(p); }
void operator delete(void* p, std::size_t) noexcept { biaffine_bench::heap::detail::release(p); }
void operator delete[](void* p, std::size_t) noexcept { biaffine_bench::heap::detail::release(p); }
void operator delete(void* p, std::align_val_t) noexcept { biaffine_bench::heap::detail::release(p); }
void operator delete[](void* p, std::align_val_t) noexcept { biaffine_bench::heap::detail::release(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { biaffine_bench::heap::detail::release(p); }
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept { biaffine_bench::heap::detail::release(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { biaffine_bench::heap::detail::release(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { biaffine_bench::heap::detail::release(p); }
void operator delete(void* p, std::align_val_t, const std::nothrow_t&) noexcept
{
    biaffine_bench::heap::detail::release(p);
}
void operator delete[](void* p, std::align_val_t, const std::nothrow_t&) noexcept
{
    biaffine_bench::heap::detail::release(p);
}
