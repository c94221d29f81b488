// biaffine/decode.hpp - head decoding (greedy argmax and single-root MST) from one split's scores.
//
// Scores are one split's `[n, n]` arc matrix: `scores(m, l)` is the score of
// head l for dependent m (rows dependents, columns head candidates), and the
// diagonal `scores(m, m)` is the score of m being the root. A head vector
// `[n]` holds each token's head, with heads[r] == r for the root.
//
// mst_heads is Chu-Liu/Edmonds in the dense O(n^2) form (path growing with
// cycle contraction; each contraction merges rows in O(n * |cycle|), which sums
// to O(n^2)), on a graph with an artificial root node whose out-edges are the
// diagonal. The single-root constraint is exact, not a numeric penalty: edge
// weights live in a lexicographically ordered group (root-edge count first),
// which Edmonds' algorithm handles as well as plain numbers. The same device
// makes -inf scores safe: an infinite score counts in its own tier, so -inf
// arcs are avoided whenever a tree without them exists and no inf - inf = NaN
// ever appears. Memory is O(n^2) (24 bytes per entry).
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <utility>
#include <vector>

#include "biaffine/detail/checked.hpp"
#include "biaffine/errors.hpp"

namespace biaffine {
namespace detail {

template <class>
inline constexpr bool decode_always_false = false;

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
    static_assert(std::is_arithmetic_v<T>, "decode: scores must be arithmetic");
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

template <class Get>
std::vector<std::size_t> argmax_heads_impl(std::size_t n, const Get& get)
{
    std::vector<std::size_t> heads(n);
    for (std::size_t m = 0; m < n; ++m) {
        std::size_t best = 0;
        auto best_v = get(m, 0);
        check_not_nan(best_v, m, 0, "argmax_heads");
        for (std::size_t l = 1; l < n; ++l) {
            const auto v = get(m, l);
            check_not_nan(v, m, l, "argmax_heads");
            if (v > best_v) {  // strict: ties keep the lowest index
                best_v = v;
                best = l;
            }
        }
        heads[m] = best;
    }
    return heads;
}

/// An arc weight in the ordered group Z x Z x R (compared lexicographically).
/// `root` is -1 per root arc, so any tree with one root beats any with more;
/// `inf` is +-1 per infinite score; `s` sums the finite scores.
struct mst_weight {
    double s;
    std::int32_t root;
    std::int32_t inf;
};

inline bool operator<(const mst_weight& a, const mst_weight& b)
{
    if (a.root != b.root) return a.root < b.root;
    if (a.inf != b.inf) return a.inf < b.inf;
    return a.s < b.s;
}

inline mst_weight operator-(const mst_weight& a, const mst_weight& b)
{
    return {a.s - b.s, a.root - b.root, a.inf - b.inf};
}

/// Best known (reduced) arc into one super-node from another, plus the
/// original arc src -> dst (nodes of the graph with the artificial root 0).
struct mst_entry {
    mst_weight w;
    std::uint32_t src;
    std::uint32_t dst;
};

template <class Get>
std::vector<std::size_t> mst_heads_impl(std::size_t n, const Get& get)
{
    constexpr const char* where = "mst_heads";
    if (n == 0) return {};
    if (n == 1) {
        check_not_nan(get(0, 0), 0, 0, where);
        return {0};
    }
    if (n >= std::numeric_limits<std::uint32_t>::max()) {
        throw length_error(msg(where, ": n = ", n, " is too large"));
    }
    constexpr std::size_t none = std::numeric_limits<std::size_t>::max();
    const std::size_t N = n + 1;  // node 0 is the artificial root, token m is node m + 1
    const std::size_t cells = to_index_size(
        checked_product("mst_heads: score graph", N, N, sizeof(mst_entry)), where) / sizeof(mst_entry);

    // in[x * N + y]: best arc from super-node slot y into slot x. Row 0 (into
    // the root) is never used.
    std::vector<mst_entry> in(cells);
    for (std::size_t v = 1; v < N; ++v) {
        const std::size_t m = v - 1;
        for (std::size_t u = 0; u < N; ++u) {
            if (u == v) continue;
            const std::size_t l = (u == 0) ? m : u - 1;
            const auto raw = get(m, l);
            check_not_nan(raw, m, l, where);
            const double d = static_cast<double>(raw);
            mst_weight w{d, u == 0 ? -1 : 0, 0};
            if (std::isinf(d)) {
                w.s = 0.0;
                w.inf = d > 0 ? 1 : -1;
            }
            in[v * N + u] = {w, static_cast<std::uint32_t>(u), static_cast<std::uint32_t>(v)};
        }
    }

    // Contraction forest: nodes 0..N-1 are the original nodes, later ones the
    // contracted cycles. edge[t] is the arc entering t (a cycle arc for cycle
    // members, the final arc for outermost nodes).
    std::vector<std::size_t> tparent(N, none);
    std::vector<std::pair<std::uint32_t, std::uint32_t>> edge(N, {0, 0});
    tparent.reserve(2 * N);
    edge.reserve(2 * N);

    std::vector<std::size_t> node_of(N);  // slot -> forest node
    for (std::size_t i = 0; i < N; ++i) node_of[i] = i;
    std::vector<mst_weight> enter_w(N);          // weight of each slot's chosen arc
    std::vector<unsigned char> status(N, 0);     // 0 unseen, 1 on path, 2 attached to root
    std::vector<unsigned char> dead(N, 0);
    std::vector<unsigned char> in_cycle(N, 0);
    std::vector<std::size_t> alive(N);
    for (std::size_t i = 0; i < N; ++i) alive[i] = i;
    status[0] = 2;

    std::vector<std::size_t> path, cycle;
    std::vector<mst_entry> merged;
    for (std::size_t start = 1; start < N; ++start) {
        if (status[start] != 0) continue;
        path.assign(1, start);
        status[start] = 1;
        while (!path.empty()) {
            const std::size_t x = path.back();
            const mst_entry* row = &in[x * N];
            std::size_t best = none;
            for (std::size_t y : alive) {
                if (y == x) continue;
                if (best == none || row[best].w < row[y].w) best = y;  // ties: first alive slot
            }
            enter_w[x] = row[best].w;
            edge[node_of[x]] = {row[best].src, row[best].dst};

            if (status[best] == 2) {  // the whole path now hangs off the root's tree
                for (std::size_t p : path) status[p] = 2;
                path.clear();
                break;
            }
            if (status[best] == 0) {
                status[best] = 1;
                path.push_back(best);
                continue;
            }

            // best is on the path: path[pos..] is a cycle; contract it into slot c.
            std::size_t pos = path.size() - 1;
            while (path[pos] != best) --pos;
            cycle.assign(path.begin() + static_cast<std::ptrdiff_t>(pos), path.end());
            path.resize(pos);
            const std::size_t c = best;
            const std::size_t t = tparent.size();
            tparent.push_back(none);
            edge.push_back({0, 0});
            for (std::size_t x2 : cycle) {
                tparent[node_of[x2]] = t;
                in_cycle[x2] = 1;
            }

            // Arcs into the cycle, reduced by the cycle arc they would replace.
            merged.assign(N, mst_entry{});
            for (std::size_t y : alive) {
                if (in_cycle[y]) continue;
                bool have = false;
                for (std::size_t x2 : cycle) {
                    const mst_entry& e = in[x2 * N + y];
                    const mst_weight r = e.w - enter_w[x2];
                    if (!have || merged[y].w < r) {
                        merged[y] = {r, e.src, e.dst};
                        have = true;
                    }
                }
            }
            for (std::size_t y : alive) {
                if (!in_cycle[y]) in[c * N + y] = merged[y];
            }
            // Arcs out of the cycle into nodes that may still choose (not done, not root).
            for (std::size_t y : alive) {
                if (in_cycle[y] || status[y] == 2) continue;
                mst_entry* ry = &in[y * N];
                std::size_t b = cycle.front();
                for (std::size_t x2 : cycle) {
                    if (ry[b].w < ry[x2].w) b = x2;
                }
                ry[c] = ry[b];
            }

            for (std::size_t x2 : cycle) {
                in_cycle[x2] = 0;
                if (x2 != c) dead[x2] = 1;
            }
            std::size_t k = 0;
            for (std::size_t y : alive) {
                if (!dead[y]) alive[k++] = y;
            }
            alive.resize(k);
            node_of[c] = t;
            status[c] = 1;
            path.push_back(c);
        }
    }

    // Expansion, outermost first (a contracted node has a larger id than its
    // members): the member containing the entering arc's target takes that arc
    // instead of its cycle arc; every other member keeps its cycle arc.
    for (std::size_t t = tparent.size(); t-- > N;) {
        std::size_t w = edge[t].second;
        while (tparent[w] != t) w = tparent[w];
        edge[w] = edge[t];
    }

    std::vector<std::size_t> heads(n);
    for (std::size_t v = 1; v < N; ++v) {
        const std::size_t src = edge[v].first;
        heads[v - 1] = (src == 0) ? v - 1 : src - 1;
    }
    return heads;
}

}  // namespace detail

/// Greedy heads: for each dependent row m of the `[n, n]` scores at
/// `data[m * row_stride + l]`, the column with the highest score (the diagonal
/// means root). Ties: lowest column. Returns `[n]`; the result need not be a
/// tree. Throws error on NaN (naming row and column), shape_error if
/// row_stride < n, error on a null pointer with n > 0.
template <class T>
std::vector<std::size_t> argmax_heads(const T* data, std::size_t n, std::size_t row_stride)
{
    detail::check_dense_args(data, n, row_stride, "argmax_heads");
    return detail::argmax_heads_impl(
        n, [data, row_stride](std::size_t m, std::size_t l) { return data[m * row_stride + l]; });
}

/// argmax_heads of a square `[n, n]` matrix: a 2-d xtensor expression or
/// container (`.shape()`, `e(m, l)`) or an Eigen-like matrix (`.rows()`,
/// `.cols()`). Throws shape_error unless 2-d and square.
template <class E>
std::vector<std::size_t> argmax_heads(const E& scores)
{
    return detail::with_square_matrix(scores, "argmax_heads", [](std::size_t n, const auto& get) {
        return detail::argmax_heads_impl(n, get);
    });
}

/// Maximum spanning tree heads with exactly one root, from the `[n, n]` scores
/// at `data[m * row_stride + l]` (score of head l for dependent m; the diagonal
/// is the score of m attaching to the artificial root). Returns `[n]` with
/// heads[r] == r for the single root r; every token reaches r, no cycles. The
/// total score (sum of scores(m, heads[m])) is the maximum over all single-root
/// trees. Infinite scores rank by tier: fewer -inf (more +inf) arcs first, then
/// the finite sum. Among equal-score trees the choice is deterministic but
/// unspecified. n == 0 -> {}, n == 1 -> {0}. O(n^2) time and memory.
/// Throws error on NaN (naming row and column), shape_error if row_stride < n,
/// error on a null pointer with n > 0.
template <class T>
std::vector<std::size_t> mst_heads(const T* data, std::size_t n, std::size_t row_stride)
{
    detail::check_dense_args(data, n, row_stride, "mst_heads");
    return detail::mst_heads_impl(
        n, [data, row_stride](std::size_t m, std::size_t l) { return data[m * row_stride + l]; });
}

/// mst_heads of a square `[n, n]` matrix: a 2-d xtensor expression or container
/// or an Eigen-like matrix, read in place. Throws shape_error unless 2-d and square.
template <class E>
std::vector<std::size_t> mst_heads(const E& scores)
{
    return detail::with_square_matrix(scores, "mst_heads", [](std::size_t n, const auto& get) {
        return detail::mst_heads_impl(n, get);
    });
}

/// True if heads `[n]` is a dependency tree: exactly one root (heads[r] == r),
/// every head in range, and every token reaches the root (so no cycles).
/// The empty vector counts as a tree (the decode of an empty split). O(n).
inline bool is_tree(const std::vector<std::size_t>& heads)
{
    const std::size_t n = heads.size();
    if (n == 0) return true;
    std::size_t roots = 0;
    for (std::size_t i = 0; i < n; ++i) {
        if (heads[i] >= n) return false;
        if (heads[i] == i) ++roots;
    }
    if (roots != 1) return false;
    // 0 unvisited, 1 on the current walk, 2 known to reach the root.
    std::vector<unsigned char> state(n, 0);
    std::vector<std::size_t> walk;
    for (std::size_t i = 0; i < n; ++i) {
        walk.clear();
        std::size_t v = i;
        while (state[v] == 0 && heads[v] != v) {
            state[v] = 1;
            walk.push_back(v);
            v = heads[v];
        }
        if (state[v] == 1) return false;  // came back onto this walk: a cycle
        state[v] = 2;
        for (std::size_t w : walk) state[w] = 2;
    }
    return true;
}

}  // namespace biaffine
