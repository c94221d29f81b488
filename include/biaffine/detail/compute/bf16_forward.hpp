// biaffine/detail/compute/bf16_forward.hpp - the scorer's inference forward
// in bf16: a batch's splits -> both projections (bias, ReLU) -> T = U W' ->
// each split's scores or its labels at given heads, with bf16 operands and
// fp32 accumulation, outputs in fp32.
//
// Where operands are rounded to bf16 (to nearest even): X as it is read;
// Wh, Wd and W once per parameter version (bf16_weights, made by
// pack_weights); U and V after bias and ReLU (their ones column is exact);
// T after U W'. Bias, ReLU and every sum are fp32. The arithmetic is Math's
// (bf16_math.hpp: native VDPBF16PS, AMX tiles, or emulated on fp32 kernels);
// backend.hpp chooses it.
//
// Rows are processed a group of whole splits at a time (group_rows rows, or
// one longer split): their X in bf16, U, V and T for those rows only, so the
// scratch is bounded by the group, not the batch. Rows are padded with zeros
// to the depth the kernels want (Math::depth: pairs, or 32 for AMX tiles):
//   xb [G, dx]   dx = depth(n_in)                     (Math::in_elem)
//   ub [G, du]   du = depth(h): relu(X Wh^T + bh) | 0... (the ones column of
//                bias_u is T's bias: W's last row per label)
//   vb [G, dv]   dv = pairs(hv): relu(X Wd^T + bd) | 1 | 0  (Math::dot_elem)
//   tb [G, o dv] row i, label l: U_i W_l, then a zero
#pragma once

#include "biaffine/abi.hpp"

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <type_traits>
#include <utility>
#include <vector>

#include "biaffine/bfloat16.hpp"
#include "biaffine/detail/compute/bf16_math.hpp"
#include "biaffine/detail/compute/operands.hpp"
#include "biaffine/detail/checked.hpp"
#include "biaffine/tensor.hpp"

BIAFFINE_NAMESPACE_BEGIN
namespace detail {

/// The weights as the bf16 products read them, made once per parameter
/// version by bf16_forward<Math>::pack_weights. E: Math::in_elem.
template <class E>
struct bf16_weights {
    /// On the tracked heap (a scorer's cost counts them), 64-byte aligned:
    /// AMX's tile rows are 64 bytes and must not straddle cache lines.
    using buffer = tracked_vector<E>;
    scorer_dims d;
    buffer wh, wd;  ///< B of X Wh^T, X Wd^T: [n_in, h]
    buffer w;       ///< B of U W': [hu, o dv], label l's columns l dv .. l dv + hv, then zeros
    tracked_vector<float> bh, bd;
    /// With bias_u, T's bias [o dv]: W's last row per label (the ones
    /// column of U times it), rounded to bf16 as W is.
    tracked_vector<float> t_bias;
    /// Bytes held (the cost model counts them with the parameters).
    std::size_t bytes() const noexcept
    {
        return (wh.size() + wd.size() + w.size()) * sizeof(E) +
               (bh.size() + bd.size() + t_bias.size()) * sizeof(float);
    }
};


/// The inference forward on Math's arithmetic (see the top of the file).
template <class Math>
struct bf16_forward {
    using E = typename Math::in_elem;
    using D = typename Math::dot_elem;
    /// What runs the products in this process (for logs and info()).
    static const char* math_name() noexcept { return Math::active(); }
    /// Rows read past the last of xb and ub (AMX reads whole tiles).
    static constexpr std::size_t slack = 32;

    static std::size_t dx(const scorer_dims& d) noexcept { return Math::depth(d.n_in); }
    /// U's rows hold the h projections only: its ones column (bias_u) is
    /// folded into T's bias (W's last row per label, t_bias), which keeps
    /// U W' at a depth of h = 128 rather than 129 (on AMX a step of 32 fewer:
    /// 4 instead of 5 at the default widths).
    static std::size_t du(const scorer_dims& d) noexcept { return Math::depth(d.hidden); }
    static std::size_t dv(const scorer_dims& d) noexcept { return Math::dot_depth(d.hv()); }
    /// Bytes of one row of the group scratch: xb, ub, vb and o rows of tb.
    static std::size_t row_bytes(const scorer_dims& d) noexcept
    {
        return (dx(d) + du(d)) * sizeof(E) + (1 + d.labels) * dv(d) * sizeof(D);
    }
    /// Rows of a group (BIAFFINE_BF16_GROUP_BYTES of scratch), at least one.
    static std::size_t group_rows(const scorer_dims& d) noexcept
    {
        return std::max<std::size_t>(1, BIAFFINE_BF16_GROUP_BYTES / row_bytes(d));
    }
    /// Rows a group holds for a batch of `rows` rows in all whose longest
    /// split has max_len: group_rows, or fewer for a smaller batch, or one
    /// longer split.
    static std::size_t capacity(const scorer_dims& d, std::uint64_t rows, std::size_t max_len) noexcept
    {
        return std::max<std::size_t>(static_cast<std::size_t>(std::min<std::uint64_t>(group_rows(d), rows)), max_len);
    }
    /// Scratch bytes `run` needs at a capacity of G rows (its start aligned
    /// to 64 bytes within them).
    static std::uint64_t scratch_bytes(const scorer_dims& d, std::size_t G, std::size_t max_len)
    {
        const char* what = "bf16 scratch";
        const std::uint64_t in = checked_product(what, checked_add(G, slack, what), dx(d) + du(d), sizeof(E));
        const std::uint64_t dot = checked_product(what, G, 1 + d.labels, dv(d), sizeof(D));
        const std::uint64_t packed = checked_mul(Math::score_packed(d.hv(), max_len), sizeof(float), what);
        return checked_add(checked_add(in, dot, what), checked_add(packed, 64, what), what);
    }

