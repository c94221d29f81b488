// Tests of biaffine/tree_marginals.hpp and detail/tree_marginals_kind.hpp:
// the tree CRF's arc marginals as an output kind through the scorer and
// every layer, against the per-split tree_marginals (tree_crf.hpp) on the
// same split's scores computed alone by the full-scores kind:
//   - the scorer, its stream, the padded interface, the batcher under a byte
//     budget that makes several batches, with_pad_seq_unpad_matrix and
//     with_splits: the same bytes, both tree kinds, rows summing to 1;
//   - cost_as(): the stream carves everything from a block of exactly its
//     scratch, one alignment unit less spills (all splits at max_len), and
//     the difference to the full kind's scratch is the solver's;
//   - the batcher's working-set peak stays within its budget; a stream's
//     peak less the per-split bookkeeping is within 10% at 10k and 100k
//     tokens;
//   - a bf16 scorer: its bf16 product serves the kind, scratch counted;
//   - padded outputs hold 0 outside each split;
//   - what the kind refuses: backward, a scorer of several labels.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <random>
#include <vector>

#include <xtensor/xtensor.hpp>
#include <xtensor/xview.hpp>

#include "biaffine/biaffine.hpp"

using namespace biaffine;

namespace {

using np_kind = tree_marginals_kind<tree_kind::non_projective>;
using p_kind = tree_marginals_kind<tree_kind::projective>;

scorer_config arc_config(std::size_t labels = 1)
{
    scorer_config c;
    c.n_in = 8;
    c.hidden = 6;
    c.labels = labels;
    c.seed = 21;
    return c;
}

/// Documents of random features, rows `[n, n_in]` per split list entry.
struct splits_fixture {
    std::vector<xt::xtensor<float, 2>> x;
    std::vector<seq_view<const float>> items;
    splits_fixture(std::size_t n_in, const std::vector<std::size_t>& lens, unsigned seed)
    {
        std::mt19937 gen(seed);
        // Spread wide enough that the marginals are far from uniform.
        std::normal_distribution<float> nd(0.0f, 2.0f);
        for (std::size_t n : lens) {
            xt::xtensor<float, 2> a = xt::xtensor<float, 2>::from_shape({n, n_in});
            for (auto& v : a) v = nd(gen);
            x.push_back(std::move(a));
        }
        for (const auto& a : x) items.push_back(as_const_view(a));
    }
};

const std::vector<std::size_t> lens{5, 1, 0, 2, 9, 3, 7, 4};

/// Each split's marginals by tree_marginals on its scores alone (the
/// full-scores kind's output of the same scorer).
std::vector<score_tensor<float>> reference(const biaffine_scorer<float>& s, const splits_fixture& f, tree_kind k)
{
    const score_list<float> scores = s.predict(f.items);
    std::vector<score_tensor<float>> out;
    for (const auto& y : scores) {
        const std::size_t n = y.shape()[0];
        score_tensor<float> m = score_tensor<float>::from_shape({n, n});
        tree_marginals<float, float>(as_score_view(y), {m.data(), n, 1, static_cast<std::ptrdiff_t>(n)}, k);
        out.push_back(std::move(m));
    }
    return out;
}

/// The reference within 1e-6 (see below), and each row a distribution.
template <class Y>
void check_same(const Y& got, const std::vector<score_tensor<float>>& want)
{
    REQUIRE(got.size() == want.size());
    for (std::size_t k = 0; k < got.size(); ++k) {
        INFO("split " << k);
        const std::size_t n = want[k].shape()[0];
        REQUIRE(got[k].size() == n * n);
        // Within 1e-6, not bytes: the reference scores come from the full
        // kind's predict, which on the Eigen path computes a batch's scores
        // in one product across splits, whose float rounding may differ in
        // the last bit from the per-split product the marginals kind runs
        // (a score's last bit moves a marginal by at most p(1-p) times it).
        // On the GEMM kernel's path the two agree byte for byte.
        std::size_t differ = 0;
        for (std::size_t i = 0; i < n * n; ++i) differ += !(std::abs(got[k].data()[i] - want[k].data()[i]) <= 1e-6f);
        CHECK(differ == 0);
        for (std::size_t m = 0; m < n; ++m) {
            double row = 0;
            for (std::size_t h = 0; h < n; ++h) row += got[k].data()[m * n + h];
            CHECK(std::abs(row - 1.0) < 1e-5);
        }
    }
}

template <tree_kind K, class Layer>
score_list<float> streamed_split_list(const Layer& l, const splits_fixture& f)
{
    score_list<float> out(f.items.size());
    std::vector<int> seen(f.items.size(), 0);
    predict_marginals_stream<K>(l, f.items, [&](std::size_t k, score_view<const float> v) {
        ++seen[k];
        out[k] = score_tensor<float>::from_shape({v.n, v.n});
        for (std::size_t m = 0; m < v.n; ++m)
            for (std::size_t h = 0; h < v.n; ++h) out[k](m, h) = v(m, h);
    });
    for (int c : seen) CHECK(c == 1);  // one [n, n] per split
    return out;
}

/// A budget that splits `lens` into several batches: the bookkeeping and a
/// third of one batch of every split, at least the longest split alone.
template <class Kind, class Layer>
std::uint64_t splitting_budget(const Layer& layer)
{
    const std::size_t n = lens.size(), L = 9;
    const auto probe = with_minibatch_by_padded_size(layer, budget::items(1));
    const auto batch = [&](std::size_t count) {
        return layer.template cost_as<Kind>(count, L, mode::eval).total() + count * sizeof(score_tensor<float>);
    };
    return probe.bookkeeping_bytes(n) + probe.template kept_bytes<Kind>(n, mode::eval) + 128 * n +
           std::max(batch(1), batch(n) / 3);
}

template <tree_kind K>
void check_every_layer()
{
    using Kind = tree_marginals_kind<K>;
    INFO(detail::tree_kind_name(K));
    splits_fixture f(8, lens, 4);
    biaffine_scorer<float> s(arc_config());
    const auto want = reference(s, f, K);
    check_same(predict_marginals<K>(s, f.items), want);
    check_same(streamed_split_list<K>(s, f), want);
    // The padded interface: [b, L, L], each split's block.
    {
        const std::size_t L = 9;
        xt::xtensor<float, 3> xp = xt::zeros<float>({lens.size(), L, std::size_t(8)});
        const std::vector<std::int64_t> ln(lens.begin(), lens.end());
        for (std::size_t k = 0; k < lens.size(); ++k) xt::view(xp, k, xt::range(0, lens[k]), xt::all()) = f.x[k];
        const score_array<float> yp = s.predict_padded_as<Kind>(xp, ln, no_heads{});
        std::vector<score_tensor<float>> blocks;
        for (std::size_t k = 0; k < lens.size(); ++k) {
            const auto v = Kind::padded(yp.data(), k, lens[k], L, 1);
            score_tensor<float> b = score_tensor<float>::from_shape({lens[k], lens[k]});
            for (std::size_t m = 0; m < v.n; ++m)
                for (std::size_t h = 0; h < v.n; ++h) b(m, h) = v(m, h);
            blocks.push_back(std::move(b));
        }
        check_same(blocks, want);
        // Padding holds no probability.
        std::size_t padded_nonzero = 0;
        for (std::size_t k = 0; k < lens.size(); ++k)
            for (std::size_t m = 0; m < L; ++m)
                for (std::size_t h = 0; h < L; ++h) padded_nonzero += (m >= lens[k] || h >= lens[k]) && yp(k, m, h) != 0;
        CHECK(padded_nonzero == 0);
    }
    // The batcher under a budget that makes several batches.
    auto mb = with_minibatch_by_padded_size(s, budget::bytes(splitting_budget<Kind>(s)));
    check_same(predict_marginals<K>(mb, f.items), want);
    CHECK(mb.batch_count() > 1);
    CHECK(mb.oversize_count() == 0);
    check_same(streamed_split_list<K>(mb, f), want);
    // The padded layer, alone and batched.
    auto pad = with_pad_seq_unpad_matrix(s);
    check_same(predict_marginals<K>(pad, f.items), want);
    auto mbp = with_minibatch_by_padded_size(pad, budget::bytes(splitting_budget<Kind>(pad)));
    check_same(predict_marginals<K>(mbp, f.items), want);
    CHECK(mbp.batch_count() > 1);
    // with_splits over the padded batcher: two documents.
    const std::vector<xt::xtensor<float, 2>> docs{
        xt::concatenate(xt::xtuple(f.x[0], f.x[1], f.x[2])),
        xt::concatenate(xt::xtuple(f.x[3], f.x[4], f.x[5], f.x[6], f.x[7]))};
    const std::vector<std::vector<std::size_t>> split_lengths{{5, 1, 0}, {2, 9, 3, 7, 4}};
    const auto pipe = with_splits(mbp);
    check_same(predict_marginals<K>(pipe, docs, split_lengths), want);
    score_list<float> by_docs(lens.size());
    predict_marginals_stream<K>(pipe, docs, split_lengths,
                                [&](std::size_t k, std::size_t, score_view<const float> v) {
                                    by_docs[k] = score_tensor<float>::from_shape({v.n, v.n});
                                    for (std::size_t m = 0; m < v.n; ++m)
                                        for (std::size_t h = 0; h < v.n; ++h) by_docs[k](m, h) = v(m, h);
                                });
    check_same(by_docs, want);
}

}  // namespace

