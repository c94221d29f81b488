// biaffine/backprop.hpp - the move-only, call-once callback a forward returns.
//
// A forward returns (Y, backprop). The callback owns what backward needs
// (moved in, never referenced), frees it as soon as it has run, and throws
// biaffine::backprop_error when called a second time: accumulating parameter
// gradients twice by accident is a silent training bug otherwise.
#pragma once

#include "biaffine/abi.hpp"

#include <memory>
#include <type_traits>
#include <utility>

#include "biaffine/errors.hpp"

BIAFFINE_NAMESPACE_BEGIN

template <class Signature>
class backprop_fn;

/// Type-erased, move-only, single-use callable `R(Args...)`. Not thread-safe:
/// call it from one thread (it accumulates into the layer's gradients).
template <class R, class... Args>
class backprop_fn<R(Args...)> {
public:
    backprop_fn() = default;

    template <class F, class = std::enable_if_t<!std::is_same<std::decay_t<F>, backprop_fn>::value>>
    explicit backprop_fn(F&& f) : impl_(std::make_unique<model<std::decay_t<F>>>(std::forward<F>(f)))
    {
    }

    backprop_fn(backprop_fn&&) noexcept = default;
    backprop_fn& operator=(backprop_fn&&) noexcept = default;
    backprop_fn(const backprop_fn&) = delete;
    backprop_fn& operator=(const backprop_fn&) = delete;

    /// True until the callback has been called (or if it was never set).
    explicit operator bool() const noexcept { return static_cast<bool>(impl_); }

    /// Runs backward once. The captured state is released when it returns,
    /// whether it returns normally or throws.
    R operator()(Args... args)
    {
        if (!impl_) {
            throw backprop_error(called_ ? "backprop called a second time: each forward's callback runs once"
                                         : "backprop called on an empty callback");
        }
        called_ = true;
        std::unique_ptr<concept_t> impl = std::move(impl_);
        return impl->call(std::forward<Args>(args)...);
    }

private:
    struct concept_t {
        virtual ~concept_t() = default;
        virtual R call(Args... args) = 0;
    };
    template <class F>
    struct model final : concept_t {
        explicit model(F f) : fn(std::move(f)) {}
        R call(Args... args) override { return fn(std::forward<Args>(args)...); }
        F fn;
    };

    std::unique_ptr<concept_t> impl_;
    bool called_ = false;
};

BIAFFINE_NAMESPACE_END
