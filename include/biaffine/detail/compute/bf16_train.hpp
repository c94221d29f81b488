// biaffine/detail/compute/bf16_train.hpp - a float scorer's training in bf16
// (scorer_config::precision = compute_precision::bf16): the batch-wide
// products host_batch runs - both projections, U W' and the backward of
// each - on bf16 operands with fp32 accumulation. The parameters (the master
// copy the optimiser updates) and every gradient stay fp32; the per-split
// products, the softmax and the losses stay fp32.
//
// Rounding points (to nearest even), the inference path's (bf16_forward.hpp)
// in the forward and their counterparts backward:
//   forward   X, Wh, Wd and W as they are read; U = round(relu(X Wh^T + bh))
//             and V likewise (bias and ReLU in fp32); T = round(U W' + W's
//             bias row). The per-split scores are fp32 products of those
//             values, so a training forward gives predict's bf16 scores.
//   backward  dT, rounded, times W'^T -> dU; U^T times dT (both rounded)
//             -> dW' (W's bias row of U's ones column: fp32 column sums of
//             dT); dZ = relu'(dU | dV) (fp32), rounded, times [Wh; Wd] ->
//             dX and its transpose times X (rounded) -> dWh, dWd; dbh, dbd
//             fp32 sums. Results are fp32 and summed in fp32 over chunks.
// Rounding is the identity to backward (straight through), as mixed
// precision training usually treats it.
//
// The products run on a Math of bf16_math.hpp (backend.hpp chooses it): AMX tiles (amx_gemm;
// bf16_gemm where Linux withholds the tiles), VDPBF16PS (bf16_gemm) or, on
// every other CPU, the same rounding with the rounded values kept as floats
// and Eigen's fp32 GEMM (bf16 x bf16 products are exact in fp32).
//
// The weight gradients' products sum over tokens: their operands are packed
// with the tokens as the depth, a chunk of grad_rows tokens at a time (U^T,
// dZ^T transposed into bf16 rows; dT and X in pair panels, two tokens to a
// 32-bit lane), so the scratch is bounded by the chunk, not the batch.
#pragma once

#include "biaffine/abi.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "biaffine/bfloat16.hpp"
#include "biaffine/detail/checked.hpp"
#include "biaffine/detail/compute/bf16_math.hpp"
#include "biaffine/detail/compute/bf16_weights.hpp"
#include "biaffine/detail/compute/operands.hpp"
#include "biaffine/detail/eigen.hpp"
#include "biaffine/detail/split_checks.hpp"
#include "biaffine/mode.hpp"
#include "biaffine/tensor.hpp"
#include "biaffine/workspace.hpp"

BIAFFINE_NAMESPACE_BEGIN
namespace detail {

template <class Math>
struct bf16_train {
    using E = typename Math::in_elem;
    /// Rows read past the last of an A operand (AMX reads whole tiles).
    static constexpr std::size_t slack = 32;
    /// Rows of a forward chunk (X, then U, in bf16 rows).
    static constexpr std::size_t fwd_rows = 256;
    /// Tokens of a weight-gradient chunk (a multiple of 32: AMX's depth step).
    static constexpr std::size_t grad_rows = 1024;
    /// Bytes of dT's rows in bf16 that dU = dT W'^T converts at once.
    static constexpr std::size_t du_bytes = std::size_t(2) << 20;

    /// What run() reports as the products' arithmetic.
    static const char* math_name() noexcept { return Math::active(); }

    /// The weights as the products read them (the one packer, bf16_weights.hpp).
    using weights = bf16_weights<Math>;

    // ------------------------------------------------------------ scratch

