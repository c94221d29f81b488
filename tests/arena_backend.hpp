// tests/arena_backend.hpp - a batch-level backend (detail/compute/
// interface.hpp) whose batches live in its own arena: the handles it gives
// the scorer are indices into a list of buffers it owns, not pointers the
// scorer could read. Each operation copies the buffers it names into host
// buffers, runs the build's host backend on them and copies them back, as
// a device backend would move data across its bus. The arithmetic is the
// host backend's, so the outputs must be its bytes; what this shows is that
// the scorer reaches the batch only through the backend.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <utility>
#include <vector>

#include "biaffine/detail/compute/backend.hpp"
#include "biaffine/detail/compute/interface.hpp"

namespace arena_test {

/// Slots allocated and still live, over every arena backend of scalar T
/// (a test checks that the scorer allocated through it and released all).
template <class T>
struct arena_counts {
    static inline std::atomic<std::size_t> allocated{0};
    static inline std::atomic<std::size_t> live{0};
};

/// Where a batch's activations are: slots of an arena (none: not
/// allocated).
inline constexpr std::size_t none = static_cast<std::size_t>(-1);
struct arena_acts {
    std::size_t u = none, v = none, t = none, ys = none;
};

template <class T>
class arena_backend {
    using inner_type = biaffine::detail::scorer_backend<T>;

public:
    static constexpr const char* name = "arena";
    static constexpr const char* operations = "the build's host backend on copies of its arena's buffers";
    static constexpr bool reads_items = inner_type::reads_items;

    using acts = arena_acts;

    /// Owns its slots; gives them back to the arena when it dies.
    class held_batch {
    public:
        held_batch() = default;
        held_batch(const arena_backend* owner, arena_acts a) : owner_(owner), a_(a) {}
        held_batch(held_batch&& o) noexcept : owner_(std::exchange(o.owner_, nullptr)), a_(o.a_) {}
        held_batch& operator=(held_batch&& o) noexcept
        {
            if (this != &o) {
                release();
                owner_ = std::exchange(o.owner_, nullptr);
                a_ = o.a_;
            }
            return *this;
        }
        ~held_batch() { release(); }
        const arena_acts& acts() const noexcept { return a_; }

    private:
        void release() noexcept
        {
            if (owner_ != nullptr) owner_->release(a_);
            owner_ = nullptr;
        }
        const arena_backend* owner_ = nullptr;
        arena_acts a_;
    };
    /// One call's batch: the same, built in place.
    struct carved_batch : held_batch {
        carved_batch(const arena_backend* owner, arena_acts a) : held_batch(owner, a) {}
        carved_batch(const carved_batch&) = delete;
        carved_batch& operator=(const carved_batch&) = delete;
    };

    explicit arena_backend(const biaffine::detail::scorer_dims& d) : d_(d), in_(d) {}
    arena_backend(const arena_backend& o) : d_(o.d_), in_(o.in_) {}

    std::uint64_t prepared_version() const { return in_.prepared_version(); }
    void prepare(std::uint64_t version, const biaffine::detail::weights_ref<T>& w) { in_.prepare(version, w); }
    void watch(bool on) noexcept { in_.watch(on); }
    std::uint64_t device_bytes(std::size_t count, std::size_t max_len, biaffine::mode m) const noexcept
    {
        return in_.device_bytes(count, max_len, m);
    }
    std::size_t packed_elements(std::size_t max_len) const noexcept { return in_.packed_elements(max_len); }
    std::size_t train_packed_elements(std::size_t max_len, std::size_t rows) const noexcept
    {
        return in_.train_packed_elements(max_len, rows);
    }
    template <class Kind, class Items, class Heads, class Dest, class Done>
    void predict(const Items& X, const Heads& H, Dest&& dest, Done&& done) const
    {
        in_.template predict<Kind>(X, H, dest, done);
    }
    template <class Kind>
    std::uint64_t predict_scratch_bytes(std::size_t count, std::size_t max_len) const
    {
        return in_.template predict_scratch_bytes<Kind>(count, max_len);
    }

    held_batch hold(std::size_t N, std::size_t ys) const { return held_batch(this, allocate(N, ys)); }
    carved_batch carve(std::size_t N) const { return carved_batch(this, allocate(N, 0)); }

