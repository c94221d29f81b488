// biaffine/detail/decode_mst.hpp - the single-root maximum spanning tree.
//
// Dense Chu-Liu/Edmonds in Tarjan's O(n^2) form: grow a path along best
// in-arcs; when the path closes a cycle, contract it into a new node whose
// in-row is the members' rows reduced by the cycle arc each would replace.
// The graph has n tokens plus an artificial root (node 0) whose out-arcs are
// the diagonal. Three choices keep it cheap:
//   * one `[N, N]` double copy of the scores (N = n + 1), plus one new row per
//     contraction; rows are written once and never changed, so the expansion
//     can find which member an arc entered by recomputing that one maximum
//     (no per-cell bookkeeping of original arcs);
//   * columns stay original nodes (never merged): the best arc into a node is
//     the best over original tails, mapped to its current super-node by a
//     token -> node array (updated by one vectorised pass per cycle member);
//     only the node's own tokens are masked out of its row;
//   * the single-root constraint is exact without widening the weights: in the
//     ordered group (root arcs used, score), any arc not from the root beats
//     every root arc, so Edmonds never takes a root arc while two super-nodes
//     remain and the root's one arc enters the final super-node. The root
//     column is simply not searched until then.
// A matrix holding an infinite score runs the same code on (tier, sum) pairs
// (tiered_weight), so -inf arcs are avoided whenever a tree without them
// exists; all other matrices use plain doubles.
#pragma once

#include "biaffine/abi.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <vector>

#include "biaffine/detail/eigen.hpp"

#include "biaffine/detail/decode_common.hpp"

BIAFFINE_NAMESPACE_BEGIN
namespace detail {

/// Per-thread working memory of mst_heads (grow-only; big buffers are freed
/// after the call).
template <class W>
struct mst_scratch {
    decode_buffer<W> w;  // rows of [N] reduced arc weights: w[x * N + y] is the arc y -> x
    std::vector<W> enter_w;                  // per node: weight of its chosen in-arc
    std::vector<std::uint32_t> enter_src;    // per node: original tail of that arc
    std::vector<std::uint32_t> comp;         // per original node: its current top-level node
    std::vector<std::uint32_t> cycle_begin;  // per contracted node: its members in `members`
    std::vector<std::uint32_t> members;
    std::vector<unsigned char> on_path;
    std::vector<std::uint32_t> path;
    std::vector<const W*> rows;  // a cycle's member rows
    std::vector<W> cyc_e;        // and their chosen in-arc weights

