// biaffine/detail/scorer/parameters.hpp - the scorer's construction and the
// writes of its parameters: checked sizes, initialisation from a seed,
// set_parameter.
#pragma once

#include "biaffine/abi.hpp"

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "biaffine/detail/checked.hpp"
#include "biaffine/detail/random.hpp"
#include "biaffine/detail/scorer/declaration.hpp"
#include "biaffine/errors.hpp"
#include "biaffine/scorer_config.hpp"
#include "biaffine/tensor.hpp"

BIAFFINE_NAMESPACE_BEGIN

template <class T, class Backend, class Out>
biaffine_scorer<T, Backend, Out>::biaffine_scorer(const scorer_config& cfg)
    : cfg_(cfg), rng_(cfg.seed ^ 0x9e3779b97f4a7c15ULL), backend_(dims())
{
    if (cfg.n_in == 0 || cfg.hidden == 0 || cfg.labels == 0) {
        throw shape_error(detail::msg("biaffine_scorer: n_in, hidden and labels must be positive, got n_in=",
                                      cfg.n_in, " hidden=", cfg.hidden, " labels=", cfg.labels));
    }
    if (!(cfg.dropout >= 0.0 && cfg.dropout < 1.0)) {
        throw error(detail::msg("biaffine_scorer: dropout must be in [0, 1), got ", cfg.dropout));
    }
    if (cfg.precision == compute_precision::bf16 && !std::is_same<T, float>::value) {
        throw error("biaffine_scorer: compute_precision::bf16 needs a float scorer (this one is double)");
    }
    if (cfg.precision == compute_precision::bf16 && !detail::backend_runs_bf16<Backend>::value) {
        throw error("biaffine_scorer: compute_precision::bf16 needs a backend that computes in bf16 (its "
                    "runs_bf16 is true; the default float backend's is): this one would compute in fp32");
    }
    // Every size the parameters and their gradients take, checked before
    // xtensor multiplies the shapes out unchecked.
    const char* what = "biaffine_scorer parameters";
    const std::uint64_t side = detail::checked_add(cfg.hidden, 1, what);
    std::uint64_t total = detail::checked_product(what, 2, cfg.hidden, cfg.n_in, sizeof(T));
    total = detail::checked_add(total, detail::checked_product(what, 2, cfg.hidden, sizeof(T)), what);
    total = detail::checked_add(total, detail::checked_product(what, cfg.labels, side, side, sizeof(T)), what);
    detail::to_index_size(detail::checked_mul(total, 2, what), what);  // values and gradients
    const std::size_t h = cfg.hidden;
    wh_ = tensor<T, 2>::from_shape({h, cfg.n_in});
    wd_ = tensor<T, 2>::from_shape({h, cfg.n_in});
    bh_ = tensor<T, 1>::from_shape({h});
    bd_ = tensor<T, 1>::from_shape({h});
    w_ = tensor<T, 3>::from_shape({cfg.labels, hu(), hv()});
    initialize(cfg.seed);
}

template <class T, class Backend, class Out>
void biaffine_scorer<T, Backend, Out>::initialize(std::uint64_t seed)
{
    std::mt19937_64 rng(seed);
    auto fill = [&](auto& a, double bound) {
        for (auto& x : a) x = static_cast<T>((2.0 * detail::uniform01(rng) - 1.0) * bound);
    };
    const double lin = 1.0 / std::sqrt(static_cast<double>(cfg_.n_in));
    fill(wh_, lin);
    fill(bh_, lin);
    fill(wd_, lin);
    fill(bd_, lin);
    // Xavier-uniform with PyTorch's fans for a 3-d tensor [o, hu, hv].
    const double fan_in = static_cast<double>(hu() * hv());
    const double fan_out = static_cast<double>(cfg_.labels * hv());
    fill(w_, std::sqrt(6.0 / (fan_in + fan_out)));
    parameters_changed();
}

template <class T, class Backend, class Out>
template <class E>
void biaffine_scorer<T, Backend, Out>::set_parameter(const std::string& name, const E& value)
{
    for (parameter& p : all_parameters<T>(*this)) {  // values only: no gradients allocated
        if (name != p.name) continue;
        std::vector<std::size_t> got(value.shape().begin(), value.shape().end());
        if (got != p.shape) {
            throw shape_error(detail::msg("set_parameter(", name, "): expected shape ", detail::shape_str(p.shape),
                                          ", got ", detail::shape_str(got)));
        }
        std::size_t i = 0;
        for (auto it = value.begin(); it != value.end(); ++it) p.data[i++] = static_cast<T>(*it);
        parameters_changed();
        return;
    }
    throw error(detail::msg("set_parameter: no parameter named '", name, "'"));
}

BIAFFINE_NAMESPACE_END
