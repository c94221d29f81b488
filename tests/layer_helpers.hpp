// tests/layer_helpers.hpp - shared pieces of the batching-layer tests: random
// workloads (documents + split lengths), a naive double-precision reference of
// the scorer written with plain loops (independent of the library's GEMM
// path), and mock split-list / padded layers for the combinators.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "biaffine/detail/eigen.hpp"  // Eigen, without GCC 12's AVX-512 false positives
#include <xtensor/xtensor.hpp>

#include "biaffine/biaffine.hpp"

namespace th {

using std::size_t;

// ------------------------------------------------------------ workloads

/// Storage of a test document.
enum class layout { xtensor, eigen_col, eigen_row };

inline const char* layout_name(layout l)
{
    return l == layout::xtensor ? "xtensor" : l == layout::eigen_col ? "eigen col-major" : "eigen row-major";
}

template <class T>
using col_matrix = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::ColMajor>;
template <class T>
using row_matrix = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

/// The layout of a document type.
template <class Doc>
struct doc_layout {
    static constexpr layout value = layout::xtensor;
};
template <class T>
struct doc_layout<col_matrix<T>> {
    static constexpr layout value = layout::eigen_col;
};
template <class T>
struct doc_layout<row_matrix<T>> {
    static constexpr layout value = layout::eigen_row;
};

/// Documents and split lengths; `data[d]` is row-major `[rows_d, n_in]` in
/// double, already rounded to the scalar type under test so the reference
/// sees exactly the library's inputs.
struct workload {
    size_t n_in = 0;
    std::vector<std::vector<int>> lengths;
    std::vector<std::vector<double>> data;

