// tests/golden.hpp - shared helpers of the golden-data tests: where the case
// folders are, what kind each one is, strict .npy loading with shape checks,
// the tolerance rule, and byte budgets derived from a case.
//
// The cases live in BIAFFINE_TEST_DATA_DIR "/golden" (copied from the
// PyTorch reference, see tests/data/README.md), or in $BIAFFINE_GOLDEN_DIR
// when that is set. Every folder present must be readable: a missing file or
// a wrong shape throws, and Catch2 turns that into a failure, never a skip.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <xtensor/xarray.hpp>
#include <xtensor/xnpy.hpp>

#include "biaffine/biaffine.hpp"

namespace golden {

enum class kind { bilinear, model, pipeline, heads };

struct case_dir {
    kind k;
    std::string name;
    std::string path;
};

/// The golden directory and whether it is the default (in-tree) one.
inline std::string dir(bool* is_default = nullptr)
{
    const char* env = std::getenv("BIAFFINE_GOLDEN_DIR");
    if (is_default) *is_default = env == nullptr || *env == '\0';
    if (env != nullptr && *env != '\0') return env;
    return BIAFFINE_TEST_DATA_DIR "/golden";
}

/// Every case folder, sorted by name. Throws on a missing directory and on a
/// folder whose prefix is none of bilinear_ / model_ / pipeline / heads_.
inline std::vector<case_dir> cases()
{
    namespace fs = std::filesystem;
    const std::string root = dir();
    if (!fs::is_directory(root)) throw std::runtime_error("golden dir is not a directory: " + root);
    std::vector<case_dir> out;
    for (const auto& e : fs::directory_iterator(root)) {
        if (!e.is_directory()) continue;
        const std::string name = e.path().filename().string();
        auto starts = [&](const char* p) { return name.rfind(p, 0) == 0; };
        kind k;
        if (starts("bilinear_")) {
            k = kind::bilinear;
        } else if (starts("model_")) {
            k = kind::model;
        } else if (starts("pipeline")) {
            k = kind::pipeline;
        } else if (starts("heads_")) {
            k = kind::heads;
        } else {
            throw std::runtime_error("golden dir " + root + ": unknown case folder '" + name + "'");
        }
        out.push_back({k, name, e.path().string()});
    }
    std::sort(out.begin(), out.end(), [](const case_dir& a, const case_dir& b) { return a.name < b.name; });
    return out;
}

inline std::vector<case_dir> cases_of(kind k)
{
    std::vector<case_dir> out;
    for (const case_dir& c : cases()) {
        if (c.k == k) out.push_back(c);
    }
    return out;
}

inline std::string shape_str(const std::vector<std::size_t>& s)
{
    std::ostringstream os;
    os << "[";
    for (std::size_t i = 0; i < s.size(); ++i) os << (i ? ", " : "") << s[i];
    os << "]";
    return os.str();
}

template <class A>
std::vector<std::size_t> shape_of(const A& a)
{
    return std::vector<std::size_t>(a.shape().begin(), a.shape().end());
}

/// Loads `<path>/<name>.npy` as T (float64 or int32 on disk, as the generator
/// writes them) and checks its shape; throws with the file name otherwise.
template <class T>
xt::xarray<T> load(const std::string& path, const std::string& name, const std::vector<std::size_t>& shape)
{
    const std::string file = path + "/" + name + ".npy";
    if (!std::filesystem::is_regular_file(file)) throw std::runtime_error("missing golden file " + file);
    xt::xarray<T> a = xt::load_npy<T>(file);
    if (shape_of(a) != shape) {
        throw std::runtime_error("golden file " + file + ": shape " + shape_str(shape_of(a)) + ", expected " +
                                 shape_str(shape));
    }
    return a;
}

/// Same without a shape check, but with a rank check.
template <class T>
xt::xarray<T> load_rank(const std::string& path, const std::string& name, std::size_t rank)
{
    const std::string file = path + "/" + name + ".npy";
    if (!std::filesystem::is_regular_file(file)) throw std::runtime_error("missing golden file " + file);
    xt::xarray<T> a = xt::load_npy<T>(file);
    if (a.dimension() != rank) {
        throw std::runtime_error("golden file " + file + ": rank " + std::to_string(a.dimension()) + ", expected " +
                                 std::to_string(rank));
    }
    return a;
}

/// Tolerances. float64: elementwise |a - b| <= 1e-10 * max(1, |b|).
/// float32: |a - b| <= 1e-5 * max(1, |b|, max|ref|) - normwise, because the
/// rounding error of a dot product is bounded by eps * sum|terms|, which
/// follows the magnitude of the whole array, not that of one (possibly
/// cancelled) result. eps_f32 = 6e-8 and the longest chains here are
/// ~ n_in + h <= 20 terms deep, so 1e-5 leaves ~10x headroom over worst case.
template <class T>
struct tolerance {
    static constexpr double rtol = sizeof(T) == sizeof(double) ? 1e-10 : 1e-5;
    static constexpr bool normwise = sizeof(T) != sizeof(double);
};

/// Result of comparing two arrays: the worst ratio |a-b| / allowed (<= 1 passes).
struct comparison {
    double worst_ratio = 0.0;
    double worst_diff = 0.0;
    std::size_t worst_index = 0;
    std::size_t count = 0;
    bool shape_ok = true;
    bool finite = true;
};

/// Compares flat ranges `a` (computed) against `ref` (expected).
template <class T>
comparison compare_flat(const std::vector<double>& a, const std::vector<double>& ref)
{
    comparison c;
    if (a.size() != ref.size()) {
        c.shape_ok = false;
        return c;
    }
    double scale = 1.0;
    if (tolerance<T>::normwise) {
        for (double r : ref) scale = std::max(scale, std::abs(r));
    }
    for (std::size_t i = 0; i < a.size(); ++i) {
        if (!std::isfinite(a[i])) c.finite = false;
        const double allowed = tolerance<T>::rtol * std::max(scale, std::abs(ref[i]));
        const double d = std::abs(a[i] - ref[i]);
        const double ratio = d / allowed;
        if (!(ratio <= c.worst_ratio)) {
            c.worst_ratio = std::isnan(ratio) ? 1e300 : ratio;
            c.worst_diff = d;
            c.worst_index = i;
        }
    }
    c.count = a.size();
    return c;
}

/// Whole-array comparison (same shape required).
template <class T, class A, class B>
comparison compare(const A& a, const B& ref)
{
    if (shape_of(a) != shape_of(ref)) {
        comparison c;
        c.shape_ok = false;
        return c;
    }
    std::vector<double> fa, fr;
    fa.reserve(a.size());
    fr.reserve(ref.size());
    for (auto it = a.begin(); it != a.end(); ++it) fa.push_back(static_cast<double>(*it));
    for (auto it = ref.begin(); it != ref.end(); ++it) fr.push_back(static_cast<double>(*it));
    return compare_flat<T>(fa, fr);
}

inline bool passed(const comparison& c) { return c.shape_ok && c.finite && c.worst_ratio <= 1.0; }

inline std::string describe(const comparison& c)
{
    std::ostringstream os;
    if (!c.shape_ok) return "shape mismatch";
    os << c.count << " values, worst |diff| " << c.worst_diff << " at flat index " << c.worst_index
       << " (ratio to tolerance " << c.worst_ratio << ")" << (c.finite ? "" : ", NON-FINITE values");
    return os.str();
}

/// A byte budget for a case's `n` splits of at most `max_len` tokens through
/// with_splits(with_minibatch_by_padded_size(scorer)), derived from the case
/// so that batching still splits it however many splits it has: what the
/// call holds whatever its batching (the batcher's bookkeeping, what a
/// forward keeps until backprop, and 128 bytes a split of room for
/// with_splits' index of them), plus a third of one batch of every split and
/// at least the longest split alone. `Heads`: labels at given heads.
template <bool Heads, class Scorer>
std::uint64_t byte_budget(Scorer& s, std::size_t n, std::size_t max_len, biaffine::mode m)
{
    using O = biaffine::detail::output_t<Scorer>;
    const auto probe = biaffine::with_minibatch_by_padded_size(s, biaffine::budget::items(1));
    auto batch = [&](std::size_t count) -> std::uint64_t {
        const biaffine::batch_cost c = Heads ? s.heads_cost(count, max_len, m) : s.cost(count, max_len, m);
        return c.total() + count * sizeof(biaffine::score_tensor<O>);
    };
    const std::uint64_t fixed = probe.bookkeeping_bytes(n) + probe.template kept_bytes<Heads>(n, m) + 128 * n;
    return fixed + std::max(batch(1), batch(n) / 3);
}

}  // namespace golden

/// CHECKs one comparison with a readable message.
#define GOLDEN_CHECK(what, cmp)                                 \
    do {                                                        \
        const ::golden::comparison golden_cmp_ = (cmp);         \
        INFO(what << ": " << ::golden::describe(golden_cmp_));  \
        CHECK(::golden::passed(golden_cmp_));                   \
    } while (0)
