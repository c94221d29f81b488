// biaffine/detail/scorer/declaration.hpp - the biaffine_scorer class: its
// members, the public ones documented here; their definitions are the other
// files of detail/scorer/ (scorer.hpp lists them and includes them all). A
// part includes this file, never scorer.hpp, so no header includes its includer.
#pragma once

#include "biaffine/abi.hpp"

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "biaffine/backprop.hpp"
#include "biaffine/bfloat16.hpp"
#include "biaffine/detail/checked.hpp"
#include "biaffine/detail/compute/backend.hpp"
#include "biaffine/detail/compute/operands.hpp"
#include "biaffine/detail/random.hpp"
#include "biaffine/detail/split_checks.hpp"
#include "biaffine/errors.hpp"
#include "biaffine/fwd.hpp"
#include "biaffine/layer.hpp"
#include "biaffine/scorer_config.hpp"
#include "biaffine/tensor.hpp"
#include "biaffine/workspace.hpp"

BIAFFINE_NAMESPACE_BEGIN

namespace detail {

// The scorer's parameter version: atomic, since parameters_changed() may
// run while predict* calls read it; a copy starts at the copied value.
struct version_counter {
    std::atomic<std::uint64_t> v{0};
    version_counter() = default;
    version_counter(const version_counter& o) noexcept : v(o.load()) {}
    version_counter& operator=(const version_counter& o) noexcept
    {
        v.store(o.load(), std::memory_order_release);
        return *this;
    }
    std::uint64_t load() const noexcept { return v.load(std::memory_order_acquire); }
    void bump() noexcept { v.fetch_add(1, std::memory_order_acq_rel); }
};

}  // namespace detail

/// The biaffine scorer: parameters, their gradients, and forward / backward
/// over split lists and padded batches. Float or double.
///
/// Thread safety (docs/api.md, "Threads and parameter updates"): `predict*`,
/// `cost` and `padded_cost` are const and may run concurrently with each
/// other (and with a backprop callback, which writes only gradients), from
/// any number of threads, and give the bytes one call gives.
/// `parameters_changed()` may run concurrently with predict* calls: it only
/// marks the parameters changed (a call in flight keeps the weights it
/// started with, the next call sees the change). `forward*` (dropout
/// generator) and the backprop callbacks (gradient accumulation) must not
/// run concurrently with each other on one scorer. Changing parameters
/// (`set_parameter`, `load_npy`, `initialize`, an optimiser step, a write
/// through `data` pointers, `zero_grad`) must not overlap any other call;
/// after a write through pointers kept from an earlier parameters(), call
/// parameters_changed() before the next call. Nor may the call that
/// allocates the gradients (see has_gradients()): on a scorer that has none
/// yet, call the d_*() accessors from one thread at a time. The first call
/// after a parameter change prepares the compute backend (see
/// parameter_version()); concurrent const calls may race to do it, and the
/// backend lets one of them (detail::weights_cache). Each call reads an
/// immutable entry of the prepared weights (bf16: their packed copy),
/// replaced (never rewritten while a call reads it) when the version moves.
///
/// Non-finite inputs: NaN / Inf in one split's rows reach that split's scores
/// only (eval: a NaN token's row and column; train: the softmax spreads it
/// over the split), never another split's, whichever batch they share: every
/// product runs row-wise on the packed rows or per split. In backward they
/// reach that split's input gradient and, as any input does, the parameter
/// gradients (sums over all splits).
///
/// `Backend` is the batch-level compute backend (detail/compute/interface.hpp);
/// the default is the one detail/compute/backend.hpp chooses for T.
///
/// `Out` is the output type: the scores (and labels at heads) handed out or
/// streamed, and the gradients their backprops take. T (the default) runs
/// the backend's outputs in place; another floating type has each split's
/// output computed in T into one split of scratch and converted as it is
/// stored (and a backprop's gradients converted to T as it starts), the
/// costs counting outputs at sizeof(Out) and that scratch. `bfloat16`
/// (bfloat16.hpp) as Out, with T = float, hands out half the bytes of float:
/// each score rounded to nearest even, gradients read back exactly.
template <class T, class Backend, class Out>
class biaffine_scorer {
public:
    static_assert(std::is_floating_point<T>::value, "biaffine_scorer<T>: T must be float or double");
    static_assert(std::is_floating_point<Out>::value || (std::is_same<Out, bfloat16>::value && std::is_same<T, float>::value),
                  "biaffine_scorer<T, Backend, Out>: Out must be float or double, or bfloat16 with T = float");
    using value_type = T;
    /// The scalar of the outputs (and of their gradients).
    using output_type = Out;
    /// Callback of forward(): per-split dY in, per-split dX written.
    using backprop_type = split_backprop<T, Out>;
    /// Callback of forward_heads(): per-split `[n, o]` dY in, per-split dX written.
    using heads_backprop_type = split_heads_backprop<T, Out>;
    /// Callback of forward_padded(): dy `[b, L, L(, o)]` in, dx `[b, L, n_in]` out.
    using padded_backprop_type = backprop_fn<tensor<T, 3>(const score_array<Out>&)>;
    /// Both split backprops write every dX slot whole (detail::writes_every_slot).
    static constexpr bool writes_every_slot = true;

