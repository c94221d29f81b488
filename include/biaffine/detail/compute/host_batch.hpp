// biaffine/detail/compute/host_batch.hpp - the batch-level layer every CPU
// backend gets: host_batch<Ops, T> wraps a type of static per-split
// operations (eigen_backend, avx2_backend, blas_backend: the host ops of
// interface.hpp) into the backend object the scorer holds.
//
// It owns what used to sit in the scorer between backend calls: the gather
// of a batch's splits and the projections, dropout on the activations, the
// per-split loop of each output kind (full scores through bilinear_scores /
// split_scores, labels at heads through head_scores) with its softmax and
// the copy of outputs kept for backward, and the same loop backward; each
// kind's product is the kind's (detail/output_kind.hpp), on Ops. A
// device backend implements these batch-level operations itself (one
// grouped call where this layer loops; tests/cuda/backend_skeleton.cu).
//
// The batch-wide products (projections, U W' and their backward) and their
// precision are the Products policy's: fp32_products<Ops, T> (below) runs
// them on Ops; bf16_products (bf16_products.hpp) in bf16 with the weights
// packed per parameter version. The per-split products, softmax and dropout
// run on Ops in T whatever the policy. backend.hpp chooses the policy.
//
// State: the weights the backend has prepared and what Products made of
// them (bf16: the packed weights), tagged with the scorer's parameter
// version (weights_cache.hpp: one immutable entry per version, safe under
// concurrent predict calls). The scorer calls prepare(version, w) whenever
// its version differs from prepared_version(); a device backend would copy
// or pack here.
#pragma once

#include "biaffine/abi.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <random>
#include <utility>

#include "biaffine/config.hpp"
#include "biaffine/detail/checked.hpp"
#include "biaffine/detail/compute/eigen_backend.hpp"
#include "biaffine/detail/compute/host_activations.hpp"
#include "biaffine/detail/compute/interface.hpp"
#include "biaffine/detail/compute/operands.hpp"
#include "biaffine/detail/compute/weights_cache.hpp"
#include "biaffine/detail/eigen.hpp"
#include "biaffine/detail/output_kind.hpp"
#include "biaffine/detail/random.hpp"
#include "biaffine/detail/split_checks.hpp"
#include "biaffine/mode.hpp"
#include "biaffine/tensor.hpp"
#include "biaffine/workspace.hpp"

