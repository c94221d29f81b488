// train_treebank_parser - a labelled dependency parser trained on a real
// treebank (CoNLL-U, e.g. Universal Dependencies English EWT): embeddings ->
// a residual dilated convolution encoder -> this library's arc scorer and
// label scorer, trained together; MST arcs, labels at the predicted heads.
//
// What to copy into your parser:
//   * CoNLL-U in and out (biaffine/conllu.hpp): documents by # newdoc, split
//     lengths from sentences, split-relative gold heads (conllu::scorer_heads),
//     predictions written back (conllu::set_scorer_heads), scores as the CoNLL
//     2018 shared task (conllu::evaluate).
//   * the encoder: features of a word (lowercased form from a vocabulary;
//     hashed: the lowercased form, prefixes of 1 and 3 characters, suffixes
//     of 1 to 4, the shape string; the gold UPOS only with --gold-tags) are
//     summed embeddings; then residual convolution layers,
//     each token seeing +-dilation neighbours in its sentence (dilations 1, 2,
//     4, 8, ...: a receptive field of +-2 (2^L - 1) words), computed as one
//     GEMM per layer on gathered rows [N, 3D] x [3D, D] and backpropagated by
//     hand (see encoder::backward). Both scorers' dX are summed into it.
//   * the training step: arc logits (train_output::logits) through
//     with_splits(with_minibatch_by_padded_size(...)) and cross_entropy_heads
//     (--loss local, the default) or the first-order tree CRF (--loss crf:
//     tree_crf_loss, log Z over the trees with one root minus the gold
//     tree's score; over projective trees with --projective, the training
//     sentences whose gold tree is not projective then skipped and counted);
//     label logits at the gold heads (forward_heads) and cross_entropy_labels;
//     Adam (training_helpers.hpp for the scorers, a row-lazy one for the
//     embedding tables here), the learning rate falling linearly to
//     lr * --lr-end over --epochs; dropout in the encoder and the scorers.
//   * parsing: encode -> arc logits -> heads (--decode mst: mst_heads, or
//     eisner_heads with --projective; --decode mbr: the arc marginals of the
//     tree CRF straight from the batched layers, predict_marginals, decoded
//     by mst_heads / eisner_heads on the probabilities: the tree with the most
//     expected correct heads) -> predict_heads at the decoded heads -> best
//     label -> CoNLL-U out, timed end to end.
//   * a saved parser (save_model / read_manifest / read_vocab / load_weights):
//     a folder with a manifest (format version, sizes, the arc loss, decoder
//     and tree kind: version 3; a version 2 folder loads as local / mst /
//     non-projective, what it was trained and parsed with), the
//     vocabularies, the encoder's and the scorers' parameters as .npy (the
//     scorers through biaffine/scorer_io.hpp); a load that does not fit says
//     which file and what is wrong.
//
//   train_treebank_parser --train FILE --dev FILE [--epochs N] [--threads N]
//       [--budget-mb X] [--out FILE] [--parse FILE]... [--text] [--width D]
//       [--layers L] [--arc-hidden H] [--label-hidden H] [--seed S] [--lr LR]
//       [--lr-end F] [--minutes M] [--precision fp32|bf16] [--gold-tags] [--save DIR]
//       [--no-check] [--compare-bf16] [--quick] [--loss local|crf]
//       [--decode mst|mbr] [--projective]
//   train_treebank_parser --model DIR [--dev FILE] [--parse FILE]... [--text]
//       [--out FILE] [--threads N] [--budget-mb X] [--decode mst|mbr] [--projective]
//
// No gold tags by default: the UPOS column is not read, so the parser parses
// text nobody tagged; --gold-tags adds the gold UPOS as a feature (then the
// files parsed need UPOS too). --save DIR writes the trained parser; --model
// DIR loads one instead of training (sizes, tags and precision from it) and
// gives the same parses, byte for byte; it decodes as saved unless --decode
// or --projective is given with it.
// --precision bf16 trains (and parses) with the scorers in bf16 (mixed
// precision: bf16 products, fp32 master weights and gradients); run it
// beside an fp32 run of the same seed for the learning curves.
// With OpenMP, run it with OMP_WAIT_POLICY=passive on a shared machine:
// spinning idle OpenMP threads halved parsing speed on a loaded 2-core box.
// --quick trains a few seconds on the shipped EWT sample (the smoke test; the
// files default to tests/data/ud-english-ewt-sample when not given).
// --parse FILE (repeatable) times parsing those files after training at 1
// and at --threads threads (default: the dev file): CoNLL-U, annotated or not
// (HEAD and DEPREL `_`), or plain text with --text or when named *.txt (one
// sentence a line, tokens split at whitespace). --out FILE writes the parse
// of the one --parse file (else of the dev file) as CoNLL-U: HEAD and DEPREL
// filled in, every other column and line as read. --minutes M: no epoch
// starts that would, as long as the last one, end past M minutes of training.
//
// Exit status: after training, 0 when the final dev UAS is at least 15 points
// above the best of the two trivial baselines measured on the same dev file
// (every word attached to its left neighbour / to its right neighbour, the
// first / last word the root), 1 otherwise (--no-check: 0); with --model, 0
// once parsed; 2 on bad usage, unreadable or malformed input, or a saved
// parser that does not load (the error names the file and line).

#include <biaffine/biaffine.hpp>
#include <biaffine/conllu.hpp>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iomanip>
#include <iostream>
#include <numeric>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

#include <sys/resource.h>

#include <Eigen/Core>

#include "training_helpers.hpp"  // adam (scorer parameters)

