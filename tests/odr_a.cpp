// tests/odr_a.cpp + tests/odr_b.cpp: one binary, two translation units that
// both include the umbrella header and instantiate the same templates (scorer
// and pipeline, float and double). Where the target allows, the two units are
// built for different ISA levels (tests/CMakeLists.txt: this one for AVX2 +
// FMA, odr_b.cpp for the project's target, AVX-512 on this machine), and so
// get different ABI names (abi.hpp): each must then run its own copy of the
// library (its own float backend and ABI name, its own process-wide state),
// and compute right; a shared ABI name there would be the silent mix the
// inline namespace exists to prevent. Built with the same flags, the units
// share one ABI name, one tracker and one workspace arena. Either way it must
// link (no multiple definitions: everything in the headers is inline or a
// template). Built with link-time optimisation when available, so GCC's -Wodr
// can diagnose mismatched definitions. `test_odr --tags` prints the two ABI
// names (tests/odr_symbols.cmake checks the binary's symbols carry them).
//
// This unit: inference (predict and predict_stream through with_splits +
// with_minibatch_by_padded_size + with_pad_seq_unpad_matrix) against naive
// loops, head decoding, lazy splitting; and main().
#include <biaffine/biaffine.hpp>

#include <xtensor/xtensor.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#ifndef BIAFFINE_ODR_DISTINCT
#define BIAFFINE_ODR_DISTINCT 0  // 1: the two units are built for different ISA levels
#endif

// Defined in odr_b.cpp.
int odr_b_check(std::string& log);
const char* odr_b_abi_tag();
const char* odr_b_backend();
const void* odr_b_tracker();
unsigned long long odr_b_tracker_bytes();
const void* odr_b_arena();
unsigned long long odr_b_tracked_allocation(std::size_t bytes, bool release);

namespace {

// Naive S[m, l] of one split in double, from the scorer's parameters.
template <class T>
double naive_score(const biaffine::biaffine_scorer<T>& s, const xt::xtensor<T, 2>& x, std::size_t dep,
                   std::size_t head)
{
    const std::size_t h = s.hidden(), n_in = s.n_in();
    std::vector<double> u(h + 1, 1.0), v(h + 1, 1.0);
    for (std::size_t i = 0; i < h; ++i) {
        double a = s.head_bias()(i), b = s.dependent_bias()(i);
        for (std::size_t j = 0; j < n_in; ++j) {
            a += double(s.head_weight()(i, j)) * double(x(head, j));
            b += double(s.dependent_weight()(i, j)) * double(x(dep, j));
        }
        u[i] = std::max(a, 0.0);
        v[i] = std::max(b, 0.0);
    }
    double acc = 0;
    for (std::size_t i = 0; i <= h; ++i) {
        for (std::size_t j = 0; j <= h; ++j) acc += u[i] * double(s.bilinear_weight()(0, i, j)) * v[j];
    }
    return acc;
}

// Inference through the full pipeline in T; returns the number of failures.
template <class T>
int check_inference(const char* type, double tol, std::string& log)
{
    int failures = 0;
    biaffine::scorer_config cfg;
    cfg.n_in = 7;
    cfg.hidden = 6;
    cfg.seed = 5;
    biaffine::biaffine_scorer<T> scorer(cfg);
    xt::xtensor<T, 2> doc = xt::xtensor<T, 2>::from_shape({12, 7});
    for (std::size_t i = 0; i < doc.size(); ++i) doc.data()[i] = static_cast<T>(std::sin(0.7 * double(i) + 0.3));
    const std::vector<std::vector<int>> lengths{{5, 3, 0, 4}};
    const std::size_t start[] = {0, 5, 8, 8};
    const std::vector<xt::xtensor<T, 2>> docs{doc};
    // Budget of 9 padded items: the splits go in several batches.
    auto pipeline = biaffine::with_splits(biaffine::with_minibatch_by_padded_size(
        biaffine::with_pad_seq_unpad_matrix(scorer), biaffine::budget::items(9)));
    const biaffine::score_list<T> y = pipeline.predict(docs, lengths);
    double worst = 0;
    std::size_t streamed = 0;
    if (y.size() != 4) {
        log += std::string(type) + ": expected 4 score matrices\n";
        return 1;
    }
    for (std::size_t k = 0; k < 4; ++k) {
        const std::size_t n = y[k].shape()[0];
        for (std::size_t m = 0; m < n; ++m) {
            for (std::size_t l = 0; l < n; ++l) {
                const double ref = naive_score(scorer, doc, start[k] + m, start[k] + l);
                worst = std::max(worst, std::abs(double(y[k](m, l)) - ref) / (1.0 + std::abs(ref)));
            }
        }
    }
    pipeline.predict_stream(docs, lengths, [&](std::size_t k, std::size_t, biaffine::score_view<const T> s) {
        ++streamed;
        for (std::size_t m = 0; m < s.n; ++m) {
            for (std::size_t l = 0; l < s.n; ++l) {
                const double ref = naive_score(scorer, doc, start[k] + m, start[k] + l);
                worst = std::max(worst, std::abs(double(s(m, l)) - ref) / (1.0 + std::abs(ref)));
            }
        }
    });
    if (!(worst < tol) || streamed != 4) {
        log += std::string(type) + ": inference differs from the naive computation by " + std::to_string(worst) +
               " (" + std::to_string(streamed) + " splits streamed)\n";
        ++failures;
    }
    const std::vector<std::size_t> tree = biaffine::mst_heads(y[0]);
    if (!biaffine::is_tree(tree) || tree.size() != 5) {
        log += std::string(type) + ": mst_heads did not give a tree\n";
        ++failures;
    }
    return failures;
}

}  // namespace

