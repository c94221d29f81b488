// biaffine/tensor.hpp - containers and non-owning views the layers pass around.
//
// Owning arrays are xtensor containers over the tracking allocator, so every
// byte the library allocates is counted. Inputs are taken as views (pointer,
// shape, strides) of the caller's xtensor arrays or Eigen matrices: no copy of
// documents is ever made to hand a split to a layer.
#pragma once

#include "biaffine/abi.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "biaffine/detail/eigen.hpp"
#include <xtensor/xarray.hpp>
#include <xtensor/xtensor.hpp>

#include "biaffine/errors.hpp"
#include "biaffine/memory.hpp"

BIAFFINE_NAMESPACE_BEGIN

/// Owning N-d array on the tracked heap (work category), row-major.
template <class T, std::size_t N>
using tensor = xt::xtensor<T, N, xt::layout_type::row_major, tracking_allocator<T>>;

/// One score tensor handed to the caller: `[n, n]` when the scorer has one
/// label, `[n, n, o]` otherwise (rows dependents, columns heads, labels last).
/// Counted in the tracker's output category.
template <class T>
using score_tensor = xt::xarray<T, xt::layout_type::row_major, tracking_allocator<T, output_tag>>;

/// A std::vector on the tracked heap (bookkeeping, lists of outputs).
template <class T, class Tag = work_tag>
using tracked_vector = std::vector<T, tracking_allocator<T, Tag>>;

/// One score tensor per split, in input order; the list itself counts as output.
template <class T>
using score_list = tracked_vector<score_tensor<T>, output_tag>;

/// A padded batch of scores `[b, L, L]` or `[b, L, L, o]` (work category: an
/// intermediate of the reference-compatible path).
template <class T>
using score_array = xt::xarray<T, xt::layout_type::row_major, tracking_allocator<T>>;

/// A non-owning contiguous range (C++17 has no std::span).
template <class T>
class span {
public:
    /// Empty.
    span() = default;
    /// `size` elements from `data`.
    span(T* data, std::size_t size) : data_(data), size_(size) {}
    // From any contiguous container (std::vector, tracked_vector, ...).
    template <class C, class = decltype(std::declval<C&>().data()),
              class = std::enable_if_t<!std::is_same<std::decay_t<C>, span>::value>>
    span(C&& c) : data_(c.data()), size_(c.size())
    {
    }
    T* data() const noexcept { return data_; }                   ///< first element
    std::size_t size() const noexcept { return size_; }          ///< element count
    bool empty() const noexcept { return size_ == 0; }           ///< size() == 0
    T& operator[](std::size_t i) const noexcept { return data_[i]; } ///< element i, unchecked
    T* begin() const noexcept { return data_; }                  ///< iteration
    T* end() const noexcept { return data_ + size_; }            ///< iteration

private:
    T* data_ = nullptr;
    std::size_t size_ = 0;
};

/// Row-major `[rows, cols]` Eigen matrix, the kernels' layout.
template <class T>
using row_matrix = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
/// Mutable map of a row-major `[rows, cols]` block with a row stride.
template <class T>
using row_map = Eigen::Map<row_matrix<T>, Eigen::Unaligned, Eigen::OuterStride<>>;
/// Read-only map of a row-major `[rows, cols]` block with a row stride.
template <class T>
using const_row_map = Eigen::Map<const row_matrix<T>, Eigen::Unaligned, Eigen::OuterStride<>>;

/// Non-owning view of a `[rows, cols]` matrix with arbitrary strides (in
/// elements). A split is a view into its document; a row-major document's
/// splits are contiguous, a column-major Eigen document's are not, and both
/// work.
template <class T>
struct seq_view {
    T* data = nullptr;             ///< element (0, 0)
    std::size_t rows = 0;          ///< tokens
    std::size_t cols = 0;          ///< features (n_in)
    std::ptrdiff_t row_stride = 0; ///< elements between rows
    std::ptrdiff_t col_stride = 1; ///< elements between columns

