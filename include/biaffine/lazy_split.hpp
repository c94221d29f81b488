// biaffine/lazy_split.hpp - lazy splitting of a document into splits that fit a maximum length.
//
// A document is cut only where it must be: a piece longer than `max_length`
// is cut at its most likely sentence start (highest score, never its own first
// token), and both halves are treated the same way until every piece fits.
// The recursion is exactly a walk of the max-Cartesian tree of the scores, so
// it runs in O(n) time and O(n) memory with an explicit stack: a 1M-token
// document with monotone scores (a degenerate, 1M-deep tree) is fine.
//
// Ordering of scores: among equal scores the earliest token wins, so a piece
// of equal scores is cut right after its first token. A NaN score throws
// error (as the decoders do): ordering it anywhere would cut on noise.
#pragma once

#include "biaffine/abi.hpp"

#include <cmath>
#include <cstddef>
#include <iterator>
#include <limits>
#include <type_traits>
#include <utility>
#include <vector>

#include "biaffine/errors.hpp"

BIAFFINE_NAMESPACE_BEGIN
namespace detail {

/// Strict "a scores lower than b" with NaN below everything; NaNs tie (the
/// public functions refuse NaN first; kept total for any caller of the walk).
template <class T>
inline bool split_score_less(T a, T b)
{
    if constexpr (std::is_floating_point_v<T>) {
        if (std::isnan(a)) return !std::isnan(b);
        if (std::isnan(b)) return false;
    }
    return a < b;
}

/// Throws error naming the first NaN of scores[0, n) (token `first + i`).
template <class T>
void check_no_nan(const T* s, std::size_t n, std::size_t first, const char* where)
{
    if constexpr (std::is_floating_point_v<T>) {
        for (std::size_t i = 0; i < n; ++i) {
            if (std::isnan(s[i])) throw error(msg(where, ": sentence-start score is NaN at token ", first + i));
        }
    } else {
        (void)s, (void)n, (void)first, (void)where;
    }
}

inline void check_max_length(std::size_t max_length, const char* where)
{
    if (max_length == 0) {
        throw length_error(msg(where, ": max_length must be at least 1, got 0"));
    }
}

/// Lazy split of scores[0, n) appended to `out` (lengths in document order).
/// `left`/`right` are scratch buffers reused across calls.
template <class T>
void lazy_split_into(const T* s, std::size_t n, std::size_t max_length,
                     std::vector<std::size_t>& out, std::vector<std::size_t>& left,
                     std::vector<std::size_t>& right)
{
    if (n == 0) return;
    if (n <= max_length) {
        out.push_back(n);
        return;
    }
    constexpr std::size_t none = std::numeric_limits<std::size_t>::max();

    // Max-Cartesian tree over tokens 1..n-1 (token 0 can never be a cut: it
    // already starts the document). Popping only strictly lower scores keeps an
    // earlier equal score as the ancestor, i.e. ties go to the earliest token.
    // The subtree of every node is exactly the cut-candidate range (b, e) of the
    // piece [b, e) that the recursion would hand it.
    left.assign(n, none);
    right.assign(n, none);
    std::vector<std::size_t> spine;  // right spine of the tree built so far
    for (std::size_t i = 1; i < n; ++i) {
        std::size_t last = none;
        while (!spine.empty() && split_score_less(s[spine.back()], s[i])) {
            last = spine.back();
            spine.pop_back();
        }
        left[i] = last;
        if (!spine.empty()) right[spine.back()] = i;
        spine.push_back(i);
    }
    const std::size_t root = spine.front();

    // Explicit-stack walk; a frame is a piece [b, e) and the tree node holding
    // the maximum of (b, e) (none when the piece has a single token).
    struct frame {
        std::size_t b, e, node;
    };
    std::vector<frame> stack;
    stack.push_back({0, n, root});
    while (!stack.empty()) {
        const frame f = stack.back();
        stack.pop_back();
        if (f.e - f.b <= max_length) {
            out.push_back(f.e - f.b);
            continue;
        }
        // Longer than max_length >= 1, so (b, e) is non-empty and f.node is set.
        const std::size_t k = f.node;
        stack.push_back({k, f.e, right[k]});  // right half after the left one
        stack.push_back({f.b, k, left[k]});
    }
}

template <class C, class = void>
struct has_data_size : std::false_type {};
template <class C>
struct has_data_size<C, std::void_t<decltype(std::declval<const C&>().data()),
                                    decltype(std::declval<const C&>().size())>> : std::true_type {};

template <class C, class = void>
struct has_strides : std::false_type {};
template <class C>
struct has_strides<C, std::void_t<decltype(std::declval<const C&>().strides())>> : std::true_type {};

template <class C, class = void>
struct has_dimension : std::false_type {};
template <class C>
struct has_dimension<C, std::void_t<decltype(std::declval<const C&>().dimension())>>
    : std::true_type {};

/// Calls f(pointer, size) with a contiguous copy or view of a 1-d container.
/// Plain contiguous containers (std::vector, std::array, spans) are used in
/// place; strided ones (xtensor containers and views) are read through their
/// iterators, because their data() need not start at element 0 with stride 1.
template <class C, class F>
auto with_contiguous_1d(const C& c, const char* where, F&& f)
{
    if constexpr (has_dimension<C>::value) {
        if (c.dimension() != 1) {
            throw shape_error(msg(where, ": expected a 1-d score array, got ", c.dimension(),
                                  " dimensions"));
        }
    }
    if constexpr (has_data_size<C>::value && !has_strides<C>::value) {
        return f(c.data(), static_cast<std::size_t>(c.size()));
    } else {
        using value_type = std::decay_t<decltype(*std::begin(c))>;
        std::vector<value_type> copy(std::begin(c), std::end(c));
        return f(copy.data(), copy.size());
    }
}

}  // namespace detail