BIAFFINE_NAMESPACE_BEGIN
namespace detail {

// Asks for `count` elements from `p` on to be brought into cache: a later
// split's rows of V while this one is scored (the projections wrote them
// long before). 1M tokens, o = 1, 2 threads: 1.008 / 1.045 / 1.000 s
// against 1.038 / 1.044 / 1.032 (alternated, Zen 4 EPYC, AVX-512).
template <class T>
inline void prefetch_rows(const T* p, std::size_t count) noexcept
{
#if defined(__GNUC__) || defined(__clang__)
    const char* b = reinterpret_cast<const char*>(p);
    for (std::size_t i = 0; i < count * sizeof(T); i += 64) __builtin_prefetch(b + i, 0, 2);
#else
    (void)p;
    (void)count;
#endif
}

// The per-split loops' prefetch: at split k, fetch(j) for the split
// BIAFFINE_PREFETCH_SPLITS_AHEAD on (and, at k = 0, for the ones before it).
template <class Fetch>
inline void prefetch_ahead(std::size_t k, std::size_t count, Fetch&& fetch)
{
    constexpr std::size_t ahead = BIAFFINE_PREFETCH_SPLITS_AHEAD;
    if (ahead == 0) return;
    if (k == 0) {
        for (std::size_t j = 1; j < ahead && j < count; ++j) fetch(j);
    }
    if (k + ahead < count) fetch(k + ahead);
}

/// The batch-wide products on Ops in T (host_batch's default Products; see
/// bf16_products for the contract's other policy): what host_batch's
/// operations call for projections, U W' (with the full scores' groups)
/// and their backward. `w`: the prepared pointers; `p`: what prepare()
/// packed of them (nothing here).
template <class Ops, class T>
struct fp32_products {
    static constexpr bool runs_bf16 = false;
    /// Nothing: Ops read the weights in place.
    struct packed_weights {
        static constexpr bool copies = false;
        void reserve(const scorer_dims&) noexcept {}
        void pack(const scorer_dims&, const weights_ref<T>&) noexcept {}
    };
    static std::size_t packed_elements(const scorer_dims& d, std::size_t max_len) noexcept
    {
        return Ops::packed_elements(d, max_len);
    }
    static std::size_t train_packed_elements(const scorer_dims& d, std::size_t max_len, std::size_t rows) noexcept
    {
        return Ops::train_packed_elements(d, max_len, rows);
    }
    static std::size_t eval_t_rows(const scorer_dims& d, std::size_t N, std::size_t max_len) noexcept
    {
        return t_group_rows(Ops::score_group_rows(d), N, max_len);
    }
    template <class Items>
    static void project(const scorer_dims& d, const weights_ref<T>& w, const packed_weights&, const Items& X,
                        const std::size_t* off, std::size_t N, T* u, T* v, T* packed)
    {
        if constexpr (Ops::reads_items) {
            Ops::project_items(d, w, X, off, N, u, v, packed);
        } else {
            scratch<T> xp(to_index_size(checked_mul(N, d.n_in, "packed input"), "packed input"));
            gather_rows(X, off, d.n_in, xp.data());
            Ops::projections(d, w, xp.data(), N, u, v, packed);
        }
    }
    static void left(const scorer_dims& d, const weights_ref<T>& w, const packed_weights&, const T* u, std::size_t N,
                     T* t, T* packed)
    {
        Ops::bilinear_left(d, w.w, u, N, t, packed);
    }
    /// Full scores of splits with rows (off[count] > 0): T a group at a time.
    template <class Split>
    static void scores(const scorer_dims& d, const weights_ref<T>& w, const packed_weights&, const T* u,
                       const std::size_t* off, std::size_t count, T* t, bool keep_t, T* packed, Split&& split)
    {
        Ops::bilinear_scores(d, w.w, u, off, count, t, keep_t, packed, split);
    }
    /// From dT and dV through W, relu (a) and the projections: du scratch.
    template <class Items>
    static void backward(const scorer_dims& d, const weights_ref<T>& w, const packed_weights&, const Items& X,
                         const std::size_t* off, std::size_t N, const T* u, T* dt, T* dv, T* du,
                         const relu_ref<T>& a, const grads_ref<T>& g, span<const seq_view<T>> dX, T* packed)
    {
        // The input backward gathers X into xp where Ops cannot read the splits in place.
        scratch<T> xp(Ops::reads_items ? 0 : packed_count<T>("packed input", N, d.n_in));
        Ops::bilinear_left_backward(d, w.w, u, N, dt, du, g.w, packed);
        Ops::input_backward(d, w, g, X, off, N, a, du, dv, xp.data(), packed, dX);
    }

