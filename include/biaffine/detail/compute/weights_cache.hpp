// biaffine/detail/compute/weights_cache.hpp - the one parameter-version cache:
// what a backend made of the scorer's weights (the pointers; in bf16 the
// packed copy), one immutable entry per parameter version, safe under
// concurrent predict calls. host_batch holds one for every precision.
#pragma once

#include "biaffine/abi.hpp"

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <utility>

#include "biaffine/detail/compute/operands.hpp"
#include "biaffine/tensor.hpp"

// ThreadSanitizer has no fences: there the cache takes a fresh entry
// rather than reuse one whose last readers released it.
#if defined(__SANITIZE_THREAD__)
#define BIAFFINE_DETAIL_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define BIAFFINE_DETAIL_TSAN 1
#endif
#endif
#ifndef BIAFFINE_DETAIL_TSAN
#define BIAFFINE_DETAIL_TSAN 0
#endif

BIAFFINE_NAMESPACE_BEGIN
namespace detail {

/// The weights of one parameter version as a backend reads them: the
/// scorer's pointers `w` and what Packed made of them (`packed`: nothing
/// for fp32, bf16_weights in bf16). Packed has reserve(d) and pack(d, w),
/// and `copies` (true: it holds copies of the weights, kept by a copied
/// cache and compared when watching; false: it reads the pointers).
template <class T, class Packed>
struct weights_entry {
    std::uint64_t version = 0;  ///< the scorer's parameter version it was made from (0: none)
    weights_ref<T> w{};
    Packed packed;
    tracked_vector<T> seen;  ///< watching: wh, bh, wd, bd, w as they were packed
};

/// The entry of the current parameter version, made by the first call that
/// sees the version move. Calls take a reference to the current entry and
/// read only it, so concurrent calls never see one being written: a stale
/// entry is replaced by a new one (one builder at a time; calls holding the
/// old one keep it alive until they return). An entry nobody else holds is
/// repacked in its own buffers (the sizes never change), so a parameter
/// change made between calls allocates nothing; one made while calls hold
/// the entry costs one more (Packed's bytes) until they return. The first
/// entry is reserved with the cache (with the scorer).
///
/// Watching (watch(true): the Python module, whose numpy views of the
/// parameters are written by optimisers without the scorer knowing): where
/// Packed copies, an entry also keeps the weights it was made from, and a
/// call whose weights differ from them (memcmp, a pass far cheaper than
/// packing) packs again.
template <class T, class Packed>
class weights_cache {
public:
    using entry = weights_entry<T, Packed>;
    using handle = std::shared_ptr<const entry>;

    explicit weights_cache(const scorer_dims& d)
    {
        auto e = std::make_shared<entry>();
        e->packed.reserve(d);
        cur_ = std::move(e);
    }
    // A copy belongs to another scorer's parameters: its pointers are not
    // this one's. Copies of the weights (Packed::copies) are kept with
    // their version (the copied scorer's counter starts where this one's
    // is, and its weights are the same); pointers alone start unprepared.
    weights_cache(const weights_cache& o) : cur_(o.copy_current()), watch_(o.watch_.load()) {}
    weights_cache& operator=(const weights_cache& o)
    {
        if (this != &o) {
            handle p = o.copy_current();
            watch_.store(o.watch_.load());
            const std::lock_guard<std::mutex> g(lock_);
            cur_.swap(p);
        }
        return *this;
    }

    /// Compare the weights at every call (see the class comment).
    void watch(bool on) noexcept { watch_.store(on, std::memory_order_relaxed); }
    bool watching() const noexcept { return Packed::copies && watch_.load(std::memory_order_relaxed); }

    /// The version of the current entry (0: none); 0 too while watching, so
    /// that every call comes to acquire() and compares.
    std::uint64_t prepared() const
    {
        if (watching()) return 0;
        const handle p = current();
        return p->version;
    }

    /// The current entry: valid and unchanged while the handle lives. While
    /// a builder repacks the entry in place (out of the cache), waits for it.
    handle current() const
    {
        {
            const std::lock_guard<std::mutex> g(lock_);
            if (cur_) return cur_;
        }
        const std::lock_guard<std::mutex> b(build_);
        const std::lock_guard<std::mutex> g(lock_);
        return cur_;
    }

