// Tests of biaffine/detail/output_kind.hpp: an output kind is a policy. A
// fourth kind, defined here and nowhere in the library - the scores of the
// first K heads, `[n, min(K, n) * o]` per split (row m: S[m, h, :] for
// h < K), with its own product, softmax (over the row) and backward - runs
// through the scorer (split list, streams, padded interface), the batcher
// under a byte budget, with_pad_seq_unpad_matrix and with_splits, forward and
// backward, against independent computations:
//   - the full-scores kind's output of the same scorer, sliced to the first
//     K heads (the [n, n, o] products, not this kind's loops);
//   - backward in logits mode against the full kind's backward with the
//     upstream gradient zero outside the first K heads; in probabilities
//     mode by central finite differences in double;
//   - the tracker: the outputs are exactly what inference keeps, the stream
//     and backward carve all their scratch from a block of cost_as()'s
//     scratch, training keeps no more than its saved bytes.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <random>
#include <type_traits>
#include <vector>

#include <xtensor/xarray.hpp>
#include <xtensor/xtensor.hpp>

#include "biaffine/biaffine.hpp"

using namespace biaffine;

namespace {

/// Scores of the first K heads: split k's `[n, min(K, n) * o]`, column
/// h * o + l holding S[m, h, l]; its softmax runs over the whole row.
template <std::size_t K>
struct first_heads_kind : detail::kind_without_args, detail::kind_layer_calls<first_heads_kind<K>> {
    template <class T>
    using view = seq_view<T>;
    static constexpr const char* grad_name = "first-heads";
    static constexpr const char* output_name = "split first heads";
    static constexpr bool per_row = false;  // min(K, n) columns: not one width per row
    static constexpr const char* saved_name = "saved first heads";

    static std::size_t width(std::size_t n, std::size_t o) { return std::min(K, n) * o; }
    static std::uint64_t elements(std::size_t n, std::size_t o, const char* what)
    {
        return detail::checked_product(what, n, std::min(K, n), o);
    }
    template <class T>
    static view<T> dense(T* p, std::size_t n, std::size_t o)
    {
        return {p, n, width(n, o), static_cast<std::ptrdiff_t>(width(n, o)), 1};
    }
    /// Split k of a padded `[b, L, min(K, L) * o]`.
    template <class T>
    static view<T> padded(T* base, std::size_t k, std::size_t n, std::size_t L, std::size_t o)
    {
        const std::size_t w = width(L, o);
        return {base + k * L * w, n, width(n, o), static_cast<std::ptrdiff_t>(w), 1};
    }
    template <class T, class G>
    static void check_grad(const char* who, std::size_t k, const G& g, std::size_t n, std::size_t o)
    {
        if (g.rows != n || g.cols != width(n, o)) {
            throw shape_error(detail::msg(who, ": split ", k, ": expected [", n, ", ", width(n, o), "]"));
        }
    }
    template <class T, class G>
    static void check_document_grad(const char* who, std::size_t k, const G& g, std::size_t n, std::size_t o,
                                    std::size_t)
    {
        check_grad<T>(who, k, g, n, o);
    }
    template <class T>
    static void softmax(view<T> y)
    {
        for (std::size_t m = 0; m < y.rows; ++m) {
            T* r = &y(m, 0);
            const T top = *std::max_element(r, r + y.cols);
            T sum = 0;
            for (std::size_t c = 0; c < y.cols; ++c) sum += r[c] = std::exp(r[c] - top);
            for (std::size_t c = 0; c < y.cols; ++c) r[c] /= sum;
        }
    }
    template <class T>
    static void softmax_backward(view<const T> y, view<const T> dy, view<T> ds)
    {
        for (std::size_t m = 0; m < y.rows; ++m) {
            T dot = 0;
            for (std::size_t c = 0; c < y.cols; ++c) dot += y(m, c) * dy(m, c);
            for (std::size_t c = 0; c < y.cols; ++c) ds(m, c) = y(m, c) * (dy(m, c) - dot);
        }
    }
    template <class T>
    static view<const T> read_only(view<T> y)
    {
        return detail::read_only(y);
    }
    template <class A>
    static auto const_view_of(const A& a)
    {
        return as_const_view(a);
    }
    template <class T>
    static void assign(view<T> dst, view<const T> src)
    {
        for (std::size_t m = 0; m < src.rows; ++m)
            for (std::size_t c = 0; c < src.cols; ++c) dst(m, c) = src(m, c);
    }
    template <class T>
    static void copy(view<const T> y, T* dst)
    {
        for (std::size_t m = 0; m < y.rows; ++m)
            for (std::size_t c = 0; c < y.cols; ++c) dst[m * y.cols + c] = y(m, c);
    }
    template <class O, class T>
    static void convert(view<O> dst, view<const T> src)
    {
        for (std::size_t m = 0; m < src.rows; ++m)
            for (std::size_t c = 0; c < src.cols; ++c) dst(m, c) = static_cast<O>(src(m, c));
    }
    template <class T>
    static std::size_t tokens(const view<T>& y) noexcept
    {
        return y.rows;
    }
    template <class O>
    static score_tensor<O> new_output(std::size_t n, std::size_t o)
    {
        return score_tensor<O>::from_shape({n, width(n, o)});
    }
    template <class O>
    static score_array<O> new_padded(std::size_t b, std::size_t L, std::size_t o)
    {
        return xt::zeros<O>({b, L, width(L, o)});
    }
    template <class O, class Views>
    static void fill_padding(score_array<O>&, const Views&, O)
    {
    }

