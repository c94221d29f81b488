// Tests of biaffine/detail/compute/backend.hpp and the backends behind it:
// which backend this build chose, and every backend's per-split scores and
// relu backward against a double-precision loop / the select's definition,
// on every path (row_dots, Eigen's GEMM, the kernel), strides wider than the
// rows and a sentinel past them. The whole scorer through each backend is
// covered by the golden and gradient tests, which CI runs with the kernel on
// (the Release build) and off (the sanitizer build).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <limits>
#include <random>
#include <type_traits>
#include <utility>
#include <vector>

#include "biaffine/detail/compute/backend.hpp"
#include "biaffine/detail/compute/interface.hpp"
#include "biaffine/memory.hpp"
#if defined(__AVX2__) && defined(__FMA__)
// Tested wherever it can run, also on AVX-512 builds that do not choose it.
#include "biaffine/detail/compute/avx2_backend.hpp"
#endif

namespace {

using biaffine::detail::scorer_dims;

template <class Backend, class T>
void check_split_scores(const char* name)
{
    std::mt19937 gen(5);
    std::uniform_real_distribution<double> d(-1.0, 1.0);
    const std::size_t hv = 129;
    for (std::size_t o : {std::size_t(1), std::size_t(4)}) {
        for (std::size_t n : {std::size_t(0), std::size_t(5), std::size_t(13), std::size_t(18), std::size_t(22),
                              std::size_t(26), std::size_t(31), std::size_t(32), std::size_t(33), std::size_t(36),
                              std::size_t(48), std::size_t(60)}) {
            INFO(name << ": labels " << o << " n " << n);
            const std::size_t ldv = hv + 2, lds = n * o + 3;  // strides wider than the rows
            std::vector<T> va(n * ldv), tr(n * o * hv);
            for (T& x : va) x = static_cast<T>(d(gen));
            for (T& x : tr) x = static_cast<T>(d(gen));
            const T sentinel = T(-777);
            std::vector<T> s(n * lds, sentinel);
            scorer_dims dims;
            dims.n_in = 1;
            dims.hidden = hv - 1;
            dims.labels = o;
            std::vector<T> packed(Backend::packed_elements(dims, n) + 1);
            const biaffine::const_row_map<T> vm(va.data(), static_cast<Eigen::Index>(n), static_cast<Eigen::Index>(hv),
                                                Eigen::OuterStride<>(static_cast<Eigen::Index>(ldv)));
            Backend::split_scores(vm, tr.data(), o, biaffine::score_view<T>{s.data(), n, o, static_cast<std::ptrdiff_t>(lds)},
                                  packed.data());
            double worst = 0.0;
            for (std::size_t m = 0; m < n; ++m) {
                for (std::size_t r = 0; r < n * o; ++r) {
                    double want = 0.0;
                    for (std::size_t j = 0; j < hv; ++j) want += static_cast<double>(va[m * ldv + j]) * tr[r * hv + j];
                    worst = std::max(worst, std::abs(s[m * lds + r] - want) / (1.0 + std::abs(want)));
                }
                for (std::size_t r = n * o; r < lds; ++r) REQUIRE(s[m * lds + r] == sentinel);
            }
            REQUIRE(worst < (sizeof(T) == 8 ? 1e-12 : 1e-5));
        }
    }
}

// The scratch split_scores_backward may use: score_backward_elements where
// the backend has it (the AVX2 backend; the guard past it then checks that
// bound itself), else its whole training block.
template <class Backend, class = void>
struct has_score_backward_elements : std::false_type {
};
template <class Backend>
struct has_score_backward_elements<
    Backend, std::void_t<decltype(Backend::score_backward_elements(std::declval<scorer_dims>(), std::size_t()))>>
    : std::true_type {
};
template <class Backend>
std::size_t score_backward_scratch(const scorer_dims& dims, std::size_t n)
{
    if constexpr (has_score_backward_elements<Backend>::value) {
        return Backend::score_backward_elements(dims, n);
    } else {
        return Backend::train_packed_elements(dims, n, n);
    }
}

// split_scores_backward against double loops: dVa = dS Tr and dTr = dS^T Va
// (both overwritten: they start as garbage), with strides wider than the rows
// of Va, dS and dVa. Sizes on every path (row_combos, Eigen's GEMM, the
// kernel's; on AVX-512 targets zmm_combos takes the sizes row_combos would,
// and test_backend_no_zmm_small runs this without it), hv one past a multiple of 16 (its last column apart), not, and
// below 16; the backend's scratch sized by score_backward_scratch, guarded
// past its end.
template <class Backend, class T>
void check_split_scores_backward(const char* name)
{
    std::mt19937 gen(9);
    std::uniform_real_distribution<double> d(-1.0, 1.0);
    const T sentinel = T(-333);
    const std::pair<std::size_t, std::size_t> hv_labels[] = {{129, 1}, {129, 4}, {129, 50}, {100, 1},
                                                             {100, 50}, {17, 3},  {9, 4}};
    for (const auto& [hv, o] : hv_labels) {
        for (std::size_t n : {std::size_t(0), std::size_t(5), std::size_t(12), std::size_t(13), std::size_t(18),
                              std::size_t(31), std::size_t(33), std::size_t(51), std::size_t(100)}) {
            INFO(name << ": hv " << hv << " labels " << o << " n " << n);
            scorer_dims dims;
            dims.n_in = 1;
            dims.hidden = hv - 1;
            dims.labels = o;
            const std::size_t n_packed = score_backward_scratch<Backend>(dims, n);
            std::vector<T> packed(n_packed + 16, sentinel);
            const std::size_t no = n * o, ldv = hv + 2, lds = no + 3, ldd = hv + 1;
            std::vector<T> va(n * ldv), tr(no * hv), ds(n * lds);
            for (auto* p : {&va, &tr, &ds}) {
                for (T& x : *p) x = static_cast<T>(d(gen));
            }
            std::vector<T> dva(n * ldd, sentinel), dt(no * hv, T(1e6));
            const auto rows = static_cast<Eigen::Index>(n), cols = static_cast<Eigen::Index>(hv);
            Backend::split_scores_backward(
                biaffine::const_row_map<T>(va.data(), rows, cols, Eigen::OuterStride<>(static_cast<Eigen::Index>(ldv))),
                tr.data(), o, biaffine::score_view<const T>{ds.data(), n, o, static_cast<std::ptrdiff_t>(lds)},
                biaffine::row_map<T>(dva.data(), rows, cols, Eigen::OuterStride<>(static_cast<Eigen::Index>(ldd))),
                dt.data(), packed.data());
            for (std::size_t i = n_packed; i < packed.size(); ++i) REQUIRE(packed[i] == sentinel);
            // The error of a sum of K products in T is at most K eps times
            // the sum of their magnitudes (the standard bound): `error`
            // measures got - sum_k a[k * sa] b[k * sb] in units of that.
            const double eps = std::numeric_limits<T>::epsilon();
            const auto error = [eps](T got, const T* a, std::size_t sa, const T* b, std::size_t sb, std::size_t K) {
                double want = 0.0, mag = 0.0;
                for (std::size_t k = 0; k < K; ++k) {
                    const double p = static_cast<double>(a[k * sa]) * b[k * sb];
                    want += p;
                    mag += std::abs(p);
                }
                return std::abs(got - want) / (static_cast<double>(K) * eps * mag + 1e-300);
            };
            double worst_dva = 0.0, worst_dt = 0.0;
            for (std::size_t m = 0; m < n; ++m) {
                for (std::size_t j = 0; j < hv; ++j)
                    worst_dva = std::max(worst_dva, error(dva[m * ldd + j], &ds[m * lds], 1, &tr[j], hv, no));
                REQUIRE(dva[m * ldd + hv] == sentinel);
            }
            for (std::size_t r = 0; r < no; ++r) {
                for (std::size_t j = 0; j < hv; ++j)
                    worst_dt = std::max(worst_dt, error(dt[r * hv + j], &ds[r], lds, &va[j], ldv, n));
            }
            CHECK(worst_dva <= 1.0);
            CHECK(worst_dt <= 1.0);
        }
    }
}

template <class Backend, class T>
void check_relu_backward(const char* name)
{
    const T nan = std::numeric_limits<T>::quiet_NaN(), inf = std::numeric_limits<T>::infinity();
    std::mt19937 gen(3);
    std::uniform_real_distribution<double> d(-1.0, 1.0);
    for (std::size_t h : {1u, 7u, 8u, 9u, 17u, 40u}) {
        INFO(name << ": h " << h);
        scorer_dims dims;
        dims.hidden = h;
        const std::size_t N = 3, width = h + 1;  // rows carry the bias column, untouched
        std::vector<T> a(N * width), dz(N * width), db(h);
        for (T& x : a) x = static_cast<T>(d(gen));
        for (T& x : dz) x = static_cast<T>(d(gen));
        for (T& x : db) x = static_cast<T>(d(gen));
        a[0] = T(0);  // a dead unit passes nothing, even a NaN or infinite gradient
        dz[0] = nan;
        if (h > 3) {
            a[width + 2] = T(-1);
            dz[width + 2] = inf;
            a[2 * width + 3] = nan;  // a NaN activation compares false: dead
        }
        const std::vector<T> dz0 = dz, db0 = db;
        const T scale = T(1.25);
        Backend::relu_backward(dims, a.data(), width, N, scale, dz.data(), db.data());
        std::vector<T> want_db = db0;
        for (std::size_t r = 0; r < N; ++r) {
            for (std::size_t j = 0; j < h; ++j) {
                const T want = a[r * width + j] > T(0) ? dz0[r * width + j] * scale : T(0);
                REQUIRE(std::memcmp(&dz[r * width + j], &want, sizeof(T)) == 0);
                want_db[j] += want;
            }
            REQUIRE(std::memcmp(&dz[r * width + h], &dz0[r * width + h], sizeof(T)) == 0);  // bias column
        }
        for (std::size_t j = 0; j < h; ++j) REQUIRE(db[j] == want_db[j]);
    }
}

// A strided split list over a document: X[k] is rows [first_k, first_k + n_k)
// of a [rows, ld] buffer (ld > n_in).
template <class T>
struct split_doc {
    std::vector<T> data;
    std::vector<biaffine::seq_view<const T>> items;
    std::vector<std::size_t> off;
};

// Every batch-wide product of Backend (projections, U.W', its backward, the
// input backward) against double loops, at sizes around the kernels' block
// edges, with and without the bias columns, o = 1 and 3.
template <class Backend, class T>
void check_batch_products(const char* name)
{
    std::mt19937 gen(11);
    std::uniform_real_distribution<double> d(-1.0, 1.0);
    const double tol = sizeof(T) == 8 ? 1e-11 : 2e-5;
    auto rnd = [&](std::size_t n) {
        std::vector<T> v(n);
        for (T& x : v) x = static_cast<T>(d(gen));
        return v;
    };
    auto close = [&](const std::vector<T>& got, const std::vector<double>& want) {
        double worst = 0.0;
        for (std::size_t i = 0; i < want.size(); ++i) {
            worst = std::max(worst, std::abs(static_cast<double>(got[i]) - want[i]) / (1.0 + std::abs(want[i])));
        }
        return worst;
    };
    for (std::size_t n_in : {std::size_t(3), std::size_t(32), std::size_t(33)}) {
        for (std::size_t h : {std::size_t(7), std::size_t(16), std::size_t(40)}) {
            for (std::size_t o : {std::size_t(1), std::size_t(3)}) {
                for (bool bias : {true, false}) {
                    scorer_dims dims;
                    dims.n_in = n_in;
                    dims.hidden = h;
                    dims.labels = o;
                    dims.bias_u = bias;
                    dims.bias_v = !bias || o == 1;  // mixed flags too
                    const std::size_t hu = dims.hu(), hv = dims.hv();
                    // Splits of 0, 5, 17, 1, 260, 0 and 30 rows (N = 313: two
                    // chunks of 157 and 156 rows of the AVX2 backend's weight
                    // gradients),
                    // a strided document; every second split takes every
                    // second column.
                    const std::vector<std::size_t> lens{0, 5, 17, 1, 260, 0, 30};
                    split_doc<T> X;
                    const std::size_t ld = 2 * n_in + 2, N = 313;
                    X.data = rnd(N * ld);
                    std::size_t row = 0;
                    for (std::size_t n : lens) {
                        const std::ptrdiff_t col_stride = X.items.size() % 2 == 1 ? 2 : 1;
                        X.items.push_back(
                            {X.data.data() + row * ld, n, n_in, static_cast<std::ptrdiff_t>(ld), col_stride});
                        X.off.push_back(row);
                        row += n;
                    }
                    X.off.push_back(row);  // count + 1 offsets, as the scorer passes them
                    INFO(name << ": n_in " << n_in << " h " << h << " o " << o << " bias_u " << dims.bias_u
                              << " bias_v " << dims.bias_v);
                    const std::vector<T> wh = rnd(h * n_in), wd = rnd(h * n_in), bh = rnd(h), bd = rnd(h),
                                         w = rnd(o * hu * hv);
                    const biaffine::detail::weights_ref<T> wr{wh.data(), bh.data(), wd.data(), bd.data(), w.data()};
                    std::vector<T> packed(std::max(Backend::packed_elements(dims, 260),
                                                   Backend::train_packed_elements(dims, 260, N)) + 1);
                    std::vector<T> xp(N * n_in);
                    biaffine::detail::gather_rows(X.items, X.off.data(), n_in, xp.data());

                    // Projections: relu(X W^T + b), the ones column.
                    std::vector<T> u(N * hu), v(N * hv);
                    Backend::projections(dims, wr, xp.data(), N, u.data(), v.data(), packed.data());
                    std::vector<double> want_u(N * hu), want_v(N * hv);
                    for (std::size_t r = 0; r < N; ++r) {
                        for (std::size_t j = 0; j < h; ++j) {
                            double zu = bh[j], zv = bd[j];
                            for (std::size_t i = 0; i < n_in; ++i) {
                                zu += static_cast<double>(xp[r * n_in + i]) * wh[j * n_in + i];
                                zv += static_cast<double>(xp[r * n_in + i]) * wd[j * n_in + i];
                            }
                            want_u[r * hu + j] = std::max(zu, 0.0);
                            want_v[r * hv + j] = std::max(zv, 0.0);
                        }
                        if (dims.bias_u) want_u[r * hu + h] = 1.0;
                        if (dims.bias_v) want_v[r * hv + h] = 1.0;
                    }
                    CHECK(close(u, want_u) < tol);
                    CHECK(close(v, want_v) < tol);

                    // T = U W' ([N, o * hv]).
                    std::vector<T> t(N * o * hv);
                    Backend::bilinear_left(dims, w.data(), u.data(), N, t.data(), packed.data());
                    std::vector<double> want_t(N * o * hv, 0.0);
                    for (std::size_t r = 0; r < N; ++r)
                        for (std::size_t k = 0; k < o; ++k)
                            for (std::size_t c = 0; c < hv; ++c)
                                for (std::size_t a = 0; a < hu; ++a)
                                    want_t[r * o * hv + k * hv + c] +=
                                        static_cast<double>(u[r * hu + a]) * w[(k * hu + a) * hv + c];
                    CHECK(close(t, want_t) < tol);

                    // dU = dT W'^T (overwritten), dW += U^T dT (accumulated).
                    const std::vector<T> dt = rnd(N * o * hv), dw0 = rnd(o * hu * hv);
                    std::vector<T> du = rnd(N * hu), dw = dw0;
                    Backend::bilinear_left_backward(dims, w.data(), u.data(), N, dt.data(), du.data(), dw.data(),
                                                    packed.data());
                    std::vector<double> want_du(N * hu, 0.0), want_dw(dw0.begin(), dw0.end());
                    for (std::size_t r = 0; r < N; ++r)
                        for (std::size_t k = 0; k < o; ++k)
                            for (std::size_t a = 0; a < hu; ++a)
                                for (std::size_t c = 0; c < hv; ++c) {
                                    const double g = dt[r * o * hv + k * hv + c];
                                    want_du[r * hu + a] += g * w[(k * hu + a) * hv + c];
                                    want_dw[(k * hu + a) * hv + c] += static_cast<double>(u[r * hu + a]) * g;
                                }
                    // du's bias column (U's ones) is never read: backends may skip it.
                    for (std::size_t r = 0; dims.bias_u && r < N; ++r) want_du[r * hu + h] = du[r * hu + h];
                    CHECK(close(du, want_du) < tol);
                    CHECK(close(dw, want_dw) < tol);

                    // Through relu at U, V (scaled like dropout's kept units),
                    // then dbh, dbd += the sums, dWh += dZu^T X, dWd += dZv^T
                    // X, dX = dZu Wh + dZv Wd into each split's slot: rows of
                    // a wider buffer (dense columns) or every second column.
                    // Half of U's units are dead (relu), so the mask matters.
                    const T scale = T(1.25);
                    const std::vector<T> dzu0 = rnd(N * hu), dzv0 = rnd(N * hv), gwh0 = rnd(h * n_in),
                                         gwd0 = rnd(h * n_in), gbh0 = rnd(h), gbd0 = rnd(h);
                    std::vector<T> dzu = dzu0, dzv = dzv0, gwh = gwh0, gwd = gwd0, gbh = gbh0, gbd = gbd0, gw(1),
                                   scratch_x(Backend::reads_items ? 0 : N * n_in);
                    const biaffine::detail::grads_ref<T> gr{gwh.data(), gbh.data(), gwd.data(), gbd.data(), gw.data()};
                    // With n_in = 32 the dense slots' rows are 64-byte aligned
                    // (a multiple of 16 floats apart in a 64-byte aligned
                    // block): the AVX2 backend streams dX there.
                    const std::size_t slot_ld = 2 * n_in + (n_in % 16 == 0 ? 16 : 1);
                    const T sentinel = T(-7.25);
                    biaffine::tracked_vector<T> slots_buf(N * slot_ld, sentinel);
                    std::vector<biaffine::seq_view<T>> slots;
                    for (std::size_t k = 0; k < lens.size(); ++k) {
                        const bool strided = k % 2 == 1;
                        slots.push_back({slots_buf.data() + X.off[k] * slot_ld, lens[k], n_in,
                                         static_cast<std::ptrdiff_t>(slot_ld), strided ? 2 : 1});
                    }
                    const biaffine::detail::relu_ref<T> act{u.data(), v.data(), scale};
                    Backend::input_backward(dims, wr, gr, X.items, X.off.data(), N, act, dzu.data(), dzv.data(),
                                            scratch_x.data(), packed.data(),
                                            biaffine::span<const biaffine::seq_view<T>>(slots.data(), slots.size()));
                    std::vector<T> dx(N * n_in);
                    for (std::size_t k = 0; k < lens.size(); ++k)
                        for (std::size_t r = 0; r < lens[k]; ++r)
                            for (std::size_t i = 0; i < n_in; ++i) dx[(X.off[k] + r) * n_in + i] = slots[k](r, i);
                    // Nothing outside the slots' elements is written.
                    std::size_t untouched = 0, outside = 0;
                    for (std::size_t k = 0; k < lens.size(); ++k)
                        for (std::size_t r = 0; r < lens[k]; ++r)
                            for (std::size_t c = 0; c < slot_ld; ++c) {
                                const bool inside = slots[k].col_stride == 1 ? c < n_in : c % 2 == 0 && c / 2 < n_in;
                                if (inside) continue;
                                ++outside;
                                if (slots_buf[(X.off[k] + r) * slot_ld + c] == sentinel) ++untouched;
                            }
                    CHECK(untouched == outside);
                    std::vector<double> want_gwh(gwh0.begin(), gwh0.end()), want_gwd(gwd0.begin(), gwd0.end()),
                        want_gbh(gbh0.begin(), gbh0.end()), want_gbd(gbd0.begin(), gbd0.end()), want_dx(N * n_in, 0.0);
                    std::size_t dead = 0;
                    for (std::size_t r = 0; r < N; ++r)
                        for (std::size_t j = 0; j < h; ++j) {
                            const double gu = dzu0[r * hu + j], gv = dzv0[r * hv + j];
                            const double zu = u[r * hu + j] > T(0) ? gu * scale : 0.0;
                            const double zv = v[r * hv + j] > T(0) ? gv * scale : 0.0;
                            dead += u[r * hu + j] > T(0) ? 0 : 1;
                            want_gbh[j] += zu;
                            want_gbd[j] += zv;
                            for (std::size_t i = 0; i < n_in; ++i) {
                                const double x = xp[r * n_in + i];
                                want_gwh[j * n_in + i] += zu * x;
                                want_gwd[j * n_in + i] += zv * x;
                                want_dx[r * n_in + i] += zu * wh[j * n_in + i] + zv * wd[j * n_in + i];
                            }
                        }
                    REQUIRE(dead > 0);
                    REQUIRE(dead < N * h);
                    CHECK(close(gbh, want_gbh) < tol);
                    CHECK(close(gbd, want_gbd) < tol);
                    CHECK(close(gwh, want_gwh) < tol);
                    CHECK(close(gwd, want_gwd) < tol);
                    CHECK(close(dx, want_dx) < tol);
                }
            }
        }
    }
}

// bilinear_scores: T = U W' a group of splits at a time (or the whole batch),
// each(k, ...) once per split in order, with its rows of T, against double
// loops. The T buffer is the size the scorer carves (t_group_rows unless
// every row is kept) and `packed` packed_elements(max_len), each followed by
// sentinels that must survive. Splits of 0-90 rows, with 50 labels longer
// than the avx2 backend's group (the caller picks the hidden size that makes
// the group 41-89 rows), shorter ones that share a group, and empty ones first, between and last.
template <class Backend, class T>
void check_bilinear_scores(const char* name, std::size_t hidden = 32)
{
    std::mt19937 gen(31);
    std::uniform_real_distribution<double> d(-1.0, 1.0);
    const std::vector<std::size_t> lens{0, 7, 30, 0, 3, 25, 12, 90, 40, 1, 0};
    std::vector<std::size_t> off{0};
    for (std::size_t n : lens) off.push_back(off.back() + n);
    const std::size_t count = lens.size(), N = off.back(), max_n = 90;
    const T sentinel = T(-555);
    const std::size_t pad = 8;
    for (std::size_t o : {std::size_t(1), std::size_t(20), std::size_t(50)}) {
        scorer_dims dims;
        dims.n_in = 1;
        dims.hidden = hidden;
        dims.labels = o;
        const std::size_t hu = dims.hu(), hv = dims.hv(), ldt = o * hv;
        // Relative error of float: of the order of its epsilon per term of
        // the two sums (hu, then hv terms), at least 2e-5: 4e-5 at 128
        // (which the 2 MiB groups of AVX-512 targets need, see below).
        const double tol = sizeof(T) == 8 ? 1e-11 : std::max(2e-5, 1.5e-7 * static_cast<double>(hu + hv));
        std::vector<T> u(N * hu), v(N * hv), w(o * hu * hv);
        for (auto* p : {&u, &v, &w}) {
            for (T& x : *p) x = static_cast<T>(d(gen));
        }
        std::vector<double> want_t(N * ldt, 0.0);
        for (std::size_t r = 0; r < N; ++r)
            for (std::size_t k = 0; k < o; ++k)
                for (std::size_t a = 0; a < hu; ++a)
                    for (std::size_t c = 0; c < hv; ++c)
                        want_t[r * ldt + k * hv + c] += static_cast<double>(u[r * hu + a]) * w[(k * hu + a) * hv + c];
        for (bool keep_t : {true, false}) {
            INFO(name << ": labels " << o << (keep_t ? ", T kept" : ", T per group"));
            const std::size_t t_rows =
                keep_t ? N : biaffine::detail::t_group_rows(Backend::score_group_rows(dims), N, max_n);
            std::vector<T> t(t_rows * ldt + pad, sentinel);
            const std::size_t n_packed = Backend::packed_elements(dims, max_n);
            std::vector<T> packed(n_packed + pad, sentinel);
            std::size_t next = 0;
            double worst = 0.0;
            Backend::bilinear_scores(
                dims, w.data(), u.data(), off.data(), count, t.data(), keep_t, packed.data(),
                [&](std::size_t k, const T* tr, T* rest) {
                    REQUIRE(k == next++);
                    const std::size_t n = lens[k];
                    if (n == 0) return;
                    REQUIRE(tr >= t.data());
                    REQUIRE(tr + n * ldt <= t.data() + t_rows * ldt);
                    REQUIRE(rest >= packed.data());
                    REQUIRE(rest <= packed.data() + n_packed);
                    std::vector<T> s(n * n * o);
                    const biaffine::const_row_map<T> va(v.data() + off[k] * hv, static_cast<Eigen::Index>(n),
                                                        static_cast<Eigen::Index>(hv),
                                                        Eigen::OuterStride<>(static_cast<Eigen::Index>(hv)));
                    Backend::split_scores(va, tr, o, biaffine::score_view<T>{s.data(), n, o,
                                                                             static_cast<std::ptrdiff_t>(n * o)},
                                          rest);
                    for (std::size_t m = 0; m < n; ++m)
                        for (std::size_t l = 0; l < n; ++l)
                            for (std::size_t c = 0; c < o; ++c) {
                                double want = 0.0;
                                for (std::size_t j = 0; j < hv; ++j)
                                    want += v[(off[k] + m) * hv + j] * want_t[(off[k] + l) * ldt + c * hv + j];
                                const double got = s[(m * n + l) * o + c];
                                worst = std::max(worst, std::abs(got - want) / (1.0 + std::abs(want)));
                            }
                });
            CHECK(next == count);
            CHECK(worst < tol);
            for (std::size_t i = 0; i < pad; ++i) {
                CHECK(t[t_rows * ldt + i] == sentinel);
                CHECK(packed[n_packed + i] == sentinel);
            }
            if (keep_t) {  // every row of T stays for backward
                double worst_t = 0.0;
                for (std::size_t i = 0; i < N * ldt; ++i)
                    worst_t = std::max(worst_t, std::abs(t[i] - want_t[i]) / (1.0 + std::abs(want_t[i])));
                CHECK(worst_t < tol);
            }
        }
    }
}

}  // namespace