    /// Tokens of a weight-gradient chunk for a batch of `rows` rows.
    static std::size_t grad_chunk(std::size_t rows) noexcept
    {
        return std::min(grad_rows, (std::max<std::size_t>(rows, 1) + 31) / 32 * 32);
    }
    /// Rows of dT that dU = dT W'^T converts at once.
    static std::size_t du_chunk(const scorer_dims& d) noexcept
    {
        const std::size_t row = Math::depth(d.labels * d.hv()) * sizeof(E);
        return std::clamp<std::size_t>(du_bytes / row / 32 * 32, 32, grad_rows);
    }
    /// Bytes of scratch the forward (project, left) uses.
    static std::size_t forward_bytes(const scorer_dims& d) noexcept
    {
        const std::size_t width = std::max(Math::depth(d.n_in), Math::depth(d.hidden));
        return region((fwd_rows + slack) * width * sizeof(E)) + 64;  // + carve's alignment
    }
    /// Bytes of scratch every call uses for a batch of up to `rows` rows.
    static std::size_t scratch_bytes(const scorer_dims& d, std::size_t rows) noexcept
    {
        const std::size_t h = d.hidden, n_in = d.n_in, G = grad_chunk(rows), ldt = d.labels * d.hv();
        const std::size_t du = region((du_chunk(d) + slack) * Math::depth(ldt) * sizeof(E));
        const std::size_t dw = region((h + slack) * G * sizeof(E)) + region(Math::packed_size(G, d.hv()) * sizeof(E));
        const std::size_t in = region(G * 2 * h * sizeof(float)) + region((h + slack) * G * sizeof(E)) +
                               region(Math::packed_size(G, n_in) * sizeof(E)) +
                               region((G + slack) * Math::depth(2 * h) * sizeof(E)) +
                               region(G * n_in * sizeof(float)) + region(G * sizeof(const float*));
        return std::max({forward_bytes(d), du, dw, in}) + 64;  // + the alignment of the first region
    }

    // ------------------------------------------------------------ forward

    /// u [N, hu] = round(relu(X Wh^T + bh)) | 1, v [N, hv] likewise, from
    /// the splits X (any strides).
    template <class Items>
    static void project(const scorer_dims& d, const weights& w, const Items& X, std::size_t N, float* u, float* v,
                        void* scratch)
    {
        if (N == 0) return;
        const std::size_t h = d.hidden, dx = Math::depth(d.n_in), hu = d.hu(), hv = d.hv();
        carve c(scratch);
        E* xb = c.template take<E>((fwd_rows + slack) * dx);
        auto rows_of = walk_rows([&](std::size_t k) { return read_only(X[k]); });
        const bf16_gemm_epilogue eu{w.bh.data(), true, false, true}, ev{w.bd.data(), true, false, true};
        for (std::size_t r0 = 0; r0 < N; r0 += fwd_rows) {
            const std::size_t rn = std::min(fwd_rows, N - r0);
            for (std::size_t q = 0; q < rn;) {
                const auto run = rows_of.take(rn - q);
                Math::round_rows(run.x.rows_view(run.first, run.rows), xb + q * dx, dx);
                q += run.rows;
            }
            product(xb, dx, rn, d.n_in, w.wh.data(), h, eu, u + r0 * hu, hu);
            product(xb, dx, rn, d.n_in, w.wd.data(), h, ev, v + r0 * hv, hv);
            for (std::size_t r = r0; r < r0 + rn; ++r) {
                if (d.bias_u) u[r * hu + h] = 1.0f;
                if (d.bias_v) v[r * hv + h] = 1.0f;
            }
        }
    }

    /// t [N, o hv] = round(U W' (+ W's bias row)): U's first h columns (its
    /// ones column is the bias).
    static void left(const scorer_dims& d, const weights& w, const float* u, std::size_t N, float* t, void* scratch)
    {
        const std::size_t h = d.hidden, du = Math::depth(h), hu = d.hu(), ldt = d.labels * d.hv();
        carve c(scratch);
        E* ub = c.template take<E>((fwd_rows + slack) * du);
        const bf16_gemm_epilogue ep{d.bias_u ? w.t_bias_rows() : nullptr, false, false, true};
        for (std::size_t r0 = 0; r0 < N; r0 += fwd_rows) {
            const std::size_t rn = std::min(fwd_rows, N - r0);
            Math::round_rows(rows_of(u + r0 * hu, rn, h, hu), ub, du);
            product(ub, du, rn, h, w.w_rows(), ldt, ep, t + r0 * ldt, ldt);
        }
    }