    // Plain loops over the split's rows of V and T (T row h: o blocks of hv).
    template <class Ops, class VA, class T>
    static void product(const VA& va, const T* t, const std::size_t*, std::size_t o, view<T> y, T*)
    {
        const std::size_t n = y.rows, kk = std::min(K, n), hv = static_cast<std::size_t>(va.cols());
        for (std::size_t m = 0; m < n; ++m)
            for (std::size_t h = 0; h < kk; ++h)
                for (std::size_t l = 0; l < o; ++l) {
                    T s = 0;
                    const T* tr = t + (h * o + l) * hv;
                    for (std::size_t j = 0; j < hv; ++j) s += va(m, j) * tr[j];
                    y(m, h * o + l) = s;
                }
    }
    template <class Ops, class VA, class T, class DVA>
    static void product_backward(const VA& va, const T* t, const std::size_t*, std::size_t o, view<const T> g,
                                 DVA&& dva, T* dt, T*)
    {
        const std::size_t n = g.rows, kk = std::min(K, n), hv = static_cast<std::size_t>(va.cols());
        dva.setZero();
        std::fill(dt, dt + n * o * hv, T(0));  // every row of the split's dT is written
        for (std::size_t m = 0; m < n; ++m)
            for (std::size_t h = 0; h < kk; ++h)
                for (std::size_t l = 0; l < o; ++l) {
                    const T gm = g(m, h * o + l);
                    const T* tr = t + (h * o + l) * hv;
                    T* dtr = dt + (h * o + l) * hv;
                    for (std::size_t j = 0; j < hv; ++j) {
                        dva(m, j) += gm * tr[j];
                        dtr[j] += gm * va(m, j);
                    }
                }
    }
    template <class F, class Dims, class D, class Args>
    static void bf16_product(const Dims&, const D*, const D*, const Args&, std::size_t, std::size_t*, float*,
                             view<float>)
    {
        throw error("first_heads_kind: no bf16 product");
    }
};

using first3 = first_heads_kind<3>;

template <class T>
struct fixture {
    std::vector<xt::xtensor<T, 2>> x;
    std::vector<seq_view<const T>> items;
    std::vector<std::size_t> lengths;
    fixture(std::size_t n_in, std::vector<std::size_t> lens, unsigned seed) : lengths(std::move(lens))
    {
        std::mt19937 gen(seed);
        std::normal_distribution<double> nd(0.0, 1.0);
        for (std::size_t n : lengths) {
            xt::xtensor<T, 2> a = xt::xtensor<T, 2>::from_shape({n, n_in});
            for (auto& v : a) v = static_cast<T>(nd(gen));
            x.push_back(std::move(a));
        }
        for (const auto& a : x) items.push_back(as_const_view(a));
    }
};

scorer_config config(std::size_t o, train_output out = train_output::probabilities, bool recompute = false)
{
    scorer_config c;
    c.n_in = 6;
    c.hidden = 5;
    c.labels = o;
    c.seed = 11;
    c.train_outputs = out;
    c.recompute_in_backward = recompute;
    return c;
}

// The full kind's `[n, n(, o)]` sliced to the first K heads: `[n, min(K, n) * o]`.
template <class T>
xt::xtensor<T, 2> first_heads_of(const score_tensor<T>& s, std::size_t K, std::size_t o)
{
    const std::size_t n = s.shape()[0], kk = std::min(K, n);
    xt::xtensor<T, 2> r = xt::xtensor<T, 2>::from_shape({n, kk * o});
    for (std::size_t m = 0; m < n; ++m)
        for (std::size_t h = 0; h < kk; ++h)
            for (std::size_t l = 0; l < o; ++l) r(m, h * o + l) = s.data()[(m * n + h) * o + l];
    return r;
}

// Runs the backprop `bp` of a kind with `[n, n(, o)]`-or-`[n, w]` gradients
// `g` (View: how the callback takes one); returns the `[n, n_in]` input
// gradients it writes.
template <class View, class T, class G, class BP>
std::vector<xt::xtensor<T, 2>> run_backprop(BP& bp, const std::vector<G>& g, std::size_t n_in)
{
    std::vector<xt::xtensor<T, 2>> dx;
    std::vector<View> gv;
    std::vector<seq_view<T>> slots;
    for (const auto& a : g) {
        dx.push_back(xt::zeros<T>({a.shape()[0], n_in}));
        if constexpr (std::is_same<View, score_view<const T>>::value) {
            gv.push_back(as_score_view(a));
        } else {
            gv.push_back(as_const_view(a));
        }
    }
    for (auto& a : dx) slots.push_back(as_view(a));
    bp(span<const View>(gv.data(), gv.size()), span<const seq_view<T>>(slots.data(), slots.size()));
    return dx;
}

template <class A, class B>
double worst(const A& a, const B& b)
{
    REQUIRE(a.size() == b.size());
    double w = 0;
    for (std::size_t i = 0; i < a.size(); ++i) {
        w = std::max(w, std::abs(double(a.data()[i]) - double(b.data()[i])));
    }
    return w;
}

const std::vector<std::size_t> lens{5, 1, 0, 2, 7, 3, 4};

// A byte budget for `lens` through the batcher over `layer` (the scorer or
// the padded layer) that splits them into several batches: what the call
// holds whatever its batching (the batcher's bookkeeping, what a forward
// keeps, 128 bytes a split for with_splits' index), plus a third of one
// batch of every split and at least the longest split alone.
template <class Layer>
std::uint64_t splitting_budget(Layer& layer, mode m)
{
    using O = typename Layer::output_type;
    const std::size_t n = lens.size(), L = 7;
    const auto probe = with_minibatch_by_padded_size(layer, budget::items(1));
    const auto batch = [&](std::size_t count) {
        return layer.template cost_as<first3>(count, L, m).total() + count * sizeof(score_tensor<O>);
    };
    return probe.bookkeeping_bytes(n) + probe.template kept_bytes<first3>(n, m) + 128 * n +
           std::max(batch(1), batch(n) / 3);
}

}  // namespace

