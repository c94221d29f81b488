// Tests of biaffine/detail/scorer/heads.hpp: label scores at given heads.
//
//   - golden heads_* cases (PyTorch reference): y, dX and every parameter
//     gradient through the split-list, with_splits and padded stacks;
//   - equal to gathering S[m, head(m), :] from the full scores of the same
//     scorer (independent path: the [n, n, o] GEMMs), forward, and backward
//     with a full dY that is zero except at (m, head(m), :), in eval and
//     train (same dropout seed), o = 1 and o > 1, kept and recomputed
//     activations, through the split-list, padded and layer APIs;
//   - the golden model_* and pipeline_labels* reference scores, gathered;
//   - finite differences in double for dX and every parameter;
//   - the tracker: inference keeps exactly the [n, o] outputs, scratch stays
//     within heads_cost, which is far below one [n, n, o] block.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include <xtensor/xarray.hpp>
#include <xtensor/xtensor.hpp>

#include "biaffine/biaffine.hpp"
#include "golden.hpp"

using namespace biaffine;

namespace {

const char* type_name(float) { return "float32"; }
const char* type_name(double) { return "float64"; }

#define HEADS_CHECK(what, cmp)                                                                                         \
    do {                                                                                                               \
        const golden::comparison c_ = (cmp);                                                                           \
        INFO(what << ": " << golden::describe(c_));                                                                    \
        CHECK(golden::passed(c_));                                                                                     \
    } while (0)

// A random problem: documents with uneven splits (empty and one-token ones
// included) and random split-relative heads.
struct problem {
    scorer_config cfg;
    std::vector<std::vector<int>> split_lengths;
    std::vector<xt::xtensor<double, 2>> docs;
    std::vector<std::vector<int>> heads;  // per document, relative to the split
    std::vector<xt::xtensor<double, 2>> dy;  // per split [n, o]
};

problem make_problem(std::uint64_t seed, std::size_t o, std::vector<std::vector<int>> split_lengths)
{
    std::mt19937_64 rng(seed);
    std::uniform_real_distribution<double> u(-1.0, 1.0);
    problem p;
    p.cfg.n_in = 5;
    p.cfg.hidden = 6;
    p.cfg.labels = o;
    p.cfg.seed = seed;
    p.split_lengths = std::move(split_lengths);
    for (const auto& ls : p.split_lengths) {
        std::size_t rows = 0;
        std::vector<int> h;
        for (int n : ls) {
            for (int m = 0; m < n; ++m) h.push_back(static_cast<int>(rng() % static_cast<std::uint64_t>(n)));
            rows += static_cast<std::size_t>(n);
            xt::xtensor<double, 2> g = xt::zeros<double>({static_cast<std::size_t>(n), o});
            for (auto& v : g) v = u(rng);
            p.dy.push_back(std::move(g));
        }
        xt::xtensor<double, 2> d = xt::zeros<double>({rows, p.cfg.n_in});
        for (auto& v : d) v = 2.0 * u(rng);
        p.docs.push_back(std::move(d));
        p.heads.push_back(std::move(h));
    }
    return p;
}

// Flat views of a problem's splits and heads (in precision T).
template <class T>
struct flat {
    std::vector<xt::xtensor<T, 2>> docs;
    std::vector<seq_view<const T>> items;
    std::vector<std::vector<std::size_t>> heads;  // per split
    std::vector<std::size_t> lengths;
    explicit flat(const problem& p)
    {
        for (const auto& d : p.docs) docs.push_back(xt::cast<T>(d));
        for (std::size_t d = 0; d < docs.size(); ++d) {
            std::size_t row = 0;
            for (int n : p.split_lengths[d]) {
                const auto len = static_cast<std::size_t>(n);
                items.push_back(as_const_view(docs[d]).rows_view(row, len));
                heads.emplace_back(p.heads[d].begin() + static_cast<std::ptrdiff_t>(row),
                                   p.heads[d].begin() + static_cast<std::ptrdiff_t>(row + len));
                lengths.push_back(len);
                row += len;
            }
        }
    }
};

// What a forward + backward gives: outputs per split (flattened, double),
// dX per split and the parameter gradients.
struct result {
    std::vector<std::vector<double>> y, dx;
    std::vector<std::vector<double>> grads;
};

template <class T>
std::vector<std::vector<double>> grads_of(const biaffine_scorer<T>& s)
{
    std::vector<std::vector<double>> g;
    for (const auto& p : s.parameters()) g.emplace_back(p.grad, p.grad + p.size);
    return g;
}

// Runs a split-list backprop on owning per-split gradients `g` (score or
// label arrays, turned into views by `view`) into `dx`; returns dx flattened.
template <class T, class BP, class G, class View>
std::vector<std::vector<double>> run_split_backprop(BP& bp, const std::vector<G>& g, std::vector<xt::xtensor<T, 2>>& dx,
                                                    View&& view)
{
    using gv_t = decltype(view(g[0]));
    std::vector<gv_t> gv;
    std::vector<seq_view<T>> dxv;
    for (std::size_t k = 0; k < g.size(); ++k) {
        gv.push_back(view(g[k]));
        dxv.push_back(as_view(dx[k]));
    }
    bp(span<const gv_t>(gv.data(), gv.size()), span<const seq_view<T>>(dxv.data(), dxv.size()));
    std::vector<std::vector<double>> out;
    for (const auto& d : dx) out.emplace_back(d.begin(), d.end());
    return out;
}

// The reference: full [n, n(, o)] scores, gathered at the heads; backward
// with dY zero except at (m, head(m), :).
template <class T>
result full_gathered(const problem& p, mode m)
{
    flat<T> f(p);
    biaffine_scorer<T> s(p.cfg);
    auto [Y, bp] = s.forward(f.items, m);
    const std::size_t o = p.cfg.labels, n_in = p.cfg.n_in;
    result r;
    std::vector<score_tensor<T>> g;
    std::vector<xt::xtensor<T, 2>> dx;
    for (std::size_t k = 0; k < f.items.size(); ++k) {
        const std::size_t n = f.lengths[k];
        const score_view<const T> sv = as_score_view(Y[k]);
        std::vector<double> yk;
        score_tensor<T> gk = xt::zeros<T>(s.score_shape(n));
        const score_view<const T> gv0 = as_score_view(gk);
        score_view<T> gv{const_cast<T*>(gv0.data), n, o, gv0.row_stride};
        for (std::size_t mm = 0; mm < n; ++mm)
            for (std::size_t c = 0; c < o; ++c) {
                yk.push_back(static_cast<double>(sv(mm, f.heads[k][mm], c)));
                gv(mm, f.heads[k][mm], c) = static_cast<T>(p.dy[k](mm, c));
            }
        r.y.push_back(std::move(yk));
        g.push_back(std::move(gk));
        dx.push_back(xt::xtensor<T, 2>::from_shape({n, n_in}));
    }
    r.dx = run_split_backprop<T>(bp, g, dx, [](const score_tensor<T>& a) { return as_score_view(a); });
    r.grads = grads_of(s);
    return r;
}

template <class T, class Y>
std::vector<std::vector<double>> flatten(const Y& list)
{
    std::vector<std::vector<double>> out;
    for (const auto& y : list) out.emplace_back(y.begin(), y.end());
    return out;
}

template <class T>
void compare_results(const std::string& what, const result& got, const result& want, bool backward = true)
{
    INFO(what << " (" << type_name(T()) << ")");
    REQUIRE(got.y.size() == want.y.size());
    for (std::size_t k = 0; k < got.y.size(); ++k) HEADS_CHECK("y split " << k, golden::compare_flat<T>(got.y[k], want.y[k]));
    if (!backward) return;
    REQUIRE(got.dx.size() == want.dx.size());
    for (std::size_t k = 0; k < got.dx.size(); ++k) HEADS_CHECK("dx " << k, golden::compare_flat<T>(got.dx[k], want.dx[k]));
    REQUIRE(got.grads.size() == want.grads.size());
    for (std::size_t i = 0; i < got.grads.size(); ++i)
        HEADS_CHECK("parameter gradient " << i, golden::compare_flat<T>(got.grads[i], want.grads[i]));
}

// The split-list API: forward_heads + backward (and predict_heads in eval).
template <class T>
result split_list_heads(const problem& p, mode m)
{
    flat<T> f(p);
    biaffine_scorer<T> s(p.cfg);
    auto [Y, bp] = s.forward_heads(f.items, f.heads, m);
    result r;
    r.y = flatten<T>(Y);
    std::vector<xt::xtensor<T, 2>> g, dx;
    for (std::size_t k = 0; k < f.items.size(); ++k) {
        g.push_back(xt::cast<T>(p.dy[k]));
        dx.push_back(xt::xtensor<T, 2>::from_shape({f.lengths[k], p.cfg.n_in}));
    }
    r.dx = run_split_backprop<T>(bp, g, dx, [](const xt::xtensor<T, 2>& a) { return as_const_view(a); });
    r.grads = grads_of(s);
    if (m == mode::eval) {
        CHECK(flatten<T>(s.predict_heads(f.items, f.heads)) == r.y);
        std::vector<std::vector<double>> streamed(f.items.size());
        s.predict_heads_stream(f.items, f.heads, [&](std::size_t k, seq_view<const T> y) {
            for (std::size_t i = 0; i < y.rows; ++i)
                for (std::size_t c = 0; c < y.cols; ++c) streamed[k].push_back(static_cast<double>(y(i, c)));
        });
        CHECK(streamed == r.y);
    }
    return r;
}

// The padded API: x [b, L, n_in], heads [b, L] -> [b, L, o].
template <class T>
result padded_heads(const problem& p, mode m)
{
    flat<T> f(p);
    const std::size_t b = f.items.size(), o = p.cfg.labels, n_in = p.cfg.n_in;
    std::size_t L = 0;
    for (std::size_t n : f.lengths) L = std::max(L, n);
    xt::xtensor<T, 3> x = xt::zeros<T>({b, L, n_in});
    xt::xtensor<std::int32_t, 2> h = xt::zeros<std::int32_t>({b, L});
    xt::xarray<T> dy = xt::zeros<T>({b, L, o});
    for (std::size_t k = 0; k < b; ++k)
        for (std::size_t mm = 0; mm < f.lengths[k]; ++mm) {
            for (std::size_t j = 0; j < n_in; ++j) x(k, mm, j) = f.items[k](mm, j);
            h(k, mm) = static_cast<std::int32_t>(f.heads[k][mm]);
            for (std::size_t c = 0; c < o; ++c) dy(k, mm, c) = static_cast<T>(p.dy[k](mm, c));
        }
    biaffine_scorer<T> s(p.cfg);
    auto [y, bp] = s.forward_heads_padded(x, f.lengths, h, m);
    REQUIRE(golden::shape_of(y) == (std::vector<std::size_t>{b, L, o}));
    const score_array<T> dyv = dy;
    const tensor<T, 3> dx = bp(dyv);
    result r;
    for (std::size_t k = 0; k < b; ++k) {
        std::vector<double> yk, dxk;
        for (std::size_t mm = 0; mm < f.lengths[k]; ++mm) {
            for (std::size_t c = 0; c < o; ++c) yk.push_back(static_cast<double>(y(k, mm, c)));
            for (std::size_t j = 0; j < n_in; ++j) dxk.push_back(static_cast<double>(dx(k, mm, j)));
        }
        for (std::size_t mm = f.lengths[k]; mm < L; ++mm)
            for (std::size_t j = 0; j < n_in; ++j) CHECK(dx(k, mm, j) == T(0));
        r.y.push_back(std::move(yk));
        r.dx.push_back(std::move(dxk));
    }
    r.grads = grads_of(s);
    if (m == mode::eval) {
        const score_array<T> yp = s.predict_heads_padded(x, f.lengths, h);
        CHECK(yp == y);
    }
    return r;
}

// The layer stack over documents: with_splits (with_minibatch (with_pad?)).
// dX per document is split back into per-split rows for the comparison.
template <class T, class Pipe>
result layer_heads(Pipe& pipe, const biaffine_scorer<T>& s, const problem& p, const flat<T>& f, mode m)
{
    auto [Y, bp] = pipe.forward_heads(f.docs, p.split_lengths, p.heads, m);
    result r;
    r.y = flatten<T>(Y);
    std::vector<xt::xtensor<T, 2>> g;
    for (const auto& d : p.dy) g.push_back(xt::cast<T>(d));
    const auto dX = bp(Pipe::head_grad_views(g));
    for (std::size_t d = 0; d < dX.size(); ++d) {
        std::size_t row = 0;
        for (int n : p.split_lengths[d]) {
            std::vector<double> dxk;
            for (std::size_t i = row; i < row + static_cast<std::size_t>(n); ++i)
                for (std::size_t j = 0; j < p.cfg.n_in; ++j) dxk.push_back(static_cast<double>(dX[d](i, j)));
            r.dx.push_back(std::move(dxk));
            row += static_cast<std::size_t>(n);
        }
    }
    r.grads = grads_of(s);
    if (m == mode::eval) {
        // predict batches without forward's kept bytes, so its batches (and
        // the products' rounding) may differ: equal to the tolerance.
        result pr;
        pr.y = flatten<T>(pipe.predict_heads(f.docs, p.split_lengths, p.heads));
        compare_results<T>("predict_heads vs forward_heads", pr, r, false);
        std::vector<std::vector<double>> streamed(r.y.size());
        std::vector<int> seen(r.y.size(), 0);
        pipe.predict_heads_stream(f.docs, p.split_lengths, p.heads, [&](std::size_t k, std::size_t, seq_view<const T> y) {
            REQUIRE(k < seen.size());
            ++seen[k];
            for (std::size_t i = 0; i < y.rows; ++i)
                for (std::size_t c = 0; c < y.cols; ++c) streamed[k].push_back(static_cast<double>(y(i, c)));
        });
        pr.y = streamed;
        compare_results<T>("predict_heads_stream vs forward_heads", pr, r, false);
        for (int c : seen) CHECK(c == 1);
    }
    return r;
}

template <class T>
void check_against_full(std::size_t o, mode m, train_output outs, double dropout, bool recompute)
{
    const std::vector<std::vector<int>> lengths{{3, 0, 1, 5}, {7}, {}, {2, 9, 4}};
    problem p = make_problem(1234 + o, o, lengths);
    p.cfg.train_outputs = outs;
    p.cfg.dropout = dropout;
    p.cfg.recompute_in_backward = recompute;
    INFO("o " << o << ", " << (m == mode::train ? "train" : "eval") << ", "
              << (outs == train_output::logits ? "logits" : "probabilities") << ", dropout " << dropout
              << (recompute ? ", recompute" : ""));
    const result want = full_gathered<T>(p, m);
    compare_results<T>("split list", split_list_heads<T>(p, m), want);
    compare_results<T>("padded", padded_heads<T>(p, m), want);
    flat<T> f(p);
    {
        biaffine_scorer<T> s(p.cfg);
        auto pipe = with_splits(s);
        compare_results<T>("with_splits(scorer)", layer_heads(pipe, s, p, f, m), want);
    }
    // A small budget: several batches, on top of what a training forward
    // keeps until backprop (paid out of the budget: the batcher's
    // kept_bytes, with_splits' heads spans, lengths and dX views).
    for (bool small : {true, false}) {
        for (std::size_t threads : {std::size_t(1), std::size_t(2)}) {
            biaffine_scorer<T> s(p.cfg);
            batch_options opts;
            opts.threads = threads;
            opts.buffer = 3;
            const std::size_t n = f.items.size();
            const std::uint64_t bytes =
                small ? with_minibatch_by_padded_size(s, budget::items(1), opts).template kept_bytes<true>(n, mode::train) +
                            n * (sizeof(span<const int>) + sizeof(std::size_t) + sizeof(seq_view<T>)) + 2048
                      : std::uint64_t(1) << 20;
            auto pipe = with_splits(with_minibatch_by_padded_size(s, budget::bytes(bytes), opts));
            // Several batches draw several dropout seeds: only equal to one
            // full forward without dropout, or with one batch.
            const bool one_seed = dropout == 0.0;
            if (!one_seed) continue;
            compare_results<T>("batched bytes " + std::to_string(bytes) + " threads " + std::to_string(threads),
                               layer_heads(pipe, s, p, f, m), want);
            if (small) CHECK(pipe.inner().batch_count() > 2);
        }
    }
    if (dropout == 0.0) {
        biaffine_scorer<T> s(p.cfg);
        auto pipe = with_splits(with_minibatch_by_padded_size(with_pad_seq_unpad_matrix(s), budget::items(12)));
        compare_results<T>("batched pad/unpad", layer_heads(pipe, s, p, f, m), want);
    }
    {
        // One batch through every layer: the same dropout seed as the full path.
        biaffine_scorer<T> s(p.cfg);
        auto pipe = with_splits(with_minibatch_by_padded_size(with_pad_seq_unpad_matrix(s), budget::items(1000)));
        compare_results<T>("one batch pad/unpad", layer_heads(pipe, s, p, f, m), want);
    }
}

}  // namespace

