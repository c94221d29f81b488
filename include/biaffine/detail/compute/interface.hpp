// biaffine/detail/compute/interface.hpp - the contract between the scorer and
// a compute backend, at two levels, each stated at compile time with one
// named message per missing operation (as check_split_layer does for
// layers):
//   check_backend<B, T>()    the backend object the scorer holds (batch level)
//   check_host_ops<Ops, T>() the static per-split operations host_batch<Ops, T>
//                            (detail/compute/host_batch.hpp) turns into one
//
// dims.bf16 is a float scorer's compute_precision::bf16: the default float
// backend (backend.hpp: precision_switch) then runs inference and training
// on host_batch with bf16_products. A backend says it computes in bf16 with
// `static constexpr bool runs_bf16 = true` (backend_runs_bf16 below); the
// scorer refuses compute_precision::bf16 on one that does not, rather than
// compute in fp32 unasked.
//
// The batch level. An object built from the scorer's sizes, `B(dims)`, held
// by the scorer (biaffine_scorer<T, B>) for its lifetime; const operations
// may run concurrently (predict), prepare() does not overlap them except as
// the scorer calls it (see weights_cache). N packed rows of a batch of
// `count` splits at row offsets `off` [count + 1]; Kind is an output kind
// (detail/output_kind.hpp).
//
// The batch is the backend's: it allocates a batch's activations (u [N,
// hu], v [N, hv], t [N, o * hv], the softmax outputs kept for backward, ys)
// where it computes (host memory, its own arena, a device) and the scorer
// holds only handles to them, `a` below (B::acts), which it passes on and
// never reads. Two objects own them: B::held_batch (hold: kept from a
// training forward for its backward; default-built empty, movable, it
// moves with the backward callback) and B::carved_batch (carve: one call's,
// from the workspace; built in place, freed in reverse order of carving).
// Both give their handles by acts(). A kept output is named by its element
// offset into ys; no_kept names none. The host pieces (packed blocks, dV,
// dT, dU, one split's dS) are still the scorer's workspace scratch.
//
//   name, operations, reads_items      as for the host ops (reads_items false: the cost
//                                      model counts a gathered copy of the inputs)
//   prepared_version()                 the parameter version prepare() last took (0: none)
//   prepare(version, w)                take the parameters (pack, copy to a device); the
//                                      scorer calls it exactly when its parameter_version()
//                                      differs from prepared_version()
//   device_bytes(count, max_len, m)    bytes a batch holds on a device (the cost model's
//                                      `device`; 0 on the host)
//   packed_elements(max_len), train_packed_elements(max_len, rows)   scratch sizes
//   hold(N, ys) -> held_batch          U, V, T and ys kept output elements, for backward
//   carve(N) -> carved_batch           U, V, T of one call (no ys), in the workspace
//   watch(on)                          compare copies of the weights at every call (the
//                                      scorer's watch_parameter_writes; nothing where none)
//   predict<Kind>(X, H, dest, done)    inference of one output kind (H: heads or no_heads):
//                                      every split's output into dest(k, n), then done(k, y)
//   predict_scratch_bytes<Kind>(count, max_len)   the scratch predict carves (the cost model)
//   project(X, off, N, a, packed)      a's U, V after relu, from the splits X
//   dropout(rate, seed, a, off, count) one mask per split and feature, on a's U and V
//   bilinear_left(a, N, packed)        a's t = u W' for every row
//   score_outputs<Kind>(a, off, count, head_rows, keep_t, softmax, packed, dest, keep, each)
//                                      every split's output into dest(k, n), normalised when
//                                      softmax, copied to a's ys at keep(k) unless no_kept,
//                                      then each(k, y)
//   outputs_backward<Kind>(a, off, count, head_rows, dY, softmax, kept, y_tmp, ds, dv, dt, packed)
//                                      the per-split loop backward to dV and dT (the softmax
//                                      outputs at a's ys, kept(k), or recomputed)
//   projections_backward(X, off, N, a, dt, dv, du, rate, g, dX, packed)
//                                      through W, relu, dropout and the projections to every
//                                      parameter gradient and dX
//
// The host ops, per split (what host_batch wraps; shapes as above, h =
// hidden, hu / hv the two sides of W with their bias columns). The
// batch-level layer owns the order of operations and the buffers
// (workspace scratch, sized by the ops' *_elements); the ops own the
// arithmetic:
//
//   name, operations                   what it is and what runs each product (benches, logs)
//   reads_items                        true: project_items / input_backward read the splits
//                                      in place; false: the splits are gathered into xp first
//   packed_elements(d, max_len)        scratch the inference path gives it as `packed`
//   train_packed_elements(d, max_len, rows)   the same for a training batch of up to `rows` rows
//   projections(d, w, xp, N, u, v, packed)    u [N, hu] = relu(xp Wh^T + bh) | 1, v likewise
//   project_items(d, w, X, off, N, u, v, packed)  the same from the splits (reads_items only)
//   bilinear_left(d, w, u, N, t, packed)      t [N, o * hv] = u W'
//   score_group_rows(d)                rows of T bilinear_scores makes before scoring them
//   bilinear_scores(d, w, u, off, count, t, keep_t, packed, each)
//                                      T a group at a time, each(k, t_rows, packed_rest) per split
//   split_scores(va, t_rows, o, s, packed)    one split's s [n, n * o] = va Tr^T
//   split_scores_backward(va, t_rows, o, ds, dva, dt_rows, packed)
//   head_scores(va, t, head_rows, o, y)       one split's y [n, o] at given heads
//   head_scores_backward(va, t, head_rows, o, dy, dva, dt)  dva overwritten, dt += at the heads
//   bilinear_left_backward(d, w, u, N, dt, du, dw, packed)  du = dT W'^T, dW += u^T dT
//   input_backward(d, w, g, X, off, N, a, dau, dav, xp, packed, dX)
//                                      through relu (and dropout's scale) to dbh, dbd, dWh, dWd
//                                      and every split's dX
//
// The products are never called for a batch of only empty splits (N = 0).
// Every backend must give the same bytes for the same inputs whatever the
// batch composition (a split's scores may not depend on its neighbours).
// detail/compute/backend.hpp chooses one per scalar type; the tests run
// both checks on each (test_backend.cpp, test_host_batch.cpp) and on user
// backends missing an operation (tests/protocol/backend_probe.cpp).
#pragma once