TEST_CASE("tree marginals kind: every layer gives each split's tree_marginals, same bytes", "[tree_marginals]")
{
    check_every_layer<tree_kind::non_projective>();
    check_every_layer<tree_kind::projective>();
}

TEST_CASE("tree marginals kind: a bf16 scorer's marginals are tree_marginals of its bf16 scores", "[tree_marginals]")
{
    // The bf16 inference product (bf16_product) serves the kind too, its
    // scratch counted: the stream fits a block of exactly cost_as's scratch.
    splits_fixture f(8, lens, 12);
    scorer_config cfg = arc_config();
    cfg.precision = compute_precision::bf16;
    biaffine_scorer<float> s(cfg);
    {
        // The bf16 path runs: its scores are not the fp32 scorer's.
        const score_list<float> a = s.predict(f.items), b = biaffine_scorer<float>(arc_config()).predict(f.items);
        std::size_t differ = 0;
        for (std::size_t k = 0; k < a.size(); ++k)
            for (std::size_t i = 0; i < a[k].size(); ++i) differ += a[k].data()[i] != b[k].data()[i];
        CHECK(differ > 0);
    }
    for (tree_kind k : {tree_kind::non_projective, tree_kind::projective}) {
        INFO(detail::tree_kind_name(k));
        const auto want = reference(s, f, k);
        const bool proj = k == tree_kind::projective;
        check_same(proj ? predict_marginals<tree_kind::projective>(s, f.items) : predict_marginals(s, f.items), want);
        const batch_cost c = proj ? s.cost_as<p_kind>(lens.size(), 9, mode::eval) : s.cost_as<np_kind>(lens.size(), 9, mode::eval);
        workspace_scope ws(c.scratch);
        scoped_peak sp;
        const memory_stats s0 = tracker().stats();
        const auto sink = [](std::size_t, score_view<const float>) {};
        if (proj) {
            predict_marginals_stream<tree_kind::projective>(s, f.items, sink);
        } else {
            predict_marginals_stream(s, f.items, sink);
        }
        CHECK(sp.work_peak_bytes() == s0.current_bytes - s0.output_bytes);
    }
}

