// Tests for biaffine/scorer.hpp against the golden data of the PyTorch
// reference: every model_* case through the padded API (forward, backward,
// predict) and the split-list API, every pipeline* case through the full
// with_splits / with_minibatch_by_padded_size (/ with_pad_seq_unpad_matrix)
// stack, in float64 and float32; the model cases again on a backend whose
// batch lives in its own arena (tests/arena_backend.hpp). Finite-difference checks are in
// test_gradients.cpp.
#include <catch2/catch.hpp>

#include <cstddef>
#include <cstring>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include <xtensor/xarray.hpp>
#include <xtensor/xtensor.hpp>

#include "biaffine/biaffine.hpp"
#include "arena_backend.hpp"
#include "golden.hpp"

using namespace biaffine;

namespace {

const char* type_name(float) { return "float32"; }
const char* type_name(double) { return "float64"; }

// The parameters of a golden case, with the scorer config they imply.
struct golden_params {
    scorer_config cfg;
    xt::xarray<double> wh, bh, wd, bd, w;
};

golden_params load_params(const std::string& path, std::size_t n_in)
{
    golden_params p;
    p.wh = golden::load_rank<double>(path, "head_weight", 2);
    const std::size_t h = p.wh.shape()[0];
    if (p.wh.shape()[1] != n_in) {
        throw std::runtime_error(path + ": head_weight is " + golden::shape_str(golden::shape_of(p.wh)) +
                                 " but n_in = " + std::to_string(n_in));
    }
    p.w = golden::load_rank<double>(path, "bilinear_weight", 3);
    const std::size_t o = p.w.shape()[0], hu = p.w.shape()[1], hv = p.w.shape()[2];
    if ((hu != h && hu != h + 1) || (hv != h && hv != h + 1) || o == 0) {
        throw std::runtime_error(path + ": bilinear_weight is " + golden::shape_str(golden::shape_of(p.w)) +
                                 ", expected [o, h(+1), h(+1)] with h = " + std::to_string(h));
    }
    p.bh = golden::load<double>(path, "head_bias", {h});
    p.wd = golden::load<double>(path, "dependent_weight", {h, n_in});
    p.bd = golden::load<double>(path, "dependent_bias", {h});
    p.cfg.n_in = n_in;
    p.cfg.hidden = h;
    p.cfg.labels = o;
    p.cfg.bias_u = hu == h + 1;
    p.cfg.bias_v = hv == h + 1;
    p.cfg.dropout = 0.0;
    return p;
}

template <class S>
void set_params(S& s, const golden_params& p)
{
    s.set_parameter("head_weight", p.wh);
    s.set_parameter("head_bias", p.bh);
    s.set_parameter("dependent_weight", p.wd);
    s.set_parameter("dependent_bias", p.bd);
    s.set_parameter("bilinear_weight", p.w);
}

// Value of a padded score array `[b, L, L]` or `[b, L, L, o]` at (k, m, l, c).
template <class A>
double padded_at(const A& y, std::size_t k, std::size_t m, std::size_t l, std::size_t c)
{
    return y.dimension() == 3 ? static_cast<double>(y(k, m, l)) : static_cast<double>(y(k, m, l, c));
}

// Compares a padded output against the reference only inside each sequence.
template <class T, class A>
golden::comparison compare_inside(const A& y, const xt::xarray<double>& ref, const std::vector<int>& lengths,
                                  std::size_t o)
{
    if (golden::shape_of(y) != golden::shape_of(ref)) {
        golden::comparison c;
        c.shape_ok = false;
        return c;
    }
    std::vector<double> a, r;
    for (std::size_t k = 0; k < lengths.size(); ++k) {
        const std::size_t n = static_cast<std::size_t>(lengths[k]);
        for (std::size_t m = 0; m < n; ++m)
            for (std::size_t l = 0; l < n; ++l)
                for (std::size_t c = 0; c < o; ++c) {
                    a.push_back(padded_at(y, k, m, l, c));
                    r.push_back(padded_at(ref, k, m, l, c));
                }
    }
    return golden::compare_flat<T>(a, r);
}

// Compares per-split outputs `[n, n(, o)]` against the padded reference.
template <class T, class O>
golden::comparison compare_splits(const score_list<O>& Y, const xt::xarray<double>& ref,
                                  const std::vector<int>& lengths, std::size_t o)
{
    std::vector<double> a, r;
    golden::comparison bad;
    bad.shape_ok = false;
    if (Y.size() != lengths.size()) return bad;
    for (std::size_t k = 0; k < lengths.size(); ++k) {
        const std::size_t n = static_cast<std::size_t>(lengths[k]);
        const std::vector<std::size_t> want = o == 1 ? std::vector<std::size_t>{n, n} : std::vector<std::size_t>{n, n, o};
        if (golden::shape_of(Y[k]) != want) return bad;
        for (std::size_t m = 0; m < n; ++m)
            for (std::size_t l = 0; l < n; ++l)
                for (std::size_t c = 0; c < o; ++c) {
                    a.push_back(o == 1 ? static_cast<double>(Y[k](m, l)) : static_cast<double>(Y[k](m, l, c)));
                    r.push_back(padded_at(ref, k, m, l, c));
                }
    }
    return golden::compare_flat<T>(a, r);
}

template <class T, class S>
void check_param_grads(const S& s, const std::string& path, const golden_params& p)
{
    const std::size_t h = p.cfg.hidden, n_in = p.cfg.n_in;
    GOLDEN_CHECK("dhead_weight", golden::compare<T>(s.d_head_weight(), golden::load<double>(path, "dhead_weight", {h, n_in})));
    GOLDEN_CHECK("dhead_bias", golden::compare<T>(s.d_head_bias(), golden::load<double>(path, "dhead_bias", {h})));
    GOLDEN_CHECK("ddependent_weight",
                 golden::compare<T>(s.d_dependent_weight(), golden::load<double>(path, "ddependent_weight", {h, n_in})));
    GOLDEN_CHECK("ddependent_bias",
                 golden::compare<T>(s.d_dependent_bias(), golden::load<double>(path, "ddependent_bias", {h})));
    GOLDEN_CHECK("dbilinear_weight",
                 golden::compare<T>(s.d_bilinear_weight(),
                                    golden::load<double>(path, "dbilinear_weight", golden::shape_of(p.w))));
}

// The scorer of compute type T and output type Out; comparisons at the
// tolerance of the less precise of the two.
template <class T, class Out, class B = typename detail::scorer_backend_choice<T>::type>
using scorer_of = biaffine_scorer<T, B, Out>;
template <class T, class Out>
using tolerance_type = std::conditional_t<(sizeof(Out) < sizeof(T)), Out, T>;

template <class T, class Out = T, class B = typename detail::scorer_backend_choice<T>::type>
void check_model_case(const golden::case_dir& c)
{
    using Tol = tolerance_type<T, Out>;
    INFO("case " << c.path << " (" << type_name(T()) << ", outputs " << type_name(Out()) << ")");
    const xt::xarray<double> x64 = golden::load_rank<double>(c.path, "x", 3);
    const std::size_t b = x64.shape()[0], L = x64.shape()[1], n_in = x64.shape()[2];
    const xt::xarray<int> len_arr = golden::load<int>(c.path, "lengths", {b});
    const std::vector<int> lengths(len_arr.begin(), len_arr.end());
    for (int n : lengths) REQUIRE((n >= 0 && static_cast<std::size_t>(n) <= L));
    const xt::xarray<int> train_arr = golden::load<int>(c.path, "train", {1});
    REQUIRE((train_arr(0) == 0 || train_arr(0) == 1));
    const mode m = train_arr(0) == 1 ? mode::train : mode::eval;
    const golden_params p = load_params(c.path, n_in);
    const std::size_t o = p.cfg.labels;
    const std::vector<std::size_t> yshape =
        o == 1 ? std::vector<std::size_t>{b, L, L} : std::vector<std::size_t>{b, L, L, o};
    const xt::xarray<double> y64 = golden::load<double>(c.path, "y", yshape);
    const xt::xarray<double> dy64 = golden::load<double>(c.path, "dy", yshape);
    const xt::xarray<double> dx64 = golden::load<double>(c.path, "dx", {b, L, n_in});

    const xt::xtensor<T, 3> x = xt::cast<T>(x64);
    const score_array<Out> dy = xt::cast<Out>(dy64);

    {
        // Padded API: forward, backward into dx and every parameter gradient.
        scorer_of<T, Out, B> s(p.cfg);
        set_params(s, p);
        auto [y, bp] = s.forward_padded(x, len_arr, m);
        static_assert(std::is_same<typename decltype(y)::value_type, Out>::value, "padded outputs are Out");
        GOLDEN_CHECK("forward_padded y (inside)", compare_inside<Tol>(y, y64, lengths, o));
        const tensor<T, 3> dx = bp(dy);
        GOLDEN_CHECK("forward_padded dx", golden::compare<Tol>(dx, dx64));
        check_param_grads<Tol>(s, c.path, p);
        if (m == mode::eval) {
            const score_array<Out> yp = s.predict_padded(x, lengths);
            GOLDEN_CHECK("predict_padded y (inside)", compare_inside<Tol>(yp, y64, lengths, o));
        }
    }
    {
        // Split-list API on views of each sequence (no padding).
        scorer_of<T, Out, B> s(p.cfg);
        set_params(s, p);
        std::vector<seq_view<const T>> items;
        for (std::size_t k = 0; k < b; ++k) {
            items.push_back({x.data() + k * L * n_in, static_cast<std::size_t>(lengths[k]), n_in,
                             static_cast<std::ptrdiff_t>(n_in), 1});
        }
        if (m == mode::eval) {
            GOLDEN_CHECK("predict (split list)", compare_splits<Tol>(s.predict(items), y64, lengths, o));
        }
        auto [Y, bp] = s.forward(items, m);
        GOLDEN_CHECK("forward (split list) y", compare_splits<Tol>(Y, y64, lengths, o));
        // Per-split gradients: the reference dy inside each split.
        std::vector<xt::xtensor<Out, 3>> dys;
        std::vector<score_view<const Out>> dyv;
        std::vector<xt::xtensor<T, 2>> dxs;
        std::vector<seq_view<T>> dxv;
        for (std::size_t k = 0; k < b; ++k) {
            const std::size_t n = static_cast<std::size_t>(lengths[k]);
            xt::xtensor<Out, 3> g = xt::zeros<Out>({n, n, o});
            for (std::size_t mm = 0; mm < n; ++mm)
                for (std::size_t l = 0; l < n; ++l)
                    for (std::size_t cc = 0; cc < o; ++cc) g(mm, l, cc) = static_cast<Out>(padded_at(dy64, k, mm, l, cc));
            dys.push_back(std::move(g));
            dxs.push_back(xt::xtensor<T, 2>(typename xt::xtensor<T, 2>::shape_type{n, n_in}, T(-7)));
        }
        for (std::size_t k = 0; k < b; ++k) {
            const std::size_t n = static_cast<std::size_t>(lengths[k]);
            dyv.push_back({dys[k].data(), n, o, static_cast<std::ptrdiff_t>(n * o)});
            dxv.push_back({dxs[k].data(), n, n_in, static_cast<std::ptrdiff_t>(n_in), 1});
        }
        bp(span<const score_view<const Out>>(dyv.data(), dyv.size()), span<const seq_view<T>>(dxv.data(), dxv.size()));
        std::vector<double> a, r;
        for (std::size_t k = 0; k < b; ++k)
            for (std::size_t t = 0; t < static_cast<std::size_t>(lengths[k]); ++t)
                for (std::size_t j = 0; j < n_in; ++j) {
                    a.push_back(static_cast<double>(dxs[k](t, j)));
                    r.push_back(dx64(k, t, j));
                }
        GOLDEN_CHECK("forward (split list) dX", golden::compare_flat<Tol>(a, r));
        check_param_grads<Tol>(s, c.path, p);
    }
}

template <class T, class Out = T>
void check_pipeline_case(const golden::case_dir& c)
{
    using Tol = tolerance_type<T, Out>;
    INFO("case " << c.path << " (" << type_name(T()) << ", outputs " << type_name(Out()) << ")");
    const int n_docs = golden::load<int>(c.path, "n_docs", {1})(0);
    const int n_splits = golden::load<int>(c.path, "n_splits", {1})(0);
    REQUIRE(n_docs >= 0);
    REQUIRE(n_splits >= 0);
    std::vector<xt::xtensor<T, 2>> docs;
    std::vector<std::vector<int>> lens;
    std::vector<std::size_t> flat;
    std::size_t n_in = 0;
    for (int d = 0; d < n_docs; ++d) {
        const std::string ds = "doc" + std::to_string(d);
        const xt::xarray<double> doc = golden::load_rank<double>(c.path, ds, 2);
        if (d == 0) n_in = doc.shape()[1];
        REQUIRE(doc.shape()[1] == n_in);
        const xt::xarray<int> l = golden::load_rank<int>(c.path, ds + "_split_lengths", 1);
        long sum = 0;
        for (int v : l) {
            REQUIRE(v >= 0);
            sum += v;
            flat.push_back(static_cast<std::size_t>(v));
        }
        REQUIRE(static_cast<std::size_t>(sum) == doc.shape()[0]);
        docs.push_back(xt::cast<T>(doc));
        lens.emplace_back(l.begin(), l.end());
    }
    REQUIRE(flat.size() == static_cast<std::size_t>(n_splits));
    REQUIRE(n_in > 0);
    const golden_params p = load_params(c.path, n_in);
    const std::size_t o = p.cfg.labels;
    std::vector<xt::xarray<double>> ref;
    for (std::size_t k = 0; k < flat.size(); ++k) {
        const std::size_t n = flat[k];
        ref.push_back(golden::load<double>(c.path, "split" + std::to_string(k) + "_y",
                                           o == 1 ? std::vector<std::size_t>{n, n} : std::vector<std::size_t>{n, n, o}));
    }
    scorer_of<T, Out> s(p.cfg);
    set_params(s, p);

    auto check_list = [&](const std::string& what, const score_list<Out>& Y) {
        INFO(what);
        REQUIRE(Y.size() == ref.size());
        for (std::size_t k = 0; k < Y.size(); ++k) {
            GOLDEN_CHECK("split " << k, golden::compare<Tol>(Y[k], ref[k]));
        }
    };
    for (std::uint64_t items : {std::uint64_t(1), std::uint64_t(8), std::uint64_t(1000)}) {
        auto pipe = with_splits(with_minibatch_by_padded_size(with_pad_seq_unpad_matrix(s), budget::items(items)));
        check_list("pad/unpad, items(" + std::to_string(items) + ")", pipe.predict(docs, lens));
    }
    // A budget derived from the case (several batches), and a large one.
    const std::size_t max_len = *std::max_element(flat.begin(), flat.end());
    const std::uint64_t small = golden::byte_budget<false>(s, flat.size(), max_len, mode::eval);
    for (std::uint64_t bytes : {small, std::max(small, std::uint64_t(1) << 20)}) {
        auto pipe = with_splits(with_minibatch_by_padded_size(s, budget::bytes(bytes)));
        check_list("split list, bytes(" + std::to_string(bytes) + ")", pipe.predict(docs, lens));
        if (bytes == small && flat.size() > 2) CHECK(pipe.inner().batch_count() > 1);
        // Streaming gives the same scores, each split exactly once.
        std::vector<int> seen(ref.size(), 0);
        pipe.predict_stream(docs, lens, [&](std::size_t k, std::size_t, score_view<const Out> v) {
            REQUIRE(k < ref.size());
            ++seen[k];
            std::vector<double> a, r(ref[k].begin(), ref[k].end());
            for (std::size_t mm = 0; mm < v.n; ++mm)
                for (std::size_t l = 0; l < v.n; ++l)
                    for (std::size_t cc = 0; cc < v.labels; ++cc) a.push_back(static_cast<double>(v(mm, l, cc)));
            GOLDEN_CHECK("stream split " << k, golden::compare_flat<Tol>(a, r));
        });
        for (std::size_t k = 0; k < seen.size(); ++k) CHECK(seen[k] == 1);
    }
}

}  // namespace