    size_t rows(size_t d) const { return data[d].size() / (n_in == 0 ? 1 : n_in); }
    size_t n_splits() const
    {
        size_t n = 0;
        for (const auto& l : lengths) n += l.size();
        return n;
    }
    /// (document, first row, length) of every split, flat order.
    struct split_ref {
        size_t doc, row, len;
    };
    std::vector<split_ref> splits() const
    {
        std::vector<split_ref> out;
        for (size_t d = 0; d < lengths.size(); ++d) {
            size_t row = 0;
            for (int len : lengths[d]) {
                out.push_back({d, row, static_cast<size_t>(len)});
                row += static_cast<size_t>(len);
            }
        }
        return out;
    }
    /// Rows [row, row + len) of document d, row-major.
    std::vector<double> split_rows(const split_ref& s) const
    {
        const auto first = data[s.doc].begin() + static_cast<std::ptrdiff_t>(s.row * n_in);
        return std::vector<double>(first, first + static_cast<std::ptrdiff_t>(s.len * n_in));
    }
};

/// A split length drawn from a mixture that covers the edge cases: zero
/// length, one token, short, medium, and now and then a long split.
inline int draw_length(std::mt19937& rng, int long_max)
{
    const int kind = std::uniform_int_distribution<int>(0, 99)(rng);
    if (kind < 10) return 0;
    if (kind < 25) return 1;
    if (kind < 70) return std::uniform_int_distribution<int>(2, 8)(rng);
    if (kind < 92) return std::uniform_int_distribution<int>(9, 24)(rng);
    return std::uniform_int_distribution<int>(25, std::max(25, long_max))(rng);
}

/// A random workload for scalar type T: 0..max_docs documents, each with
/// 0..max_splits splits (some documents empty: no splits, or only
/// zero-length ones).
template <class T>
workload random_workload(std::mt19937& rng, size_t n_in, int max_docs, int max_splits, int long_max)
{
    workload w;
    w.n_in = n_in;
    const int n_docs = std::uniform_int_distribution<int>(0, max_docs)(rng);
    std::uniform_real_distribution<double> val(-1.0, 1.0);
    for (int d = 0; d < n_docs; ++d) {
        std::vector<int> ls;
        const int shape = std::uniform_int_distribution<int>(0, 9)(rng);
        if (shape == 0) {
            // no splits at all
        } else if (shape == 1) {
            ls.assign(static_cast<size_t>(std::uniform_int_distribution<int>(1, 3)(rng)), 0);
        } else {
            const int ns = std::uniform_int_distribution<int>(1, max_splits)(rng);
            for (int k = 0; k < ns; ++k) ls.push_back(draw_length(rng, long_max));
        }
        size_t rows = 0;
        for (int l : ls) rows += static_cast<size_t>(l);
        std::vector<double> x(rows * n_in);
        for (double& v : x) v = static_cast<double>(static_cast<T>(val(rng)));
        w.lengths.push_back(std::move(ls));
        w.data.push_back(std::move(x));
    }
    return w;
}

/// The documents of a workload in a given container type.
template <class Doc>
struct doc_maker;

template <class T>
struct doc_maker<xt::xtensor<T, 2>> {
    static xt::xtensor<T, 2> make(const std::vector<double>& x, size_t rows, size_t n_in)
    {
        xt::xtensor<T, 2> d = xt::xtensor<T, 2>::from_shape({rows, n_in});
        for (size_t r = 0; r < rows; ++r)
            for (size_t c = 0; c < n_in; ++c) d(r, c) = static_cast<T>(x[r * n_in + c]);
        return d;
    }
};

template <class T, int Options>
struct doc_maker<Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Options>> {
    using M = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Options>;
    static M make(const std::vector<double>& x, size_t rows, size_t n_in)
    {
        M d(static_cast<Eigen::Index>(rows), static_cast<Eigen::Index>(n_in));
        for (size_t r = 0; r < rows; ++r)
            for (size_t c = 0; c < n_in; ++c)
                d(static_cast<Eigen::Index>(r), static_cast<Eigen::Index>(c)) = static_cast<T>(x[r * n_in + c]);
        return d;
    }
};

template <class Doc>
std::vector<Doc> make_docs(const workload& w)
{
    std::vector<Doc> docs;
    for (size_t d = 0; d < w.data.size(); ++d) docs.push_back(doc_maker<Doc>::make(w.data[d], w.rows(d), w.n_in));
    return docs;
}

/// The flat list of split views of a set of documents (the unbatched input).
template <class T, class Docs>
std::vector<biaffine::seq_view<const T>> split_views(const Docs& docs, const workload& w)
{
    std::vector<biaffine::seq_view<const T>> out;
    for (const auto& s : w.splits()) out.push_back(biaffine::as_const_view(docs[s.doc]).rows_view(s.row, s.len));
    return out;
}

/// `count` split lengths drawn with draw_length.
inline std::vector<size_t> random_lengths(std::mt19937& rng, size_t count, int long_max)
{
    std::vector<size_t> l(count);
    for (auto& x : l) x = static_cast<size_t>(draw_length(rng, long_max));
    return l;
}

/// One buffer of random values in [-1, 1) per item, room for max(n, 1) rows
/// of n_in (so that zero-length items still have distinct data pointers).
template <class T>
std::vector<std::vector<T>> random_buffers(std::mt19937& rng, const std::vector<size_t>& lengths, size_t n_in)
{
    std::uniform_real_distribution<double> val(-1.0, 1.0);
    std::vector<std::vector<T>> out;
    for (size_t n : lengths) {
        std::vector<T> buf(std::max<size_t>(n, 1) * n_in);
        for (auto& v : buf) v = static_cast<T>(val(rng));
        out.push_back(std::move(buf));
    }
    return out;
}

/// Random score gradients `[n, n]` (or `[n, n, labels]`), one per length
/// (output category containers, as a caller would build them from the
/// outputs).
template <class T>
biaffine::score_list<T> random_score_grads(std::mt19937& rng, const std::vector<size_t>& lengths, size_t labels)
{
    std::uniform_real_distribution<double> val(-1.0, 1.0);
    biaffine::score_list<T> g;
    for (size_t n : lengths) {
        std::vector<size_t> shape{n, n};
        if (labels != 1) shape.push_back(labels);
        biaffine::score_tensor<T> t = biaffine::score_tensor<T>::from_shape(shape);
        for (auto& v : t) v = static_cast<T>(val(rng));
        g.push_back(std::move(t));
    }
    return g;
}

/// Random per-split score gradients of a workload, flat split order.
template <class T>
biaffine::score_list<T> random_grads(std::mt19937& rng, const workload& w, size_t labels)
{
    std::vector<size_t> lengths;
    for (const auto& s : w.splits()) lengths.push_back(s.len);
    return random_score_grads<T>(rng, lengths, labels);
}

/// Views of a list of score gradients, as a backprop callback takes them.
template <class T>
biaffine::tracked_vector<biaffine::score_view<const T>> views_of(const biaffine::score_list<T>& g)
{
    biaffine::tracked_vector<biaffine::score_view<const T>> v;
    for (const auto& t : g) v.push_back(biaffine::as_score_view(t));
    return v;
}

/// Owning per-item input-gradient slots `[n_k, n_in]` (row-major) and their
/// views; every cell starts at `unwritten`.
template <class T>
struct grad_slots {
    static constexpr T unwritten = T(-555);

    std::vector<std::vector<T>> store;
    std::vector<biaffine::seq_view<T>> views;