    /// Element (r, c).
    T& operator()(std::size_t r, std::size_t c) const
    {
        return data[static_cast<std::ptrdiff_t>(r) * row_stride + static_cast<std::ptrdiff_t>(c) * col_stride];
    }
    /// Rows [first, first + count) as a view.
    seq_view rows_view(std::size_t first, std::size_t count) const
    {
        return {data + static_cast<std::ptrdiff_t>(first) * row_stride, count, cols, row_stride, col_stride};
    }
    /// An Eigen map with the same strides (no copy).
    Eigen::Map<std::conditional_t<std::is_const<T>::value, const row_matrix<std::remove_const_t<T>>,
                                  row_matrix<T>>,
               Eigen::Unaligned, Eigen::Stride<Eigen::Dynamic, Eigen::Dynamic>>
    map() const
    {
        using M = std::conditional_t<std::is_const<T>::value, const row_matrix<std::remove_const_t<T>>,
                                     row_matrix<T>>;
        // An empty view may carry a null pointer; Eigen accepts that for size 0.
        return Eigen::Map<M, Eigen::Unaligned, Eigen::Stride<Eigen::Dynamic, Eigen::Dynamic>>(
            data, static_cast<Eigen::Index>(rows), static_cast<Eigen::Index>(cols),
            Eigen::Stride<Eigen::Dynamic, Eigen::Dynamic>(row_stride, col_stride));
    }
};

/// Non-owning view of one split's scores: `[n, n, o]` with row stride in
/// elements (`n * o` when dense, `L * o` inside a padded batch).
template <class T>
struct score_view {
    T* data = nullptr;             ///< score of (dependent 0, head 0, label 0)
    std::size_t n = 0;             ///< tokens of the split
    std::size_t labels = 1;        ///< o
    std::ptrdiff_t row_stride = 0; ///< elements between dependents' rows

    /// `[n, n * o]`: row m holds the scores of dependent m, heads then labels.
    auto map() const
    {
        using M = std::conditional_t<std::is_const<T>::value, const row_matrix<std::remove_const_t<T>>,
                                     row_matrix<T>>;
        return Eigen::Map<M, Eigen::Unaligned, Eigen::OuterStride<>>(
            data, static_cast<Eigen::Index>(n), static_cast<Eigen::Index>(n * labels),
            Eigen::OuterStride<>(row_stride));
    }
    /// Score of dependent m, head l, label o.
    T& operator()(std::size_t m, std::size_t l, std::size_t o = 0) const
    {
        return data[static_cast<std::ptrdiff_t>(m) * row_stride + static_cast<std::ptrdiff_t>(l * labels + o)];
    }
};

namespace detail {

template <class E, class = void>
struct is_eigen : std::false_type {};
template <class E>
struct is_eigen<E, std::void_t<decltype(std::declval<const E&>().rowStride()),
                               decltype(std::declval<const E&>().colStride())>> : std::true_type {};

/// `[rows, cols]` row-major block at `p` with rows `cols` apart, as a mutable
/// Eigen map (no copy): the layout of every packed buffer of the library.
template <class T>
row_map<T> row_block(T* p, std::size_t rows, std::size_t cols)
{
    return row_map<T>(p, static_cast<Eigen::Index>(rows), static_cast<Eigen::Index>(cols),
                      Eigen::OuterStride<>(static_cast<Eigen::Index>(cols)));
}
/// Read-only row_block.
template <class T>
const_row_map<T> const_row_block(const T* p, std::size_t rows, std::size_t cols)
{
    return const_row_map<T>(p, static_cast<Eigen::Index>(rows), static_cast<Eigen::Index>(cols),
                            Eigen::OuterStride<>(static_cast<Eigen::Index>(cols)));
}

/// The same `[rows, cols]` view, read-only (any type with seq_view's members).
template <class V>
auto read_only(const V& v)
{
    using T = std::remove_const_t<std::remove_pointer_t<decltype(v.data)>>;
    return seq_view<const T>{v.data, v.rows, v.cols, v.row_stride, v.col_stride};
}

/// dst `[v.rows, v.cols]` (dense rows) = v. Rows with unit column stride
/// are copied as rows (one copy when the view is dense): Eigen's map with a
/// run-time inner stride copies element by element.
template <class T, class U>
void copy_rows(const seq_view<U>& v, T* dst)
{
    const std::size_t rows = v.rows, cols = v.cols;
    if (rows == 0 || cols == 0) return;
    if (v.col_stride != 1) {
        row_block(dst, rows, cols) = v.map();
    } else if (v.row_stride == static_cast<std::ptrdiff_t>(cols)) {
        std::copy_n(v.data, rows * cols, dst);
    } else {
        for (std::size_t r = 0; r < rows; ++r) {
            std::copy_n(v.data + static_cast<std::ptrdiff_t>(r) * v.row_stride, cols, dst + r * cols);
        }
    }
}

/// v = src `[v.rows, v.cols]` (dense rows); the inverse of copy_rows.
template <class T, class U>
void copy_rows(const T* src, const seq_view<U>& v)
{
    const std::size_t rows = v.rows, cols = v.cols;
    if (rows == 0 || cols == 0) return;
    if (v.col_stride != 1) {
        v.map() = const_row_block(src, rows, cols);
    } else if (v.row_stride == static_cast<std::ptrdiff_t>(cols)) {
        std::copy_n(src, rows * cols, v.data);
    } else {
        for (std::size_t r = 0; r < rows; ++r) {
            std::copy_n(src + r * cols, cols, v.data + static_cast<std::ptrdiff_t>(r) * v.row_stride);
        }
    }
}

}  // namespace detail

