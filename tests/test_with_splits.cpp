// Tests for biaffine/with_splits.hpp and the whole split-batching stack:
//   with_splits(with_minibatch_by_padded_size(with_pad_seq_unpad_matrix(scorer), budget))
//   with_splits(with_minibatch_by_padded_size(scorer, budget))
// Property tests over random workloads (documents in xtensor / Eigen
// column-major / Eigen row-major storage, float and double, one and several
// labels, zero-length and long splits, empty documents, both budget kinds,
// random buffers): every split's scores equal the naive reference scoring that
// split alone; in training, dX per document and every parameter gradient equal
// one unbatched call of the scorer's split-list forward (and the reference).
// Then the memory bound (working-set peak <= byte budget) on 1k / 10k / 100k
// token documents, mock inner layers through with_splits, and bad input.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <iostream>
#include <limits>
#include <random>
#include <set>
#include <vector>

#include "biaffine/detail/eigen.hpp"  // Eigen, without GCC 12's AVX-512 false positives
#include <xtensor/xtensor.hpp>

#include "biaffine/biaffine.hpp"
#include "layer_helpers.hpp"

using namespace biaffine;

namespace {

std::size_t g_workloads = 0;

template <class T>
std::vector<std::vector<double>> grads_of(biaffine_scorer<T>& s)
{
    return {th::flat_double(s.d_head_weight()), th::flat_double(s.d_head_bias()),
            th::flat_double(s.d_dependent_weight()), th::flat_double(s.d_dependent_bias()),
            th::flat_double(s.d_bilinear_weight())};
}

double grads_err(const std::vector<std::vector<double>>& a, const std::vector<std::vector<double>>& b)
{
    double e = 0;
    for (std::size_t i = 0; i < a.size(); ++i) e = std::max(e, th::rel_err(a[i], b[i]));
    return e;
}

template <class D>
std::vector<double> doc_grad_vec(const D& dx)
{
    return th::to_vec(dx);
}

/// One random workload through one composition of the stack.
template <class T, class Doc>
void pipeline_workload(std::mt19937& rng, int trial)
{
    scorer_config cfg;
    cfg.n_in = std::uniform_int_distribution<std::size_t>(1, 9)(rng);
    cfg.hidden = std::uniform_int_distribution<std::size_t>(1, 7)(rng);
    cfg.labels = std::uniform_int_distribution<int>(0, 2)(rng) ? 1 : std::uniform_int_distribution<std::size_t>(2, 4)(rng);
    cfg.bias_u = std::uniform_int_distribution<int>(0, 4)(rng) != 0;
    cfg.bias_v = std::uniform_int_distribution<int>(0, 4)(rng) != 0;
    cfg.seed = static_cast<std::uint64_t>(trial) * 7919 + 1;
    biaffine_scorer<T> scorer(cfg);
    const th::ref_model M = th::ref_from(scorer);
    const std::size_t n_in = cfg.n_in, o = cfg.labels;

    const th::workload w = th::random_workload<T>(rng, n_in, 4, 8, 80);
    const std::vector<Doc> docs = th::make_docs<Doc>(w);
    const auto splits = w.splits();
    const std::size_t n_splits = splits.size(), n_docs = docs.size();

    batch_options opts;
    const std::size_t buffers[] = {1, 2, 7, 256, 0};
    opts.buffer = buffers[std::uniform_int_distribution<int>(0, 4)(rng)];
    if (opts.buffer == 0) opts.buffer = std::uniform_int_distribution<std::size_t>(3, 40)(rng);
    if (std::uniform_int_distribution<int>(0, 4)(rng) == 0) opts.threads = 2;
    const bool padded = std::uniform_int_distribution<int>(0, 1)(rng) != 0;
    const bool by_bytes = std::uniform_int_distribution<int>(0, 1)(rng) != 0;
    const mode m = std::uniform_int_distribution<int>(0, 3)(rng) ? mode::train : mode::eval;
    const bool train = m == mode::train;

    // A byte budget: the bookkeeping plus anything from a few
    // bytes (every split alone) to a megabyte.
    std::uint64_t value = 0;
    if (by_bytes) {
        const auto probe = with_minibatch_by_padded_size(scorer, budget::items(1), opts);
        const double e = std::uniform_real_distribution<double>(0.0, 20.0)(rng);
        // with_splits' per-document index is paid from the budget too
        const std::uint64_t index = n_docs * (sizeof(seq_view<const T>) + sizeof(std::size_t)) + sizeof(std::size_t);
        // (at least one split's bookkeeping: less is refused when the layer is built)
        value = probe.bookkeeping_bytes(std::max<std::size_t>(n_splits, 1)) + index + 1 +
                static_cast<std::uint64_t>(std::exp2(e));
        {
            // A forward (run below in either mode) also pays what it keeps
            // until backprop: the batcher's (kept_bytes) and with_splits'
            // (lengths, dX views).
            const auto pad_probe =
                with_minibatch_by_padded_size(with_pad_seq_unpad_matrix(scorer), budget::items(1), opts);
            value += std::max(probe.kept_bytes(n_splits, m), pad_probe.kept_bytes(n_splits, m)) +
                     n_splits * (sizeof(std::size_t) + sizeof(seq_view<T>));
        }
    } else {
        value = std::uniform_int_distribution<std::uint64_t>(1, 400)(rng);
    }
    const budget b = by_bytes ? budget::bytes(value) : budget::items(value);
    INFO("trial " << trial << " layout " << th::layout_name(th::doc_layout<Doc>::value)
                  << " T=" << (sizeof(T) == 4 ? "float" : "double") << " docs=" << n_docs << " splits=" << n_splits
                  << " o=" << o << " padded=" << padded << " bytes=" << by_bytes << " budget=" << value
                  << " buffer=" << opts.buffer << " threads=" << opts.threads << " train=" << train);

    const double eps = th::tol<T>();
    auto run = [&](auto&& pipe) {
        // ---- inference: each split against the reference scoring it alone
        const memory_stats base = tracker().stats();
        score_list<T> Y = pipe.predict(docs, w.lengths);
        const memory_stats after = tracker().stats();
        // Predict keeps nothing: current returns to baseline + outputs.
        REQUIRE(after.current_bytes - after.output_bytes == base.current_bytes - base.output_bytes);
        REQUIRE(Y.size() == n_splits);
        std::vector<std::vector<double>> xs(n_splits);
        double worst = 0;
        for (std::size_t k = 0; k < n_splits; ++k) {
            xs[k] = w.split_rows(splits[k]);
            const std::size_t n = splits[k].len;
            REQUIRE(Y[k].dimension() == (o == 1 ? 2u : 3u));
            REQUIRE(Y[k].shape()[0] == n);
            REQUIRE(Y[k].shape()[1] == n);
            worst = std::max(worst, th::rel_err(th::to_vec(Y[k]), th::ref_forward(M, xs[k], n, false).y));
        }
        REQUIRE(worst < eps);

        // ---- streaming: each split once, with its document, same scores
        std::vector<int> seen(n_splits, 0);
        bool doc_ok = true;
        double worst_stream = 0;
        pipe.predict_stream(docs, w.lengths, [&](std::size_t k, std::size_t d, score_view<const T> s) {
            ++seen.at(k);
            doc_ok = doc_ok && d == splits[k].doc && s.n == splits[k].len && s.labels == o;
            worst_stream = std::max(worst_stream, th::rel_err(th::to_vec(s), th::to_vec(Y[k])));
        });
        REQUIRE(std::count(seen.begin(), seen.end(), 1) == static_cast<std::ptrdiff_t>(n_splits));
        REQUIRE(doc_ok);
        REQUIRE(worst_stream < eps);

        // ---- training: batched vs one unbatched split-list call vs reference
        scorer.zero_grad();
        auto [Yf, bp] = pipe.forward(docs, w.lengths, m);
        REQUIRE(Yf.size() == n_splits);
        const score_list<T> dY = th::random_grads<T>(rng, w, o);
        th::ref_grads G(M);
        std::vector<std::vector<double>> ref_dx(n_docs);
        for (std::size_t d = 0; d < n_docs; ++d) ref_dx[d].assign(w.rows(d) * n_in, 0.0);
        bool near_kink = false;
        for (std::size_t k = 0; k < n_splits; ++k) {
            const th::ref_split r = th::ref_forward(M, xs[k], splits[k].len, train);
            worst = std::max(worst, th::rel_err(th::to_vec(Yf[k]), r.y));
            std::vector<double> dx;
            th::ref_backward(M, xs[k], r, train, th::to_vec(dY[k]), dx, G);
            std::copy(dx.begin(), dx.end(), ref_dx[splits[k].doc].begin() + static_cast<std::ptrdiff_t>(splits[k].row * n_in));
            near_kink = near_kink || r.min_abs_z < 1e-4;
        }
        REQUIRE(worst < eps);
        const auto dYv = std::decay_t<decltype(pipe)>::grad_views(dY);
        const auto dX = bp(span<const score_view<const T>>(dYv.data(), dYv.size()));
        const auto batched = grads_of(scorer);
        REQUIRE(dX.size() == n_docs);

        scorer.zero_grad();
        const auto views = th::split_views<T>(docs, w);
        auto [Yu, bpu] = scorer.forward(views, m);
        std::vector<xt::xtensor<T, 2>> dXu;
        std::vector<seq_view<T>> slots;
        for (std::size_t d = 0; d < n_docs; ++d) dXu.push_back(xt::zeros<T>({w.rows(d), n_in}));
        for (const auto& s : splits) slots.push_back(as_view(dXu[s.doc]).rows_view(s.row, s.len));
        bpu(span<const score_view<const T>>(dYv.data(), dYv.size()), span<const seq_view<T>>(slots.data(), slots.size()));
        const auto unbatched = grads_of(scorer);

        double dx_err = 0, dx_ref_err = 0;
        for (std::size_t d = 0; d < n_docs; ++d) {
            REQUIRE(dX[d].shape()[0] == w.rows(d));
            REQUIRE(dX[d].shape()[1] == n_in);
            dx_err = std::max(dx_err, th::rel_err(doc_grad_vec(dX[d]), doc_grad_vec(dXu[d])));
            dx_ref_err = std::max(dx_ref_err, th::rel_err(doc_grad_vec(dX[d]), ref_dx[d]));
        }
        REQUIRE(dx_err < eps);
        REQUIRE(grads_err(batched, unbatched) < eps);
        // A pre-activation within float rounding of the relu kink may switch
        // sides between float and double; skip only that comparison then.
        if (!near_kink || std::is_same<T, double>::value) {
            REQUIRE(dx_ref_err < eps);
            REQUIRE(grads_err(batched, {G.dwh, G.dbh, G.dwd, G.dbd, G.dw}) < eps);
        }
    };
    if (padded) {
        run(with_splits(with_minibatch_by_padded_size(with_pad_seq_unpad_matrix(scorer), b, opts)));
    } else {
        run(with_splits(with_minibatch_by_padded_size(scorer, b, opts)));
    }
    ++g_workloads;
}

template <class T, class Doc>
void many(int n, std::uint32_t seed)
{
    std::mt19937 rng(seed);
    for (int t = 0; t < n; ++t) pipeline_workload<T, Doc>(rng, t);
}

// ------------------------------------------------------------- memory bound

/// Documents for the memory bound, with their split lengths.
struct long_doc {
    std::vector<xt::xtensor<float, 2>> docs;
    std::vector<std::vector<int>> lengths;
    int longest = 0;
    std::size_t tokens() const
    {
        std::size_t t = 0;
        for (const auto& d : docs) t += d.shape()[0];
        return t;
    }
    std::size_t n_splits() const
    {
        std::size_t n = 0;
        for (const auto& l : lengths) n += l.size();
        return n;
    }
};

/// Many short documents (1-3 splits of 1-6 tokens each): the per-document
/// bookkeeping and the per-split output lists dominate, not the scores.
long_doc make_many_docs(std::mt19937& rng, std::size_t n_docs, std::size_t n_in)
{
    long_doc d;
    std::uniform_real_distribution<float> val(-1.f, 1.f);
    for (std::size_t i = 0; i < n_docs; ++i) {
        std::vector<int> ls(static_cast<std::size_t>(std::uniform_int_distribution<int>(1, 3)(rng)));
        std::size_t rows = 0;
        for (int& l : ls) {
            l = std::uniform_int_distribution<int>(1, 6)(rng);
            rows += static_cast<std::size_t>(l);
            d.longest = std::max(d.longest, l);
        }
        xt::xtensor<float, 2> x = xt::xtensor<float, 2>::from_shape({rows, n_in});
        for (auto& v : x) v = val(rng);
        d.docs.push_back(std::move(x));
        d.lengths.push_back(std::move(ls));
    }
    return d;
}

long_doc make_long_doc(std::mt19937& rng, std::size_t tokens, std::size_t n_in)
{
    long_doc d;
    std::lognormal_distribution<double> len_law(std::log(18.0), 0.8);
    std::vector<int> ls;
    std::size_t total = 0;
    while (total < tokens) {
        int l = static_cast<int>(std::lround(len_law(rng)));
        l = std::clamp(l, 1, 100);
        l = static_cast<int>(std::min<std::size_t>(static_cast<std::size_t>(l), tokens - total));
        ls.push_back(l);
        total += static_cast<std::size_t>(l);
        d.longest = std::max(d.longest, l);
    }
    d.lengths.push_back(std::move(ls));
    xt::xtensor<float, 2> x = xt::xtensor<float, 2>::from_shape({tokens, n_in});
    std::uniform_real_distribution<float> val(-1.f, 1.f);
    for (auto& v : x) v = val(rng);
    d.docs.push_back(std::move(x));
    return d;
}

struct peak_row {
    std::size_t docs = 0, tokens = 0;
    const char* stack = "";
    std::uint64_t budget = 0, work_peak = 0, plain_peak = 0, stream_peak = 0, batches = 0, oversize = 0;
};

// Inference peaks of one call, measured from the tracker: the working set
// (outputs excluded) and the plain form, peak minus the outputs produced.
template <class Pipe, class Batcher>
peak_row measure(const char* name, Pipe& pipe, Batcher& batcher, const long_doc& d, std::uint64_t B)
{
    peak_row row;
    row.docs = d.docs.size();
    row.tokens = d.tokens();
    row.stack = name;
    row.budget = B;
    batcher.reset_counts();
    {
        const memory_stats base = tracker().stats();
        tracker().reset_peak();
        score_list<float> Y = pipe.predict(d.docs, d.lengths);
        const memory_stats after = tracker().stats();
        row.work_peak = after.work_peak_bytes - (base.current_bytes - base.output_bytes);
        row.plain_peak = after.peak_bytes - base.current_bytes - (after.output_bytes - base.output_bytes);
        row.batches = batcher.batch_count();
        row.oversize = batcher.oversize_count();
        REQUIRE(Y.size() == d.n_splits());
        // nothing kept but the outputs
        REQUIRE(after.current_bytes - after.output_bytes == base.current_bytes - base.output_bytes);
    }
    {
        const memory_stats base = tracker().stats();
        tracker().reset_peak();
        std::size_t streamed = 0;
        pipe.predict_stream(d.docs, d.lengths, [&](std::size_t, std::size_t, score_view<const float>) { ++streamed; });
        const memory_stats after = tracker().stats();
        row.stream_peak = after.peak_bytes - base.current_bytes;
        REQUIRE(streamed == d.n_splits());
        REQUIRE(after.current_bytes == base.current_bytes);
    }
    return row;
}

}  // namespace

