// biaffine/detail/compute/bf16_forward.hpp - the scorer's inference forward
// in bf16: a batch's splits -> both projections (bias, ReLU) -> T = U W' ->
// each split's scores or its labels at given heads, with bf16 operands and
// fp32 accumulation, outputs in fp32.
//
// Where operands are rounded to bf16 (to nearest even): X as it is read;
// Wh, Wd and W once per parameter version (bf16_weights.hpp, the packer
// training reads too); U and V after bias and ReLU (their ones column is exact);
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
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "biaffine/bfloat16.hpp"
#include "biaffine/detail/compute/bf16_math.hpp"
#include "biaffine/detail/compute/bf16_weights.hpp"
#include "biaffine/detail/compute/operands.hpp"
#include "biaffine/detail/checked.hpp"
#include "biaffine/tensor.hpp"

BIAFFINE_NAMESPACE_BEGIN
namespace detail {

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

    /// Splits `x(0) .. x(count - 1)` (seq_view<const float>, [n_k, n_in])
    /// a group at a time; for each split k, each(k, vb, tb): its rows of V
    /// [n_k, dv] and of T [n_k, o dv] (row stride o dv; label l of head j at
    /// tb + (j o + l) dv), valid until `each` returns, and the scratch
    /// split_scores needs. scratch: scratch_bytes(d, G, longest split)
    /// bytes, G = capacity(d, rows of every split, longest split).
    template <class Get, class Each>
    static void run(const bf16_weights<Math>& w, Get&& x, std::size_t count, void* scratch, std::size_t G, Each&& each)
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

}  // namespace detail
BIAFFINE_NAMESPACE_END
