// biaffine/detail/function_ref.hpp - a non-owning reference to a callable,
// for the batcher's schedule: one compiled copy of the scheduler per scalar
// instead of one per call site. Every layer stack, kind and call (predict,
// forward, stream) hands the scheduler lambdas of their own types, and a
// template over them compiled the whole scheduler (threads, planning, turns)
// again for each: most of a test group's code. An indirect call per batch
// (or per planned length) costs nothing beside a batch's products.
#pragma once

#include "biaffine/abi.hpp"

#include <memory>
#include <type_traits>
#include <utility>

BIAFFINE_NAMESPACE_BEGIN
namespace detail {

template <class Signature>
class function_ref;

/// Refers to a callable that outlives it (a lambda of the caller's frame);
/// copies refer to the same callable.
template <class R, class... Args>
class function_ref<R(Args...)> {
public:
    template <class F, class = std::enable_if_t<!std::is_same<std::decay_t<F>, function_ref>::value>>
    function_ref(F&& f) noexcept  // NOLINT: implicit, as a function parameter takes a lambda
        : object_(const_cast<void*>(static_cast<const void*>(std::addressof(f)))),
          call_([](void* o, Args... a) -> R {
              return (*static_cast<std::remove_reference_t<F>*>(o))(std::forward<Args>(a)...);
          })
    {
    }
    R operator()(Args... a) const { return call_(object_, std::forward<Args>(a)...); }

private:
    void* object_;
    R (*call_)(void*, Args...);
};

}  // namespace detail
BIAFFINE_NAMESPACE_END
