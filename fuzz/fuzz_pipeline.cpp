// fuzz/fuzz_pipeline.cpp - with_splits(with_minibatch_by_padded_size(scorer, budget)) on
// arbitrary documents, split-length vectors, shapes, budgets and options.
//
// Valid input: every split's scores equal the scorer run on that split alone
// (predict, predict_stream, forward in eval and train), and backprop gives
// the per-document input gradients and parameter gradients of running each
// split alone. Invalid input (split lengths that don't sum to the rows,
// negative lengths, wrong widths, a missing list, a zero budget or buffer, a
// budget too small under the throw policy, a gradient of the wrong shape, a
// second backprop): the documented biaffine::error subclass. Training
// returns probabilities or logits (cfg.train_outputs); streamed views go
// through the checked decoders (mst_heads / argmax_heads on a view,
// labels_at_heads on label views), with parameters
// and gradients untouched - never a crash, never another exception. Sizes are
// tiny so that executions are fast.
//
// Labels at given heads (ops 4-6): random split-relative heads per token;
// valid ones give each split's [n, o] equal to the full scores of that split
// alone gathered at the heads, and backprop equal to each split's own
// forward_heads; a missing list, a wrong length or an index outside the
// split throws head_error (after any structural error of the documents).
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <vector>

#include "biaffine/detail/eigen.hpp"  // Eigen, without GCC 12's AVX-512 false positives
#include <xtensor/xtensor.hpp>

#include "biaffine/biaffine.hpp"
#include "fuzz_input.hpp"

using namespace biaffine;

