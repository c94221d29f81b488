// biaffine/detail/decode_common.hpp - pieces shared by the head decoders:
// argument checks, square-matrix adapters, the two arc-weight types and a
// per-thread scratch buffer.
#pragma once

#include "biaffine/abi.hpp"
#include "biaffine/bfloat16.hpp"

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <type_traits>
#include <utility>

#include "biaffine/detail/checked.hpp"
#include "biaffine/errors.hpp"

BIAFFINE_NAMESPACE_BEGIN
namespace detail {

template <class>
inline constexpr bool decode_always_false = false;

/// v[i] = exp(v[i]) for i in [0, len), each as std::exp gives it, down to
/// underflow (0 below about -745). Not Eigen's vectorised exp: Eigen 3.4
/// clamps its argument to about +-709.78, so in SIMD lanes exp(-1e4) comes
/// out as ~1.4e-308 instead of 0, and which entries do depends on the length
/// and the ISA. For the tree solvers a weight's being 0 matters: an arc 1e4
/// nats below its column's best carries no mass, and ~1e-308 instead of 0
/// gave a log Z wrong by 1,378 nats on AVX2 (tests/test_tree_crf.cpp). n^2
/// exps against the solvers' n^3.
inline void exp_in_place_exact(double* v, std::size_t len)
{
    for (std::size_t i = 0; i < len; ++i) v[i] = std::exp(v[i]);
}

template <class V>
inline void check_not_nan(const V& v, std::size_t m, std::size_t l, const char* where)
{
    if constexpr (std::is_floating_point_v<V>) {
        if (std::isnan(v)) {
            throw error(msg(where, ": score is NaN at row (dependent) ", m, ", column (head) ", l));
        }
    }
}

template <class T>
void check_dense_args(const T* data, std::size_t n, std::size_t row_stride, const char* where)
{
    static_assert(std::is_arithmetic_v<T> || std::is_same_v<std::remove_cv_t<T>, bfloat16>,
                  "decode: scores must be arithmetic or biaffine::bfloat16");
    if (n == 0) return;
    if (data == nullptr) {
        throw error(msg(where, ": null score pointer for n = ", n));
    }
    if (row_stride < n) {
        throw shape_error(msg(where, ": row_stride must be >= n: expected at least ", n, ", got ",
                              row_stride));
    }
}

template <class E, class = void>
struct has_shape_member : std::false_type {};
template <class E>
struct has_shape_member<E, std::void_t<decltype(std::declval<const E&>().shape())>>
    : std::true_type {};

template <class E, class = void>
struct has_rows_cols : std::false_type {};
template <class E>
struct has_rows_cols<E, std::void_t<decltype(std::declval<const E&>().rows()),
                                    decltype(std::declval<const E&>().cols())>> : std::true_type {};

/// Calls f(n, get) where get(m, l) reads element (m, l) of a square 2-d
/// xtensor-like (`.shape()` + `e(m, l)`) or Eigen-like (`.rows()`, `.cols()`)
/// matrix, in place (no copy).
template <class E, class F>
auto with_square_matrix(const E& e, const char* where, F&& f)
{
    if constexpr (has_shape_member<E>::value) {
        const auto& sh = e.shape();
        if (sh.size() != 2) {
            throw shape_error(msg(where, ": expected a 2-d [n, n] score matrix, got ", sh.size(),
                                  " dimensions"));
        }
        const auto rows = static_cast<std::size_t>(sh[0]);
        const auto cols = static_cast<std::size_t>(sh[1]);
        if (rows != cols) {
            throw shape_error(msg(where, ": expected a square [n, n] score matrix, got [", rows,
                                  ", ", cols, "]"));
        }
        return f(rows, [&e](std::size_t m, std::size_t l) { return e(m, l); });
    } else if constexpr (has_rows_cols<E>::value) {
        using index = decltype(e.rows());
        const auto rows = static_cast<std::size_t>(e.rows());
        const auto cols = static_cast<std::size_t>(e.cols());
        if (rows != cols) {
            throw shape_error(msg(where, ": expected a square [n, n] score matrix, got [", rows,
                                  ", ", cols, "]"));
        }
        return f(rows, [&e](std::size_t m, std::size_t l) {
            return e(static_cast<index>(m), static_cast<index>(l));
        });
    } else {
        static_assert(decode_always_false<E>,
                      "decode: need a pointer overload, an xtensor-like (.shape()) or an "
                      "Eigen-like (.rows()/.cols()) matrix");
    }
}

/// Uninitialised, grow-only storage of trivially copyable T. The decoders run
/// once per split, thousands of times per document: reusing one buffer per
/// thread keeps allocation out of the per-split cost.
template <class T>
class decode_buffer {
    static_assert(std::is_trivially_copyable_v<T>, "decode_buffer: trivial types only");

public:
    T* get(std::size_t count)
    {
        if (count > capacity_) {
            data_.reset(new T[count]);
            capacity_ = count;
        }
        return data_.get();
    }
    /// Frees the storage when it is larger than `keep` elements, so that one
    /// huge split does not pin its matrices to the thread for good.
    void trim(std::size_t keep)
    {
        if (capacity_ > keep) {
            data_.reset();
            capacity_ = 0;
        }
    }

private:
    std::unique_ptr<T[]> data_;
    std::size_t capacity_ = 0;
};

/// Elements kept per scratch buffer between calls (2 MB of doubles).
inline constexpr std::size_t decode_keep_cells = std::size_t(1) << 18;

/// Arc weight when some score is infinite: (tier, finite sum), compared
/// lexicographically. `tier` adds +1 per +inf and -1 per -inf arc, `s` the
/// finite scores. Only matrices holding an infinity pay for this type; all
/// others run the same algorithm on plain doubles.
struct tiered_weight {
    double s;
    std::int64_t tier;
};

inline bool weight_less(double a, double b) { return a < b; }
inline double weight_sub(double a, double b) { return a - b; }
inline double weight_add(double a, double b) { return a + b; }

inline bool weight_less(const tiered_weight& a, const tiered_weight& b)
{
    if (a.tier != b.tier) return a.tier < b.tier;
    return a.s < b.s;
}
inline tiered_weight weight_sub(const tiered_weight& a, const tiered_weight& b)
{
    return {a.s - b.s, a.tier - b.tier};
}
inline tiered_weight weight_add(const tiered_weight& a, const tiered_weight& b)
{
    return {a.s + b.s, a.tier + b.tier};
}

/// A weight below every real arc, for self-loops and merged-away slots. For
/// doubles -inf (the double path never holds a real infinity); for tiers a
/// tier far below any reachable sum (|tier| <= n^2 after all reductions), so
/// subtracting from it never overflows and never makes it competitive.
template <class W>
W weight_excluded();
template <>
inline double weight_excluded<double>()
{
    return -std::numeric_limits<double>::infinity();
}
template <>
inline tiered_weight weight_excluded<tiered_weight>()
{
    return {0.0, std::numeric_limits<std::int64_t>::min() / 4};
}

inline double weight_zero(double) { return 0.0; }
inline tiered_weight weight_zero(tiered_weight) { return {0.0, 0}; }

/// Score -> weight; `V` arithmetic and not NaN.
template <class W, class V>
inline W to_weight(V v)
{
    if constexpr (std::is_same_v<W, double>) {
        return static_cast<double>(v);
    } else {
        const double d = static_cast<double>(v);
        if (std::isinf(d)) return {0.0, d > 0 ? 1 : -1};
        return {d, 0};
    }
}

}  // namespace detail
BIAFFINE_NAMESPACE_END
