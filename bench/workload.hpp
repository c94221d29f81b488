// bench/workload.hpp - the standard workload every bench binary measures.
//
// One document of N tokens with `n_in = 256` float32 representations
// (uniform in [-1, 1), fixed seed), cut into sentences ("splits") whose
// lengths follow a log-normal law: median 18 tokens, sigma 0.6, clipped to
// [1, 100], fixed seed; the last split takes what is left. The scorer is
// `h = 128` with both bias columns and `o` labels (1 and 50 are the standard
// cases), parameters from a fixed seed (scorer_config_for). Training runs
// build their gradient with the previous token as the gold head (gold_head).
//
// Everything is drawn with our own generators (splitmix64, Box-Muller) rather
// than <random>'s distributions, whose output differs between standard
// libraries: the same flags give the same workload everywhere.
//
// FLOP counts are GEMM multiply-adds x 2 (bias adds, relu, mask and softmax
// are O(scores) and left out, for every implementation alike):
//   forward of a split of n tokens:
//     projections      2 * (2 n n_in h)
//     T = u W'         2 n hu (o hv)
//     S = v T^T        2 n (n o) hv
//   backward: exactly twice the forward (two GEMMs per forward GEMM).
// `true_flops` counts each split at its own length (what a length-aware
// implementation does); `padded_flops` counts every split at the longest
// length (what one padded batch does).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include <xtensor/xtensor.hpp>

#include <biaffine/conllu.hpp>
#include <biaffine/scorer.hpp>

namespace biaffine_bench {

/// Model and data dimensions of the standard workload.
struct dims {
    std::size_t n_in = 256;
    std::size_t hidden = 128;
    std::size_t labels = 1;
    bool bias_u = true;
    bool bias_v = true;
    std::size_t hu() const { return hidden + (bias_u ? 1 : 0); }
    std::size_t hv() const { return hidden + (bias_v ? 1 : 0); }
};

constexpr std::uint64_t default_doc_seed = 20240501;
constexpr std::uint64_t default_split_seed = 18;
constexpr std::uint64_t default_model_seed = 7;

/// The scorer of the standard workload with `labels` labels.
inline biaffine::scorer_config scorer_config_for(std::size_t labels)
{
    biaffine::scorer_config c;
    c.n_in = 256;
    c.hidden = 128;
    c.labels = labels;
    c.seed = default_model_seed;
    return c;
}

/// The gold head of token `m` in the gradients the training runs build: the
/// previous token (0 for the first).
inline std::size_t gold_head(std::size_t m) { return m == 0 ? 0 : m - 1; }

/// splitmix64: tiny, fast, and the same on every platform.
struct splitmix64 {
    std::uint64_t state;
    explicit splitmix64(std::uint64_t seed) : state(seed) {}
    std::uint64_t next()
    {
        std::uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
        return z ^ (z >> 31);
    }
    /// Uniform in [0, 1) from 53 bits.
    double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }
    /// Standard normal (Box-Muller, one value per call).
    double normal()
    {
        const double u1 = 1.0 - uniform();  // (0, 1]: log is finite
        const double u2 = uniform();
        return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
    }
};

/// Split lengths of an `tokens`-token document: log-normal (median
/// `median`, sigma `sigma`), rounded, clipped to [min_len, max_len]; the last
/// split is whatever remains (also within the clip). Sums to `tokens`.
inline std::vector<int> make_split_lengths(std::size_t tokens, std::uint64_t seed = default_split_seed,
                                           double median = 18.0, double sigma = 0.6, int min_len = 1,
                                           int max_len = 100)
{
    splitmix64 rng(seed);
    std::vector<int> lengths;
    lengths.reserve(tokens / 16 + 1);
    const double mu = std::log(median);
    std::size_t left = tokens;
    while (left > 0) {
        const double draw = std::round(std::exp(mu + sigma * rng.normal()));
        int len = static_cast<int>(std::clamp(draw, static_cast<double>(min_len), static_cast<double>(max_len)));
        if (static_cast<std::size_t>(len) > left) len = static_cast<int>(left);
        lengths.push_back(len);
        left -= static_cast<std::size_t>(len);
    }
    return lengths;
}

/// The document `[tokens, n_in]`, uniform in [-1, 1). Plain xtensor on the
/// standard allocator: it is the caller's input, not library memory.
inline xt::xtensor<float, 2> make_document(std::size_t tokens, std::size_t n_in, std::uint64_t seed = default_doc_seed)
{
    auto doc = xt::xtensor<float, 2>::from_shape({tokens, n_in});
    splitmix64 rng(seed);
    float* p = doc.data();
    const std::size_t n = doc.size();
    std::size_t i = 0;
    // Two 24-bit uniforms per 64-bit draw: a million-token document is 256M values.
    for (; i + 1 < n; i += 2) {
        const std::uint64_t r = rng.next();
        p[i] = static_cast<float>(r >> 40) * 0x1.0p-23f - 1.0f;
        p[i + 1] = static_cast<float>((r >> 16) & 0xffffff) * 0x1.0p-23f - 1.0f;
    }
    if (i < n) p[i] = static_cast<float>(rng.next() >> 40) * 0x1.0p-23f - 1.0f;
    return doc;
}

/// A document and its splits.
struct workload {
    std::size_t tokens = 0;
    dims d;
    xt::xtensor<float, 2> doc;  ///< `[tokens, n_in]`
    std::vector<int> splits;    ///< split lengths, sum == tokens