    /// The weights `w` as the products read them, rounded to bf16 (no
    /// temporaries: what it holds is weights_bytes(d)).
    static void pack_weights(const scorer_dims& d, const weights_ref<float>& w, bf16_weights<E>& out)
    {
        const std::size_t n_in = d.n_in, hu = d.hu(), hv = d.hv(), ld = dv(d);
        out.d = d;
        // Wh^T, Wd^T: (k, m) = W[m, k].
        Math::pack_b([&](std::size_t k, std::size_t m) { return w.wh[m * n_in + k]; }, n_in, d.hidden, out.wh);
        Math::pack_b([&](std::size_t k, std::size_t m) { return w.wd[m * n_in + k]; }, n_in, d.hidden, out.wd);
        // W' as [h, o dv]: label l's first h rows of [hu, hv], then zero
        // columns up to dv, so that every label's row of T ends in the zeros
        // its depth wants; with bias_u its last row is T's bias.
        const auto w_at = [&](std::size_t r, std::size_t m) {
            const std::size_t l = m / ld, c = m % ld;
            return c < hv ? w.w[(l * hu + r) * hv + c] : 0.0f;
        };
        Math::pack_b(w_at, d.hidden, d.labels * ld, out.w);
        out.t_bias.clear();
        if (d.bias_u) {
            out.t_bias.resize(d.labels * ld);
            for (std::size_t m = 0; m < out.t_bias.size(); ++m) out.t_bias[m] = round_to_bfloat16(w_at(d.hidden, m));
        }
        out.bh.assign(w.bh, w.bh + d.hidden);
        out.bd.assign(w.bd, w.bd + d.hidden);
    }
    /// Bytes pack_weights allocates (as the tracker counts them).
    static std::uint64_t weights_bytes(const scorer_dims& d)
    {
        const char* what = "bf16 weights";
        const std::uint64_t ldt = checked_product(what, d.labels, dv(d));
        const std::uint64_t e = checked_add(checked_mul(2, Math::packed_size(d.n_in, d.hidden), what),
                                            Math::packed_size(d.hidden, ldt), what);
        const std::uint64_t f = checked_add(2 * d.hidden, d.bias_u ? ldt : 0, what);
        return checked_add(checked_mul(e, sizeof(E), what), checked_mul(f, sizeof(float), what), what);
    }

