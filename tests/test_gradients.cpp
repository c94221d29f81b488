// Finite-difference gradient checks of biaffine_scorer in double, and the
// dropout contract (deterministic per seed, one mask per sequence and
// feature, inverted scaling), both checked against computations written here.
//
// Loss: L = sum over cells inside each split of dy (random) * y. Central
// differences with eps = 1e-6 have truncation error ~eps^2 * |L'''| ~ 1e-12
// and round-off ~1e-16 * |L| / eps ~ 1e-10, so |fd - analytic| <=
// 1e-6 * max(1, |analytic|) has wide headroom while any real bug (a missing
// term, a wrong mask or scale) is O(|analytic|).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <random>
#include <stdexcept>
#include <vector>

#include <xtensor/xarray.hpp>
#include <xtensor/xtensor.hpp>

#include "biaffine/biaffine.hpp"

using namespace biaffine;

namespace {

using values = std::vector<std::vector<double>>;  // the five parameters, flat, in parameters() order

values values_of(biaffine_scorer<double>& s)
{
    values v;
    for (auto& p : s.parameters()) v.emplace_back(p.data, p.data + p.size);
    return v;
}

void load_values(biaffine_scorer<double>& s, const values& v)
{
    auto ps = s.parameters();
    if (ps.size() != v.size()) throw std::logic_error("load_values: parameter count");
    for (std::size_t i = 0; i < ps.size(); ++i) {
        if (ps[i].size != v[i].size()) throw std::logic_error("load_values: parameter size");
        std::copy(v[i].begin(), v[i].end(), ps[i].data);
    }
}

void fill_random(std::mt19937_64& rng, double* p, std::size_t n, double lo = -1.0, double hi = 1.0)
{
    std::uniform_real_distribution<double> d(lo, hi);
    for (std::size_t i = 0; i < n; ++i) p[i] = d(rng);
}

// One finite-difference problem: a scorer config, its parameters, uneven
// splits (a zero-length and a one-token one included), both as a document for
// the split-list API and as a padded batch, and random upstream gradients.
struct problem {
    scorer_config cfg;
    mode m = mode::eval;
    values params;
    std::vector<std::size_t> lengths{3, 0, 1, 4};
    std::size_t L = 4;
    xt::xtensor<double, 2> doc;                // [sum(lengths), n_in]
    xt::xtensor<double, 3> xpad;               // [b, L, n_in], padding random too
    std::vector<xt::xtensor<double, 3>> dys;   // per split [n, n, o]
    score_array<double> dypad;                 // [b, L, L(, o)], random everywhere

    problem(scorer_config c, mode md, std::uint64_t seed) : cfg(c), m(md)
    {
        std::mt19937_64 rng(seed);
        biaffine_scorer<double> s(cfg);
        s.initialize(seed);
        params = values_of(s);
        std::size_t N = 0;
        for (std::size_t n : lengths) N += n;
        const std::size_t b = lengths.size(), o = cfg.labels, n_in = cfg.n_in;
        doc = xt::xtensor<double, 2>::from_shape({N, n_in});
        fill_random(rng, doc.data(), doc.size());
        xpad = xt::xtensor<double, 3>::from_shape({b, L, n_in});
        fill_random(rng, xpad.data(), xpad.size());
        for (std::size_t n : lengths) {
            xt::xtensor<double, 3> g = xt::xtensor<double, 3>::from_shape({n, n, o});
            fill_random(rng, g.data(), g.size());
            dys.push_back(std::move(g));
        }
        dypad = o == 1 ? score_array<double>::from_shape({b, L, L}) : score_array<double>::from_shape({b, L, L, o});
        fill_random(rng, dypad.data(), dypad.size());
    }

    std::vector<seq_view<const double>> items(const xt::xtensor<double, 2>& d) const
    {
        std::vector<seq_view<const double>> v;
        std::size_t row = 0;
        for (std::size_t n : lengths) {
            v.push_back({d.data() + row * cfg.n_in, n, cfg.n_in, static_cast<std::ptrdiff_t>(cfg.n_in), 1});
            row += n;
        }
        return v;
    }