#include "biaffine/abi.hpp"

#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <utility>

#include "biaffine/detail/compute/operands.hpp"
#include "biaffine/detail/output_kind.hpp"
#include "biaffine/detail/split_checks.hpp"
#include "biaffine/mode.hpp"
#include "biaffine/tensor.hpp"
#include "biaffine/workspace.hpp"

BIAFFINE_NAMESPACE_BEGIN
namespace detail {

/// A kept output's offset that names none (score_outputs' keep,
/// outputs_backward's kept).
inline constexpr std::size_t no_kept = static_cast<std::size_t>(-1);

/// Handles that are addresses, for a backend whose batch is plain memory
/// (host_batch: host memory; a device backend: device addresses the scorer
/// could not read): u [N, hu], v [N, hv], t [N, o * hv] and the kept
/// outputs ys (null: none kept).
template <class T>
struct batch_pointers {
    T* u = nullptr;
    T* v = nullptr;
    T* t = nullptr;
    T* ys = nullptr;
};

/// Whether backend B computes a float scorer's compute_precision::bf16 in
/// bf16: its `runs_bf16` member, false where it has none.
template <class B, class = void>
struct backend_runs_bf16 : std::false_type {};
template <class B>
struct backend_runs_bf16<B, std::void_t<decltype(B::runs_bf16)>> : std::bool_constant<B::runs_bf16> {};
namespace backend_probe {

template <class T>
struct each_split {
    void operator()(std::size_t, const T*, T*) const {}
};
template <class T>
using items = tracked_vector<seq_view<const T>>;
template <class T>
T* p()
{
    return nullptr;
}
inline std::size_t* offs() { return nullptr; }

#define BIAFFINE_BACKEND_DETECTOR(op, ...)                                          \
    template <class B, class T, class = void>                                       \
    struct has_##op : std::false_type {};                                           \
    template <class B, class T>                                                     \
    struct has_##op<B, T, std::void_t<decltype(__VA_ARGS__)>> : std::true_type {};

BIAFFINE_BACKEND_DETECTOR(name, static_cast<const char*>(B::name))
BIAFFINE_BACKEND_DETECTOR(operations, static_cast<const char*>(B::operations))
BIAFFINE_BACKEND_DETECTOR(reads_items, static_cast<bool>(B::reads_items))
BIAFFINE_BACKEND_DETECTOR(packed_elements,
                          static_cast<std::size_t>(B::packed_elements(std::declval<const scorer_dims&>(),
                                                                      std::size_t())))
BIAFFINE_BACKEND_DETECTOR(train_packed_elements,
                          static_cast<std::size_t>(B::train_packed_elements(std::declval<const scorer_dims&>(),
                                                                            std::size_t(), std::size_t())))
BIAFFINE_BACKEND_DETECTOR(projections,
                          B::projections(std::declval<const scorer_dims&>(), std::declval<const weights_ref<T>&>(),
                                         p<const T>(), std::size_t(), p<T>(), p<T>(), p<T>()))
BIAFFINE_BACKEND_DETECTOR(project_items,
                          B::project_items(std::declval<const scorer_dims&>(), std::declval<const weights_ref<T>&>(),
                                           std::declval<const items<T>&>(), p<const std::size_t>(), std::size_t(),
                                           p<T>(), p<T>(), p<T>()))
BIAFFINE_BACKEND_DETECTOR(bilinear_left, B::bilinear_left(std::declval<const scorer_dims&>(), p<const T>(),
                                                          p<const T>(), std::size_t(), p<T>(), p<T>()))
BIAFFINE_BACKEND_DETECTOR(score_group_rows,
                          static_cast<std::size_t>(B::score_group_rows(std::declval<const scorer_dims&>())))
BIAFFINE_BACKEND_DETECTOR(bilinear_scores,
                          B::bilinear_scores(std::declval<const scorer_dims&>(), p<const T>(), p<const T>(),
                                             p<const std::size_t>(), std::size_t(), p<T>(), bool(), p<T>(),
                                             each_split<T>{}))
BIAFFINE_BACKEND_DETECTOR(split_scores, B::split_scores(std::declval<const_row_map<T>>(), p<const T>(),
                                                        std::size_t(), std::declval<score_view<T>>(), p<T>()))
BIAFFINE_BACKEND_DETECTOR(split_scores_backward,
                          B::split_scores_backward(std::declval<const_row_map<T>>(), p<const T>(), std::size_t(),
                                                   std::declval<score_view<const T>>(), std::declval<row_map<T>>(),
                                                   p<T>(), p<T>()))
BIAFFINE_BACKEND_DETECTOR(head_scores, B::head_scores(std::declval<const_row_map<T>>(), p<const T>(),
                                                      p<const std::size_t>(), std::size_t(),
                                                      std::declval<seq_view<T>>()))
BIAFFINE_BACKEND_DETECTOR(head_scores_backward,
                          B::head_scores_backward(std::declval<const_row_map<T>>(), p<const T>(),
                                                  p<const std::size_t>(), std::size_t(),
                                                  std::declval<seq_view<const T>>(), std::declval<row_map<T>>(),
                                                  p<T>()))
BIAFFINE_BACKEND_DETECTOR(bilinear_left_backward,
                          B::bilinear_left_backward(std::declval<const scorer_dims&>(), p<const T>(), p<const T>(),
                                                    std::size_t(), p<const T>(), p<T>(), p<T>(), p<T>()))
BIAFFINE_BACKEND_DETECTOR(input_backward,
                          B::input_backward(std::declval<const scorer_dims&>(), std::declval<const weights_ref<T>&>(),
                                            std::declval<const grads_ref<T>&>(), std::declval<const items<T>&>(),
                                            p<const std::size_t>(), std::size_t(), std::declval<const relu_ref<T>&>(),
                                            p<T>(), p<T>(), p<T>(), p<T>(),
                                            std::declval<span<const seq_view<T>>>()))

#undef BIAFFINE_BACKEND_DETECTOR

// The batch level: operations of an object (const unless stated).
template <class T>
struct dest_probe {
    score_view<T> operator()(std::size_t, std::size_t) const { return {}; }
};
template <class T>
struct heads_dest_probe {
    seq_view<T> operator()(std::size_t, std::size_t) const { return {}; }
};
struct keep_probe {
    std::size_t operator()(std::size_t) const { return no_kept; }
};
template <class B>
using acts_of = const typename B::acts&;
template <class T>
struct each_probe {
    template <class V>
    void operator()(std::size_t, V) const {}
};

#define BIAFFINE_BATCH_DETECTOR(op, ...)                                            \
    template <class B, class T, class = void>                                       \
    struct has_batch_##op : std::false_type {};                                     \
    template <class B, class T>                                                     \
    struct has_batch_##op<B, T, std::void_t<decltype(__VA_ARGS__)>> : std::true_type {};

BIAFFINE_BATCH_DETECTOR(construct, B(std::declval<const scorer_dims&>()))
BIAFFINE_BATCH_DETECTOR(prepared_version,
                        static_cast<std::uint64_t>(std::declval<const B&>().prepared_version()))
BIAFFINE_BATCH_DETECTOR(prepare, std::declval<B&>().prepare(std::uint64_t(), std::declval<const weights_ref<T>&>()))
BIAFFINE_BATCH_DETECTOR(device_bytes, static_cast<std::uint64_t>(std::declval<const B&>().device_bytes(
                                          std::size_t(), std::size_t(), mode::eval)))
BIAFFINE_BATCH_DETECTOR(packed_elements, static_cast<std::size_t>(std::declval<const B&>().packed_elements(std::size_t())))
BIAFFINE_BATCH_DETECTOR(train_packed_elements, static_cast<std::size_t>(std::declval<const B&>().train_packed_elements(
                                                   std::size_t(), std::size_t())))
BIAFFINE_BATCH_DETECTOR(acts, std::declval<typename B::acts&>())
// Held: empty by default, movable (it moves with the backward callback).
BIAFFINE_BATCH_DETECTOR(hold, (std::enable_if_t<std::is_default_constructible<typename B::held_batch>::value &&
                                                std::is_move_assignable<typename B::held_batch>::value>(),
                               static_cast<typename B::held_batch>(
                                   std::declval<const B&>().hold(std::size_t(), std::size_t())),
                               static_cast<acts_of<B>>(std::declval<const typename B::held_batch&>().acts())))
BIAFFINE_BATCH_DETECTOR(carve, (std::declval<const B&>().carve(std::size_t()),
                                static_cast<acts_of<B>>(std::declval<const typename B::carved_batch&>().acts())))
BIAFFINE_BATCH_DETECTOR(project, std::declval<const B&>().project(std::declval<const items<T>&>(), p<const std::size_t>(),
                                                                  std::size_t(), std::declval<acts_of<B>>(), p<T>()))
BIAFFINE_BATCH_DETECTOR(dropout, std::declval<const B&>().dropout(double(), std::uint64_t(), std::declval<acts_of<B>>(),
                                                                  p<const std::size_t>(), std::size_t()))
BIAFFINE_BATCH_DETECTOR(bilinear_left,
                        std::declval<const B&>().bilinear_left(std::declval<acts_of<B>>(), std::size_t(), p<T>()))
BIAFFINE_BATCH_DETECTOR(score_outputs,
                        (std::declval<const B&>().template score_outputs<full_scores_kind>(
                             std::declval<acts_of<B>>(), p<const std::size_t>(), std::size_t(), p<const std::size_t>(),
                             bool(), bool(), p<T>(), dest_probe<T>{}, keep_probe{}, each_probe<T>{}),
                         std::declval<const B&>().template score_outputs<labels_at_heads_kind>(
                             std::declval<acts_of<B>>(), p<const std::size_t>(), std::size_t(), p<const std::size_t>(),
                             bool(), bool(), p<T>(), heads_dest_probe<T>{}, keep_probe{}, each_probe<T>{})))
BIAFFINE_BATCH_DETECTOR(outputs_backward,
                        (std::declval<const B&>().template outputs_backward<full_scores_kind>(
                             std::declval<acts_of<B>>(), p<const std::size_t>(), std::size_t(), p<const std::size_t>(),
                             span<const score_view<const T>>(), bool(), keep_probe{}, p<T>(), p<T>(), p<T>(), p<T>(),
                             p<T>()),
                         std::declval<const B&>().template outputs_backward<labels_at_heads_kind>(
                             std::declval<acts_of<B>>(), p<const std::size_t>(), std::size_t(), p<const std::size_t>(),
                             span<const seq_view<const T>>(), bool(), keep_probe{}, p<T>(), p<T>(), p<T>(), p<T>(),
                             p<T>())))
BIAFFINE_BATCH_DETECTOR(projections_backward,
                        std::declval<const B&>().projections_backward(
                            std::declval<const items<T>&>(), p<const std::size_t>(), std::size_t(),
                            std::declval<acts_of<B>>(), p<T>(), p<T>(), p<T>(), double(),
                            std::declval<const grads_ref<T>&>(), std::declval<span<const seq_view<T>>>(), p<T>()))

BIAFFINE_BATCH_DETECTOR(watch, std::declval<B&>().watch(bool()))
BIAFFINE_BATCH_DETECTOR(predict, std::declval<const B&>().template predict<full_scores_kind>(
                                     std::declval<const items<T>&>(), no_heads{}, dest_probe<T>{}, each_probe<T>{}))
BIAFFINE_BATCH_DETECTOR(predict_scratch_bytes,
                        static_cast<std::uint64_t>(
                            std::declval<const B&>().template predict_scratch_bytes<full_scores_kind>(std::size_t(),
                                                                                                      std::size_t())))

#undef BIAFFINE_BATCH_DETECTOR

template <class B, class T, class = void>
struct reads_items_value : std::false_type {};
template <class B, class T>
struct reads_items_value<B, T, std::enable_if_t<has_reads_items<B, T>::value>>
    : std::integral_constant<bool, B::reads_items> {};

// What both levels name themselves with (a user's mistake here gets the
// same message at either level).
template <class B, class T>
constexpr bool check_names()
{
    static_assert(has_name<B, T>::value, "biaffine backend contract: the backend has no name (const char*)");
    static_assert(has_operations<B, T>::value,
                  "biaffine backend contract: the backend has no operations (const char*)");
    static_assert(has_reads_items<B, T>::value, "biaffine backend contract: the backend has no reads_items (bool)");
    return true;
}

}  // namespace backend_probe

/// Compile-time check of a type of host ops `B` (what host_batch wraps) for
/// scalar type `T`: every per-split operation of the contract above, each
/// missing one failing with its own message. Returns true, so it can sit
/// in a static_assert.
template <class B, class T>
constexpr bool check_host_ops()
{
    namespace p = backend_probe;
    static_assert(backend_probe::check_names<B, T>());
    static_assert(p::has_packed_elements<B, T>::value,
                  "biaffine backend contract: the backend has no packed_elements(dims, max_len)");
    static_assert(p::has_train_packed_elements<B, T>::value,
                  "biaffine backend contract: the backend has no train_packed_elements(dims, max_len, rows)");
    if constexpr (p::reads_items_value<B, T>::value) {
        static_assert(p::has_project_items<B, T>::value, "biaffine backend contract: a backend with reads_items has "
                                                         "no project_items(dims, w, X, off, N, u, v, packed)");
    } else {
        static_assert(p::has_projections<B, T>::value,
                      "biaffine backend contract: the backend has no projections(dims, w, xp, N, u, v, packed)");
    }
    static_assert(p::has_bilinear_left<B, T>::value,
                  "biaffine backend contract: the backend has no bilinear_left(dims, w, u, N, t, packed)");
    static_assert(p::has_score_group_rows<B, T>::value,
                  "biaffine backend contract: the backend has no score_group_rows(dims)");
    static_assert(p::has_bilinear_scores<B, T>::value, "biaffine backend contract: the backend has no "
                                                       "bilinear_scores(dims, w, u, off, count, t, keep_t, packed, each)");
    static_assert(p::has_split_scores<B, T>::value,
                  "biaffine backend contract: the backend has no split_scores(va, t_rows, o, s, packed)");
    static_assert(p::has_split_scores_backward<B, T>::value, "biaffine backend contract: the backend has no "
                                                             "split_scores_backward(va, t_rows, o, ds, dva, dt_rows, packed)");
    static_assert(p::has_head_scores<B, T>::value,
                  "biaffine backend contract: the backend has no head_scores(va, t, head_rows, o, y)");
    static_assert(p::has_head_scores_backward<B, T>::value, "biaffine backend contract: the backend has no "
                                                            "head_scores_backward(va, t, head_rows, o, dy, dva, dt)");
    static_assert(p::has_bilinear_left_backward<B, T>::value, "biaffine backend contract: the backend has no "
                                                              "bilinear_left_backward(dims, w, u, N, dt, du, dw, packed)");
    static_assert(p::has_input_backward<B, T>::value,
                  "biaffine backend contract: the backend has no "
                  "input_backward(dims, w, g, X, off, N, a, dau, dav, xp, packed, dX)");
    return true;
}

/// Compile-time check of a batch-level backend `B` for scalar type `T` (the
/// object biaffine_scorer<T, B> holds): every operation of the contract
/// above, each missing one failing with its own message.
template <class B, class T>
constexpr bool check_backend()
{
    namespace p = backend_probe;
    static_assert(backend_probe::check_names<B, T>());
    static_assert(p::has_batch_construct<B, T>::value,
                  "biaffine backend contract: the backend cannot be built from the scorer's dims (B(dims))");
    static_assert(p::has_batch_prepared_version<B, T>::value,
                  "biaffine backend contract: the backend has no prepared_version() const");
    static_assert(p::has_batch_prepare<B, T>::value,
                  "biaffine backend contract: the backend has no prepare(version, weights)");
    static_assert(p::has_batch_device_bytes<B, T>::value,
                  "biaffine backend contract: the backend has no device_bytes(count, max_len, mode) const");
    static_assert(p::has_batch_packed_elements<B, T>::value,
                  "biaffine backend contract: the backend has no packed_elements(max_len) const");
    static_assert(p::has_batch_train_packed_elements<B, T>::value,
                  "biaffine backend contract: the backend has no train_packed_elements(max_len, rows) const");
    static_assert(p::has_batch_watch<B, T>::value, "biaffine backend contract: the backend has no watch(on)");
    static_assert(p::has_batch_predict<B, T>::value,
                  "biaffine backend contract: the backend has no predict<Kind>(X, heads, dest, done) const");
    static_assert(p::has_batch_predict_scratch_bytes<B, T>::value,
                  "biaffine backend contract: the backend has no predict_scratch_bytes<Kind>(count, max_len) const");
    static_assert(p::has_batch_acts<B, T>::value,
                  "biaffine backend contract: the backend has no acts (its handles to a batch's activations)");
    static_assert(p::has_batch_hold<B, T>::value,
                  "biaffine backend contract: the backend has no hold(N, ys) const giving a held_batch "
                  "(default-built, movable, acts())");
    static_assert(p::has_batch_carve<B, T>::value,
                  "biaffine backend contract: the backend has no carve(N) const giving a carved_batch (acts())");
    static_assert(p::has_batch_project<B, T>::value,
                  "biaffine backend contract: the backend has no project(X, off, N, a, packed) const");
    static_assert(p::has_batch_dropout<B, T>::value,
                  "biaffine backend contract: the backend has no dropout(rate, seed, a, off, count) const");
    static_assert(p::has_batch_bilinear_left<B, T>::value,
                  "biaffine backend contract: the backend has no bilinear_left(a, N, packed) const");
    static_assert(p::has_batch_score_outputs<B, T>::value,
                  "biaffine backend contract: the backend has no score_outputs<Kind>(a, off, count, head_rows, "
                  "keep_t, softmax, packed, dest, keep, each) const");
    static_assert(p::has_batch_outputs_backward<B, T>::value,
                  "biaffine backend contract: the backend has no outputs_backward<Kind>(a, off, count, head_rows, "
                  "dY, softmax, kept, y_tmp, ds, dv, dt, packed) const");
    static_assert(p::has_batch_projections_backward<B, T>::value,
                  "biaffine backend contract: the backend has no projections_backward(X, off, N, a, dt, dv, du, "
                  "rate, g, dX, packed) const");
    return true;
}

}  // namespace detail
BIAFFINE_NAMESPACE_END