TEST_CASE("a kind defined in a test: inference through the scorer and every layer equals the full kind sliced",
          "[kind]")
{
    for (std::size_t o : {std::size_t(1), std::size_t(3)}) {
        INFO("o " << o);
        fixture<float> f(6, lens, 3);
        biaffine_scorer<float> s(config(o));
        const score_list<float> full = s.predict(f.items);
        std::vector<xt::xtensor<float, 2>> want;
        for (const auto& y : full) want.push_back(first_heads_of(y, 3, o));
        const auto check = [&](const score_list<float>& Y) {
            REQUIRE(Y.size() == want.size());
            for (std::size_t k = 0; k < Y.size(); ++k) {
                INFO("split " << k);
                REQUIRE(Y[k].dimension() == 2);
                CHECK(Y[k].shape()[0] == want[k].shape()[0]);
                CHECK(Y[k].shape()[1] == want[k].shape()[1]);
                CHECK(worst(Y[k], want[k]) < 1e-5);
            }
        };
        check(s.predict_as<first3>(f.items, detail::no_heads{}));
        // Streams: one split of scratch reused, and the caller's memory.
        score_list<float> streamed(f.items.size());
        s.predict_stream_as<first3>(f.items, detail::no_heads{}, [&](std::size_t k, seq_view<const float> v) {
            streamed[k] = score_tensor<float>::from_shape({v.rows, v.cols});
            first3::assign(first3::dense(streamed[k].data(), v.rows, o), v);
        });
        check(streamed);
        // The padded interface: `[b, L, min(K, L) * o]`, padded rows 0.
        {
            const std::size_t L = 7;
            xt::xtensor<float, 3> xp = xt::zeros<float>({lens.size(), L, std::size_t(6)});
            std::vector<std::int64_t> ln;
            for (std::size_t k = 0; k < lens.size(); ++k) {
                ln.push_back(static_cast<std::int64_t>(lens[k]));
                for (std::size_t m = 0; m < lens[k]; ++m)
                    for (std::size_t j = 0; j < 6; ++j) xp(k, m, j) = f.x[k](m, j);
            }
            const score_array<float> yp = s.predict_padded_as<first3>(xp, ln, detail::no_heads{});
            REQUIRE(yp.shape()[2] == 3 * o);
            for (std::size_t k = 0; k < lens.size(); ++k) {
                const auto v = first3::padded(yp.data(), k, lens[k], L, o);
                for (std::size_t m = 0; m < v.rows; ++m)
                    for (std::size_t c = 0; c < v.cols; ++c) CHECK(std::abs(v(m, c) - want[k](m, c)) < 1e-5);
            }
        }
        // The batcher under a byte budget that splits the list into several batches.
        auto mb = with_minibatch_by_padded_size(s, budget::bytes(splitting_budget(s, mode::eval)));
        check(mb.predict_as<first3>(f.items, detail::no_heads{}));
        CHECK(mb.batch_count() > 1);
        CHECK(mb.oversize_count() == 0);
        score_list<float> batched(f.items.size());
        mb.predict_stream_as<first3>(f.items, detail::no_heads{}, [&](std::size_t k, seq_view<const float> v) {
            batched[k] = score_tensor<float>::from_shape({v.rows, v.cols});
            first3::assign(first3::dense(batched[k].data(), v.rows, o), v);
        });
        check(batched);
        // The padded layer, alone and under the batcher.
        auto pad = with_pad_seq_unpad_matrix(s);
        check(pad.predict_as<first3>(f.items, detail::no_heads{}));
        auto mbp = with_minibatch_by_padded_size(pad, budget::bytes(splitting_budget(pad, mode::eval)));
        check(mbp.predict_as<first3>(f.items, detail::no_heads{}));
        CHECK(mbp.batch_count() > 1);
        // with_splits over the batcher: two documents.
        const std::vector<xt::xtensor<float, 2>> docs{xt::concatenate(xt::xtuple(f.x[0], f.x[1], f.x[2])),
                                                      xt::concatenate(xt::xtuple(f.x[3], f.x[4], f.x[5], f.x[6]))};
        const std::vector<std::vector<std::size_t>> split_lengths{{5, 1, 0}, {2, 7, 3, 4}};
        check(with_splits(mb).predict_as<first3>(docs, split_lengths, detail::no_heads{}));
    }
}