    std::vector<int> int_lengths() const { return std::vector<int>(lengths.begin(), lengths.end()); }

    // A fresh scorer per evaluation: with dropout, the same seed gives the same
    // masks on the first forward, so L is a deterministic function of the inputs.
    double loss_split(const values& v, const xt::xtensor<double, 2>& d) const
    {
        biaffine_scorer<double> s(cfg);
        load_values(s, v);
        auto [Y, bp] = s.forward(items(d), m);
        double acc = 0;
        for (std::size_t k = 0; k < Y.size(); ++k) {
            if (Y[k].size() != dys[k].size()) throw std::logic_error("loss_split: output size");
            for (std::size_t i = 0; i < Y[k].size(); ++i) acc += Y[k].data()[i] * dys[k].data()[i];
        }
        return acc;
    }

    double loss_padded(const values& v, const xt::xtensor<double, 3>& x) const
    {
        biaffine_scorer<double> s(cfg);
        load_values(s, v);
        auto [y, bp] = s.forward_padded(x, int_lengths(), m);
        const std::size_t o = cfg.labels;
        double acc = 0;
        for (std::size_t k = 0; k < lengths.size(); ++k)
            for (std::size_t r = 0; r < lengths[k]; ++r)
                for (std::size_t c = 0; c < lengths[k] * o; ++c) {
                    const std::size_t i = ((k * L + r) * L) * o + c;
                    acc += y.data()[i] * dypad.data()[i];
                }
        return acc;
    }
};

constexpr double fd_eps = 1e-6;
constexpr double fd_tol = 1e-6;

struct fd_stats {
    double worst = 0;       // worst |fd - an| / max(1, |an|)
    double max_grad = 0;    // max |an|, to make sure the check is not vacuous
};

void accumulate(fd_stats& st, double fd, double an)
{
    st.worst = std::max(st.worst, std::abs(fd - an) / std::max(1.0, std::abs(an)));
    st.max_grad = std::max(st.max_grad, std::abs(an));
}

const char* param_names[] = {"head_weight", "head_bias", "dependent_weight", "dependent_bias", "bilinear_weight"};

// Checks every parameter gradient against central differences of `loss(values)`.
template <class Loss>
void check_param_fd(const problem& pb, const values& analytic, Loss&& loss)
{
    for (std::size_t p = 0; p < pb.params.size(); ++p) {
        fd_stats st;
        values v = pb.params;
        for (std::size_t i = 0; i < v[p].size(); ++i) {
            const double orig = v[p][i];
            v[p][i] = orig + fd_eps;
            const double lp = loss(v);
            v[p][i] = orig - fd_eps;
            const double lm = loss(v);
            v[p][i] = orig;
            accumulate(st, (lp - lm) / (2 * fd_eps), analytic[p][i]);
        }
        INFO("parameter " << param_names[p] << ": worst relative error " << st.worst << ", max |grad| "
                          << st.max_grad);
        CHECK(st.worst < fd_tol);
        CHECK(st.max_grad > 1e-6);
    }
}

void run_fd_split(const problem& pb)
{
    // Analytic gradients through the split-list API.
    biaffine_scorer<double> s(pb.cfg);
    load_values(s, pb.params);
    const auto items = pb.items(pb.doc);
    auto [Y, bp] = s.forward(items, pb.m);
    std::vector<score_view<const double>> dyv;
    std::vector<xt::xtensor<double, 2>> dxs;
    std::vector<seq_view<double>> dxv;
    const std::size_t o = pb.cfg.labels, n_in = pb.cfg.n_in;
    for (std::size_t k = 0; k < pb.lengths.size(); ++k) {
        const std::size_t n = pb.lengths[k];
        dyv.push_back({pb.dys[k].data(), n, o, static_cast<std::ptrdiff_t>(n * o)});
        dxs.push_back(xt::xtensor<double, 2>(xt::xtensor<double, 2>::shape_type{n, n_in}, 1234.0));
    }
    for (std::size_t k = 0; k < pb.lengths.size(); ++k) {
        dxv.push_back({dxs[k].data(), pb.lengths[k], n_in, static_cast<std::ptrdiff_t>(n_in), 1});
    }
    bp(span<const score_view<const double>>(dyv.data(), dyv.size()),
       span<const seq_view<double>>(dxv.data(), dxv.size()));
    values analytic;
    for (auto& p : s.parameters()) analytic.emplace_back(p.grad, p.grad + p.size);

    check_param_fd(pb, analytic, [&](const values& v) { return pb.loss_split(v, pb.doc); });

    fd_stats st;
    xt::xtensor<double, 2> d = pb.doc;
    std::size_t row = 0;
    for (std::size_t k = 0; k < pb.lengths.size(); ++k) {
        for (std::size_t r = 0; r < pb.lengths[k]; ++r, ++row) {
            for (std::size_t c = 0; c < n_in; ++c) {
                const double orig = d(row, c);
                d(row, c) = orig + fd_eps;
                const double lp = pb.loss_split(pb.params, d);
                d(row, c) = orig - fd_eps;
                const double lm = pb.loss_split(pb.params, d);
                d(row, c) = orig;
                accumulate(st, (lp - lm) / (2 * fd_eps), dxs[k](r, c));
            }
        }
    }
    INFO("dX (split list): worst relative error " << st.worst << ", max |grad| " << st.max_grad);
    CHECK(st.worst < fd_tol);
    CHECK(st.max_grad > 1e-6);
}

void run_fd_padded(const problem& pb)
{
    biaffine_scorer<double> s(pb.cfg);
    load_values(s, pb.params);
    auto [y, bp] = s.forward_padded(pb.xpad, pb.int_lengths(), pb.m);
    // dypad is random in padded cells too: backprop must read only the inside.
    const tensor<double, 3> dx = bp(pb.dypad);
    values analytic;
    for (auto& p : s.parameters()) analytic.emplace_back(p.grad, p.grad + p.size);

    check_param_fd(pb, analytic, [&](const values& v) { return pb.loss_padded(v, pb.xpad); });

    // Every position, padding included (there the true gradient is 0).
    REQUIRE(dx.shape() == pb.xpad.shape());
    fd_stats st;
    xt::xtensor<double, 3> x = pb.xpad;
    for (std::size_t i = 0; i < x.size(); ++i) {
        const double orig = x.data()[i];
        x.data()[i] = orig + fd_eps;
        const double lp = pb.loss_padded(pb.params, x);
        x.data()[i] = orig - fd_eps;
        const double lm = pb.loss_padded(pb.params, x);
        x.data()[i] = orig;
        accumulate(st, (lp - lm) / (2 * fd_eps), dx.data()[i]);
    }
    INFO("dx (padded): worst relative error " << st.worst << ", max |grad| " << st.max_grad);
    CHECK(st.worst < fd_tol);
    CHECK(st.max_grad > 1e-6);
}

}  // namespace