    grad_slots(const std::vector<size_t>& lengths, size_t n_in)
    {
        for (size_t n : lengths) store.emplace_back(std::max<size_t>(n, 1) * n_in, unwritten);
        for (size_t k = 0; k < lengths.size(); ++k)
            views.push_back({store[k].data(), lengths[k], n_in, static_cast<std::ptrdiff_t>(n_in), 1});
    }
    /// Item k's gradient, row-major, in double.
    std::vector<double> get(size_t k) const
    {
        std::vector<double> r;
        for (size_t i = 0; i < views[k].rows; ++i)
            for (size_t c = 0; c < views[k].cols; ++c) r.push_back(static_cast<double>(views[k](i, c)));
        return r;
    }
};

// ------------------------------------------------ naive reference scorer

/// The scorer's parameters in double, row-major, read through the public
/// accessors.
struct ref_model {
    size_t n_in = 0, h = 0, o = 1;
    bool bu = true, bv = true;
    std::vector<double> wh, bh, wd, bd, w;  // [h, n_in], [h], [h, n_in], [h], [o, hu, hv]
    size_t hu() const { return h + (bu ? 1 : 0); }
    size_t hv() const { return h + (bv ? 1 : 0); }
};

/// Any container's elements in iteration order as doubles.
template <class A>
std::vector<double> flat_double(const A& a)
{
    std::vector<double> out;
    for (auto v : a) out.push_back(static_cast<double>(v));
    return out;
}

template <class T>
ref_model ref_from(const biaffine::biaffine_scorer<T>& s)
{
    ref_model m;
    m.n_in = s.n_in();
    m.h = s.hidden();
    m.o = s.labels();
    m.bu = s.config().bias_u;
    m.bv = s.config().bias_v;
    m.wh = flat_double(s.head_weight());
    m.bh = flat_double(s.head_bias());
    m.wd = flat_double(s.dependent_weight());
    m.bd = flat_double(s.dependent_bias());
    m.w = flat_double(s.bilinear_weight());
    return m;
}

/// Parameter gradients of the reference, same layouts as ref_model.
struct ref_grads {
    std::vector<double> dwh, dbh, dwd, dbd, dw;
    explicit ref_grads(const ref_model& m)
        : dwh(m.h * m.n_in), dbh(m.h), dwd(m.h * m.n_in), dbd(m.h), dw(m.o * m.hu() * m.hv())
    {
    }
};

/// Everything the reference computes for one split in double.
struct ref_split {
    size_t n = 0;
    std::vector<double> zh, zd;  // pre-activations [n, h]
    std::vector<double> u, v;    // [n, hu], [n, hv]
    std::vector<double> t;       // [n, o, hv]: t[l][q][j] = sum_i u[l][i] W[q][i][j]
    std::vector<double> y;       // [n, n, o] (after softmax in train)
    double min_abs_z = std::numeric_limits<double>::infinity();  // closest pre-activation to the relu kink
};

/// Scores of one split `x [n, n_in]` (row-major) scored alone.
inline ref_split ref_forward(const ref_model& M, const std::vector<double>& x, size_t n, bool train)
{
    ref_split r;
    r.n = n;
    const size_t h = M.h, hu = M.hu(), hv = M.hv(), o = M.o, ni = M.n_in;
    r.zh.assign(n * h, 0.0);
    r.zd.assign(n * h, 0.0);
    r.u.assign(n * hu, 1.0);
    r.v.assign(n * hv, 1.0);
    for (size_t t = 0; t < n; ++t) {
        for (size_t i = 0; i < h; ++i) {
            double a = M.bh[i], b = M.bd[i];
            for (size_t c = 0; c < ni; ++c) {
                a += x[t * ni + c] * M.wh[i * ni + c];
                b += x[t * ni + c] * M.wd[i * ni + c];
            }
            r.zh[t * h + i] = a;
            r.zd[t * h + i] = b;
            r.min_abs_z = std::min({r.min_abs_z, std::abs(a), std::abs(b)});
            r.u[t * hu + i] = a > 0 ? a : 0.0;
            r.v[t * hv + i] = b > 0 ? b : 0.0;
        }
    }
    r.t.assign(n * o * hv, 0.0);
    for (size_t l = 0; l < n; ++l)
        for (size_t q = 0; q < o; ++q)
            for (size_t j = 0; j < hv; ++j) {
                double acc = 0;
                for (size_t i = 0; i < hu; ++i) acc += r.u[l * hu + i] * M.w[(q * hu + i) * hv + j];
                r.t[(l * o + q) * hv + j] = acc;
            }
    r.y.assign(n * n * o, 0.0);
    for (size_t m = 0; m < n; ++m)
        for (size_t l = 0; l < n; ++l)
            for (size_t q = 0; q < o; ++q) {
                double acc = 0;
                for (size_t j = 0; j < hv; ++j) acc += r.t[(l * o + q) * hv + j] * r.v[m * hv + j];
                r.y[(m * n + l) * o + q] = acc;
            }
    if (train) {
        // softmax over the last axis: heads when o == 1, labels otherwise
        auto softmax = [](double* p, size_t len, size_t stride) {
            double mx = -std::numeric_limits<double>::infinity();
            for (size_t i = 0; i < len; ++i) mx = std::max(mx, p[i * stride]);
            double sum = 0;
            for (size_t i = 0; i < len; ++i) sum += std::exp(p[i * stride] - mx);
            for (size_t i = 0; i < len; ++i) p[i * stride] = std::exp(p[i * stride] - mx) / sum;
        };
        for (size_t m = 0; m < n; ++m) {
            if (o == 1) {
                softmax(&r.y[m * n], n, 1);
            } else {
                for (size_t l = 0; l < n; ++l) softmax(&r.y[(m * n + l) * o], o, 1);
            }
        }
    }
    return r;
}

/// Backward of one split: `dy [n, n, o]`; writes `dx [n, n_in]` and
/// accumulates the parameter gradients.
inline void ref_backward(const ref_model& M, const std::vector<double>& x, const ref_split& r, bool train,
                         const std::vector<double>& dy, std::vector<double>& dx, ref_grads& g)
{
    const size_t n = r.n, h = M.h, hu = M.hu(), hv = M.hv(), o = M.o, ni = M.n_in;
    std::vector<double> ds = dy;
    if (train) {
        for (size_t m = 0; m < n; ++m) {
            const size_t groups = o == 1 ? 1 : n, len = o == 1 ? n : o;
            for (size_t gi = 0; gi < groups; ++gi) {
                const size_t base = o == 1 ? m * n : (m * n + gi) * o;
                double dot = 0;
                for (size_t i = 0; i < len; ++i) dot += r.y[base + i] * dy[base + i];
                for (size_t i = 0; i < len; ++i) ds[base + i] = r.y[base + i] * (dy[base + i] - dot);
            }
        }
    }
    std::vector<double> du(n * hu, 0.0), dv(n * hv, 0.0);
    // dv[m][j] = sum_{l,q} ds[m,l,q] t[l][q][j]
    for (size_t m = 0; m < n; ++m)
        for (size_t l = 0; l < n; ++l)
            for (size_t q = 0; q < o; ++q) {
                const double s = ds[(m * n + l) * o + q];
                for (size_t j = 0; j < hv; ++j) dv[m * hv + j] += s * r.t[(l * o + q) * hv + j];
            }
    // a[l][q][j] = sum_m ds[m,l,q] v[m][j]; du[l][i] = sum_{q,j} W[q][i][j] a[l][q][j]; dW += u a
    for (size_t l = 0; l < n; ++l)
        for (size_t q = 0; q < o; ++q) {
            std::vector<double> a(hv, 0.0);
            for (size_t m = 0; m < n; ++m) {
                const double s = ds[(m * n + l) * o + q];
                for (size_t j = 0; j < hv; ++j) a[j] += s * r.v[m * hv + j];
            }
            for (size_t i = 0; i < hu; ++i)
                for (size_t j = 0; j < hv; ++j) {
                    du[l * hu + i] += M.w[(q * hu + i) * hv + j] * a[j];
                    g.dw[(q * hu + i) * hv + j] += r.u[l * hu + i] * a[j];
                }
        }
    dx.assign(n * ni, 0.0);
    for (size_t t = 0; t < n; ++t)
        for (size_t i = 0; i < h; ++i) {
            const double gh = r.zh[t * h + i] > 0 ? du[t * hu + i] : 0.0;
            const double gd = r.zd[t * h + i] > 0 ? dv[t * hv + i] : 0.0;
            g.dbh[i] += gh;
            g.dbd[i] += gd;
            for (size_t c = 0; c < ni; ++c) {
                g.dwh[i * ni + c] += gh * x[t * ni + c];
                g.dwd[i * ni + c] += gd * x[t * ni + c];
                dx[t * ni + c] += gh * M.wh[i * ni + c] + gd * M.wd[i * ni + c];
            }
        }
}

// ------------------------------------------------------------ comparisons

/// Largest |a - b| / (1 + max|b|) over two equally long sequences; a size
/// mismatch returns infinity.
template <class A, class B>
double rel_err(const A& a, const B& b)
{
    const std::vector<double> va = flat_double(a), vb = flat_double(b);
    if (va.size() != vb.size()) return std::numeric_limits<double>::infinity();
    double scale = 0, err = 0;
    for (double v : vb) scale = std::max(scale, std::abs(v));
    for (size_t i = 0; i < va.size(); ++i) {
        const double e = std::abs(va[i] - vb[i]);
        if (!(e <= err)) err = std::isnan(e) ? std::numeric_limits<double>::infinity() : e;
    }
    return err / (1.0 + scale);
}

template <class T>
constexpr double tol()
{
    return std::is_same<T, float>::value ? 2e-4 : 1e-10;
}

/// A score tensor's elements in row-major order as doubles.
template <class S>
std::vector<double> to_vec(const S& s)
{
    return flat_double(s);
}

/// A score view's elements `[n, n, o]` as doubles.
template <class T>
std::vector<double> to_vec(biaffine::score_view<T> s)
{
    std::vector<double> out;
    for (size_t m = 0; m < s.n; ++m)
        for (size_t l = 0; l < s.n; ++l)
            for (size_t q = 0; q < s.labels; ++q) out.push_back(static_cast<double>(s(m, l, q)));
    return out;
}

// ------------------------------------------------------------ mock layers

/// What a mock saw in one call: the items' data pointers and lengths.
template <class T>
struct seen_batch {
    std::vector<const T*> data;
    std::vector<size_t> lengths;
    size_t max_len() const { return lengths.empty() ? 0 : *std::max_element(lengths.begin(), lengths.end()); }
};

template <class T, class Items>
seen_batch<T> record_items(const Items& X)
{
    seen_batch<T> b;
    for (size_t k = 0; k < X.size(); ++k) {
        const auto v = X[k];
        b.data.push_back(v.data);
        b.lengths.push_back(v.rows);
    }
    return b;
}

/// Mock cost of a split-list layer: inputs, and scores, (and saved scores in train).
template <class T>
biaffine::batch_cost mock_cost(size_t count, size_t max_len, size_t n_in, size_t labels, biaffine::mode m)
{
    using biaffine::detail::checked_product;
    biaffine::batch_cost c;
    c.outputs = checked_product("mock cost", count, max_len, max_len, labels, sizeof(T));
    c.scratch = checked_product("mock cost", count, max_len, n_in, sizeof(T));
    if (m == biaffine::mode::train) c.saved = checked_product("mock cost", count, sizeof(void*));
    return c;
}

/// What every mock layer shares: its input width, its label count and the
/// shape of one split's scores.
template <class T>
class mock_shape {
public:
    using value_type = T;