TEST_CASE("golden dir: every folder has a known kind, each kind is present", "[scorer][golden]")
{
    bool is_default = false;
    const std::string root = golden::dir(&is_default);
    const auto cs = golden::cases();  // throws on an unknown prefix
    std::size_t n[4] = {0, 0, 0, 0};
    for (const auto& c : cs) ++n[static_cast<int>(c.k)];
    std::cout << "golden dir " << root << ": " << n[0] << " bilinear, " << n[1] << " model, " << n[2]
              << " pipeline, " << n[3] << " heads cases\n";
    if (is_default) {
        CHECK(n[0] >= 1);
        CHECK(n[1] >= 1);
        CHECK(n[2] >= 1);
        CHECK(n[3] >= 1);
    } else {
        CHECK(!cs.empty());
    }
}

TEST_CASE("scorer matches every model_* golden case (padded and split-list APIs)", "[scorer][golden]")
{
    bool is_default = false;
    golden::dir(&is_default);
    const auto cs = golden::cases_of(golden::kind::model);
    if (is_default) REQUIRE(!cs.empty());
    for (const auto& c : cs) {
        check_model_case<double>(c);
        check_model_case<float>(c);
        // An output type apart from the compute type (scorer.hpp's Out).
        check_model_case<double, float>(c);
    }
    std::cout << "scorer golden: " << cs.size()
              << " model cases checked (float64, float32, float64 compute with float32 outputs)\n";
}