namespace {

namespace conllu = biaffine::conllu;
using mat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using clock_type = std::chrono::steady_clock;

constexpr double baseline_margin = 15.0;  // UAS points above the best trivial baseline

struct options {
    std::string train, dev, out;
    std::string save, model;  // --save DIR after training; --model DIR: load instead of training
    std::vector<std::string> parse_files;
    // Sizes for parsing speed: label scores at heads cost 2 (h+1)^2 o FLOPs a word (51 relations
    // on EWT), with label_hidden 128 more than the whole encoder at width 256. Words per CPU
    // second parsing EWT dev+test on one thread (untrained weights): width 256 / arc 256 / label
    // 128: 16.5k; 192 / 192 / 64: 35.7k; 160 / 160 / 64: 45.7k; 128 / 128 / 64: 59.8k.
    std::size_t epochs = 30, threads = 1, width = 128, layers = 4, arc_hidden = 128, label_hidden = 64;
    std::size_t batch_tokens = 1000;
    double budget_mb = 16, lr = 2e-3, minutes = 0;
    double lr_end = 1;  // the learning rate falls linearly to lr * lr_end over the --epochs asked for
    double dropout = 0.25;
    std::uint64_t seed = 1;
    bool quick = false;
    bool gold_tags = false;  // the gold UPOS as a feature (then text to parse needs UPOS too)
    bool text = false;       // --parse files are plain text (also any file named *.txt)
    bool check = true;       // the exit status checks the dev UAS after training
    bool sizes_given = false;
    bool write_parse = false;  // --out gets the --parse file's parse (else the dev file's)
    bool compare_bf16 = false;  // after training: dev parsed in fp32 and in bf16, side by side
    // The arc loss (local: cross_entropy_heads; crf: tree_crf_loss), the
    // decoder (mst: the best tree of the logits; mbr: of the marginals) and
    // the trees of both (projective: Eisner's). With --model the saved
    // parser's, unless --decode / --projective are given.
    std::string loss = "local", decode = "mst";
    bool projective = false;
    bool decode_given = false, projective_given = false;
    // The scorers' arithmetic, in training too (bf16: mixed precision, fp32
    // master weights; the encoder stays fp32).
    biaffine::compute_precision precision = biaffine::compute_precision::fp32;
};

[[noreturn]] void usage(const std::string& problem)
{
    std::cerr << "train_treebank_parser: " << problem << "\n"
              << "usage: train_treebank_parser --train FILE --dev FILE [--epochs N] [--threads N] [--budget-mb X]\n"
                 "       [--out FILE] [--parse FILE]... [--text] [--width D] [--layers L] [--arc-hidden H]\n"
                 "       [--label-hidden H] [--seed S] [--lr LR] [--lr-end F] [--minutes M] [--precision fp32|bf16]\n"
                 "       [--gold-tags] [--save DIR] [--no-check] [--compare-bf16] [--quick] [--loss local|crf]\n"
                 "       [--decode mst|mbr] [--projective]\n"
                 "   or: train_treebank_parser --model DIR [--dev FILE] [--parse FILE]... [--text] [--out FILE]\n"
                 "       [--threads N] [--budget-mb X] [--decode mst|mbr] [--projective]\n";
    std::exit(2);
}

options parse_args(int argc, char** argv)
{
    options o;
    bool epochs_given = false, loss_given = false;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        if (a == "--quick") {
            o.quick = true;
            continue;
        }
        if (a == "--projective") {
            o.projective = o.projective_given = true;
            continue;
        }
        bool* flag = a == "--compare-bf16" ? &o.compare_bf16 : a == "--gold-tags" ? &o.gold_tags : a == "--text" ? &o.text : nullptr;
        if (flag != nullptr || a == "--no-check") {
            if (flag != nullptr) *flag = true;
            else o.check = false;
            o.sizes_given = o.sizes_given || a == "--gold-tags";  // a saved parser's own
            continue;
        }
        if (a == "--help" || a == "-h") usage("train a parser on a CoNLL-U treebank");
        if (i + 1 >= argc) usage("missing value after " + a);
        const std::string v = argv[++i];
        char* end = nullptr;
        auto count = [&] { return std::size_t(std::strtoull(v.c_str(), &end, 10)); };
        auto real = [&] { return std::strtod(v.c_str(), &end); };
        if (a == "--train") o.train = v;
        else if (a == "--dev") o.dev = v;
        else if (a == "--out") o.out = v;
        else if (a == "--parse") o.parse_files.push_back(v);
        else if (a == "--save") o.save = v;
        else if (a == "--model") o.model = v;
        else if (a == "--epochs") o.epochs = count(), epochs_given = true;
        else if (a == "--threads") o.threads = count();
        else if (a == "--width") o.width = count(), o.sizes_given = true;
        else if (a == "--layers") o.layers = count(), o.sizes_given = true;
        else if (a == "--arc-hidden") o.arc_hidden = count(), o.sizes_given = true;
        else if (a == "--label-hidden") o.label_hidden = count(), o.sizes_given = true;
        else if (a == "--seed") o.seed = count();
        else if (a == "--budget-mb") o.budget_mb = real();
        else if (a == "--lr") o.lr = real();
        else if (a == "--lr-end") o.lr_end = real();
        else if (a == "--minutes") o.minutes = real();
        else if (a == "--precision" && (v == "fp32" || v == "bf16"))
            o.precision = v == "bf16" ? biaffine::compute_precision::bf16 : biaffine::compute_precision::fp32,
            o.sizes_given = true;
        else if (a == "--precision") usage("--precision takes fp32 or bf16, not " + v);
        else if (a == "--loss" && (v == "local" || v == "crf")) o.loss = v, loss_given = true;
        else if (a == "--loss") usage("--loss takes local or crf, not " + v);
        else if (a == "--decode" && (v == "mst" || v == "mbr")) o.decode = v, o.decode_given = true;
        else if (a == "--decode") usage("--decode takes mst or mbr, not " + v);
        else usage("unknown option " + a);
        if (end != nullptr && (v.empty() || *end != '\0')) usage("bad value for " + a + ": " + v);
    }
    if (o.quick) {
        const std::string dir = BIAFFINE_EXAMPLE_SAMPLE_DIR;
        if (o.train.empty()) o.train = dir + "/en_ewt-sample-train.conllu";
        if (o.dev.empty()) o.dev = dir + "/en_ewt-sample-dev.conllu";
        if (!epochs_given) o.epochs = 6;
        o.batch_tokens = 500;
    }
    if (!o.model.empty()) {
        // The sizes, the tags and the precision are the saved parser's.
        if (!o.train.empty() || !o.save.empty() || o.sizes_given || epochs_given || o.quick || loss_given)
            usage("--model DIR parses with a saved parser: --train, --save, --epochs, --quick, --gold-tags, --loss and "
                  "the sizes (--width, --layers, --arc-hidden, --label-hidden, --precision) do not go with it");
        if (o.dev.empty() && o.parse_files.empty()) usage("--model DIR needs something to parse: --parse FILE or --dev FILE");
    } else if (o.train.empty() || o.dev.empty()) {
        usage("--train and --dev are required (or --quick, or --model DIR)");
    }
    if (o.epochs == 0 || o.threads == 0 || o.width == 0 || o.layers == 0 || !(o.budget_mb > 0))
        usage("--epochs, --threads, --width, --layers and --budget-mb must be positive");
    if (!(o.lr > 0) || !(o.lr_end >= 0 && o.lr_end <= 1)) usage("--lr must be positive and --lr-end within [0, 1]");
    if (!o.out.empty() && o.parse_files.size() > 1)
        usage("--out FILE writes the parse of one --parse file (or of --dev), not of " + std::to_string(o.parse_files.size()));
    o.write_parse = !o.parse_files.empty();
    if (o.parse_files.empty()) o.parse_files.push_back(o.dev);
    return o;
}

