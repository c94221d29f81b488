// biaffine/output_kind.hpp - the library's output kinds by public name: the
// `Kind` of the layers' and the scorer's `*_as<Kind>` members (predict_as,
// forward_as, cost_as, ...). The policies themselves are in
// detail/output_kind.hpp (docs/architecture.md, "Output kinds").
#pragma once

#include "biaffine/abi.hpp"

#include "biaffine/detail/output_kind.hpp"

BIAFFINE_NAMESPACE_BEGIN

/// Full scores: `[n, n(, o)]` per split (predict, forward, ...); no arguments.
using full_scores_kind = detail::full_scores_kind;
/// Labels at given heads: `[n, o]` per split (predict_heads, ...); its
/// argument is the heads.
using labels_at_heads_kind = detail::labels_at_heads_kind;
/// The argument of a kind that takes none.
using no_heads = detail::no_heads;

BIAFFINE_NAMESPACE_END