TEST_CASE("every backend's bilinear_scores computes T by groups and scores each split once, in order", "[backend]")
{
    check_bilinear_scores<biaffine::detail::eigen_backend<double>, double>("eigen double");
    check_bilinear_scores<biaffine::detail::eigen_backend<float>, float>("eigen float");
#if defined(__AVX2__) && defined(__FMA__)
    using backend = biaffine::detail::avx2_backend;
    // The premise of the sizes above: with 50 labels the 90-row split is
    // longer than a group and several short ones share one. The hidden size
    // that gives such groups depends on BIAFFINE_AVX2_SCORE_GROUP_BYTES.
    std::size_t hidden = 0;
    for (std::size_t h : {16, 32, 64, 128}) {
        scorer_dims dims;
        dims.n_in = 1;
        dims.hidden = h;
        dims.labels = 50;
        if (backend::score_group_rows(dims) > 40 && backend::score_group_rows(dims) < 90) hidden = h;
    }
    INFO("BIAFFINE_AVX2_SCORE_GROUP_BYTES = " << BIAFFINE_AVX2_SCORE_GROUP_BYTES);
    REQUIRE(hidden != 0);
    check_bilinear_scores<backend, float>("avx2", hidden);
#endif
#if defined(BIAFFINE_USE_BLAS)
    check_bilinear_scores<biaffine::detail::blas_backend<double>, double>("blas double");
    check_bilinear_scores<biaffine::detail::blas_backend<float>, float>("blas float");
#endif
}

