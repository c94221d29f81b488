// biaffine/version.hpp - the library version, the single source CMake parses.
#pragma once

#define BIAFFINE_VERSION_MAJOR 0
#define BIAFFINE_VERSION_MINOR 1
#define BIAFFINE_VERSION_PATCH 0

/// The version as one integer, MAJOR * 10000 + MINOR * 100 + PATCH.
#define BIAFFINE_VERSION (BIAFFINE_VERSION_MAJOR * 10000 + BIAFFINE_VERSION_MINOR * 100 + BIAFFINE_VERSION_PATCH)

namespace biaffine {
/// "MAJOR.MINOR.PATCH".
inline constexpr const char* version_string = "0.1.0";
}  // namespace biaffine