    template <class Items>
    void project(const Items& X, const std::size_t* off, std::size_t N, const acts& a, T* packed) const
    {
        on_host(a, [&](const auto& h) { in_.project(X, off, N, h, packed); });
    }
    void dropout(double rate, std::uint64_t seed, const acts& a, const std::size_t* off, std::size_t count) const
    {
        on_host(a, [&](const auto& h) { in_.dropout(rate, seed, h, off, count); });
    }
    void bilinear_left(const acts& a, std::size_t N, T* packed) const
    {
        on_host(a, [&](const auto& h) { in_.bilinear_left(h, N, packed); });
    }
    template <class Kind, class Dest, class Keep, class Each>
    void score_outputs(const acts& a, const std::size_t* off, std::size_t count, const std::size_t* head_rows,
                       bool keep_t, bool softmax, T* packed, Dest&& dest, Keep&& keep, Each&& each) const
    {
        on_host(a, [&](const auto& h) {
            in_.template score_outputs<Kind>(h, off, count, head_rows, keep_t, softmax, packed, dest, keep, each);
        });
    }
    template <class Kind, class Grad, class Kept>
    void outputs_backward(const acts& a, const std::size_t* off, std::size_t count, const std::size_t* head_rows,
                          biaffine::span<const Grad> dY, bool softmax, Kept&& kept, T* y_tmp, T* ds, T* dv, T* dt,
                          T* packed) const
    {
        on_host(a, [&](const auto& h) {
            in_.template outputs_backward<Kind>(h, off, count, head_rows, dY, softmax, kept, y_tmp, ds, dv, dt,
                                                packed);
        });
    }
    template <class Items>
    void projections_backward(const Items& X, const std::size_t* off, std::size_t N, const acts& a, T* dt, T* dv,
                              T* du, double rate, const biaffine::detail::grads_ref<T>& g,
                              biaffine::span<const biaffine::seq_view<T>> dX, T* packed) const
    {
        on_host(a, [&](const auto& h) { in_.projections_backward(X, off, N, h, dt, dv, du, rate, g, dX, packed); });
    }

private:
    std::size_t slot(std::size_t n) const
    {
        arena_counts<T>::allocated += 1;
        arena_counts<T>::live += 1;
        for (std::size_t i = 0; i < slots_.size(); ++i) {
            if (!used_[i]) {
                used_[i] = true;
                slots_[i].assign(n, T(0));
                return i;
            }
        }
        slots_.emplace_back(n, T(0));
        used_.push_back(true);
        return slots_.size() - 1;
    }
    acts allocate(std::size_t N, std::size_t ys) const
    {
        std::lock_guard<std::mutex> lock(m_);
        acts a;
        a.u = slot(N * d_.hu());
        a.v = slot(N * d_.hv());
        a.t = slot(N * d_.labels * d_.hv());
        if (ys != 0) a.ys = slot(ys);
        return a;
    }
    void release(const acts& a) const noexcept
    {
        std::lock_guard<std::mutex> lock(m_);
        for (std::size_t i : {a.u, a.v, a.t, a.ys}) {
            if (i == none) continue;
            used_[i] = false;
            arena_counts<T>::live -= 1;
        }
    }
    // Runs f on host copies of a's slots, then copies them back.
    template <class F>
    void on_host(const acts& a, F&& f) const
    {
        std::vector<T> host[4];
        const std::size_t ids[4] = {a.u, a.v, a.t, a.ys};
        {
            std::lock_guard<std::mutex> lock(m_);
            for (int i = 0; i < 4; ++i) {
                if (ids[i] != none) host[i] = slots_[ids[i]];
            }
        }
        const auto at = [](std::vector<T>& b) { return b.empty() ? static_cast<T*>(nullptr) : b.data(); };
        f(typename inner_type::acts{at(host[0]), at(host[1]), at(host[2]), at(host[3])});
        std::lock_guard<std::mutex> lock(m_);
        for (int i = 0; i < 4; ++i) {
            if (ids[i] != none) slots_[ids[i]] = std::move(host[i]);
        }
    }

    biaffine::detail::scorer_dims d_;
    inner_type in_;
    mutable std::mutex m_;
    mutable std::vector<std::vector<T>> slots_;
    mutable std::vector<bool> used_;
};

}  // namespace arena_test