namespace {

// Outcome counts, printed at exit when FUZZ_STATS is set (to see that the
// inputs reach the valid paths, not only the errors).
struct outcome_counts {
    unsigned long ok[7] = {0, 0, 0, 0, 0, 0, 0}, budget = 0, length = 0, shape = 0, bad_gradient = 0, heads = 0;
    ~outcome_counts()
    {
        if (std::getenv("FUZZ_STATS") == nullptr) return;
        std::fprintf(stderr, "ok predict %lu, stream %lu, eval %lu, train %lu, heads predict %lu, stream %lu, "
                     "forward %lu; budget_error %lu, length_error %lu, shape_error %lu, head_error %lu, bad gradient "
                     "%lu\n", ok[0], ok[1], ok[2], ok[3], ok[4], ok[5], ok[6], budget, length, shape, heads,
                     bad_gradient);
    }
} counts;

struct spec {
    scorer_config cfg;
    bool padded = false;      // with_pad_seq_unpad_matrix around the scorer
    int budget_kind = 0;      // 0 items, 1 bytes, 2 zero
    std::uint64_t budget_value = 1;
    batch_options opts;
    int op = 0;               // 0 predict, 1 predict_stream, 2 forward eval, 3 forward train,
                              // 4 predict_heads, 5 predict_heads_stream, 6 forward_heads (eval or train)
    bool heads_train = false;
    std::vector<std::vector<int>> heads;  // per document, split-relative
    bool heads_ok = true;
    bool bad_gradient = false;
    std::vector<std::vector<int>> lengths;
    std::vector<std::size_t> rows, widths;
    bool structural_ok = true;
};

spec decode(fuzz::input& in)
{
    spec s;
    s.cfg.n_in = in.small(1, 4);
    s.cfg.hidden = in.small(1, 4);
    s.cfg.labels = in.small(1, 3);
    s.cfg.bias_u = in.flag();
    s.cfg.bias_v = in.flag();
    s.cfg.recompute_in_backward = in.flag();
    s.cfg.train_outputs = in.flag() ? train_output::logits : train_output::probabilities;
    s.cfg.seed = in.u8();
    s.padded = in.flag();
    const std::uint8_t bk = in.u8();
    s.budget_kind = bk % 16 == 0 ? 2 : bk % 2;
    s.budget_value = s.budget_kind == 0 ? 1 + in.u8() % 64 : 1 + std::uint64_t(in.u16()) * (in.flag() ? 1 : 16);
    s.opts.buffer = in.flag() ? in.small(0, 8) : 256;
    s.opts.oversize = in.u8() % 4 == 0 ? oversize_policy::throw_error : oversize_policy::run_alone;
    s.opts.threads = in.u8() % 8 == 0 ? 2 + in.u8() % 2 : 1;
    s.op = in.u8() % 7;
    s.heads_train = in.flag();
    s.bad_gradient = in.u8() % 8 == 0;
    const std::size_t n_docs = in.small(0, 4);
    for (std::size_t d = 0; d < n_docs; ++d) {
        std::vector<int> ls(in.small(0, 5));
        long sum = 0;
        for (int& l : ls) {
            const std::uint8_t b = in.u8();
            l = b < 232 ? b % 8 : b < 244 ? -1 - b % 3 : b % 16;
            if (l < 0) s.structural_ok = false;
            sum += l;
        }
        const std::uint8_t shape = in.u8();
        s.widths.push_back(shape % 16 == 1 ? s.cfg.n_in + 1 : s.cfg.n_in);
        s.rows.push_back(shape % 16 == 2 ? in.small(0, 12) : static_cast<std::size_t>(sum < 0 ? 0 : sum));
        if (s.widths.back() != s.cfg.n_in || static_cast<long>(s.rows.back()) != sum) s.structural_ok = false;
        s.lengths.push_back(std::move(ls));
    }
    // Heads: mostly valid, now and then outside the split, a list of the
    // wrong length or a missing list.
    for (std::size_t d = 0; d < s.lengths.size(); ++d) {
        std::vector<int> h;
        for (int l : s.lengths[d]) {
            for (int m = 0; m < l; ++m) {
                const std::uint8_t b = in.u8();
                h.push_back(b < 248 ? b % l : (b % 2 ? l + b % 3 : -1 - b % 2));
                if (b >= 248) s.heads_ok = false;
            }
        }
        const std::uint8_t extra = in.u8();
        if (extra % 32 == 5) {
            h.push_back(0);
            s.heads_ok = false;
        }
        s.heads.push_back(std::move(h));
    }
    if (in.u8() % 32 == 7 && !s.heads.empty()) {
        s.heads.pop_back();
        s.heads_ok = false;
    }
    const std::uint8_t lists = in.u8();
    if (lists % 16 == 3) {
        s.lengths.push_back({});
        s.structural_ok = false;
    } else if (lists % 16 == 4 && !s.lengths.empty()) {
        s.lengths.pop_back();
        s.structural_ok = false;
    }
    return s;
}

template <class T>
bool close(T a, T b)
{
    if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
    if (std::isinf(a) || std::isinf(b)) return a == b;
    const double tol = sizeof(T) == 8 ? 1e-9 : 1e-3;
    return std::abs(static_cast<double>(a) - static_cast<double>(b)) <= tol * (1.0 + std::abs(static_cast<double>(b)));
}

template <class A, class B>
bool all_close(const A& a, const B& b)
{
    if (a.size() != b.size()) return false;
    auto ib = b.begin();
    for (auto ia = a.begin(); ia != a.end(); ++ia, ++ib) {
        if (!close(*ia, *ib)) return false;
    }
    return true;
}

template <class T>
std::vector<T> grads_of(biaffine_scorer<T>& s)
{
    std::vector<T> g;
    for (const auto& p : s.parameters()) g.insert(g.end(), p.grad, p.grad + p.size);
    return g;
}

template <class T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b)
{
    return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0);
}

// A token value: k / 16 for k in [-128, 127], now and then NaN or +-Inf.
template <class T>
T value_of(fuzz::input& in)
{
    const std::uint8_t b = in.u8();
    if (b == 127 && in.u8() < 24) {
        const std::uint8_t which = in.u8() % 3;
        return which == 0 ? std::numeric_limits<T>::quiet_NaN()
                          : (which == 1 ? 1 : -1) * std::numeric_limits<T>::infinity();
    }
    return static_cast<T>(static_cast<std::int8_t>(b)) / T(16);
}

// Whether f() throws an E (anything else propagates).
template <class E, class F>
bool throws(F&& f)
{
    try {
        f();
    } catch (const E&) {
        return true;
    }
    return false;
}