TEST_CASE("with_splits stack: random workloads match the per-split reference and the unbatched gradients",
          "[with_splits][property]")
{
    const std::size_t before = g_workloads;
    many<float, xt::xtensor<float, 2>>(80, 11);
    many<float, th::col_matrix<float>>(80, 12);
    many<float, th::row_matrix<float>>(80, 13);
    many<double, xt::xtensor<double, 2>>(60, 14);
    many<double, th::col_matrix<double>>(60, 15);
    many<double, th::row_matrix<double>>(60, 16);
    std::cout << "[with_splits] random pipeline workloads checked: " << g_workloads - before << "\n";
}

TEST_CASE("with_splits stack: inference working-set peak stays within the byte budget (1k, 10k, 100k tokens; "
          "2000 short documents)",
          "[with_splits][memory]")
{
    std::mt19937 rng(555);
    scorer_config cfg;
    cfg.n_in = 64;
    cfg.hidden = 32;
    cfg.labels = 1;
    cfg.seed = 3;
    biaffine_scorer<float> scorer(cfg);
    const std::uint64_t budgets[] = {64u << 10, 256u << 10, 1u << 20, 4u << 20};
    std::vector<peak_row> rows;
    std::size_t checked = 0, oversize_runs = 0;
    std::vector<long_doc> sets;
    for (std::size_t tokens : {std::size_t(1000), std::size_t(10000), std::size_t(100000)}) {
        sets.push_back(make_long_doc(rng, tokens, cfg.n_in));
    }
    sets.push_back(make_many_docs(rng, 2000, cfg.n_in));
    for (const long_doc& d : sets) {
        const std::size_t n_splits = d.n_splits();
        // The index with_splits keeps per document (views, first splits).
        const std::uint64_t index = d.docs.size() * (sizeof(seq_view<const float>) + sizeof(std::size_t)) + 8;
        for (const std::uint64_t B : budgets) {
            INFO("documents=" << d.docs.size() << " tokens=" << d.tokens() << " budget=" << B);
            auto check = [&](const char* name, auto& batcher) {
                auto pipe = with_splits(batcher);
                const std::uint64_t lone = batcher.planned_bytes(1, static_cast<std::size_t>(d.longest)) +
                                           batcher.bookkeeping_bytes(n_splits) + index;
                if (batcher.bookkeeping_bytes(n_splits) + index >= B) {
                    // The budget cannot even hold the bookkeeping: refused.
                    REQUIRE_THROWS_AS(pipe.predict(d.docs, d.lengths), budget_error);
                    return;
                }
                const peak_row row = measure(name, pipe, batcher, d, B);
                rows.push_back(row);
                INFO(name << ": work peak " << row.work_peak << ", plain peak " << row.plain_peak << ", stream peak "
                          << row.stream_peak);
                if (lone <= B) {
                    // No single split exceeds the budget: the bound must hold.
                    REQUIRE(row.oversize == 0);
                    REQUIRE(row.work_peak <= B);
                    REQUIRE(row.plain_peak <= B);
                    REQUIRE(row.stream_peak <= B);
                    ++checked;
                } else {
                    // Some split is over the budget on its own: it ran alone, counted.
                    REQUIRE(row.oversize > 0);
                    ++oversize_runs;
                }
            };
            auto length_aware = with_minibatch_by_padded_size(scorer, budget::bytes(B));
            check("length-aware", length_aware);
            auto pad = with_pad_seq_unpad_matrix(scorer);
            auto padded = with_minibatch_by_padded_size(pad, budget::bytes(B));
            check("padded", padded);
        }
    }
    std::cout << "[with_splits] inference peaks vs byte budget (float, n_in 64, hidden 32, lengths log-normal in [1, "
                 "100]):\n";
    std::printf("  %6s %8s  %-12s %10s %10s %10s %10s %8s %8s\n", "docs", "tokens", "stack", "budget", "work_peak", "peak-out",
                "stream", "batches", "oversize");
    for (const auto& r : rows) {
        std::printf("  %6zu %8zu  %-12s %10llu %10llu %10llu %10llu %8llu %8llu\n", r.docs, r.tokens, r.stack,
                    static_cast<unsigned long long>(r.budget), static_cast<unsigned long long>(r.work_peak),
                    static_cast<unsigned long long>(r.plain_peak), static_cast<unsigned long long>(r.stream_peak),
                    static_cast<unsigned long long>(r.batches), static_cast<unsigned long long>(r.oversize));
    }
    std::cout << "[with_splits] memory-bound workloads checked: " << checked << " (plus " << oversize_runs
              << " with a split over the budget alone)\n";
    REQUIRE(checked >= 12);
}