TEST_CASE("labels at given heads equal the full scores gathered at the heads, forward and backward, every API",
          "[scorer][heads]")
{
    for (std::size_t o : {std::size_t(1), std::size_t(4)}) {
        for (bool recompute : {false, true}) {
            check_against_full<double>(o, mode::eval, train_output::probabilities, 0.0, recompute);
            check_against_full<float>(o, mode::eval, train_output::probabilities, 0.0, recompute);
            check_against_full<double>(o, mode::train, train_output::logits, 0.0, recompute);
            check_against_full<float>(o, mode::train, train_output::logits, 0.0, recompute);
            check_against_full<double>(o, mode::train, train_output::logits, 0.3, recompute);
            check_against_full<float>(o, mode::train, train_output::logits, 0.3, recompute);
        }
    }
    // With o > 1 the training softmax runs over the labels on both paths.
    for (bool recompute : {false, true}) {
        check_against_full<double>(5, mode::train, train_output::probabilities, 0.0, recompute);
        check_against_full<float>(5, mode::train, train_output::probabilities, 0.0, recompute);
        check_against_full<double>(5, mode::train, train_output::probabilities, 0.25, recompute);
        check_against_full<float>(5, mode::train, train_output::probabilities, 0.25, recompute);
    }
}

TEST_CASE("labels at given heads with o == 1 in training on probabilities: a softmax over one label", "[scorer][heads]")
{
    // Documented: the heads path normalises over the labels, so one label
    // gives exactly 1 and no gradient reaches the parameters.
    problem p = make_problem(7, 1, {{4, 2}});
    flat<double> f(p);
    biaffine_scorer<double> s(p.cfg);
    auto [Y, bp] = s.forward_heads(f.items, f.heads, mode::train);
    for (const auto& y : Y)
        for (double v : y) CHECK(v == 1.0);
    std::vector<xt::xtensor<double, 2>> dx{xt::zeros<double>({4, 5}), xt::zeros<double>({2, 5})};
    std::vector<seq_view<const double>> gv{as_const_view(p.dy[0]), as_const_view(p.dy[1])};
    std::vector<seq_view<double>> dxv{as_view(dx[0]), as_view(dx[1])};
    bp(span<const seq_view<const double>>(gv.data(), 2), span<const seq_view<double>>(dxv.data(), 2));
    for (const auto& g : grads_of(s))
        for (double v : g) CHECK(v == 0.0);
}

