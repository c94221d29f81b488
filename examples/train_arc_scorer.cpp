// train_arc_scorer - train a biaffine arc scorer through the full pipeline.
//
// What to copy into your parser:
//   * the training step (train_step): forward in mode::train through
//     with_splits(with_minibatch_by_padded_size(scorer, budget)), the loss and
//     its gradient w.r.t. the scorer's output, backprop, an optimizer step.
//     In mode::train the arc scorer's output is already the softmax over head
//     candidates (each row of a split's [n, n] matrix sums to 1), and backprop
//     wants the gradient w.r.t. that output, not w.r.t. the logits. For the mean
//     negative log-likelihood of the gold heads over `count` tokens this is
//     -1 / (p * count) at each token's gold cell and 0 elsewhere.
//   * the optimizer (struct adam): any optimizer works on scorer.parameters()
//     (name, data, grad, size); gradients accumulate, so zero_grad() per step.
//   * evaluation (evaluate): eval-mode predict gives logits; decode with
//     argmax_heads (greedy) or mst_heads (a tree with one root per split).
//   * backprop returns dX per document ([n_tokens, n_in]): feed it to the
//     encoder that produced the token vectors (here there is none).
//
// The data: a generated treebank. Sentences of 4..30 tokens get random
// projective trees (one root, mostly short arcs). In a real parser the token
// vectors come from an encoder (BiLSTM, transformer) that learns to put
// evidence about each token's head into its vector; the generator does that
// explicitly: token t's vector holds a code of its own position p(t) and a
// noisy code of its head's position p(head(t) + noise) (sinusoids at 8
// frequencies; the root carries its own position, i.e. the diagonal), plus 8
// noise features, all mixed by a fixed random matrix into 48 features. So the
// gold head is determined by features of the two tokens, and the scorer has
// to learn to unmix them and match "my head is near position q" against
// "I am at position q" bilinearly. The noise makes neighbours confusable, so
// accuracy stays below 100% and the tree constraint (MST) helps.
//
//   train_arc_scorer [--epochs E] [--quick] [--seed S] [--lr LR] [--save DIR]
//
// Exit status: 0 when the last epoch's mean loss is below 70% of the loss of
// the very first step (the untrained scorer, about ln(n) ~ 3) and the held-out
// MST head accuracy is at least 50% (chance, a uniform guess among a
// sentence's n tokens, is about 6%); 1 otherwise; 2 on bad usage.

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

using example_helpers::adam;
using example_helpers::random_tree;

namespace {

constexpr std::size_t n_freq = 8;                 // sinusoid frequencies per position code
constexpr std::size_t n_noise = 8;                // pure-noise features
constexpr std::size_t n_raw = 4 * n_freq + n_noise;  // own code, head code, noise
constexpr std::size_t n_in = 48;                  // after mixing
constexpr double head_jitter = 0.35;              // std of the noise on the head position, in tokens
constexpr double loss_ratio_required = 0.7;       // last epoch loss < 0.7 x first step loss
constexpr double accuracy_required = 0.5;         // held-out MST accuracy >= 50%

struct options {
    std::size_t epochs = 10;
    std::size_t train_sentences = 2400;
    std::size_t test_sentences = 300;
    std::uint64_t seed = 7;
    double lr = 0.01;
    std::string save;
};

[[noreturn]] void usage(const std::string& problem)
{
    std::cerr << "train_arc_scorer: " << problem << "\n"
              << "usage: train_arc_scorer [--epochs E] [--quick] [--seed S] [--lr LR] [--save DIR]\n";
    std::exit(2);
}

options parse_args(int argc, char** argv)
{
    options o;
    bool epochs_given = false;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        if (a == "--quick") {  // a few seconds: the smoke test
            o.train_sentences = 600;
            o.test_sentences = 150;
            if (!epochs_given) o.epochs = 8;
            continue;
        }
        if (a == "--help" || a == "-h") usage("train an arc scorer on a generated treebank");
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
        } else if (a == "--save") {
            o.save = v;
            continue;
        } else {
            usage("unknown option " + a);
        }
        if (v.empty() || *end != '\0') usage("bad value for " + a + ": " + v);
    }
    if (o.epochs == 0) usage("--epochs must be positive");
    return o;
}

