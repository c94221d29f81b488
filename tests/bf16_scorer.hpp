// Shared by the bf16 scorer tests (test_bf16_forward.cpp,
// test_scorer_bf16.cpp, test_bf16_train.cpp): a float scorer with a
// problem's sizes and weights (bf16_reference.hpp), and its splits as views.
#pragma once

#include <biaffine/scorer.hpp>

#include "bf16_reference.hpp"

#include <algorithm>
#include <vector>

namespace bf16_test {

/// A scorer config of the problem's sizes (fp32, probabilities: the defaults).
inline biaffine::scorer_config config_of(const problem& p)
{
    biaffine::scorer_config cfg;
    cfg.n_in = p.d.n_in;
    cfg.hidden = p.d.hidden;
    cfg.labels = p.d.labels;
    cfg.bias_u = p.d.bias_u;
    cfg.bias_v = p.d.bias_v;
    return cfg;
}

/// A float scorer of `cfg` holding the problem's weights.
inline biaffine::biaffine_scorer<float> scorer_of(const problem& p, const biaffine::scorer_config& cfg)
{
    biaffine::biaffine_scorer<float> s(cfg);
    auto params = s.parameters();  // Wh, bh, Wd, bd, W: the layouts of problem
    const std::vector<float>* src[] = {&p.wh, &p.bh, &p.wd, &p.bd, &p.w};
    for (std::size_t i = 0; i < 5; ++i) std::copy(src[i]->begin(), src[i]->end(), params[i].data);
    return s;
}

/// The problem's splits as read-only views.
inline std::vector<biaffine::seq_view<const float>> items_of(const problem& p)
{
    std::vector<biaffine::seq_view<const float>> items;
    for (std::size_t k = 0; k < p.lengths.size(); ++k)
        items.push_back({p.x[k].data(), p.lengths[k], p.d.n_in, static_cast<std::ptrdiff_t>(p.d.n_in), 1});
    return items;
}

}  // namespace bf16_test
