// biaffine/mode.hpp - the mode of a forward pass. Its own header since the
// compute backends take it too (device_bytes, dropout), and they sit below
// the layers (layer.hpp), which they must not include.
#pragma once

#include "biaffine/abi.hpp"

BIAFFINE_NAMESPACE_BEGIN

/// Evaluation mode of a forward pass: `train` applies dropout and the softmax.
enum class mode { eval, train };

BIAFFINE_NAMESPACE_END
