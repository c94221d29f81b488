// biaffine/detail/scorer/bf16.hpp - what runs a float scorer's
// compute_precision::bf16 (bf16_arithmetic). The bf16 inference and training
// themselves are the backend's (detail/compute/backend.hpp: bf16_products,
// the same calls as fp32).
#pragma once

#include "biaffine/abi.hpp"

#include <type_traits>

#include "biaffine/detail/compute/backend.hpp"
#include "biaffine/detail/scorer/declaration.hpp"

BIAFFINE_NAMESPACE_BEGIN

template <class T, class Backend, class Out>
const char* biaffine_scorer<T, Backend, Out>::bf16_arithmetic() noexcept
{
    if constexpr (std::is_same<T, float>::value) {
        return detail::scorer_bf16_forward::math_name();
    } else {
        return "none (compute_precision::bf16 needs a float scorer)";
    }
}

BIAFFINE_NAMESPACE_END