TEST_CASE("scorer gradients match finite differences (bias variants, labels, eval/train)", "[scorer][gradients]")
{
    std::uint64_t seed = 100;
    for (int bu = 0; bu < 2; ++bu) {
        for (int bv = 0; bv < 2; ++bv) {
            for (std::size_t o : {std::size_t(1), std::size_t(3)}) {
                for (mode m : {mode::eval, mode::train}) {
                    scorer_config cfg;
                    cfg.n_in = 3;
                    cfg.hidden = 3;
                    cfg.labels = o;
                    cfg.bias_u = bu == 1;
                    cfg.bias_v = bv == 1;
                    cfg.dropout = 0.0;
                    const problem pb(cfg, m, ++seed);
                    INFO("bias_u " << bu << " bias_v " << bv << " labels " << o << " mode "
                                   << (m == mode::train ? "train" : "eval"));
                    run_fd_split(pb);
                    run_fd_padded(pb);
                }
            }
        }
    }
}

TEST_CASE("scorer gradients match finite differences with dropout (fixed masks per seed)", "[scorer][gradients]")
{
    for (std::size_t o : {std::size_t(1), std::size_t(3)}) {
        scorer_config cfg;
        cfg.n_in = 3;
        cfg.hidden = 4;
        cfg.labels = o;
        cfg.dropout = 0.4;
        cfg.seed = 11;
        const problem pb(cfg, mode::train, 77 + o);
        INFO("dropout 0.4, labels " << o);
        run_fd_split(pb);
        run_fd_padded(pb);
    }
}