    // ------------------------------------------------------------ backward

    /// du [N, hu] (first h columns) = dT W'^T; dw [o, hu, hv] += U^T dT.
    static void left_backward(const scorer_dims& d, const weights& w, const float* u, std::size_t N, const float* dt,
                              float* du, float* dw, void* scratch)
    {
        const std::size_t h = d.hidden, hu = d.hu(), hv = d.hv(), o = d.labels, ldt = o * hv;
        {
            const std::size_t kd = Math::depth(ldt), rb = du_chunk(d);
            carve c(scratch);
            E* a = c.template take<E>((rb + slack) * kd);
            for (std::size_t r0 = 0; r0 < N; r0 += rb) {
                const std::size_t rn = std::min(rb, N - r0);
                Math::round_rows(rows_of(dt + r0 * ldt, rn, ldt, ldt), a, kd);
                product(a, kd, rn, ldt, w.w_t.data(), h, bf16_gemm_epilogue{}, du + r0 * hu, hu);
            }
        }
        const std::size_t G = grad_chunk(N);
        carve c(scratch);
        E* ut = c.template take<E>((h + slack) * G);
        E* bt = c.template take<E>(Math::packed_size(G, hv));
        bf16_gemm_epilogue add;
        add.accumulate = true;
        for (std::size_t k0 = 0; k0 < N; k0 += G) {
            const std::size_t kc = std::min(G, N - k0);
            Math::pack_transposed(u + k0 * hu, hu, kc, h, ut, G);
            for (std::size_t l = 0; l < o; ++l) {
                const float* dtl = dt + k0 * ldt + l * hv;
                Math::pack_pairs([&](std::size_t k) { return dtl + k * ldt; }, kc, hv, bt);
                float* dwl = dw + l * hu * hv;
                product(ut, G, h, kc, bt, hv, add, dwl, hv);
                if (!d.bias_u) continue;
                // U's ones column: the column sums of dT_l, in fp32.
                float* row = dwl + h * hv;
                for (std::size_t r = 0; r < kc; ++r) {
                    const float* g = dtl + r * ldt;
                    for (std::size_t j = 0; j < hv; ++j) row[j] += g[j];
                }
            }
        }
    }