TEST_CASE("every backend's batch-wide products equal double loops", "[backend]")
{
    check_batch_products<biaffine::detail::eigen_backend<double>, double>("eigen double");
    check_batch_products<biaffine::detail::eigen_backend<float>, float>("eigen float");
#if defined(__AVX2__) && defined(__FMA__)
    check_batch_products<biaffine::detail::avx2_backend, float>("avx2");
#endif
#if defined(BIAFFINE_USE_BLAS)
    check_batch_products<biaffine::detail::blas_backend<double>, double>("blas double");
    check_batch_products<biaffine::detail::blas_backend<float>, float>("blas float");
    INFO("BLAS: " << biaffine::detail::blas_description());
#else
    WARN("the BLAS backend is not built here (configure with -DBIAFFINE_WITH_BLAS=ON): its products are not tested");
#endif
}

// The contract of detail/compute/interface.hpp, on every backend this build
// has: a missing operation stops the build with its name (the probe in
// tests/protocol/backend_probe.cpp shows the message).
namespace {
// A backend whose kept batch cannot move: it could not go with the backward
// callback, so it is no backend object.
struct kept_in_place : biaffine::detail::host_batch<biaffine::detail::eigen_backend<float>, float> {
    using host_batch::host_batch;
    using held_batch = carved_batch;
    held_batch hold(std::size_t N, std::size_t) const { return carve(N); }
};
}  // namespace