    /// Allocates and initialises the parameters from `cfg.seed`: Xavier-uniform
    /// for the bilinear weight, the usual Linear init (U(+-1/sqrt(n_in))) for
    /// the projections. Gradient buffers are not allocated yet: see
    /// has_gradients().
    explicit biaffine_scorer(const scorer_config& cfg);

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
    /// Shape of one split's scores: `[n, n]` or `[n, n, o]`.
    typename score_tensor<Out>::shape_type score_shape(std::size_t n) const
    {
        if (cfg_.labels == 1) return {n, n};
        return {n, n, cfg_.labels};
    }

    // ------------------------------------------------------------ parameters

    /// Re-draws every parameter from `seed` (see the constructor).
    void initialize(std::uint64_t seed);

    /// A counter of parameter changes: initialize, set_parameter, load_npy,
    /// every non-const parameters() (through which an optimiser writes) and
    /// parameters_changed() move it on. The compute backend prepares the
    /// weights again (packs, copies to a device) when it differs from the
    /// version it last prepared, at the next forward, predict or backward.
    std::uint64_t parameter_version() const noexcept { return version_.load(); }
    /// Tells the scorer its parameters changed behind its back: call it after
    /// writing through `data` pointers kept from an earlier parameters(), and
    /// before the next call. Safe concurrently with predict* (a call in
    /// flight keeps the weights it started with).
    void parameters_changed() noexcept { version_.bump(); }
    /// bf16 inference (compute_precision::bf16): compare the weights with
    /// the ones its bf16 copy was made from at every predict* call, and make
    /// the copy again when they differ - for callers that write through kept
    /// pointers without calling parameters_changed() (the Python module:
    /// optimisers write through numpy views). Costs a pass over the weights
    /// per call (memcmp) and an fp32 copy of them held with the bf16 one.
    /// May be called concurrently with predict*; nothing for fp32.
    void watch_parameter_writes(bool on = true) const noexcept { backend_.watch(on); }
    /// The compute backend (its `name`, `operations`, prepared_version()).
    const Backend& compute_backend() const noexcept { return backend_; }
    /// What runs compute_precision::bf16 in this build on this CPU: its name
    /// ("amx_bf16", "avx512_bf16" or "emulated") and how, e.g. "emulated (fp32
    /// kernels on bf16-rounded operands)"; "none (...)" for a double scorer.
    static const char* bf16_arithmetic() noexcept;

    const tensor<T, 2>& head_weight() const noexcept { return wh_; }        ///< Wh `[h, n_in]`
    const tensor<T, 1>& head_bias() const noexcept { return bh_; }          ///< bh `[h]`
    const tensor<T, 2>& dependent_weight() const noexcept { return wd_; }   ///< Wd `[h, n_in]`
    const tensor<T, 1>& dependent_bias() const noexcept { return bd_; }     ///< bd `[h]`
    const tensor<T, 3>& bilinear_weight() const noexcept { return w_; }     ///< W `[o, hu, hv]`
    // The d_*() accessors allocate the gradients (zeroed) if none exist yet.
    const tensor<T, 2>& d_head_weight() const { return ensure_gradients().dwh_; }      ///< dL/dWh `[h, n_in]`
    const tensor<T, 1>& d_head_bias() const { return ensure_gradients().dbh_; }        ///< dL/dbh `[h]`
    const tensor<T, 2>& d_dependent_weight() const { return ensure_gradients().dwd_; } ///< dL/dWd `[h, n_in]`
    const tensor<T, 1>& d_dependent_bias() const { return ensure_gradients().dbd_; }   ///< dL/dbd `[h]`
    const tensor<T, 3>& d_bilinear_weight() const { return ensure_gradients().dw_; }   ///< dL/dW `[o, hu, hv]`