// ------------------------------------------------------------------ golden

namespace {

// The scorer config a golden case's weights imply (dropout 0).
scorer_config golden_config(const std::string& path, std::size_t n_in)
{
    const xt::xarray<double> wh = golden::load_rank<double>(path, "head_weight", 2);
    const xt::xarray<double> w = golden::load_rank<double>(path, "bilinear_weight", 3);
    scorer_config cfg;
    cfg.n_in = n_in;
    cfg.hidden = wh.shape()[0];
    cfg.labels = w.shape()[0];
    cfg.bias_u = w.shape()[1] == cfg.hidden + 1;
    cfg.bias_v = w.shape()[2] == cfg.hidden + 1;
    return cfg;
}

// Loads a golden case's five parameters into `s` (shapes checked by set_parameter).
template <class T>
void golden_parameters(biaffine_scorer<T>& s, const std::string& path)
{
    for (const auto& p : s.parameters()) s.set_parameter(p.name, golden::load<double>(path, p.name, p.shape));
}

// `copies` > 1: the case's documents `copies` times over, so a case with
// more splits (the same golden values repeated, parameter gradients summed
// `copies` times).
template <class T>
void check_heads_case(const golden::case_dir& c, int copies = 1)
{
    INFO("case " << c.path << " (" << type_name(T()) << "), " << copies << " copies");
    const int n_docs = golden::load<int>(c.path, "n_docs", {1})(0);
    const int n_splits = golden::load<int>(c.path, "n_splits", {1})(0);
    const int train = golden::load<int>(c.path, "train", {1})(0);
    REQUIRE((train == 0 || train == 1));
    const mode m = train == 1 ? mode::train : mode::eval;
    std::vector<xt::xtensor<T, 2>> docs;
    std::vector<xt::xarray<double>> dx_ref;
    std::vector<std::vector<int>> lens, heads;
    std::vector<std::size_t> flat_lens;
    std::size_t n_in = 0;
    for (int d = 0; d < n_docs; ++d) {
        const std::string ds = "doc" + std::to_string(d);
        const xt::xarray<double> doc = golden::load_rank<double>(c.path, ds, 2);
        n_in = doc.shape()[1];
        const std::size_t rows = doc.shape()[0];
        const xt::xarray<int> l = golden::load_rank<int>(c.path, ds + "_split_lengths", 1);
        const xt::xarray<int> h = golden::load<int>(c.path, ds + "_heads", {rows});
        dx_ref.push_back(golden::load<double>(c.path, ds + "_dx", {rows, n_in}));
        docs.push_back(xt::cast<T>(doc));
        lens.emplace_back(l.begin(), l.end());
        heads.emplace_back(h.begin(), h.end());
        for (int v : l) flat_lens.push_back(static_cast<std::size_t>(v));
    }
    REQUIRE(flat_lens.size() == static_cast<std::size_t>(n_splits));
    const scorer_config cfg = golden_config(c.path, n_in);
    const std::size_t o = cfg.labels;
    std::vector<xt::xarray<double>> y_ref;
    std::vector<xt::xtensor<T, 2>> dy;
    for (std::size_t k = 0; k < flat_lens.size(); ++k) {
        y_ref.push_back(golden::load<double>(c.path, "split" + std::to_string(k) + "_y", {flat_lens[k], o}));
        dy.push_back(xt::cast<T>(golden::load<double>(c.path, "split" + std::to_string(k) + "_dy", {flat_lens[k], o})));
    }
    for (auto* list : {&y_ref, &dx_ref}) {
        const std::vector<xt::xarray<double>> one = *list;
        for (int r = 1; r < copies; ++r) list->insert(list->end(), one.begin(), one.end());
    }
    for (int r = 1; r < copies; ++r) {
        for (int d = 0; d < n_docs; ++d) {
            docs.push_back(docs[d]);
            lens.push_back(lens[d]);
            heads.push_back(heads[d]);
        }
        for (int k = 0; k < n_splits; ++k) dy.push_back(dy[k]);
    }
    const std::size_t max_len = *std::max_element(flat_lens.begin(), flat_lens.end());
    auto run = [&](const std::string& what, auto make_pipe) {
        INFO(what);
        biaffine_scorer<T> s(cfg);
        golden_parameters(s, c.path);
        auto pipe = make_pipe(s);
        auto [Y, bp] = pipe.forward_heads(docs, lens, heads, m);
        REQUIRE(Y.size() == y_ref.size());
        for (std::size_t k = 0; k < Y.size(); ++k) HEADS_CHECK("y split " << k, golden::compare<T>(Y[k], y_ref[k]));
        if (m == mode::eval) {
            const score_list<T> Yp = pipe.predict_heads(docs, lens, heads);
            for (std::size_t k = 0; k < Yp.size(); ++k)
                HEADS_CHECK("predict y split " << k, golden::compare<T>(Yp[k], y_ref[k]));
        }
        const auto dX = bp(decltype(pipe)::head_grad_views(dy));
        for (std::size_t d = 0; d < dX.size(); ++d) HEADS_CHECK("dx doc " << d, golden::compare<T>(dX[d], dx_ref[d]));
        for (const auto& p : s.parameters()) {
            const xt::xarray<double> ref = golden::load<double>(c.path, std::string("d") + p.name, p.shape) * copies;
            xt::xarray<double> got = xt::zeros<double>(p.shape);
            std::copy(p.grad, p.grad + p.size, got.begin());
            HEADS_CHECK(std::string("d") + p.name, golden::compare<T>(got, ref));
        }
    };
    run("with_splits(scorer)", [](biaffine_scorer<T>& s) { return with_splits(s); });
    run("with_splits(batched bytes)", [&](biaffine_scorer<T>& s) {
        return with_splits(with_minibatch_by_padded_size(
            s, budget::bytes(golden::byte_budget<true>(s, flat_lens.size() * copies, max_len, m))));
    });
    run("with_splits(batched pad/unpad)", [](biaffine_scorer<T>& s) {
        return with_splits(with_minibatch_by_padded_size(with_pad_seq_unpad_matrix(s), budget::items(6)));
    });
}

}  // namespace