    static mst_scratch& local()
    {
        thread_local mst_scratch s;
        return s;
    }
};

/// First column y in [1, N) of row `r` holding the row's maximum.
inline std::size_t mst_best_column(const double* r, std::size_t N)
{
    // Vectorised maximum, then the first column equal to it (no NaN here).
    const double best = Eigen::Map<const Eigen::ArrayXd>(r + 1, static_cast<Eigen::Index>(N - 1)).maxCoeff();
    std::size_t y = 1;
    while (y + 1 < N && r[y] != best) ++y;  // bounded even if a NaN slipped in
    return y;
}

inline std::size_t mst_best_column(const tiered_weight* r, std::size_t N)
{
    std::size_t best = 1;
    for (std::size_t y = 2; y < N; ++y) {
        if (weight_less(r[best], r[y])) best = y;
    }
    return best;
}

/// out[y] = max over members k (first in order on ties) of row_k[y] - e_k.
inline void mst_merge_rows(double* out, const double* const* rows, const double* e, std::size_t k,
                           std::size_t N)
{
    const double* r0 = rows[0];
    const double e0 = e[0];
    for (std::size_t y = 0; y < N; ++y) out[y] = r0[y] - e0;
    for (std::size_t j = 1; j < k; ++j) {
        const double* rj = rows[j];
        const double ej = e[j];
        for (std::size_t y = 0; y < N; ++y) out[y] = std::max(out[y], rj[y] - ej);
    }
}

inline void mst_merge_rows(tiered_weight* out, const tiered_weight* const* rows, const tiered_weight* e,
                           std::size_t k, std::size_t N)
{
    for (std::size_t y = 0; y < N; ++y) {
        tiered_weight b = weight_sub(rows[0][y], e[0]);
        for (std::size_t j = 1; j < k; ++j) {
            const tiered_weight r = weight_sub(rows[j][y], e[j]);
            if (weight_less(b, r)) b = r;
        }
        out[y] = b;
    }
}

/// Edmonds on the loaded rows 1..n of `ws.w` (row stride N = n + 1, row x
/// column y the arc from original node y into x, self-loops excluded, column 0
/// the root's arcs), n >= 2. Returns heads `[n]`.
template <class W>
std::vector<std::size_t> mst_solve(std::size_t n, mst_scratch<W>& ws)
{
    const std::size_t N = n + 1;
    const std::size_t max_nodes = 2 * N;  // N originals plus at most n - 1 contractions
    W* in = ws.w.get(max_nodes * N);
    const W excluded = weight_excluded<W>();

    ws.enter_w.resize(max_nodes);
    ws.enter_src.resize(max_nodes);
    ws.comp.resize(N);
    ws.cycle_begin.assign(N + 1, 0);  // indexed by node - N (+1 sentinel slots appended)
    ws.members.clear();
    ws.on_path.assign(max_nodes, 0);
    ws.path.clear();
    std::uint32_t* const comp = ws.comp.data();
    for (std::size_t i = 0; i < N; ++i) comp[i] = static_cast<std::uint32_t>(i);

    std::vector<const W*>& rows = ws.rows;
    std::vector<W>& cyc_e = ws.cyc_e;
    std::size_t next_node = N;
    std::size_t top_level = n;  // super-nodes not yet merged, root excluded
    ws.path.push_back(1);
    ws.on_path[1] = 1;
    std::size_t last = 1;
    for (;;) {
        const std::size_t x = ws.path.back();
        const W* row = in + x * N;
        if (top_level == 1) {  // the last super-node takes the root's arc
            ws.enter_w[x] = row[0];
            ws.enter_src[x] = 0;
            last = x;
            break;
        }
        const std::size_t y = mst_best_column(row, N);
        ws.enter_w[x] = row[y];
        ws.enter_src[x] = static_cast<std::uint32_t>(y);
        const std::uint32_t b = comp[y];
        if (!ws.on_path[b]) {
            ws.on_path[b] = 1;
            ws.path.push_back(b);
            continue;
        }

        // b is on the path: path[pos..] is a cycle; contract it into node t.
        std::size_t pos = ws.path.size() - 1;
        while (ws.path[pos] != b) --pos;
        const std::size_t t = next_node++;
        const auto t32 = static_cast<std::uint32_t>(t);
        ws.cycle_begin[t - N] = static_cast<std::uint32_t>(ws.members.size());
        rows.clear();
        cyc_e.clear();
        for (std::size_t i = pos; i < ws.path.size(); ++i) {
            const std::uint32_t x2 = ws.path[i];
            ws.members.push_back(x2);
            rows.push_back(in + std::size_t(x2) * N);
            cyc_e.push_back(ws.enter_w[x2]);
            // Tokens of x2 now belong to t: a vectorised pass per member
            // (O(N)) rather than a walk over the tokens.
            for (std::size_t v = 0; v < N; ++v) comp[v] = comp[v] == x2 ? t32 : comp[v];
        }
        ws.cycle_begin[t - N + 1] = static_cast<std::uint32_t>(ws.members.size());
        top_level -= ws.path.size() - pos - 1;
        ws.path.resize(pos);

        // Arcs into the cycle, reduced by the cycle arc they would replace;
        // then mask the new node's own tokens.
        W* rt = in + t * N;
        mst_merge_rows(rt, rows.data(), cyc_e.data(), rows.size(), N);
        for (std::size_t v = 0; v < N; ++v) rt[v] = comp[v] == t32 ? excluded : rt[v];
        ws.on_path[t] = 1;
        ws.path.push_back(t32);
    }

    // Expansion, outermost first: the member of t that an arc from token y
    // entered is the one whose reduced weight won the merge (recomputed: the
    // first member in path order with the largest row[y] - enter_w). It takes
    // that arc instead of its cycle arc; every other member keeps its own.
    std::vector<std::uint32_t>& src = ws.enter_src;  // becomes each node's final tail
    (void)last;
    for (std::size_t t = next_node; t-- > N;) {
        const std::uint32_t y = src[t];
        const std::uint32_t* mb = ws.members.data() + ws.cycle_begin[t - N];
        const std::uint32_t* me = ws.members.data() + ws.cycle_begin[t - N + 1];
        std::uint32_t win = *mb;
        W best = weight_sub(in[std::size_t(win) * N + y], ws.enter_w[win]);
        for (const std::uint32_t* p = mb + 1; p != me; ++p) {
            const W r = weight_sub(in[std::size_t(*p) * N + y], ws.enter_w[*p]);
            if (weight_less(best, r)) {
                best = r;
                win = *p;
            }
        }
        src[win] = y;
    }

    std::vector<std::size_t> heads(n);
    for (std::size_t v = 1; v < N; ++v) {
        const std::size_t s = src[v];
        heads[v - 1] = (s == 0) ? v - 1 : s - 1;
    }
    return heads;
}

/// Row `r` ([n] scores of V) into `out` as doubles; false if some value is
/// not finite (NaN or infinite) or, for double rows, above `limit` in
/// magnitude.
template <class V>
bool load_row_double(const V* r, std::size_t n, double* out, double limit)
{
    const auto L = static_cast<Eigen::Index>(n);
    if constexpr (std::is_same_v<V, float> || std::is_same_v<V, double>) {
        const Eigen::Map<const Eigen::Array<V, Eigen::Dynamic, 1>> a(r, L);
        Eigen::Map<Eigen::ArrayXd>(out, L) = a.template cast<double>();
        // x * 0 is NaN exactly for NaN and infinities; the sum keeps it.
        if (std::isnan((a * V(0)).sum())) return false;
        if constexpr (std::is_same_v<V, double>) {
            if (!(a.abs().maxCoeff() <= limit)) return false;
        }
        return true;
    } else if constexpr (std::is_same_v<V, std::int32_t>) {
        Eigen::Map<Eigen::ArrayXd>(out, L) =
            Eigen::Map<const Eigen::Array<std::int32_t, Eigen::Dynamic, 1>>(r, L).template cast<double>();
        return true;
    } else {
        for (std::size_t l = 0; l < n; ++l) out[l] = static_cast<double>(r[l]);
        return true;
    }
}

/// Loads the `[n, n]` scores (row m from `row(m, buf)`, a contiguous pointer)
/// into rows 1..n of the weights (stride N = n + 1): w[(m+1) * N + 0] =
/// score(m, m) (the root arc), w[(m+1) * N + (l+1)] = score(m, l), the
/// self-loop excluded. With W = double, returns false (throwing nothing) at
/// the first row holding a NaN, an infinity or a double beyond a quarter of
/// the double range; with tiered_weight, throws on the first NaN (row by row,
/// the diagonal first).
template <class W, class V, class Row>
bool mst_load(std::size_t n, const Row& row, V* buf, W* in)
{
    const std::size_t N = n + 1;
    for (std::size_t m = 0; m < n; ++m) {
        const V* r = row(m, buf);
        W* out = in + (m + 1) * N;
        if constexpr (std::is_same_v<W, double>) {
            // Reduced weights stay within [-2 max|score|, max|score|], so
            // scores up to a quarter of the double range never overflow;
            // larger ones take the (index-safe) tiered path.
            if (!load_row_double(r, n, out + 1, std::numeric_limits<double>::max() / 4)) return false;
        } else {
            check_not_nan(r[m], m, m, "mst_heads");
            for (std::size_t l = 0; l < n; ++l) {
                check_not_nan(r[l], m, l, "mst_heads");
                out[l + 1] = to_weight<W>(r[l]);
            }
        }
        out[0] = out[m + 1];  // score(m, m): the root arc
        out[m + 1] = weight_excluded<W>();
    }
    return true;
}

/// mst_heads on `[n, n]` scores whose row m is `row(m, buf)` (contiguous, n
/// values; buf has room for n values of V).
template <class V, class Row>
std::vector<std::size_t> mst_heads_rows(std::size_t n, const Row& row, V* buf)
{
    constexpr const char* where = "mst_heads";
    if (n == 0) return {};
    if (n == 1) {
        check_not_nan(row(0, buf)[0], 0, 0, where);
        return {0};
    }
    if (n >= std::numeric_limits<std::uint32_t>::max() / 4) {
        throw length_error(msg(where, ": n = ", n, " is too large"));
    }
    const std::size_t N = n + 1;
    const std::size_t cells =
        to_index_size(checked_product("mst_heads: score graph", 2 * N, N, sizeof(tiered_weight)), where) /
        sizeof(tiered_weight);
    {
        auto& ws = mst_scratch<double>::local();
        const bool finite = mst_load<double>(n, row, buf, ws.w.get(cells));
        std::vector<std::size_t> heads;
        if (finite) heads = mst_solve<double>(n, ws);
        ws.w.trim(decode_keep_cells);
        if (finite) return heads;
    }
    // Some score is NaN (throws while loading) or infinite: rank by tier.
    auto& ws = mst_scratch<tiered_weight>::local();
    mst_load<tiered_weight>(n, row, buf, ws.w.get(cells));
    auto heads = mst_solve<tiered_weight>(n, ws);
    ws.w.trim(decode_keep_cells);
    return heads;
}

}  // namespace detail
BIAFFINE_NAMESPACE_END