TEST_CASE("a kind defined in a test: backward in logits equals the full kind's with dY zero past the first K heads",
          "[kind]")
{
    const std::size_t o = 2;
    for (bool recompute : {false, true}) {
        INFO("recompute " << recompute);
        fixture<double> f(6, lens, 5);
        biaffine_scorer<double> a(config(o, train_output::logits, recompute)), b(config(o, train_output::logits, recompute));
        auto mb = with_minibatch_by_padded_size(a, budget::bytes(splitting_budget(a, mode::train)));
        auto [Y, bp] = mb.forward_as<first3>(f.items, detail::no_heads{}, mode::train);
        CHECK(mb.batch_count() > 1);
        auto [S, bps] = b.forward(f.items, mode::train);
        std::mt19937 gen(9);
        std::normal_distribution<double> nd;
        std::vector<xt::xtensor<double, 2>> g;
        std::vector<score_tensor<double>> gs;
        for (std::size_t k = 0; k < lens.size(); ++k) {
            const std::size_t n = lens[k], kk = std::min<std::size_t>(3, n);
            CHECK(worst(Y[k], first_heads_of(S[k], 3, o)) < 1e-12);
            g.push_back(xt::xtensor<double, 2>::from_shape({n, kk * o}));
            score_tensor<double> z = xt::zeros<double>({n, n, o});
            for (std::size_t m = 0; m < n; ++m)
                for (std::size_t c = 0; c < kk * o; ++c) z.data()[m * n * o + c] = g.back()(m, c) = nd(gen);
            gs.push_back(std::move(z));
        }
        const auto dxa = run_backprop<seq_view<const double>, double>(bp, g, 6);
        const auto dxb = run_backprop<score_view<const double>, double>(bps, gs, 6);
        for (std::size_t k = 0; k < lens.size(); ++k) CHECK(worst(dxa[k], dxb[k]) < 1e-12);
        const auto pa = a.parameters(), pb = b.parameters();
        for (std::size_t i = 0; i < pa.size(); ++i) {
            INFO(pa[i].name);
            double w = 0;
            for (std::size_t j = 0; j < pa[i].size; ++j) w = std::max(w, std::abs(pa[i].grad[j] - pb[i].grad[j]));
            CHECK(w < 1e-12);
            double size = 0;
            for (std::size_t j = 0; j < pa[i].size; ++j) size = std::max(size, std::abs(pb[i].grad[j]));
            CHECK(size > 1e-6);  // the comparison is not between zeros
        }
    }
}

