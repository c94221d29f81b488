// biaffine/scorer.hpp - the biaffine arc / label scorer (the reference model).
//
//   head = relu(X Wh^T + bh),  dep = relu(X Wd^T + bd)     (dropout in training)
//   S[m, l, o] = sum_{i,j} [head, 1][l, i] W[o, i, j] [dep, 1][m, j]
//
// Rows m are dependents, columns l head candidates, labels last; the label
// axis is dropped when o == 1; in training the output is a softmax over the
// last axis. Two ways in:
//   - split lists (`predict`, `forward`): length-aware, each split scored on
//     its true length, no padding anywhere. This is what the batching layers
//     call.
//   - padded batches (`predict_padded`, `forward_padded`): `[b, L, n_in]` plus
//     lengths, output `[b, L, L(, o)]`, exactly the reference module's
//     interface (with_pad_seq_unpad_matrix and the golden tests use it). Still
//     no FLOPs on padding; padded cells hold the mask value (eval) or 0 (train).
// Projections and T = u.W' run once on the packed rows of all splits.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <fstream>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include <Eigen/Core>
#include <xtensor/xadapt.hpp>
#include <xtensor/xnpy.hpp>

#include "biaffine/backprop.hpp"
#include "biaffine/detail/checked.hpp"
#include "biaffine/detail/gemm_kernel.hpp"
#include "biaffine/errors.hpp"
#include "biaffine/layer.hpp"
#include "biaffine/pairwise_bilinear.hpp"
#include "biaffine/tensor.hpp"
#include "biaffine/workspace.hpp"

namespace biaffine {

/// Hyper-parameters of a biaffine_scorer.
struct scorer_config {
    std::size_t n_in = 0;     ///< width of the token representations
    std::size_t hidden = 128; ///< h, width of the head / dependent projections
    std::size_t labels = 1;   ///< o, number of labels (1: arc scorer, label axis dropped)
    bool bias_u = true;       ///< append 1 to the head side
    bool bias_v = true;       ///< append 1 to the dependent side
    double dropout = 0.0;     ///< variational dropout rate in training
    std::uint64_t seed = 0;   ///< parameter initialisation and dropout masks
    /// Keep nothing but the split views between forward and backward and
    /// recompute the batch's forward in backward: a training step's extra
    /// memory is then bounded by the batch budget too, for about 1.5x the
    /// compute. Gradients are identical.
    bool recompute_in_backward = false;
};

/// The mask added to head columns past a sequence's length. -10000 as in the
/// reference, clamped to what the scalar type can hold.
template <class T>
constexpr T mask_value()
{
    return std::numeric_limits<T>::lowest() / T(2) > T(-10000) ? std::numeric_limits<T>::lowest() / T(2)
                                                               : T(-10000);
}

namespace detail {

// A uniform double in [0, 1) from 53 random bits: the same on every platform,
// unlike std::uniform_real_distribution.
inline double uniform01(std::mt19937_64& rng) { return static_cast<double>(rng() >> 11) * 0x1.0p-53; }

// In-place softmax of one split's scores over the last axis: heads when there
// is one label, labels otherwise.
template <class T>
void softmax_last_axis(score_view<T> s)
{
    const std::size_t group = s.labels == 1 ? s.n : s.labels;
    const std::size_t groups_per_row = s.labels == 1 ? 1 : s.n;
    for (std::size_t m = 0; m < s.n; ++m) {
        T* row = s.data + static_cast<std::ptrdiff_t>(m) * s.row_stride;
        for (std::size_t g = 0; g < groups_per_row; ++g) {
            // Eigen's array exp is vectorised (std::exp in a loop is not).
            Eigen::Map<Eigen::Array<T, Eigen::Dynamic, 1>> x(row + g * group, static_cast<Eigen::Index>(group));
            if (group == 0) continue;
            x = (x - x.maxCoeff()).exp();
            x /= x.sum();
        }
    }
}

// dS = Y * (dY - sum(dY * Y)) over the softmax axis, into `ds` (dense).
template <class T>
void softmax_backward(score_view<const T> y, score_view<const T> dy, score_view<T> ds)
{
    const std::size_t group = y.labels == 1 ? y.n : y.labels;
    const std::size_t groups_per_row = y.labels == 1 ? 1 : y.n;
    for (std::size_t m = 0; m < y.n; ++m) {
        const T* yr = y.data + static_cast<std::ptrdiff_t>(m) * y.row_stride;
        const T* dyr = dy.data + static_cast<std::ptrdiff_t>(m) * dy.row_stride;
        T* dsr = ds.data + static_cast<std::ptrdiff_t>(m) * ds.row_stride;
        for (std::size_t g = 0; g < groups_per_row; ++g) {
            using array = Eigen::Array<T, Eigen::Dynamic, 1>;
            const auto len = static_cast<Eigen::Index>(group);
            const Eigen::Map<const array> yg(yr + g * group, len), dyg(dyr + g * group, len);
            Eigen::Map<array>(dsr + g * group, len) = yg * (dyg - (yg * dyg).sum());
        }
    }
}

}  // namespace detail

/// The biaffine scorer: parameters, their gradients, and forward / backward
/// over split lists and padded batches. Float or double.
///
/// Thread safety: `predict*`, `cost` and `padded_cost` are const and may run
/// concurrently with each other (and with a backprop callback, which writes
/// only gradients). `forward*` (dropout generator) and the backprop callbacks
/// (gradient accumulation) must not run concurrently with each other on one
/// scorer. Changing parameters (`set_parameter`, `load_npy`, `initialize`,
/// an optimiser step, `zero_grad`) must not overlap any other call.
///
/// Non-finite inputs: NaN / Inf in one split's rows reach that split's scores
/// only (eval: a NaN token's row and column; train: the softmax spreads it
/// over the split), never another split's, whichever batch they share: every
/// product runs row-wise on the packed rows or per split. In backward they
/// reach that split's input gradient and, as any input does, the parameter
/// gradients (sums over all splits).
template <class T>
class biaffine_scorer {
public:
    static_assert(std::is_floating_point<T>::value, "biaffine_scorer<T>: T must be float or double");
    using value_type = T;
    /// Callback of forward(): per-split dY in, per-split dX written.
    using backprop_type = split_backprop<T>;
    /// Callback of forward_padded(): dy `[b, L, L(, o)]` in, dx `[b, L, n_in]` out.
    using padded_backprop_type = backprop_fn<tensor<T, 3>(const score_array<T>&)>;

