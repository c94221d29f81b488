// biaffine/scorer.hpp - the biaffine arc / label scorer (the reference model):
// its configuration, parameters and the split-list API.
//
//   head = relu(X Wh^T + bh),  dep = relu(X Wd^T + bd)     (dropout in training)
//   S[m, l, o] = sum_{i,j} [head, 1][l, i] W[o, i, j] [dep, 1][m, j]
//
// Rows m are dependents, columns l head candidates, labels last; the label
// axis is dropped when o == 1; in training the output is a softmax over the
// last axis. Two ways in:
//   - split lists (`predict`, `forward`): length-aware, each split scored on
//     its true length, no padding anywhere. This is what the batching layers
//     call.
//   - padded batches (`predict_padded`, `forward_padded`): `[b, L, n_in]` plus
//     lengths, output `[b, L, L(, o)]`, exactly the reference module's
//     interface (with_pad_seq_unpad_matrix and the golden tests use it). Still
//     no FLOPs on padding; padded cells hold the mask value (eval) or 0 (train).
// Projections and T = u.W' run once on the packed rows of all splits.
//
// The class is declared in one file and defined in one file per concern,
// all under detail/scorer/ (included here and nowhere else; each includes
// the declaration, never this header):
//   detail/scorer/declaration.hpp  the class: members, types, the public calls' documentation
//   detail/scorer/parameters.hpp   construction, initialisation, set_parameter
//   detail/scorer/cost.hpp         what a batch costs in bytes (the batcher's budget unit)
//   detail/scorer/forward.hpp      forward and backward over split lists
//   detail/scorer/padded.hpp       the padded (reference-compatible) interface
//   detail/scorer/heads.hpp        labels at given heads: its calls, costs and head lists
//   detail/scorer/bf16.hpp         what runs compute_precision::bf16 here (bf16 itself is the backend's)
//   detail/scorer/io.hpp           .npy save / load over parameters() (scorer_io.hpp)
// The output kinds (full scores, labels at heads) are policies in
// detail/output_kind.hpp, named in output_kind.hpp; the configuration is
// scorer_config.hpp.
// The arithmetic itself goes through the compute backend object the scorer
// holds (Backend; the default chosen in detail/compute/backend.hpp, the
// contract in detail/compute/interface.hpp).
#pragma once

#include "biaffine/output_kind.hpp"
#include "biaffine/scorer_config.hpp"
#include "biaffine/detail/scorer/declaration.hpp"
#include "biaffine/detail/scorer/parameters.hpp"
#include "biaffine/detail/scorer/cost.hpp"
#include "biaffine/detail/scorer/forward.hpp"
#include "biaffine/detail/scorer/padded.hpp"
#include "biaffine/detail/scorer/heads.hpp"
#include "biaffine/detail/scorer/bf16.hpp"
#include "biaffine/detail/scorer/io.hpp"