TEST_CASE("every backend meets the backend contract (check_host_ops, check_backend)", "[backend]")
{
    using biaffine::detail::check_backend;
    using biaffine::detail::check_host_ops;
    using biaffine::detail::host_batch;
    static_assert(check_host_ops<biaffine::detail::eigen_backend<double>, double>());
    static_assert(check_host_ops<biaffine::detail::eigen_backend<float>, float>());
    static_assert(check_backend<host_batch<biaffine::detail::eigen_backend<double>, double>, double>());
    static_assert(check_backend<host_batch<biaffine::detail::eigen_backend<float>, float>, float>());
    std::size_t checked = 2;
#if defined(__AVX2__) && defined(__FMA__)
    static_assert(check_host_ops<biaffine::detail::avx2_backend, float>());
    static_assert(check_backend<host_batch<biaffine::detail::avx2_backend, float>, float>());
    ++checked;
#endif
#if defined(BIAFFINE_USE_BLAS)
    static_assert(check_host_ops<biaffine::detail::blas_backend<double>, double>());
    static_assert(check_host_ops<biaffine::detail::blas_backend<float>, float>());
    static_assert(check_backend<host_batch<biaffine::detail::blas_backend<double>, double>, double>());
    static_assert(check_backend<host_batch<biaffine::detail::blas_backend<float>, float>, float>());
    checked += 2;
#endif
    static_assert(check_host_ops<biaffine::detail::compute_backend<float>, float>());
    static_assert(check_host_ops<biaffine::detail::compute_backend<double>, double>());
    static_assert(check_backend<biaffine::detail::scorer_backend<float>, float>());
    static_assert(check_backend<biaffine::detail::scorer_backend<double>, double>());
    // A type with none of the operations is told apart (the detectors can fail).
    REQUIRE_FALSE(biaffine::detail::backend_probe::has_split_scores<int, float>::value);
    REQUIRE(biaffine::detail::backend_probe::has_split_scores<biaffine::detail::eigen_backend<float>, float>::value);
    // The batch level too: the host ops alone are not a backend object.
    REQUIRE_FALSE(
        biaffine::detail::backend_probe::has_batch_score_outputs<biaffine::detail::eigen_backend<float>, float>::value);
    REQUIRE(biaffine::detail::backend_probe::has_batch_score_outputs<host_batch<biaffine::detail::eigen_backend<float>, float>,
                                                                     float>::value);
    // The batch's owners: one that cannot move is refused.
    REQUIRE(biaffine::detail::backend_probe::has_batch_hold<host_batch<biaffine::detail::eigen_backend<float>, float>,
                                                            float>::value);
    REQUIRE_FALSE(biaffine::detail::backend_probe::has_batch_hold<kept_in_place, float>::value);
    REQUIRE(checked >= 2);
}

