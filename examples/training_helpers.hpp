// examples/training_helpers.hpp - what the training examples share: a
// random projective tree generator for synthetic treebanks and an Adam
// optimiser over a scorer's parameters(). Copy it along with the example.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <random>
#include <vector>

namespace example_helpers {

// A random projective tree over [lo, hi) attached to `parent`: pick a root
// near the middle, then cut each side into a few consecutive sub-spans, each a
// subtree of the root. Short arcs dominate, as in real treebanks.
inline void random_tree(std::size_t lo, std::size_t hi, std::size_t parent, std::vector<std::size_t>& heads,
                 std::mt19937_64& rng)
{
    if (lo >= hi) return;
    const std::size_t n = hi - lo;
    std::uniform_int_distribution<std::size_t> pick(0, n - 1);
    const std::size_t root = lo + (pick(rng) + pick(rng)) / 2;
    heads[root] = parent;
    auto side = [&](std::size_t a, std::size_t b) {
        while (a < b) {
            std::uniform_int_distribution<std::size_t> len(1, std::min<std::size_t>(b - a, 6));
            const std::size_t c = len(rng);
            // The piece nearest the root comes first on the right side, last on the left.
            if (b <= root) {
                random_tree(b - c, b, root, heads, rng);
                b -= c;
            } else {
                random_tree(a, a + c, root, heads, rng);
                a += c;
            }
        }
    };
    side(lo, root);
    side(root + 1, hi);
}

// Adam over a scorer's parameters (Kingma & Ba, with bias correction).
struct adam {
    double lr, beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
    std::size_t t = 0;
    std::vector<std::vector<double>> m, v;

    explicit adam(double learning_rate) : lr(learning_rate) {}

    template <class Scorer>
    void step(Scorer& scorer)
    {
        auto params = scorer.parameters();
        if (m.empty()) {
            for (const auto& p : params) {
                m.emplace_back(p.size, 0.0);
                v.emplace_back(p.size, 0.0);
            }
        }
        ++t;
        const double c1 = 1.0 - std::pow(beta1, double(t)), c2 = 1.0 - std::pow(beta2, double(t));
        for (std::size_t i = 0; i < params.size(); ++i) {
            auto& p = params[i];
            for (std::size_t j = 0; j < p.size; ++j) {
                const double g = p.grad[j];
                m[i][j] = beta1 * m[i][j] + (1 - beta1) * g;
                v[i][j] = beta2 * v[i][j] + (1 - beta2) * g * g;
                p.data[j] -= static_cast<float>(lr * (m[i][j] / c1) / (std::sqrt(v[i][j] / c2) + eps));
            }
        }
    }
};

}  // namespace example_helpers