TEST_CASE("with_splits over mock inner layers: recording, X·Xᵀ and padded X·Xᵀ", "[with_splits][mock]")
{
    std::mt19937 rng(8080);
    std::size_t count = 0;
    for (int t = 0; t < 90; ++t) {
        const std::size_t n_in = std::uniform_int_distribution<std::size_t>(1, 4)(rng);
        const std::size_t o = std::uniform_int_distribution<int>(0, 1)(rng) ? 1 : 2;
        const th::workload w = th::random_workload<double>(rng, n_in, 4, 8, 50);
        const auto docs = th::make_docs<th::col_matrix<double>>(w);
        const auto splits = w.splits();
        const std::size_t n = splits.size();
        const std::uint64_t size = std::uniform_int_distribution<std::uint64_t>(1, 120)(rng);
        batch_options opts;
        opts.buffer = std::uniform_int_distribution<std::size_t>(1, 12)(rng);
        INFO("trial " << t << " splits=" << n << " size=" << size << " buffer=" << opts.buffer);

        // Recording: the batches are spaCy's rule on the flat split lengths.
        th::recording_layer<double> rec(n_in, o);
        auto rpipe = with_splits(with_minibatch_by_padded_size(rec, budget::items(size), opts));
        const score_list<double> Yr = rpipe.predict(docs, w.lengths);
        std::vector<std::size_t> flat;
        for (const auto& s : splits) flat.push_back(s.len);
        const auto want = minibatch_by_padded_size(flat, size, opts.buffer);
        REQUIRE(rec.calls.size() == want.size());
        for (std::size_t b = 0; b < want.size(); ++b) {
            std::vector<std::size_t> lens;
            for (auto i : want[b]) lens.push_back(flat[i]);
            REQUIRE(rec.calls[b].lengths == lens);
        }
        double worst = 0;
        for (std::size_t k = 0; k < n; ++k) {
            const auto x = as_const_view(docs[splits[k].doc]).rows_view(splits[k].row, splits[k].len);
            std::vector<double> e;
            for (std::size_t a = 0; a < x.rows; ++a)
                for (std::size_t l = 0; l < x.rows; ++l)
                    for (std::size_t q = 0; q < o; ++q) e.push_back(th::recording_layer<double>::value(x, a, l, q));
            worst = std::max(worst, th::rel_err(th::to_vec(Yr[k]), e));
        }
        REQUIRE(worst < 1e-12);

        // X·Xᵀ: batched (length-aware and through the padded adapter) vs
        // unbatched. The padded mock has no alpha (it is 1): scale by 1.5.
        th::xxt_layer<double> inner(n_in, o, 1.5), plain(n_in, o, 1.5);
        th::padded_xxt_layer<double> padded_inner(n_in, o);
        auto bpipe = with_splits(with_minibatch_by_padded_size(inner, budget::items(size), opts));
        auto ppipe = with_splits(with_minibatch_by_padded_size(with_pad_seq_unpad_matrix(padded_inner),
                                                               budget::bytes(1 << 16), opts));
        auto upipe = with_splits(plain);
        auto [Yb, bpb] = bpipe.forward(docs, w.lengths);
        auto [Yp, bpp] = ppipe.forward(docs, w.lengths);
        auto [Yu, bpu] = upipe.forward(docs, w.lengths);
        REQUIRE(plain.n_calls == 1);
        for (std::size_t k = 0; k < n; ++k) {
            worst = std::max(worst, th::rel_err(th::to_vec(Yb[k]), th::to_vec(Yu[k])));
            std::vector<double> yp = th::to_vec(Yp[k]);
            for (double& v : yp) v *= 1.5;
            worst = std::max(worst, th::rel_err(yp, th::to_vec(Yu[k])));
        }
        REQUIRE(worst < 1e-12);
        const score_list<double> dY = th::random_grads<double>(rng, w, o);
        const auto dYv = decltype(upipe)::grad_views(dY);
        const span<const score_view<const double>> g(dYv.data(), dYv.size());
        const auto dXb = bpb(g);
        const auto dXp = bpp(g);
        const auto dXu = bpu(g);
        REQUIRE(dXu.size() == docs.size());
        for (std::size_t d = 0; d < docs.size(); ++d) {
            worst = std::max(worst, th::rel_err(th::to_vec(dXb[d]), th::to_vec(dXu[d])));
            std::vector<double> scaled = th::to_vec(dXp[d]);
            for (double& v : scaled) v *= 1.5;
            worst = std::max(worst, th::rel_err(scaled, th::to_vec(dXu[d])));
        }
        REQUIRE(worst < 1e-12);
        REQUIRE(inner.d_alpha == Approx(plain.d_alpha).epsilon(1e-12).margin(1e-12));
        REQUIRE_FALSE(padded_inner.dy_nonzero_outside);
        REQUIRE_FALSE(padded_inner.input_not_zero_padded);
        ++count;
    }
    g_workloads += count;
    std::cout << "[with_splits] mock-layer random workloads: " << count << "\n";
}