/// A `[rows, cols]` view of an Eigen dense object (any storage order, maps
/// included) or of a 2-d xtensor container / adaptor. No copy.
template <class E>
auto as_view(E& m)
{
    using value_t = std::remove_reference_t<decltype(*m.data())>;
    seq_view<value_t> v;
    v.data = m.data();
    if constexpr (detail::is_eigen<std::remove_const_t<E>>::value) {
        v.rows = static_cast<std::size_t>(m.rows());
        v.cols = static_cast<std::size_t>(m.cols());
        v.row_stride = static_cast<std::ptrdiff_t>(m.rowStride());
        v.col_stride = static_cast<std::ptrdiff_t>(m.colStride());
    } else {
        if (m.dimension() != 2) {
            throw shape_error(detail::msg("as_view: expected a 2-d array [n_tokens, n_in], got ",
                                          m.dimension(), " dimensions"));
        }
        v.rows = m.shape()[0];
        v.cols = m.shape()[1];
        v.row_stride = static_cast<std::ptrdiff_t>(m.strides()[0]);
        v.col_stride = static_cast<std::ptrdiff_t>(m.strides()[1]);
        // xtensor reports stride 0 along axes of extent 1.
        if (v.rows <= 1) v.row_stride = static_cast<std::ptrdiff_t>(v.cols);
        if (v.cols <= 1) v.col_stride = 1;
    }
    return v;
}

/// Read-only `[rows, cols]` view of anything as_view() takes.
template <class E>
seq_view<const std::remove_const_t<std::remove_reference_t<decltype(*std::declval<const E&>().data())>>>
as_const_view(const E& m)
{
    auto v = as_view(m);
    return {v.data, v.rows, v.cols, v.row_stride, v.col_stride};
}

/// `[n, n]` or `[n, n, o]` view of a dense row-major score array (an owning
/// score_tensor or any xtensor container / adaptor laid out the same way).
template <class S>
auto as_score_view(const S& s)
{
    using value_t = std::remove_const_t<std::remove_reference_t<decltype(*s.data())>>;
    const std::size_t dim = s.dimension();
    if (dim != 2 && dim != 3) {
        throw shape_error(detail::msg("score array: expected [n, n] or [n, n, o], got ", dim, " dimensions"));
    }
    const std::size_t n = s.shape()[0];
    const std::size_t o = dim == 3 ? s.shape()[2] : 1;
    if (s.shape()[1] != n) {
        throw shape_error(detail::msg("score array: expected a square [n, n(, o)] array, got [", n, ", ",
                                      s.shape()[1], ", ...]"));
    }
    return score_view<const value_t>{s.data(), n, o, static_cast<std::ptrdiff_t>(n * o)};
}

/// Sequence k's `[n, n(, o)]` scores inside a padded `[b, L, L(, o)]` block
/// (dense, row-major): rows `L * o` apart.
template <class T>
score_view<T> padded_scores(T* base, std::size_t k, std::size_t n, std::size_t L, std::size_t o)
{
    return {base + k * L * L * o, n, o, static_cast<std::ptrdiff_t>(L * o)};
}

BIAFFINE_NAMESPACE_END
