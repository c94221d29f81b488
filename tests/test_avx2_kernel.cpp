// Tests of biaffine/detail/compute/avx2_kernel.hpp: the packed right side and
// the blocked transpose against element loops, the fused GEMM + bias + relu
// against a double-precision loop (every height of the 6- and 12-row blocks,
// partial panels, strides, K down to 1), and the
// in-place right side, the transposed store and the accumulating epilogue
// against it. The kernel exists only where the compiler targets AVX2 and FMA;
// elsewhere this test reports itself skipped (ctest SKIP_REGULAR_EXPRESSION).
#include <biaffine/detail/compute/avx2_kernel.hpp>

#include <catch2/catch.hpp>

#if defined(__AVX2__) && defined(__FMA__)

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <random>
#include <vector>

namespace {

std::vector<float> random_floats(std::size_t n, std::mt19937& gen)
{
    std::uniform_real_distribution<float> d(-1.0f, 1.0f);
    std::vector<float> v(n);
    for (float& x : v) x = d(gen);
    return v;
}

}  // namespace

TEST_CASE("gemm_pack_b lays out panels of 16 columns, zero-padded", "[gemm_kernel]")
{
    std::mt19937 gen(7);
    for (std::size_t K : {1u, 5u, 8u, 33u, 129u}) {
        for (std::size_t M : {1u, 9u, 16u, 17u, 40u}) {
            for (std::size_t pad : {0u, 3u}) {
                for (bool transposed : {true, false}) {
                    INFO("K " << K << " M " << M << " pad " << pad << " transposed " << transposed);
                    // transposed: B as the transpose of a row-major [M, K]
                    // matrix (how the projections pass W and the scores Va),
                    // so (k, m) sits at b[m * ld + k]; else B row-major [K, M].
                    const std::size_t ld = (transposed ? K : M) + pad;
                    const std::vector<float> b = random_floats((transposed ? M : K) * ld, gen);
                    const auto at = [&](std::size_t k, std::size_t m) { return transposed ? m * ld + k : k * ld + m; };
                    std::vector<float> packed(biaffine::detail::gemm_packed_size(K, M), -1.0f);
                    REQUIRE(packed.size() == (M + 15) / 16 * 16 * K);
                    const auto lds = static_cast<std::ptrdiff_t>(ld);
                    biaffine::detail::gemm_pack_b(b.data(), transposed ? 1 : lds, transposed ? lds : 1, K, M,
                                                  packed.data());
                    for (std::size_t j0 = 0; j0 < M; j0 += 16) {
                        for (std::size_t k = 0; k < K; ++k) {
                            for (std::size_t j = 0; j < 16; ++j) {
                                const float got = packed[j0 * K + k * 16 + j];
                                const float want = j0 + j < M ? b[at(k, j0 + j)] : 0.0f;
                                REQUIRE(got == want);
                            }
                        }
                    }
                }
            }
        }
    }
}

TEST_CASE("transpose_block equals an element loop at every tile remainder and stride", "[gemm_kernel]")
{
    std::mt19937 gen(11);
    for (std::size_t rows : {0u, 1u, 7u, 8u, 9u, 16u, 23u}) {
        for (std::size_t cols : {1u, 5u, 8u, 13u, 129u}) {
            for (std::size_t pad : {0u, 3u}) {
                INFO("rows " << rows << " cols " << cols << " pad " << pad);
                const std::size_t lds = cols + pad, ldd = rows + pad + 1;
                const std::vector<float> src = random_floats(std::max<std::size_t>(rows * lds, 1), gen);
                // Sentinels: entries outside [cols, rows] of dst stay untouched.
                std::vector<float> dst(cols * ldd, -7.0f);
                biaffine::detail::transpose_block(src.data(), static_cast<std::ptrdiff_t>(lds), rows, cols,
                                                  dst.data(), static_cast<std::ptrdiff_t>(ldd));
                for (std::size_t j = 0; j < cols; ++j) {
                    for (std::size_t i = 0; i < ldd; ++i) {
                        const float want = i < rows ? src[i * lds + j] : -7.0f;
                        REQUIRE(dst[j * ldd + i] == want);
                    }
                }
            }
        }
    }
}