TEST_CASE("with_splits: zero-length splits and empty documents give empty results", "[with_splits]")
{
    scorer_config cfg;
    cfg.n_in = 3;
    cfg.hidden = 4;
    cfg.labels = 2;
    biaffine_scorer<double> scorer(cfg);
    auto pipe = with_splits(with_minibatch_by_padded_size(with_pad_seq_unpad_matrix(scorer), budget::items(16)));
    auto direct = with_splits(with_minibatch_by_padded_size(scorer, budget::bytes(1 << 20)));

    std::vector<xt::xtensor<double, 2>> docs{xt::zeros<double>({0, 3}), xt::zeros<double>({0, 3}),
                                             xt::ones<double>({3, 3})};
    const std::vector<std::vector<int>> lengths{{}, {0, 0}, {0, 3, 0}};
    for (int which = 0; which < 2; ++which) {
        const score_list<double> Y = which ? direct.predict(docs, lengths) : pipe.predict(docs, lengths);
        REQUIRE(Y.size() == 5);
        const std::size_t want_n[] = {0, 0, 0, 3, 0};
        for (std::size_t k = 0; k < 5; ++k) {
            REQUIRE(Y[k].dimension() == 3);
            REQUIRE(Y[k].shape()[0] == want_n[k]);
            REQUIRE(Y[k].shape()[2] == 2);
        }
        auto [Yf, bp] = which ? direct.forward(docs, lengths) : pipe.forward(docs, lengths);
        const auto dYv = decltype(pipe)::grad_views(Yf);  // any gradient of the right shapes
        const auto dX = bp(span<const score_view<const double>>(dYv.data(), dYv.size()));
        REQUIRE(dX.size() == 3);
        REQUIRE(dX[0].shape()[0] == 0);
        REQUIRE(dX[0].shape()[1] == 3);
        REQUIRE(dX[1].shape()[0] == 0);
        REQUIRE(dX[2].shape()[0] == 3);
    }
    // No documents at all.
    const std::vector<xt::xtensor<double, 2>> none;
    const std::vector<std::vector<int>> no_lengths;
    REQUIRE(pipe.predict(none, no_lengths).empty());
    auto [Y0, bp0] = direct.forward(none, no_lengths);
    REQUIRE(Y0.empty());
    REQUIRE(bp0(span<const score_view<const double>>()).empty());
    // Split lengths as any integer ranges (int64, size_t).
    const std::vector<std::vector<std::int64_t>> l64{{}, {0, 0}, {1, 2}};
    const std::vector<std::vector<std::size_t>> lsz{{}, {0, 0}, {2, 1}};
    REQUIRE(direct.predict(docs, l64).size() == 4);
    REQUIRE(direct.predict(docs, lsz)[3].shape()[0] == 1);
}