// The checked decoders on a streamed view: on arc scores the same heads as
// the pointer form (or the same error, for NaN); on label scores a
// shape_error, and labels_at_heads picks each token's best label at a head,
// checked against a plain scan.
template <class T>
void check_view_decoders(const score_view<const T>& v)
{
    auto outcome = [](auto&& decode) -> std::vector<std::size_t> {
        try {
            return decode();
        } catch (const error&) {
            return {std::size_t(-1)};  // NaN scores: both forms refuse them
        }
    };
    if (v.labels == 1) {
        FUZZ_CHECK(outcome([&] { return mst_heads(v); }) == outcome([&] { return mst_heads(v.data, v.n, v.row_stride); }));
        FUZZ_CHECK(outcome([&] { return argmax_heads(v); }) ==
                   outcome([&] { return argmax_heads(v.data, v.n, v.row_stride); }));
        return;
    }
    FUZZ_CHECK(throws<shape_error>([&] { mst_heads(v); }) || v.n == 0);
    // Heads: token m's head is (m + 1) mod n.
    std::vector<std::size_t> heads(v.n), want(v.n);
    bool nan = false;
    for (std::size_t m = 0; m < v.n; ++m) {
        heads[m] = (m + 1) % v.n;
        const T* cell = v.data + static_cast<std::ptrdiff_t>(m) * v.row_stride + heads[m] * v.labels;
        for (std::size_t l = 0; l < v.labels; ++l) {
            if (cell[l] != cell[l]) nan = true;
            if (cell[l] > cell[want[m]]) want[m] = l;
        }
    }
    if (nan) FUZZ_CHECK(throws<error>([&] { labels_at_heads(v, heads); }));
    else FUZZ_CHECK(labels_at_heads(v, heads) == want);
    if (v.n != 0) {
        heads[0] = v.n;  // out of range: refused
        FUZZ_CHECK(throws<length_error>([&] { labels_at_heads(v, heads); }));
    }
}

// Gradients of the outputs' shapes from the remaining bytes (finite values).
template <class T, class Y>
std::vector<xt::xarray<T>> gradients_for(fuzz::input& in, const Y& outputs)
{
    std::vector<xt::xarray<T>> dY;
    for (const auto& y : outputs) {
        xt::xarray<T> g = xt::xarray<T>::from_shape(y.shape());
        for (auto& x : g) x = static_cast<T>(static_cast<std::int8_t>(in.u8())) / T(32);
        dY.push_back(std::move(g));
    }
    return dY;
}