TEST_CASE("the backend chosen for each scalar type is what the build says", "[backend]")
{
#if defined(BIAFFINE_USE_BLAS)
    REQUIRE(std::strcmp(biaffine::detail::compute_backend<double>::name, "blas") == 0);
    REQUIRE(std::strcmp(biaffine::detail::compute_backend<float>::name, "blas") == 0);
    REQUIRE(BIAFFINE_GEMM_KERNEL == 0);
    return;
#endif
    REQUIRE(std::strcmp(biaffine::detail::compute_backend<double>::name, "eigen") == 0);
    // The rule of backend.hpp, from the target's macros: the kernel on AVX2 +
    // FMA without AVX-512, and with it when BIAFFINE_AVX2_KERNEL_ON_AVX512
    // (the default).
#if defined(__AVX512F__)
    const bool avx512 = true;
#else
    const bool avx512 = false;
#endif
#if defined(__AVX2__) && defined(__FMA__) && !defined(BIAFFINE_NO_GEMM_KERNEL)
    const bool kernel = !avx512 || BIAFFINE_AVX2_KERNEL_ON_AVX512;
#else
    const bool kernel = false;
#endif
    INFO("target: AVX-512 " << avx512 << ", kernel expected " << kernel);
#if defined(BIAFFINE_AVX2_KERNEL_ON_AVX512_DEFAULT)
    // Not overridden: AVX-512 targets run the kernel (measured faster than
    // Eigen on a Xeon and a Zen 4 EPYC; config.hpp).
    REQUIRE(BIAFFINE_AVX2_KERNEL_ON_AVX512 == 1);
#endif
    if (kernel) {
        REQUIRE(BIAFFINE_GEMM_KERNEL == 1);
        REQUIRE(std::strcmp(biaffine::detail::compute_backend<float>::name, "avx2") == 0);
        return;
    }
    WARN("float runs on Eigen in this build (no AVX2/FMA target, an AVX-512 target not tuned for Zen 3 / 4, or BIAFFINE_NO_GEMM_KERNEL)");
    REQUIRE(BIAFFINE_GEMM_KERNEL == 0);
    REQUIRE(std::strcmp(biaffine::detail::compute_backend<float>::name, "eigen") == 0);
}