    mock_shape(size_t n_in, size_t labels) : n_in_(n_in), labels_(labels) {}

    size_t n_in() const { return n_in_; }
    size_t labels() const { return labels_; }
    typename biaffine::score_tensor<T>::shape_type score_shape(size_t n) const
    {
        if (labels_ == 1) return {n, n};
        return {n, n, labels_};
    }

protected:
    size_t n_in_, labels_;
};

/// A split-list mock's shape, backprop type and cost (mock_cost).
template <class T>
class split_mock : public mock_shape<T> {
public:
    using backprop_type = biaffine::split_backprop<T>;

    using mock_shape<T>::mock_shape;

    biaffine::batch_cost cost(size_t count, size_t max_len, biaffine::mode m = biaffine::mode::eval) const
    {
        return mock_cost<T>(count, max_len, this->n_in_, this->labels_, m);
    }
};

/// The checks a split-list mock's backprop makes on what it is handed: one
/// gradient (and one input-gradient slot) per item ...
inline void check_grad_count(const char* who, size_t dy_count, size_t dx_count, size_t items)
{
    if (dy_count != items || dx_count != items) {
        throw biaffine::shape_error(
            biaffine::detail::msg(who, " backprop: expected ", items, " gradients, got ", dy_count));
    }
}

/// ... and item k's gradient `[n, n, o]` with its slot `[n, n_in]`.
template <class T>
void check_grad_shape(const char* who, size_t k, biaffine::score_view<const T> dy, biaffine::seq_view<T> dx, size_t n,
                      size_t o, size_t n_in)
{
    if (dy.n != n || dy.labels != o || dx.rows != n || dx.cols != n_in) {
        throw biaffine::shape_error(biaffine::detail::msg(who, " backprop: item ", k, " shape"));
    }
}

/// Writes a mock's input gradient `dx [n, n_in]`:
///   dx(r, c) = scale * sum_{l < n, q < o} term(r, c, l, q),
/// summed in double in that order.
template <class T, class Term>
void write_input_grad(biaffine::seq_view<T> dx, size_t o, double scale, Term term)
{
    for (size_t r = 0; r < dx.rows; ++r)
        for (size_t c = 0; c < dx.cols; ++c) {
            double acc = 0;
            for (size_t l = 0; l < dx.rows; ++l)
                for (size_t q = 0; q < o; ++q) acc += term(r, c, l, q);
            dx(r, c) = static_cast<T>(scale * acc);
        }
}

/// Identity-ish recording layer: records every batch it is called with and
/// returns a deterministic function of each split's data,
///   Y[m, l, q] = x(m, 0) - 2 x(l, n_in - 1) + q / 2,
/// whose backprop is
///   dX(r, c) = (c + 1) sum_{l,q} dY(r, l, q) + sum_{m,q} dY(m, r, q).
template <class T>
class recording_layer : public split_mock<T> {
    using base = split_mock<T>;
    using base::labels_;
    using base::n_in_;

public:
    using typename base::backprop_type;