    /// Inference of one output kind on the backend `be`: U, V and T (full
    /// scores: a group of splits at a time where Ops groups) in scratch,
    /// then every split's output into dest(k, n) and done(k, y).
    template <class Kind, class Be, class Items, class Heads, class Dest, class Done>
    static void predict(const Be& be, const scorer_dims& d, const weights_ref<T>&, const packed_weights&,
                        const Items& X, const Heads& H, Dest&& dest, Done&& done)
    {
        const std::size_t count = X.size(), o = d.labels;
        scratch<std::size_t> off(count + 1);
        const std::size_t N = split_offsets(X, off.data());
        const std::size_t max_n = max_split_rows(off.data(), count);
        // A kind that gathers rows of T reads them anywhere in the batch: T for
        // every row, and no packed block for its product.
        scratch<std::size_t> rows(Kind::gathers_rows ? N : 0);
        Kind::fill_rows(X, H, off.data(), rows.data());
        scratch<T> u(packed_count<T>("packed U", N, d.hu()));
        scratch<T> v(packed_count<T>("packed V", N, d.hv()));
        scratch<T> t(packed_count<T>("packed T", Kind::gathers_rows ? N : be.eval_t_rows(N, max_n), o, d.hv()));
        scratch<T> packed(be.packed_elements(Kind::gathers_rows ? 0 : max_n));
        // T holds eval_t_rows here, not N (host_carved's size): the
        // pointers are this call's.
        const batch_pointers<T> a{u.data(), v.data(), t.data(), nullptr};
        be.project(X, off.data(), N, a, packed.data());
        be.template score_outputs<Kind>(a, off.data(), count, rows.data(), false, false, packed.data(), dest,
                                        [](std::size_t) { return no_kept; }, done);
    }
    /// Scratch bytes predict carves for `count` splits of up to max_len
    /// rows: offsets, head rows, X (when gathered), U, V, T (full scores:
    /// eval_t_rows of it) and the packed block.
    template <class Kind, class Be>
    static std::uint64_t predict_scratch_bytes(const Be& be, const scorer_dims& d, std::size_t count,
                                               std::size_t max_len)
    {
        const char* what = "batch cost";
        const std::uint64_t rows = checked_mul(count, max_len, what);
        const std::size_t o = d.labels;
        const std::uint64_t input = Be::reads_items ? 0 : scratch_bytes<T>(checked_mul(rows, d.n_in, what));
        const std::uint64_t u = scratch_bytes<T>(checked_mul(rows, d.hu(), what));
        const std::uint64_t v = scratch_bytes<T>(checked_mul(rows, d.hv(), what));
        const std::uint64_t t = scratch_bytes<T>(checked_product(what, rows, o, d.hv()));
        const std::uint64_t offsets = scratch_bytes<std::size_t>(checked_add(count, 1, what));
        const std::uint64_t head_rows = Kind::gathers_rows ? scratch_bytes<std::size_t>(rows) : 0;
        const std::uint64_t eval_t =
            Kind::gathers_rows ? t
                               : scratch_bytes<T>(checked_product(
                                     what, be.eval_t_rows(to_index_size(rows, what), max_len), o, d.hv()));
        const std::uint64_t packed = scratch_bytes<T>(be.packed_elements(Kind::gathers_rows ? 0 : max_len));
        return checked_add(checked_add(checked_add(offsets, head_rows, what), checked_add(input, packed, what), what),
                           checked_add(checked_add(u, v, what), eval_t, what), what);
    }
};

/// The batch-level backend over a CPU backend's static per-split operations
/// `Ops` (see interface.hpp for both contracts). Shapes: N packed rows of a
/// batch of `count` splits at row offsets `off` ([count + 1]); u [N, hu], v
/// [N, hv], t [N, o * hv] (or the group eval_t_rows holds).
template <class Ops, class T, class Products = fp32_products<Ops, T>>
class host_batch {
    static_assert(check_host_ops<Ops, T>(), "host_batch<Ops, T>: Ops breaks the host ops contract");

public:
    using ops = Ops;
    using value_type = T;
    static constexpr const char* name = Ops::name;
    static constexpr const char* operations = Ops::operations;
    /// false: project() gathers the splits into a packed copy first (the
    /// cost model counts it).
    static constexpr bool reads_items = Ops::reads_items;
    static constexpr bool runs_bf16 = Products::runs_bf16;

    using products = Products;
    /// The batch's activations (interface.hpp): handles, and the objects
    /// that own them (kept for backward; one call's scratch).
    using acts = batch_pointers<T>;
    using held_batch = host_held<T>;
    using carved_batch = host_carved<T>;

    /// Products' packed weights are allocated here, with the scorer: a
    /// training step allocates none of them.
    explicit host_batch(const scorer_dims& d) : d_(d), cache_(d) {}

    const scorer_dims& dims() const noexcept { return d_; }

    // ------------------------------------------------------------ state

    /// The parameter version prepare() last saw (0: none; 0 too while
    /// watching, weights_cache).
    std::uint64_t prepared_version() const { return cache_.prepared(); }
    /// Takes the parameters of `version`: the pointers, and what Products
    /// makes of them (bf16: packed), unless another call took them first.
    void prepare(std::uint64_t version, const weights_ref<T>& w) { (void)cache_.acquire(version, d_, w); }
    /// The weights prepare() took (none in a copy until it prepares).
    weights_ref<T> weights() const { return cache_.current()->w; }
    /// Compare the weights with the prepared ones at every call, where
    /// Products copies them (the scorer's watch_parameter_writes).
    void watch(bool on) noexcept { cache_.watch(on); }
    /// Bytes a batch of `count` splits of at most `max_len` rows holds on a
    /// device: none on the host.
    std::uint64_t device_bytes(std::size_t /*count*/, std::size_t /*max_len*/, mode /*m*/) const noexcept
    {
        return 0;
    }

    // ------------------------------------------------------------ sizes