    /// Allocates and initialises the parameters from `cfg.seed`: Xavier-uniform
    /// for the bilinear weight, the usual Linear init (U(+-1/sqrt(n_in))) for
    /// the projections. Gradients start at zero.
    explicit biaffine_scorer(const scorer_config& cfg) : cfg_(cfg), rng_(cfg.seed ^ 0x9e3779b97f4a7c15ULL)
    {
        if (cfg.n_in == 0 || cfg.hidden == 0 || cfg.labels == 0) {
            throw shape_error(detail::msg("biaffine_scorer: n_in, hidden and labels must be positive, got n_in=",
                                          cfg.n_in, " hidden=", cfg.hidden, " labels=", cfg.labels));
        }
        if (!(cfg.dropout >= 0.0 && cfg.dropout < 1.0)) {
            throw error(detail::msg("biaffine_scorer: dropout must be in [0, 1), got ", cfg.dropout));
        }
        const std::size_t h = cfg.hidden;
        wh_ = tensor<T, 2>::from_shape({h, cfg.n_in});
        wd_ = tensor<T, 2>::from_shape({h, cfg.n_in});
        bh_ = tensor<T, 1>::from_shape({h});
        bd_ = tensor<T, 1>::from_shape({h});
        w_ = tensor<T, 3>::from_shape({cfg.labels, hu(), hv()});
        dwh_ = xt::zeros_like(wh_);
        dwd_ = xt::zeros_like(wd_);
        dbh_ = xt::zeros_like(bh_);
        dbd_ = xt::zeros_like(bd_);
        dw_ = xt::zeros_like(w_);
        initialize(cfg.seed);
    }

    /// The configuration it was built with.
    const scorer_config& config() const noexcept { return cfg_; }
    /// Width of the token representations.
    std::size_t n_in() const noexcept { return cfg_.n_in; }
    /// h, width of the head and dependent projections.
    std::size_t hidden() const noexcept { return cfg_.hidden; }
    /// o, the number of labels.
    std::size_t labels() const noexcept { return cfg_.labels; }
    /// h + bias_u: the head side of the bilinear weight `[o, hu, hv]`.
    std::size_t hu() const noexcept { return cfg_.hidden + (cfg_.bias_u ? 1 : 0); }
    /// h + bias_v: the dependent side of the bilinear weight `[o, hu, hv]`.
    std::size_t hv() const noexcept { return cfg_.hidden + (cfg_.bias_v ? 1 : 0); }

    /// Re-draws every parameter from `seed` (see the constructor).
    void initialize(std::uint64_t seed)
    {
        std::mt19937_64 rng(seed);
        auto fill = [&](auto& a, double bound) {
            for (auto& x : a) x = static_cast<T>((2.0 * detail::uniform01(rng) - 1.0) * bound);
        };
        const double lin = 1.0 / std::sqrt(static_cast<double>(cfg_.n_in));
        fill(wh_, lin);
        fill(bh_, lin);
        fill(wd_, lin);
        fill(bd_, lin);
        // Xavier-uniform with PyTorch's fans for a 3-d tensor [o, hu, hv].
        const double fan_in = static_cast<double>(hu() * hv());
        const double fan_out = static_cast<double>(cfg_.labels * hv());
        fill(w_, std::sqrt(6.0 / (fan_in + fan_out)));
    }

    const tensor<T, 2>& head_weight() const noexcept { return wh_; }        ///< Wh `[h, n_in]`
    const tensor<T, 1>& head_bias() const noexcept { return bh_; }          ///< bh `[h]`
    const tensor<T, 2>& dependent_weight() const noexcept { return wd_; }   ///< Wd `[h, n_in]`
    const tensor<T, 1>& dependent_bias() const noexcept { return bd_; }     ///< bd `[h]`
    const tensor<T, 3>& bilinear_weight() const noexcept { return w_; }     ///< W `[o, hu, hv]`
    const tensor<T, 2>& d_head_weight() const noexcept { return dwh_; }     ///< dL/dWh `[h, n_in]`
    const tensor<T, 1>& d_head_bias() const noexcept { return dbh_; }       ///< dL/dbh `[h]`
    const tensor<T, 2>& d_dependent_weight() const noexcept { return dwd_; } ///< dL/dWd `[h, n_in]`
    const tensor<T, 1>& d_dependent_bias() const noexcept { return dbd_; }  ///< dL/dbd `[h]`
    const tensor<T, 3>& d_bilinear_weight() const noexcept { return dw_; }  ///< dL/dW `[o, hu, hv]`

    /// A parameter with its gradient, for optimisers and serialisation.
    struct parameter {
        const char* name;                ///< also the .npy file name
        T* data;                         ///< values, row-major
        T* grad;                         ///< accumulated gradient, same layout
        std::size_t size;                ///< element count
        std::vector<std::size_t> shape;  ///< e.g. `[h, n_in]`
    };

    /// All five parameters, in the order head_weight, head_bias,
    /// dependent_weight, dependent_bias, bilinear_weight.
    std::vector<parameter> parameters()
    {
        auto p = [](const char* name, auto& a, auto& g) {
            return parameter{name, a.data(), g.data(), a.size(), std::vector<std::size_t>(a.shape().begin(), a.shape().end())};
        };
        return {p("head_weight", wh_, dwh_), p("head_bias", bh_, dbh_), p("dependent_weight", wd_, dwd_),
                p("dependent_bias", bd_, dbd_), p("bilinear_weight", w_, dw_)};
    }

    /// Overwrites the parameter `name` (one of the names of parameters()) with
    /// `value`, which must have the parameter's exact shape. Any xtensor
    /// expression of any floating type.
    template <class E>
    void set_parameter(const std::string& name, const E& value)
    {
        for (parameter& p : parameters()) {
            if (name != p.name) continue;
            std::vector<std::size_t> got(value.shape().begin(), value.shape().end());
            if (got != p.shape) {
                throw shape_error(detail::msg("set_parameter(", name, "): expected shape ", shape_str(p.shape),
                                              ", got ", shape_str(got)));
            }
            std::size_t i = 0;
            for (auto it = value.begin(); it != value.end(); ++it) p.data[i++] = static_cast<T>(*it);
            return;
        }
        throw error(detail::msg("set_parameter: no parameter named '", name, "'"));
    }

    /// Sets every gradient buffer to zero.
    void zero_grad()
    {
        for (parameter& p : parameters()) std::fill(p.grad, p.grad + p.size, T(0));
    }

    /// Writes `<dir>/<name>.npy` for every parameter (float64 files when T is
    /// double, float32 otherwise). The directory must exist.
    void save_npy(const std::string& dir)
    {
        for (parameter& p : parameters()) {
            xt::dump_npy(dir + "/" + p.name + ".npy", xt::adapt(p.data, p.size, xt::no_ownership(), p.shape));
        }
    }

    /// Reads `<dir>/<name>.npy` for every parameter (as written by save_npy or
    /// the golden generator; float32 or float64 files), checking shapes.
    void load_npy(const std::string& dir)
    {
        for (parameter& p : parameters()) {
            const std::string path = dir + "/" + p.name + ".npy";
            set_parameter(p.name, load_npy_any(path));
        }
    }