    /// Splits `x(0) .. x(count - 1)` (seq_view<const float>, [n_k, n_in])
    /// a group at a time; for each split k, each(k, vb, tb): its rows of V
    /// [n_k, dv] and of T [n_k, o dv] (row stride o dv; label l of head j at
    /// tb + (j o + l) dv), valid until `each` returns, and the scratch
    /// split_scores needs. scratch: scratch_bytes(d, G, longest split)
    /// bytes, G = capacity(d, rows of every split, longest split).
    template <class Get, class Each>
    static void run(const bf16_weights<E>& w, Get&& x, std::size_t count, void* scratch, std::size_t G, Each&& each)
    {
        const scorer_dims& d = w.d;
        const std::size_t h = d.hidden, ldt = d.labels * dv(d);
        std::size_t k0 = 0;
        while (k0 < count) {
            // The group: whole splits up to G rows (one split at least; G
            // holds the longest).
            std::size_t rows = x(k0).rows, k1 = k0 + 1;
            while (k1 < count && rows + x(k1).rows <= G) rows += x(k1++).rows;
            auto* base = reinterpret_cast<unsigned char*>(
                (reinterpret_cast<std::uintptr_t>(scratch) + 63) / 64 * 64);
            E* xb = reinterpret_cast<E*>(base);
            E* ub = xb + (G + slack) * dx(d);
            D* vb = reinterpret_cast<D*>(ub + (G + slack) * du(d));
            D* tb = vb + G * dv(d);
            float* packed = reinterpret_cast<float*>(tb + G * ldt);
            for (std::size_t k = k0, r = 0; k < k1; r += x(k++).rows) Math::round_rows(x(k), xb + r * dx(d), dx(d));
            if (rows > 0) {
                ones_and_pad(ub, rows, h, false, du(d));
                ones_and_pad(vb, rows, h, d.bias_v, dv(d));
                Math::gemm(xb, dx(d), rows, d.n_in, w.wh, h, w.bh.data(), true, ub, du(d));
                Math::gemm(xb, dx(d), rows, d.n_in, w.wd, h, w.bd.data(), true, vb, dv(d));
                Math::gemm(ub, du(d), rows, h, w.w, ldt, d.bias_u ? w.t_bias.data() : nullptr, false, tb, ldt);
            }
            for (std::size_t k = k0, r = 0; k < k1; r += x(k++).rows)
                each(k, static_cast<const D*>(vb + r * dv(d)), static_cast<const D*>(tb + r * ldt), packed);
            k0 = k1;
        }
    }

    /// One split's scores s [n, n o] (fp32) from its rows of V and T.
    static void split_scores(const scorer_dims& d, const D* vb, const D* tb, float* packed, score_view<float> s)
    {
        if (s.n == 0) return;
        Math::scores(vb, s.n, tb, d.labels, d.hv(), s, packed);
    }

    /// One split's labels at given heads: y [n, o] (fp32, any strides), row
    /// m = V_m . T_{heads[m], l} for every label l (heads are the split's
    /// own token indices).
    static void head_scores(const scorer_dims& d, const D* vb, const D* tb, const std::size_t* heads, seq_view<float> y)
    {
        const std::size_t o = d.labels, ldt = o * dv(d);
        for (std::size_t m = 0; m < y.rows; ++m) {
            const D* v = vb + m * dv(d);
            const D* t = tb + heads[m] * ldt;
            if (y.col_stride == 1) {
                Math::dots(v, dv(d), 1, t, dv(d), o, d.hv(), &y(m, 0), o);
            } else {
                for (std::size_t l = 0; l < o; ++l) Math::dots(v, dv(d), 1, t + l * dv(d), dv(d), 1, d.hv(), &y(m, l), 1);
            }
        }
    }

private:
    // Columns past h of rows [rows, ld]: the ones column (with bias) and
    // zeros up to the depth; the GEMM writes the first h.
    template <class A>
    static void ones_and_pad(A* a, std::size_t rows, std::size_t h, bool ones, std::size_t ld)
    {
        for (std::size_t i = 0; i < rows; ++i)
            for (std::size_t c = h; c < ld; ++c) a[i * ld + c] = A(ones && c == h ? 1.0f : 0.0f);
    }
};

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

/// A float scorer's weights as Forward (a bf16_forward<Math>) reads them, kept with
/// the scorer (compute_precision::bf16), one immutable pack per parameter
/// version. Calls take a reference to the current pack and read only it, so
/// concurrent calls never see a pack being written: a stale pack is replaced
/// by a new one (one builder at a time; calls holding the old pack keep it
/// alive until they return). A pack nobody else holds is repacked in its
/// own buffers (the sizes never change), so a parameter change made between
/// calls costs no extra pack; one made while calls hold the pack costs one
/// more pack (weights_bytes) until they return.
///
/// Watching (watch(true): the Python module, whose numpy views of the
/// parameters are written by optimisers without the scorer knowing): a pack
/// also keeps the fp32 weights it was made from, and a call whose weights
/// differ from them (memcmp, a pass far cheaper than packing) packs again.
template <class Forward>
class bf16_weights_cache {
public:
    using weights = bf16_weights<typename Forward::E>;
    struct pack {
        std::uint64_t version = 0;  ///< the scorer's parameter version it was made from
        weights w;
        tracked_vector<float> seen;  ///< watching: wh, bh, wd, bd, w as they were packed
    };
    using handle = std::shared_ptr<const pack>;

