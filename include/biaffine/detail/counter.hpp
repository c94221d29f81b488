// biaffine/detail/counter.hpp - an atomic counter that layers can still be moved with.
#pragma once

#include "biaffine/abi.hpp"

#include <atomic>
#include <cstdint>

BIAFFINE_NAMESPACE_BEGIN
namespace detail {

// std::atomic is neither copyable nor movable, which would pin every layer
// holding a statistic in place; this one copies its current value.
class counter {
public:
    counter() = default;
    counter(const counter& other) noexcept : value_(other.load()) {}
    counter& operator=(const counter& other) noexcept
    {
        value_.store(other.load());
        return *this;
    }
    counter& operator=(std::uint64_t v) noexcept
    {
        value_.store(v);
        return *this;
    }
    std::uint64_t load() const noexcept { return value_.load(std::memory_order_relaxed); }
    counter& operator++() noexcept
    {
        value_.fetch_add(1, std::memory_order_relaxed);
        return *this;
    }
    void add(std::uint64_t v) noexcept { value_.fetch_add(v, std::memory_order_relaxed); }

private:
    std::atomic<std::uint64_t> value_{0};
};

}  // namespace detail
BIAFFINE_NAMESPACE_END