    // ---------------------------------------------------------------- costs

    /// Bytes a batch of `count` splits of at most `max_len` tokens needs in
    /// this scorer, by lifetime (checked 64-bit arithmetic). Exact for the
    /// scratch this scorer carves; `outputs` counts the score data.
    batch_cost cost(std::size_t count, std::size_t max_len, mode m = mode::eval) const
    {
        using detail::checked_mul;
        using detail::scratch_bytes;
        const std::uint64_t rows = checked_mul(count, max_len, "batch cost");
        const std::uint64_t o = cfg_.labels;
        batch_cost c;
        c.outputs = detail::checked_product("batch cost", checked_mul(max_len, max_len, "batch cost"), o, count,
                                            sizeof(T));
        const std::uint64_t xp = scratch_bytes<T>(checked_mul(rows, cfg_.n_in, "batch cost"));
        const std::uint64_t u = scratch_bytes<T>(checked_mul(rows, hu(), "batch cost"));
        const std::uint64_t v = scratch_bytes<T>(checked_mul(rows, hv(), "batch cost"));
        const std::uint64_t t = scratch_bytes<T>(detail::checked_product("batch cost", rows, o, hv()));
        const std::uint64_t offsets = scratch_bytes<std::size_t>(detail::checked_add(count, 1, "batch cost"));
        if (m == mode::eval) {
            // predict_stream also carves one split's scores (max_len^2 * o);
            // the kernel path a packed copy of one weight block.
            const std::uint64_t one = scratch_bytes<T>(detail::checked_product("batch cost", max_len, max_len, o));
            const std::uint64_t packed = scratch_bytes<T>(packed_elements(max_len));
            c.scratch = detail::checked_add(
                detail::checked_add(detail::checked_add(offsets, xp, "batch cost"),
                                    detail::checked_add(one, packed, "batch cost"), "batch cost"),
                detail::checked_add(detail::checked_add(u, v, "batch cost"), t, "batch cost"), "batch cost");
            return c;
        }
        // Train: the split views and offsets stay for backward, and unless
        // recomputing, U, V, T and the softmax outputs too. Backward carves
        // dT, dV, dU, one split's dS, X and the kernel's packed block (and
        // when recomputing U, V, T and one split's scores again). The forward
        // carves X and a packed block no larger, plus U, V, T when
        // recomputing: never more than backward.
        const std::uint64_t one = scratch_bytes<T>(detail::checked_product("batch cost", max_len, max_len, o));
        const std::uint64_t views =
            checked_mul(count, sizeof(seq_view<const T>) + sizeof(std::size_t), "batch cost");
        const std::uint64_t uvt = detail::checked_add(detail::checked_add(u, v, "batch cost"), t, "batch cost");
        // The kernel path's packed block (train_packed_elements) is the
        // largest the forward carves too, so backward bounds both.
        const std::uint64_t packed = scratch_bytes<T>(train_packed_elements(max_len));
        const std::uint64_t backward = detail::checked_add(
            detail::checked_add(detail::checked_add(uvt, one, "batch cost"),
                                detail::checked_add(xp, offsets, "batch cost"), "batch cost"),
            packed, "batch cost");
        if (cfg_.recompute_in_backward) {
            c.saved = views;
            c.scratch = detail::checked_add(backward, detail::checked_add(uvt, one, "batch cost"), "batch cost");
        } else {
            c.saved = detail::checked_add(detail::checked_add(uvt, c.outputs, "batch cost"), views, "batch cost");
            c.scratch = backward;
        }
        return c;
    }

    /// Like cost(), for the padded interface: the padded scores are the
    /// outputs, the per-sequence views are heap bookkeeping, and training
    /// keeps the lengths and builds per-sequence gradient views in backward.
    batch_cost padded_cost(std::size_t count, std::size_t max_len, mode m = mode::eval) const
    {
        batch_cost c = cost(count, max_len, m);
        const std::uint64_t views = detail::checked_mul(count, sizeof(seq_view<const T>), "batch cost");
        c.heap = detail::checked_add(c.heap, views, "batch cost");
        if (m == mode::train) {
            const std::uint64_t grads = detail::checked_mul(
                count, sizeof(score_view<const T>) + sizeof(seq_view<T>), "batch cost");
            c.saved = detail::checked_add(c.saved, detail::checked_mul(count, sizeof(std::size_t), "batch cost"),
                                          "batch cost");
            c.heap = detail::checked_add(c.heap, grads, "batch cost");
        }
        return c;
    }

    // ----------------------------------------------------- split-list API

    /// Scores of every split, inference: `X[k]` is a `[n_k, n_in]` view, the
    /// result one `[n_k, n_k(, o)]` tensor per split. Keeps nothing once it returns.
    template <class Items>
    score_list<T> predict(const Items& X) const
    {
        score_list<T> Y;
        Y.reserve(X.size());
        for (std::size_t k = 0; k < X.size(); ++k) {
            Y.push_back(new_scores(X[k].rows));
        }
        predict_into(X, [&](std::size_t k, std::size_t) { return dense_view(Y[k]); },
                     [](std::size_t, score_view<T>) {});
        return Y;
    }

    /// Streaming inference: `sink(k, score_view<const T>)` receives split k's
    /// `[n, n(, o)]` scores; the view lives only during the call, its memory is
    /// reused for the next split. One split's scores exist at a time.
    template <class Items, class Sink>
    void predict_stream(const Items& X, Sink&& sink) const
    {
        std::size_t max_n = 0;
        for (std::size_t k = 0; k < X.size(); ++k) max_n = std::max(max_n, X[k].rows);
        scratch<T> s(detail::to_index_size(detail::checked_product("stream", max_n, max_n, cfg_.labels), "stream"));
        predict_into(X,
                     [&](std::size_t, std::size_t n) {
                         return score_view<T>{s.data(), n, cfg_.labels, static_cast<std::ptrdiff_t>(n * cfg_.labels)};
                     },
                     [&](std::size_t k, score_view<T> y) {
                         sink(k, score_view<const T>{y.data, y.n, y.labels, y.row_stride});
                     });
    }

    /// Training (or eval-mode) forward over a split list: the scores and a
    /// callback that, given per-split score gradients, writes per-split input
    /// gradients and accumulates every parameter gradient. The splits' data
    /// must stay alive until the callback has run (views are kept, not copies).
    template <class Items>
    std::pair<score_list<T>, backprop_type> forward(const Items& X, mode m = mode::train)
    {
        score_list<T> Y;
        Y.reserve(X.size());
        for (std::size_t k = 0; k < X.size(); ++k) {
            Y.push_back(new_scores(X[k].rows));
        }
        backprop_type bp = forward_into(X, m, [&](std::size_t k, std::size_t) { return dense_view(Y[k]); });
        return {std::move(Y), std::move(bp)};
    }

    // ------------------------------------------------------- padded API

