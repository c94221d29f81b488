// biaffine/detail/random.hpp - the library's one source of uniform numbers:
// parameter initialisation (the scorer) and dropout masks (the compute
// backends' host_batch).
#pragma once

#include "biaffine/abi.hpp"

#include <random>

BIAFFINE_NAMESPACE_BEGIN
namespace detail {

/// A uniform double in [0, 1) from 53 random bits: the same on every
/// platform, unlike std::uniform_real_distribution.
inline double uniform01(std::mt19937_64& rng) { return static_cast<double>(rng() >> 11) * 0x1.0p-53; }

}  // namespace detail
BIAFFINE_NAMESPACE_END