// Labels at given heads: ops 4 (predict_heads), 5 (stream), 6 (forward_heads
// and backprop), checked against each split alone.
template <class T, class Docs, class Pipe>
void run_heads(fuzz::input& in, const spec& s, biaffine_scorer<T>& scorer, const Docs& docs, Pipe& pipe,
               const std::vector<seq_view<const T>>& views, const std::vector<std::size_t>& doc_of)
{
    const std::size_t o = s.cfg.labels;
    // Split k's heads (valid input only).
    std::vector<std::vector<int>> split_heads;
    for (std::size_t d = 0, k = 0; s.structural_ok && s.heads_ok && d < docs.size(); ++d) {
        std::size_t row = 0;
        for (int l : s.lengths[d]) {
            split_heads.emplace_back(s.heads[d].begin() + static_cast<std::ptrdiff_t>(row),
                                     s.heads[d].begin() + static_cast<std::ptrdiff_t>(row + static_cast<std::size_t>(l)));
            row += static_cast<std::size_t>(l);
            ++k;
        }
    }
    // The full scores of split k alone, gathered at its heads (eval).
    auto gathered = [&](std::size_t k) {
        std::vector<seq_view<const T>> one{views[k]};
        const score_list<T> Y = scorer.predict(one);
        const score_view<const T> v = as_score_view(Y[0]);
        std::vector<T> out;
        for (std::size_t m = 0; m < v.n; ++m)
            for (std::size_t c = 0; c < o; ++c) out.push_back(v(m, static_cast<std::size_t>(split_heads[k][m]), c));
        return out;
    };
    if (s.op == 4 || s.op == 5) {
        std::vector<std::vector<T>> got;
        std::vector<int> seen;
        if (s.op == 4) {
            const score_list<T> Y = pipe.predict_heads(docs, s.lengths, s.heads);
            for (const auto& y : Y) {
                FUZZ_CHECK(y.dimension() == 2 && y.shape()[1] == o);
                got.emplace_back(y.begin(), y.end());
                seen.push_back(1);
            }
        } else {
            pipe.predict_heads_stream(docs, s.lengths, s.heads, [&](std::size_t k, std::size_t d, seq_view<const T> y) {
                if (k >= seen.size()) {
                    seen.resize(k + 1, 0);
                    got.resize(k + 1);
                }
                ++seen[k];
                FUZZ_CHECK(k < doc_of.size() && d == doc_of[k] && y.cols == o);
                got[k].clear();
                for (std::size_t m = 0; m < y.rows; ++m)
                    for (std::size_t c = 0; c < y.cols; ++c) got[k].push_back(y(m, c));
            });
        }
        FUZZ_CHECK(s.structural_ok && s.heads_ok);
        seen.resize(views.size(), 0);
        got.resize(views.size());
        for (std::size_t k = 0; k < views.size(); ++k) {
            FUZZ_CHECK(seen[k] == 1);
            FUZZ_CHECK(all_close(got[k], gathered(k)));
        }
        ++counts.ok[s.op];
        return;
    }
    const mode m = s.heads_train ? mode::train : mode::eval;
    auto [Y, bp] = pipe.forward_heads(docs, s.lengths, s.heads, m);
    FUZZ_CHECK(s.structural_ok && s.heads_ok);
    FUZZ_CHECK(Y.size() == views.size());
    std::vector<xt::xarray<T>> dY = gradients_for<T>(in, Y);
    scorer.zero_grad();
    const auto dX = bp(Pipe::head_grad_views(dY));
    const std::vector<T> g_pipe = grads_of(scorer);
    // Reference: each split on its own (same masks: dropout is 0 here).
    scorer.zero_grad();
    std::vector<std::vector<T>> dx_ref(docs.size());
    for (std::size_t d = 0; d < docs.size(); ++d) dx_ref[d].assign(s.rows[d] * s.cfg.n_in, T(0));
    std::vector<std::size_t> first_row(docs.size(), 0);
    for (std::size_t k = 0; k < views.size(); ++k) {
        const std::size_t d = doc_of[k], n = views[k].rows;
        std::vector<seq_view<const T>> one{views[k]};
        const std::vector<std::vector<int>> hk{split_heads[k]};
        auto fw = scorer.forward_heads(one, hk, m);
        FUZZ_CHECK(all_close(Y[k], fw.first[0]));
        if (m == mode::eval) FUZZ_CHECK(all_close(Y[k], gathered(k)));
        const std::vector<seq_view<const T>> gy{as_const_view(dY[k])};
        const std::vector<seq_view<T>> gx{{dx_ref[d].data() + first_row[d] * s.cfg.n_in, n, s.cfg.n_in,
                                           static_cast<std::ptrdiff_t>(s.cfg.n_in), 1}};
        fw.second(gy, gx);
        first_row[d] += n;
    }
    for (std::size_t d = 0; d < docs.size(); ++d) FUZZ_CHECK(all_close(dX[d], dx_ref[d]));
    FUZZ_CHECK(all_close(g_pipe, grads_of(scorer)));
    ++counts.ok[6];
}