/// Lazy split of one document.
///
/// `sent_start_scores` is `[n_tokens]`: per-token sentence-start scores or
/// probabilities (float, double, or any arithmetic type). Returns split lengths
/// `[n_splits]` in document order, each in [1, max_length], summing to
/// `n_tokens`. A piece longer than `max_length` is cut before its highest-scoring
/// token other than its first (ties: earliest), recursively.
/// An empty document gives an empty result.
///
/// Throws length_error if max_length == 0, error if the pointer is null while
/// n_tokens > 0 or if a score is NaN (naming the token).
template <class T>
std::vector<std::size_t> lazy_split(const T* sent_start_scores, std::size_t n_tokens,
                                    std::size_t max_length)
{
    static_assert(std::is_arithmetic_v<T>, "lazy_split: scores must be arithmetic");
    detail::check_max_length(max_length, "lazy_split");
    if (n_tokens > 0 && sent_start_scores == nullptr) {
        throw error(detail::msg("lazy_split: null score pointer for ", n_tokens, " tokens"));
    }
    detail::check_no_nan(sent_start_scores, n_tokens, 0, "lazy_split");
    std::vector<std::size_t> out, left, right;
    detail::lazy_split_into(sent_start_scores, n_tokens, max_length, out, left, right);
    return out;
}

/// Lazy split of one document given as a 1-d container of `[n_tokens]` scores
/// (std::vector, std::array, a 1-d xtensor container or view, ...).
/// Same rules as the pointer overload; throws shape_error for a container with
/// more than one dimension.
template <class C, class = decltype(std::begin(std::declval<const C&>()))>
std::vector<std::size_t> lazy_split(const C& sent_start_scores, std::size_t max_length)
{
    return detail::with_contiguous_1d(sent_start_scores, "lazy_split",
                                      [&](const auto* p, std::size_t n) {
                                          return lazy_split(p, n, max_length);
                                      });
}

/// Caps given sentence lengths `[n_sentences]` at `max_length`.
///
/// Sentences of length <= max_length (including zero-length ones, kept as 0)
/// pass unchanged. A longer sentence is split:
/// - with `scores` (`[sum(lengths)]`, the document's per-token scores, the
///   caller guarantees the size): lazily, exactly as lazy_split on that
///   sentence's own tokens;
/// - without scores: into the fewest pieces, ceil(len / max_length), as equal
///   as possible, longer pieces first (e.g. 7 at max 3 -> 3, 2, 2), which is
///   what a lazy split of flat scores would aim for had it no tie order.
/// Returns the lengths in document order; they sum to sum(lengths).
///
/// Throws length_error if max_length == 0, overflow_error if sum(lengths)
/// overflows, error if a score is NaN (naming its token in the document).
template <class T = float>
std::vector<std::size_t> cap_split_lengths(const std::vector<std::size_t>& lengths,
                                           std::size_t max_length, const T* scores = nullptr)
{
    static_assert(std::is_arithmetic_v<T>, "cap_split_lengths: scores must be arithmetic");
    detail::check_max_length(max_length, "cap_split_lengths");
    std::vector<std::size_t> out, left, right;
    out.reserve(lengths.size());
    std::size_t offset = 0;
    for (std::size_t i = 0; i < lengths.size(); ++i) {
        const std::size_t len = lengths[i];
        if (len > std::numeric_limits<std::size_t>::max() - offset) {
            throw overflow_error(detail::msg("cap_split_lengths: sentence ", i, ": offset ", offset,
                                             " + length ", len, " overflows"));
        }
        if (scores != nullptr) detail::check_no_nan(scores + offset, len, offset, "cap_split_lengths");
        if (len <= max_length) {
            out.push_back(len);
        } else if (scores != nullptr) {
            detail::lazy_split_into(scores + offset, len, max_length, out, left, right);
        } else {
            const std::size_t pieces = len / max_length + (len % max_length != 0 ? 1 : 0);
            const std::size_t base = len / pieces;
            const std::size_t longer = len % pieces;  // this many get base + 1
            for (std::size_t p = 0; p < pieces; ++p) out.push_back(base + (p < longer ? 1 : 0));
        }
        offset += len;
    }
    return out;
}

/// cap_split_lengths without scores, spelled with an explicit nullptr.
inline std::vector<std::size_t> cap_split_lengths(const std::vector<std::size_t>& lengths,
                                                  std::size_t max_length, std::nullptr_t)
{
    return cap_split_lengths<float>(lengths, max_length, nullptr);
}

/// cap_split_lengths with the scores as a 1-d container; its size must equal
/// sum(lengths), else shape_error.
template <class C, class = decltype(std::begin(std::declval<const C&>()))>
std::vector<std::size_t> cap_split_lengths(const std::vector<std::size_t>& lengths,
                                           std::size_t max_length, const C& scores)
{
    return detail::with_contiguous_1d(
        scores, "cap_split_lengths", [&](const auto* p, std::size_t n) {
            std::size_t total = 0;
            for (std::size_t len : lengths) {
                if (len > std::numeric_limits<std::size_t>::max() - total) {
                    throw overflow_error("cap_split_lengths: sum of lengths overflows");
                }
                total += len;
            }
            if (total != n) {
                throw shape_error(detail::msg("cap_split_lengths: scores: expected ", total,
                                              " tokens (sum of lengths), got ", n));
            }
            return cap_split_lengths(lengths, max_length, p);
        });
}

BIAFFINE_NAMESPACE_END