    using base::base;

    /// The mock's function, for the tests' expectations.
    static double value(biaffine::seq_view<const T> x, size_t m, size_t l, size_t q)
    {
        return static_cast<double>(x(m, 0)) - 2.0 * static_cast<double>(x(l, x.cols - 1)) + 0.5 * static_cast<double>(q);
    }

    template <class Items>
    biaffine::score_list<T> predict(const Items& X) const
    {
        calls.push_back(record_items<T>(X));
        return compute(X);
    }

    template <class Items, class Sink>
    void predict_stream(const Items& X, Sink&& sink) const
    {
        calls.push_back(record_items<T>(X));
        biaffine::score_list<T> Y = compute(X);
        for (size_t k = 0; k < Y.size(); ++k) sink(k, biaffine::as_score_view(Y[k]));
    }

    template <class Items>
    std::pair<biaffine::score_list<T>, backprop_type> forward(const Items& X, biaffine::mode = biaffine::mode::train)
    {
        calls.push_back(record_items<T>(X));
        biaffine::score_list<T> Y = compute(X);
        std::vector<size_t> lens;
        for (size_t k = 0; k < X.size(); ++k) lens.push_back(X[k].rows);
        const size_t o = labels_, ni = n_in_;
        std::vector<seen_batch<T>>* bcalls = &backward_calls;
        seen_batch<T> fwd = calls.back();
        backprop_type bp([lens, o, ni, bcalls, fwd](biaffine::span<const biaffine::score_view<const T>> dY,
                                                     biaffine::span<const biaffine::seq_view<T>> dX) {
            check_grad_count("recording_layer", dY.size(), dX.size(), lens.size());
            bcalls->push_back(fwd);
            for (size_t k = 0; k < lens.size(); ++k) {
                const biaffine::score_view<const T> g = dY[k];
                check_grad_shape("recording_layer", k, g, dX[k], lens[k], o, ni);
                write_input_grad(dX[k], o, 1.0, [&](size_t r, size_t c, size_t l, size_t q) {
                    return static_cast<double>(c + 1) * static_cast<double>(g(r, l, q)) +
                           static_cast<double>(g(l, r, q));
                });
            }
        });
        return {std::move(Y), std::move(bp)};
    }