TEST_CASE("with_splits: bad input raises a specific exception naming where and what", "[with_splits][errors]")
{
    scorer_config cfg;
    cfg.n_in = 4;
    cfg.hidden = 3;
    biaffine_scorer<float> scorer(cfg);
    auto pipe = with_splits(with_minibatch_by_padded_size(with_pad_seq_unpad_matrix(scorer), budget::items(32)));
    auto direct = with_splits(with_minibatch_by_padded_size(scorer, budget::bytes(1 << 20)));
    std::vector<th::row_matrix<float>> docs{th::row_matrix<float>::Random(5, 4), th::row_matrix<float>::Random(6, 4)};

    SECTION("split lengths that do not sum to the document's rows")
    {
        const std::vector<std::vector<int>> bad{{2, 3}, {2, 3}};
        REQUIRE_THROWS_AS(pipe.predict(docs, bad), shape_error);
        REQUIRE_THROWS_WITH(pipe.predict(docs, bad), Catch::Contains("document 1") && Catch::Contains("sum to 5") &&
                                                         Catch::Contains("6 rows"));
        REQUIRE_THROWS_AS(direct.forward(docs, bad), shape_error);
        std::size_t calls = 0;
        REQUIRE_THROWS_AS(direct.predict_stream(docs, bad, [&](std::size_t, std::size_t, score_view<const float>) {
            ++calls;
        }),
                          shape_error);
        REQUIRE(calls == 0);  // checked before anything is scored
    }
    SECTION("negative lengths")
    {
        const std::vector<std::vector<int>> bad{{5}, {4, -1, 3}};
        REQUIRE_THROWS_AS(pipe.predict(docs, bad), length_error);
        REQUIRE_THROWS_WITH(pipe.predict(docs, bad), Catch::Contains("document 1, split 1") &&
                                                         Catch::Contains("negative length -1"));
    }
    SECTION("a number of length lists different from the number of documents")
    {
        const std::vector<std::vector<int>> bad{{5}};
        REQUIRE_THROWS_WITH(direct.predict(docs, bad), Catch::Contains("2 documents") && Catch::Contains("1 lists"));
    }
    SECTION("width mismatch against the scorer")
    {
        std::vector<xt::xtensor<float, 2>> wide{xt::zeros<float>({2, 4}), xt::zeros<float>({3, 5})};
        const std::vector<std::vector<int>> l{{2}, {3}};
        REQUIRE_THROWS_AS(pipe.predict(wide, l), shape_error);
        REQUIRE_THROWS_WITH(pipe.predict(wide, l), Catch::Contains("document 1 has width 5") &&
                                                       Catch::Contains("n_in = 4"));
        REQUIRE_THROWS_AS(direct.forward(wide, l), shape_error);
    }
    SECTION("per-split gradients of the wrong count or shape")
    {
        const std::vector<std::vector<int>> l{{2, 3}, {6}};
        {
            auto [Y, bp] = pipe.forward(docs, l);
            REQUIRE(Y.size() == 3);
            const auto g = decltype(pipe)::grad_views(Y);
            REQUIRE_THROWS_AS(bp(span<const score_view<const float>>(g.data(), 2)), shape_error);
        }
        {
            auto [Y, bp] = pipe.forward(docs, l);
            const auto g = decltype(pipe)::grad_views(Y);
            REQUIRE_THROWS_WITH(bp(span<const score_view<const float>>(g.data(), 2)),
                                Catch::Contains("expected 3 split gradients, got 2"));
        }
        {
            auto [Y, bp] = direct.forward(docs, l);
            score_list<float> wrong;
            wrong.push_back(xt::zeros<float>({2, 2}));
            wrong.push_back(xt::zeros<float>({2, 2}));  // split 1 has 3 tokens
            wrong.push_back(xt::zeros<float>({6, 6}));
            const auto g = decltype(direct)::grad_views(wrong);
            REQUIRE_THROWS_AS(bp(span<const score_view<const float>>(g.data(), 3)), shape_error);
        }
        {
            auto [Y, bp] = direct.forward(docs, l);
            score_list<float> wrong;
            wrong.push_back(xt::zeros<float>({2, 2}));
            wrong.push_back(xt::zeros<float>({3, 3}));
            wrong.push_back(xt::zeros<float>({6, 6, 2}));  // two labels, the scorer has one
            const auto g = decltype(direct)::grad_views(wrong);
            REQUIRE_THROWS_WITH(bp(span<const score_view<const float>>(g.data(), 3)),
                                Catch::Contains("split 2 (document 1)") &&
                                    Catch::Contains("expected a gradient of [6, 6, 1]") &&
                                    Catch::Contains("got [6, 6, 2]"));
        }
        // Gradient arrays that are not [n, n(, o)] at all.
        score_list<float> not_square;
        not_square.push_back(xt::zeros<float>({2, 3}));
        REQUIRE_THROWS_AS(decltype(direct)::grad_views(not_square), shape_error);
        REQUIRE_THROWS_WITH(decltype(direct)::grad_views(not_square), Catch::Contains("split gradient 0"));
    }
    SECTION("a second backprop call")
    {
        const std::vector<std::vector<int>> l{{5}, {1, 5}};
        auto [Y, bp] = pipe.forward(docs, l);
        const auto g = decltype(pipe)::grad_views(Y);
        const auto dX = bp(span<const score_view<const float>>(g.data(), g.size()));
        REQUIRE(dX.size() == 2);
        REQUIRE_THROWS_AS(bp(span<const score_view<const float>>(g.data(), g.size())), backprop_error);
        REQUIRE_THROWS_WITH(bp(span<const score_view<const float>>(g.data(), g.size())),
                            Catch::Contains("second time"));
    }
    SECTION("zero budgets")
    {
        REQUIRE_THROWS_AS(with_minibatch_by_padded_size(scorer, budget::bytes(0)), budget_error);
        REQUIRE_THROWS_AS(with_minibatch_by_padded_size(scorer, budget::items(0)), budget_error);
        REQUIRE_THROWS_WITH(budget::items(0), Catch::Contains("must be positive"));
    }
    SECTION("a byte budget that covers the batcher's bookkeeping but not with_splits' document index")
    {
        // 200 documents: their index (a view and an offset each) outweighs
        // one split's batch, whatever the backend's packed block.
        const std::size_t docs_n = 200;
        const std::vector<xt::xtensor<float, 2>> many(docs_n, xt::zeros<float>({1, 4}));
        const std::vector<std::vector<int>> l(docs_n, std::vector<int>{1});
        const auto probe = with_minibatch_by_padded_size(scorer, budget::items(1));
        const std::uint64_t B = probe.bookkeeping_bytes(docs_n) + probe.planned_bytes(1, 1) + 100;
        REQUIRE(docs_n * sizeof(seq_view<const float>) > probe.planned_bytes(1, 1) + 100);
        auto batcher = with_minibatch_by_padded_size(scorer, budget::bytes(B));
        // The same splits as a plain list fit (one at a time) ...
        std::vector<seq_view<const float>> items;
        for (const auto& d : many) items.push_back(as_const_view(d));
        REQUIRE(batcher.predict(items).size() == docs_n);
        // ... but through with_splits the documents' index is paid too.
        auto pipe_tight = with_splits(batcher);
        REQUIRE_THROWS_AS(pipe_tight.predict(many, l), budget_error);
        REQUIRE_THROWS_WITH(pipe_tight.predict(many, l), Catch::Contains("index of its documents") &&
                                                             Catch::Contains(std::to_string(B)));
    }
    SECTION("a size computation that would overflow 64 bits is refused before allocating")
    {
        // A document that claims 2^33 tokens in one split (never read): its
        // cost count * L^2 * o * sizeof(T) = 2^66 * 4 overflows.
        std::vector<float> tiny(8, 0.f);
        const std::size_t rows = std::size_t(1) << 33;
        std::vector<Eigen::Map<const th::row_matrix<float>>> huge{
            Eigen::Map<const th::row_matrix<float>>(tiny.data(), static_cast<Eigen::Index>(rows), 4)};
        const std::vector<std::vector<std::size_t>> l{{rows}};
        const std::uint64_t before = tracker().stats().current_bytes;
        REQUIRE_THROWS_AS(direct.predict(huge, l), overflow_error);
        REQUIRE_THROWS_AS(pipe.predict(huge, l), overflow_error);
        REQUIRE_THROWS_WITH(direct.predict(huge, l), Catch::Contains("overflows 64 bits"));
        REQUIRE(tracker().stats().current_bytes == before);  // nothing leaked
    }
}