TEST_CASE("gemm_bias_relu equals a double-precision loop", "[gemm_kernel]")
{
    std::mt19937 gen(11);
    // Every height of the 6-row blocks and of the up-to-12-row blocks an
    // unpaired panel takes with the 6 x 32 body (N = 3, 4, 8, 10; 13, 19,
    // 25: two or three blocks of unequal heights; 97, 200: past a row block).
    for (std::size_t N : {1u, 2u, 3u, 4u, 5u, 6u, 7u, 8u, 10u, 11u, 12u, 13u, 19u, 25u, 97u, 200u}) {
        for (std::size_t K : {1u, 3u, 129u, 256u}) {
            // 17, 31, 32, 33, 40, 41, 47: a second panel partly or wholly
            // full (the 6 x 32 body pairs panels), then one panel left
            // alone, with at most 8 columns in use (its 256-bit form: 1, 33,
            // 40, 129) or more (15, 16, 41, 47).
            for (std::size_t M : {1u, 15u, 16u, 17u, 31u, 32u, 33u, 40u, 41u, 47u, 129u}) {
                for (int variant = 0; variant < 4; ++variant) {
                    const bool relu = (variant & 1) != 0;
                    const bool with_bias = (variant & 2) != 0;
                    // Strides wider than the rows: the kernel must honour them.
                    const std::size_t lda = K + 3, ldc = M + 5;
                    INFO("N " << N << " K " << K << " M " << M << " relu " << relu << " bias " << with_bias);
                    const std::vector<float> a = random_floats(N * lda, gen);
                    const std::vector<float> b = random_floats(K * M, gen);  // row-major [K, M]
                    const std::vector<float> bias = random_floats(M, gen);
                    std::vector<float> packed(biaffine::detail::gemm_packed_size(K, M));
                    biaffine::detail::gemm_pack_b(b.data(), static_cast<std::ptrdiff_t>(M), 1, K, M, packed.data());
                    const float sentinel = 12345.0f;
                    std::vector<float> c(N * ldc, sentinel);
                    biaffine::detail::gemm_bias_relu(a.data(), static_cast<std::ptrdiff_t>(lda), N, K, packed.data(), M,
                                                     with_bias ? bias.data() : nullptr, relu, c.data(),
                                                     static_cast<std::ptrdiff_t>(ldc));
                    double worst = 0.0;
                    for (std::size_t r = 0; r < N; ++r) {
                        for (std::size_t m = 0; m < M; ++m) {
                            double want = with_bias ? bias[m] : 0.0;
                            for (std::size_t k = 0; k < K; ++k) {
                                want += static_cast<double>(a[r * lda + k]) * b[k * M + m];
                            }
                            if (relu) want = std::max(want, 0.0);
                            worst = std::max(worst, std::abs(c[r * ldc + m] - want) / (1.0 + std::abs(want)));
                        }
                        for (std::size_t m = M; m < ldc; ++m) REQUIRE(c[r * ldc + m] == sentinel);  // no overrun
                    }
                    REQUIRE(worst < 1e-5);

                    // The transposed store, with the same bias and relu: S
                    // [M, N] with S[m, r] = C[r, m]; S's rows past M untouched.
                    const std::size_t lds = N + 2;
                    std::vector<float> st((M + 2) * lds, sentinel);
                    if (variant == 0) {
                        biaffine::detail::gemm_store_transposed(a.data(), static_cast<std::ptrdiff_t>(lda), N, K,
                                                                packed.data(), M, st.data(),
                                                                static_cast<std::ptrdiff_t>(lds));
                    } else {
                        biaffine::detail::gemm_epilogue ep;
                        ep.bias = with_bias ? bias.data() : nullptr;
                        ep.relu = relu;
                        ep.trans = true;
                        biaffine::detail::gemm_packed(a.data(), static_cast<std::ptrdiff_t>(lda), N, K, packed.data(),
                                                      M, ep, st.data(), static_cast<std::ptrdiff_t>(lds));
                    }
                    for (std::size_t m = 0; m < M + 2; ++m) {
                        for (std::size_t r = 0; r < lds; ++r) {
                            REQUIRE(st[m * lds + r] == (m < M && r < N ? c[r * ldc + m] : sentinel));
                        }
                    }

                    // B read in place, only the partial panel packed.
                    if (variant != 0) continue;
                    std::vector<float> tail(biaffine::detail::gemm_packed_size(K, M % 16));
                    std::vector<float> c2(N * ldc, sentinel);
                    biaffine::detail::gemm_rowmajor_b(a.data(), static_cast<std::ptrdiff_t>(lda), N, K, b.data(),
                                                      static_cast<std::ptrdiff_t>(M), M, tail.data(), c2.data(),
                                                      static_cast<std::ptrdiff_t>(ldc));
                    REQUIRE(c2 == c);  // same products, same order of sums
                }
            }
        }
    }
}