template <class T, class Docs, class Pipe>
void run(fuzz::input& in, const spec& s, biaffine_scorer<T>& scorer, const Docs& docs, Pipe& pipe)
{
    // The flat split list, as views into the documents (valid input only).
    std::vector<seq_view<const T>> views;
    std::vector<std::size_t> doc_of;
    if (s.structural_ok) {
        for (std::size_t d = 0; d < docs.size(); ++d) {
            std::size_t row = 0;
            for (int l : s.lengths[d]) {
                views.push_back(as_const_view(docs[d]).rows_view(row, static_cast<std::size_t>(l)));
                doc_of.push_back(d);
                row += static_cast<std::size_t>(l);
            }
        }
    }
    const std::size_t o = s.cfg.labels;
    auto alone = [&](std::size_t k, mode m) {
        std::vector<seq_view<const T>> one{views[k]};
        auto fw = scorer.forward(one, m);
        return std::vector<T>(fw.first[0].begin(), fw.first[0].end());
    };
    auto check_shape = [&](const score_tensor<T>& y, std::size_t n) {
        FUZZ_CHECK(y.shape()[0] == n && y.shape()[1] == n);
        FUZZ_CHECK(y.dimension() == (o == 1 ? 2u : 3u));
        if (o != 1) FUZZ_CHECK(y.shape()[2] == o);
    };

    if (s.op == 0) {
        const score_list<T> Y = pipe.predict(docs, s.lengths);
        FUZZ_CHECK(s.structural_ok);
        FUZZ_CHECK(Y.size() == views.size());
        for (std::size_t k = 0; k < Y.size(); ++k) {
            check_shape(Y[k], views[k].rows);
            FUZZ_CHECK(all_close(Y[k], alone(k, mode::eval)));
        }
        ++counts.ok[0];
        return;
    }
    if (s.op == 1) {
        std::vector<int> seen;
        std::vector<std::vector<T>> got;
        pipe.predict_stream(docs, s.lengths, [&](std::size_t k, std::size_t d, score_view<const T> v) {
            if (k >= seen.size()) {
                seen.resize(k + 1, 0);
                got.resize(k + 1);
            }
            ++seen[k];
            got[k].clear();
            for (std::size_t m = 0; m < v.n; ++m)
                for (std::size_t l = 0; l < v.n * v.labels; ++l)
                    got[k].push_back(v.data[static_cast<std::ptrdiff_t>(m) * v.row_stride + static_cast<std::ptrdiff_t>(l)]);
            FUZZ_CHECK(k < doc_of.size() && d == doc_of[k]);
            FUZZ_CHECK(v.labels == o);
            check_view_decoders(v);
        });
        FUZZ_CHECK(s.structural_ok);
        seen.resize(views.size(), 0);
        for (std::size_t k = 0; k < views.size(); ++k) {
            FUZZ_CHECK(seen[k] == 1);
            FUZZ_CHECK(all_close(got[k], alone(k, mode::eval)));
        }
        ++counts.ok[1];
        return;
    }

    if (s.op >= 4) {
        run_heads<T>(in, s, scorer, docs, pipe, views, doc_of);
        return;
    }
    const mode m = s.op == 2 ? mode::eval : mode::train;
    // Logits in training, without dropout: the eval scores themselves.
    const bool train_is_eval = m == mode::train && s.cfg.train_outputs == train_output::logits && s.cfg.dropout == 0;
    const std::vector<T> g_start = grads_of(scorer);
    auto [Y, bp] = pipe.forward(docs, s.lengths, m);
    FUZZ_CHECK(s.structural_ok);
    FUZZ_CHECK(Y.size() == views.size());
    for (std::size_t k = 0; k < Y.size(); ++k) {
        check_shape(Y[k], views[k].rows);
        FUZZ_CHECK(all_close(Y[k], alone(k, m)));
        if (train_is_eval) FUZZ_CHECK(all_close(Y[k], alone(k, mode::eval)));
    }
    // Score gradients from the remaining bytes (finite values).
    std::vector<xt::xarray<T>> dY = gradients_for<T>(in, Y);
    if (s.bad_gradient && !dY.empty()) {
        const std::size_t k = in.u8() % dY.size();
        const std::size_t n = dY[k].shape()[0] + 1;
        dY[k] = o == 1 ? xt::xarray<T>(xt::zeros<T>({n, n})) : xt::xarray<T>(xt::zeros<T>({n, n, o}));
        bool threw = false;
        try {
            bp(Pipe::grad_views(dY));
        } catch (const shape_error&) {
            threw = true;
        }
        FUZZ_CHECK(threw);
        FUZZ_CHECK(same_bits(grads_of(scorer), g_start));  // nothing accumulated
        ++counts.bad_gradient;
        return;
    }
    scorer.zero_grad();
    const auto dX = bp(Pipe::grad_views(dY));
    const std::vector<T> g_pipe = grads_of(scorer);
    bool twice = false;
    try {
        bp(Pipe::grad_views(dY));
    } catch (const backprop_error&) {
        twice = true;
    }
    FUZZ_CHECK(twice);
    FUZZ_CHECK(same_bits(grads_of(scorer), g_pipe));

    // Reference: each split on its own, gradients accumulated split by split.
    FUZZ_CHECK(dX.size() == docs.size());
    scorer.zero_grad();
    std::vector<std::vector<T>> dx_ref(docs.size());
    for (std::size_t d = 0; d < docs.size(); ++d) {
        FUZZ_CHECK(dX[d].shape()[0] == s.rows[d] && dX[d].shape()[1] == s.cfg.n_in);
        dx_ref[d].assign(s.rows[d] * s.cfg.n_in, T(0));
    }
    std::vector<std::size_t> first_row(docs.size(), 0);
    for (std::size_t k = 0; k < views.size(); ++k) {
        const std::size_t d = doc_of[k], n = views[k].rows;
        std::vector<seq_view<const T>> one{views[k]};
        auto fw = scorer.forward(one, m);
        const std::vector<score_view<const T>> gy{as_score_view(dY[k])};
        const std::vector<seq_view<T>> gx{{dx_ref[d].data() + first_row[d] * s.cfg.n_in, n, s.cfg.n_in,
                                           static_cast<std::ptrdiff_t>(s.cfg.n_in), 1}};
        fw.second(gy, gx);
        first_row[d] += n;
    }
    for (std::size_t d = 0; d < docs.size(); ++d) FUZZ_CHECK(all_close(dX[d], dx_ref[d]));
    FUZZ_CHECK(all_close(g_pipe, grads_of(scorer)));
    ++counts.ok[s.op];
}

