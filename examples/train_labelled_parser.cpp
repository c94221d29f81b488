// train_labelled_parser - an arc scorer and a label scorer trained together,
// the labels scored only at one head per token.
//
// What to copy into your parser:
//   * the label scorer's training step: forward_heads on the *gold* heads
//     through with_splits(with_minibatch_by_padded_size(label_scorer, budget))
//     gives `[n, o]` label logits per split (train_output::logits), never the
//     `[n, n, o]` scores; cross_entropy_labels gives the loss and the `[n, o]`
//     gradients backprop takes. The arc scorer trains beside it on logits
//     with cross_entropy_heads. Both backprops return dX per document for a
//     shared encoder (here there is none: add the two).
//   * decoding: arc logits -> mst_heads per split -> predict_heads at the
//     decoded heads (split-relative, the root pointing at itself, exactly
//     what mst_heads returns) -> the best label per token.
//   * the batcher prices labels at heads by the scorer's heads_cost: the same
//     byte budget holds batches of many more tokens than for [n, n, o].
//
// The data: generated sentences of 4..30 tokens with random projective trees
// (training_helpers.hpp). Each token has a word class (one of 6) and the
// label of its arc is a fixed function of the dependent's and the head's
// classes (12 labels). A token's vector holds its own position code, a noisy
// code of its head's position (as in train_arc_scorer) and a one-hot of its
// class, plus noise, mixed by a random matrix: the arc scorer must match
// positions, the label scorer must combine the classes of two tokens.
//
//   train_labelled_parser [--epochs E] [--quick] [--seed S] [--lr LR]
//
// Exit status: 0 when the held-out LAS after training is at least 40% and at
// least 3x the LAS before training (chance: UAS x 1/12); 1 otherwise; 2 on
// bad usage.

#include <biaffine/biaffine.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <iomanip>
#include <iostream>
#include <numeric>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include <xtensor/xtensor.hpp>

#include "training_helpers.hpp"  // random_tree, adam

namespace {

using example_helpers::adam;

constexpr std::size_t n_freq = 8;                             // sinusoid frequencies per position code
constexpr std::size_t n_classes = 6;                          // word classes
constexpr std::size_t n_labels = 12;                          // arc labels
constexpr std::size_t n_noise = 6;                            // pure-noise features
constexpr std::size_t n_raw = 4 * n_freq + n_classes + n_noise;
constexpr std::size_t n_in = 56;                              // after mixing
constexpr double head_jitter = 0.35;                          // noise on the head position, in tokens
constexpr double las_required = 0.4;                          // held-out LAS after training
constexpr double las_gain_required = 3.0;                     // x the LAS before training

struct options {
    std::size_t epochs = 10;
    std::size_t train_sentences = 2400;
    std::size_t test_sentences = 300;
    std::uint64_t seed = 11;
    double lr = 0.01;
};

[[noreturn]] void usage(const std::string& problem)
{
    std::cerr << "train_labelled_parser: " << problem << "\n"
              << "usage: train_labelled_parser [--epochs E] [--quick] [--seed S] [--lr LR]\n";
    std::exit(2);
}

options parse_args(int argc, char** argv)
{
    options o;
    bool epochs_given = false;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        if (a == "--quick") {  // a few seconds: the smoke test
            o.train_sentences = 800;
            o.test_sentences = 200;
            if (!epochs_given) o.epochs = 8;
            continue;
        }
        if (a == "--help" || a == "-h") usage("train an arc and a label scorer on a generated labelled treebank");
        if (i + 1 >= argc) usage("missing value after " + a);
        const std::string v = argv[++i];
        char* end = nullptr;
        if (a == "--epochs") {
            o.epochs = std::strtoull(v.c_str(), &end, 10);
            epochs_given = true;
        } else if (a == "--seed") {
            o.seed = std::strtoull(v.c_str(), &end, 10);
        } else if (a == "--lr") {
            o.lr = std::strtod(v.c_str(), &end);
        } else {
            usage("unknown option " + a);
        }
        if (v.empty() || *end != '\0') usage("bad value for " + a + ": " + v);
    }
    if (o.epochs == 0) usage("--epochs must be positive");
    return o;
}

