// biaffine/detail/scorer/heads.hpp - the scorer's labels at given heads: per
// split, `L[m, o] = S[m, head[m], o]` without the `[n, n, o]` scores.
//
// The projections and T = U W' run on the packed rows as for full scores
// (same dropout masks from the same seed draw); then each dependent m takes
// the row of T at its head, viewed `[o, hv]`, times its own V row: O(n o hv)
// per split where the full scores cost O(n^2 o hv). Backward scatters dy
// into dT at the head rows. The path itself is the full scores' one, with
// the labels_at_heads_kind policy (scorer/forward.hpp, output_kind.hpp);
// this file holds the public calls, the cost and the head lists.
#pragma once

#include "biaffine/abi.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "biaffine/detail/checked.hpp"
#include "biaffine/detail/compute/backend.hpp"
#include "biaffine/detail/output_kind.hpp"
#include "biaffine/errors.hpp"
#include "biaffine/detail/scorer/declaration.hpp"
#include "biaffine/tensor.hpp"
#include "biaffine/workspace.hpp"

BIAFFINE_NAMESPACE_BEGIN
// ------------------------------------------------------------ public calls

template <class T, class Backend, class Out>
template <class Items, class Heads>
score_list<Out> biaffine_scorer<T, Backend, Out>::predict_heads(const Items& X, const Heads& H) const
{
    return predict_as<detail::labels_at_heads_kind>(X, H);
}

template <class T, class Backend, class Out>
template <class Items, class Heads, class Sink>
void biaffine_scorer<T, Backend, Out>::predict_heads_stream(const Items& X, const Heads& H, Sink&& sink) const
{
    predict_stream_as<detail::labels_at_heads_kind>(X, H, sink);
}

template <class T, class Backend, class Out>
template <class Items, class Heads, class Dest, class Sink>
void biaffine_scorer<T, Backend, Out>::predict_heads_stream_into(const Items& X, const Heads& H, Dest&& dest,
                                                                 Sink&& sink) const
{
    stream_into<detail::labels_at_heads_kind>(X, H, dest, sink);
}

template <class T, class Backend, class Out>
template <class Items, class Heads>
std::pair<score_list<Out>, typename biaffine_scorer<T, Backend, Out>::heads_backprop_type>
biaffine_scorer<T, Backend, Out>::forward_heads(const Items& X, const Heads& H, mode m)
{
    return forward_as<detail::labels_at_heads_kind>(X, H, m);
}

template <class T, class Backend, class Out>
template <class X3, class Lengths, class Heads2>
score_array<Out> biaffine_scorer<T, Backend, Out>::predict_heads_padded(const X3& x, const Lengths& lengths, const Heads2& heads) const
{
    return predict_padded_as<detail::labels_at_heads_kind>(x, lengths, heads);
}

template <class T, class Backend, class Out>
template <class X3, class Lengths, class Heads2>
std::pair<score_array<Out>, typename biaffine_scorer<T, Backend, Out>::padded_backprop_type>
biaffine_scorer<T, Backend, Out>::forward_heads_padded(const X3& x, const Lengths& lengths, const Heads2& heads, mode m)
{
    return forward_padded_as<detail::labels_at_heads_kind>(x, lengths, heads, m);
}

// ------------------------------------------------------------------ costs

template <class T, class Backend, class Out>
batch_cost biaffine_scorer<T, Backend, Out>::heads_cost(std::size_t count, std::size_t max_len, mode m) const
{
    return kind_cost<detail::labels_at_heads_kind>(count, max_len, m);
}

template <class T, class Backend, class Out>
batch_cost biaffine_scorer<T, Backend, Out>::padded_heads_cost(std::size_t count, std::size_t max_len, mode m) const
{
    return padded_cost_as<detail::labels_at_heads_kind>(count, max_len, m);
}

BIAFFINE_NAMESPACE_END
