// python/src/scorer_float32.cpp - the biaffine_scorer_float32 class (scorer_calls.hpp).
#include "scorer_calls.hpp"

namespace biaffine_py {

void bind_scorer_float32(py::module_& m) { bind_scorer<float>(m, "biaffine_scorer_float32"); }

}  // namespace biaffine_py