TEST_CASE("a backend whose batch is indices into its own arena passes every model_* golden case",
          "[scorer][golden][host_batch]")
{
    // tests/arena_backend.hpp: the scorer holds only slot numbers of the
    // backend's arena; U, V, T and the kept outputs never reach it.
    bool is_default = false;
    golden::dir(&is_default);
    const auto cs = golden::cases_of(golden::kind::model);
    if (is_default) REQUIRE(!cs.empty());
    const std::size_t before = arena_test::arena_counts<double>::allocated + arena_test::arena_counts<float>::allocated;
    for (const auto& c : cs) {
        check_model_case<double, double, arena_test::arena_backend<double>>(c);
        check_model_case<float, float, arena_test::arena_backend<float>>(c);
    }
    CHECK(arena_test::arena_counts<double>::allocated + arena_test::arena_counts<float>::allocated > before);
    CHECK(arena_test::arena_counts<double>::live == 0);
    CHECK(arena_test::arena_counts<float>::live == 0);
}

TEST_CASE("with_splits pipelines match every pipeline* golden case", "[scorer][golden][pipeline]")
{
    bool is_default = false;
    golden::dir(&is_default);
    const auto cs = golden::cases_of(golden::kind::pipeline);
    if (is_default) REQUIRE(!cs.empty());
    for (const auto& c : cs) {
        check_pipeline_case<double>(c);
        check_pipeline_case<float>(c);
        check_pipeline_case<double, float>(c);
    }
    std::cout << "scorer golden: " << cs.size()
              << " pipeline cases checked (float64, float32, float64 compute with float32 outputs)\n";
}

