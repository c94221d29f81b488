// biaffine/detail/checked.hpp - overflow-checked 64-bit size arithmetic.
//
// Every size the library derives from caller input (count * L^2 * o * sizeof(T),
// offsets, budgets) goes through these, so a hostile length throws before any
// allocation instead of wrapping around to a small buffer.
#pragma once

#include "biaffine/abi.hpp"

#include <cstdint>
#include <limits>

#include "biaffine/errors.hpp"

BIAFFINE_NAMESPACE_BEGIN
namespace detail {

inline std::uint64_t checked_mul(std::uint64_t a, std::uint64_t b, const char* what)
{
    if (a != 0 && b > std::numeric_limits<std::uint64_t>::max() / a) {
        throw overflow_error(msg(what, ": size computation overflows 64 bits (", a, " * ", b, ")"));
    }
    return a * b;
}

inline std::uint64_t checked_add(std::uint64_t a, std::uint64_t b, const char* what)
{
    if (b > std::numeric_limits<std::uint64_t>::max() - a) {
        throw overflow_error(msg(what, ": size computation overflows 64 bits (", a, " + ", b, ")"));
    }
    return a + b;
}

/// Product of all arguments, checked.
template <class... Ts>
std::uint64_t checked_product(const char* what, std::uint64_t first, Ts... rest)
{
    std::uint64_t r = first;
    ((r = checked_mul(r, static_cast<std::uint64_t>(rest), what)), ...);
    return r;
}

/// A size that must also fit in std::size_t and Eigen::Index (ptrdiff_t).
inline std::size_t to_index_size(std::uint64_t v, const char* what)
{
    if (v > static_cast<std::uint64_t>(std::numeric_limits<std::ptrdiff_t>::max())) {
        throw overflow_error(msg(what, ": size ", v, " does not fit in a signed 64-bit index"));
    }
    return static_cast<std::size_t>(v);
}

}  // namespace detail
BIAFFINE_NAMESPACE_END
