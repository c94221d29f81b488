// biaffine/fwd.hpp - forward declarations of the public types.
#pragma once

#include "biaffine/abi.hpp"

#include <cstddef>

BIAFFINE_NAMESPACE_BEGIN

struct work_tag;
struct output_tag;
struct memory_stats;
class memory_tracker;
class scoped_peak;
template <class T, class Tag>
class tracking_allocator;
class memory_log;
struct memory_checkpoint;

template <class T>
struct seq_view;
template <class T>
struct score_view;
template <class T>
class span;
template <class Signature>
class backprop_fn;
class workspace_scope;
template <class T>
class scratch;

enum class mode;
struct scorer_config;
struct batch_cost;
namespace detail {
template <class T>
struct scorer_backend_choice;  // detail/compute/backend.hpp
}  // namespace detail
// T: inputs, parameters, compute; Out: the scores, what streams out and
// their gradients (detail: converted from T per split where it differs).
template <class T, class Backend = typename detail::scorer_backend_choice<T>::type, class Out = T>
class biaffine_scorer;
/// The default backend's scorer of T with outputs in Out, e.g.
/// `scorer_with_output<float, bfloat16>` (bfloat16 scores, half the bytes).
template <class T, class Out>
using scorer_with_output = biaffine_scorer<T, typename detail::scorer_backend_choice<T>::type, Out>;

enum class budget_kind;
enum class oversize_policy;
struct budget;
struct batch_options;
template <class T, class Lengths>
class split_sequence;
template <class Inner>
class with_splits_layer;
template <class Inner>
class with_minibatch_by_padded_size_layer;
template <class Inner>
class with_pad_seq_unpad_matrix_layer;

BIAFFINE_NAMESPACE_END