namespace {

template <class A>
double max_abs(const A& a)
{
    double m = 0.0;
    for (std::size_t i = 0; i < a.size(); ++i) m = std::max(m, std::abs(static_cast<double>(a.data()[i])));
    return m;
}

// Largest difference of a float result from the float64 computation of the
// same parameters and inputs, relative to `scale` (the largest magnitude of
// that quantity over the whole batch: a split whose softmax has one entry
// has a zero gradient, which float only approximates).
template <class A, class B>
double rel_diff(const A& got, const B& want, double scale)
{
    REQUIRE(got.size() == want.size());
    double worst = 0.0;
    for (std::size_t i = 0; i < want.size(); ++i) {
        worst = std::max(worst, std::abs(static_cast<double>(got.data()[i]) - static_cast<double>(want.data()[i])));
    }
    return worst / std::max(scale, 1e-30);
}

// One train (or eval) forward + backward over `lengths` in precision T.
template <class T>
struct train_run {
    score_list<T> Y;
    std::vector<xt::xtensor<T, 2>> dX;
    std::vector<xt::xtensor<T, 1>> grads;
};

template <class T>
train_run<T> run_train(const scorer_config& cfg, const std::vector<xt::xarray<double>>& params,
                       const xt::xtensor<double, 2>& doc, const std::vector<std::size_t>& lengths,
                       const std::vector<xt::xtensor<double, 3>>& dy, mode m)
{
    biaffine_scorer<T> s(cfg);
    const char* names[] = {"head_weight", "head_bias", "dependent_weight", "dependent_bias", "bilinear_weight"};
    for (std::size_t i = 0; i < 5; ++i) s.set_parameter(names[i], params[i]);
    const xt::xtensor<T, 2> x = xt::cast<T>(doc);
    std::vector<seq_view<const T>> items;
    std::size_t row = 0;
    for (std::size_t n : lengths) {
        items.push_back({x.data() + row * cfg.n_in, n, cfg.n_in, static_cast<std::ptrdiff_t>(cfg.n_in), 1});
        row += n;
    }
    train_run<T> r;
    auto [Y, bp] = s.forward(items, m);
    std::vector<xt::xtensor<T, 3>> g;
    std::vector<score_view<const T>> gv;
    std::vector<seq_view<T>> dxv;
    for (std::size_t k = 0; k < lengths.size(); ++k) {
        g.push_back(xt::cast<T>(dy[k]));
        r.dX.push_back(xt::xtensor<T, 2>(typename xt::xtensor<T, 2>::shape_type{lengths[k], cfg.n_in}, T(-7)));
    }
    for (std::size_t k = 0; k < lengths.size(); ++k) {
        gv.push_back({g[k].data(), lengths[k], cfg.labels, static_cast<std::ptrdiff_t>(lengths[k] * cfg.labels)});
        dxv.push_back({r.dX[k].data(), lengths[k], cfg.n_in, static_cast<std::ptrdiff_t>(cfg.n_in), 1});
    }
    bp(span<const score_view<const T>>(gv.data(), gv.size()), span<const seq_view<T>>(dxv.data(), dxv.size()));
    r.Y = std::move(Y);
    for (const auto& p : s.parameters()) {
        xt::xtensor<T, 1> g1(typename xt::xtensor<T, 1>::shape_type{p.size});
        std::copy(p.grad, p.grad + p.size, g1.begin());
        r.grads.push_back(std::move(g1));
    }
    return r;
}

}  // namespace

