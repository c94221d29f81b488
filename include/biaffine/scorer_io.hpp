// biaffine/scorer_io.hpp - the scorer's parameters to and from .npy files:
// `biaffine::save_npy(scorer, dir)` and `biaffine::load_npy(scorer, dir)`,
// one `<name>.npy` per entry of parameters(). Defined in
// detail/scorer/io.hpp, which scorer.hpp includes (its deprecated members
// call them); this header is the public name of that part.
#pragma once

#include "biaffine/abi.hpp"

#include "biaffine/scorer.hpp"