    /// Reference interface, inference: `x [b, L, n_in]` (any xtensor array),
    /// `lengths [b]` -> `[b, L, L]` (o == 1) or `[b, L, L, o]`.
    template <class X3, class Lengths>
    score_array<T> predict_padded(const X3& x, const Lengths& lengths) const
    {
        const auto views = padded_views(x, lengths);
        const std::size_t b = x.shape()[0], L = x.shape()[1];
        score_array<T> y = score_array<T>::from_shape(padded_shape(b, L));
        predict_into(views, [&](std::size_t k, std::size_t n) { return padded_view(y, k, n, L); },
                     [](std::size_t, score_view<T>) {});
        fill_padding(y, views, mode::eval);
        return y;
    }

    /// Reference interface, forward: `(y, backprop)`; `backprop(dy)` takes
    /// `dy` of y's shape (only the cells inside each sequence are read) and
    /// returns `dx [b, L, n_in]` (zero at padded positions).
    template <class X3, class Lengths>
    std::pair<score_array<T>, padded_backprop_type> forward_padded(const X3& x, const Lengths& lengths,
                                                                   mode m = mode::train)
    {
        auto views = padded_views(x, lengths);
        const std::size_t b = x.shape()[0], L = x.shape()[1];
        score_array<T> y = score_array<T>::from_shape(padded_shape(b, L));
        backprop_type inner =
            forward_into(views, m, [&](std::size_t k, std::size_t n) { return padded_view(y, k, n, L); });
        fill_padding(y, views, m);
        const std::size_t o = cfg_.labels, n_in = cfg_.n_in;
        tracked_vector<std::size_t> lens(b);
        for (std::size_t k = 0; k < b; ++k) lens[k] = views[k].rows;
        auto shape = y.shape();
        padded_backprop_type bp([inner = std::move(inner), lens = std::move(lens), shape, L, o,
                                 n_in](const score_array<T>& dy) mutable {
            if (!std::equal(dy.shape().begin(), dy.shape().end(), shape.begin(), shape.end())) {
                throw shape_error(detail::msg("forward_padded backprop: dy must have the output's shape ",
                                              shape_str(std::vector<std::size_t>(shape.begin(), shape.end())),
                                              ", got ",
                                              shape_str(std::vector<std::size_t>(dy.shape().begin(), dy.shape().end()))));
            }
            const std::size_t b = lens.size();
            detail::to_index_size(detail::checked_product("padded input gradient", b, L, n_in, sizeof(T)),
                                  "padded input gradient");
            tensor<T, 3> dx = xt::zeros<T>({b, L, n_in});
            tracked_vector<score_view<const T>> dys(b);
            tracked_vector<seq_view<T>> dxs(b);
            for (std::size_t k = 0; k < b; ++k) {
                dys[k] = {dy.data() + k * L * L * o, lens[k], o, static_cast<std::ptrdiff_t>(L * o)};
                dxs[k] = {dx.data() + k * L * n_in, lens[k], n_in, static_cast<std::ptrdiff_t>(n_in), 1};
            }
            inner(span<const score_view<const T>>(dys.data(), b), span<const seq_view<T>>(dxs.data(), b));
            return dx;
        });
        return {std::move(y), std::move(bp)};
    }

