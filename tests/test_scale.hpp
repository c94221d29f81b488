// tests/test_scale.hpp - BIAFFINE_TEST_SCALE (default 1; the sanitizer run,
// scripts/ci_sanitize.sh, uses 0.25) scales the repetition counts of the
// tests' random and stress loops: how many draws or calls, never which
// shapes, sizes or paths a test covers.
#pragma once

#include <algorithm>
#include <cstdlib>

namespace biaffine_test {

inline double test_scale()
{
    const char* s = std::getenv("BIAFFINE_TEST_SCALE");
    const double v = s != nullptr ? std::atof(s) : 1.0;
    return v > 0 ? v : 1.0;
}

/// n scaled by BIAFFINE_TEST_SCALE, at least 1.
inline int scaled(int n) { return std::max(1, static_cast<int>(n * test_scale())); }

}  // namespace biaffine_test