TEST_CASE("labels at given heads match every heads_* golden case (y, dx, every parameter gradient)",
          "[scorer][heads][golden]")
{
    bool is_default = false;
    golden::dir(&is_default);
    const auto cs = golden::cases_of(golden::kind::heads);
    if (is_default) REQUIRE(cs.size() >= 2);
    for (const auto& c : cs) {
        check_heads_case<double>(c);
        check_heads_case<float>(c);
        // A case of three times as many splits: the budgets follow the case.
        check_heads_case<double>(c, 3);
    }
}

namespace {

// model_*: the reference's padded scores y [b, L, L(, o)], gathered at random
// heads. Training with o == 1 normalises over heads in the reference and over
// the label here (documented), so only its logits... none: those are skipped.
template <class T>
void check_model_gathered(const golden::case_dir& c)
{
    INFO("case " << c.path << " (" << type_name(T()) << ")");
    const xt::xarray<double> x64 = golden::load_rank<double>(c.path, "x", 3);
    const std::size_t b = x64.shape()[0], L = x64.shape()[1], n_in = x64.shape()[2];
    const xt::xarray<int> len = golden::load<int>(c.path, "lengths", {b});
    const int train = golden::load<int>(c.path, "train", {1})(0);
    biaffine_scorer<T> s(golden_config(c.path, n_in));
    golden_parameters(s, c.path);
    const std::size_t o = s.labels();
    if (train == 1 && o == 1) return;
    const xt::xarray<double> y64 = golden::load_rank<double>(c.path, "y", o == 1 ? 3 : 4);
    std::mt19937_64 rng(99);
    xt::xtensor<std::int64_t, 2> h = xt::zeros<std::int64_t>({b, L});
    std::vector<double> want;
    for (std::size_t k = 0; k < b; ++k)
        for (std::size_t mm = 0; mm < static_cast<std::size_t>(len(k)); ++mm) {
            const std::size_t hd = rng() % static_cast<std::size_t>(len(k));
            h(k, mm) = static_cast<std::int64_t>(hd);
            for (std::size_t cc = 0; cc < o; ++cc) want.push_back(o == 1 ? y64(k, mm, hd) : y64(k, mm, hd, cc));
        }
    const xt::xtensor<T, 3> x = xt::cast<T>(x64);
    auto [y, bp] = s.forward_heads_padded(x, len, h, train == 1 ? mode::train : mode::eval);
    std::vector<double> got;
    for (std::size_t k = 0; k < b; ++k)
        for (std::size_t mm = 0; mm < static_cast<std::size_t>(len(k)); ++mm)
            for (std::size_t cc = 0; cc < o; ++cc) got.push_back(static_cast<double>(y(k, mm, cc)));
    HEADS_CHECK("gathered y", golden::compare_flat<T>(got, want));
}

// pipeline_labels*: per-split reference logits [n, n, o] gathered at random heads.
template <class T>
void check_pipeline_gathered(const golden::case_dir& c)
{
    INFO("case " << c.path << " (" << type_name(T()) << ")");
    const int n_docs = golden::load<int>(c.path, "n_docs", {1})(0);
    std::vector<xt::xtensor<T, 2>> docs;
    std::vector<std::vector<int>> lens, heads;
    std::vector<std::size_t> flat_lens;
    std::mt19937_64 rng(5);
    for (int d = 0; d < n_docs; ++d) {
        const std::string ds = "doc" + std::to_string(d);
        const xt::xarray<double> doc = golden::load_rank<double>(c.path, ds, 2);
        const xt::xarray<int> l = golden::load_rank<int>(c.path, ds + "_split_lengths", 1);
        docs.push_back(xt::cast<T>(doc));
        lens.emplace_back(l.begin(), l.end());
        std::vector<int> h;
        for (int n : l) {
            flat_lens.push_back(static_cast<std::size_t>(n));
            for (int mm = 0; mm < n; ++mm) h.push_back(static_cast<int>(rng() % static_cast<std::uint64_t>(n)));
        }
        heads.push_back(std::move(h));
    }
    biaffine_scorer<T> s(golden_config(c.path, docs.at(0).shape()[1]));
    golden_parameters(s, c.path);
    const std::size_t o = s.labels();
    auto pipe = with_splits(with_minibatch_by_padded_size(s, budget::bytes(1 << 16)));
    const score_list<T> Y = pipe.predict_heads(docs, lens, heads);
    REQUIRE(Y.size() == flat_lens.size());
    std::size_t k = 0;
    for (std::size_t d = 0; d < docs.size(); ++d) {
        std::size_t row = 0;
        for (int n : lens[d]) {
            const xt::xarray<double> ref = golden::load_rank<double>(c.path, "split" + std::to_string(k) + "_y", o == 1 ? 2 : 3);
            std::vector<double> got(Y[k].begin(), Y[k].end()), want;
            for (std::size_t mm = 0; mm < static_cast<std::size_t>(n); ++mm) {
                const auto hd = static_cast<std::size_t>(heads[d][row + mm]);
                for (std::size_t cc = 0; cc < o; ++cc) want.push_back(o == 1 ? ref(mm, hd) : ref(mm, hd, cc));
            }
            HEADS_CHECK("split " << k, golden::compare_flat<T>(got, want));
            row += static_cast<std::size_t>(n);
            ++k;
        }
    }
}

}  // namespace

