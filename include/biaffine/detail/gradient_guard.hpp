// biaffine/detail/gradient_guard.hpp - all-or-nothing gradient accumulation across batches.
//
// A backprop that runs several batches accumulates each batch's parameter
// gradients as it goes, so a throw in batch j (std::bad_alloc under a memory
// limit, say) would leave batches 0..j-1 summed in. The guard copies the
// gradient buffers before the first batch and copies them back if the guarded
// region is left by an exception: one parameter-sized copy per backprop call,
// which is cheaper than giving every batch private gradients to add in at the
// end, and the bytes do not grow with the input.
//
// Layers are searched for gradients through `parameters()` (a range of
// records with `grad` and `size`, as biaffine_scorer has) or `inner()` (the
// batching layers); a layer with neither is not protected.
#pragma once

#include "biaffine/abi.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <utility>

#include "biaffine/tensor.hpp"

BIAFFINE_NAMESPACE_BEGIN
namespace detail {

template <class L, class = void>
struct has_parameters : std::false_type {};
template <class L>
struct has_parameters<L, std::void_t<decltype(std::declval<L&>().parameters().begin()->grad),
                                     decltype(std::declval<L&>().parameters().begin()->size)>> : std::true_type {};

template <class L, class = void>
struct has_inner : std::false_type {};
template <class L>
struct has_inner<L, std::void_t<decltype(std::declval<L&>().inner())>> : std::true_type {};

template <class T>
class gradient_guard {
public:
    gradient_guard() = default;
    gradient_guard(const gradient_guard&) = delete;
    gradient_guard& operator=(const gradient_guard&) = delete;

    /// Snapshots the gradient buffers of `layer` (and of the layers inside it).
    template <class Layer>
    void capture(Layer& layer)
    {
        collect(layer);
        std::size_t total = 0;
        for (const auto& b : buffers_) total += b.second;
        saved_.resize(total);
        std::size_t at = 0;
        for (const auto& b : buffers_) {
            std::copy(b.first, b.first + b.second, saved_.data() + at);
            at += b.second;
        }
        armed_ = true;
    }

    /// At most the bytes capture(layer) takes: the snapshot, and the list of
    /// buffers (below 3 entries per parameter while push_back grows it).
    template <class Layer>
    static std::uint64_t bytes(const Layer& layer)
    {
        if constexpr (has_parameters<const Layer>::value) {
            std::uint64_t total = 0;
            for (const auto& p : layer.parameters()) {
                total += static_cast<std::uint64_t>(p.size) * sizeof(T) + 3 * sizeof(std::pair<T*, std::size_t>);
            }
            return total;
        } else if constexpr (has_inner<const Layer>::value) {
            return bytes(layer.inner());
        } else {
            return 0;
        }
    }

    /// The guarded region succeeded: keep the new gradients.
    void dismiss() noexcept { armed_ = false; }

    ~gradient_guard()
    {
        if (!armed_) return;
        std::size_t at = 0;
        for (const auto& b : buffers_) {
            std::copy(saved_.data() + at, saved_.data() + at + b.second, b.first);
            at += b.second;
        }
    }

private:
    template <class Layer>
    void collect(Layer& layer)
    {
        if constexpr (has_parameters<Layer>::value) {
            for (auto& p : layer.parameters()) {
                static_assert(std::is_same<std::remove_cv_t<std::remove_pointer_t<decltype(p.grad)>>, T>::value,
                              "gradient_guard: gradient type differs from the layer's value type");
                buffers_.push_back({p.grad, static_cast<std::size_t>(p.size)});
            }
        } else if constexpr (has_inner<Layer>::value) {
            collect(layer.inner());
        }
    }

    tracked_vector<std::pair<T*, std::size_t>> buffers_;
    tracked_vector<T> saved_;
    bool armed_ = false;
};

}  // namespace detail
BIAFFINE_NAMESPACE_END