TEST_CASE("eigen backend: split scores equal a double loop on every path", "[backend]")
{
    // n = 5 takes row_dots (and up to 31 with one label), the rest Eigen's GEMM.
    REQUIRE(biaffine::detail::use_row_dots(5, 4));
    REQUIRE(!biaffine::detail::use_row_dots(13, 4));
    REQUIRE(biaffine::detail::use_row_dots(31, 1));
    REQUIRE(!biaffine::detail::use_row_dots(32, 1));
    check_split_scores<biaffine::detail::eigen_backend<double>, double>("eigen<double>");
    check_split_scores<biaffine::detail::eigen_backend<float>, float>("eigen<float>");
}

TEST_CASE("eigen backend: split score backward equals double loops on every path", "[backend]")
{
    check_split_scores_backward<biaffine::detail::eigen_backend<double>, double>("eigen<double>");
    check_split_scores_backward<biaffine::detail::eigen_backend<float>, float>("eigen<float>");
}

TEST_CASE("eigen backend: relu backward is a select with the bias sums", "[backend]")
{
    check_relu_backward<biaffine::detail::eigen_backend<double>, double>("eigen<double>");
    check_relu_backward<biaffine::detail::eigen_backend<float>, float>("eigen<float>");
}

#if defined(__AVX2__) && defined(__FMA__)