namespace {

// Eval-mode projection relu(X W^T + b) of one split, written as loops.
std::vector<std::vector<double>> project(const seq_view<const double>& x, const xt::xtensor<double, 2>& w,
                                         const xt::xtensor<double, 1>& bias)
{
    const std::size_t h = w.shape()[0];
    std::vector<std::vector<double>> out(x.rows, std::vector<double>(h));
    for (std::size_t t = 0; t < x.rows; ++t)
        for (std::size_t j = 0; j < h; ++j) {
            double a = bias(j);
            for (std::size_t c = 0; c < x.cols; ++c) a += x(t, c) * w(j, c);
            out[t][j] = std::max(0.0, a);
        }
    return out;
}

// Scores of one split from given (already masked) projections, then the
// train-mode softmax over the last axis if `softmax`. Layout [m, l, o].
std::vector<double> scores(const std::vector<std::vector<double>>& head, const std::vector<std::vector<double>>& dep,
                           const xt::xtensor<double, 3>& w, bool bu, bool bv, bool softmax)
{
    const std::size_t n = head.size(), o = w.shape()[0], h = head.empty() ? 0 : head[0].size();
    std::vector<double> s(n * n * o, 0.0);
    for (std::size_t m = 0; m < n; ++m)
        for (std::size_t l = 0; l < n; ++l)
            for (std::size_t k = 0; k < o; ++k) {
                double acc = 0;
                for (std::size_t i = 0; i < h + bu; ++i)
                    for (std::size_t j = 0; j < h + bv; ++j) {
                        const double ui = i < h ? head[l][i] : 1.0;
                        const double vj = j < h ? dep[m][j] : 1.0;
                        acc += ui * w(k, i, j) * vj;
                    }
                s[(m * n + l) * o + k] = acc;
            }
    if (softmax) {
        const std::size_t group = o == 1 ? n : o, groups = o == 1 ? n : n * n;
        for (std::size_t g = 0; g < groups; ++g) {
            double* x = s.data() + g * group;
            const double mx = *std::max_element(x, x + group);
            double sum = 0;
            for (std::size_t i = 0; i < group; ++i) sum += (x[i] = std::exp(x[i] - mx));
            for (std::size_t i = 0; i < group; ++i) x[i] /= sum;
        }
    }
    return s;
}

std::vector<std::vector<double>> apply_mask(std::vector<std::vector<double>> a, unsigned mask, double scale)
{
    for (auto& row : a)
        for (std::size_t j = 0; j < row.size(); ++j) row[j] *= (mask >> j) & 1u ? scale : 0.0;
    return a;
}

double max_abs_diff(const score_tensor<double>& y, const std::vector<double>& ref)
{
    if (y.size() != ref.size()) return 1e300;
    double d = 0;
    for (std::size_t i = 0; i < ref.size(); ++i) d = std::max(d, std::abs(y.data()[i] - ref[i]));
    return d;
}

}  // namespace