TEST_CASE("float32 forward + backward equals float64 on batches over the kernel's blocks and chunks; "
          "recomputing in backward gives the stored-activation results exactly",
          "[scorer][gradients]")
{
    // float32 takes the GEMM kernel where built (AVX2 + FMA), float64 always
    // Eigen: an independent computation of the same math. The sizes cross
    // the kernel's 16-column panels (h = 20, n_in = 40 leave partial ones),
    // its 6-row blocks, the 96-row blocks and the 256-row chunks of dW
    // (N = 611 rows), splits from 1 token to 100.
    std::mt19937 gen(31);
    const std::vector<std::size_t> lengths = {70, 1, 13, 33, 2, 64, 45, 9, 17, 50, 31, 70, 5, 40, 61, 100};
    std::size_t N = 0;
    for (std::size_t n : lengths) N += n;
    for (std::size_t labels : {std::size_t(1), std::size_t(3)}) {
        for (mode m : {mode::train, mode::eval}) {
            for (double dropout : {0.0, 0.3}) {
                scorer_config cfg;
                cfg.n_in = 40;
                cfg.hidden = 20;
                cfg.labels = labels;
                cfg.dropout = dropout;
                INFO("labels " << labels << (m == mode::train ? " train" : " eval") << " dropout " << dropout
                               << " N " << N);
                std::normal_distribution<double> nd(0.0, 0.5);
                auto rnd = [&](std::vector<std::size_t> shape) {
                    xt::xarray<double> a = xt::zeros<double>(shape);
                    for (auto& v : a) v = nd(gen);
                    return a;
                };
                const std::vector<xt::xarray<double>> params = {
                    rnd({cfg.hidden, cfg.n_in}), rnd({cfg.hidden}), rnd({cfg.hidden, cfg.n_in}), rnd({cfg.hidden}),
                    rnd({labels, cfg.hidden + 1, cfg.hidden + 1})};
                xt::xtensor<double, 2> doc = xt::zeros<double>({N, cfg.n_in});
                for (auto& v : doc) v = nd(gen);
                std::vector<xt::xtensor<double, 3>> dy;
                for (std::size_t n : lengths) {
                    xt::xtensor<double, 3> g = xt::zeros<double>({n, n, labels});
                    for (auto& v : g) v = nd(gen);
                    dy.push_back(std::move(g));
                }
                const auto f = run_train<float>(cfg, params, doc, lengths, dy, m);
                const auto d = run_train<double>(cfg, params, doc, lengths, dy, m);
                scorer_config rc = cfg;
                rc.recompute_in_backward = true;
                const auto fr = run_train<float>(rc, params, doc, lengths, dy, m);
                const auto dr = run_train<double>(rc, params, doc, lengths, dy, m);
                double y_scale = 0.0, dx_scale = 0.0;
                for (std::size_t k = 0; k < lengths.size(); ++k) {
                    y_scale = std::max(y_scale, max_abs(d.Y[k]));
                    dx_scale = std::max(dx_scale, max_abs(d.dX[k]));
                }
                REQUIRE(dx_scale > 0.0);
                for (std::size_t k = 0; k < lengths.size(); ++k) {
                    INFO("split " << k);
                    CHECK(rel_diff(f.Y[k], d.Y[k], y_scale) < 1e-5);
                    CHECK(rel_diff(f.dX[k], d.dX[k], dx_scale) < 1e-5);
                    CHECK(fr.Y[k] == f.Y[k]);
                    CHECK(fr.dX[k] == f.dX[k]);
                    CHECK(dr.Y[k] == d.Y[k]);
                    CHECK(dr.dX[k] == d.dX[k]);
                }
                for (std::size_t i = 0; i < f.grads.size(); ++i) {
                    INFO("parameter gradient " << i);
                    CHECK(rel_diff(f.grads[i], d.grads[i], max_abs(d.grads[i])) < 1e-5);
                    CHECK(fr.grads[i] == f.grads[i]);
                    CHECK(dr.grads[i] == d.grads[i]);
                }
            }
        }
    }
}