    /// Through relu (and dropout's scale) to dbh, dbd (fp32 sums), dWh,
    /// dWd (+= dZ^T X) and every split's dX (= dZ [Wh; Wd]). dzu [N, hu],
    /// dzv [N, hv]: the gradients at U and V.
    template <class Items>
    static void input_backward(const scorer_dims& d, const weights& w, const grads_ref<float>& g, const Items& X,
                               std::size_t N, const relu_ref<float>& a, const float* dzu, const float* dzv,
                               void* scratch, span<const seq_view<float>> dX)
    {
        if (N == 0) return;
        const std::size_t h = d.hidden, n_in = d.n_in, hu = d.hu(), hv = d.hv(), G = grad_chunk(N);
        const std::size_t dz = Math::depth(2 * h);
        carve c(scratch);
        float* z = c.template take<float>(G * 2 * h);  // [dZu dZv] of the chunk, fp32
        E* zt = c.template take<E>((h + slack) * G);
        E* xb = c.template take<E>(Math::packed_size(G, n_in));
        E* za = c.template take<E>((G + slack) * dz);
        float* dx = c.template take<float>(G * n_in);  // copies of strided rows of X, then dX
        const float** xr = c.template take<const float*>(G);
        auto x_rows = walk_rows([&](std::size_t k) { return read_only(X[k]); });
        auto dx_rows = walk_rows([&](std::size_t k) { return dX[k]; });
        bf16_gemm_epilogue add;
        add.accumulate = true;
        for (std::size_t k0 = 0; k0 < N; k0 += G) {
            const std::size_t kc = std::min(G, N - k0);
            for (std::size_t q = 0; q < kc;) {
                const auto run = x_rows.take(kc - q);
                for (std::size_t i = 0; i < run.rows; ++i, ++q) {
                    const seq_view<const float> row = run.x.rows_view(run.first + i, 1);
                    if (row.col_stride == 1) {
                        xr[q] = row.data;
                    } else {
                        copy_rows(row, dx + q * n_in);
                        xr[q] = dx + q * n_in;
                    }
                }
            }
            Math::pack_pairs([&](std::size_t k) { return xr[k]; }, kc, n_in, xb);
            for (std::size_t r = 0; r < kc; ++r) {
                const std::size_t i = k0 + r;
                relu_row(a.u + i * hu, dzu + i * hu, h, a.scale, z + r * 2 * h, g.bh);
                relu_row(a.v + i * hv, dzv + i * hv, h, a.scale, z + r * 2 * h + h, g.bd);
            }
            Math::pack_transposed(z, 2 * h, kc, h, zt, G);
            product(zt, G, h, kc, xb, n_in, add, g.wh, n_in);
            Math::pack_transposed(z + h, 2 * h, kc, h, zt, G);
            product(zt, G, h, kc, xb, n_in, add, g.wd, n_in);
            Math::round_rows(rows_of(z, kc, 2 * h, 2 * h), za, dz);
            product(za, dz, kc, 2 * h, w.w_in.data(), n_in, bf16_gemm_epilogue{}, dx, n_in);
            for (std::size_t q = 0; q < kc;) {
                const auto run = dx_rows.take(kc - q);
                copy_rows(dx + q * n_in, run.x.rows_view(run.first, run.rows));
                q += run.rows;
            }
        }
    }

    // ------------------------------------------------------------ kernels

    /// C [N, M] (row stride ldc) = epilogue(A [N, K] . B): A rows of
    /// Math::depth(K) elements (zeros past K), readable `slack` rows past
    /// N; B packed by Math::pack_b or Math::pack_pairs.
    static void product(const E* a, std::size_t lda, std::size_t N, std::size_t K, const E* b, std::size_t M,
                        const bf16_gemm_epilogue& ep, float* c, std::size_t ldc)
    {
        if (N == 0 || M == 0) return;
        Math::product(a, lda, N, K, b, M, ep, c, ldc);
    }

private:
    static std::size_t region(std::size_t bytes) noexcept { return (bytes + 63) / 64 * 64; }
    static seq_view<const float> rows_of(const float* p, std::size_t rows, std::size_t cols, std::size_t ld) noexcept
    {
        return {p, rows, cols, static_cast<std::ptrdiff_t>(ld), 1};
    }
    /// One row of dZ: g = dA * scale where A > 0 (NaN: 0), into out; db += g.
    static void relu_row(const float* act, const float* da, std::size_t h, float scale, float* out, float* db)
    {
        for (std::size_t j = 0; j < h; ++j) {
            const float g = act[j] > 0.0f ? da[j] * scale : 0.0f;
            out[j] = g;
            db[j] += g;
        }
    }
    /// Consecutive 64-byte aligned regions of the scratch.
    struct carve {
        unsigned char* p;
        explicit carve(void* s)
            : p(reinterpret_cast<unsigned char*>((reinterpret_cast<std::uintptr_t>(s) + 63) / 64 * 64))
        {
        }
        template <class U>
        U* take(std::size_t count)
        {
            U* r = reinterpret_cast<U*>(p);
            p += region(count * sizeof(U));
            return r;
        }
    };
};

}  // namespace detail
BIAFFINE_NAMESPACE_END