namespace {

/// A split-list mock whose backprop writes ones into dX of every other split
/// it is handed and records where those slots start; scores are zeros.
template <class T>
class half_grad_layer : public th::split_mock<T> {
public:
    using typename th::split_mock<T>::backprop_type;
    using th::split_mock<T>::split_mock;

    template <class Items>
    score_list<T> predict(const Items& X) const
    {
        score_list<T> Y;
        for (std::size_t k = 0; k < X.size(); ++k) Y.push_back(xt::zeros<T>(this->score_shape(X[k].rows)));
        return Y;
    }

    template <class Items, class Sink>
    void predict_stream(const Items& X, Sink&& sink) const
    {
        score_list<T> Y = predict(X);
        for (std::size_t k = 0; k < Y.size(); ++k) sink(k, as_score_view(Y[k]));
    }

    template <class Items>
    std::pair<score_list<T>, backprop_type> forward(const Items& X, mode = mode::train)
    {
        std::vector<const T*>* out = &written;
        backprop_type bp([out](span<const score_view<const T>>, span<const seq_view<T>> dX) {
            for (std::size_t k = 0; k < dX.size(); k += 2) {
                out->push_back(dX[k].data);
                for (std::size_t r = 0; r < dX[k].rows; ++r)
                    for (std::size_t c = 0; c < dX[k].cols; ++c) dX[k](r, c) = T(1);
            }
        });
        return {predict(X), std::move(bp)};
    }

