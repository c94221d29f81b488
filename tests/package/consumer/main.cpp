// A downstream program: scores two small documents through the split-batched
// pipeline and checks every score against a naive computation in double
// written here from the model's definition, decodes heads, and checks the
// lazy split vectors of the spec. Exits non-zero on any mismatch.
#include <biaffine/biaffine.hpp>

#include <Eigen/Core>
#include <xtensor/xtensor.hpp>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <vector>

namespace {

int failures = 0;

void check(bool ok, const char* what)
{
    if (!ok) {
        std::printf("FAILED: %s\n", what);
        ++failures;
    }
}

// S[m, l] = sum_ij [relu(Wh x_l + bh), 1]_i W[0, i, j] [relu(Wd x_m + bd), 1]_j,
// read element by element from the scorer's parameters.
double naive_score(const biaffine::biaffine_scorer<float>& s, const float* x_dep, const float* x_head)
{
    const std::size_t h = s.hidden(), n_in = s.n_in();
    std::vector<double> u(h + 1, 1.0), v(h + 1, 1.0);
    for (std::size_t i = 0; i < h; ++i) {
        double a = s.head_bias()(i), b = s.dependent_bias()(i);
        for (std::size_t j = 0; j < n_in; ++j) {
            a += double(s.head_weight()(i, j)) * x_head[j];
            b += double(s.dependent_weight()(i, j)) * x_dep[j];
        }
        u[i] = a > 0 ? a : 0;
        v[i] = b > 0 ? b : 0;
    }
    double acc = 0;
    for (std::size_t i = 0; i <= h; ++i) {
        for (std::size_t j = 0; j <= h; ++j) acc += u[i] * double(s.bilinear_weight()(0, i, j)) * v[j];
    }
    return acc;
}

}  // namespace

int main()
{
#ifdef EXPECTED_VERSION
    // The package's version (CMake, parsed from version.hpp) and the header's agree.
    check(std::strcmp(biaffine::version_string, EXPECTED_VERSION) == 0, "version.hpp matches the package version");
#endif
    std::printf("biaffine %s (BIAFFINE_VERSION %d)\n", biaffine::version_string, BIAFFINE_VERSION);

    biaffine::scorer_config cfg;
    cfg.n_in = 6;
    cfg.hidden = 5;
    cfg.seed = 11;
    const biaffine::biaffine_scorer<float> scorer(cfg);

    // Document 0: xtensor [9, 6] with splits {4, 0, 5}; document 1: a
    // column-major Eigen matrix [3, 6] with one split.
    xt::xtensor<float, 2> doc0 = xt::xtensor<float, 2>::from_shape({9, 6});
    for (std::size_t r = 0; r < 9; ++r) {
        for (std::size_t c = 0; c < 6; ++c) doc0(r, c) = std::sin(float(1 + r * 6 + c));
    }
    Eigen::MatrixXf doc1(3, 6);
    for (int r = 0; r < 3; ++r) {
        for (int c = 0; c < 6; ++c) doc1(r, c) = std::cos(float(r * 7 + c));
    }

    auto pipeline = biaffine::with_splits(
        biaffine::with_minibatch_by_padded_size(scorer, biaffine::budget::bytes(1 << 20)));
    const biaffine::score_list<float> y0 = pipeline.predict(std::vector<xt::xtensor<float, 2>>{doc0},
                                                            std::vector<std::vector<int>>{{4, 0, 5}});
    const biaffine::score_list<float> y1 =
        pipeline.predict(std::vector<Eigen::MatrixXf>{doc1}, std::vector<std::vector<int>>{{3}});
    check(y0.size() == 3 && y1.size() == 1, "one score matrix per split");

    double worst = 0;
    const std::size_t starts[] = {0, 4, 4};
    for (std::size_t k = 0; k < y0.size(); ++k) {
        const std::size_t n = y0[k].shape()[0];
        for (std::size_t m = 0; m < n; ++m) {
            for (std::size_t l = 0; l < n; ++l) {
                const double ref = naive_score(scorer, &doc0(starts[k] + m, 0), &doc0(starts[k] + l, 0));
                worst = std::max(worst, std::abs(double(y0[k](m, l)) - ref) / (1.0 + std::abs(ref)));
            }
        }
    }
    for (int m = 0; m < 3; ++m) {
        for (int l = 0; l < 3; ++l) {
            float dep[6], head[6];
            for (int c = 0; c < 6; ++c) {
                dep[c] = doc1(m, c);
                head[c] = doc1(l, c);
            }
            const double ref = naive_score(scorer, dep, head);
            worst = std::max(worst, std::abs(double(y1[0](m, l)) - ref) / (1.0 + std::abs(ref)));
        }
    }
    std::printf("largest relative difference from the naive computation: %.2e\n", worst);
    check(worst < 1e-5, "scores match the naive computation");

    const std::vector<std::size_t> heads = biaffine::mst_heads(y0[2]);
    check(biaffine::is_tree(heads) && heads.size() == 5, "mst_heads gives a tree");
    check(biaffine::lazy_split(std::vector<float>{0, 1, 2, 3, 4}, 2) == std::vector<std::size_t>{2, 1, 1, 1},
          "lazy_split([0,1,2,3,4], 2) == [2,1,1,1]");
    check(biaffine::lazy_split(std::vector<float>{1, 0, 1, 0, 1}, 2) == std::vector<std::size_t>{2, 2, 1},
          "lazy_split([1,0,1,0,1], 2) == [2,2,1]");

    std::printf(failures == 0 ? "consumer OK\n" : "consumer FAILED\n");
    return failures == 0 ? 0 : 1;
}