    std::size_t packed_elements(std::size_t max_len) const noexcept
    {
        return Products::packed_elements(d_, max_len);
    }
    std::size_t train_packed_elements(std::size_t max_len, std::size_t rows) const noexcept
    {
        return Products::train_packed_elements(d_, max_len, rows);
    }
    /// Rows of T inference holds at once (the backend's group, or the batch).
    std::size_t eval_t_rows(std::size_t N, std::size_t max_len) const noexcept
    {
        return Products::eval_t_rows(d_, N, max_len);
    }

    // ------------------------------------------------------------ the batch

    /// U, V, T of N packed rows and `ys` kept output elements, kept from a
    /// training forward for its backward (moves with the callback).
    held_batch hold(std::size_t N, std::size_t ys) const { return held_batch(d_, N, ys); }
    /// U, V, T of N packed rows in workspace scratch, for one call.
    carved_batch carve(std::size_t N) const { return carved_batch(d_, N); }

    // ------------------------------------------------------------ forward

    /// U and V (after relu) for the packed rows of the splits X.
    template <class Items>
    void project(const Items& X, const std::size_t* off, std::size_t N, const acts& a, T* packed) const
    {
        const auto e = cache_.current();
        Products::project(d_, e->w, e->packed, X, off, N, a.u, a.v, packed);
    }

    /// Inference of one output kind (the scorer's predict*): every split's
    /// output into dest(k, n), then done(k, y); H: the splits' heads (labels
    /// at heads) or no_heads. Where Products pack the weights (bf16), the
    /// packed entry is held for the whole call: a newer version prepared
    /// meanwhile never changes it. fp32 reads the weights in place.
    template <class Kind, class Items, class Heads, class Dest, class Done>
    void predict(const Items& X, const Heads& H, Dest&& dest, Done&& done) const
    {
        const auto e = cache_.current();
        Products::template predict<Kind>(*this, d_, e->w, e->packed, X, H, dest, done);
    }
    /// Scratch bytes predict<Kind> carves for `count` splits of up to
    /// max_len rows (the cost model's inference scratch, before outputs).
    template <class Kind>
    std::uint64_t predict_scratch_bytes(std::size_t count, std::size_t max_len) const
    {
        return Products::template predict_scratch_bytes<Kind>(*this, d_, count, max_len);
    }

    /// Dropout at `rate` on U and V: one mask per split and feature, shared
    /// over the split's tokens; kept units scaled by 1 / (1 - rate). Drawn
    /// from a per-batch seed so backward can redraw the same masks when it
    /// recomputes the forward.
    void dropout(double rate, std::uint64_t seed, const acts& act, const std::size_t* off, std::size_t count) const
    {
        T* const u = act.u;
        T* const v = act.v;
        std::mt19937_64 gen(seed);
        const T scale = static_cast<T>(1.0 / (1.0 - rate));
        tracked_vector<T> mask(d_.hidden);
        for (T* a : {u, v}) {
            const std::size_t width = a == u ? d_.hu() : d_.hv();
            for (std::size_t k = 0; k < count; ++k) {
                for (auto& m : mask) m = uniform01(gen) < rate ? T(0) : scale;
                for (std::size_t r = off[k]; r < off[k + 1]; ++r) {
                    for (std::size_t j = 0; j < d_.hidden; ++j) a[r * width + j] *= mask[j];
                }
            }
        }
    }

    /// t [N, o * hv] = u W' (nothing for N = 0).
    void bilinear_left(const acts& a, std::size_t N, T* packed) const { left(a.u, N, a.t, packed); }

