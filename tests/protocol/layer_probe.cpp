// Compile-only probes of the layer protocol (layer.hpp), run by ctest through
// the compiler (tests/CMakeLists.txt, layer_protocol_*): BIAFFINE_PROBE picks
// the case.
//   0  a user-written minimal split-list layer and a minimal padded layer:
//      pass check_*_layer and compile inside every combinator
//   1  a split-list layer without cost(): with_minibatch_by_padded_size must
//      fail with the protocol's message naming cost, not a page of templates
//   2  a padded layer without forward_padded(): with_pad_seq_unpad_matrix
//   3  a layer without value_type: with_splits
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "biaffine/with_minibatch_by_padded_size.hpp"
#include "biaffine/with_pad_seq_unpad_matrix.hpp"
#include "biaffine/with_splits.hpp"

#ifndef BIAFFINE_PROBE
#error "define BIAFFINE_PROBE (0 to 3)"
#endif

namespace probe {

using T = float;

// What a user writes for a split-list layer: scores of zeros, `[n, n]` each.
struct minimal_layer {
    using value_type = T;
    using backprop_type = biaffine::split_backprop<T>;

    std::size_t n_in() const { return 4; }
    std::size_t labels() const { return 1; }
    biaffine::score_tensor<T>::shape_type score_shape(std::size_t n) const { return {n, n}; }
#if BIAFFINE_PROBE != 1
    biaffine::batch_cost cost(std::size_t count, std::size_t max_len, biaffine::mode = biaffine::mode::eval) const
    {
        biaffine::batch_cost c;
        c.outputs = count * max_len * max_len * sizeof(T);
        return c;
    }
#endif
    template <class Items>
    biaffine::score_list<T> predict(const Items& X) const
    {
        biaffine::score_list<T> Y;
        for (std::size_t k = 0; k < X.size(); ++k) Y.push_back(xt::zeros<T>(score_shape(X[k].rows)));
        return Y;
    }
    template <class Items, class Sink>
    void predict_stream(const Items& X, Sink&& sink) const
    {
        const biaffine::score_list<T> Y = predict(X);
        for (std::size_t k = 0; k < Y.size(); ++k) sink(k, biaffine::as_score_view(Y[k]));
    }
    template <class Items>
    std::pair<biaffine::score_list<T>, backprop_type> forward(const Items& X, biaffine::mode = biaffine::mode::train)
    {
        return {predict(X), backprop_type([](biaffine::span<const biaffine::score_view<const T>>,
                                             biaffine::span<const biaffine::seq_view<T>>) {})};
    }
};

// What a user writes for a padded layer: `[b, L, n_in]` in, `[b, L, L]` out.
struct minimal_padded_layer {
    using value_type = T;
    using padded_backprop_type = biaffine::backprop_fn<biaffine::tensor<T, 3>(const biaffine::score_array<T>&)>;

    std::size_t n_in() const { return 4; }
    std::size_t labels() const { return 1; }
    biaffine::score_tensor<T>::shape_type score_shape(std::size_t n) const { return {n, n}; }
    biaffine::batch_cost padded_cost(std::size_t, std::size_t, biaffine::mode = biaffine::mode::eval) const
    {
        return {};
    }
    template <class X3, class Lengths>
    biaffine::score_array<T> predict_padded(const X3& x, const Lengths&) const
    {
        return xt::zeros<T>({x.shape()[0], x.shape()[1], x.shape()[1]});
    }
#if BIAFFINE_PROBE != 2
    template <class X3, class Lengths>
    std::pair<biaffine::score_array<T>, padded_backprop_type> forward_padded(const X3& x, const Lengths& lengths,
                                                                             biaffine::mode)
    {
        const auto shape = x.shape();
        return {predict_padded(x, lengths), padded_backprop_type([shape](const biaffine::score_array<T>&) {
                    return biaffine::tensor<T, 3>(xt::zeros<T>(shape));
                })};
    }
#endif
};

struct no_value_type {
    std::size_t n_in() const { return 4; }
};

}  // namespace probe

int main()
{
    using namespace biaffine;
    std::vector<xt::xtensor<probe::T, 2>> docs{xt::zeros<probe::T>({std::size_t(5), std::size_t(4)})};
    std::vector<std::vector<int>> lengths{{2, 3}};
#if BIAFFINE_PROBE == 0
    static_assert(check_split_layer<probe::minimal_layer>());
    static_assert(check_padded_layer<probe::minimal_padded_layer>());
    probe::minimal_layer layer;
    probe::minimal_padded_layer padded;
    auto a = with_splits(with_minibatch_by_padded_size(layer, budget::items(16)));
    auto b = with_splits(with_minibatch_by_padded_size(with_pad_seq_unpad_matrix(padded), budget::items(16)));
    const std::size_t n = a.predict(docs, lengths).size() + b.predict(docs, lengths).size();
    auto fa = a.forward(docs, lengths);
    auto fb = b.forward(docs, lengths);
    return n == 4 && fa.first.size() == 2 && fb.first.size() == 2 ? 0 : 1;
#elif BIAFFINE_PROBE == 1
    probe::minimal_layer layer;
    return static_cast<int>(with_minibatch_by_padded_size(layer, budget::items(16)).labels());
#elif BIAFFINE_PROBE == 2
    probe::minimal_padded_layer padded;
    return static_cast<int>(with_pad_seq_unpad_matrix(padded).labels());
#elif BIAFFINE_PROBE == 3
    probe::no_value_type bare;
    return static_cast<int>(with_splits(bare).n_in());
#endif
}