    std::vector<const T*> written;  // first element of every slot written
};

// Frees n elements of garbage (7.0) just before a backprop, which the block
// cache (large blocks) or the heap (likely) hands out again for its dX.
template <class T>
void free_garbage(std::size_t n)
{
    tracking_allocator<T> a;
    T* junk = a.allocate(n);
    std::fill_n(junk, n, T(7));
    a.deallocate(junk, n);
}

}  // namespace

TEST_CASE("with_splits: rows of dX no split's gradient wrote are zero, large documents included", "[with_splits][mock]")
{
    // One document whose dX is a large block (from the block cache) and one
    // small one (from the heap), in 64-row splits.
    const std::size_t n_in = 64, len = 64;
    const std::size_t big_rows =
        (static_cast<std::size_t>(BIAFFINE_HUGE_PAGE_MIN_BYTES) + n_in * sizeof(double) - 1) / (n_in * sizeof(double));
    const std::size_t rows[2] = {(big_rows + len - 1) / len * len, 3 * len};
    std::vector<xt::xtensor<double, 2>> docs;
    std::vector<std::vector<int>> lengths;
    for (std::size_t r : rows) {
        docs.push_back(xt::xtensor<double, 2>::from_shape({r, n_in}));
        std::fill(docs.back().begin(), docs.back().end(), 0.25);
        lengths.emplace_back(r / len, static_cast<int>(len));
    }
    INFO("dX of the first document is a large block: " << detail::is_large_block(rows[0] * n_in * sizeof(double)));
    half_grad_layer<double> inner(n_in, 1);
    auto pipe = with_splits(with_minibatch_by_padded_size(inner, budget::items(4096)));
    auto fw = pipe.forward(docs, lengths, mode::train);
    const auto views = decltype(pipe)::grad_views(fw.first);
    for (std::size_t d : {0, 1}) free_garbage<double>(rows[d] * n_in);
    const auto dX = fw.second(span<const score_view<const double>>(views.data(), views.size()));
    REQUIRE(dX.size() == 2);
    const std::set<const double*> written(inner.written.begin(), inner.written.end());
    REQUIRE(written.size() == inner.written.size());
    std::size_t ones = 0, zeros = 0, wrong = 0;
    for (std::size_t d = 0; d < 2; ++d) {
        REQUIRE(dX[d].shape()[0] == rows[d]);
        for (std::size_t s = 0; s < rows[d] / len; ++s) {
            const double* first = dX[d].data() + s * len * n_in;
            const double want = written.count(first) != 0 ? 1.0 : 0.0;
            (want == 1.0 ? ones : zeros) += 1;
            wrong += static_cast<std::size_t>(std::count_if(first, first + len * n_in, [&](double x) { return x != want; }));
        }
    }
    CHECK(wrong == 0);
    CHECK(ones == written.size());
    CHECK(zeros > 0);
}

