// biaffine/detail/split_checks.hpp - checks of what a split list comes with
// (head lists, score and label gradients, input-gradient slots) and the
// longest split of a list. Shared by the layers (layer.hpp), the output
// kinds and the compute backends, which sit below the layers and include
// this rather than layer.hpp.
#pragma once

#include "biaffine/abi.hpp"

#include <cstddef>
#include <cstdint>
#include <iterator>
#include <string>
#include <type_traits>
#include <vector>

#include "biaffine/detail/checked.hpp"
#include "biaffine/errors.hpp"
#include "biaffine/tensor.hpp"

BIAFFINE_NAMESPACE_BEGIN
namespace detail {

// Elements of any range.
template <class R>
std::size_t range_size(const R& r)
{
    return static_cast<std::size_t>(std::distance(std::begin(r), std::end(r)));
}

// `[a, b, ...]`, for messages.
inline std::string shape_str(const std::vector<std::size_t>& s)
{
    std::string r = "[";
    for (std::size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
    return r + "]";
}

/// Checks the heads of `count` splits against their lengths: one list per
/// split, `rows_of(k)` entries, each in `0..rows_of(k) - 1`. `where(k)`
/// names split k in the message ("split 3", "document 1, split 0").
template <class Heads, class RowsOf, class Where>
void check_heads(const char* who, std::size_t count, const Heads& H, RowsOf&& rows_of, Where&& where)
{
    if (static_cast<std::size_t>(H.size()) != count) {
        throw head_error(msg(who, ": ", H.size(), " head lists for ", count, " splits"));
    }
    for (std::size_t k = 0; k < count; ++k) {
        const auto& hk = H[k];
        const std::size_t n = rows_of(k);
        if (static_cast<std::size_t>(hk.size()) != n) {
            throw head_error(msg(who, ": ", where(k), ": ", hk.size(), " heads for ", n, " tokens"));
        }
        for (std::size_t m = 0; m < n; ++m) {
            const auto h = hk[m];
            bool bad = false;
            if constexpr (std::is_signed<std::decay_t<decltype(h)>>::value) bad = h < 0;
            if (bad || static_cast<std::uint64_t>(h) >= n) {
                throw head_error(msg(who, ": ", where(k), ", token ", m, ": head ", +h, " outside 0..",
                                     static_cast<std::int64_t>(n) - 1));
            }
        }
    }
}

/// Checks split k's `[n, o]` gradient of labels at given heads.
template <class T>
void check_head_grad(const char* who, std::size_t k, const seq_view<const T>& g, std::size_t n, std::size_t o)
{
    if (g.rows != n || g.cols != o) {
        throw shape_error(msg(who, ": split ", k, ": expected a gradient of [", n, ", ", o, "], got [", g.rows, ", ",
                              g.cols, "]"));
    }
    if (n != 0 && g.data == nullptr) {
        throw shape_error(msg(who, ": split ", k, ": the gradient view of [", n, ", ", o, "] has no data"));
    }
}

/// Checks split k's score gradient against its split, `[n, n, o]`; `who`
/// names the caller in the message, `doc` the split's document when known.
template <class T>
void check_score_grad(const char* who, std::size_t k, const score_view<const T>& g, std::size_t n, std::size_t o,
                      std::size_t doc = static_cast<std::size_t>(-1))
{
    const std::string in_doc = doc == static_cast<std::size_t>(-1) ? "" : msg(" (document ", doc, ")");
    if (g.n != n || g.labels != o) {
        throw shape_error(msg(who, ": split ", k, in_doc, ": expected a gradient of [", n, ", ", n, ", ", o, "], got [",
                              g.n, ", ", g.n, ", ", g.labels, "]"));
    }
    // A hand-made view: its rows must hold n * o cells each, behind real data.
    if (n != 0 && g.data == nullptr) {
        throw shape_error(msg(who, ": split ", k, in_doc, ": the gradient view of [", n, ", ", n, ", ", o,
                              "] has no data"));
    }
    if (n != 0 && g.row_stride < static_cast<std::ptrdiff_t>(n * o)) {
        throw shape_error(msg(who, ": split ", k, in_doc, ": the gradient view's row stride ", g.row_stride,
                              " is shorter than a row of ", n * o, " cells"));
    }
}

/// Checks split k's input-gradient slot: `[n, n_in]`, with data behind it
/// and strides that keep its cells apart (row- or column-major, or wider).
template <class T>
void check_grad_slot(const char* who, std::size_t k, const seq_view<T>& s, std::size_t n, std::size_t n_in)
{
    if (s.rows != n || s.cols != n_in) {
        throw shape_error(msg(who, ": split ", k, ": input gradient slot is [", s.rows, ", ", s.cols, "], expected [",
                              n, ", ", n_in, "]"));
    }
    if (n == 0 || n_in == 0) return;
    if (s.data == nullptr) throw shape_error(msg(who, ": split ", k, ": input gradient slot has no data"));
    const std::ptrdiff_t rs = s.row_stride, cs = s.col_stride;
    const auto rows = static_cast<std::ptrdiff_t>(n), cols = static_cast<std::ptrdiff_t>(n_in);
    const bool row_major = cs >= 1 && (rows == 1 || rs >= cols * cs);
    const bool col_major = rs >= 1 && (cols == 1 || cs >= rows * rs);
    if (!row_major && !col_major) {
        throw shape_error(msg(who, ": split ", k, ": input gradient slot [", n, ", ", n_in, "] has strides (", rs, ", ",
                              cs, "), which make cells overlap"));
    }
}

/// Elements of a packed `[rows, cols...]` buffer of T, checked (in bytes too).
template <class T, class... Ts>
std::size_t packed_count(const char* what, std::uint64_t rows, Ts... cols)
{
    return to_index_size(checked_product(what, rows, cols..., sizeof(T)), what) / sizeof(T);
}

/// The longest of `count` splits laid out by `off` (count + 1 row offsets).
inline std::size_t max_split_rows(const std::size_t* off, std::size_t count)
{
    std::size_t m = 0;
    for (std::size_t k = 0; k < count; ++k) m = off[k + 1] - off[k] > m ? off[k + 1] - off[k] : m;
    return m;
}

/// The longest of the splits `X` (views with `.rows`).
template <class Items>
std::size_t max_item_rows(const Items& X)
{
    std::size_t m = 0;
    for (std::size_t k = 0; k < X.size(); ++k) m = X[k].rows > m ? X[k].rows : m;
    return m;
}

/// Row offsets off [count + 1] of the splits X in a packed batch (checked);
/// returns the total.
template <class Items>
std::size_t split_offsets(const Items& X, std::size_t* off)
{
    std::uint64_t total = 0;
    for (std::size_t k = 0; k < X.size(); ++k) {
        off[k] = static_cast<std::size_t>(total);
        total = checked_add(total, X[k].rows, "packed rows");
    }
    off[X.size()] = static_cast<std::size_t>(total);
    return to_index_size(total, "packed rows");
}

/// rows [N]: the packed row of each token's head (heads H, checked before),
/// splits at offsets off; returns N.
template <class Items, class Heads>
std::size_t split_head_rows(const Items& X, const Heads& H, const std::size_t* off, std::size_t* rows)
{
    const std::size_t count = X.size();
    for (std::size_t k = 0; k < count; ++k) {
        const auto& hk = H[k];
        const std::size_t n = off[k + 1] - off[k];
        for (std::size_t m = 0; m < n; ++m) rows[off[k] + m] = off[k] + static_cast<std::size_t>(hk[m]);
    }
    return off[count];
}

}  // namespace detail
BIAFFINE_NAMESPACE_END