// ----------------------------------------------------------------- the data

// Documents of a few sentences each, `[n_tokens, n_in]`, with gold heads per
// sentence (heads[m] == m for the root) and the split lengths.
struct treebank {
    std::vector<xt::xtensor<float, 2>> docs;
    std::vector<std::vector<std::size_t>> splits;  // per document
    std::vector<std::vector<std::size_t>> gold;    // per sentence, in document order
    std::size_t tokens = 0;
};

class generator {
public:
    explicit generator(std::uint64_t seed) : rng_(seed), mix_(n_in * n_raw)
    {
        std::normal_distribution<double> normal(0.0, 1.0 / std::sqrt(double(n_raw)));
        for (double& w : mix_) w = normal(rng_);
        for (std::size_t k = 0; k < n_freq; ++k) {
            freq_[k] = 2.0 * 3.14159265358979323846 / (2.5 * std::pow(1.6, double(k)));  // periods 2.5 .. 67 tokens
        }
    }

    treebank make(std::size_t n_sentences, std::size_t sentences_per_doc)
    {
        treebank tb;
        std::uniform_int_distribution<std::size_t> length(4, 30);
        for (std::size_t s = 0; s < n_sentences; s += sentences_per_doc) {
            std::vector<std::size_t> lens;
            for (std::size_t j = s; j < std::min(n_sentences, s + sentences_per_doc); ++j) lens.push_back(length(rng_));
            const std::size_t rows = std::accumulate(lens.begin(), lens.end(), std::size_t(0));
            xt::xtensor<float, 2> x = xt::xtensor<float, 2>::from_shape({rows, n_in});
            std::size_t row = 0;
            for (std::size_t n : lens) {
                std::vector<std::size_t> heads(n);
                random_tree(0, n, n, heads, rng_);
                for (std::size_t m = 0; m < n; ++m) {
                    if (heads[m] == n) heads[m] = m;  // the root: its own index
                    encode(x, row + m, double(m), double(heads[m]));
                }
                tb.gold.push_back(std::move(heads));
                row += n;
            }
            tb.tokens += rows;
            tb.docs.push_back(std::move(x));
            tb.splits.push_back(std::move(lens));
        }
        return tb;
    }

private:
    void encode(xt::xtensor<float, 2>& x, std::size_t row, double self, double head)
    {
        std::normal_distribution<double> jitter(0.0, head_jitter), noise(0.0, 1.0);
        const double h = head + jitter(rng_);
        double raw[n_raw];
        for (std::size_t k = 0; k < n_freq; ++k) {
            raw[2 * k] = std::cos(freq_[k] * self);
            raw[2 * k + 1] = std::sin(freq_[k] * self);
            raw[2 * n_freq + 2 * k] = std::cos(freq_[k] * h);
            raw[2 * n_freq + 2 * k + 1] = std::sin(freq_[k] * h);
        }
        for (std::size_t j = 4 * n_freq; j < n_raw; ++j) raw[j] = noise(rng_);
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

// ------------------------------------------------------------ the training

// One step on a minibatch of documents; returns the summed NLL of its tokens
// (before the update).
template <class Pipeline, class Docs>
double train_step(Pipeline& pipeline, biaffine::biaffine_scorer<float>& scorer, adam& opt, const Docs& docs,
                  const std::vector<std::vector<std::size_t>>& splits,
                  const std::vector<std::vector<std::size_t>>& gold)
{
    scorer.zero_grad();
    // Y[k]: split k's [n, n] softmax over head candidates (row m: dependent m).
    auto [Y, backprop] = pipeline.forward(docs, splits, biaffine::mode::train);
    std::size_t count = 0;
    for (const auto& g : gold) count += g.size();
    double loss = 0;
    std::vector<xt::xtensor<float, 2>> dY;  // gradient w.r.t. Y, one [n, n] per split
    dY.reserve(Y.size());
    for (std::size_t k = 0; k < Y.size(); ++k) {
        const std::size_t n = gold[k].size();
        xt::xtensor<float, 2> d = xt::zeros<float>({n, n});
        for (std::size_t m = 0; m < n; ++m) {
            // Floor p so that a vanishing probability gives a large but finite gradient.
            const double p = std::max(double(Y[k](m, gold[k][m])), 1e-30);
            loss -= std::log(p);
            d(m, gold[k][m]) = static_cast<float>(-1.0 / (p * double(count)));
        }
        dY.push_back(std::move(d));
    }
    // dX: [n_tokens, n_in] per document, for an encoder below the scorer.
    auto dX = backprop(Pipeline::grad_views(dY));
    (void)dX;
    opt.step(scorer);
    return loss;
}

struct accuracy {
    double argmax = 0, mst = 0;
};

// Held-out head accuracy (fraction of tokens whose decoded head is the gold one).
template <class Pipeline>
accuracy evaluate(const Pipeline& pipeline, const treebank& test)
{
    const biaffine::score_list<float> logits = pipeline.predict(test.docs, test.splits);
    std::size_t greedy_ok = 0, mst_ok = 0;
    for (std::size_t k = 0; k < logits.size(); ++k) {
        const std::vector<std::size_t> greedy = biaffine::argmax_heads(logits[k]);
        const std::vector<std::size_t> tree = biaffine::mst_heads(logits[k]);
        for (std::size_t m = 0; m < tree.size(); ++m) {
            greedy_ok += greedy[m] == test.gold[k][m] ? 1 : 0;
            mst_ok += tree[m] == test.gold[k][m] ? 1 : 0;
        }
    }
    return {double(greedy_ok) / double(test.tokens), double(mst_ok) / double(test.tokens)};
}

}  // namespace

int main(int argc, char** argv)
{
    using clock = std::chrono::steady_clock;
    const options o = parse_args(argc, argv);
    std::cout << "biaffine " << biaffine::version_string
              << " - train_arc_scorer: train the arc scorer through with_splits(with_minibatch_by_padded_size(...))\n\n";

    generator gen(o.seed);
    const treebank train = gen.make(o.train_sentences, 4);
    const treebank test = gen.make(o.test_sentences, 4);
    // A uniform guess is right with probability 1/n for each of a sentence's n
    // tokens: one expected hit per sentence.
    const double chance = double(test.gold.size()) / double(test.tokens);
    std::cout << "Generated treebank: " << train.gold.size() << " training sentences (" << train.tokens
              << " tokens) in " << train.docs.size() << " documents, " << test.gold.size() << " held-out sentences ("
              << test.tokens << " tokens); " << n_in << " features per token.\n"
              << "Chance head accuracy (uniform guess among a sentence's tokens): " << std::fixed
              << std::setprecision(1) << 100.0 * chance << "%\n\n";

    biaffine::scorer_config cfg;
    cfg.n_in = n_in;
    cfg.hidden = 64;
    cfg.dropout = 0.0;
    cfg.seed = o.seed;
    biaffine::biaffine_scorer<float> scorer(cfg);
    // The layers hold the scorer by reference: its parameters are the ones trained.
    auto pipeline =
        biaffine::with_splits(biaffine::with_minibatch_by_padded_size(scorer, biaffine::budget::megabytes(8)));
    adam opt(o.lr);

    // Minibatches of 8 documents (32 sentences), visited in a new order each epoch.
    constexpr std::size_t docs_per_step = 8;
    std::vector<std::size_t> order(train.docs.size());
    std::iota(order.begin(), order.end(), std::size_t(0));
    std::mt19937_64 shuffle_rng(o.seed + 1);
    std::vector<std::size_t> first_sentence(train.docs.size() + 1, 0);
    for (std::size_t d = 0; d < train.docs.size(); ++d) first_sentence[d + 1] = first_sentence[d] + train.splits[d].size();

    const accuracy before = evaluate(pipeline, test);
    std::cout << "before training: held-out accuracy argmax " << std::setprecision(1) << 100 * before.argmax
              << "%, MST " << 100 * before.mst << "%\n";
    std::vector<double> epoch_loss;
    double first_step_loss = -1;  // mean loss of the untrained scorer on the first minibatch
    accuracy acc;
    const auto t0 = clock::now();
    for (std::size_t epoch = 1; epoch <= o.epochs; ++epoch) {
        const auto te = clock::now();
        std::shuffle(order.begin(), order.end(), shuffle_rng);
        double loss = 0;
        for (std::size_t b = 0; b < order.size(); b += docs_per_step) {
            // Views of the batch's documents: the pipeline takes Eigen maps as
            // well as xtensor arrays, and never copies a document.
            std::vector<Eigen::Map<const biaffine::row_matrix<float>>> docs;
            std::vector<std::vector<std::size_t>> splits, gold;
            for (std::size_t i = b; i < std::min(order.size(), b + docs_per_step); ++i) {
                const std::size_t d = order[i];
                const auto& x = train.docs[d];
                docs.emplace_back(x.data(), Eigen::Index(x.shape()[0]), Eigen::Index(x.shape()[1]));
                splits.push_back(train.splits[d]);
                for (std::size_t s = first_sentence[d]; s < first_sentence[d + 1]; ++s) gold.push_back(train.gold[s]);
            }
            const double step_loss = train_step(pipeline, scorer, opt, docs, splits, gold);
            if (first_step_loss < 0) {
                std::size_t count = 0;
                for (const auto& g : gold) count += g.size();
                first_step_loss = step_loss / double(count);
                std::cout << "first step (untrained): mean loss " << std::setprecision(4) << first_step_loss << "\n";
            }
            loss += step_loss;
        }
        epoch_loss.push_back(loss / double(train.tokens));
        acc = evaluate(pipeline, test);
        std::cout << "epoch " << std::setw(3) << epoch << "  mean loss " << std::setprecision(4) << epoch_loss.back()
                  << "  held-out accuracy argmax " << std::setprecision(1) << std::setw(5) << 100 * acc.argmax
                  << "%  MST " << std::setw(5) << 100 * acc.mst << "%  (" << std::setprecision(2)
                  << std::chrono::duration<double>(clock::now() - te).count() << " s)\n";
    }
    const double seconds = std::chrono::duration<double>(clock::now() - t0).count();

    if (!o.save.empty()) {
        biaffine::save_npy(scorer, o.save);  // load with biaffine::load_npy(scorer, dir)
        std::cout << "saved the parameters to " << o.save << "/*.npy\n";
    }
    const bool loss_fell = epoch_loss.back() < loss_ratio_required * first_step_loss;
    const bool learned = acc.mst >= accuracy_required;
    std::cout << std::setprecision(1) << "\nTrained " << o.epochs << " epochs in " << std::setprecision(2) << seconds
              << " s. Final held-out head accuracy: argmax " << std::setprecision(1) << 100 * acc.argmax << "%, MST "
              << 100 * acc.mst << "% (chance " << 100 * chance << "%).\n"
              << "Checks: mean loss " << std::setprecision(3) << first_step_loss << " (first step) -> "
              << epoch_loss.back() << " (last epoch)" << (loss_fell ? " fell" : " did NOT fall") << " below "
              << std::setprecision(0) << 100 * loss_ratio_required << "% of the first step's; MST accuracy "
              << (learned ? ">= " : "< ") << 100 * accuracy_required << "%: " << (loss_fell && learned ? "PASS" : "FAIL")
              << "\n";
    return loss_fell && learned ? 0 : 1;
}