TEST_CASE("tree marginals kind: the two tree kinds differ where non-projective trees carry mass", "[tree_marginals]")
{
    // Guards the comparison above against a kind that ignores its tree set.
    splits_fixture f(8, {9}, 6);
    biaffine_scorer<float> s(arc_config());
    const auto a = predict_marginals<tree_kind::non_projective>(s, f.items);
    const auto b = predict_marginals<tree_kind::projective>(s, f.items);
    double most = 0;
    for (std::size_t i = 0; i < a[0].size(); ++i) most = std::max(most, double(std::abs(a[0].data()[i] - b[0].data()[i])));
    CHECK(most > 1e-3);
}

TEST_CASE("tree marginals kind: cost_as holds the solver's scratch exactly", "[tree_marginals][memory]")
{
    biaffine_scorer<float> s(arc_config());
    for (const std::vector<std::size_t>& ls : {std::vector<std::size_t>{12, 3, 12}, std::vector<std::size_t>{12, 12, 12},
                                               std::vector<std::size_t>{40}}) {
        splits_fixture f(8, ls, 9);
        const std::size_t L = *std::max_element(ls.begin(), ls.end());
        const bool all_at_max = std::all_of(ls.begin(), ls.end(), [&](std::size_t n) { return n == L; });
        for (tree_kind k : {tree_kind::non_projective, tree_kind::projective}) {
            INFO(detail::tree_kind_name(k) << ", " << ls.size() << " splits, max_len " << L);
            const bool proj = k == tree_kind::projective;
            const batch_cost c = proj ? s.cost_as<p_kind>(ls.size(), L, mode::eval)
                                      : s.cost_as<np_kind>(ls.size(), L, mode::eval);
            const batch_cost full = s.cost(ls.size(), L, mode::eval);
            // The solver's doubles: the split's scores and marginals and the solver's own.
            const std::uint64_t solver =
                detail::scratch_bytes<double>(2 * L * L + detail::tree_solver_cells(k, L));
            CHECK(c.scratch - full.scratch == solver);
            CHECK(c.outputs == full.outputs);
            const auto run = [&]() {
                const auto sink = [](std::size_t, score_view<const float>) {};
                if (proj) {
                    predict_marginals_stream<tree_kind::projective>(s, f.items, sink);
                } else {
                    predict_marginals_stream<tree_kind::non_projective>(s, f.items, sink);
                }
            };
            {
                // No scope: the heap's peak is within the report.
                scoped_peak sp;
                const memory_stats s0 = tracker().stats();
                run();
                const std::uint64_t used = sp.work_peak_bytes() - (s0.current_bytes - s0.output_bytes);
                CHECK(used > solver);
                CHECK(used <= c.scratch);
            }
            {
                // A block of the reported size: nothing else is allocated.
                workspace_scope ws(c.scratch);
                scoped_peak sp;
                const memory_stats s0 = tracker().stats();
                run();
                CHECK(sp.work_peak_bytes() == s0.current_bytes - s0.output_bytes);
                CHECK(tracker().stats().allocations == s0.allocations);
            }
            // Exact: one alignment unit less and something spills to the heap.
            // On the GEMM kernel's path only: the Eigen backend's own
            // inference scratch (not the kind's) is reported with slack, so
            // there 64 bytes less still fit (found by the sanitizer build).
            if (all_at_max && BIAFFINE_GEMM_KERNEL) {
                workspace_scope ws(c.scratch - 64);
                scoped_peak sp;
                const memory_stats s0 = tracker().stats();
                run();
                CHECK(sp.work_peak_bytes() > s0.current_bytes - s0.output_bytes);
            }
            {
                // predict keeps exactly its outputs (the tensors and the list).
                const std::uint64_t before = tracker().current_bytes();
                const score_list<float> Y = proj ? predict_marginals<tree_kind::projective>(s, f.items)
                                                 : predict_marginals<tree_kind::non_projective>(s, f.items);
                std::uint64_t outputs = 0;
                for (std::size_t n : ls) outputs += std::uint64_t(n) * n * sizeof(float);
                CHECK(tracker().current_bytes() - before == outputs + Y.capacity() * sizeof(score_tensor<float>));
            }
        }
    }
}

