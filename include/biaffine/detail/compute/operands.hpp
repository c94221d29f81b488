// biaffine/detail/compute/operands.hpp - what the scorer hands its compute
// backend: the sizes, the parameters, the packed rows of a batch.
#pragma once

#include "biaffine/abi.hpp"

#include <algorithm>
#include <cstddef>
#include <type_traits>
#include <utility>

#include "biaffine/tensor.hpp"

BIAFFINE_NAMESPACE_BEGIN
namespace detail {

/// The sizes every compute operation of the scorer needs.
struct scorer_dims {
    std::size_t n_in = 0;   ///< input width
    std::size_t hidden = 0; ///< h
    std::size_t labels = 1; ///< o
    bool bias_u = true;     ///< head side carries a column of ones
    bool bias_v = true;     ///< dependent side carries a column of ones
    /// compute_precision::bf16 (float scorers): the backend runs inference
    /// and training in bf16 (host_batch with bf16_products); the scorer
    /// refuses it on a backend whose runs_bf16 is not true.
    bool bf16 = false;
    std::size_t hu() const noexcept { return hidden + (bias_u ? 1 : 0); } ///< head width of W
    std::size_t hv() const noexcept { return hidden + (bias_v ? 1 : 0); } ///< dependent width of W
};

/// The parameters, row-major: Wh, Wd `[h, n_in]`, bh, bd `[h]`, W `[o, hu, hv]`.
template <class T>
struct weights_ref {
    const T* wh;
    const T* bh;
    const T* wd;
    const T* bd;
    const T* w;
};

/// Their gradients, same layouts; every backend accumulates into them.
template <class T>
struct grads_ref {
    T* wh;
    T* bh;
    T* wd;
    T* bd;
    T* w;
};

/// The activations the relu backward reads: U `[N, hu]` and V `[N, hv]` as
/// the forward left them (after relu and dropout), and the scale dropout
/// gave the kept units (1 without dropout).
template <class T>
struct relu_ref {
    const T* u;
    const T* v;
    T scale;
};

/// Walks the rows of a batch's splits in order (split 0's rows, then split
/// 1's, ...; empty splits skipped): take(m) gives the next run of up to m
/// rows of one split. `get(k)` returns split k's view (a seq_view); taking
/// past the batch's last row is the caller's error.
template <class Get>
class split_rows {
public:
    using view = std::decay_t<decltype(std::declval<const Get&>()(std::size_t{0}))>;
    /// Rows [first, first + rows) of the split `x`.
    struct run {
        view x;
        std::size_t first;
        std::size_t rows;
    };
    explicit split_rows(Get get) : get_(std::move(get)) {}
    run take(std::size_t most)
    {
        while (i_ >= x_.rows) {  // past this split (or an empty one)
            x_ = get_(k_++);
            i_ = 0;
        }
        const run r{x_, i_, std::min(most, x_.rows - i_)};
        i_ += r.rows;
        return r;
    }

private:
    Get get_;
    view x_{};
    std::size_t k_ = 0, i_ = 0;
};
template <class Get>
split_rows<Get> walk_rows(Get get)
{
    return split_rows<Get>(std::move(get));
}

/// Copies the splits `X[k]` (any strides) into the packed rows `xp [N,
/// n_in]`, split k from row off[k].
template <class Items, class T>
void gather_rows(const Items& X, const std::size_t* off, std::size_t n_in, T* xp)
{
    for (std::size_t k = 0; k < X.size(); ++k) {
        copy_rows(read_only(X[k]), xp + off[k] * n_in);
    }
}

/// The inverse: packed rows `xp [N, n_in]` out to the splits' slots dX[k].
template <class T>
void scatter_rows(const T* xp, const std::size_t* off, std::size_t n_in, span<const seq_view<T>> dX)
{
    for (std::size_t k = 0; k < dX.size(); ++k) copy_rows(xp + off[k] * n_in, dX[k]);
}

}  // namespace detail
BIAFFINE_NAMESPACE_END