TEST_CASE("a kind defined in a test: its softmax backward through every layer matches finite differences",
          "[kind]")
{
    const std::size_t o = 2;
    fixture<double> f(6, lens, 7);
    biaffine_scorer<double> s(config(o));
    auto pad = with_pad_seq_unpad_matrix(s);
    auto mb = with_minibatch_by_padded_size(pad, budget::bytes(splitting_budget(pad, mode::train)));
    std::vector<xt::xtensor<double, 2>> g;
    std::mt19937 gen(4);
    std::normal_distribution<double> nd;
    for (std::size_t n : lens) {
        xt::xtensor<double, 2> a = xt::xtensor<double, 2>::from_shape({n, std::min<std::size_t>(3, n) * o});
        for (auto& v : a) v = nd(gen);
        g.push_back(std::move(a));
    }
    // L = sum_k <g_k, Y_k>, Y in probabilities (each row sums to 1).
    const auto loss = [&]() {
        auto [Y, bp] = mb.forward_as<first3>(f.items, detail::no_heads{}, mode::train);
        (void)bp;
        double l = 0;
        for (std::size_t k = 0; k < Y.size(); ++k) {
            for (std::size_t m = 0; m < lens[k]; ++m) {
                double row = 0;
                for (std::size_t c = 0; c < Y[k].shape()[1]; ++c) {
                    l += g[k](m, c) * Y[k](m, c);
                    row += Y[k](m, c);
                }
                CHECK(std::abs(row - 1.0) < 1e-12);
            }
        }
        return l;
    };
    s.zero_grad();
    auto [Y, bp] = mb.forward_as<first3>(f.items, detail::no_heads{}, mode::train);
    const auto dx = run_backprop<seq_view<const double>, double>(bp, g, 6);
    CHECK(mb.batch_count() > 1);
    const double eps = 1e-6;
    double checked = 0;
    for (std::size_t k : {std::size_t(0), std::size_t(4)}) {
        for (std::size_t m = 0; m < lens[k]; m += 2) {
            for (std::size_t j = 0; j < 6; j += 5) {
                const double keep = f.x[k](m, j);
                f.x[k](m, j) = keep + eps;
                const double up = loss();
                f.x[k](m, j) = keep - eps;
                const double down = loss();
                f.x[k](m, j) = keep;
                const double fd = (up - down) / (2 * eps);
                INFO("split " << k << " token " << m << " feature " << j);
                CHECK(std::abs(dx[k](m, j) - fd) < 1e-6 * std::max(1.0, std::abs(fd)));
                checked = std::max(checked, std::abs(fd));
            }
        }
    }
    CHECK(checked > 1e-4);
    // One entry of each parameter.
    std::vector<double> analytic;
    for (const auto& p : s.parameters()) analytic.push_back(p.grad[p.size / 2]);
    std::size_t i = 0;
    for (auto& p : s.parameters()) {
        INFO(p.name);
        double* w = p.data + p.size / 2;
        const double keep = *w;
        *w = keep + eps;
        s.parameters_changed();
        const double up = loss();
        *w = keep - eps;
        s.parameters_changed();
        const double down = loss();
        *w = keep;
        s.parameters_changed();
        const double fd = (up - down) / (2 * eps);
        CHECK(std::abs(analytic[i] - fd) < 1e-6 * std::max(1.0, std::abs(fd)));
        ++i;
    }
}

