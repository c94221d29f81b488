// biaffine/convert.hpp - one split's output copied into another scalar type,
// as a scorer with an output type apart from its value type stores it
// (biaffine_scorer<T, Backend, Out>): float <-> double casts, bfloat16
// rounded to nearest even from float, bfloat16 widened exactly. For a
// caller that streams outputs in the scorer's type and keeps them in another
// (the Python module's output='bfloat16').
#pragma once

#include "biaffine/abi.hpp"

#include <cstddef>
#include <string>

#include "biaffine/bfloat16.hpp"
#include "biaffine/detail/output_kind.hpp"
#include "biaffine/errors.hpp"
#include "biaffine/tensor.hpp"

BIAFFINE_NAMESPACE_BEGIN

/// dst = src in dst's scalar: one split's scores, `[n, n(, o)]` both (any
/// row strides; rows of n * o cells).
template <class O, class T>
void convert_output(const score_view<O>& dst, const score_view<const T>& src)
{
    if (dst.n != src.n || dst.labels != src.labels) {
        throw shape_error(detail::msg("convert_output: scores [", src.n, ", ", src.n, ", ", src.labels, "] into [",
                                      dst.n, ", ", dst.n, ", ", dst.labels, "]"));
    }
    if (src.n != 0 && (dst.data == nullptr || src.data == nullptr)) {
        throw shape_error("convert_output: a score view of " + std::to_string(src.n) + " rows has no data");
    }
    detail::full_scores_kind::convert(dst, src);
}

/// dst = src in dst's scalar: one split's labels at heads, `[n, o]` both
/// (any strides).
template <class O, class T>
void convert_output(const seq_view<O>& dst, const seq_view<const T>& src)
{
    if (dst.rows != src.rows || dst.cols != src.cols) {
        throw shape_error(detail::msg("convert_output: labels [", src.rows, ", ", src.cols, "] into [", dst.rows, ", ",
                                      dst.cols, "]"));
    }
    if (src.rows != 0 && src.cols != 0 && (dst.data == nullptr || src.data == nullptr)) {
        throw shape_error("convert_output: a label view of " + std::to_string(src.rows) + " rows has no data");
    }
    detail::labels_at_heads_kind::convert(dst, src);
}

BIAFFINE_NAMESPACE_END