    mutable std::vector<seen_batch<T>> calls;  // forward / predict calls, in order
    std::vector<seen_batch<T>> backward_calls;  // batches whose backprop ran, in order

private:
    template <class Items>
    biaffine::score_list<T> compute(const Items& X) const
    {
        biaffine::score_list<T> Y;
        for (size_t k = 0; k < X.size(); ++k) {
            const biaffine::seq_view<const T> x = biaffine::detail::read_only(X[k]);
            if (x.cols != n_in_) {
                throw biaffine::shape_error(biaffine::detail::msg("recording_layer: item ", k, " has width ", x.cols));
            }
            biaffine::score_tensor<T> y = biaffine::score_tensor<T>::from_shape(this->score_shape(x.rows));
            T* p = y.data();
            for (size_t m = 0; m < x.rows; ++m)
                for (size_t l = 0; l < x.rows; ++l)
                    for (size_t q = 0; q < labels_; ++q) *p++ = static_cast<T>(value(x, m, l, q));
            Y.push_back(std::move(y));
        }
        return Y;
    }
};

/// Mock `X Xᵀ` layer with one parameter alpha:
///   S[m, l, q] = alpha (q + 1) (X Xᵀ)[m, l],
///   dX = alpha sum_q (q + 1) (dS_q + dS_qᵀ) X,  d_alpha += sum dS[m,l,q] (q + 1) (X Xᵀ)[m, l].
template <class T>
class xxt_layer : public split_mock<T> {
    using base = split_mock<T>;
    using base::labels_;
    using base::n_in_;

public:
    using typename base::backprop_type;

    xxt_layer(size_t n_in, size_t labels, T alpha = T(1)) : base(n_in, labels), alpha(alpha) {}

    template <class Items>
    biaffine::score_list<T> predict(const Items& X) const
    {
        ++n_calls;
        biaffine::score_list<T> Y;
        for (size_t k = 0; k < X.size(); ++k) Y.push_back(score(biaffine::detail::read_only(X[k])));
        return Y;
    }

    template <class Items, class Sink>
    void predict_stream(const Items& X, Sink&& sink) const
    {
        ++n_calls;
        for (size_t k = 0; k < X.size(); ++k) {
            const biaffine::score_tensor<T> y = score(biaffine::detail::read_only(X[k]));
            sink(k, biaffine::as_score_view(y));
        }
    }

    template <class Items>
    std::pair<biaffine::score_list<T>, backprop_type> forward(const Items& X, biaffine::mode = biaffine::mode::train)
    {
        ++n_calls;
        std::vector<biaffine::seq_view<const T>> views;
        biaffine::score_list<T> Y;
        for (size_t k = 0; k < X.size(); ++k) {
            views.push_back(biaffine::detail::read_only(X[k]));
            Y.push_back(score(views.back()));
        }
        backprop_type bp([this, views](biaffine::span<const biaffine::score_view<const T>> dY,
                                       biaffine::span<const biaffine::seq_view<T>> dX) {
            check_grad_count("xxt_layer", dY.size(), dX.size(), views.size());
            for (size_t k = 0; k < views.size(); ++k) {
                const auto x = views[k];
                const biaffine::score_view<const T> g = dY[k];
                const size_t n = x.rows, o = labels_;
                check_grad_shape("xxt_layer", k, g, dX[k], n, o, n_in_);
                write_input_grad(dX[k], o, static_cast<double>(alpha), [&](size_t r, size_t c, size_t l, size_t q) {
                    return static_cast<double>(q + 1) *
                           (static_cast<double>(g(r, l, q)) + static_cast<double>(g(l, r, q))) *
                           static_cast<double>(x(l, c));
                });
                double da = 0;
                for (size_t m = 0; m < n; ++m)
                    for (size_t l = 0; l < n; ++l)
                        for (size_t q = 0; q < o; ++q)
                            da += static_cast<double>(g(m, l, q)) * static_cast<double>(q + 1) * dot(x, m, l);
                d_alpha += da;
            }
        });
        return {std::move(Y), std::move(bp)};
    }