TEST_CASE("labels at given heads equal the golden model_* and pipeline_labels* scores gathered at the heads",
          "[scorer][heads][golden]")
{
    bool is_default = false;
    golden::dir(&is_default);
    std::size_t models = 0, pipelines = 0;
    for (const auto& c : golden::cases_of(golden::kind::model)) {
        check_model_gathered<double>(c);
        check_model_gathered<float>(c);
        ++models;
    }
    for (const auto& c : golden::cases_of(golden::kind::pipeline)) {
        if (c.name.rfind("pipeline_labels", 0) != 0) continue;
        check_pipeline_gathered<double>(c);
        check_pipeline_gathered<float>(c);
        ++pipelines;
    }
    if (is_default) {
        CHECK(models >= 3);
        CHECK(pipelines >= 1);
    }
}

// ------------------------------------------------------- finite differences

namespace {

// L = sum_k <dy_k, y_k> on a fresh scorer per evaluation (so dropout draws
// the same masks every time), parameters `v`, documents `docs`.
double heads_loss(const problem& p, const std::vector<std::vector<double>>& v, const std::vector<xt::xtensor<double, 2>>& docs,
                  mode m)
{
    biaffine_scorer<double> s(p.cfg);
    auto ps = s.parameters();
    for (std::size_t i = 0; i < ps.size(); ++i) std::copy(v[i].begin(), v[i].end(), ps[i].data);
    auto pipe = with_splits(s);
    auto [Y, bp] = pipe.forward_heads(docs, p.split_lengths, p.heads, m);
    double l = 0;
    for (std::size_t k = 0; k < Y.size(); ++k)
        for (std::size_t i = 0; i < Y[k].size(); ++i) l += Y[k].data()[i] * p.dy[k].data()[i];
    return l;
}

void check_fd(std::size_t o, mode m, train_output outs, double dropout, bool bias_u, bool bias_v)
{
    problem p = make_problem(77 + o, o, {{3, 1, 0}, {5, 2}});
    p.cfg.train_outputs = outs;
    p.cfg.dropout = dropout;
    p.cfg.bias_u = bias_u;
    p.cfg.bias_v = bias_v;
    INFO("o " << o << (m == mode::train ? " train" : " eval") << " dropout " << dropout << " bias " << bias_u
              << bias_v);
    biaffine_scorer<double> s(p.cfg);
    std::vector<std::vector<double>> v;
    for (const auto& q : s.parameters()) v.emplace_back(q.data, q.data + q.size);
    // Analytic.
    auto pipe = with_splits(s);
    auto [Y, bp] = pipe.forward_heads(p.docs, p.split_lengths, p.heads, m);
    const auto dX = bp(decltype(pipe)::head_grad_views(p.dy));
    const auto an = grads_of(s);
    const double eps = 1e-6, tol = 1e-6;
    double worst = 0;
    for (std::size_t i = 0; i < v.size(); ++i)
        for (std::size_t j = 0; j < v[i].size(); ++j) {
            auto vp = v, vm = v;
            vp[i][j] += eps;
            vm[i][j] -= eps;
            const double fd = (heads_loss(p, vp, p.docs, m) - heads_loss(p, vm, p.docs, m)) / (2 * eps);
            worst = std::max(worst, std::abs(fd - an[i][j]) / std::max(1.0, std::abs(an[i][j])));
        }
    CHECK(worst < tol);
    double worst_x = 0;
    for (std::size_t d = 0; d < p.docs.size(); ++d)
        for (std::size_t i = 0; i < p.docs[d].size(); ++i) {
            auto dp = p.docs, dm = p.docs;
            dp[d].data()[i] += eps;
            dm[d].data()[i] -= eps;
            const double fd = (heads_loss(p, v, dp, m) - heads_loss(p, v, dm, m)) / (2 * eps);
            worst_x = std::max(worst_x, std::abs(fd - dX[d].data()[i]) / std::max(1.0, std::abs(dX[d].data()[i])));
        }
    CHECK(worst_x < tol);
}

}  // namespace

