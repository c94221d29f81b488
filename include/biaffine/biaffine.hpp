// biaffine/biaffine.hpp - the umbrella header: everything public.
#pragma once

#include "biaffine/version.hpp"
#include "biaffine/fwd.hpp"
#include "biaffine/errors.hpp"
#include "biaffine/memory.hpp"
#include "biaffine/memory_log.hpp"
#include "biaffine/tensor.hpp"
#include "biaffine/backprop.hpp"
#include "biaffine/workspace.hpp"
#include "biaffine/pairwise_bilinear.hpp"
#include "biaffine/scorer.hpp"
#include "biaffine/batching.hpp"
#include "biaffine/with_pad_seq_unpad_matrix.hpp"
#include "biaffine/with_minibatch_by_padded_size.hpp"
#include "biaffine/with_splits.hpp"
#include "biaffine/decode.hpp"
#include "biaffine/lazy_split.hpp"