double cpu_seconds()
{
    rusage u{};
    getrusage(RUSAGE_SELF, &u);
    return double(u.ru_utime.tv_sec + u.ru_stime.tv_sec) + 1e-6 * double(u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

double max_rss_mb()
{
    rusage u{};
    getrusage(RUSAGE_SELF, &u);
    return double(u.ru_maxrss) / 1024.0;  // KiB on Linux
}

// --- features --------------------------------------------------------------

// The features of a word, one embedding table each, summed (spaCy's
// MultiHashEmbed idea: several hashed views of a word, so that a word never
// seen in training still has its affixes and shape): the vocabulary word,
// then hashed: the lowercased form (rare words too), prefixes of 1 and 3
// characters, suffixes of 1 to 4, the shape string; and the UPOS (only with
// --gold-tags). Without tags the affixes carry most of what the tag told.
enum feature : std::size_t { f_word, f_norm, f_prefix1, f_prefix3, f_suffix1, f_suffix2, f_suffix3, f_suffix4, f_shape, f_upos, n_features };
constexpr const char* feature_names = "word norm prefix1 prefix3 suffix1 suffix2 suffix3 suffix4 shape upos";
constexpr std::size_t norm_buckets = 8192, affix_buckets = 4096;  // affix and shape tables alike

std::string lowercase(const std::string& s)
{
    std::string r = s;
    for (char& c : r) c = (c >= 'A' && c <= 'Z') ? char(c - 'A' + 'a') : c;
    return r;
}

// Byte offsets where the UTF-8 characters of s start, then s.size(): affixes
// are cut at characters, not inside one.
std::vector<std::size_t> char_starts(const std::string& s)
{
    std::vector<std::size_t> r;
    for (std::size_t i = 0; i < s.size(); ++i)
        if ((static_cast<unsigned char>(s[i]) & 0xC0) != 0x80) r.push_back(i);
    r.push_back(s.size());
    return r;
}

// The shape string: upper-case letters X, lower-case x, digits d, other ASCII
// as is, any other character u; a run longer than 4 cut at 4 ("Xxxxx" for
// "London" and "Paris"... "Xxxx", "dd.dd", "x.x.").
std::string shape_of(const std::string& s)
{
    std::string r;
    std::size_t run = 0;
    for (std::size_t i = 0; i < s.size(); ++i) {
        const unsigned char c = static_cast<unsigned char>(s[i]);
        if ((c & 0xC0) == 0x80) continue;  // inside a multi-byte character
        const char k = c >= 0x80 ? 'u' : std::isupper(c) ? 'X' : std::islower(c) ? 'x' : std::isdigit(c) ? 'd' : char(c);
        run = !r.empty() && r.back() == k ? run + 1 : 1;
        if (run <= 4) r += k;
    }
    return r;
}

// A hashed feature's bucket: FNV-1a (64 bits), not std::hash, whose values
// differ between standard libraries - a saved parser must find the same
// buckets wherever it is loaded.
std::uint32_t hash_bucket(const std::string& s, std::size_t buckets)
{
    std::uint64_t h = 14695981039346656037ull;
    for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
    return std::uint32_t(h % buckets);
}

// Vocabularies from the training file: words seen twice or more (else the
// unknown word, id 0), UPOS tags (0: unknown) and relations. Without gold
// tags (the default) the UPOS feature is always id 0: the tags are only the
// tagger's targets, and text to parse needs none.
struct vocab {
    std::unordered_map<std::string, std::size_t> words, upos, labels;
    std::vector<std::size_t> word_count;  // by id
    std::vector<std::string> word_names, upos_names, label_names;  // by id (word 0 and UPOS 0: unknown, "")
    bool gold_tags = false;

    vocab() = default;

    vocab(const std::vector<conllu::sentence>& train, bool use_gold_tags) : gold_tags(use_gold_tags)
    {
        std::unordered_map<std::string, std::size_t> counts;
        std::vector<std::string> first_seen;  // words in order of appearance: ids do not depend on hashing
        upos_names.emplace_back();
        for (const auto& s : train)
            for (const auto& w : s.words) {
                if (++counts[lowercase(w.form)] == 1) first_seen.push_back(lowercase(w.form));
                add(upos, upos_names, w.upos);
                add(labels, label_names, w.deprel);
            }
        word_count.push_back(0);
        word_names.emplace_back();
        for (const auto& w : first_seen)
            if (counts[w] >= 2) {
                words.emplace(w, word_count.size());
                word_count.push_back(counts[w]);
                word_names.push_back(w);
            }
    }

    // Adds `name` to a name -> id map and its id-ordered list (the next id: the list's size).
    static void add(std::unordered_map<std::string, std::size_t>& ids, std::vector<std::string>& names,
                    const std::string& name)
    {
        if (ids.emplace(name, names.size()).second) names.push_back(name);
    }

    // The UPOS id of a tag (0: not seen in training).
    std::uint32_t tag_id(const std::string& tag) const
    {
        const auto t = upos.find(tag);
        return std::uint32_t(t == upos.end() ? 0 : t->second);
    }

    std::size_t sizes(std::size_t f) const
    {
        if (f == f_word) return word_count.size();
        if (f == f_upos) return gold_tags ? upos_names.size() : 1;
        return f == f_norm ? norm_buckets : affix_buckets;
    }

    // Feature ids of every word, [n_words][n_features] flattened.
    void features(const conllu::sentence& s, std::vector<std::uint32_t>& out) const
    {
        for (const auto& w : s.words) {
            const std::string lower = lowercase(w.form);
            const auto it = words.find(lower);
            const std::vector<std::size_t> c = char_starts(lower);
            const std::size_t chars = c.size() - 1;
            const auto prefix = [&](std::size_t k) { return hash_bucket(lower.substr(0, c[std::min(k, chars)]), affix_buckets); };
            const auto suffix = [&](std::size_t k) { return hash_bucket(lower.substr(c[chars - std::min(k, chars)]), affix_buckets); };
            const std::uint32_t f[n_features] = {std::uint32_t(it == words.end() ? 0 : it->second),
                                                 hash_bucket(lower, norm_buckets),
                                                 prefix(1), prefix(3), suffix(1), suffix(2), suffix(3), suffix(4),
                                                 hash_bucket(shape_of(w.form), affix_buckets),
                                                 gold_tags ? tag_id(w.upos) : 0};
            out.insert(out.end(), f, f + n_features);
        }
    }
};

// A batch of sentences laid out one after the other: N rows in all.
struct batch {
    std::vector<std::size_t> lengths, starts;
    std::vector<std::uint32_t> ids;   // [N][n_features]
    std::vector<std::uint32_t> tags;  // [N] the UPOS ids in the file (the tagger's targets in training)
    std::size_t rows = 0;

    void add(const vocab& v, const conllu::sentence& s)
    {
        starts.push_back(rows);
        lengths.push_back(s.words.size());
        rows += s.words.size();
        v.features(s, ids);
        for (const auto& w : s.words) tags.push_back(v.tag_id(w.upos));
    }
};

// --- the encoder -----------------------------------------------------------

// Row-lazy Adam for the encoder (Dozat & Manning's betas): dense matrices
// every step, embedding tables only in the rows the step touched.
struct encoder_adam {
    double lr, b1 = 0.9, b2 = 0.9, eps = 1e-8;
    std::size_t t = 0;
    void update(float* p, float* g, float* m, float* v, std::size_t n) const
    {
        const double c1 = 1 - std::pow(b1, double(t)), c2 = 1 - std::pow(b2, double(t));
        const float a = float(lr * std::sqrt(c2) / c1);
        for (std::size_t j = 0; j < n; ++j) {
            m[j] = float(b1) * m[j] + float(1 - b1) * g[j];
            v[j] = float(b2) * v[j] + float(1 - b2) * g[j] * g[j];
            p[j] -= a * m[j] / (std::sqrt(v[j]) + float(eps));
            g[j] = 0;
        }
    }
};

struct param {
    mat w, g, m, v;
    explicit param(std::size_t r = 0, std::size_t c = 0)
        : w(mat::Zero(Eigen::Index(r), Eigen::Index(c))), g(w), m(w), v(w) {}
};

// Parameters ([rows, cols] each) to `<dir>/<name>.npy`, and back.
template <class Named>
void save_params(const std::string& dir, const Named& params)
{
    for (const auto& [name, p] : params)
        biaffine::detail::write_npy(dir + "/" + name + ".npy", dir + "/" + name + ".npy", p->w.data(), std::size_t(p->w.size()),
                                    {std::size_t(p->w.rows()), std::size_t(p->w.cols())});
}

// Every file is read and its shape checked against the parameter's before
// any parameter changes (errors name the file: missing, not .npy, other
// shape, truncated).
template <class Named>
void load_params(const std::string& dir, const Named& params)
{
    std::vector<biaffine::tracked_vector<float>> values(params.size());
    for (std::size_t i = 0; i < params.size(); ++i) {
        const mat& w = params[i].second->w;
        biaffine::detail::read_npy_checked(dir + "/" + params[i].first + ".npy", {std::size_t(w.rows()), std::size_t(w.cols())},
                                           values[i]);
    }
    for (std::size_t i = 0; i < params.size(); ++i) std::copy(values[i].begin(), values[i].end(), params[i].second->w.data());
}

class encoder {
public:
    encoder(const vocab& v, std::size_t width, std::size_t layers, double dropout, std::uint64_t seed)
        : D_(width), p_(float(dropout)), rng_(seed)
    {
        std::normal_distribution<float> emb(0.f, 0.1f);
        for (std::size_t f = 0; f < n_features; ++f) {
            emb_.emplace_back(v.sizes(f), D_);
            emb_.back().w = emb_.back().w.unaryExpr([&](float) { return emb(rng_); });
        }
        touched_.resize(n_features);
        // He initialisation over the 3D inputs of a window, halved so that the
        // residual sum does not blow up at the start.
        std::normal_distribution<float> conv(0.f, 0.5f * std::sqrt(2.f / float(3 * D_)));
        for (std::size_t l = 0; l < layers; ++l) {
            conv_.emplace_back(3 * D_, D_);
            conv_.back().w = conv_.back().w.unaryExpr([&](float) { return conv(rng_); });
            bias_.emplace_back(1, D_);
            dilation_.push_back(std::size_t(1) << l);
        }
        word_count_ = v.word_count;
    }

    std::size_t width() const { return D_; }

    // Forward: H [N, D]. In training keeps what backward needs.
    const mat& forward(const batch& b, bool train)
    {
        const Eigen::Index N = Eigen::Index(b.rows), D = Eigen::Index(D_);
        train_ = train;
        h_.resize(conv_.size() + 1);
        h_[0].setZero(N, D);
        ids_ = b.ids;
        if (train) {
            // Word dropout: a rare word becomes the unknown word with
            // probability 0.25 / (0.25 + count) (Kiperwasser & Goldberg).
            for (std::size_t t = 0; t < b.rows; ++t) {
                std::uint32_t& w = ids_[t * n_features];
                if (w != 0 && uniform_(rng_) < 0.25 / (0.25 + double(word_count_[w]))) w = 0;
            }
        }
        for (std::size_t t = 0; t < b.rows; ++t)
            for (std::size_t f = 0; f < n_features; ++f) h_[0].row(Eigen::Index(t)) += emb_[f].w.row(ids_[t * n_features + f]);
        if (train) dropout(h_[0], mask0_);
        G_.resize(conv_.size());
        Z_.resize(conv_.size());
        masks_.resize(conv_.size());
        for (std::size_t l = 0; l < conv_.size(); ++l) {
            gather(b, h_[l], dilation_[l], G_[l]);
            Z_[l].noalias() = G_[l] * conv_[l].w;
            Z_[l].rowwise() += bias_[l].w.row(0);
            mat A = Z_[l].cwiseMax(0.f);
            if (train) dropout(A, masks_[l]);
            h_[l + 1] = h_[l] + A;
        }
        return h_.back();
    }

    // Backward from dH [N, D]: accumulates the gradients of every parameter.
    void backward(const batch& b, mat dH)
    {
        for (std::size_t l = conv_.size(); l-- > 0;) {
            mat dZ = dH.cwiseProduct(masks_[l]);
            dZ = (Z_[l].array() > 0.f).select(dZ, 0.f);
            conv_[l].g.noalias() += G_[l].transpose() * dZ;
            bias_[l].g.row(0) += dZ.colwise().sum();
            const mat dG = dZ * conv_[l].w.transpose();
            scatter(b, dG, dilation_[l], dH);  // dH += the window's gradient (the residual path kept)
        }
        dH = dH.cwiseProduct(mask0_);
        for (std::size_t t = 0; t < b.rows; ++t)
            for (std::size_t f = 0; f < n_features; ++f) {
                const std::uint32_t id = ids_[t * n_features + f];
                emb_[f].g.row(id) += dH.row(Eigen::Index(t));
                touched_[f].push_back(id);
            }
    }

    void step(encoder_adam& opt)
    {
        ++opt.t;
        for (auto* p : dense()) opt.update(p->w.data(), p->g.data(), p->m.data(), p->v.data(), std::size_t(p->w.size()));
        for (std::size_t f = 0; f < n_features; ++f) {
            auto& rows = touched_[f];
            std::sort(rows.begin(), rows.end());
            rows.erase(std::unique(rows.begin(), rows.end()), rows.end());
            for (std::uint32_t r : rows) {
                auto& e = emb_[f];
                opt.update(&e.w(r, 0), &e.g(r, 0), &e.m(r, 0), &e.v(r, 0), D_);
            }
            rows.clear();
        }
    }

    // The parameters as .npy files in `dir` (which exists): emb_<f>.npy
    // [feature ids, D] by `feature` (word, norm, ..., UPOS); conv_<l>.npy [3D, D];
    // bias_<l>.npy [1, D]. The optimiser's moments are not kept.
    void save(const std::string& dir) const
    {
        std::vector<std::pair<std::string, const param*>> r;
        save_params(dir, named(*this, r));
    }

    void load(const std::string& dir)
    {
        std::vector<std::pair<std::string, param*>> r;
        load_params(dir, named(*this, r));
    }

private:
    // The parameters by file name into `r` (const or not as `self`).
    template <class Self, class Named>
    static const Named& named(Self& self, Named& r)
    {
        for (std::size_t f = 0; f < self.emb_.size(); ++f) r.emplace_back("emb_" + std::to_string(f), &self.emb_[f]);
        for (std::size_t l = 0; l < self.conv_.size(); ++l) {
            r.emplace_back("conv_" + std::to_string(l), &self.conv_[l]);
            r.emplace_back("bias_" + std::to_string(l), &self.bias_[l]);
        }
        return r;
    }

    std::vector<param*> dense()
    {
        std::vector<param*> r;
        for (auto& p : conv_) r.push_back(&p);
        for (auto& p : bias_) r.push_back(&p);
        return r;
    }

    // Inverted dropout with a kept mask (1 / (1 - p) or 0).
    void dropout(mat& x, mat& mask)
    {
        const float keep = 1.f / (1.f - p_);
        mask.resize(x.rows(), x.cols());
        for (Eigen::Index i = 0; i < mask.size(); ++i) mask.data()[i] = uniform_(rng_) < p_ ? 0.f : keep;
        x.array() *= mask.array();
    }

    // G [N, 3D]: row t = (h[t - d], h[t], h[t + d]), zeros past its sentence's ends.
    void gather(const batch& b, const mat& h, std::size_t d, mat& G) const
    {
        G.resize(h.rows(), 3 * h.cols());
        const std::size_t D = D_;
        for (std::size_t s = 0; s < b.lengths.size(); ++s) {
            const std::size_t r0 = b.starts[s], n = b.lengths[s];
            for (std::size_t i = 0; i < n; ++i) {
                float* g = &G(Eigen::Index(r0 + i), 0);
                if (i >= d) std::memcpy(g, &h(Eigen::Index(r0 + i - d), 0), D * sizeof(float));
                else std::fill_n(g, D, 0.f);
                std::memcpy(g + D, &h(Eigen::Index(r0 + i), 0), D * sizeof(float));
                if (i + d < n) std::memcpy(g + 2 * D, &h(Eigen::Index(r0 + i + d), 0), D * sizeof(float));
                else std::fill_n(g + 2 * D, D, 0.f);
            }
        }
    }

    // The transpose of gather, added to dH.
    void scatter(const batch& b, const mat& dG, std::size_t d, mat& dH) const
    {
        const Eigen::Index D = Eigen::Index(D_);
        for (std::size_t s = 0; s < b.lengths.size(); ++s) {
            const std::size_t r0 = b.starts[s], n = b.lengths[s];
            for (std::size_t i = 0; i < n; ++i) {
                const Eigen::Index t = Eigen::Index(r0 + i);
                if (i >= d) dH.row(t - Eigen::Index(d)) += dG.row(t).segment(0, D);
                dH.row(t) += dG.row(t).segment(D, D);
                if (i + d < n) dH.row(t + Eigen::Index(d)) += dG.row(t).segment(2 * D, D);
            }
        }
    }

    std::size_t D_;
    float p_;
    std::mt19937_64 rng_;
    std::uniform_real_distribution<float> uniform_{0.f, 1.f};
    std::vector<param> emb_, conv_, bias_;
    std::vector<std::size_t> dilation_, word_count_;
    std::vector<std::vector<std::uint32_t>> touched_;
    bool train_ = false;
    std::vector<std::uint32_t> ids_;
    std::vector<mat> h_, G_, Z_, masks_;
    mat mask0_;
};

// --- the parser ------------------------------------------------------------

template <class T>
std::vector<std::vector<T>> per_split(const std::vector<T>& flat, const std::vector<std::size_t>& lengths)
{
    std::vector<std::vector<T>> out;
    std::size_t r = 0;
    for (std::size_t n : lengths) {
        out.emplace_back(flat.begin() + std::ptrdiff_t(r), flat.begin() + std::ptrdiff_t(r + n));
        r += n;
    }
    return out;
}

std::size_t argmax_row(const float* y, std::size_t o)
{
    return std::size_t(std::max_element(y, y + o) - y);
}

// UPOS from the encoder's rows: softmax(H W + b), W [D, T], b [1, T], trained
// with the parser (its gradient joins the scorers' in dH), so that text
// without tags gets them and the encoder learns them.
struct tagger {
    param w, b;

    tagger(std::size_t width, std::size_t tags) : w(width, tags), b(1, tags) {}

    mat logits(const mat& H) const
    {
        mat Y = H * w.w;
        Y.rowwise() += b.w.row(0);
        return Y;
    }

    // Cross-entropy against `gold` [N] (rows with id 0, an unknown tag, left
    // out), times `scale`, added to dH [N, D]; returns the unscaled sum.
    double train(const mat& H, const std::vector<std::uint32_t>& gold, double scale, mat& dH)
    {
        mat P = logits(H);
        double loss = 0;
        for (Eigen::Index t = 0; t < P.rows(); ++t) {
            auto row = P.row(t);
            if (gold[std::size_t(t)] == 0) {
                row.setZero();
                continue;
            }
            const float mx = row.maxCoeff();
            row = (row.array() - mx).exp();
            const float z = row.sum();
            row /= z;
            loss -= std::log(std::max(double(row(gold[std::size_t(t)])), 1e-30));
            row(gold[std::size_t(t)]) -= 1.f;
            row *= float(scale);
        }
        w.g.noalias() += H.transpose() * P;
        b.g.row(0) += P.colwise().sum();
        dH.noalias() += P * w.w.transpose();
        return loss;
    }

    // The best tag id of every row (0, the unknown tag, never).
    std::vector<std::uint32_t> predict(const mat& H) const
    {
        const mat Y = logits(H);
        std::vector<std::uint32_t> out(std::size_t(Y.rows()), 0);
        for (Eigen::Index t = 0; Y.cols() > 1 && t < Y.rows(); ++t) {
            Eigen::Index best = 0;
            Y.row(t).tail(Y.cols() - 1).maxCoeff(&best);
            out[std::size_t(t)] = std::uint32_t(best + 1);
        }
        return out;
    }

    void step(const encoder_adam& opt)
    {
        for (param* p : {&w, &b}) opt.update(p->w.data(), p->g.data(), p->m.data(), p->v.data(), std::size_t(p->w.size()));
    }

    std::vector<std::pair<std::string, param*>> named() { return {{"weight", &w}, {"bias", &b}}; }
    std::vector<std::pair<std::string, const param*>> named() const { return {{"weight", &w}, {"bias", &b}}; }
};

struct parser {
    const vocab& v;
    encoder enc;
    tagger tags;
    biaffine::biaffine_scorer<float> arc_scorer, label_scorer;
    biaffine::budget budget;
    biaffine::batch_options opts;
    bool crf = false, mbr = false;  // --loss crf, --decode mbr
    biaffine::tree_kind trees = biaffine::tree_kind::non_projective;  // --projective: projective

    static biaffine::scorer_config config(std::size_t n_in, std::size_t hidden, std::size_t labels, std::uint64_t seed,
                                          double dropout, biaffine::compute_precision precision)
    {
        biaffine::scorer_config c;
        c.precision = precision;
        c.n_in = n_in;
        c.hidden = hidden;
        c.labels = labels;
        c.seed = seed;
        c.dropout = dropout;
        c.train_outputs = biaffine::train_output::logits;
        return c;
    }

    parser(const vocab& voc, const options& o)
        : v(voc),
          enc(voc, o.width, o.layers, o.dropout, o.seed),
          tags(o.width, voc.upos_names.size()),
          arc_scorer(config(o.width, o.arc_hidden, 1, o.seed + 1, o.dropout, o.precision)),
          label_scorer(config(o.width, o.label_hidden, voc.label_names.size(), o.seed + 2, o.dropout, o.precision)),
          budget(biaffine::budget::megabytes(o.budget_mb))
    {
        set_decoding(o);
    }

    void set_decoding(const options& o)
    {
        crf = o.loss == "crf";
        mbr = o.decode == "mbr";
        trees = o.projective ? biaffine::tree_kind::projective : biaffine::tree_kind::non_projective;
    }

    // The heads of one split's `[n, n]` arcs (logits, or marginals under
    // --decode mbr) by the tree kind's decoder.
    std::vector<std::size_t> decode_heads(const biaffine::score_tensor<float>& arcs) const
    {
        return trees == biaffine::tree_kind::projective ? biaffine::eisner_heads(arcs) : biaffine::mst_heads(arcs);
    }

    // One training step on a batch of sentences; returns the summed loss.
    double train_step(const batch& b, const std::vector<std::size_t>& heads, const std::vector<std::size_t>& labels,
                      encoder_adam& enc_opt, example_helpers::adam& arc_opt, example_helpers::adam& label_opt)
    {
        auto arcs = biaffine::with_splits(biaffine::with_minibatch_by_padded_size(arc_scorer, budget, opts));
        auto labs = biaffine::with_splits(biaffine::with_minibatch_by_padded_size(label_scorer, budget, opts));
        const mat& H = enc.forward(b, true);
        const std::vector<Eigen::Map<const mat>> docs{Eigen::Map<const mat>(H.data(), H.rows(), H.cols())};
        const std::vector<std::vector<std::size_t>> splits{b.lengths}, doc_heads{heads};
        const double scale = 1.0 / double(b.rows);
        arc_scorer.zero_grad();
        label_scorer.zero_grad();
        auto [A, arc_bp] = arcs.forward(docs, splits, biaffine::mode::train);
        auto [al, dA] = crf ? biaffine::tree_crf_loss<float>(A, per_split(heads, b.lengths), trees, scale)
                            : biaffine::cross_entropy_heads<float>(A, per_split(heads, b.lengths), scale);
        const auto dX_arcs = arc_bp(decltype(arcs)::grad_views(dA));
        auto [L, label_bp] = labs.forward_heads(docs, splits, doc_heads, biaffine::mode::train);
        auto [ll, dL] = biaffine::cross_entropy_labels<float>(L, per_split(labels, b.lengths), scale);
        const auto dX_labels = label_bp(decltype(labs)::head_grad_views(dL));
        mat dH = Eigen::Map<const mat>(dX_arcs[0].data(), H.rows(), H.cols()) +
                 Eigen::Map<const mat>(dX_labels[0].data(), H.rows(), H.cols());
        const double tl = tags.train(H, b.tags, scale, dH);
        enc.backward(b, std::move(dH));
        enc.step(enc_opt);
        tags.step(enc_opt);  // at the encoder's step count
        arc_opt.step(arc_scorer);
        label_opt.step(label_scorer);
        return (al + ll) / scale + tl;
    }

    // Parses the sentences in place (HEAD and DEPREL), documents by # newdoc,
    // a batch of documents of about `chunk` words encoded at once.
    void parse(std::vector<conllu::sentence>& sents, std::size_t chunk = 4000) { parse(sents, arc_scorer, label_scorer, chunk); }

    // The same with other scorers (e.g. copies in compute_precision::bf16);
    // each batch's arcs the decoder reads (logits; the tree CRF's marginals
    // under --decode mbr) go to on_arcs(first sentence, arcs) too.
    template <class OnArcs = void (*)(std::size_t, const biaffine::score_list<float>&)>
    void parse(std::vector<conllu::sentence>& sents, biaffine::biaffine_scorer<float>& arc,
               biaffine::biaffine_scorer<float>& label, std::size_t chunk = 4000,
               OnArcs on_arcs = [](std::size_t, const biaffine::score_list<float>&) {})
    {
        auto arcs = biaffine::with_splits(biaffine::with_minibatch_by_padded_size(arc, budget, opts));
        auto labs = biaffine::with_splits(biaffine::with_minibatch_by_padded_size(label, budget, opts));
        const auto docs = conllu::documents(sents);
        for (std::size_t d0 = 0; d0 < docs.size();) {
            batch b;
            std::vector<std::size_t> doc_rows;  // rows of each document in b
            std::vector<std::vector<std::size_t>> splits;
            std::size_t d1 = d0;
            for (; d1 < docs.size() && (d1 == d0 || b.rows < chunk); ++d1) {
                const std::size_t before = b.rows;
                splits.emplace_back();
                for (std::size_t s = docs[d1].first; s < docs[d1].second; ++s) {
                    b.add(v, sents[s]);
                    splits.back().push_back(sents[s].words.size());
                }
                doc_rows.push_back(b.rows - before);
            }
            const mat& H = enc.forward(b, false);
            const std::vector<std::uint32_t> tag_ids = tags.predict(H);
            std::vector<Eigen::Map<const mat>> X;
            for (std::size_t i = 0, r = 0; i < doc_rows.size(); r += doc_rows[i++])
                X.emplace_back(H.data() + r * H.cols(), Eigen::Index(doc_rows[i]), H.cols());
            // MBR: the marginals computed by the batched layers as each
            // split is scored (the tree marginals output kind).
            const biaffine::score_list<float> arc_out =
                !mbr ? arcs.predict(X, splits)
                : trees == biaffine::tree_kind::projective
                    ? biaffine::predict_marginals<biaffine::tree_kind::projective>(arcs, X, splits)
                    : biaffine::predict_marginals<biaffine::tree_kind::non_projective>(arcs, X, splits);
            on_arcs(docs[d0].first, arc_out);
            std::vector<std::vector<std::size_t>> heads(X.size());
            for (std::size_t i = 0, k = 0; i < X.size(); ++i)
                for (std::size_t s = 0; s < splits[i].size(); ++s, ++k) {
                    const auto h = decode_heads(arc_out[k]);
                    heads[i].insert(heads[i].end(), h.begin(), h.end());
                }
            const biaffine::score_list<float> label_logits = labs.predict_heads(X, splits, heads);
            const std::size_t o = v.label_names.size();
            for (std::size_t i = 0, k = 0, row = 0; i < X.size(); ++i) {
                std::size_t r = 0;
                for (std::size_t s = docs[d0 + i].first; s < docs[d0 + i].second; ++s, ++k) {
                    auto& sent = sents[s];
                    const std::size_t n = sent.words.size();
                    conllu::set_scorer_heads(sent, {heads[i].begin() + std::ptrdiff_t(r), heads[i].begin() + std::ptrdiff_t(r + n)});
                    for (std::size_t m = 0; m < n; ++m, ++row) {
                        sent.words[m].deprel = v.label_names[argmax_row(label_logits[k].data() + m * o, o)];
                        // A tag where the text has none (a tag given is kept).
                        if (sent.words[m].upos == "_" && tag_ids[row] != 0) sent.words[m].upos = v.upos_names[tag_ids[row]];
                    }
                    r += n;
                }
            }
            d0 = d1;
        }
    }
};

// The two trivial baselines' UAS: every word's head its left (right)
// neighbour, the first (last) word the root.
std::pair<double, double> neighbour_baselines(const std::vector<conllu::sentence>& gold)
{
    auto sys = gold;
    for (auto& s : sys)
        for (std::size_t m = 0; m < s.words.size(); ++m) s.words[m].head = m;  // 1-based id of m - 1; 0 for the first
    const double left = conllu::evaluate(gold, sys).uas();
    for (auto& s : sys)
        for (std::size_t m = 0; m < s.words.size(); ++m) s.words[m].head = m + 1 == s.words.size() ? 0 : m + 2;
    return {left, conllu::evaluate(gold, sys).uas()};
}

void set_threads(parser& p, std::size_t threads)
{
    Eigen::setNbThreads(int(threads));
    p.opts.threads = threads;
}

// The dev file parsed as the parser would parse text: without gold tags
// (UPOS blanked, then predicted) unless it takes them. Returns the scores
// and the share of words whose predicted UPOS is the gold one (%).
std::pair<conllu::attachment_scores, double> evaluate_dev(parser& p, const std::vector<conllu::sentence>& dev)
{
    auto parsed = dev;
    if (!p.v.gold_tags)
        for (auto& s : parsed)
            for (auto& w : s.words) w.upos = "_";
    p.parse(parsed);
    std::size_t words = 0, right = 0;
    for (std::size_t i = 0; i < dev.size(); ++i)
        for (std::size_t m = 0; m < dev[i].words.size(); ++m, ++words) right += parsed[i].words[m].upos == dev[i].words[m].upos;
    return {conllu::evaluate(dev, parsed), conllu::attachment_scores::pct(right, words)};
}

// What the dev scores were parsed with.
std::string tags_note(const vocab& v, double tag_acc)
{
    std::ostringstream s;
    s << std::fixed << std::setprecision(2);
    if (v.gold_tags) s << " (gold UPOS)";
    else s << " (no gold tags; UPOS predicted " << tag_acc << "%)";
    return s.str();
}

// --- text to parse -----------------------------------------------------------

// Plain text: one sentence a line, tokens split at whitespace, blank lines
// skipped; each sentence keeps its line as `# text = ...`, its words have no
// annotation (`_`: HEAD and DEPREL set by parsing, UPOS left `_`).
std::vector<conllu::sentence> read_text(const std::string& path)
{
    std::ifstream in(path, std::ios::binary);
    if (!in) throw std::runtime_error(path + ": cannot open for reading");
    std::vector<conllu::sentence> out;
    std::string line;
    for (std::size_t lineno = 1; std::getline(in, line); ++lineno) {
        std::istringstream tokens(line);
        conllu::sentence s;
        s.line = lineno;
        for (std::string t; tokens >> t;) {
            conllu::word w;
            w.form = t;
            w.lemma = w.upos = w.xpos = w.feats = w.deprel = w.deps = w.misc = "_";
            w.head = conllu::no_head;
            s.words.push_back(std::move(w));
        }
        if (s.words.empty()) continue;
        const auto isspace = [](unsigned char c) { return std::isspace(c) != 0; };
        const auto b = std::find_if_not(line.begin(), line.end(), isspace);
        const auto e = std::find_if_not(line.rbegin(), line.rend(), isspace).base();
        s.comments.push_back("# text = " + std::string(b, e));
        out.push_back(std::move(s));
    }
    if (in.bad()) throw std::runtime_error(path + ": read failed");
    return out;
}

// A file to parse: plain text with --text or when named *.txt, else CoNLL-U
// (annotated or not).
std::vector<conllu::sentence> read_input(const std::string& path, bool text)
{
    const bool txt = path.size() >= 4 && path.compare(path.size() - 4, 4, ".txt") == 0;
    return text || txt ? read_text(path) : conllu::read_file(path);
}

// --- saved parsers -----------------------------------------------------------
//
// A folder: manifest.txt (format, version, sizes, the arc loss trained with,
// the decoder and the tree kind that parse), words.tsv (count TAB word), upos.txt and labels.txt (the
// vocabularies in id order, one a line), encoder/*.npy, and arc/*.npy and
// label/*.npy through the library's save_npy / load_npy. The manifest is
// written last and removed first: a save that failed half way leaves a
// folder that does not load.

constexpr const char* model_format = "biaffine-treebank-parser";
// 2: the hashed word, affix and shape features; 3: the arc loss, the decoder
// and the tree kind (--loss, --decode, --projective: keys loss, decoder,
// projective).
constexpr int model_version = 3;
// What a version 2 folder records (and was trained and parsed with: local,
// mst, non-projective).
constexpr const char* model_v2_loss = "cross_entropy_heads+cross_entropy_labels";
constexpr const char* model_v2_decoder = "mst";
constexpr const char* model_hash = "fnv1a64";

// A saved parser that does not fit: what() names the file and what is wrong.
struct model_error : std::runtime_error {
    model_error(const std::string& file, const std::string& what) : std::runtime_error(file + ": " + what) {}
};

void write_text_file(const std::string& path, const std::string& text)
{
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out << text;
    out.flush();
    if (!out) throw model_error(path, "cannot write (does the folder exist? is the disk full?)");
}

void write_names(const std::string& path, const std::vector<std::string>& names, std::size_t first)
{
    std::string text;
    for (std::size_t i = first; i < names.size(); ++i) (text += names[i]) += '\n';
    write_text_file(path, text);
}

void save_model(const std::string& dir, parser& p, const options& o)
{
    namespace fs = std::filesystem;
    const vocab& v = p.v;
    const std::string manifest = dir + "/manifest.txt";
    std::error_code ec;
    for (const char* sub : {"encoder", "tagger", "arc", "label"})
        if (fs::create_directories(dir + "/" + sub, ec); ec) throw model_error(dir + "/" + sub, "cannot create: " + ec.message());
    if (fs::remove(manifest, ec); ec) throw model_error(manifest, "cannot remove the old one: " + ec.message());
    std::string words;
    for (std::size_t i = 1; i < v.word_names.size(); ++i)
        words += std::to_string(v.word_count[i]) + '\t' + v.word_names[i] + '\n';
    write_text_file(dir + "/words.tsv", words);
    write_names(dir + "/upos.txt", v.upos_names, 1);
    write_names(dir + "/labels.txt", v.label_names, 0);
    p.enc.save(dir + "/encoder");
    save_params(dir + "/tagger", std::as_const(p.tags).named());
    biaffine::save_npy(p.arc_scorer, dir + "/arc");
    biaffine::save_npy(p.label_scorer, dir + "/label");
    std::ostringstream m;
    m << "format " << model_format << "\nversion " << model_version << "\nwidth " << o.width << "\nlayers " << o.layers
      << "\narc_hidden " << o.arc_hidden << "\nlabel_hidden " << o.label_hidden << "\ngold_tags " << (v.gold_tags ? 1 : 0)
      << "\nprecision " << (o.precision == biaffine::compute_precision::bf16 ? "bf16" : "fp32") << "\nloss " << o.loss
      << "\ndecoder " << o.decode << "\nprojective " << (o.projective ? 1 : 0) << "\nfeatures " << feature_names << "\nnorm_buckets " << norm_buckets
      << "\naffix_buckets " << affix_buckets << "\nhash " << model_hash << "\n";
    write_text_file(manifest + ".partial", m.str());
    if (fs::rename(manifest + ".partial", manifest, ec); ec) throw model_error(manifest, "cannot rename into place: " + ec.message());
}

// Lines of a text file written by save_model (each ending with '\n').
std::vector<std::string> read_lines(const std::string& path)
{
    std::ifstream in(path, std::ios::binary);
    if (!in) throw model_error(path, "cannot open (missing from the saved parser?)");
    std::vector<std::string> lines;
    for (std::string line; std::getline(in, line);) lines.push_back(line);
    if (in.bad()) throw model_error(path, "read failed");
    return lines;
}

// The manifest's sizes, arc loss, decoder and tree kind into `o` (returns
// whether the parser takes gold tags); --decode / --projective given stay.
bool read_manifest(const std::string& dir, options& o)
{
    const std::string path = dir + "/manifest.txt";
    std::unordered_map<std::string, std::string> kv;
    const auto lines = read_lines(path);
    for (std::size_t i = 0; i < lines.size(); ++i) {
        const std::size_t sp = lines[i].find(' ');
        if (sp == std::string::npos || !kv.emplace(lines[i].substr(0, sp), lines[i].substr(sp + 1)).second)
            throw model_error(path + ":" + std::to_string(i + 1), "expected a line 'key value' with a key not seen before, not '" + lines[i] + "'");
    }
    const auto get = [&](const std::string& key) {
        const auto it = kv.find(key);
        if (it == kv.end()) throw model_error(path, "no '" + key + "' line");
        return it->second;
    };
    const auto expect = [&](const std::string& key, const std::string& want, const std::string& why) {
        if (const std::string got = get(key); got != want)
            throw model_error(path, key + " '" + got + "', this program reads " + key + " '" + want + "' (" + why + ")");
    };
    expect("format", model_format, "not a parser saved by train_treebank_parser");
    const std::string version = get("version");
    if (version != "2" && version != std::to_string(model_version))
        throw model_error(path, "version '" + version + "', this program reads version 2 or " + std::to_string(model_version) +
                                    " (saved by another version of train_treebank_parser)");
    const bool v2 = version == "2";
    if (v2) {
        // Before --loss / --decode / --projective: what it was trained and parsed with.
        expect("loss", model_v2_loss, "the parser was trained for another loss");
        expect("decoder", model_v2_decoder, "the parser was trained for another decoder");
        o.loss = "local";
    } else {
        const auto one_of = [&](const std::string& key, const std::string& a, const std::string& b) {
            const std::string got = get(key);
            if (got != a && got != b) throw model_error(path, key + " '" + got + "', expected " + a + " or " + b);
            return got;
        };
        o.loss = one_of("loss", "local", "crf");
        const std::string decode = one_of("decoder", "mst", "mbr"), projective = one_of("projective", "0", "1");
        if (!o.decode_given) o.decode = decode;
        if (!o.projective_given) o.projective = projective == "1";
    }
    expect("features", feature_names, "other features");
    expect("norm_buckets", std::to_string(norm_buckets), "other hashed features");
    expect("affix_buckets", std::to_string(affix_buckets), "other hashed features");
    expect("hash", model_hash, "other hashed features");
    const auto size = [&](const std::string& key) {
        const std::string v = get(key);
        char* end = nullptr;
        const auto n = std::strtoull(v.c_str(), &end, 10);
        if (v.empty() || *end != '\0' || n == 0) throw model_error(path, key + " '" + v + "' is not a positive integer");
        return std::size_t(n);
    };
    o.width = size("width");
    o.layers = size("layers");
    o.arc_hidden = size("arc_hidden");
    o.label_hidden = size("label_hidden");
    const std::string precision = get("precision"), tags = get("gold_tags");
    if (precision != "fp32" && precision != "bf16") throw model_error(path, "precision '" + precision + "', expected fp32 or bf16");
    if (tags != "0" && tags != "1") throw model_error(path, "gold_tags '" + tags + "', expected 0 or 1");
    o.precision = precision == "bf16" ? biaffine::compute_precision::bf16 : biaffine::compute_precision::fp32;
    const std::size_t keys = v2 ? 14 : 15;
    if (kv.size() != keys) throw model_error(path, std::to_string(kv.size()) + " keys, version " + version + " has " + std::to_string(keys));
    return tags == "1";
}

// The vocabularies as save_model wrote them (names unique and not empty).
vocab read_vocab(const std::string& dir, bool gold_tags)
{
    vocab v;
    v.gold_tags = gold_tags;
    v.word_count.push_back(0);
    v.word_names.emplace_back();
    v.upos_names.emplace_back();
    const auto bad = [](const std::string& path, std::size_t line, const std::string& what) {
        return model_error(path + ":" + std::to_string(line), what);
    };
    const std::string wpath = dir + "/words.tsv";
    const auto wlines = read_lines(wpath);
    for (std::size_t i = 0; i < wlines.size(); ++i) {
        const std::size_t tab = wlines[i].find('\t');
        char* end = nullptr;
        const std::string count = wlines[i].substr(0, tab == std::string::npos ? 0 : tab);
        const auto n = std::strtoull(count.c_str(), &end, 10);
        if (tab == std::string::npos || count.empty() || *end != '\0' || tab + 1 == wlines[i].size())
            throw bad(wpath, i + 1, "expected 'count<TAB>word'");
        const std::string w = wlines[i].substr(tab + 1);
        if (!v.words.emplace(w, v.word_names.size()).second) throw bad(wpath, i + 1, "the word '" + w + "' again");
        v.word_names.push_back(w);
        v.word_count.push_back(std::size_t(n));
    }
    for (auto [file, ids, names] : {std::make_tuple("upos.txt", &v.upos, &v.upos_names), std::make_tuple("labels.txt", &v.labels, &v.label_names)}) {
        const std::string path = dir + "/" + file;
        const auto lines = read_lines(path);
        for (std::size_t i = 0; i < lines.size(); ++i) {
            if (lines[i].empty()) throw bad(path, i + 1, "empty name");
            if (ids->count(lines[i])) throw bad(path, i + 1, "the name '" + lines[i] + "' again");
            vocab::add(*ids, *names, lines[i]);
        }
    }
    if (v.label_names.empty()) throw model_error(dir + "/labels.txt", "no relations");
    return v;
}

// Loads the parser's weights from `dir` into `p` (built from the same
// manifest and vocabularies): every file's shape is checked against them.
void load_weights(const std::string& dir, parser& p)
{
    p.enc.load(dir + "/encoder");
    load_params(dir + "/tagger", p.tags.named());
    biaffine::load_npy(p.arc_scorer, dir + "/arc");
    biaffine::load_npy(p.label_scorer, dir + "/label");
}

}  // namespace

// A copy of `s` with compute_precision::bf16: the same parameters.
biaffine::biaffine_scorer<float> bf16_copy(const biaffine::biaffine_scorer<float>& s)
{
    biaffine::scorer_config c = s.config();
    c.precision = biaffine::compute_precision::bf16;
    biaffine::biaffine_scorer<float> b(c);
    for (const auto& prm : s.parameters()) {
        auto dst = b.parameters();
        for (auto& d : dst)
            if (std::string(d.name) == prm.name) std::copy(prm.data, prm.data + prm.size, d.data);
    }
    return b;
}

// The trained model's dev parse in fp32 and in bf16 (the scorers' inference
// products with bf16 operands, fp32 sums; the encoder stays fp32): both
// scores, the share of words whose head and relation are the same in both,
// and the largest difference of an arc logit.
void compare_bf16(parser& p, const std::vector<conllu::sentence>& dev, const conllu::attachment_scores& fp32)
{
    auto arc16 = bf16_copy(p.arc_scorer), label16 = bf16_copy(p.label_scorer);
    auto a = dev, b = dev;
    std::vector<biaffine::score_list<float>> logits32, logits16;
    const auto t0 = clock_type::now();
    p.parse(a, p.arc_scorer, p.label_scorer, 4000,
            [&](std::size_t, const biaffine::score_list<float>& y) { logits32.push_back(y); });
    const auto t1 = clock_type::now();
    p.parse(b, arc16, label16, 4000, [&](std::size_t, const biaffine::score_list<float>& y) { logits16.push_back(y); });
    const auto t2 = clock_type::now();
    const auto s16 = conllu::evaluate(dev, b);
    std::size_t words = 0, same = 0;
    for (std::size_t i = 0; i < a.size(); ++i)
        for (std::size_t w = 0; w < a[i].words.size(); ++w, ++words)
            same += a[i].words[w].head == b[i].words[w].head && a[i].words[w].deprel == b[i].words[w].deprel;
    double diff = 0, scale = 0;
    for (std::size_t c = 0; c < logits32.size(); ++c)
        for (std::size_t k = 0; k < logits32[c].size(); ++k)
            for (std::size_t e = 0; e < logits32[c][k].size(); ++e) {
                diff = std::max(diff, double(std::fabs(logits32[c][k].data()[e] - logits16[c][k].data()[e])));
                scale = std::max(scale, double(std::fabs(logits32[c][k].data()[e])));
            }
    const double ms32 = std::chrono::duration<double>(t1 - t0).count() * 1e3,
                 ms16 = std::chrono::duration<double>(t2 - t1).count() * 1e3;
    std::cout << std::setprecision(2) << "\nbf16 inference (" << biaffine::detail::scorer_bf16_forward::math_name()
              << ") against fp32 on dev, the same trained model:\n"
              << "  fp32: UAS " << fp32.uas() << " LAS " << fp32.las() << "   bf16: UAS " << s16.uas() << " LAS "
              << s16.las() << "   (differences " << s16.uas() - fp32.uas() << " / " << s16.las() - fp32.las() << ")\n"
              << "  words with the same head and relation: " << same << " of " << words << " ("
              << 100.0 * double(same) / double(words) << "%)\n"
              << std::setprecision(4) << "  largest |arc difference| (logits; marginals under --decode mbr) " << diff
              << " (largest |value| " << scale
              << ")\n"
              << std::setprecision(0) << "  parsing dev: fp32 " << ms32 << " ms, bf16 " << ms16 << " ms\n";
}

namespace {

// Trains `p` on `train`, scoring `dev` after every epoch; returns the last scores.
conllu::attachment_scores train_parser(parser& p, const vocab& v, const options& o, const std::vector<conllu::sentence>& train,
                                       const std::vector<conllu::sentence>& dev, biaffine::memory_log& log)
{
    std::size_t train_words = 0;
    for (const auto& s : train) train_words += s.words.size();
    conllu::attachment_scores last;
    encoder_adam enc_opt{o.lr};
    example_helpers::adam arc_opt(o.lr), label_opt(o.lr);
    arc_opt.beta2 = label_opt.beta2 = 0.9;

    // Training sentences' gold heads and labels, once.
    std::vector<std::vector<std::size_t>> gold_heads, gold_labels;
    for (const auto& s : train) {
        gold_heads.push_back(conllu::scorer_heads(s));
        gold_labels.emplace_back();
        for (const auto& w : s.words) gold_labels.back().push_back(v.labels.at(w.deprel));
    }
    std::vector<std::size_t> order(train.size());
    std::iota(order.begin(), order.end(), std::size_t(0));
    std::mt19937_64 shuffle_rng(o.seed + 3);
    double train_wall = 0, train_cpu = 0;
    std::size_t epochs_run = 0, step = 0;
    // Steps planned, for the learning-rate schedule (batches cut at batch_tokens words).
    const double planned = double(o.epochs) * std::ceil(double(train_words) / double(o.batch_tokens));
    for (std::size_t epoch = 1; epoch <= o.epochs; ++epoch) {
        std::shuffle(order.begin(), order.end(), shuffle_rng);
        const auto t0 = clock_type::now();
        const double c0 = cpu_seconds();
        double loss = 0;
        for (std::size_t i = 0; i < order.size();) {
            batch b;
            std::vector<std::size_t> heads, labels;
            for (; i < order.size() && b.rows < o.batch_tokens; ++i) {
                b.add(v, train[order[i]]);
                heads.insert(heads.end(), gold_heads[order[i]].begin(), gold_heads[order[i]].end());
                labels.insert(labels.end(), gold_labels[order[i]].begin(), gold_labels[order[i]].end());
            }
            const double lr = o.lr * (1 - (1 - o.lr_end) * std::min(1.0, double(step++) / planned));
            enc_opt.lr = arc_opt.lr = label_opt.lr = lr;
            loss += p.train_step(b, heads, labels, enc_opt, arc_opt, label_opt);
        }
        const double secs = std::chrono::duration<double>(clock_type::now() - t0).count();
        train_wall += secs;
        train_cpu += cpu_seconds() - c0;
        ++epochs_run;
        double tag_acc = 0;
        std::tie(last, tag_acc) = evaluate_dev(p, dev);
        std::cout << "epoch " << std::setw(3) << epoch << "  loss " << std::setprecision(4) << loss / double(train_words)
                  << "  " << std::setprecision(0) << double(train_words) / secs << " tokens/s  dev UAS "
                  << std::setprecision(2) << last.uas() << " LAS " << last.las()
                  << tags_note(v, tag_acc)
                  << std::setprecision(0) << "  (training so far "
                  << train_wall << " s wall, " << train_cpu << " s CPU)" << std::endl;
        // Stop when another epoch as long as this one would pass the limit.
        if (o.minutes > 0 && train_wall + secs > 60 * o.minutes) break;
    }
    log.checkpoint("trained");
    std::cout << std::setprecision(2) << "\ntrained " << epochs_run << " epochs: " << train_wall << " s wall, "
              << train_cpu << " s CPU (" << train_wall / double(epochs_run) << " s wall per epoch)\n"
              << "dev UAS " << last.uas() << " LAS " << last.las() << "; without punctuation (gold UPOS PUNCT) UAS "
              << last.uas_no_punct() << " LAS " << last.las_no_punct() << "\n";

    return last;
}

// Times parsing the --parse files, writes --out, prints the memory log;
// returns the exit status (after training: the dev UAS check).
int parse_files(parser& p, const options& o, const std::vector<conllu::sentence>& dev, biaffine::memory_log& log,
                const conllu::attachment_scores& last, double best_baseline)
{
    // Parsing speed, end to end: read -> encode -> score -> decode -> labels -> write.
    for (std::size_t threads : {std::size_t(1), o.threads}) {
        set_threads(p, threads);
        std::size_t words = 0;
        const auto t0 = clock_type::now();
        const double c0 = cpu_seconds();
        for (const auto& f : o.parse_files) {
            auto sents = read_input(f, o.text);
            p.parse(sents);
            for (const auto& s : sents) words += s.words.size();
            std::ostringstream out;
            conllu::write(out, sents);
        }
        const double secs = std::chrono::duration<double>(clock_type::now() - t0).count(), cpu = cpu_seconds() - c0;
        // Per CPU second too: on a shared machine wall time counts other programs' time.
        std::cout << "parsing " << words << " words (" << o.parse_files.size() << " file(s), read -> write) on "
                  << threads << " thread(s): " << std::setprecision(0) << double(words) / secs << " words/s ("
                  << double(words) / cpu << " words per CPU second)\n";
        if (threads == o.threads) break;
    }
    log.checkpoint("parsed");
    if (!o.out.empty()) {
        auto parsed = o.write_parse ? read_input(o.parse_files.front(), o.text) : dev;
        if (p.v.gold_tags && o.write_parse)
            for (const auto& s : parsed)
                if (!s.words.empty() && s.words.front().upos == "_") {
                    std::cerr << "train_treebank_parser: note: this parser takes gold UPOS tags as a feature but "
                              << o.parse_files.front() << " has none (line " << s.line
                              << "); parsing without them (train without --gold-tags for text without tags)\n";
                    break;
                }
        p.parse(parsed);
        conllu::write_file(o.out, parsed);
        std::cout << "wrote the parse of " << (o.write_parse ? o.parse_files.front() : o.dev) << " to " << o.out << "\n";
    }
    std::cout << "\nMemory log (tracked bytes; peak = highest point since the previous checkpoint):\n"
              << log.summary() << "process peak RSS " << std::setprecision(0) << max_rss_mb() << " MB\n";
    if (!o.model.empty() || !o.check) return 0;  // nothing trained here, or no check asked for
    const double bound = best_baseline + baseline_margin;
    const bool pass = last.uas() >= bound;
    std::cout << std::setprecision(2) << "\nCheck: dev UAS " << last.uas() << " >= best neighbour baseline + "
              << baseline_margin << " = " << bound << ": " << (pass ? "PASS" : "FAIL") << "\n";
    return pass ? 0 : 1;
}

// Whether no two arcs of a sentence's gold tree cross (split-relative heads,
// the root pointing at itself; the root's arc comes from before word 0).
bool projective_tree(const std::vector<std::size_t>& heads)
{
    const auto span = [&](std::size_t d) {
        const auto h = heads[d] == d ? std::ptrdiff_t(-1) : std::ptrdiff_t(heads[d]);
        return std::pair<std::ptrdiff_t, std::ptrdiff_t>(std::min(h, std::ptrdiff_t(d)), std::max(h, std::ptrdiff_t(d)));
    };
    for (std::size_t i = 0; i < heads.size(); ++i)
        for (std::size_t j = 0; j < heads.size(); ++j) {
            const auto [a, b] = span(i);
            const auto [c, e] = span(j);
            if (a < c && c < b && b < e) return false;
        }
    return true;
}

// --projective: counts the training sentences whose gold tree is not
// projective, and under --loss crf drops them (the projective CRF has no tree
// for them; tree_crf_loss would refuse the batch).
void projective_training_set(std::vector<conllu::sentence>& train, const options& o)
{
    if (!o.projective) return;
    std::size_t crossing = 0;
    std::vector<conllu::sentence> kept;
    for (auto& s : train) {
        const bool ok = projective_tree(conllu::scorer_heads(s));
        crossing += !ok;
        if (ok || o.loss != "crf") kept.push_back(std::move(s));
    }
    train = std::move(kept);
    std::cout << "--projective: " << crossing << " training sentences have a non-projective gold tree: "
              << (o.loss == "crf" ? "skipped (the projective CRF has no tree for them)" : "kept (local loss)") << "\n";
}

// --dev is scored: it must carry a tree (text without one goes to --parse).
std::vector<conllu::sentence> read_dev(const std::string& path)
{
    auto dev = conllu::read_file(path);
    for (const auto& s : dev)
        if (!s.annotated())
            throw std::runtime_error(path + ":" + std::to_string(s.line) +
                                     ": --dev is scored against its trees, but this sentence has none (HEAD and DEPREL '_'); "
                                     "parse text without annotation with --parse FILE --out FILE");
    return dev;
}

int run(const options& cmd)
{
    options o = cmd;  // with --model, the sizes are the saved parser's
    std::cout << "biaffine " << biaffine::version_string
              << " - train_treebank_parser: embeddings -> dilated residual CNN -> arc + label scorers\n\n";
    biaffine::memory_log log;
    std::vector<conllu::sentence> train, dev;
    vocab v;
    if (!o.model.empty()) {
        const bool gold_tags = read_manifest(o.model, o);
        v = read_vocab(o.model, gold_tags);
    } else {
        train = conllu::read_file(o.train);
        projective_training_set(train, o);
        v = vocab(train, o.gold_tags);
    }
    if (!o.dev.empty()) dev = read_dev(o.dev);
    std::size_t train_words = 0;
    for (const auto& s : train) train_words += s.words.size();
    const auto [left, right] = dev.empty() ? std::pair<double, double>{0, 0} : neighbour_baselines(dev);
    if (o.model.empty()) std::cout << "train: " << o.train << " (" << train.size() << " sentences, " << train_words << " words)\n";
    else std::cout << "model: " << o.model << " (loaded, not trained)\n";
    if (!dev.empty()) std::cout << "dev:   " << o.dev << " (" << dev.size() << " sentences)\n";
    std::cout << "vocabulary " << v.word_count.size() << " words, " << (v.gold_tags ? std::to_string(v.upos.size()) + " gold UPOS (a feature), " : std::string("no UPOS feature, ")) << v.label_names.size()
              << " relations; encoder width " << o.width << ", arc hidden " << o.arc_hidden << ", label hidden "
              << o.label_hidden << ", " << o.layers << " layers (dilations 1.."
              << (1u << (o.layers - 1)) << "), threads " << o.threads << ", scorers in "
              << (o.precision == biaffine::compute_precision::bf16
                      ? std::string("bf16 (") + biaffine::detail::scorer_bf16_train::math_name() + ")"
                      : std::string("fp32"))
              << "\narc loss " << o.loss << ", decoder " << o.decode << " ("
              << (o.projective ? "projective" : "non-projective") << " trees)\n"
              << std::fixed << std::setprecision(2);
    if (!dev.empty()) std::cout << "baselines on dev: left neighbour UAS " << left << ", right neighbour UAS " << right << "\n";
    log.checkpoint("treebank read");

    parser p(v, o);
    set_threads(p, o.threads);
    conllu::attachment_scores last;
    if (!o.model.empty()) {
        load_weights(o.model, p);
        log.checkpoint("loaded");
        if (!dev.empty()) {
            double tag_acc = 0;
            std::tie(last, tag_acc) = evaluate_dev(p, dev);
            std::cout << std::setprecision(2) << "dev UAS " << last.uas() << " LAS " << last.las()
                      << tags_note(v, tag_acc)
                      << "; without punctuation (gold UPOS PUNCT) UAS " << last.uas_no_punct() << " LAS "
                      << last.las_no_punct() << "\n";
        }
    } else {
        last = train_parser(p, v, o, train, dev, log);
        if (!o.save.empty()) {
            save_model(o.save, p, o);
            std::cout << "saved the parser to " << o.save << "\n";
        }
    }
    if (o.compare_bf16 && !dev.empty()) compare_bf16(p, dev, last);
    return parse_files(p, o, dev, log, last, std::max(left, right));
}


}  // namespace

int main(int argc, char** argv)
{
    const options o = parse_args(argc, argv);
    try {
        return run(o);
    } catch (const std::exception& e) {
        // Unreadable or malformed input, a saved parser that does not fit: said, not abort().
        std::cerr << "train_treebank_parser: " << e.what() << "\n";
        return 2;
    }
}
