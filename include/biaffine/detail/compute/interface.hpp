// biaffine/detail/compute/interface.hpp - the contract between the scorer and
// a compute backend, and check_backend<B, T>(), which states it at compile
// time with one named message per missing operation (as check_split_layer
// does for layers).
//
// A backend is a type with static operations over one batch's packed rows
// (N rows, the splits at row offsets `off`, h = hidden, hu / hv the two
// sides of W with their bias columns). The scorer owns the order of
// operations and the buffers (workspace scratch, sized by the backend's
// *_elements); the backend owns the arithmetic. Shapes:
//
//   name, operations                   what it is and what runs each product (benches, logs)
//   reads_items                        true: project_items / input_backward read the splits
//                                      in place; false: the scorer gathers them into xp first
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
// check_backend on each (test_backend.cpp) and on a user backend missing an
// operation (tests/protocol/backend_probe.cpp).
#pragma once

#include "biaffine/abi.hpp"

#include <cstddef>
#include <type_traits>
#include <utility>

#include "biaffine/detail/compute/operands.hpp"
#include "biaffine/tensor.hpp"
#include "biaffine/workspace.hpp"

BIAFFINE_NAMESPACE_BEGIN
namespace detail {
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

template <class B, class T, class = void>
struct reads_items_value : std::false_type {};
template <class B, class T>
struct reads_items_value<B, T, std::enable_if_t<has_reads_items<B, T>::value>>
    : std::integral_constant<bool, B::reads_items> {};

}  // namespace backend_probe

/// Compile-time check of a compute backend `B` for scalar type `T`: every
/// operation of the contract above, each missing one failing with its own
/// message. Returns true, so it can sit in a static_assert.
template <class B, class T>
constexpr bool check_backend()
{
    namespace p = backend_probe;
    static_assert(p::has_name<B, T>::value, "biaffine backend contract: the backend has no name (const char*)");
    static_assert(p::has_operations<B, T>::value,
                  "biaffine backend contract: the backend has no operations (const char*)");
    static_assert(p::has_reads_items<B, T>::value, "biaffine backend contract: the backend has no reads_items (bool)");
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

}  // namespace detail
BIAFFINE_NAMESPACE_END