// The label of an arc: a fixed function of the two tokens' classes (the
// root's arc, head == itself, gets its own class pair like any other).
std::size_t arc_label(std::size_t dep_class, std::size_t head_class)
{
    return (dep_class * 5 + head_class * 3 + dep_class * head_class) % n_labels;
}

// Documents of a few sentences, with per-document split lengths, gold heads
// and labels per document (heads split-relative, the root its own index).
struct treebank {
    std::vector<xt::xtensor<float, 2>> docs;
    std::vector<std::vector<std::size_t>> splits;  // per document
    std::vector<std::vector<std::size_t>> heads;   // per document, split-relative
    std::vector<std::vector<std::size_t>> labels;  // per document
    std::size_t tokens = 0;
};

class generator {
public:
    explicit generator(std::uint64_t seed) : rng_(seed), mix_(n_in * n_raw)
    {
        std::normal_distribution<double> normal(0.0, 1.0 / std::sqrt(double(n_raw)));
        for (double& w : mix_) w = normal(rng_);
        for (std::size_t k = 0; k < n_freq; ++k) freq_[k] = 2.0 * 3.14159265358979323846 / (2.5 * std::pow(1.6, double(k)));
    }

    treebank make(std::size_t n_sentences, std::size_t sentences_per_doc)
    {
        treebank tb;
        std::uniform_int_distribution<std::size_t> length(4, 30), cls(0, n_classes - 1);
        for (std::size_t s = 0; s < n_sentences; s += sentences_per_doc) {
            std::vector<std::size_t> lens, heads, labels;
            for (std::size_t j = s; j < std::min(n_sentences, s + sentences_per_doc); ++j) lens.push_back(length(rng_));
            const std::size_t rows = std::accumulate(lens.begin(), lens.end(), std::size_t(0));
            xt::xtensor<float, 2> x = xt::xtensor<float, 2>::from_shape({rows, n_in});
            std::size_t row = 0;
            for (std::size_t n : lens) {
                std::vector<std::size_t> h(n), c(n);
                example_helpers::random_tree(0, n, n, h, rng_);
                for (std::size_t m = 0; m < n; ++m) c[m] = cls(rng_);
                for (std::size_t m = 0; m < n; ++m) {
                    if (h[m] == n) h[m] = m;  // the root: its own index
                    encode(x, row + m, double(m), double(h[m]), c[m]);
                    heads.push_back(h[m]);
                    labels.push_back(arc_label(c[m], c[h[m]]));
                }
                row += n;
            }
            tb.tokens += rows;
            tb.docs.push_back(std::move(x));
            tb.splits.push_back(std::move(lens));
            tb.heads.push_back(std::move(heads));
            tb.labels.push_back(std::move(labels));
        }
        return tb;
    }

private:
    void encode(xt::xtensor<float, 2>& x, std::size_t row, double self, double head, std::size_t cls)
    {
        std::normal_distribution<double> jitter(0.0, head_jitter), noise(0.0, 1.0);
        const double h = head + jitter(rng_);
        double raw[n_raw] = {};
        for (std::size_t k = 0; k < n_freq; ++k) {
            raw[2 * k] = std::cos(freq_[k] * self);
            raw[2 * k + 1] = std::sin(freq_[k] * self);
            raw[2 * n_freq + 2 * k] = std::cos(freq_[k] * h);
            raw[2 * n_freq + 2 * k + 1] = std::sin(freq_[k] * h);
        }
        raw[4 * n_freq + cls] = 2.0;
        for (std::size_t j = 4 * n_freq + n_classes; j < n_raw; ++j) raw[j] = noise(rng_);
        for (std::size_t i = 0; i < n_in; ++i) {
            double acc = 0;
            for (std::size_t j = 0; j < n_raw; ++j) acc += mix_[i * n_raw + j] * raw[j];
            x(row, i) = static_cast<float>(acc);
        }
    }

    std::mt19937_64 rng_;
    std::vector<double> mix_;  // [n_in, n_raw]
    double freq_[n_freq];
};

