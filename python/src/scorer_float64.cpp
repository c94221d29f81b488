// python/src/scorer_float64.cpp - the biaffine_scorer_float64 class (scorer_calls.hpp).
#include "scorer_calls.hpp"

namespace biaffine_py {

void bind_scorer_float64(py::module_& m) { bind_scorer<double>(m, "biaffine_scorer_float64"); }

}  // namespace biaffine_py
