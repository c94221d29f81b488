// tests/odr_b.cpp: the second translation unit of the ODR test (see
// odr_a.cpp), built for another ISA level than odr_a.cpp where the target
// allows (tests/CMakeLists.txt). This unit: training through the pipeline in
// float and double (forward in train mode, backprop), input gradients checked
// against central finite differences in double; head decoding and lazy
// splitting; its ABI name and float backend.
#include <biaffine/biaffine.hpp>

#include <xtensor/xtensor.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <sstream>
#include <string>
#include <vector>

namespace {

// sum over splits of <dY, Y> for the pipeline's train-mode output Y.
template <class Pipeline, class Docs>
double weighted_sum(Pipeline& p, const Docs& docs, const std::vector<std::vector<int>>& lengths,
                    const std::vector<xt::xtensor<double, 2>>& dy)
{
    auto [y, bp] = p.forward(docs, lengths, biaffine::mode::train);
    double s = 0;
    for (std::size_t k = 0; k < y.size(); ++k) {
        for (std::size_t i = 0; i < y[k].size(); ++i) s += double(y[k].data()[i]) * dy[k].data()[i];
    }
    return s;
}

// Backprop of the pipeline in T against finite differences of the double
// pipeline with the same parameters; returns the number of failures.
template <class T>
int check_training(const char* type, double tol, std::string& log)
{
    biaffine::scorer_config cfg;
    cfg.n_in = 4;
    cfg.hidden = 5;
    cfg.seed = 9;
    biaffine::biaffine_scorer<T> scorer(cfg);
    biaffine::biaffine_scorer<double> ref(cfg);
    for (auto& p : scorer.parameters()) {
        ref.set_parameter(p.name, xt::adapt(p.data, p.size, xt::no_ownership(), p.shape));
    }
    xt::xtensor<double, 2> x = xt::xtensor<double, 2>::from_shape({7, 4});
    for (std::size_t i = 0; i < x.size(); ++i) x.data()[i] = std::cos(1.3 * double(i));
    const std::vector<std::vector<int>> lengths{{3, 4}};
    std::vector<xt::xtensor<double, 2>> dy;
    for (std::size_t n : {3u, 4u}) {
        xt::xtensor<double, 2> g = xt::xtensor<double, 2>::from_shape({n, n});
        for (std::size_t i = 0; i < g.size(); ++i) g.data()[i] = std::sin(double(i) + double(n));
        dy.push_back(std::move(g));
    }

    std::vector<xt::xtensor<T, 2>> docs{xt::cast<T>(x)};
    std::vector<xt::xtensor<T, 2>> dy_t;
    for (const auto& g : dy) dy_t.push_back(xt::cast<T>(g));
    auto pipeline = biaffine::with_splits(biaffine::with_minibatch_by_padded_size(scorer, biaffine::budget::items(4)));
    auto [y, backprop] = pipeline.forward(docs, lengths, biaffine::mode::train);
    const auto dx = backprop(decltype(pipeline)::grad_views(dy_t));

    int failures = 0;
    double row_sum_err = 0;
    for (const auto& s : y) {
        for (std::size_t m = 0; m < s.shape()[0]; ++m) {
            double sum = 0;
            for (std::size_t l = 0; l < s.shape()[1]; ++l) sum += double(s(m, l));
            row_sum_err = std::max(row_sum_err, std::abs(sum - 1.0));
        }
    }
    if (!(row_sum_err < 10 * tol)) {
        log += std::string(type) + ": train-mode rows do not sum to 1\n";
        ++failures;
    }

    auto ref_pipeline = biaffine::with_splits(biaffine::with_minibatch_by_padded_size(ref, biaffine::budget::items(4)));
    double worst = 0;
    const double h = 1e-6;
    for (std::size_t i = 0; i < x.size(); ++i) {
        std::vector<xt::xtensor<double, 2>> plus{x}, minus{x};
        plus[0].data()[i] += h;
        minus[0].data()[i] -= h;
        const double fd = (weighted_sum(ref_pipeline, plus, lengths, dy) - weighted_sum(ref_pipeline, minus, lengths, dy)) /
                          (2 * h);
        worst = std::max(worst, std::abs(double(dx[0].data()[i]) - fd) / (1.0 + std::abs(fd)));
    }
    if (!(worst < tol)) {
        log += std::string(type) + ": dX differs from finite differences by " + std::to_string(worst) + "\n";
        ++failures;
    }
    return failures;
}

}  // namespace

int odr_b_check(std::string& log)
{
    int failures = check_training<float>("b/float", 1e-4, log) + check_training<double>("b/double", 1e-6, log);
    // CoNLL-U io is in the ABI namespace too: its error must derive from this
    // unit's biaffine::error (a shared, unversioned conllu_error would take
    // one unit's base for both).
    std::istringstream truncated("1\ta\t_\tX\t_\t_\t0\troot\t_\t_\n");  // no blank line at the end
    try {
        biaffine::conllu::read(truncated, "odr.conllu");
        log += "b: a CoNLL-U file without its final blank line was read\n";
        ++failures;
    } catch (const biaffine::error&) {
    } catch (...) {
        log += "b: conllu_error is not this unit's biaffine::error\n";
        ++failures;
    }
    const double scores[] = {0, 9, 0, 0, 0, 9, 0, 9, 0};  // [3, 3]: 0 <- 1, 1 root, 2 <- 1
    if (biaffine::mst_heads(scores, 3, 3) != std::vector<std::size_t>{1, 1, 1}) {
        log += "b: mst_heads of a clear 3-token tree is wrong\n";
        ++failures;
    }
    if (biaffine::lazy_split(std::vector<float>{5, 4, 3, 2, 1}, 2) != std::vector<std::size_t>{1, 1, 1, 2}) {
        log += "b: lazy_split([5,4,3,2,1], 2) != [1,1,1,2]\n";
        ++failures;
    }
    return failures;
}

const char* odr_b_abi_tag() { return biaffine::abi_tag; }
const char* odr_b_backend() { return biaffine::detail::compute_backend<float>::name; }
const void* odr_b_tracker() { return &biaffine::tracker(); }
unsigned long long odr_b_tracker_bytes() { return biaffine::tracker().current_bytes(); }
const void* odr_b_arena() { return &biaffine::detail::arena(); }

// Allocates (release = false) or frees (release = true) one tracked block of
// `bytes` from this unit; returns the tracker's current bytes afterwards.
unsigned long long odr_b_tracked_allocation(std::size_t bytes, bool release)
{
    static std::byte* block = nullptr;
    biaffine::tracking_allocator<std::byte> alloc;
    if (release) {
        alloc.deallocate(block, bytes);
        block = nullptr;
    } else {
        block = alloc.allocate(bytes);
    }
    return biaffine::tracker().current_bytes();
}