    bf16_weights_cache() = default;
    // A copy holds a copy of the pack, with its version: the copied scorer's
    // counter starts where this one's is, and the weights are the same.
    bf16_weights_cache(const bf16_weights_cache& o) : cur_(o.copy_current()), watch_(o.watch_.load()) {}
    bf16_weights_cache& operator=(const bf16_weights_cache& o)
    {
        if (this != &o) {
            handle p = o.copy_current();
            watch_.store(o.watch_.load());
            const std::lock_guard<std::mutex> g(lock_);
            cur_.swap(p);
        }
        return *this;
    }
    /// Allocates and packs (with the scorer: these bytes are the scorer's).
    void make(std::uint64_t version, const scorer_dims& d, const weights_ref<float>& w)
    {
        auto p = std::make_shared<pack>();
        fill(*p, version, d, w);
        handle h = std::move(p);
        const std::lock_guard<std::mutex> g(lock_);
        cur_.swap(h);
    }
    /// Compare the weights at every call (see the class comment).
    void watch(bool on) noexcept { watch_.store(on, std::memory_order_relaxed); }
    bool watching() const noexcept { return watch_.load(std::memory_order_relaxed); }

    /// The pack of `version` (and, watching, of the weights as they are
    /// now), made if the current one is older. The caller reads it for the
    /// whole call; it stays valid and unchanged while the handle lives.
    handle acquire(std::uint64_t version, const scorer_dims& d, const weights_ref<float>& w)
    {
        handle p = current();
        if (fresh(p.get(), version, d, w)) return p;
        p.reset();
        // One builder at a time (the others want the same pack); calls
        // whose pack is fresh never take this lock, and only builders (and
        // make / assignment, never concurrent with calls) change cur_.
        const std::lock_guard<std::mutex> b(build_);
        p = current();
        if (fresh(p.get(), version, d, w)) return p;
        p.reset();
        std::shared_ptr<pack> n;
        {
            // Held by nobody but the cache (and no one can take it without
            // lock_): repack its buffers, taken out of the cache meanwhile.
            // The acquire fence pairs with the releases of the handles
            // dropped by the calls that read it.
            // (ThreadSanitizer has no fences: there, a fresh buffer always.)
            const std::lock_guard<std::mutex> g(lock_);
#if !BIAFFINE_DETAIL_TSAN
            if (cur_ && cur_.use_count() == 1) {
                std::atomic_thread_fence(std::memory_order_acquire);
                n = std::const_pointer_cast<pack>(std::move(cur_));
            }
#endif
        }
        if (!n) n = std::make_shared<pack>();  // calls in flight read the old one
        fill(*n, version, d, w);
        handle out = std::move(n), old;
        {
            const std::lock_guard<std::mutex> g(lock_);
            old = std::exchange(cur_, out);
        }
        return out;  // the old pack (if any) is released here, outside the lock
    }
    /// Bytes held by the current pack (the cost model counts them with the
    /// parameters).
    std::size_t bytes() const
    {
        const handle p = current();
        return p ? p->w.bytes() + p->seen.size() * sizeof(float) : 0;
    }

private:
    static std::size_t sizes(const scorer_dims& d, std::size_t part)
    {
        const std::size_t in = d.hidden * d.n_in, b = d.hidden, w = d.labels * d.hu() * d.hv();
        const std::size_t s[5] = {in, b, in, b, w};
        return s[part];
    }
    static const float* part_of(const weights_ref<float>& w, std::size_t part)
    {
        const float* p[5] = {w.wh, w.bh, w.wd, w.bd, w.w};
        return p[part];
    }
    bool fresh(const pack* p, std::uint64_t version, const scorer_dims& d, const weights_ref<float>& w) const
    {
        if (p == nullptr || p->version != version) return false;
        if (!watching()) return true;
        if (p->seen.empty()) return false;
        const float* s = p->seen.data();
        for (std::size_t k = 0; k < 5; ++k) {
            const std::size_t n = sizes(d, k);
            if (n != 0 && std::memcmp(s, part_of(w, k), n * sizeof(float)) != 0) return false;
            s += n;
        }
        return true;
    }
    void fill(pack& p, std::uint64_t version, const scorer_dims& d, const weights_ref<float>& w) const
    {
        Forward::pack_weights(d, w, p.w);
        p.seen.clear();
        if (watching()) {
            std::size_t total = 0;
            for (std::size_t k = 0; k < 5; ++k) total += sizes(d, k);
            p.seen.resize(total);
            float* s = p.seen.data();
            for (std::size_t k = 0; k < 5; ++k) s = std::copy_n(part_of(w, k), sizes(d, k), s);
        }
        p.version = version;
    }
    handle current() const
    {
        const std::lock_guard<std::mutex> g(lock_);
        return cur_;
    }
    std::shared_ptr<pack> copy_current() const
    {
        const handle p = current();
        return p ? std::make_shared<pack>(*p) : nullptr;
    }

    handle cur_;
    std::atomic<bool> watch_{false};
    mutable std::mutex lock_;  // held only to copy or swap cur_
    std::mutex build_;         // held while a stale pack is replaced
};

}  // namespace detail
BIAFFINE_NAMESPACE_END