int odr_a_check(std::string& log)
{
    int failures = check_inference<float>("a/float", 1e-5, log) + check_inference<double>("a/double", 1e-12, log);
    // CoNLL-U io is in the ABI namespace too: its error must derive from this
    // unit's biaffine::error (a shared, unversioned conllu_error would take
    // one unit's base for both).
    std::istringstream truncated("1\ta\t_\tX\t_\t_\t0\troot\t_\t_\n");  // no blank line at the end
    try {
        biaffine::conllu::read(truncated, "odr.conllu");
        log += "a: a CoNLL-U file without its final blank line was read\n";
        ++failures;
    } catch (const biaffine::error&) {
    } catch (...) {
        log += "a: conllu_error is not this unit's biaffine::error\n";
        ++failures;
    }
    if (biaffine::lazy_split(std::vector<double>{0, 1, 2, 3, 4}, 2) != std::vector<std::size_t>{2, 1, 1, 1}) {
        log += "a: lazy_split([0,1,2,3,4], 2) != [2,1,1,1]\n";
        ++failures;
    }
    return failures;
}

// The float backend a build with this ABI name runs (abi.hpp's rule) against
// the backend the unit's scorer was compiled with (backend.hpp's choice).
int check_backend_in_tag(const char* unit, const char* tag, const char* backend, std::string& log)
{
    const std::string t(tag), b(backend);
    const std::string expected = t.find("_blas_") != std::string::npos         ? "blas"
                                 : t.find("_avx2kernel_") != std::string::npos ? "avx2"
                                                                               : "eigen";
    if (b == expected) return 0;
    log += std::string(unit) + ": ABI name " + t + " but float runs on the " + b + " backend\n";
    return 1;
}

int main(int argc, char** argv)
{
    const char* tag_a = biaffine::abi_tag;
    const char* tag_b = odr_b_abi_tag();
    if (argc > 1 && std::strcmp(argv[1], "--tags") == 0) {
        std::printf("%s\n%s\n", tag_a, tag_b);
        return 0;
    }
    const char* backend_a = biaffine::detail::compute_backend<float>::name;
    std::printf("odr: unit a: ABI %s, float on %s\nodr: unit b: ABI %s, float on %s\n", tag_a, backend_a, tag_b,
                odr_b_backend());
    std::string log;
    int failures = odr_a_check(log) + odr_b_check(log);
    failures += check_backend_in_tag("a", tag_a, backend_a, log) + check_backend_in_tag("b", tag_b, odr_b_backend(), log);
    const bool distinct = std::strcmp(tag_a, tag_b) != 0;
    if (distinct != bool(BIAFFINE_ODR_DISTINCT)) {
        log += BIAFFINE_ODR_DISTINCT ? "the units were built for different ISA levels but share one ABI name\n"
                                     : "the units were built alike but have different ABI names\n";
        ++failures;
    }
    // Built alike: one tracker and one workspace arena per thread, whichever
    // unit asks. Built apart: each unit has its own.
    if ((&biaffine::tracker() == odr_b_tracker()) == distinct) {
        log += distinct ? "units of different ABIs share a memory tracker\n"
                        : "the two units see different memory trackers\n";
        ++failures;
    }
    if ((static_cast<const void*>(&biaffine::detail::arena()) == odr_b_arena()) == distinct) {
        log += distinct ? "units of different ABIs share a workspace arena\n"
                        : "the two units see different workspace arenas on one thread\n";
        ++failures;
    }
    // Bytes allocated through the tracking allocator in unit b are counted by
    // unit b's tracker (the one unit a reads when built alike), and released.
    const unsigned long long a_before = biaffine::tracker().current_bytes();
    const unsigned long long b_before = odr_b_tracker_bytes();
    const unsigned long long b_during = odr_b_tracked_allocation(4096, false);
    const unsigned long long a_during = biaffine::tracker().current_bytes();
    const unsigned long long b_after = odr_b_tracked_allocation(4096, true);
    if (b_during - b_before != 4096 || b_after != b_before || a_during - a_before != (distinct ? 0 : 4096)) {
        log += "tracked allocations in unit b are not counted by " +
               std::string(distinct ? "unit b's tracker alone\n" : "the one tracker\n");
        ++failures;
    }
    std::printf("%sodr: %d failure(s)\n", log.c_str(), failures);
    return failures == 0 ? 0 : 1;
}
