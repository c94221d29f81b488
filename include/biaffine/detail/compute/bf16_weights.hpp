// biaffine/detail/compute/bf16_weights.hpp - the one bf16 weight packer: a
// float scorer's weights rounded to bf16 and packed, once per parameter
// version, in every layout compute_precision::bf16 reads - inference
// (bf16_forward<Math>) and training (bf16_train<Math>) alike. Made by
// bf16_products through the backend's weights_cache.
#pragma once

#include "biaffine/abi.hpp"

#include <cstddef>
#include <cstdint>

#include "biaffine/bfloat16.hpp"
#include "biaffine/detail/checked.hpp"
#include "biaffine/detail/compute/operands.hpp"
#include "biaffine/tensor.hpp"

BIAFFINE_NAMESPACE_BEGIN
namespace detail {

/// The weights as Math's products read them (E = Math::in_elem), on the
/// tracked heap (a scorer's memory counts them) and 64-byte aligned (AMX's
/// tile rows must not straddle cache lines). dv = Math::dot_depth(hv): the
/// row of V and of each label's T that inference's per-split products read.
template <class Math>
struct bf16_weights {
    using E = typename Math::in_elem;
    /// Copies of the weights (weights_cache keeps them in a copied
    /// backend, and compares the fp32 weights while watching).
    static constexpr bool copies = true;
    scorer_dims d{};
    tracked_vector<E> wh, wd;  ///< B of X Wh^T, X Wd^T: [n_in, h]
    /// B of U W' for inference: [h, o dv], label l's columns l dv .. l dv +
    /// hv, then zeros up to dv.
    tracked_vector<E> w;
    /// With bias_u, T's bias [o dv]: W's last row per label (the ones
    /// column of U times it), rounded to bf16 as W is.
    tracked_vector<float> t_bias;
    /// Training's B of U W' [h, o hv] and its bias [o hv], where dv != hv
    /// (else w and t_bias are the same layout and training reads them).
    tracked_vector<E> w_hv;
    tracked_vector<float> t_bias_hv;
    tracked_vector<E> w_t;   ///< B of dT W'^T: [o hv, h]
    tracked_vector<E> w_in;  ///< B of dZ [Wh; Wd]: [2h, n_in]
    tracked_vector<float> bh, bd;

    static std::size_t dv(const scorer_dims& d) noexcept { return Math::dot_depth(d.hv()); }
    /// Training's U W' operand and its bias.
    const E* w_rows() const noexcept { return split(d) ? w_hv.data() : w.data(); }
    const float* t_bias_rows() const noexcept { return split(d) ? t_bias_hv.data() : t_bias.data(); }

    /// Allocates every buffer at its packed size (checked first), so that
    /// pack() allocates nothing: with the scorer, a training step or a
    /// predict call never does.
    void reserve(const scorer_dims& dims)
    {
        d = dims;
        (void)bytes(d);
        const std::size_t h = d.hidden, n_in = d.n_in, ldt = d.labels * d.hv(), ldv = d.labels * dv(d);
        wh.reserve(Math::packed_size(n_in, h));
        wd.reserve(Math::packed_size(n_in, h));
        w.reserve(Math::packed_size(h, ldv));
        t_bias.reserve(d.bias_u ? ldv : 0);
        if (split(d)) {
            w_hv.reserve(Math::packed_size(h, ldt));
            t_bias_hv.reserve(d.bias_u ? ldt : 0);
        }
        w_t.reserve(Math::packed_size(ldt, h));
        w_in.reserve(Math::packed_size(2 * h, n_in));
        bh.reserve(h);
        bd.reserve(h);
    }

    /// The weights `p` rounded and packed in every layout.
    void pack(const scorer_dims& dims, const weights_ref<float>& p)
    {
        d = dims;
        const std::size_t h = d.hidden, n_in = d.n_in, hu = d.hu(), hv = d.hv(), ld = dv(d);
        const std::size_t ldt = d.labels * hv;
        // Wh^T, Wd^T: (k, m) = W[m, k].
        Math::pack_b([&](std::size_t k, std::size_t m) { return p.wh[m * n_in + k]; }, n_in, h, wh);
        Math::pack_b([&](std::size_t k, std::size_t m) { return p.wd[m * n_in + k]; }, n_in, h, wd);
        // W' as [h, o ld]: label l's first h rows of [hu, hv], then zero
        // columns up to ld; with bias_u its last row is T's bias.
        const auto w_at = [&](std::size_t ldl) {
            return [&p, hu, hv, ldl](std::size_t r, std::size_t m) {
                const std::size_t l = m / ldl, c = m % ldl;
                return c < hv ? p.w[(l * hu + r) * hv + c] : 0.0f;
            };
        };
        pack_w(w_at(ld), ld, w, t_bias);
        if (split(d)) pack_w(w_at(hv), hv, w_hv, t_bias_hv);
        const auto w_dense = w_at(hv);
        Math::pack_b([&](std::size_t k, std::size_t i) { return w_dense(i, k); }, ldt, h, w_t);
        Math::pack_b([&](std::size_t j, std::size_t m) { return j < h ? p.wh[j * n_in + m] : p.wd[(j - h) * n_in + m]; },
                     2 * h, n_in, w_in);
        bh.assign(p.bh, p.bh + h);
        bd.assign(p.bd, p.bd + h);
    }

    /// Bytes reserve() and pack() allocate for `d` (as the tracker counts
    /// them), checked.
    static std::uint64_t bytes(const scorer_dims& d)
    {
        const char* what = "bf16 weights";
        const std::uint64_t h = d.hidden, n_in = d.n_in, ldt = checked_mul(d.labels, d.hv(), what),
                            ldv = checked_mul(d.labels, dv(d), what);
        // Each pack holds at most (K + 32) x (M + 32) elements (depth and
        // panels rounded up): bounded here before packed_size multiplies.
        const auto most = [&](std::uint64_t K, std::uint64_t M) {
            return checked_mul(checked_add(K, 32, what), checked_add(M, 32, what), what);
        };
        std::uint64_t bound = checked_add(checked_mul(2, most(n_in, h), what), most(h, ldv), what);
        bound = checked_add(bound, checked_add(most(ldt, h), most(checked_mul(2, h, what), n_in), what), what);
        if (split(d)) bound = checked_add(bound, most(h, ldt), what);
        to_index_size(checked_mul(bound, sizeof(E), what), what);
        std::uint64_t e = 2 * Math::packed_size(d.n_in, d.hidden) + Math::packed_size(d.hidden, ldv) +
                          Math::packed_size(ldt, d.hidden) + Math::packed_size(2 * d.hidden, d.n_in);
        std::uint64_t f = 2 * h + (d.bias_u ? ldv : 0);
        if (split(d)) {
            e += Math::packed_size(d.hidden, ldt);
            f += d.bias_u ? ldt : 0;
        }
        return checked_add(checked_mul(e, sizeof(E), what), checked_mul(f, sizeof(float), what), what);
    }

private:
    static bool split(const scorer_dims& d) noexcept { return dv(d) != d.hv(); }
    template <class At>
    void pack_w(At&& at, std::size_t ld, tracked_vector<E>& out, tracked_vector<float>& bias)
    {
        const std::size_t cols = d.labels * ld;
        Math::pack_b(at, d.hidden, cols, out);
        // resize, not push_back: a fresh entry holds exactly its bytes.
        bias.resize(d.bias_u ? cols : 0);
        for (std::size_t m = 0; m < bias.size(); ++m) bias[m] = round_to_bfloat16(at(d.hidden, m));
    }
};

}  // namespace detail
BIAFFINE_NAMESPACE_END