namespace {

template <class T>
void check_every_slot_written(double tol)
{
    scorer_config cfg;
    cfg.n_in = 64;
    cfg.hidden = 8;
    cfg.dropout = 0.0;  // two training forwards below must agree
    biaffine_scorer<T> s(cfg);
    INFO((sizeof(T) == 4 ? "float" : "double"));
    auto batcher = with_minibatch_by_padded_size(s, budget::items(4096));
    auto padder = with_pad_seq_unpad_matrix(s);
    half_grad_layer<T> half(cfg.n_in, 1);
    auto half_batcher = with_minibatch_by_padded_size(half, budget::items(4096));
    static_assert(detail::writes_every_slot<biaffine_scorer<T>>::value);
    static_assert(detail::writes_every_slot<decltype(batcher)>::value);
    static_assert(detail::writes_every_slot<decltype(padder)>::value);
    static_assert(!detail::writes_every_slot<half_grad_layer<T>>::value);
    static_assert(!detail::writes_every_slot<decltype(half_batcher)>::value);

    // One document whose dX is a large block (from the block cache) and a
    // small one, in splits of 1-40 tokens; freed garbage of each dX's size
    // just before backprop. Every element must come from the scorer: equal
    // to the split-list call, whose slots start as NaN.
    const std::size_t n_in = cfg.n_in;
    const std::size_t big_rows =
        (static_cast<std::size_t>(BIAFFINE_HUGE_PAGE_MIN_BYTES) + n_in * sizeof(T) - 1) / (n_in * sizeof(T));
    const std::size_t rows[2] = {big_rows + 17, 301};
    std::mt19937 rng(5);
    std::vector<xt::xtensor<T, 2>> docs;
    std::vector<std::vector<int>> lengths;
    std::vector<seq_view<const T>> views;
    std::vector<std::pair<std::size_t, std::size_t>> at;  // (document, first row) of each split
    for (std::size_t d = 0; d < 2; ++d) {
        docs.push_back(xt::xtensor<T, 2>::from_shape({rows[d], n_in}));
        for (T& x : docs.back()) x = static_cast<T>(std::uniform_real_distribution<double>(-1.0, 1.0)(rng));
        lengths.emplace_back();
        for (std::size_t r = 0; r < rows[d];) {
            const std::size_t n =
                std::min<std::size_t>(rows[d] - r, std::uniform_int_distribution<std::size_t>(1, 40)(rng));
            lengths.back().push_back(static_cast<int>(n));
            views.push_back(as_const_view(docs[d]).rows_view(r, n));
            at.emplace_back(d, r);
            r += n;
        }
    }
    auto pipe = with_splits(batcher);
    auto fw = pipe.forward(docs, lengths, mode::train);
    const auto dY = decltype(pipe)::grad_views(fw.first);
    for (std::size_t d : {0, 1}) free_garbage<T>(rows[d] * n_in);
    const auto dX = fw.second(span<const score_view<const T>>(dY.data(), dY.size()));
    REQUIRE(dX.size() == 2);

    auto [Yu, bpu] = s.forward(views, mode::train);
    REQUIRE(Yu.size() == views.size());
    std::vector<xt::xtensor<T, 2>> dXu;
    for (std::size_t d = 0; d < 2; ++d) {
        dXu.push_back(xt::xtensor<T, 2>::from_shape({rows[d], n_in}));
        std::fill(dXu.back().begin(), dXu.back().end(), std::numeric_limits<T>::quiet_NaN());
    }
    std::vector<seq_view<T>> slots;
    for (std::size_t k = 0; k < views.size(); ++k) {
        slots.push_back(as_view(dXu[at[k].first]).rows_view(at[k].second, views[k].rows));
    }
    bpu(span<const score_view<const T>>(dY.data(), dY.size()),
        span<const seq_view<T>>(slots.data(), slots.size()));
    std::size_t unwritten = 0, wrong = 0;
    for (std::size_t d = 0; d < 2; ++d) {
        REQUIRE(dX[d].shape()[0] == rows[d]);
        for (std::size_t i = 0; i < dX[d].size(); ++i) {
            const double u = dXu[d].data()[i], b = dX[d].data()[i];
            unwritten += std::isnan(u) ? 1 : 0;
            wrong += std::abs(b - u) <= tol * (1.0 + std::abs(u)) ? 0 : 1;
        }
    }
    CHECK(unwritten == 0);
    CHECK(wrong == 0);
}

}  // namespace

TEST_CASE("with_splits: no zero-fill over layers that write every slot, and the scorer writes every element",
          "[with_splits]")
{
    check_every_slot_written<double>(1e-12);
    check_every_slot_written<float>(1e-5);
}