TEST_CASE("gemm_bias_relu keeps NaN through the relu, as std::max(y, 0) and Eigen's cwiseMax do", "[gemm_kernel]")
{
    // Found by fuzz_pipeline: a NaN token scored 0 on the kernel path and NaN
    // on the Eigen path (maxps returns its second operand on NaN).
    const std::size_t N = 7, K = 5, M = 17;
    std::vector<float> a(N * K, 0.5f), b(K * M, -1.0f), bias(M, 0.0f);
    a[3 * K + 2] = std::numeric_limits<float>::quiet_NaN();  // row 3
    std::vector<float> packed(biaffine::detail::gemm_packed_size(K, M));
    biaffine::detail::gemm_pack_b(b.data(), static_cast<std::ptrdiff_t>(M), 1, K, M, packed.data());
    std::vector<float> c(N * M, 1.0f);
    biaffine::detail::gemm_bias_relu(a.data(), static_cast<std::ptrdiff_t>(K), N, K, packed.data(), M, bias.data(),
                                     true, c.data(), static_cast<std::ptrdiff_t>(M));
    for (std::size_t r = 0; r < N; ++r) {
        for (std::size_t m = 0; m < M; ++m) {
            INFO("row " << r << " col " << m);
            if (r == 3) {
                REQUIRE(std::isnan(c[r * M + m]));
            } else {
                REQUIRE(c[r * M + m] == 0.0f);  // 5 * 0.5 * -1 clamped
            }
        }
    }
}

TEST_CASE("gemm epilogue: accumulate adds to the destination, plain and transposed", "[gemm_kernel]")
{
    std::mt19937 gen(23);
    for (std::size_t N : {1u, 5u, 6u, 13u, 25u, 100u}) {
        for (std::size_t K : {1u, 7u, 130u}) {
            for (std::size_t M : {3u, 16u, 33u}) {
                for (int variant = 0; variant < 4; ++variant) {
                    const bool relu = (variant & 1) != 0;
                    const bool trans = (variant & 2) != 0;
                    INFO("N " << N << " K " << K << " M " << M << " relu " << relu << " trans " << trans);
                    const std::size_t lda = K + 1;
                    const std::vector<float> a = random_floats(N * lda, gen);
                    const std::vector<float> b = random_floats(K * M, gen);  // row-major [K, M]
                    const std::vector<float> bias = random_floats(M, gen);
                    // Destination: [N, M] row stride ldc, or its transpose [M, N].
                    const std::size_t rows = trans ? M : N, cols = trans ? N : M, ldc = cols + 3;
                    const std::vector<float> before = random_floats(rows * ldc, gen);
                    std::vector<float> c = before;
                    biaffine::detail::gemm_epilogue ep;
                    ep.bias = bias.data();
                    ep.relu = relu;
                    ep.accumulate = true;
                    ep.trans = trans;
                    // The in-place entry point (B row-major, tail packed).
                    std::vector<float> tail(biaffine::detail::gemm_packed_size(K, M % 16));
                    biaffine::detail::gemm_rowmajor_b(a.data(), static_cast<std::ptrdiff_t>(lda), N, K, b.data(),
                                                      static_cast<std::ptrdiff_t>(M), M, tail.data(), c.data(),
                                                      static_cast<std::ptrdiff_t>(ldc), ep);
                    double worst = 0.0;
                    for (std::size_t r = 0; r < N; ++r) {
                        for (std::size_t m = 0; m < M; ++m) {
                            const std::size_t at = trans ? m * ldc + r : r * ldc + m;
                            double want = static_cast<double>(bias[m]) + before[at];
                            for (std::size_t k = 0; k < K; ++k) {
                                want += static_cast<double>(a[r * lda + k]) * b[k * M + m];
                            }
                            if (relu) want = std::max(want, 0.0);
                            worst = std::max(worst, std::abs(c[at] - want) / (1.0 + std::abs(want)));
                        }
                    }
                    REQUIRE(worst < 1e-5);
                    for (std::size_t r = 0; r < rows; ++r) {
                        for (std::size_t j = cols; j < ldc; ++j) REQUIRE(c[r * ldc + j] == before[r * ldc + j]);
                    }
                    // The packed entry point gives the same bits.
                    std::vector<float> packed(biaffine::detail::gemm_packed_size(K, M));
                    biaffine::detail::gemm_pack_b(b.data(), static_cast<std::ptrdiff_t>(M), 1, K, M, packed.data());
                    std::vector<float> c2 = before;
                    biaffine::detail::gemm_packed(a.data(), static_cast<std::ptrdiff_t>(lda), N, K, packed.data(), M,
                                                  ep, c2.data(), static_cast<std::ptrdiff_t>(ldc));
                    REQUIRE(c2 == c);
                }
            }
        }
    }
}

#else

TEST_CASE("AVX2 kernel: not built here", "[avx2_kernel]")
{
    WARN("SKIPPED: the AVX2/FMA kernel is not compiled for this target (needs -mavx2 -mfma); the scorer uses Eigen");
    SUCCEED("nothing to test without the kernel");
}

#endif