TEST_CASE("tree marginals kind: the batcher keeps its budget; the stream's peak is flat from 10k to 100k tokens",
          "[tree_marginals][memory]")
{
    scorer_config cfg = arc_config();
    cfg.n_in = 32;
    cfg.hidden = 16;
    biaffine_scorer<float> s(cfg);
    const std::uint64_t B = 4u << 20;
    auto mb = with_minibatch_by_padded_size(s, budget::bytes(B));
    const auto pipe = with_splits(mb);
    std::mt19937 rng(77);
    std::lognormal_distribution<double> len_law(std::log(18.0), 0.8);
    std::vector<std::uint64_t> peaks;
    for (std::size_t tokens : {std::size_t(10000), std::size_t(100000)}) {
        INFO(tokens << " tokens");
        // One document: split lengths log-normal in [1, 100], the longest
        // fixed at 100 so both documents need the same largest block.
        std::vector<std::vector<std::size_t>> split_lengths(1);
        std::size_t total = 100;
        split_lengths[0].push_back(100);
        while (total < tokens) {
            const auto n = std::min<std::size_t>(tokens - total, std::clamp<std::size_t>(std::size_t(len_law(rng)), 1, 100));
            split_lengths[0].push_back(n);
            total += n;
        }
        std::vector<xt::xtensor<float, 2>> docs{xt::xtensor<float, 2>::from_shape({tokens, cfg.n_in})};
        std::normal_distribution<float> nd;
        for (auto& v : docs[0]) v = nd(rng);
        mb.reset_counts();
        std::size_t splits = 0;
        double worst_row = 0;
        scoped_peak sp;
        const memory_stats s0 = tracker().stats();
        predict_marginals_stream(pipe, docs, split_lengths, [&](std::size_t, std::size_t, score_view<const float> v) {
            ++splits;
            for (std::size_t m = 0; m < v.n; ++m) {
                double row = 0;
                for (std::size_t h = 0; h < v.n; ++h) row += v(m, h);
                worst_row = std::max(worst_row, std::abs(row - 1.0));
            }
        });
        const std::uint64_t work = sp.work_peak_bytes() - (s0.current_bytes - s0.output_bytes);
        CHECK(splits == split_lengths[0].size());
        CHECK(worst_row < 1e-4);
        CHECK(mb.oversize_count() == 0);
        CHECK(mb.batch_count() > 1);
        CHECK(work <= B);
        // What grows with the document is the per-split bookkeeping
        // (lengths, views, the batch plan): the peak less it is flat.
        peaks.push_back(work - mb.bookkeeping_bytes(split_lengths[0].size()));
    }
    INFO("peaks less bookkeeping: " << peaks[0] << ", " << peaks[1]);
    CHECK(peaks[1] <= peaks[0] + peaks[0] / 10);
}

