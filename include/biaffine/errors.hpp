// biaffine/errors.hpp - the exception types every layer throws on bad input.
//
// All derive from biaffine::error (itself a std::invalid_argument), so a caller
// can catch the whole family or one kind. Messages name what is wrong and
// where: the document / split index, the expected and the actual value.
#pragma once

#include "biaffine/abi.hpp"

#include <cstddef>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

BIAFFINE_NAMESPACE_BEGIN

/// Base of every exception the library throws for bad input or misuse.
class error : public std::invalid_argument {
public:
    explicit error(const std::string& what) : std::invalid_argument(what) {}
};

/// A shape or width does not match (rows vs split lengths, n_in vs weights,
/// gradient shapes, parameter arrays).
class shape_error : public error {
public:
    using error::error;
};

/// A length is invalid: negative, or larger than what it indexes.
class length_error : public error {
public:
    using error::error;
};

/// A budget is zero, too small under the `throw` oversize policy, or a size
/// computation would overflow 64-bit arithmetic or a configured limit.
class budget_error : public error {
public:
    using error::error;
};

/// A size computation overflowed (checked 64-bit arithmetic).
class overflow_error : public budget_error {
public:
    using budget_error::budget_error;
};

/// A list of heads (labels at given heads) is missing, of the wrong length,
/// or holds an index outside its split's `0..n-1`.
class head_error : public error {
public:
    using error::error;
};

/// A backprop callback was called twice, or after being moved from.
class backprop_error : public error {
public:
    using error::error;
};

namespace detail {

/// Builds a message from stream-able pieces: `msg("split ", k, ": expected ", a)`.
template <class... Args>
std::string msg(Args&&... args)
{
    std::ostringstream os;
    (os << ... << std::forward<Args>(args));
    return os.str();
}

}  // namespace detail
BIAFFINE_NAMESPACE_END