    /// The entry of `version` (and, watching, of the weights as they are
    /// now), made if the current one is older.
    handle acquire(std::uint64_t version, const scorer_dims& d, const weights_ref<T>& w)
    {
        handle p = current();
        if (fresh(p.get(), version, d, w)) return p;
        p.reset();
        // One builder at a time (the others want the same entry); calls
        // whose entry is fresh never take this lock, and only builders (and
        // assignment, never concurrent with calls) change cur_.
        const std::lock_guard<std::mutex> b(build_);
        p = held();
        if (fresh(p.get(), version, d, w)) return p;
        p.reset();
        std::shared_ptr<entry> n;
        {
            // Held by nobody but the cache (and no one can take it without
            // lock_): repack its buffers, taken out of the cache meanwhile.
            // The acquire fence pairs with the releases of the handles
            // dropped by the calls that read it.
            const std::lock_guard<std::mutex> g(lock_);
#if !BIAFFINE_DETAIL_TSAN
            if (cur_ && cur_.use_count() == 1) {
                std::atomic_thread_fence(std::memory_order_acquire);
                // Out of the cache (C++17's const_pointer_cast copies, so
                // reset explicitly): current() waits for the builder
                // rather than return an entry being rewritten.
                n = std::const_pointer_cast<entry>(cur_);
                cur_.reset();
            }
#endif
        }
        const bool in_place = static_cast<bool>(n);
        if (!n) n = std::make_shared<entry>();  // calls in flight read the old one
        try {
            fill(*n, version, d, w);
        } catch (...) {
            // The cache always has an entry (current() never returns null):
            // one repacked in place goes back, stale, and the next call
            // packs again.
            if (in_place) {
                n->version = 0;
                n->seen.clear();
                const std::lock_guard<std::mutex> g(lock_);
                cur_ = std::move(n);
            }
            throw;
        }
        handle out = std::move(n), old;
        {
            const std::lock_guard<std::mutex> g(lock_);
            old = std::exchange(cur_, out);
        }
        return out;  // the old entry (if any) is released here, outside the lock
    }

private:
    static std::size_t sizes(const scorer_dims& d, std::size_t part)
    {
        const std::size_t in = d.hidden * d.n_in, b = d.hidden, w = d.labels * d.hu() * d.hv();
        const std::size_t s[5] = {in, b, in, b, w};
        return s[part];
    }
    static const T* part_of(const weights_ref<T>& w, std::size_t part)
    {
        const T* p[5] = {w.wh, w.bh, w.wd, w.bd, w.w};
        return p[part];
    }
    bool fresh(const entry* p, std::uint64_t version, const scorer_dims& d, const weights_ref<T>& w) const
    {
        if (p == nullptr || p->version != version) return false;
        if (!watching()) return true;
        if (p->seen.empty()) return false;
        const T* s = p->seen.data();
        for (std::size_t k = 0; k < 5; ++k) {
            const std::size_t n = sizes(d, k);
            if (n != 0 && std::memcmp(s, part_of(w, k), n * sizeof(T)) != 0) return false;
            s += n;
        }
        return true;
    }
    void fill(entry& p, std::uint64_t version, const scorer_dims& d, const weights_ref<T>& w) const
    {
        p.w = w;
        p.packed.pack(d, w);
        p.seen.clear();
        if (watching()) {
            std::size_t total = 0;
            for (std::size_t k = 0; k < 5; ++k) total += sizes(d, k);
            p.seen.resize(total);
            T* s = p.seen.data();
            for (std::size_t k = 0; k < 5; ++k) s = std::copy_n(part_of(w, k), sizes(d, k), s);
        }
        p.version = version;
    }
    handle held() const
    {
        const std::lock_guard<std::mutex> g(lock_);
        return cur_;
    }
    std::shared_ptr<entry> copy_current() const
    {
        const handle p = current();
        auto c = std::make_shared<entry>(*p);
        c->w = {};
        if (!Packed::copies) c->version = 0;
        return c;
    }

    handle cur_;
    std::atomic<bool> watch_{false};
    mutable std::mutex lock_;   // held only to copy or swap cur_
    mutable std::mutex build_;  // held while a stale entry is replaced
};

}  // namespace detail
BIAFFINE_NAMESPACE_END
