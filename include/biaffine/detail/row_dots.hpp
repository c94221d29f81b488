// biaffine/detail/row_dots.hpp - moved to detail/compute/row_dots.hpp (the
// small products are compute); this forwarding header keeps old includes
// working.
#pragma once

#include "biaffine/detail/compute/row_dots.hpp"