TEST_CASE("tree marginals kind: no backward, and arc scores only", "[tree_marginals][errors]")
{
    splits_fixture f(8, {4, 3}, 2);
    biaffine_scorer<float> s(arc_config());
    auto [Y, bp] = s.forward_as<np_kind>(f.items, no_heads{}, mode::train);
    const auto want = reference(s, f, tree_kind::non_projective);
    check_same(Y, want);  // the forward predicts
    std::vector<score_view<const float>> g;
    for (const auto& y : Y) g.push_back(as_score_view(y));
    std::vector<xt::xtensor<float, 2>> dx{xt::zeros<float>({std::size_t(4), std::size_t(8)}),
                                          xt::zeros<float>({std::size_t(3), std::size_t(8)})};
    std::vector<seq_view<float>> slots{as_view(dx[0]), as_view(dx[1])};
    REQUIRE_THROWS_WITH(bp(span<const score_view<const float>>(g.data(), g.size()),
                           span<const seq_view<float>>(slots.data(), slots.size())),
                        Catch::Contains("prediction only") && Catch::Contains("tree_crf_loss"));
    biaffine_scorer<float> labelled(arc_config(3));
    REQUIRE_THROWS_AS(predict_marginals(labelled, f.items), shape_error);
    REQUIRE_THROWS_WITH(predict_marginals(labelled, f.items), Catch::Contains("1 label"));
}