template <class T, class Doc>
void fuzz_one(fuzz::input& in, const spec& s)
{
    // Documents, filled from the input.
    std::vector<Doc> docs;
    for (std::size_t d = 0; d < s.rows.size(); ++d) {
        Doc doc = Doc::Zero(static_cast<Eigen::Index>(s.rows[d]), static_cast<Eigen::Index>(s.widths[d]));
        for (Eigen::Index i = 0; i < doc.size(); ++i) doc.data()[i] = value_of<T>(in);
        docs.push_back(std::move(doc));
    }
    biaffine_scorer<T> scorer(s.cfg);
    using batcher_t = decltype(with_minibatch_by_padded_size(scorer, budget::items(1)));
    const bool budget_ok = s.budget_kind != 2 && s.opts.buffer != 0 &&
                           !(s.budget_kind == 1 && s.budget_value <= batcher_t::min_bookkeeping_bytes());
    try {
        const budget b = s.budget_kind == 0 ? budget::items(s.budget_value)
                                            : budget::bytes(s.budget_kind == 1 ? s.budget_value : 0);
        if (s.padded) {
            auto pipe = with_splits(with_minibatch_by_padded_size(with_pad_seq_unpad_matrix(scorer), b, s.opts));
            run<T>(in, s, scorer, docs, pipe);
        } else {
            auto pipe = with_splits(with_minibatch_by_padded_size(scorer, b, s.opts));
            run<T>(in, s, scorer, docs, pipe);
        }
    } catch (const budget_error&) {
        // A zero budget or buffer; with valid documents, a byte budget below
        // the batcher's bookkeeping or a split over budget under the throw
        // policy.
        FUZZ_CHECK(!budget_ok || (s.structural_ok && (s.budget_kind == 1 || s.opts.oversize == oversize_policy::throw_error)));
        ++counts.budget;
    } catch (const length_error&) {
        FUZZ_CHECK(budget_ok && !s.structural_ok);
        ++counts.length;
    } catch (const shape_error&) {
        FUZZ_CHECK(budget_ok && !s.structural_ok);
        ++counts.shape;
    } catch (const head_error&) {
        FUZZ_CHECK(budget_ok && s.structural_ok && !s.heads_ok && s.op >= 4);
        ++counts.heads;
    }
}

}  // namespace

// Eigen documents, row-major or column-major (strided splits), float or double.
extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size)
{
    const std::uint64_t start = tracker().current_bytes();
    fuzz::input in(data, size);
    const std::uint8_t kind = in.u8();
    const spec s = decode(in);
    switch (kind % 4) {
    case 0: fuzz_one<double, Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>>(in, s); break;
    case 1: fuzz_one<double, Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::ColMajor>>(in, s); break;
    case 2: fuzz_one<float, Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>>(in, s); break;
    default: fuzz_one<float, Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::ColMajor>>(in, s); break;
    }
    FUZZ_CHECK(tracker().current_bytes() == start);  // nothing tracked outlives a call
    return 0;
}
