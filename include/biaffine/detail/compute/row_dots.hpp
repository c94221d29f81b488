// biaffine/detail/compute/row_dots.hpp - small products for one split, without packing.
//
// The per-split products of the bilinear kernel are small in one dimension (a
// split has tens of tokens) and their operands are row-major. A general GEMM
// packs both operands into panels and zero-fills C before accumulating; at
// these sizes the packing and the fill cost as much as the arithmetic. These
// kernels accumulate a register block in SIMD packets straight from the
// operands' memory and store each result once:
//
//   row_dots:   C = A . B^T, A's and B's rows contiguous: each entry is a dot
//               product of two rows (forward S = Va . Tr^T).
//   row_combos: C = A . B, B's rows contiguous, A read by strides: each row of
//               C is a combination of B's rows (backward dVa = dS . Tr and
//               dTr = dS^T . Va).
#pragma once

#include "biaffine/abi.hpp"

#include <cstddef>

#include "biaffine/detail/eigen.hpp"

BIAFFINE_NAMESPACE_BEGIN
namespace detail {

template <class T>
struct dot_packets {
    using packet = typename Eigen::internal::packet_traits<T>::type;
    static constexpr std::ptrdiff_t width = Eigen::internal::packet_traits<T>::size;
};

// Rows [i, i + R) of A against rows [j, j + C) of B, k shared columns.
template <int R, int C, class T>
inline void row_dots_block(const T* a, std::ptrdiff_t lda, const T* b, std::ptrdiff_t ldb, std::ptrdiff_t k,
                           T* c, std::ptrdiff_t ldc)
{
    using namespace Eigen::internal;
    using P = typename dot_packets<T>::packet;
    constexpr std::ptrdiff_t w = dot_packets<T>::width;
    const std::ptrdiff_t kv = k / w * w;
    P acc[R][C];
    for (int r = 0; r < R; ++r)
        for (int q = 0; q < C; ++q) acc[r][q] = pset1<P>(T(0));
    for (std::ptrdiff_t p = 0; p < kv; p += w) {
        P bp[C];
        for (int q = 0; q < C; ++q) bp[q] = ploadu<P>(b + q * ldb + p);
        for (int r = 0; r < R; ++r) {
            const P ap = ploadu<P>(a + r * lda + p);
            for (int q = 0; q < C; ++q) acc[r][q] = pmadd(ap, bp[q], acc[r][q]);
        }
    }
    for (int r = 0; r < R; ++r) {
        for (int q = 0; q < C; ++q) {
            T s = predux(acc[r][q]);
            for (std::ptrdiff_t p = kv; p < k; ++p) s += a[r * lda + p] * b[q * ldb + p];
            c[r * ldc + q] = s;
        }
    }
}

// Columns [0, C) of C (rows of B) against every row of A: the C rows of B
// stay in L1 while A's rows stream by (A is one split: small).
template <int C, class T>
inline void row_dots_cols(const T* a, std::ptrdiff_t lda, std::ptrdiff_t n, const T* b, std::ptrdiff_t ldb,
                          std::ptrdiff_t k, T* c, std::ptrdiff_t ldc)
{
    constexpr int R = 4;  // 4 x 3 accumulators + 3 B packets + 1 A packet: 16 vector registers
    std::ptrdiff_t i = 0;
    for (; i + R <= n; i += R) row_dots_block<R, C>(a + i * lda, lda, b, ldb, k, c + i * ldc, ldc);
    switch (n - i) {
    case 3: row_dots_block<3, C>(a + i * lda, lda, b, ldb, k, c + i * ldc, ldc); break;
    case 2: row_dots_block<2, C>(a + i * lda, lda, b, ldb, k, c + i * ldc, ldc); break;
    case 1: row_dots_block<1, C>(a + i * lda, lda, b, ldb, k, c + i * ldc, ldc); break;
    default: break;
    }
}

/// `C [n, m] = A [n, k] . B [m, k]^T`, all row-major with unit column stride
/// and leading dimensions `lda`, `ldb`, `ldc` (elements). C is overwritten.
template <class T>
void row_dots(const T* a, std::ptrdiff_t lda, std::ptrdiff_t n, const T* b, std::ptrdiff_t ldb, std::ptrdiff_t m,
              std::ptrdiff_t k, T* c, std::ptrdiff_t ldc)
{
    constexpr int C = 3;
    std::ptrdiff_t j = 0;
    for (; j + C <= m; j += C) row_dots_cols<C>(a, lda, n, b + j * ldb, ldb, k, c + j, ldc);
    switch (m - j) {
    case 2: row_dots_cols<2>(a, lda, n, b + j * ldb, ldb, k, c + j, ldc); break;
    case 1: row_dots_cols<1>(a, lda, n, b + j * ldb, ldb, k, c + j, ldc); break;
    default: break;
    }
}

// Rows [0, R) of C, columns [0, Q * width) from column offset 0: P-term
// combinations of B's rows.
template <int R, int Q, class T>
inline void row_combos_block(const T* a, std::ptrdiff_t a_rs, std::ptrdiff_t a_cs, std::ptrdiff_t p_count,
                             const T* b, std::ptrdiff_t ldb, T* c, std::ptrdiff_t ldc)
{
    using namespace Eigen::internal;
    using P = typename dot_packets<T>::packet;
    constexpr std::ptrdiff_t w = dot_packets<T>::width;
    P acc[R][Q];
    for (int r = 0; r < R; ++r)
        for (int q = 0; q < Q; ++q) acc[r][q] = pset1<P>(T(0));
    for (std::ptrdiff_t p = 0; p < p_count; ++p) {
        P bp[Q];
        for (int q = 0; q < Q; ++q) bp[q] = ploadu<P>(b + p * ldb + q * w);
        for (int r = 0; r < R; ++r) {
            const P ap = pset1<P>(a[r * a_rs + p * a_cs]);
            for (int q = 0; q < Q; ++q) acc[r][q] = pmadd(ap, bp[q], acc[r][q]);
        }
    }
    for (int r = 0; r < R; ++r)
        for (int q = 0; q < Q; ++q) pstoreu(c + r * ldc + q * w, acc[r][q]);
}

// Rows [0, R) of C, columns [0, k): whole packets in blocks of 3, then 2 or 1
// packets, then the scalar tail.
template <int R, class T>
inline void row_combos_rows(const T* a, std::ptrdiff_t a_rs, std::ptrdiff_t a_cs, std::ptrdiff_t p_count, const T* b,
                            std::ptrdiff_t ldb, std::ptrdiff_t k, T* c, std::ptrdiff_t ldc)
{
    constexpr std::ptrdiff_t w = dot_packets<T>::width;
    std::ptrdiff_t j = 0;
    for (; j + 3 * w <= k; j += 3 * w) row_combos_block<R, 3>(a, a_rs, a_cs, p_count, b + j, ldb, c + j, ldc);
    if (j + 2 * w <= k) {
        row_combos_block<R, 2>(a, a_rs, a_cs, p_count, b + j, ldb, c + j, ldc);
        j += 2 * w;
    } else if (j + w <= k) {
        row_combos_block<R, 1>(a, a_rs, a_cs, p_count, b + j, ldb, c + j, ldc);
        j += w;
    }
    for (; j < k; ++j) {
        for (int r = 0; r < R; ++r) {
            T s(0);
            for (std::ptrdiff_t p = 0; p < p_count; ++p) s += a[r * a_rs + p * a_cs] * b[p * ldb + j];
            c[r * ldc + j] = s;
        }
    }
}

/// `C [n, k] = A [n, p] . B [p, k]`: B and C row-major with unit column stride
/// and leading dimensions `ldb`, `ldc`; A's entry (i, q) at `a[i * a_rs + q * a_cs]`
/// (so a transposed A is just swapped strides). C is overwritten.
template <class T>
void row_combos(const T* a, std::ptrdiff_t a_rs, std::ptrdiff_t a_cs, std::ptrdiff_t n, std::ptrdiff_t p_count,
                const T* b, std::ptrdiff_t ldb, std::ptrdiff_t k, T* c, std::ptrdiff_t ldc)
{
    constexpr int R = 4;  // 4 x 3 accumulators + 3 B packets + 1 broadcast: 16 vector registers
    std::ptrdiff_t i = 0;
    for (; i + R <= n; i += R) row_combos_rows<R>(a + i * a_rs, a_rs, a_cs, p_count, b, ldb, k, c + i * ldc, ldc);
    switch (n - i) {
    case 3: row_combos_rows<3>(a + i * a_rs, a_rs, a_cs, p_count, b, ldb, k, c + i * ldc, ldc); break;
    case 2: row_combos_rows<2>(a + i * a_rs, a_rs, a_cs, p_count, b, ldb, k, c + i * ldc, ldc); break;
    case 1: row_combos_rows<1>(a + i * a_rs, a_rs, a_cs, p_count, b, ldb, k, c + i * ldc, ldc); break;
    default: break;
    }
}

}  // namespace detail
BIAFFINE_NAMESPACE_END