TEST_CASE("avx2 backend: split scores equal a double loop on every path", "[backend]")
{
    using biaffine::detail::kernel_score_rows;
    // Which path each size takes (config.hpp's defaults): the rows of Va
    // through the kernel, the rest by row_dots (all of them at 0 with one
    // label); 0: row_dots or Eigen's GEMM for the whole split.
    REQUIRE(kernel_score_rows(12, 1) == 0);
    REQUIRE(kernel_score_rows(18, 1) == 16);
    REQUIRE(kernel_score_rows(31, 1) == 16);
    REQUIRE(kernel_score_rows(32, 1) == 32);
    REQUIRE(kernel_score_rows(33, 1) == 32);  // 33 of 48 panel columns would be used
    REQUIRE(kernel_score_rows(60, 1) == 60);
    REQUIRE(kernel_score_rows(5, 4) == 0);
    REQUIRE(kernel_score_rows(13, 4) == 13);
    REQUIRE(kernel_score_rows(26, 4) == 26);  // two panels, 26 of 32 columns used
    REQUIRE(kernel_score_rows(64, 4) == 64);
    // 22 of 32 columns (69%), 33 of 48 (69%), 18 of 32 (56%): the kernel
    // from a fill of BIAFFINE_AVX2_SCORES_FILL_MANY percent (55 with the 6 x
    // 32 body, else 70); below it full panels and row_dots for one to four
    // rows left over, or Eigen.
    const bool fills = BIAFFINE_AVX2_SCORES_FILL_MANY <= 68;
    const Eigen::Index dots_tail = BIAFFINE_AVX2_SCORES_DOTS_TAIL >= 2 ? 16 : 0;
    REQUIRE(kernel_score_rows(22, 4) == (fills ? 22 : 0));
    REQUIRE(kernel_score_rows(18, 4) == (BIAFFINE_AVX2_SCORES_FILL_MANY <= 56 ? 18 : dots_tail));
    REQUIRE(kernel_score_rows(17, 4) == (BIAFFINE_AVX2_SCORES_FILL_MANY <= 53 ? 17 : dots_tail));
    REQUIRE(kernel_score_rows(33, 4) == (fills && BIAFFINE_AVX2_SCORES_ODD_PANELS ? 33 : 2 * dots_tail));
    // Three panels (36 or 48 of 48 columns used) on the kernel only where it
    // takes an odd number of them; else Eigen.
    REQUIRE(kernel_score_rows(36, 4) == (BIAFFINE_AVX2_SCORES_ODD_PANELS ? 36 : 0));
    REQUIRE(kernel_score_rows(48, 4) == (BIAFFINE_AVX2_SCORES_ODD_PANELS ? 48 : 0));
    // Before all of that, on AVX-512 targets, short splits take zmm_dots: up
    // to BIAFFINE_AVX512_DOTS_MAX_N tokens or _MAX_ROWS rows of Tr (24 and
    // 47 by default); nowhere else.
    using biaffine::detail::use_zmm_dots;
    const bool zmm = BIAFFINE_DETAIL_ZMM_SMALL;
    const auto dots_n = static_cast<Eigen::Index>(BIAFFINE_AVX512_DOTS_MAX_N);
    const auto dots_rows = static_cast<Eigen::Index>(BIAFFINE_AVX512_DOTS_MAX_ROWS);
    REQUIRE(!use_zmm_dots(0, 1));
    REQUIRE(use_zmm_dots(5, 50) == zmm);
    REQUIRE(use_zmm_dots(dots_n, 50) == zmm);
    REQUIRE(!use_zmm_dots(std::max(dots_n, dots_rows / 2) + 1, 2));
    REQUIRE(use_zmm_dots(dots_rows, 1) == zmm);
    REQUIRE(!use_zmm_dots(std::max(dots_n, dots_rows) + 1, 1));
    // ... and the backend says so where it says what runs each operation.
    const char* ops = biaffine::detail::avx2_backend::operations;
    REQUIRE((std::strstr(ops, "use_zmm_dots") != nullptr) == zmm);
    REQUIRE((std::strstr(ops, "use_zmm_combos") != nullptr) == zmm);
    check_split_scores<biaffine::detail::avx2_backend, float>("avx2");
}

TEST_CASE("avx2 backend: split score backward equals double loops on every path", "[backend]")
{
    // zmm_combos on AVX-512 targets up to BIAFFINE_AVX512_COMBOS_MAX_ROWS
    // rows of Tr (2048 by default: at 50 labels n <= 40; of the sizes
    // below n = 51 and 100 then take the kernel); nowhere else.
    using biaffine::detail::use_zmm_combos;
    const bool zmm = BIAFFINE_DETAIL_ZMM_SMALL;
    const auto combos_rows = static_cast<Eigen::Index>(BIAFFINE_AVX512_COMBOS_MAX_ROWS);
    REQUIRE(!use_zmm_combos(0, 1));
    REQUIRE(use_zmm_combos(5, 1) == zmm);
    REQUIRE(use_zmm_combos(combos_rows / 50, 50) == zmm);
    REQUIRE(!use_zmm_combos(combos_rows / 50 + 1, 50));
    check_split_scores_backward<biaffine::detail::avx2_backend, float>("avx2");
}