TEST_CASE("train-mode dropout: deterministic per seed, per-sequence feature masks, inverted scaling",
          "[scorer][dropout]")
{
    for (std::size_t o : {std::size_t(1), std::size_t(3)}) {
        INFO("labels " << o);
        const double p = 0.5;
        scorer_config cfg;
        cfg.n_in = 4;
        cfg.hidden = 4;
        cfg.labels = o;
        cfg.dropout = p;
        cfg.seed = 2024;
        // Data: projections strictly positive for every token (large biases),
        // so a dropped feature is visible in the scores and the mask is unique.
        std::mt19937_64 rng(5);
        const std::vector<std::size_t> lengths{3, 5, 4, 2, 6, 3, 4, 5};
        std::size_t N = 0;
        for (std::size_t n : lengths) N += n;
        xt::xtensor<double, 2> doc = xt::xtensor<double, 2>::from_shape({N, cfg.n_in});
        fill_random(rng, doc.data(), doc.size());
        std::vector<seq_view<const double>> items;
        for (std::size_t k = 0, row = 0; k < lengths.size(); row += lengths[k], ++k) {
            items.push_back({doc.data() + row * cfg.n_in, lengths[k], cfg.n_in, static_cast<std::ptrdiff_t>(cfg.n_in), 1});
        }
        auto make = [&]() {
            biaffine_scorer<double> s(cfg);
            s.set_parameter("head_bias", xt::xtensor<double, 1>({3.0, 3.5, 4.0, 3.2}));
            s.set_parameter("dependent_bias", xt::xtensor<double, 1>({3.3, 3.1, 4.2, 3.7}));
            return s;
        };
        biaffine_scorer<double> s1 = make();
        biaffine_scorer<double> s2 = make();
        auto [Y1, bp1] = s1.forward(items, mode::train);
        auto [Y2, bp2] = s2.forward(items, mode::train);
        REQUIRE(Y1.size() == Y2.size());
        for (std::size_t k = 0; k < Y1.size(); ++k) {
            CHECK(std::equal(Y1[k].begin(), Y1[k].end(), Y2[k].begin(), Y2[k].end()));
        }

        const xt::xtensor<double, 2> wh = s1.head_weight(), wd = s1.dependent_weight();
        const xt::xtensor<double, 1> bh = s1.head_bias(), bd = s1.dependent_bias();
        const xt::xtensor<double, 3> w = s1.bilinear_weight();
        const double scale = 1.0 / (1.0 - p);
        std::size_t dropped = 0, total = 0, unique = 0;
        for (std::size_t k = 0; k < items.size(); ++k) {
            INFO("sequence " << k);
            const auto head = project(items[k], wh, bh);
            const auto dep = project(items[k], wd, bd);
            for (const auto& r : head)
                for (double a : r) REQUIRE(a > 0.5);
            for (const auto& r : dep)
                for (double a : r) REQUIRE(a > 0.5);
            // Search every (head mask, dependent mask) pair: exactly the one
            // the scorer drew must reproduce its output.
            std::vector<std::pair<unsigned, unsigned>> matches;
            const unsigned all = (1u << cfg.hidden) - 1;
            for (unsigned mh = 0; mh <= all; ++mh)
                for (unsigned md = 0; md <= all; ++md) {
                    const auto ref = scores(apply_mask(head, mh, scale), apply_mask(dep, md, scale), w, cfg.bias_u,
                                            cfg.bias_v, true);
                    if (max_abs_diff(Y1[k], ref) < 1e-9) matches.emplace_back(mh, md);
                }
            // Several matches only when the data cannot tell masks apart (e.g.
            // every head feature dropped: the softmax over heads is uniform).
            REQUIRE(!matches.empty());
            if (matches.size() != 1) continue;
            ++unique;
            for (std::size_t j = 0; j < cfg.hidden; ++j) {
                dropped += ((matches[0].first >> j) & 1u) == 0;
                dropped += ((matches[0].second >> j) & 1u) == 0;
                total += 2;
            }
        }
        // Dropout at p = 0.5 did drop something, and not everything (8
        // draws per identified sequence; a fixed seed, so no flakiness).
        INFO("dropped " << dropped << " of " << total << " features; " << unique << " sequences identified");
        CHECK(unique >= items.size() / 2);
        CHECK(dropped >= total / 5);
        CHECK(dropped <= total - total / 5);

        // Eval mode ignores dropout and the softmax: plain eval projections.
        biaffine_scorer<double> s3 = make();
        auto [Ye, bpe] = s3.forward(items, mode::eval);
        const score_list<double> Yp = s3.predict(items);
        for (std::size_t k = 0; k < items.size(); ++k) {
            const auto ref = scores(project(items[k], wh, bh), project(items[k], wd, bd), w, true, true, false);
            CHECK(max_abs_diff(Ye[k], ref) < 1e-9);
            CHECK(max_abs_diff(Yp[k], ref) < 1e-9);
        }
    }
}