    /// Whether the gradient buffers exist. An inference-only scorer never
    /// allocates them (they are as large as the parameters): they are
    /// allocated, zeroed, by the first forward / forward_padded (any mode:
    /// its callback accumulates into them), non-const parameters(),
    /// zero_grad() or d_*() accessor. predict*, cost, set_parameter,
    /// initialize, the const parameters() (grad == nullptr until then),
    /// save_npy and load_npy leave them unallocated.
    bool has_gradients() const noexcept { return has_grads_; }

    /// A parameter with its gradient, for optimisers and serialisation
    /// (`P` = T, or const T from the const overload of parameters()).
    template <class P>
    struct basic_parameter {
        const char* name;                ///< also the .npy file name
        P* data;                         ///< values, row-major
        P* grad;                         ///< accumulated gradient, same layout
        std::size_t size;                ///< element count
        std::vector<std::size_t> shape;  ///< e.g. `[h, n_in]`
    };
    using parameter = basic_parameter<T>;
    using const_parameter = basic_parameter<const T>;

    /// All five parameters, in the order head_weight, head_bias,
    /// dependent_weight, dependent_bias, bilinear_weight. Allocates the
    /// gradients (zeroed) if none exist yet, so `grad` is always valid.
    std::vector<parameter> parameters()
    {
        ensure_gradients();
        parameters_changed();  // the caller may write through `data`
        return all_parameters<T>(*this);
    }
    /// The same, read-only; allocates nothing: `grad` is nullptr while
    /// has_gradients() is false.
    std::vector<const_parameter> parameters() const { return all_parameters<const T>(*this); }

    /// Overwrites the parameter `name` (one of the names of parameters()) with
    /// `value`, which must have the parameter's exact shape. Any xtensor
    /// expression of any floating type.
    template <class E>
    void set_parameter(const std::string& name, const E& value);

    /// Sets every gradient buffer to zero.
    void zero_grad()
    {
        ensure_gradients();  // not parameters(): the values do not change
        for (parameter& p : all_parameters<T>(*this)) std::fill(p.grad, p.grad + p.size, T(0));
    }

    /// Deprecated: `biaffine::save_npy(scorer, dir)` (scorer_io.hpp).
    [[deprecated("use biaffine::save_npy(scorer, dir) from <biaffine/scorer_io.hpp>")]] void save_npy(
        const std::string& dir) const;
    /// Deprecated: `biaffine::load_npy(scorer, dir)` (scorer_io.hpp).
    [[deprecated("use biaffine::load_npy(scorer, dir) from <biaffine/scorer_io.hpp>")]] void load_npy(
        const std::string& dir);

    // ----------------------------------------------------------------- costs

    /// Bytes a batch of `count` splits of at most `max_len` tokens needs in
    /// this scorer, by lifetime (checked 64-bit arithmetic). Exact for the
    /// scratch this scorer carves; `outputs` counts the score data.
    batch_cost cost(std::size_t count, std::size_t max_len, mode m = mode::eval) const;

    /// Like cost(), for the padded interface: the padded scores are the
    /// outputs, the per-sequence views are heap bookkeeping, and training
    /// keeps the lengths and builds per-sequence gradient views in backward.
    batch_cost padded_cost(std::size_t count, std::size_t max_len, mode m = mode::eval) const;

    // -------------------------------------------------------- split-list API

    /// Scores of every split, inference: `X[k]` is a `[n_k, n_in]` view, the
    /// result one `[n_k, n_k(, o)]` tensor per split. Keeps nothing once it returns.
    template <class Items>
    score_list<Out> predict(const Items& X) const;

    /// Streaming inference: `sink(k, score_view<const Out>)` receives split k's
    /// `[n, n(, o)]` scores; the view lives only during the call, its memory is
    /// reused for the next split. One split's scores exist at a time.
    template <class Items, class Sink>
    void predict_stream(const Items& X, Sink&& sink) const;

    /// Streaming into the caller's memory: `dest(k, n)` returns where split
    /// k's `[n, n(, o)]` scores go (an `Out*` to n*n*o elements, written
    /// dense in C order), called just before they are written; then
    /// `sink(k, score_view<const Out>)` views them there. No block of the
    /// scorer's own holds them (predict_stream is this with one split of
    /// scratch); what dest hands out is the caller's, outside the workspace
    /// and the budget. A null destination for a non-empty split throws error.
    template <class Items, class Dest, class Sink>
    void predict_stream_into(const Items& X, Dest&& dest, Sink&& sink) const;