TEMPLATE_TEST_CASE("a batch of only empty splits scores to empty outputs on every path (found by fuzz_pipeline)",
                   "[scorer]", float, double)
{
    // N = 0 packed rows: no backend may offset its null buffers (clang's
    // UBSan: "applying non-zero offset to null pointer"; found twice, once on
    // the kernel path and once on the Eigen backend's whole-batch T).
    // hidden 16 and 50 labels: the avx2 backend's last odd column of W as a
    // matrix-vector product and as one panel for every label.
    using F = TestType;
    for (std::size_t hidden : {std::size_t(3), std::size_t(16)}) {
        for (std::size_t labels : {std::size_t(2), std::size_t(50)}) {
            for (bool recompute : {false, true}) {
                INFO("hidden " << hidden << " labels " << labels << " recompute " << recompute);
                scorer_config cfg;
                cfg.n_in = 5;
                cfg.hidden = hidden;
                cfg.labels = labels;
                cfg.recompute_in_backward = recompute;
                biaffine_scorer<F> s(cfg);
                s.initialize(1);
                const std::vector<F> none;
                const std::vector<seq_view<const F>> items(3, seq_view<const F>{none.data(), 0, cfg.n_in, 5, 1});
                const score_list<F> Y = s.predict(items);
                REQUIRE(Y.size() == 3);
                for (const auto& y : Y) CHECK(y.size() == 0);
                std::size_t calls = 0;
                s.predict_stream(items, [&](std::size_t, score_view<const F> v) {
                    CHECK(v.n == 0);
                    ++calls;
                });
                CHECK(calls == 3);
                auto [Yt, bp] = s.forward(items, mode::train);
                REQUIRE(Yt.size() == 3);
                std::vector<score_view<const F>> dy(3, score_view<const F>{nullptr, 0, cfg.labels, 0});
                std::vector<seq_view<F>> dx(3, seq_view<F>{nullptr, 0, cfg.n_in, 5, 1});
                bp(span<const score_view<const F>>(dy.data(), dy.size()),
                   span<const seq_view<F>>(dx.data(), dx.size()));
            }
        }
    }
}