TEST_CASE("labels at given heads: dX and every parameter gradient match finite differences in double",
          "[scorer][heads][gradients]")
{
    check_fd(1, mode::eval, train_output::probabilities, 0.0, true, true);
    check_fd(3, mode::eval, train_output::probabilities, 0.0, false, true);
    check_fd(3, mode::train, train_output::probabilities, 0.0, true, false);
    check_fd(4, mode::train, train_output::probabilities, 0.4, true, true);
    check_fd(2, mode::train, train_output::logits, 0.4, false, false);
}

// ----------------------------------------------------------------- memory

TEST_CASE("labels at given heads: inference keeps exactly the [n, o] outputs, scratch within heads_cost, no n^2 o block",
          "[scorer][heads][memory]")
{
    for (std::size_t o : {std::size_t(1), std::size_t(50)}) {
        problem p = make_problem(3, o, {{40, 0, 1, 64, 7}});
        flat<float> f(p);
        biaffine_scorer<float> s(p.cfg);
        std::uint64_t outputs = 0;
        const std::size_t L = 64;
        for (std::size_t n : f.lengths) outputs += std::uint64_t(n) * o * sizeof(float);
        INFO("o " << o);
        const std::uint64_t one_block = std::uint64_t(L) * L * o * sizeof(float);
        const batch_cost c = s.heads_cost(f.items.size(), L, mode::eval);
        CHECK(c.outputs == std::uint64_t(f.items.size()) * L * o * sizeof(float));
        CHECK(c.scratch < s.cost(f.items.size(), L, mode::eval).scratch);
        {
            const std::uint64_t before = tracker().current_bytes();
            scoped_peak sp;
            const memory_stats s0 = tracker().stats();
            const score_list<float> Y = s.predict_heads(f.items, f.heads);
            const std::uint64_t after = tracker().current_bytes();
            // Exactly the outputs stay: the [n, o] tensors and the list.
            CHECK(after - before == outputs + Y.capacity() * sizeof(score_tensor<float>));
            const std::uint64_t work = sp.work_peak_bytes() - (s0.current_bytes - s0.output_bytes);
            CHECK(work > 0);
            CHECK(work <= c.scratch);
            // The scratch peak is U, V, T, X, offsets and head rows - an
            // [n, n, o] block of the longest split would not fit beside them.
            if (o == 50) CHECK(work < one_block);
        }
        {
            workspace_scope ws(c.scratch);
            scoped_peak sp;
            const memory_stats s0 = tracker().stats();
            s.predict_heads_stream(f.items, f.heads, [](std::size_t, seq_view<const float>) {});
            CHECK(sp.work_peak_bytes() == s0.current_bytes - s0.output_bytes);  // all carved from the block
            CHECK(tracker().stats().output_bytes == s0.output_bytes);
        }
        // Training: the saved state and the scratch stay within the report.
        for (bool recompute : {false, true}) {
            problem q = p;
            q.cfg.recompute_in_backward = recompute;
            biaffine_scorer<float> st(q.cfg);
            st.zero_grad();  // the gradients exist before: they are not what a forward keeps
            const batch_cost ct = st.heads_cost(f.items.size(), L, mode::train);
            workspace_scope ws(ct.scratch);
            scoped_peak sp;
            const memory_stats s0 = tracker().stats();
            auto [Y, bp] = st.forward_heads(f.items, f.heads, mode::train);
            std::vector<xt::xtensor<float, 2>> g, dx;
            for (std::size_t k = 0; k < f.items.size(); ++k) {
                g.push_back(xt::ones<float>({f.lengths[k], o}));
                dx.push_back(xt::zeros<float>({f.lengths[k], q.cfg.n_in}));
            }
            std::vector<seq_view<const float>> gv;
            std::vector<seq_view<float>> dxv;
            for (std::size_t k = 0; k < g.size(); ++k) {
                gv.push_back(as_const_view(g[k]));
                dxv.push_back(as_view(dx[k]));
            }
            const memory_stats s1 = tracker().stats();
            const std::uint64_t work0 = s0.current_bytes - s0.output_bytes;
            const std::uint64_t saved = (s1.current_bytes - s1.output_bytes) - work0;
            INFO("recompute " << recompute << ": kept for backward " << saved << ", reported " << ct.saved);
            CHECK(saved > 0);
            CHECK(saved <= ct.saved);
            bp(span<const seq_view<const float>>(gv.data(), gv.size()), span<const seq_view<float>>(dxv.data(), dxv.size()));
            // Backward carves everything from the block: no work peak above the saved state.
            CHECK(sp.work_peak_bytes() == work0 + saved);
        }
    }
}