    /// Training (or eval-mode) forward over a split list: the scores and a
    /// callback that, given per-split score gradients, writes per-split input
    /// gradients and accumulates every parameter gradient. The splits' data
    /// must outlive the callback (views are kept, not copies).
    template <class Items>
    std::pair<score_list<Out>, backprop_type> forward(const Items& X, mode m = mode::train);

    // ------------------------------------------- labels at given heads API
    //
    // Per split, one head per token (split-relative, `0..n-1`, the root
    // pointing at itself as mst_heads returns it): `L[m, o] = S[m, head[m], o]`
    // with S the scores above (projections, biases, dropout with the same
    // masks as forward() draws), `[n, o]` per split; in training with
    // `train_output::probabilities` the softmax over the labels (o == 1:
    // over a single label, so 1; the full path's o == 1 softmax runs over
    // heads instead). FLOPs O(n o h^2) per split and never an `[n, n, o]`
    // block. `H[k]` is split k's heads (any range of integers with size()
    // and operator[]); a missing list, a wrong length or an index outside
    // `0..n-1` throws head_error.

    /// Shape of one split's labels at given heads: `[n, o]`.
    std::vector<std::size_t> heads_shape(std::size_t n) const { return {n, cfg_.labels}; }

    /// Bytes a batch of `count` splits of at most `max_len` tokens needs for
    /// labels at given heads, by lifetime (as cost()).
    batch_cost heads_cost(std::size_t count, std::size_t max_len, mode m = mode::eval) const;

    /// Like heads_cost(), for the padded interface (as padded_cost()).
    batch_cost padded_heads_cost(std::size_t count, std::size_t max_len, mode m = mode::eval) const;

    /// Labels at given heads, inference: one `[n_k, o]` tensor per split.
    template <class Items, class Heads>
    score_list<Out> predict_heads(const Items& X, const Heads& H) const;

    /// Streaming: `sink(k, seq_view<const Out>)` receives split k's `[n, o]`;
    /// the view lives only during the call.
    template <class Items, class Heads, class Sink>
    void predict_heads_stream(const Items& X, const Heads& H, Sink&& sink) const;

    /// Streaming into the caller's memory, as predict_stream_into: `dest(k,
    /// n)` returns an `Out*` to n*o elements for split k's `[n, o]`, then
    /// `sink(k, seq_view<const Out>)` views them there.
    template <class Items, class Heads, class Dest, class Sink>
    void predict_heads_stream_into(const Items& X, const Heads& H, Dest&& dest, Sink&& sink) const;

    /// Training (or eval-mode) forward of labels at given heads: `[n_k, o]`
    /// per split and a callback taking per-split `[n, o]` gradients (views),
    /// writing per-split input gradients, accumulating every parameter
    /// gradient. The splits' data must outlive the callback; the heads are
    /// copied.
    template <class Items, class Heads>
    std::pair<score_list<Out>, heads_backprop_type> forward_heads(const Items& X, const Heads& H,
                                                                mode m = mode::train);

    /// Padded labels at given heads, inference: `x [b, L, n_in]`, `lengths
    /// [b]`, `heads [b, L]` (integers; entries past a length are ignored) ->
    /// `[b, L, o]` (padded rows hold 0).
    template <class X3, class Lengths, class Heads2>
    score_array<Out> predict_heads_padded(const X3& x, const Lengths& lengths, const Heads2& heads) const;

    /// Padded forward of labels at given heads: `([b, L, o], backprop)`,
    /// `backprop(dy [b, L, o])` -> `dx [b, L, n_in]` (zero at padded positions).
    template <class X3, class Lengths, class Heads2>
    std::pair<score_array<Out>, padded_backprop_type> forward_heads_padded(const X3& x, const Lengths& lengths,
                                                                         const Heads2& heads, mode m = mode::train);

    // ------------------------------------------------------------ padded API

    /// Reference interface, inference: `x [b, L, n_in]` (any xtensor array),
    /// `lengths [b]` -> `[b, L, L]` (o == 1) or `[b, L, L, o]`.
    template <class X3, class Lengths>
    score_array<Out> predict_padded(const X3& x, const Lengths& lengths) const;