// Per-split lists of a per-document array (heads or labels), in split order.
std::vector<std::vector<std::size_t>> per_split(const std::vector<std::vector<std::size_t>>& per_doc,
                                                const std::vector<std::vector<std::size_t>>& splits)
{
    std::vector<std::vector<std::size_t>> out;
    for (std::size_t d = 0; d < per_doc.size(); ++d) {
        std::size_t row = 0;
        for (std::size_t n : splits[d]) {
            out.emplace_back(per_doc[d].begin() + std::ptrdiff_t(row), per_doc[d].begin() + std::ptrdiff_t(row + n));
            row += n;
        }
    }
    return out;
}

struct scores {
    double uas = 0, las = 0;
};

// Decode: arc logits -> MST heads per split -> labels at the decoded heads.
template <class ArcPipe, class LabelPipe>
scores evaluate(const ArcPipe& arcs, const LabelPipe& labels, const treebank& test)
{
    const biaffine::score_list<float> arc_logits = arcs.predict(test.docs, test.splits);
    std::vector<std::vector<std::size_t>> decoded(test.docs.size());  // per document, split-relative
    for (std::size_t d = 0, k = 0; d < test.docs.size(); ++d) {
        for (std::size_t s = 0; s < test.splits[d].size(); ++s, ++k) {
            const std::vector<std::size_t> h = biaffine::mst_heads(arc_logits[k]);
            decoded[d].insert(decoded[d].end(), h.begin(), h.end());
        }
    }
    const biaffine::score_list<float> label_logits = labels.predict_heads(test.docs, test.splits, decoded);
    std::size_t heads_ok = 0, both_ok = 0;
    for (std::size_t d = 0, k = 0; d < test.docs.size(); ++d) {
        std::size_t row = 0;
        for (std::size_t s = 0; s < test.splits[d].size(); ++s, ++k) {
            const auto& y = label_logits[k];  // [n, o]
            for (std::size_t m = 0; m < test.splits[d][s]; ++m) {
                std::size_t best = 0;
                for (std::size_t c = 1; c < n_labels; ++c) best = y(m, c) > y(m, best) ? c : best;
                const bool head = decoded[d][row + m] == test.heads[d][row + m];
                heads_ok += head ? 1 : 0;
                both_ok += head && best == test.labels[d][row + m] ? 1 : 0;
            }
            row += test.splits[d][s];
        }
    }
    return {double(heads_ok) / double(test.tokens), double(both_ok) / double(test.tokens)};
}

}  // namespace