    static double dot(biaffine::seq_view<const T> x, size_t a, size_t b)
    {
        double s = 0;
        for (size_t c = 0; c < x.cols; ++c) s += static_cast<double>(x(a, c)) * static_cast<double>(x(b, c));
        return s;
    }

    mutable size_t n_calls = 0;
    double d_alpha = 0;

private:
    biaffine::score_tensor<T> score(biaffine::seq_view<const T> x) const
    {
        if (x.cols != n_in_) {
            throw biaffine::shape_error(biaffine::detail::msg("xxt_layer: width ", x.cols, ", expected ", n_in_));
        }
        biaffine::score_tensor<T> y = biaffine::score_tensor<T>::from_shape(this->score_shape(x.rows));
        T* p = y.data();
        for (size_t m = 0; m < x.rows; ++m)
            for (size_t l = 0; l < x.rows; ++l)
                for (size_t q = 0; q < labels_; ++q)
                    *p++ = static_cast<T>(static_cast<double>(alpha) * static_cast<double>(q + 1) * dot(x, m, l));
        return y;
    }

public:
    T alpha;
};

/// Mock padded layer (the reference interface) computing the same X Xᵀ
/// scores inside each sequence. Padded output cells and padded rows of dx
/// are NaN, so anything that reads padding shows up in the results. It
/// checks the adapter's promises: the padded input is zero past each length
/// and the padded dy is zero outside each split.
template <class T>
class padded_xxt_layer : public mock_shape<T> {
    using base = mock_shape<T>;
    using base::labels_;
    using base::n_in_;

public:
    using padded_backprop_type = biaffine::backprop_fn<biaffine::tensor<T, 3>(const biaffine::score_array<T>&)>;

    using base::base;

    biaffine::batch_cost padded_cost(size_t count, size_t max_len, biaffine::mode m = biaffine::mode::eval) const
    {
        biaffine::batch_cost c = mock_cost<T>(count, max_len, n_in_, labels_, m);
        c.heap = biaffine::detail::checked_product("mock cost", count, sizeof(std::int64_t));
        return c;
    }

    template <class X3, class Lengths>
    biaffine::score_array<T> predict_padded(const X3& x, const Lengths& lengths) const
    {
        ++n_calls;
        return score(x, lengths);
    }

    template <class X3, class Lengths>
    std::pair<biaffine::score_array<T>, padded_backprop_type> forward_padded(const X3& x, const Lengths& lengths,
                                                                           biaffine::mode = biaffine::mode::train)
    {
        ++n_calls;
        biaffine::score_array<T> y = score(x, lengths);
        const size_t b = x.shape()[0], L = x.shape()[1];
        std::vector<size_t> lens;
        for (size_t k = 0; k < b; ++k) lens.push_back(static_cast<size_t>(lengths[k]));
        const T* xdata = x.data();  // the adapter keeps the padded input alive until backprop
        const size_t ni = n_in_, o = labels_;
        padded_backprop_type bp([this, xdata, lens, L, ni, o](const biaffine::score_array<T>& dy) {
            const size_t b = lens.size();
            biaffine::tensor<T, 3> dx = biaffine::tensor<T, 3>::from_shape({b, L, ni});
            std::fill(dx.begin(), dx.end(), std::numeric_limits<T>::quiet_NaN());
            auto X = [&](size_t k, size_t r, size_t c) { return static_cast<double>(xdata[(k * L + r) * ni + c]); };
            auto DY = [&](size_t k, size_t m, size_t l, size_t q) {
                return static_cast<double>(dy.data()[((k * L + m) * L + l) * o + q]);
            };
            for (size_t k = 0; k < b; ++k) {
                const size_t n = lens[k];
                for (size_t m = 0; m < L; ++m)
                    for (size_t l = 0; l < L; ++l)
                        for (size_t q = 0; q < o; ++q)
                            if ((m >= n || l >= n) && DY(k, m, l, q) != 0.0) dy_nonzero_outside = true;
                const biaffine::seq_view<T> dxk{dx.data() + k * L * ni, n, ni, static_cast<std::ptrdiff_t>(ni), 1};
                write_input_grad(dxk, o, 1.0, [&](size_t r, size_t c, size_t l, size_t q) {
                    return static_cast<double>(q + 1) * (DY(k, r, l, q) + DY(k, l, r, q)) * X(k, l, c);
                });
            }
            return dx;
        });
        return {std::move(y), std::move(bp)};
    }