    /// Reference interface, forward: `(y, backprop)`; `backprop(dy)` takes
    /// `dy` of y's shape (only the cells inside each sequence are read) and
    /// returns `dx [b, L, n_in]` (zero at padded positions).
    template <class X3, class Lengths>
    std::pair<score_array<Out>, padded_backprop_type> forward_padded(const X3& x, const Lengths& lengths,
                                                                   mode m = mode::train);

    // ---- any output kind (detail/output_kind.hpp) with its arguments `a` (heads, or detail::no_heads{})

    /// Callback of forward_as<Kind>(): per-split gradients of Kind's view.
    template <class Kind>
    using kind_backprop =
        backprop_fn<void(span<const typename Kind::template view<const Out>>, span<const seq_view<T>>)>;
    template <class Kind>
    batch_cost cost_as(std::size_t count, std::size_t max_len, mode m = mode::eval) const  ///< cost() of Kind
    {
        return kind_cost<Kind>(count, max_len, m);
    }
    /// predict(), predict_stream(), predict_stream_into() and forward() of Kind.
    template <class Kind, class Items, class Args>
    score_list<Out> predict_as(const Items& X, const Args& a) const;
    template <class Kind, class Items, class Args, class Sink>
    void predict_stream_as(const Items& X, const Args& a, Sink&& sink) const;
    template <class Kind, class Items, class Args, class Dest, class Sink>
    void predict_stream_into_as(const Items& X, const Args& a, Dest&& dest, Sink&& sink) const;
    template <class Kind, class Items, class Args>
    std::pair<score_list<Out>, kind_backprop<Kind>> forward_as(const Items& X, const Args& a, mode m = mode::train);
    /// padded_cost(), predict_padded() and forward_padded() of Kind.
    template <class Kind>
    batch_cost padded_cost_as(std::size_t count, std::size_t max_len, mode m = mode::eval) const;
    template <class Kind, class X3, class Lengths, class Args>
    score_array<Out> predict_padded_as(const X3& x, const Lengths& lengths, const Args& a) const;
    template <class Kind, class X3, class Lengths, class Args>
    std::pair<score_array<Out>, padded_backprop_type> forward_padded_as(const X3& x, const Lengths& lengths,
                                                                      const Args& a, mode m = mode::train);

private:
    template <class P, class Self>
    static std::vector<basic_parameter<P>> all_parameters(Self& s)
    {
        auto p = [&s](const char* name, auto& a, auto& g) {
            return basic_parameter<P>{name, a.data(), s.has_grads_ ? g.data() : nullptr, a.size(),
                                      std::vector<std::size_t>(a.shape().begin(), a.shape().end())};
        };
        return {p("head_weight", s.wh_, s.dwh_), p("head_bias", s.bh_, s.dbh_), p("dependent_weight", s.wd_, s.dwd_),
                p("dependent_bias", s.bd_, s.dbd_), p("bilinear_weight", s.w_, s.dw_)};
    }

    detail::scorer_dims dims() const noexcept
    {
        return {cfg_.n_in, cfg_.hidden, cfg_.labels, cfg_.bias_u, cfg_.bias_v,
                std::is_same<T, float>::value && cfg_.precision == compute_precision::bf16};
    }
    detail::weights_ref<T> weights() const noexcept
    {
        return {wh_.data(), bh_.data(), wd_.data(), bd_.data(), w_.data()};
    }
    detail::grads_ref<T> grads() noexcept { return {dwh_.data(), dbh_.data(), dwd_.data(), dbd_.data(), dw_.data()}; }

    // Allocates the zeroed gradient buffers on first need (see has_gradients()).
    // Logically const: the d_*() accessors hand out zeros either way.
    const biaffine_scorer& ensure_gradients() const
    {
        if (!has_grads_) {
            dwh_ = xt::zeros_like(wh_);
            dwd_ = xt::zeros_like(wd_);
            dbh_ = xt::zeros_like(bh_);
            dbd_ = xt::zeros_like(bd_);
            dw_ = xt::zeros_like(w_);
            has_grads_ = true;
        }
        return *this;
    }

    // Everything backward needs of one forward call.
    struct saved_batch {
        tracked_vector<std::size_t> off;          // packed row offsets, count + 1
        tracked_vector<seq_view<const T>> views;  // the splits (not copied)
        // U, V, T and the kept softmax outputs, the backend's (held from
        // the forward; empty when recomputing): handles the scorer passes on.
        typename Backend::held_batch held;
        tracked_vector<std::size_t> head_rows;    // labels at given heads: packed row of each head
        tracked_vector<std::size_t> y_off;        // softmax outputs by split (train, stored)
        bool kept = true;  // false: recompute_in_backward
        bool train = false;
        bool softmax = false;  // train, returning probabilities
        bool drop = false;
        std::uint64_t seed = 0;
    };