    std::size_t max_len() const
    {
        int m = 0;
        for (int s : splits) m = std::max(m, s);
        return static_cast<std::size_t>(m);
    }
    /// Sum of n^2 over the splits (scores per label).
    std::uint64_t sum_sq() const
    {
        std::uint64_t s = 0;
        for (int n : splits) s += static_cast<std::uint64_t>(n) * static_cast<std::uint64_t>(n);
        return s;
    }
    /// Row offset of every split in the document (n_splits + 1 entries).
    std::vector<std::size_t> offsets() const
    {
        std::vector<std::size_t> off(splits.size() + 1, 0);
        for (std::size_t k = 0; k < splits.size(); ++k) off[k + 1] = off[k] + static_cast<std::size_t>(splits[k]);
        return off;
    }
};

/// The standard workload; `with_doc = false` skips the document (cost
/// predictions need only the lengths).
inline workload make_workload(std::size_t tokens, std::size_t labels, bool with_doc = true,
                              std::uint64_t doc_seed = default_doc_seed, std::uint64_t split_seed = default_split_seed)
{
    workload w;
    w.tokens = tokens;
    w.d.labels = labels;
    w.splits = make_split_lengths(tokens, split_seed);
    if (with_doc) w.doc = make_document(tokens, w.d.n_in, doc_seed);
    return w;
}

/// Sentence lengths of CoNLL-U files in file order (words only: multiword
/// tokens and empty nodes are not scored) and, per document (by # newdoc, as
/// conllu::documents), its number of sentences.
struct treebank_lengths {
    std::vector<int> sentences;
    std::vector<std::size_t> doc_sentences;
    std::size_t words = 0;
};

inline treebank_lengths read_treebank_lengths(const std::vector<std::string>& files)
{
    treebank_lengths t;
    for (const auto& f : files) {
        const auto s = biaffine::conllu::read_file(f);
        for (const auto& d : biaffine::conllu::documents(s)) t.doc_sentences.push_back(d.second - d.first);
        for (const auto& x : s) {
            t.sentences.push_back(static_cast<int>(x.words.size()));
            t.words += x.words.size();
        }
    }
    if (t.words == 0) throw biaffine::conllu_error("--lengths-from: no words in the given files");
    return t;
}

/// A `tokens`-token document on a treebank's own lengths: its sentences in
/// order, over and over, the last one cut to what is left; `docs` gets the
/// number of splits of each document (the treebank's documents, the last one
/// cut too).
inline std::vector<int> treebank_split_lengths(const treebank_lengths& t, std::size_t tokens, std::vector<std::size_t>& docs)
{
    std::vector<int> splits;
    docs.clear();
    std::size_t left = tokens, s = 0, d = 0, in_doc = 0;
    while (left > 0) {
        if (in_doc == 0) docs.push_back(0);
        const std::size_t n = std::min<std::size_t>(left, static_cast<std::size_t>(t.sentences[s]));
        splits.push_back(static_cast<int>(n));
        ++docs.back();
        left -= n;
        s = (s + 1) % t.sentences.size();
        if (++in_doc == t.doc_sentences[d]) {
            in_doc = 0;
            d = (d + 1) % t.doc_sentences.size();
        }
    }
    return splits;
}

/// Forward GEMM FLOPs of one split of `n` tokens.
inline double forward_flops(const dims& d, double n)
{
    const double n_in = static_cast<double>(d.n_in), h = static_cast<double>(d.hidden);
    const double hu = static_cast<double>(d.hu()), hv = static_cast<double>(d.hv()), o = static_cast<double>(d.labels);
    return 2.0 * (2.0 * n * n_in * h) + 2.0 * n * hu * o * hv + 2.0 * n * n * o * hv;
}

/// Forward (+ backward when `train`) FLOPs, each split at its own length.
inline double true_flops(const dims& d, const std::vector<int>& splits, bool train)
{
    double f = 0;
    for (int n : splits) f += forward_flops(d, static_cast<double>(n));
    return train ? 3.0 * f : f;
}

/// Forward (+ backward) FLOPs with every split padded to `pad_to`.
inline double padded_flops(const dims& d, std::size_t n_splits, std::size_t pad_to, bool train)
{
    const double f = static_cast<double>(n_splits) * forward_flops(d, static_cast<double>(pad_to));
    return train ? 3.0 * f : f;
}

/// Padded FLOPs of a list of batches, each padded to its own longest split
/// (what the spaCy-rule batched reference executes).
template <class Batches>
double batched_padded_flops(const dims& d, const std::vector<int>& splits, const Batches& batches, bool train)
{
    double f = 0;
    for (const auto& b : batches) {
        std::size_t L = 0;
        for (auto i : b) L = std::max(L, static_cast<std::size_t>(splits[static_cast<std::size_t>(i)]));
        f += static_cast<double>(b.size()) * forward_flops(d, static_cast<double>(L));
    }
    return train ? 3.0 * f : f;
}

/// "1.5 GB", "12.3 MB", "512 KB": for messages.
inline std::string human_bytes(double b)
{
    char buf[64];
    if (b >= 1e9) {
        std::snprintf(buf, sizeof(buf), "%.1f GB", b / 1e9);
    } else if (b >= 1e6) {
        std::snprintf(buf, sizeof(buf), "%.1f MB", b / 1e6);
    } else {
        std::snprintf(buf, sizeof(buf), "%.0f KB", b / 1e3);
    }
    return buf;
}

}  // namespace biaffine_bench