    mutable size_t n_calls = 0;
    mutable bool input_not_zero_padded = false;
    bool dy_nonzero_outside = false;

private:
    template <class X3, class Lengths>
    biaffine::score_array<T> score(const X3& x, const Lengths& lengths) const
    {
        const size_t b = x.shape()[0], L = x.shape()[1], o = labels_;
        if (x.shape()[2] != n_in_) throw biaffine::shape_error("padded_xxt_layer: width");
        std::vector<size_t> shape{b, L, L};
        if (o != 1) shape.push_back(o);
        biaffine::score_array<T> y = biaffine::score_array<T>::from_shape(shape);
        std::fill(y.begin(), y.end(), std::numeric_limits<T>::quiet_NaN());
        const T* xd = x.data();
        for (size_t k = 0; k < b; ++k) {
            const size_t n = static_cast<size_t>(lengths[k]);
            for (size_t r = n; r < L; ++r)
                for (size_t c = 0; c < n_in_; ++c)
                    if (xd[(k * L + r) * n_in_ + c] != T(0)) input_not_zero_padded = true;
            for (size_t m = 0; m < n; ++m)
                for (size_t l = 0; l < n; ++l) {
                    double s = 0;
                    for (size_t c = 0; c < n_in_; ++c)
                        s += static_cast<double>(xd[(k * L + m) * n_in_ + c]) *
                             static_cast<double>(xd[(k * L + l) * n_in_ + c]);
                    for (size_t q = 0; q < o; ++q)
                        y.data()[((k * L + m) * L + l) * o + q] = static_cast<T>(static_cast<double>(q + 1) * s);
                }
        }
        return y;
    }
};

/// Wraps any split-list layer (by reference) and records every batch it is
/// called with, forwarding everything else.
template <class Inner>
class spy_layer {
public:
    using value_type = typename Inner::value_type;
    using T = value_type;
    using backprop_type = typename Inner::backprop_type;

    explicit spy_layer(Inner& inner) : inner_(&inner) {}

    size_t n_in() const { return inner_->n_in(); }
    size_t labels() const { return inner_->labels(); }
    auto score_shape(size_t n) const { return inner_->score_shape(n); }
    biaffine::batch_cost cost(size_t count, size_t max_len, biaffine::mode m = biaffine::mode::eval) const
    {
        return inner_->cost(count, max_len, m);
    }
    template <class Items>
    biaffine::score_list<T> predict(const Items& X) const
    {
        calls.push_back(record_items<T>(X));
        return static_cast<const Inner&>(*inner_).predict(X);
    }
    template <class Items, class Sink>
    void predict_stream(const Items& X, Sink&& sink) const
    {
        calls.push_back(record_items<T>(X));
        static_cast<const Inner&>(*inner_).predict_stream(X, std::forward<Sink>(sink));
    }
    template <class Items>
    auto forward(const Items& X, biaffine::mode m = biaffine::mode::train)
    {
        calls.push_back(record_items<T>(X));
        return inner_->forward(X, m);
    }

    mutable std::vector<seen_batch<T>> calls;

private:
    Inner* inner_;
};

// ------------------------------------------------ the batching rule, again

/// spaCy's minibatch_by_padded_size re-implemented from its description,
/// generalised to any cost: per buffer, sort (length, index), grow a batch
/// while cost(count + 1, length) <= limit (a lone item always fits), emit the
/// batches longest first with indices ascending inside.
template <class Cost>
std::vector<std::vector<size_t>> reference_batches(const std::vector<size_t>& lengths, size_t buffer, Cost cost,
                                                   std::uint64_t limit)
{
    std::vector<std::vector<size_t>> out;
    for (size_t begin = 0; begin < lengths.size(); begin += buffer) {
        const size_t end = std::min(lengths.size(), begin + buffer);
        std::vector<std::pair<size_t, size_t>> li;
        for (size_t i = begin; i < end; ++i) li.emplace_back(lengths[i], i);
        std::sort(li.begin(), li.end());
        std::vector<std::vector<size_t>> batches;
        std::vector<size_t> cur;
        for (const auto& p : li) {
            if (cur.empty() || cost(cur.size() + 1, p.first) <= limit) {
                cur.push_back(p.second);
            } else {
                batches.push_back(cur);
                cur = {p.second};
            }
        }
        if (!cur.empty()) batches.push_back(cur);
        for (auto it = batches.rbegin(); it != batches.rend(); ++it) {
            std::sort(it->begin(), it->end());
            out.push_back(*it);
        }
    }
    return out;
}

}  // namespace th