    /// Shape of one split's scores: `[n, n]` or `[n, n, o]`.
    typename score_tensor<T>::shape_type score_shape(std::size_t n) const
    {
        if (cfg_.labels == 1) return {n, n};
        return {n, n, cfg_.labels};
    }

private:
    static std::string shape_str(const std::vector<std::size_t>& s)
    {
        std::string r = "[";
        for (std::size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
        return r + "]";
    }

    static xt::xarray<double> load_npy_any(const std::string& path)
    {
        std::ifstream probe(path, std::ios::binary);
        if (!probe) throw error(detail::msg("load_npy: cannot open ", path));
        char header[128] = {};
        probe.read(header, sizeof(header));
        const std::string h(header, static_cast<std::size_t>(probe.gcount()));
        if (h.find("'<f4'") != std::string::npos) return xt::cast<double>(xt::load_npy<float>(path));
        if (h.find("'<f8'") != std::string::npos) return xt::load_npy<double>(path);
        throw error(detail::msg("load_npy: ", path, " is not a float32 or float64 .npy file"));
    }

    // One split's `[n, n(, o)]` output; its size is checked before xtensor
    // multiplies the shape out unchecked.
    score_tensor<T> new_scores(std::size_t n) const
    {
        detail::to_index_size(detail::checked_product("split scores", n, n, cfg_.labels, sizeof(T)), "split scores");
        return score_tensor<T>(score_shape(n));
    }

    // Elements of a packed `[rows, cols...]` buffer, checked.
    template <class... Ts>
    static std::size_t elements(const char* what, std::uint64_t rows, Ts... cols)
    {
        return detail::to_index_size(detail::checked_product(what, rows, cols..., sizeof(T)), what) / sizeof(T);
    }

    template <class S>
    static score_view<T> dense_view(S& s)
    {
        const std::size_t n = s.shape()[0];
        const std::size_t o = s.dimension() == 3 ? s.shape()[2] : 1;
        return {s.data(), n, o, static_cast<std::ptrdiff_t>(n * o)};
    }

    typename score_array<T>::shape_type padded_shape(std::size_t b, std::size_t L) const
    {
        detail::checked_product("padded scores", b, L, L, cfg_.labels, sizeof(T));
        if (cfg_.labels == 1) return {b, L, L};
        return {b, L, L, cfg_.labels};
    }

    score_view<T> padded_view(score_array<T>& y, std::size_t k, std::size_t n, std::size_t L) const
    {
        return {y.data() + k * L * L * cfg_.labels, n, cfg_.labels, static_cast<std::ptrdiff_t>(L * cfg_.labels)};
    }

    template <class X3, class Lengths>
    tracked_vector<seq_view<const T>> padded_views(const X3& x, const Lengths& lengths) const
    {
        if (x.dimension() != 3) {
            throw shape_error(detail::msg("padded input: expected x [b, L, n_in], got ", x.dimension(), " dimensions"));
        }
        const std::size_t b = x.shape()[0], L = x.shape()[1];
        if (x.shape()[2] != cfg_.n_in) {
            throw shape_error(detail::msg("padded input: x is [", b, ", ", L, ", ", x.shape()[2],
                                          "] but the scorer expects n_in = ", cfg_.n_in));
        }
        if (static_cast<std::size_t>(lengths.size()) != b) {
            throw shape_error(detail::msg("padded input: ", lengths.size(), " lengths for a batch of ", b));
        }
        tracked_vector<seq_view<const T>> views(b);
        const auto st = x.strides();
        for (std::size_t k = 0; k < b; ++k) {
            const auto len = lengths[k];
            if (len < 0 || static_cast<std::size_t>(len) > L) {
                throw length_error(detail::msg("padded input: sequence ", k, " has length ", len,
                                               ", expected 0..", L));
            }
            views[k] = {x.data() + x.data_offset() + static_cast<std::ptrdiff_t>(k) * st[0],
                        static_cast<std::size_t>(len), cfg_.n_in,
                        L > 1 ? static_cast<std::ptrdiff_t>(st[1]) : static_cast<std::ptrdiff_t>(cfg_.n_in),
                        cfg_.n_in > 1 ? static_cast<std::ptrdiff_t>(st[2]) : 1};
        }
        return views;
    }

    // Padded cells: the mask value in eval (what a masked logit is), 0 in
    // train (what the softmax gives a masked head).
    template <class Views>
    void fill_padding(score_array<T>& y, const Views& views, mode m) const
    {
        const std::size_t b = y.shape()[0], L = y.shape()[1], o = cfg_.labels;
        const T pad = m == mode::train ? T(0) : mask_value<T>();
        for (std::size_t k = 0; k < b; ++k) {
            const std::size_t n = views[k].rows;
            T* base = y.data() + k * L * L * o;
            for (std::size_t r = 0; r < L; ++r) {
                T* row = base + r * L * o;
                const std::size_t first = r < n ? n * o : 0;
                std::fill(row + first, row + L * o, pad);
            }
        }
    }

    template <class Items>
    void check_items(const Items& X) const
    {
        for (std::size_t k = 0; k < X.size(); ++k) {
            if (X[k].cols != cfg_.n_in) {
                throw shape_error(detail::msg("scorer: split ", k, " has width ", X[k].cols,
                                              ", the weights expect n_in = ", cfg_.n_in));
            }
        }
    }

    // Row offsets of the splits in the packed batch; returns the total.
    template <class Items>
    std::size_t fill_offsets(const Items& X, std::size_t* off) const
    {
        std::uint64_t total = 0;
        for (std::size_t k = 0; k < X.size(); ++k) {
            off[k] = static_cast<std::size_t>(total);
            total = detail::checked_add(total, X[k].rows, "packed rows");
        }
        off[X.size()] = static_cast<std::size_t>(total);
        return detail::to_index_size(total, "packed rows");
    }

    template <class Items>
    void gather(const Items& X, const std::size_t* off, T* xp) const
    {
        for (std::size_t k = 0; k < X.size(); ++k) {
            const auto v = detail::read_only(X[k]);
            if (v.rows == 0) continue;
            detail::row_block(xp + off[k] * cfg_.n_in, v.rows, cfg_.n_in) = v.map();
        }
    }

    // out [N, h + bias] = relu(xp Wh^T + b), with the trailing column of ones.
    void project(const T* xp, std::size_t N, const tensor<T, 2>& w, const tensor<T, 1>& b, bool bias, T* out) const
    {
        if (N == 0) return;
        const std::size_t h = cfg_.hidden, width = h + (bias ? 1 : 0);
        auto o = detail::row_block(out, N, width);
        Eigen::Map<const row_matrix<T>> wm(w.data(), static_cast<Eigen::Index>(h), static_cast<Eigen::Index>(cfg_.n_in));
        Eigen::Map<const Eigen::Matrix<T, 1, Eigen::Dynamic>> bv(b.data(), static_cast<Eigen::Index>(h));
        auto left = o.leftCols(static_cast<Eigen::Index>(h));
        left.noalias() = detail::const_row_block(xp, N, cfg_.n_in) * wm.transpose();
        left = (left.rowwise() + bv).cwiseMax(T(0));
        if (bias) o.col(static_cast<Eigen::Index>(h)).setOnes();
    }

    // Elements of the packed block the GEMM kernel path of predict carves
    // for splits of up to max_len tokens: Wh^T or Wd^T, the last hv % 16
    // columns of one label's block of W, or one split's Va^T, one at a time;
    // 0 where that path is not built.
    std::size_t packed_elements(std::size_t max_len) const noexcept
    {
        if (!detail::gemm_supported<T>()) return 0;
        return std::max({detail::gemm_packed_size(cfg_.n_in, cfg_.hidden),
                         detail::gemm_packed_size(hu(), hv() % detail::gemm_panel),
                         detail::bilinear_right_packed_size<T>(hv(), max_len)});
    }

    // Elements of the packed block the kernel path of training carves: the
    // forward's (packed_elements); for dU = dT W^T one label's W^T; for
    // dW += Ua^T dT a chunk of Ua^T and the tail of dT's panels; for
    // dWh^T += X^T dZ the tail of dZ's; for dX = dZ Wh Wh or Wd packed. 0
    // where that path is not built.
    std::size_t train_packed_elements(std::size_t max_len) const noexcept
    {
        if (!detail::gemm_supported<T>()) return 0;
        using detail::gemm_packed_size;
        const std::size_t h = cfg_.hidden, panel = detail::gemm_panel;
        return std::max({packed_elements(max_len), gemm_packed_size(hv(), hu()),
                         hu() * dw_chunk + gemm_packed_size(dw_chunk, hv() % panel),
                         gemm_packed_size(dw_chunk, h % panel), gemm_packed_size(h, cfg_.n_in)});
    }
    // Rows of X^T dZ summed per kernel call: keeps a [96, dw_chunk] block of
    // X^T in L2 and the dZ panel in L1.
    static constexpr std::size_t dw_chunk = 256;

    // The projections through the GEMM kernel: X is read in place, Wh^T and
    // Wd^T packed in turn into `packed`, and bias + relu applied before the
    // one store.
    void projections_kernel(const T* xp, std::size_t N, T* u, T* v, T* packed) const
    {
        if (N == 0) return;
        const std::size_t n_in = cfg_.n_in, h = cfg_.hidden;
        const auto n_in_s = static_cast<std::ptrdiff_t>(n_in);
        for (int which = 0; which < 2; ++which) {
            const tensor<T, 2>& w = which == 0 ? wh_ : wd_;
            const tensor<T, 1>& b = which == 0 ? bh_ : bd_;
            const bool bias = which == 0 ? cfg_.bias_u : cfg_.bias_v;
            T* out = which == 0 ? u : v;
            const std::size_t width = h + (bias ? 1 : 0);
            detail::gemm_pack_b(w.data(), 1, n_in_s, n_in, h, packed);  // Wh^T: (k, m) = W[m, k]
            detail::gemm_bias_relu(xp, n_in_s, N, n_in, packed, h, b.data(), true, out,
                                   static_cast<std::ptrdiff_t>(width));
            if (bias) {
                for (std::size_t r = 0; r < N; ++r) out[r * width + h] = T(1);
            }
        }
    }

    // T = U W' through the GEMM kernel: each label's [hu, hv] block of W is
    // read in place (its last hv % 16 columns packed).
    void bilinear_left_kernel(const T* u, std::size_t N, T* t, T* packed) const
    {
        if (N == 0) return;  // t may be null then: no offsets into it
        const std::size_t hu_ = hu(), hv_ = hv(), o = cfg_.labels;
        for (std::size_t k = 0; k < o; ++k) {  // label k's [hu, hv] block of W, read in place
            detail::gemm_rowmajor_b(u, static_cast<std::ptrdiff_t>(hu_), N, hu_, w_.data() + k * hu_ * hv_,
                                    static_cast<std::ptrdiff_t>(hv_), hv_, packed, t + k * hv_,
                                    static_cast<std::ptrdiff_t>(o * hv_));
        }
    }

    // One mask per split and feature, shared over the split's tokens; kept
    // units scaled by 1 / (1 - p). Drawn from a per-batch seed so backward can
    // redraw the same masks when it recomputes the forward.
    void dropout(std::uint64_t seed, T* u, T* v, const std::size_t* off, std::size_t count) const
    {
        std::mt19937_64 gen(seed);
        const double p = cfg_.dropout;
        const T scale = static_cast<T>(1.0 / (1.0 - p));
        tracked_vector<T> mask(cfg_.hidden);
        for (T* a : {u, v}) {
            const std::size_t width = a == u ? hu() : hv();
            for (std::size_t k = 0; k < count; ++k) {
                for (auto& m : mask) m = detail::uniform01(gen) < p ? T(0) : scale;
                for (std::size_t r = off[k]; r < off[k + 1]; ++r) {
                    for (std::size_t j = 0; j < cfg_.hidden; ++j) a[r * width + j] *= mask[j];
                }
            }
        }
    }

    // U, V (after relu and dropout) and T for the packed rows of X; `packed`
    // holds packed_elements(max_len) (the kernel path's scratch).
    template <class Items>
    void forward_activations(const Items& X, const std::size_t* off, std::size_t N, bool drop, std::uint64_t seed,
                             T* u, T* v, T* t, T* packed) const
    {
        {
            scratch<T> xp(detail::to_index_size(detail::checked_mul(N, cfg_.n_in, "packed input"), "packed input"));
            gather(X, off, xp.data());
            if constexpr (detail::gemm_supported<T>()) {
                projections_kernel(xp.data(), N, u, v, packed);
            } else {
                project(xp.data(), N, wh_, bh_, cfg_.bias_u, u);
                project(xp.data(), N, wd_, bd_, cfg_.bias_v, v);
            }
        }
        if (drop) dropout(seed, u, v, off, X.size());
        if (N == 0) return;
        if constexpr (detail::gemm_supported<T>()) {
            bilinear_left_kernel(u, N, t, packed);
        } else {
            (void)packed;
            detail::bilinear_left<T>(detail::const_row_block(u, N, hu()), w_.data(), cfg_.labels, hv(),
                                     detail::row_block(t, N, cfg_.labels * hv()));
        }
    }

    template <class Items, class Dest, class Done>
    void predict_into(const Items& X, Dest&& dest, Done&& done) const
    {
        check_items(X);
        const std::size_t count = X.size(), o = cfg_.labels;
        scratch<std::size_t> off(count + 1);
        const std::size_t N = fill_offsets(X, off.data());
        const std::size_t n_xp = detail::to_index_size(detail::checked_mul(N, cfg_.n_in, "packed input"), "packed input");
        scratch<T> xp(n_xp);
        scratch<T> u(elements("packed U", N, hu()));
        scratch<T> v(elements("packed V", N, hv()));
        scratch<T> t(detail::to_index_size(detail::checked_product("packed T", N, o, hv()), "packed T"));
        std::size_t max_n = 0;
        for (std::size_t k = 0; k < count; ++k) max_n = std::max(max_n, off[k + 1] - off[k]);
        scratch<T> packed(packed_elements(max_n));
        gather(X, off.data(), xp.data());
        if constexpr (detail::gemm_supported<T>()) {
            projections_kernel(xp.data(), N, u.data(), v.data(), packed.data());
            bilinear_left_kernel(u.data(), N, t.data(), packed.data());
        } else {
            project(xp.data(), N, wh_, bh_, cfg_.bias_u, u.data());
            project(xp.data(), N, wd_, bd_, cfg_.bias_v, v.data());
            if (N != 0) {
                detail::bilinear_left<T>(detail::const_row_block(u.data(), N, hu()), w_.data(), o, hv(),
                                         detail::row_block(t.data(), N, o * hv()));
            }
        }
        for (std::size_t k = 0; k < count; ++k) {
            const std::size_t n = off[k + 1] - off[k];
            score_view<T> s = dest(k, n);
            detail::bilinear_right_kernel<T>(detail::const_row_block(v.data() + off[k] * hv(), n, hv()),
                                             t.data() + off[k] * o * hv(), o, s, packed.data());
            done(k, s);
        }
    }

    // Everything backward needs of one forward call.
    struct saved_batch {
        tracked_vector<std::size_t> off;           // packed row offsets, count + 1
        tracked_vector<seq_view<const T>> views;   // the splits (not copied)
        tensor<T, 2> u, v, t;                      // activations (empty when recomputing)
        tracked_vector<std::size_t> y_off;         // softmax outputs by split (train, stored)
        tensor<T, 1> ys;
        bool kept = true;  // false: recompute_in_backward
        bool train = false;
        bool drop = false;
        std::uint64_t seed = 0;
    };

    template <class Items, class Dest>
    backprop_type forward_into(const Items& X, mode m, Dest&& dest)
    {
        check_items(X);
        const std::size_t count = X.size(), o = cfg_.labels;
        saved_batch sb;
        sb.off.resize(count + 1);
        const std::size_t N = fill_offsets(X, sb.off.data());
        sb.views.resize(count);
        for (std::size_t k = 0; k < count; ++k) sb.views[k] = detail::read_only(X[k]);
        sb.train = m == mode::train;
        sb.drop = sb.train && cfg_.dropout > 0.0;
        sb.seed = sb.drop ? rng_() : 0;
        const bool keep = !cfg_.recompute_in_backward;
        sb.kept = keep;
        const std::size_t n_t = detail::to_index_size(detail::checked_product("packed T", N, o, hv()), "packed T");
        // Kept activations are tensors that move into the callback; recomputed
        // ones are workspace scratch that dies with this call.
        const std::size_t n_u = elements("packed U", N, hu()), n_v = elements("packed V", N, hv());
        scratch<T> u_tmp(keep ? 0 : n_u), v_tmp(keep ? 0 : n_v), t_tmp(keep ? 0 : n_t);
        if (keep) {
            sb.u = tensor<T, 2>::from_shape({N, hu()});
            sb.v = tensor<T, 2>::from_shape({N, hv()});
            sb.t = tensor<T, 2>::from_shape({N, o * hv()});
        }
        T* u = keep ? sb.u.data() : u_tmp.data();
        T* v = keep ? sb.v.data() : v_tmp.data();
        T* t = keep ? sb.t.data() : t_tmp.data();
        std::size_t max_n = 0;
        for (std::size_t k = 0; k < count; ++k) max_n = std::max(max_n, sb.off[k + 1] - sb.off[k]);
        scratch<T> packed(packed_elements(max_n));
        forward_activations(X, sb.off.data(), N, sb.drop, sb.seed, u, v, t, packed.data());
        const bool keep_y = sb.train && keep;
        if (keep_y) {
            sb.y_off.resize(count + 1);
            std::uint64_t total = 0;
            for (std::size_t k = 0; k < count; ++k) {
                sb.y_off[k] = static_cast<std::size_t>(total);
                const std::size_t n = sb.off[k + 1] - sb.off[k];
                total = detail::checked_add(total, detail::checked_product("saved scores", n, n, o), "saved scores");
            }
            sb.y_off[count] = static_cast<std::size_t>(total);
            sb.ys = tensor<T, 1>::from_shape({detail::to_index_size(total, "saved scores")});
        }
        for (std::size_t k = 0; k < count; ++k) {
            const std::size_t n = sb.off[k + 1] - sb.off[k];
            score_view<T> s = dest(k, n);
            detail::bilinear_right_kernel<T>(detail::const_row_block(v + sb.off[k] * hv(), n, hv()), t + sb.off[k] * o * hv(), o,
                                             s, packed.data());
            if (sb.train) detail::softmax_last_axis(s);
            if (keep_y) detail::row_block(sb.ys.data() + sb.y_off[k], n, n * o) = s.map();
        }
        return backprop_type([this, sb = std::move(sb)](span<const score_view<const T>> dY,
                                                        span<const seq_view<T>> dX) { backward(sb, dY, dX); });
    }

    void backward(const saved_batch& sb, span<const score_view<const T>> dY, span<const seq_view<T>> dX)
    {
        const std::size_t count = sb.views.size(), o = cfg_.labels, h = cfg_.hidden, n_in = cfg_.n_in;
        if (dY.size() != count || dX.size() != count) {
            throw shape_error(detail::msg("scorer backprop: expected ", count, " split gradients, got ", dY.size(),
                                          " score gradients and ", dX.size(), " input gradient slots"));
        }
        std::size_t max_n = 0;
        for (std::size_t k = 0; k < count; ++k) {
            const std::size_t n = sb.views[k].rows;
            max_n = std::max(max_n, n);
            if (dY[k].n != n || dY[k].labels != o) {
                throw shape_error(detail::msg("scorer backprop: split ", k, ": expected a gradient of [", n, ", ", n,
                                              ", ", o, "], got [", dY[k].n, ", ", dY[k].n, ", ", dY[k].labels, "]"));
            }
            if (dX[k].rows != n || dX[k].cols != n_in) {
                throw shape_error(detail::msg("scorer backprop: split ", k, ": input gradient slot is [", dX[k].rows,
                                              ", ", dX[k].cols, "], expected [", n, ", ", n_in, "]"));
            }
        }
        const std::size_t N = sb.off[count];
        const std::size_t* off = sb.off.data();
        const bool keep = sb.kept;
        // Recomputed activations (recompute_in_backward) live in scratch.
        const std::size_t n_u = elements("packed U", N, hu()), n_v = elements("packed V", N, hv());
        const std::size_t n_t = elements("packed T", N, o, hv()), n_s = elements("split scores", max_n, max_n, o);
        scratch<T> u_tmp(keep ? 0 : n_u), v_tmp(keep ? 0 : n_v), t_tmp(keep ? 0 : n_t);
        scratch<T> y_tmp(keep || !sb.train ? 0 : n_s);
        scratch<T> packed(train_packed_elements(max_n));
        const T* u = keep ? sb.u.data() : u_tmp.data();
        const T* v = keep ? sb.v.data() : v_tmp.data();
        const T* t = keep ? sb.t.data() : t_tmp.data();
        if (!keep) {
            forward_activations(sb.views, off, N, sb.drop, sb.seed, u_tmp.data(), v_tmp.data(), t_tmp.data(),
                                packed.data());
        }
        scratch<T> dt(n_t);
        scratch<T> dv(n_v);
        scratch<T> du(n_u);
        scratch<T> ds(sb.train ? n_s : 0);
        scratch<T> xp(elements("packed input", N, n_in));
        for (std::size_t k = 0; k < count; ++k) {
            const std::size_t n = sb.views[k].rows;
            score_view<const T> g = dY[k];
            if (sb.train) {
                score_view<const T> y{sb.ys.data() + (keep ? sb.y_off[k] : 0), n, o, static_cast<std::ptrdiff_t>(n * o)};
                if (!keep) {
                    score_view<T> yt{y_tmp.data(), n, o, static_cast<std::ptrdiff_t>(n * o)};
                    detail::bilinear_right_kernel<T>(detail::const_row_block(v + off[k] * hv(), n, hv()), t + off[k] * o * hv(),
                                                     o, yt, packed.data());
                    detail::softmax_last_axis(yt);
                    y = {yt.data, n, o, yt.row_stride};
                }
                score_view<T> d{ds.data(), n, o, static_cast<std::ptrdiff_t>(n * o)};
                detail::softmax_backward<T>(y, g, d);
                g = {d.data, n, o, d.row_stride};
            }
            detail::bilinear_right_backward<T>(detail::const_row_block(v + off[k] * hv(), n, hv()), t + off[k] * o * hv(), o, g,
                                               detail::row_block(dv.data() + off[k] * hv(), n, hv()),
                                               dt.data() + off[k] * o * hv());
        }
        if (N == 0) return;
        if constexpr (detail::gemm_supported<T>()) {
            bilinear_left_backward_kernel(u, N, dt.data(), du.data(), packed.data());
        } else {
            detail::bilinear_left_backward<T>(detail::const_row_block(u, N, hu()), w_.data(), o, hv(),
                                              detail::const_row_block(dt.data(), N, o * hv()), detail::row_block(du.data(), N, hu()),
                                              dw_.data());
        }
        // Through relu and dropout: a unit passed gradient iff it came out
        // positive, scaled like the kept units.
        const T scale = sb.drop ? static_cast<T>(1.0 / (1.0 - cfg_.dropout)) : T(1);
        relu_backward(u, hu(), N, scale, du.data(), dbh_.data());
        relu_backward(v, hv(), N, scale, dv.data(), dbd_.data());
        if constexpr (detail::gemm_supported<T>()) {
            input_backward_kernel(sb.views, off, N, du.data(), dv.data(), xp.data(), packed.data());
        } else {
            gather(sb.views, off, xp.data());
            auto x = detail::const_row_block(xp.data(), N, n_in);
            const auto dzu = detail::const_row_block(du.data(), N, hu()).leftCols(static_cast<Eigen::Index>(h));
            const auto dzv = detail::const_row_block(dv.data(), N, hv()).leftCols(static_cast<Eigen::Index>(h));
            Eigen::Map<row_matrix<T>> dwh(dwh_.data(), static_cast<Eigen::Index>(h), static_cast<Eigen::Index>(n_in));
            Eigen::Map<row_matrix<T>> dwd(dwd_.data(), static_cast<Eigen::Index>(h), static_cast<Eigen::Index>(n_in));
            dwh.noalias() += dzu.transpose() * x;
            dwd.noalias() += dzv.transpose() * x;
            // dX = dZu Wh + dZv Wd, into the packed buffer X no longer needs.
            Eigen::Map<const row_matrix<T>> wh(wh_.data(), static_cast<Eigen::Index>(h),
                                               static_cast<Eigen::Index>(n_in));
            Eigen::Map<const row_matrix<T>> wd(wd_.data(), static_cast<Eigen::Index>(h),
                                               static_cast<Eigen::Index>(n_in));
            auto dxp = detail::row_block(xp.data(), N, n_in);
            dxp.noalias() = dzu * wh;
            dxp.noalias() += dzv * wd;
        }
        const auto dxp = detail::const_row_block(xp.data(), N, n_in);
        for (std::size_t k = 0; k < count; ++k) {
            const std::size_t n = sb.views[k].rows;
            if (n == 0) continue;
            dX[k].map() = dxp.middleRows(static_cast<Eigen::Index>(off[k]), static_cast<Eigen::Index>(n));
        }
    }

    // dZ = dA where the unit came out positive (scaled like the kept units
    // under dropout), else 0, in place over the first h of each row of
    // `d` ([N, width], like `a`); db += the column sums of dZ.
    void relu_backward(const T* a, std::size_t width, std::size_t N, T scale, T* d, T* db) const
    {
        for (std::size_t r = 0; r < N; ++r) {
            detail::relu_backward_row(a + r * width, cfg_.hidden, scale, d + r * width, db);
        }
    }

    // bilinear_left_backward through the GEMM kernel: dU = sum_k dT_k W_k^T
    // with each label's W_k^T packed, then dW_k += Ua^T dT_k over chunks of
    // dw_chunk rows, each chunk of Ua transposed into `packed` and dT read
    // in place.
    void bilinear_left_backward_kernel(const T* u, std::size_t N, const T* dt, T* du, T* packed)
    {
        const std::size_t hu_ = hu(), hv_ = hv(), o = cfg_.labels;
        const auto ldt = static_cast<std::ptrdiff_t>(o * hv_);
        const auto hu_s = static_cast<std::ptrdiff_t>(hu_), hv_s = static_cast<std::ptrdiff_t>(hv_);
        detail::gemm_epilogue add;
        add.accumulate = true;
        for (std::size_t k = 0; k < o; ++k) {
            detail::gemm_pack_b(w_.data() + k * hu_ * hv_, 1, hv_s, hv_, hu_, packed);  // (j, i) = W_k[i, j]
            detail::gemm_packed(dt + k * hv_, ldt, N, hv_, packed, hu_, k == 0 ? detail::gemm_epilogue{} : add, du,
                                hu_s);
        }
        T* tail = packed + hu_ * dw_chunk;
        for (std::size_t k0 = 0; k0 < N; k0 += dw_chunk) {
            const std::size_t kc = std::min(dw_chunk, N - k0);
            detail::row_block(packed, hu_, kc) = detail::const_row_block(u + k0 * hu_, kc, hu_).transpose();
            for (std::size_t k = 0; k < o; ++k) {
                detail::gemm_rowmajor_b(packed, static_cast<std::ptrdiff_t>(kc), hu_, kc, dt + k0 * o * hv_ + k * hv_,
                                        ldt, hv_, tail, dw_.data() + k * hu_ * hv_, hv_s, add);
            }
        }
    }

    // The projections' backward through the GEMM kernel, for dZu, dZv (past
    // relu and dropout, rows hu and hv apart): dWh^T += X^T dZu and dWd^T +=
    // X^T dZv in chunks of dw_chunk rows (X gathered transposed into `xp`,
    // [n_in, N], so both sides are read in place), then dX = dZu Wh + dZv Wd
    // into `xp` ([N, n_in]) with Wh, Wd packed in turn.
    template <class Items>
    void input_backward_kernel(const Items& X, const std::size_t* off, std::size_t N, const T* du, const T* dv, T* xp,
                               T* packed)
    {
        const std::size_t h = cfg_.hidden, n_in = cfg_.n_in;
        auto xt = detail::row_block(xp, n_in, N);
        for (std::size_t k = 0; k < X.size(); ++k) {
            const auto v = detail::read_only(X[k]);
            if (v.rows == 0) continue;
            xt.middleCols(static_cast<Eigen::Index>(off[k]), static_cast<Eigen::Index>(v.rows)) = v.map().transpose();
        }
        detail::gemm_epilogue sum_t;  // into dW [h, n_in], stored as its transpose
        sum_t.accumulate = true;
        sum_t.trans = true;
        const auto N_s = static_cast<std::ptrdiff_t>(N), n_in_s = static_cast<std::ptrdiff_t>(n_in);
        for (int which = 0; which < 2; ++which) {
            const T* dz = which == 0 ? du : dv;
            const std::size_t width = which == 0 ? hu() : hv();
            T* dw = which == 0 ? dwh_.data() : dwd_.data();
            for (std::size_t k0 = 0; k0 < N; k0 += dw_chunk) {
                const std::size_t kc = std::min(dw_chunk, N - k0);
                detail::gemm_rowmajor_b(xp + k0, N_s, n_in, kc, dz + k0 * width, static_cast<std::ptrdiff_t>(width), h,
                                        packed, dw, n_in_s, sum_t);
            }
        }
        detail::gemm_epilogue add;
        add.accumulate = true;
        for (int which = 0; which < 2; ++which) {
            const T* dz = which == 0 ? du : dv;
            const std::size_t width = which == 0 ? hu() : hv();
            detail::gemm_pack_b((which == 0 ? wh_ : wd_).data(), n_in_s, 1, h, n_in, packed);  // W [h, n_in]
            detail::gemm_packed(dz, static_cast<std::ptrdiff_t>(width), N, h, packed, n_in,
                                which == 0 ? detail::gemm_epilogue{} : add, xp, n_in_s);
        }
    }

    scorer_config cfg_;
    std::mt19937_64 rng_;
    tensor<T, 2> wh_, wd_;
    tensor<T, 1> bh_, bd_;
    tensor<T, 3> w_;
    tensor<T, 2> dwh_, dwd_;
    tensor<T, 1> dbh_, dbd_;
    tensor<T, 3> dw_;
};

}  // namespace biaffine