    /// Every split's output of one kind from the packed activations, each
    /// by the kind's product (Kind::product on Ops): a kind that reads only
    /// its split's rows of T takes T a group of splits at a time
    /// (Ops::bilinear_scores, T kept for every row when `keep_t`); one that
    /// gathers rows (Kind::gathers_rows: labels at given heads) takes T for
    /// every row first, head_rows [N] naming the packed row each token
    /// reads. Split k's output goes into `dest(k, n)`; then, with `softmax`,
    /// it is normalised; keep(k) other than no_kept gets a dense copy at
    /// that offset of the kept outputs a.ys (what backward reads); then
    /// `each(k, y)`.
    template <class Kind, class Dest, class Keep, class Each>
    void score_outputs(const acts& a, const std::size_t* off, std::size_t count, const std::size_t* head_rows,
                       bool keep_t, bool softmax, T* packed, Dest&& dest, Keep&& keep, Each&& each) const
    {
        const std::size_t o = d_.labels, hv = d_.hv();
        const T* const u = a.u;
        const T* const v = a.v;
        T* const t = a.t;
        const auto finish = [&](std::size_t k, typename Kind::template view<T> y) {
            if (softmax) Kind::softmax(y);
            const std::size_t at = keep(k);
            // ys is null where the batch keeps no elements at all (only empty splits).
            if (at != no_kept && a.ys != nullptr) Kind::copy(Kind::read_only(y), a.ys + at);
            each(k, y);
        };
        if constexpr (Kind::gathers_rows) {
            const std::size_t N = off[count];
            left(u, N, t, packed);
            for (std::size_t k = 0; k < count; ++k) {
                const std::size_t n = off[k + 1] - off[k];
                auto y = dest(k, n);
                if (n != 0) {
                    Kind::template product<Ops>(const_row_block(v + off[k] * hv, n, hv), static_cast<const T*>(t),
                                                head_rows + off[k], o, y, packed);
                }
                finish(k, y);
            }
        } else {
            (void)head_rows;
            const auto split = [&](std::size_t k, const T* t_rows, T* rest) {
                const std::size_t n = off[k + 1] - off[k];
                prefetch_ahead(k, count,
                               [&](std::size_t j) { prefetch_rows(v + off[j] * hv, (off[j + 1] - off[j]) * hv); });
                auto s = dest(k, n);
                Kind::template product<Ops>(const_row_block(v + off[k] * hv, n, hv), t_rows,
                                            static_cast<const std::size_t*>(nullptr), o, s, rest);
                finish(k, s);
            };
            // With only empty splits (t may be null then) each split is
            // scored from no rows of T.
            if (off[count] == 0) {
                for (std::size_t k = 0; k < count; ++k) split(k, static_cast<const T*>(nullptr), packed);
                return;
            }
            const auto e = cache_.current();
            Products::scores(d_, e->w, e->packed, u, off, count, t, keep_t, packed, split);
        }
    }

    // ------------------------------------------------------------ backward

    /// The per-split loop backward: from the outputs' gradients dY (through
    /// the softmax when `softmax`: its outputs at offset kept(k) of a.ys, or
    /// recomputed into y_tmp where kept(k) is no_kept) to dV [N, hv] (every row written)
    /// and dT [N, o * hv] (full scores: each split's rows written; labels at
    /// heads: zeroed, then accumulated at the heads). ds: one split's dense
    /// output, scratch (softmax only). dY of another scalar than T (the
    /// scorer's output type) is converted one split at a time into scratch
    /// carved here (one split of T).
    template <class Kind, class Grad, class Kept>
    void outputs_backward(const acts& a, const std::size_t* off, std::size_t count, const std::size_t* head_rows,
                          span<const Grad> dY, bool softmax, Kept&& kept_at, T* y_tmp, T* ds, T* dv, T* dt,
                          T* packed) const
    {
        const std::size_t o = d_.labels, hv = d_.hv(), N = off[count];
        const T* const v = a.v;
        const T* const t = a.t;
        const auto kept = [&](std::size_t k) {
            const std::size_t at = kept_at(k);
            return at == no_kept ? static_cast<const T*>(nullptr) : static_cast<const T*>(a.ys + at);
        };
        constexpr bool convert = !std::is_same<std::remove_const_t<std::remove_pointer_t<decltype(Grad::data)>>, T>::value;
        scratch<T> converted(convert ? packed_count<T>("split gradient", Kind::elements(max_split_rows(off, count), o,
                                                                                          "split gradient"), 1)
                                     : 0);
        // Several tokens may gather one row (dependents sharing a head): dT accumulates.
        if (Kind::gathers_rows && N != 0) row_block(dt, N, o * hv).setZero();
        for (std::size_t k = 0; k < count; ++k) {
            const std::size_t n = off[k + 1] - off[k];
            if (Kind::gathers_rows && n == 0) continue;
            if constexpr (!Kind::gathers_rows) {
                // A later split's operands, while this one computes: they
                // come from memory (kept since the forward, or the
                // caller's), and the loop took 7% less time with the next
                // one's prefetched (100k tokens, o = 1, AMD EPYC Zen 5,
                // three alternated runs); see BIAFFINE_PREFETCH_SPLITS_AHEAD
                // for the distance.
                prefetch_ahead(k, count, [&](std::size_t j) {
                    prefetch_split<Kind>(off, j, v, t, dY[j], softmax ? kept(j) : nullptr);
                });
            }
            typename Kind::template view<const T> g;
            if constexpr (convert) {
                const auto c = Kind::dense(converted.data(), n, o);
                Kind::convert(c, dY[k]);
                g = Kind::read_only(c);
            } else {
                g = dY[k];
            }
            const auto va = const_row_block(v + off[k] * hv, n, hv);
            // The kind's rows of T (and dT): all of them where it gathers
            // rows, else the split's own.
            const T* tk = Kind::gathers_rows ? t : t + off[k] * o * hv;
            T* dtk = Kind::gathers_rows ? dt : dt + off[k] * o * hv;
            const std::size_t* rk = Kind::gathers_rows ? head_rows + off[k] : nullptr;
            if (softmax) {
                const T* keep = kept(k);
                auto y = Kind::dense(keep, n, o);
                if (keep == nullptr) {
                    const auto yt = Kind::dense(y_tmp, n, o);
                    Kind::template product<Ops>(va, tk, rk, o, yt, packed);
                    Kind::softmax(yt);
                    y = Kind::read_only(yt);
                }
                const auto d = Kind::dense(ds, n, o);
                Kind::template softmax_backward<T>(y, g, d);
                g = Kind::read_only(d);
            }
            Kind::template product_backward<Ops>(va, tk, rk, o, g, row_block(dv + off[k] * hv, n, hv), dtk, packed);
        }
    }