    // The gradients handed to a backward: one per split, each checked by
    // `check_grad(who, k, dY[k], n, o)`, and the input-gradient slots.
    template <class G, class Check>
    void check_backward_args(const saved_batch& sb, span<const G> dY, span<const seq_view<T>> dX, const char* what,
                             Check&& check_grad) const
    {
        const std::size_t count = sb.views.size();
        if (dY.size() != count || dX.size() != count) {
            throw shape_error(detail::msg("scorer backprop: expected ", count, " split gradients, got ", dY.size(),
                                          " ", what, " gradients and ", dX.size(), " input gradient slots"));
        }
        for (std::size_t k = 0; k < count; ++k) {
            const std::size_t n = sb.views[k].rows;
            check_grad("scorer backprop", k, dY[k], n, cfg_.labels);
            detail::check_grad_slot("scorer backprop", k, dX[k], n, cfg_.n_in);
        }
    }

    // detail/scorer/forward.hpp
    template <class Items>
    void check_items(const Items& X) const;
    template <class Items>
    std::size_t fill_offsets(const Items& X, std::size_t* off) const;
    const Backend& prepared_backend() const;
    template <class Items>
    void forward_activations(const Items& X, const std::size_t* off, std::size_t N, bool drop, std::uint64_t seed,
                             const typename Backend::acts& a, T* packed) const;
    // One path per output kind (detail/output_kind.hpp), H its arguments
    // (the heads; no_heads{} for full scores).
    template <class Kind>
    std::size_t kept_output_offset(const saved_batch& sb, std::size_t k) const noexcept;
    template <class Kind, class Items, class Heads, class Dest, class Done>
    void predict_into(const Items& X, const Heads& H, Dest&& dest, Done&& done) const;
    template <class Kind, class Items, class Heads, class Dest, class Sink>
    void stream_into(const Items& X, const Heads& H, Dest&& dest, Sink&& sink) const;
    template <class Kind, class Items, class Heads, class Dest, class Done>
    void predict_compute(const Items& X, const Heads& H, Dest&& dest, Done&& done) const;
    template <class Kind, class Items, class Heads, class Dest>
    kind_backprop<Kind> forward_into(const Items& X, const Heads& H, mode m, Dest&& dest);
    template <class Kind>
    void backward(const saved_batch& sb, span<const typename Kind::template view<const Out>> dY,
                  span<const seq_view<T>> dX);
    static constexpr bool converts = !std::is_same<T, Out>::value;
    template <class Items>
    void begin_saved(const Items& X, mode m, saved_batch& sb);

    bool softmax_in(mode m) const noexcept
    {
        return m == mode::train && cfg_.train_outputs == train_output::probabilities;
    }

    // detail/scorer/cost.hpp
    template <class Kind>
    batch_cost kind_cost(std::size_t count, std::size_t max_len, mode m) const;
    std::size_t packed_elements(std::size_t max_len) const noexcept;
    std::size_t train_packed_elements(std::size_t max_len, std::size_t rows) const noexcept;

    // detail/scorer/padded.hpp
    template <class X3, class Lengths>
    tracked_vector<seq_view<const T>> padded_views(const X3& x, const Lengths& lengths) const;
    template <class O>
    O padding(mode m) const;  // a padded cell's value

    scorer_config cfg_;
    std::mt19937_64 rng_;
    tensor<T, 2> wh_, wd_;
    tensor<T, 1> bh_, bd_;
    tensor<T, 3> w_;
    // Gradients: allocated on first need (ensure_gradients), never by inference.
    mutable tensor<T, 2> dwh_, dwd_;
    mutable tensor<T, 1> dbh_, dbd_;
    mutable tensor<T, 3> dw_;
    mutable bool has_grads_ = false;
    detail::version_counter version_;  // initialize() makes it 1: the backend's cache starts at 0, unprepared
    // The compute backend: its state (the prepared weights) changes under
    // const calls, as the gradients' allocation does.
    // compute_precision::bf16 included: its packed weights are the
    // backend's (allocated with it, so with the scorer).
    mutable Backend backend_;
};

BIAFFINE_NAMESPACE_END