TEST_CASE("a kind defined in a test: cost_as holds what the tracker sees", "[kind][memory]")
{
    for (std::size_t o : {std::size_t(1), std::size_t(4)}) {
        INFO("o " << o);
        fixture<float> f(6, lens, 8);
        const std::size_t L = 7;
        biaffine_scorer<float> s(config(o));
        const batch_cost c = s.cost_as<first3>(f.items.size(), L, mode::eval);
        std::uint64_t outputs = 0;
        for (std::size_t n : lens) outputs += std::uint64_t(n) * std::min<std::size_t>(3, n) * o * sizeof(float);
        CHECK(c.outputs == std::uint64_t(f.items.size()) * L * 3 * o * sizeof(float));
        {
            const std::uint64_t before = tracker().current_bytes();
            scoped_peak sp;
            const memory_stats s0 = tracker().stats();
            const score_list<float> Y = s.predict_as<first3>(f.items, detail::no_heads{});
            // Exactly the outputs stay: the tensors and the list.
            CHECK(tracker().current_bytes() - before == outputs + Y.capacity() * sizeof(score_tensor<float>));
            const std::uint64_t work = sp.work_peak_bytes() - (s0.current_bytes - s0.output_bytes);
            CHECK(work > 0);
            CHECK(work <= c.scratch);
        }
        {
            // The stream's scratch, all of it, from a block of exactly cost_as's scratch.
            workspace_scope ws(c.scratch);
            scoped_peak sp;
            const memory_stats s0 = tracker().stats();
            s.predict_stream_as<first3>(f.items, detail::no_heads{}, [](std::size_t, seq_view<const float>) {});
            CHECK(sp.work_peak_bytes() == s0.current_bytes - s0.output_bytes);
            CHECK(tracker().stats().output_bytes == s0.output_bytes);
        }
        for (bool recompute : {false, true}) {
            INFO("recompute " << recompute);
            biaffine_scorer<float> st(config(o, train_output::probabilities, recompute));
            st.zero_grad();
            const batch_cost ct = st.cost_as<first3>(f.items.size(), L, mode::train);
            workspace_scope ws(ct.scratch);
            scoped_peak sp;
            const memory_stats s0 = tracker().stats();
            auto [Y, bp] = st.forward_as<first3>(f.items, detail::no_heads{}, mode::train);
            const memory_stats s1 = tracker().stats();
            const std::uint64_t work0 = s0.current_bytes - s0.output_bytes;
            const std::uint64_t saved = (s1.current_bytes - s1.output_bytes) - work0;
            CHECK(saved > 0);
            CHECK(saved <= ct.saved);
            std::vector<xt::xtensor<float, 2>> g;  // untracked (std::allocator), as run_backprop's
            for (std::size_t k = 0; k < lens.size(); ++k) g.push_back(xt::ones<float>({lens[k], first3::width(lens[k], o)}));
            run_backprop<seq_view<const float>, float>(bp, g, 6);
            // Backward carves everything from the block: no work peak above the saved state.
            CHECK(sp.work_peak_bytes() == work0 + saved);
        }
    }
}