int main(int argc, char** argv)
{
    using clock = std::chrono::steady_clock;
    const options o = parse_args(argc, argv);
    std::cout << "biaffine " << biaffine::version_string
              << " - train_labelled_parser: arc scorer + label scorer, labels scored at given heads only\n\n";
    biaffine::memory_log log;
    generator gen(o.seed);
    const treebank train = gen.make(o.train_sentences, 4);
    const treebank test = gen.make(o.test_sentences, 4);
    std::cout << "Generated labelled treebank: " << o.train_sentences << " training sentences (" << train.tokens
              << " tokens), " << o.test_sentences << " held-out (" << test.tokens << " tokens); " << n_labels
              << " labels from " << n_classes << " word classes.\n";
    log.checkpoint("treebank generated");

    biaffine::scorer_config arc_cfg;
    arc_cfg.n_in = n_in;
    arc_cfg.hidden = 64;
    arc_cfg.seed = o.seed;
    arc_cfg.train_outputs = biaffine::train_output::logits;
    biaffine::scorer_config label_cfg = arc_cfg;
    label_cfg.hidden = 32;
    label_cfg.labels = n_labels;
    label_cfg.seed = o.seed + 1;
    biaffine::biaffine_scorer<float> arc_scorer(arc_cfg), label_scorer(label_cfg);
    // The layers hold the scorers by reference: their parameters are the ones trained.
    const auto budget = biaffine::budget::megabytes(4);
    auto arcs = biaffine::with_splits(biaffine::with_minibatch_by_padded_size(arc_scorer, budget));
    auto labels = biaffine::with_splits(biaffine::with_minibatch_by_padded_size(label_scorer, budget));
    adam arc_opt(o.lr), label_opt(o.lr);
    log.checkpoint("scorers initialised");

    const scores before = evaluate(arcs, labels, test);
    std::cout << std::fixed << std::setprecision(1) << "before training: held-out UAS " << 100 * before.uas
              << "%, LAS " << 100 * before.las << "% (chance LAS: UAS x 1/" << n_labels << ")\n";
    log.checkpoint("evaluated (untrained)");

    constexpr std::size_t docs_per_step = 8;
    std::vector<std::size_t> order(train.docs.size());
    std::iota(order.begin(), order.end(), std::size_t(0));
    std::mt19937_64 shuffle_rng(o.seed + 2);
    scores after;
    const auto t0 = clock::now();
    for (std::size_t epoch = 1; epoch <= o.epochs; ++epoch) {
        std::shuffle(order.begin(), order.end(), shuffle_rng);
        double arc_loss = 0, label_loss = 0;
        for (std::size_t b = 0; b < order.size(); b += docs_per_step) {
            std::vector<Eigen::Map<const biaffine::row_matrix<float>>> docs;
            std::vector<std::vector<std::size_t>> splits, heads, gold_labels;
            std::size_t count = 0;
            for (std::size_t i = b; i < std::min(order.size(), b + docs_per_step); ++i) {
                const std::size_t d = order[i];
                docs.emplace_back(train.docs[d].data(), Eigen::Index(train.docs[d].shape()[0]), Eigen::Index(n_in));
                splits.push_back(train.splits[d]);
                heads.push_back(train.heads[d]);
                gold_labels.push_back(train.labels[d]);
                count += train.heads[d].size();
            }
            const double scale = 1.0 / double(count);  // mean over the step's tokens
            arc_scorer.zero_grad();
            label_scorer.zero_grad();
            // Arcs: [n, n] logits per split, cross-entropy over head candidates.
            auto [A, arc_bp] = arcs.forward(docs, splits, biaffine::mode::train);
            auto [al, dA] = biaffine::cross_entropy_heads<float>(A, per_split(heads, splits), scale);
            const auto dX_arcs = arc_bp(decltype(arcs)::grad_views(dA));
            // Labels at the gold heads: [n, o] logits per split.
            auto [Lg, label_bp] = labels.forward_heads(docs, splits, heads, biaffine::mode::train);
            auto [ll, dL] = biaffine::cross_entropy_labels<float>(Lg, per_split(gold_labels, splits), scale);
            const auto dX_labels = label_bp(decltype(labels)::head_grad_views(dL));
            (void)dX_arcs;  // an encoder below would get dX_arcs + dX_labels
            (void)dX_labels;
            arc_opt.step(arc_scorer);
            label_opt.step(label_scorer);
            arc_loss += al / scale;
            label_loss += ll / scale;
        }
        after = evaluate(arcs, labels, test);
        std::cout << "epoch " << std::setw(3) << epoch << std::setprecision(4) << "  arc loss "
                  << arc_loss / double(train.tokens) << "  label loss " << label_loss / double(train.tokens)
                  << std::setprecision(1) << "  held-out UAS " << std::setw(5) << 100 * after.uas << "%  LAS "
                  << std::setw(5) << 100 * after.las << "%\n";
    }
    log.checkpoint("trained");
    const double seconds = std::chrono::duration<double>(clock::now() - t0).count();
    const bool pass = after.las >= las_required && after.las >= las_gain_required * before.las;
    std::cout << std::setprecision(1) << "\nTrained " << o.epochs << " epochs in " << std::setprecision(2) << seconds
              << " s.\nbefore: UAS " << std::setprecision(1) << 100 * before.uas << "%, LAS " << 100 * before.las
              << "%\nafter:  UAS " << 100 * after.uas << "%, LAS " << 100 * after.las << "%\n"
              << "\nMemory log (tracked bytes; peak = highest point since the previous checkpoint):\n"
              << log.summary() << "\nCheck: LAS >= " << std::setprecision(0) << 100 * las_required << "% and >= "
              << las_gain_required << "x the untrained LAS: " << (pass ? "PASS" : "FAIL") << "\n";
    return pass ? 0 : 1;
}