TEST_CASE("the per-split loops prefetch each later split once, before its turn", "[scorer]")
{
    // prefetch_ahead(k, count, fetch) at each k: every split from 1 on fetched
    // exactly once, at a k before its own and no more than
    // BIAFFINE_PREFETCH_SPLITS_AHEAD before it; nothing at or past count.
    constexpr std::size_t ahead = BIAFFINE_PREFETCH_SPLITS_AHEAD;
    for (std::size_t count = 0; count <= 6; ++count) {
        INFO("count " << count);
        std::vector<int> times(count, 0);
        for (std::size_t k = 0; k < count; ++k) {
            biaffine::detail::prefetch_ahead(k, count, [&](std::size_t j) {
                REQUIRE(j < count);
                REQUIRE(j > k);
                REQUIRE(j - k <= ahead);
                ++times[j];
            });
        }
        for (std::size_t j = 0; j < count; ++j) CHECK(times[j] == (j == 0 || ahead == 0 ? 0 : 1));
    }
}

TEST_CASE("predict_stream_into writes every split where the caller's destination says, the bytes of predict_stream, "
          "on every layer", "[scorer][stream]")
{
    // A counting destination hands out the caller's own block per split
    // (filled with NaN first); the sink must view exactly that block, dense,
    // so the library wrote the scores there and nothing was copied out of a
    // block of its own. Each layer's bytes are checked against its own
    // predict_stream (the golden-checked path), full scores and labels at
    // heads, an empty split among them, two threads over several batches.
    scorer_config cfg;
    cfg.n_in = 6;
    cfg.hidden = 8;
    cfg.labels = 3;
    biaffine_scorer<float> s(cfg);
    s.initialize(5);
    const std::vector<std::vector<std::size_t>> lens{{10, 0, 15}, {40}, {7, 6}};
    std::mt19937 gen(17);
    std::normal_distribution<float> normal;
    std::vector<xt::xtensor<float, 2>> docs;
    std::vector<std::vector<int>> heads;
    std::size_t count = 0;
    for (const auto& l : lens) {
        std::size_t rows = 0;
        heads.emplace_back();
        for (std::size_t n : l) {
            for (std::size_t m = 0; m < n; ++m) heads.back().push_back(static_cast<int>((m * 7 + 3) % n));
            rows += n;
            ++count;
        }
        xt::xtensor<float, 2> d = xt::xtensor<float, 2>::from_shape({rows, cfg.n_in});
        for (auto& x : d) x = normal(gen);
        docs.push_back(std::move(d));
    }
    const std::size_t o = cfg.labels;
    // Bytes of one view, row by row (the stream's views may be strided).
    const auto bytes_of = [&](const float* p, std::size_t rows, std::size_t row_len, std::ptrdiff_t stride) {
        std::vector<unsigned char> b(rows * row_len * sizeof(float));
        for (std::size_t r = 0; r < rows; ++r) std::memcpy(b.data() + r * row_len * sizeof(float), p + r * stride, row_len * sizeof(float));
        return b;
    };
    // run(want_heads, dest, sink) streams with the given layer; `label` names it.
    const auto check = [&](const std::string& label, auto&& stream, auto&& stream_into) {
        for (bool want_heads : {false, true}) {
            INFO(label << (want_heads ? ", labels at heads" : ", full scores"));
            std::vector<std::vector<unsigned char>> want(count);
            std::vector<std::vector<float>> blocks(count);
            std::vector<int> dest_calls(count, 0), sink_calls(count, 0);
            stream(want_heads, [&](std::size_t k, const float* p, std::size_t n, std::ptrdiff_t stride) {
                REQUIRE(k < count);
                want[k] = bytes_of(p, n, want_heads ? o : n * o, stride);
            });
            stream_into(
                want_heads,
                [&](std::size_t k, std::size_t n) {
                    REQUIRE(k < count);
                    ++dest_calls[k];
                    blocks[k].assign(want_heads ? n * o : n * n * o, std::numeric_limits<float>::quiet_NaN());
                    return blocks[k].data();
                },
                [&](std::size_t k, const float* p, std::size_t n, std::ptrdiff_t stride) {
                    REQUIRE(k < count);
                    ++sink_calls[k];
                    CHECK(p == blocks[k].data());
                    CHECK(stride == static_cast<std::ptrdiff_t>(want_heads ? o : n * o));
                    CHECK(bytes_of(blocks[k].data(), n, want_heads ? o : n * o, stride) == want[k]);
                });
            for (std::size_t k = 0; k < count; ++k) {
                INFO("split " << k);
                CHECK(dest_calls[k] == 1);
                CHECK(sink_calls[k] == 1);
            }
        }
    };
    // A layer over with_splits: (docs, lengths[, heads], [dest,] sink).
    const auto check_pipeline = [&](const std::string& label, const auto& pipe) {
        const auto full = [](auto&& sink) {
            return [&sink](std::size_t k, std::size_t, score_view<const float> v) { sink(k, v.data, v.n, v.row_stride); };
        };
        const auto at_heads = [](auto&& sink) {
            return [&sink](std::size_t k, std::size_t, seq_view<const float> v) {
                sink(k, v.data, v.rows, v.row_stride);
            };
        };
        check(
            label,
            [&](bool h, auto&& sink) {
                if (h) {
                    pipe.predict_heads_stream(docs, lens, heads, at_heads(sink));
                } else {
                    pipe.predict_stream(docs, lens, full(sink));
                }
            },
            [&](bool h, auto&& dest, auto&& sink) {
                const auto d = [&dest](std::size_t k, std::size_t, std::size_t n) { return dest(k, n); };
                if (h) {
                    pipe.predict_heads_stream_into(docs, lens, heads, d, at_heads(sink));
                } else {
                    pipe.predict_stream_into(docs, lens, d, full(sink));
                }
            });
    };
    check_pipeline("with_splits(scorer)", with_splits(s));
    check_pipeline("with_pad_seq_unpad_matrix", with_splits(with_pad_seq_unpad_matrix(s)));
    batch_options two;
    two.threads = 2;
    const auto small = budget::items(12);
    check_pipeline("with_minibatch_by_padded_size, 2 threads", with_splits(with_minibatch_by_padded_size(s, small, two)));
    check_pipeline("with_minibatch_by_padded_size(with_pad_seq_unpad_matrix), 2 threads",
                   with_splits(with_minibatch_by_padded_size(with_pad_seq_unpad_matrix(s), small, two)));

    // The scorer's own call refuses a null destination for a split with tokens.
    std::vector<seq_view<const float>> items{seq_view<const float>{docs[2].data(), 7, cfg.n_in,
                                                                   static_cast<std::ptrdiff_t>(cfg.n_in), 1}};
    int sunk = 0;
    CHECK_THROWS_WITH(s.predict_stream_into(items, [](std::size_t, std::size_t) { return static_cast<float*>(nullptr); },
                                            [&](std::size_t, score_view<const float>) { ++sunk; }),
                      Catch::Contains("destination given for split 0 (7 tokens) is null"));
    CHECK(sunk == 0);
}