    /// From dT and dV (packed rows) through W, relu, dropout (at `rate`, 0:
    /// none) and the projections to every parameter gradient and the
    /// splits' dX. du [N, hu] is scratch.
    template <class Items>
    void projections_backward(const Items& X, const std::size_t* off, std::size_t N, const acts& act, T* dt, T* dv,
                              T* du, double rate, const grads_ref<T>& g, span<const seq_view<T>> dX, T* packed) const
    {
        if (N == 0) return;
        const T* const u = act.u;
        const T* const v = act.v;
        // Through relu and dropout (a unit passed gradient iff it came out
        // positive, scaled like the kept units), then the projections.
        const T scale = rate > 0.0 ? static_cast<T>(1.0 / (1.0 - rate)) : T(1);
        const relu_ref<T> a{u, v, scale};
        const auto e = cache_.current();
        Products::backward(d_, e->w, e->packed, X, off, N, u, dt, dv, du, a, g, dX, packed);
    }

private:
    // t [N, o * hv] = u W' (nothing for N = 0).
    void left(const T* u, std::size_t N, T* t, T* packed) const
    {
        if (N == 0) return;  // no products for empty splits (see eigen_backend)
        const auto e = cache_.current();
        Products::left(d_, e->w, e->packed, u, N, t, packed);
    }

    // Prefetches split k's rows of V and T, its kept softmax outputs and its
    // output gradient g: the first 16 KiB of each, so that with many labels
    // (T's rows of a 100-token split at 50 labels: 2.6 MB) the prefetches do
    // not push the current split's operands out of L2.
    template <class Kind, class G>
    void prefetch_split(const std::size_t* off, std::size_t k, const T* v, const T* t, const G& g,
                        const T* kept) const
    {
        constexpr std::size_t most = (16 << 10) / sizeof(T);  // T's count for g too: a bound, not a size
        const std::size_t n = off[k + 1] - off[k], o = d_.labels, hv = d_.hv();
        if (n == 0) return;
        const auto elements = static_cast<std::size_t>(Kind::elements(n, o, "prefetch"));
        const std::size_t row = elements / n;  // one token's output
        prefetch_rows(v + off[k] * hv, std::min(most, n * hv));
        prefetch_rows(t + off[k] * o * hv, std::min(most, n * o * hv));
        if (kept != nullptr) prefetch_rows(kept, std::min(most, elements));
        for (std::size_t i = 0, done = 0; i < n && done < most; ++i, done += row) {
            prefetch_rows(g.data + static_cast<std::ptrdiff_t>(i) * g.row_stride, row);
        }
    }

    scorer_dims d_;
    // The prepared weights and what Products made of them (bf16: packed),
    // one entry per parameter version.
    weights_cache<T, typename Products::packed_weights> cache_;
};

}  // namespace detail
BIAFFINE_NAMESPACE_END