TEST_CASE("avx2 backend: chunks of the weight gradients are as even as their count allows", "[backend]")
{
    using chunks = biaffine::detail::avx2_backend::even_chunks;
    REQUIRE(chunks(0, 256).count == 0);
    REQUIRE(chunks(256, 256).count == 1);
    REQUIRE(chunks(257, 256).size(0) == 129);
    REQUIRE(chunks(257, 256).size(1) == 128);
    const chunks c2615(2615, 256);  // 11 chunks: 8 of 238, 3 of 237
    REQUIRE(c2615.count == 11);
    REQUIRE(c2615.size(0) == 238);
    REQUIRE(c2615.size(10) == 237);
    for (std::size_t N : {std::size_t(1), std::size_t(255), std::size_t(313), std::size_t(1999), std::size_t(65537),
                          std::size_t(100000)}) {
        INFO("N " << N);
        const chunks c(N, 256);
        REQUIRE(c.count == (N + 255) / 256);  // no more chunks than needed
        std::size_t total = 0, lo = N, hi = 0;
        for (std::size_t i = 0; i < c.count; ++i) {
            total += c.size(i);
            lo = std::min(lo, c.size(i));
            hi = std::max(hi, c.size(i));
        }
        REQUIRE(total == N);
        REQUIRE(hi <= 256);
        REQUIRE(hi - lo <= 1);
    }
}

TEST_CASE("avx2 backend: dX's copy-out writes each row's floats and nothing past them, aligned or not", "[backend]")
{
    using T = float;
    // Rows 48 floats apart in a 64-byte aligned block (streamed stores where
    // BIAFFINE_AVX2_STREAM_DX is 1), then 45 apart or starting 4 bytes in
    // (copy_rows): each row's 40 floats arrive, nothing past them is written.
    for (const auto& [ld, shift] : {std::pair<std::size_t, std::size_t>{48, 0}, {45, 0}, {48, 1}}) {
        INFO("row stride " << ld << ", shift " << shift);
        const std::size_t rows = 7, cols = 40;
        std::vector<T> src(rows * cols);
        for (std::size_t i = 0; i < src.size(); ++i) src[i] = static_cast<T>(i) * T(0.5) - T(3);
        biaffine::tracked_vector<T> dst(rows * ld + shift, T(-1));
        biaffine::detail::avx2_backend::stream_rows(
            src.data(), biaffine::seq_view<T>{dst.data() + shift, rows, cols, static_cast<std::ptrdiff_t>(ld), 1});
        _mm_sfence();
        for (std::size_t r = 0; r < rows; ++r) {
            for (std::size_t c = 0; c < ld && r * ld + c + shift < dst.size(); ++c) {
                REQUIRE(dst[r * ld + c + shift] == (c < cols ? src[r * cols + c] : T(-1)));
            }
        }
    }
}

TEST_CASE("avx2 backend: the projections read the splits in place, with or without a column stride", "[backend]")
{
    // 150 rows: more than one row block (BIAFFINE_AVX2_ROW_BLOCK), empty
    // splits first, between and last, and splits crossing a block edge.
    using T = float;
    using backend = biaffine::detail::avx2_backend;
    REQUIRE(backend::reads_items);
    std::mt19937 gen(23);
    std::uniform_real_distribution<double> d(-1.0, 1.0);
    const std::vector<std::size_t> lens{0, 50, 0, 97, 3, 0};
    const std::size_t N = 150;
    for (std::size_t n_in : {std::size_t(7), std::size_t(40)}) {
        scorer_dims dims;
        dims.n_in = n_in;
        dims.hidden = 20;
        dims.labels = 1;
        const std::size_t h = dims.hidden, hu = dims.hu(), hv = dims.hv();
        std::vector<T> wh(h * n_in), wd(h * n_in), bh(h), bd(h);
        for (auto* p : {&wh, &wd, &bh, &bd}) {
            for (T& x : *p) x = static_cast<T>(d(gen));
        }
        const biaffine::detail::weights_ref<T> wr{wh.data(), bh.data(), wd.data(), bd.data(), nullptr};
        for (std::ptrdiff_t col_stride : {1, 3}) {
            INFO("n_in " << n_in << ", column stride " << col_stride);
            // Rows n_in * col_stride + 5 apart, so no two splits are adjacent.
            const std::ptrdiff_t ld = static_cast<std::ptrdiff_t>(n_in) * col_stride + 5;
            std::vector<T> mem(N * static_cast<std::size_t>(ld));
            for (T& x : mem) x = static_cast<T>(d(gen));
            std::vector<biaffine::seq_view<const T>> items;
            std::vector<std::size_t> off{0};
            for (std::size_t n : lens) {
                items.push_back({mem.data() + static_cast<std::ptrdiff_t>(off.back()) * ld, n, n_in, ld, col_stride});
                off.push_back(off.back() + n);
            }
            std::vector<T> packed(backend::packed_elements(dims, 97)), u(N * hu), v(N * hv);
            backend::project_items(dims, wr, items, off.data(), N, u.data(), v.data(), packed.data());
            double worst = 0.0;
            for (std::size_t r = 0; r < N; ++r) {
                const T* x = mem.data() + static_cast<std::ptrdiff_t>(r) * ld;
                for (std::size_t j = 0; j < h; ++j) {
                    double zu = bh[j], zv = bd[j];
                    for (std::size_t i = 0; i < n_in; ++i) {
                        const double xi = x[static_cast<std::ptrdiff_t>(i) * col_stride];
                        zu += xi * wh[j * n_in + i];
                        zv += xi * wd[j * n_in + i];
                    }
                    const double wu = std::max(zu, 0.0), wv = std::max(zv, 0.0);
                    worst = std::max({worst, std::abs(u[r * hu + j] - wu) / (1.0 + wu),
                                      std::abs(v[r * hv + j] - wv) / (1.0 + wv)});
                }
                CHECK(u[r * hu + h] == T(1));
                CHECK(v[r * hv + h] == T(1));
            }
            CHECK(worst < 2e-5);
        }
    }
}

TEST_CASE("avx2 backend: relu backward is a select with the bias sums", "[backend]")
{
    check_relu_backward<biaffine::detail::avx2_backend, float>("avx2");
}

#endif
