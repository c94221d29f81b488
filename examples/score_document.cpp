// score_document - score one document with the split-batched pipeline and
// decode dependency heads.
//
// What to copy into your parser:
//   * the pipeline:  with_splits(with_minibatch_by_padded_size(scorer,
//                    budget::megabytes(B), options))  -> score_pipeline()
//   * capping sentence lengths so no split is longer than you can afford:
//                    cap_split_lengths(...)            -> make_splits()
//   * head decoding: mst_heads(scores) per split, one root per split
//                    (argmax_heads is the greedy alternative) -> main()
//   * labels without materialising [n, n, labels] tensors: predict_stream
//                    on a label scorer, reading only each token's head column
//                    -> stream_labels()
//   * measuring: memory_log checkpoints around each stage and the working
//                    set of the scoring call against the budget.
//
// Input: either a generated document (default: 20000 tokens of random
// 128-wide vectors, sentences of 3..60 tokens with a few run-ons of up to 400)
// or a text file given with --input: one token vector per line
// (whitespace-separated floats, all lines the same width), a blank line
// between sentences, lines starting with '#' ignored. The file is one
// document; each sentence becomes a split (capped at --max-split tokens).
//
// The weights are random (use biaffine::load_npy(scorer, dir) for trained ones, see
// train_arc_scorer), so the decoded trees are valid trees but arbitrary.
//
//   score_document [--tokens N] [--n-in D] [--hidden H] [--labels O]
//                  [--budget-mb B] [--threads T] [--max-split L]
//                  [--show K] [--seed S] [--input FILE] [--csv FILE]
//
// Exit status: 0 when every split decoded to a tree and the working set of the
// scoring call stayed within threads x budget; 1 otherwise; 2 on bad usage.

#include <biaffine/biaffine.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

struct options {
    std::size_t tokens = 20000;
    std::size_t n_in = 128;
    std::size_t hidden = 128;
    std::size_t labels = 0;  // 0: arcs only; O > 0: also a label scorer with O labels
    std::uint64_t budget_mb = 16;
    std::size_t threads = 1;
    std::size_t max_split = 128;
    std::size_t show = 3;
    std::uint64_t seed = 1;
    std::string input;
    std::string csv;
};

[[noreturn]] void usage(const std::string& problem)
{
    std::cerr << "score_document: " << problem << "\n"
              << "usage: score_document [--tokens N] [--n-in D] [--hidden H] [--labels O] [--budget-mb B]\n"
              << "                      [--threads T] [--max-split L] [--show K] [--seed S]\n"
              << "                      [--input FILE] [--csv FILE]\n";
    std::exit(2);
}

options parse_args(int argc, char** argv)
{
    options o;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        if (a == "--help" || a == "-h") usage("score a document and decode heads");
        if (i + 1 >= argc) usage("missing value after " + a);
        const std::string v = argv[++i];
        auto number = [&]() -> std::uint64_t {
            char* end = nullptr;
            const unsigned long long x = std::strtoull(v.c_str(), &end, 10);
            if (v.empty() || *end != '\0' || v[0] == '-') usage("expected a non-negative integer after " + a);
            return x;
        };
        if (a == "--tokens") o.tokens = number();
        else if (a == "--n-in") o.n_in = number();
        else if (a == "--hidden") o.hidden = number();
        else if (a == "--labels") o.labels = number();
        else if (a == "--budget-mb") o.budget_mb = number();
        else if (a == "--threads") o.threads = number();
        else if (a == "--max-split") o.max_split = number();
        else if (a == "--show") o.show = number();
        else if (a == "--seed") o.seed = number();
        else if (a == "--input") o.input = v;
        else if (a == "--csv") o.csv = v;
        else usage("unknown option " + a);
    }
    if (o.tokens == 0 || o.n_in == 0 || o.hidden == 0 || o.budget_mb == 0 || o.threads == 0 || o.max_split == 0) {
        usage("--tokens, --n-in, --hidden, --budget-mb, --threads and --max-split must be positive");
    }
    return o;
}

// A document: `[n_tokens, n_in]` token vectors (here on the library's tracked
// heap, so the memory log shows it; any xtensor array or Eigen matrix works),
// plus its sentence lengths.
struct document {
    biaffine::tensor<float, 2> x;
    std::vector<std::size_t> sentence_lengths;
};

document generate_document(const options& o)
{
    std::mt19937_64 rng(o.seed);
    std::uniform_int_distribution<std::size_t> normal_len(3, 60), long_len(150, 400);
    std::uniform_real_distribution<double> coin(0.0, 1.0);
    document d;
    std::size_t total = 0;
    while (total < o.tokens) {
        // About 2% run-on "sentences" (tables, lists, missing punctuation).
        std::size_t n = coin(rng) < 0.02 ? long_len(rng) : normal_len(rng);
        n = std::min(n, o.tokens - total);
        d.sentence_lengths.push_back(n);
        total += n;
    }
    d.x = biaffine::tensor<float, 2>::from_shape({o.tokens, o.n_in});
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (float& v : d.x) v = normal(rng);
    return d;
}

document read_document(const std::string& path)
{
    std::ifstream in(path);
    if (!in) throw std::runtime_error("cannot open " + path);
    std::vector<float> values;
    document d;
    std::size_t width = 0, rows = 0, current = 0, line_no = 0;
    std::string line;
    auto end_sentence = [&] {
        if (current != 0) d.sentence_lengths.push_back(current);
        current = 0;
    };
    while (std::getline(in, line)) {
        ++line_no;
        const std::size_t first = line.find_first_not_of(" \t\r");
        if (first == std::string::npos) {
            end_sentence();
            continue;
        }
        if (line[first] == '#') continue;
        std::istringstream fields(line);
        std::size_t count = 0;
        float v = 0;
        while (fields >> v) {
            values.push_back(v);
            ++count;
        }
        if (!fields.eof()) {
            throw std::runtime_error(path + ":" + std::to_string(line_no) + ": not a number");
        }
        if (width == 0) width = count;
        if (count != width) {
            throw std::runtime_error(path + ":" + std::to_string(line_no) + ": expected " + std::to_string(width) +
                                     " values (the width of the first token), got " + std::to_string(count));
        }
        ++rows;
        ++current;
    }
    end_sentence();
    if (rows == 0) throw std::runtime_error(path + ": no token vectors");
    d.x = biaffine::tensor<float, 2>::from_shape({rows, width});
    std::copy(values.begin(), values.end(), d.x.begin());
    return d;
}

// Sentences longer than max_split are cut into near-equal pieces. With
// per-token sentence-start probabilities from your segmenter, pass them as
// the third argument to cut at the most likely boundaries instead (or use
// lazy_split on the raw document).
std::vector<std::size_t> make_splits(const document& d, std::size_t max_split)
{
    return biaffine::cap_split_lengths(d.sentence_lengths, max_split);
}

// Working-set growth (tracked bytes minus score outputs) while f() runs.
template <class F>
std::uint64_t work_growth_during(F&& f)
{
    const biaffine::memory_stats before = biaffine::tracker().stats();
    biaffine::scoped_peak scope;
    f();
    return scope.work_peak_bytes() - (before.current_bytes - before.output_bytes);
}

// The pipeline call: one `[n, n]` arc score matrix per split, documents in
// order and splits in order inside each. `docs[d]` is `[n_tokens_d, n_in]`
// (xtensor or Eigen, no copy is made); `splits[d]` sums to n_tokens_d.
biaffine::score_list<float> score_pipeline(biaffine::biaffine_scorer<float>& scorer,
                                           const std::vector<biaffine::tensor<float, 2>>& docs,
                                           const std::vector<std::vector<std::size_t>>& splits, const options& o,
                                           std::uint64_t* batches, std::uint64_t* oversize)
{
    biaffine::batch_options bo;
    bo.threads = o.threads;
    // The scorer is an lvalue, so the layers hold it by reference (keep it alive).
    auto pipeline = biaffine::with_splits(
        biaffine::with_minibatch_by_padded_size(scorer, biaffine::budget::megabytes(o.budget_mb), bo));
    biaffine::score_list<float> scores = pipeline.predict(docs, splits);
    *batches = pipeline.inner().batch_count();
    *oversize = pipeline.inner().oversize_count();
    return scores;
}

// One row of the parse display: values v[start, end), "R" where v[m] == m if mark_root.
void print_row(const char* name, std::size_t start, std::size_t end, const std::vector<std::size_t>& v,
               bool mark_root)
{
    std::cout << "    " << name;
    for (std::size_t m = start; m < end; ++m) {
        if (mark_root && v[m] == m) std::cout << std::setw(5) << "R";
        else std::cout << std::setw(5) << v[m];
    }
    std::cout << "\n";
}

}  // namespace

int main(int argc, char** argv)
{
    using clock = std::chrono::steady_clock;
    const options o = parse_args(argc, argv);
    biaffine::memory_log log;
    std::cout << "biaffine " << biaffine::version_string
              << " - score_document: score every (dependent, head) pair of a document's sentences\n"
              << "and decode a dependency tree per sentence.\n\n";

    document d;
    try {
        d = o.input.empty() ? generate_document(o) : read_document(o.input);
    } catch (const std::exception& e) {
        std::cerr << "score_document: " << e.what() << "\n";
        return 2;
    }
    const std::size_t n_tokens = d.x.shape()[0], n_in = d.x.shape()[1];
    log.checkpoint("document ready");
    const std::size_t longest = *std::max_element(d.sentence_lengths.begin(), d.sentence_lengths.end());
    // The pipeline takes a batch of documents; here the batch holds one.
    std::vector<biaffine::tensor<float, 2>> docs;
    docs.push_back(std::move(d.x));
    const std::vector<std::vector<std::size_t>> splits{make_splits(d, o.max_split)};
    std::cout << "[1] Document: " << (o.input.empty() ? "generated " : "read from " + o.input + ": ") << n_tokens
              << " tokens x " << n_in << " features (float32), " << d.sentence_lengths.size()
              << " sentences (longest " << longest << ").\n"
              << "    Sentences longer than --max-split " << o.max_split << " tokens are cut (cap_split_lengths): "
              << splits[0].size() << " splits.\n";

    biaffine::scorer_config cfg;
    cfg.n_in = n_in;
    cfg.hidden = o.hidden;
    cfg.seed = o.seed;
    biaffine::biaffine_scorer<float> arc_scorer(cfg);  // labels = 1: [n, n] arc scores
    log.checkpoint("arc scorer initialised");

    // --- score arcs through the pipeline -------------------------------------
    std::uint64_t batches = 0, oversize = 0;
    biaffine::score_list<float> arcs;
    const auto t0 = clock::now();
    const std::uint64_t work =
        work_growth_during([&] { arcs = score_pipeline(arc_scorer, docs, splits, o, &batches, &oversize); });
    const double t_score = std::chrono::duration<double>(clock::now() - t0).count();
    log.checkpoint("arc scores (one matrix per split)");
    std::uint64_t score_bytes = 0;
    for (const auto& s : arcs) score_bytes += s.size() * sizeof(float);
    std::cout << "[2] Scored arcs with with_splits(with_minibatch_by_padded_size(scorer, budget::megabytes("
              << o.budget_mb << "))):\n"
              << "    " << arcs.size() << " score matrices [n, n] (" << biaffine::format_bytes(double(score_bytes))
              << " in total) in " << batches << " batches on " << o.threads << " thread(s), " << std::fixed
              << std::setprecision(3) << t_score << " s.\n";

    // --- decode heads ----------------------------------------------------------
    const auto t1 = clock::now();
    std::vector<std::vector<std::size_t>> heads(arcs.size());
    std::size_t trees = 0, greedy_trees = 0, greedy_agree = 0;
    for (std::size_t k = 0; k < arcs.size(); ++k) {
        heads[k] = biaffine::mst_heads(arcs[k]);  // heads[m]: head of token m; heads[r] == r for the root
        trees += biaffine::is_tree(heads[k]) ? 1 : 0;
        const std::vector<std::size_t> greedy = biaffine::argmax_heads(arcs[k]);
        greedy_trees += biaffine::is_tree(greedy) ? 1 : 0;
        for (std::size_t m = 0; m < greedy.size(); ++m) greedy_agree += greedy[m] == heads[k][m] ? 1 : 0;
    }
    const double t_decode = std::chrono::duration<double>(clock::now() - t1).count();
    log.checkpoint("heads decoded (MST)");
    std::cout << "[3] Decoded heads with mst_heads (maximum spanning tree, one root per split) in " << t_decode
              << " s:\n"
              << "    " << trees << " of " << arcs.size() << " splits are trees. Greedy argmax_heads picks the same head for "
              << std::setprecision(1) << (n_tokens ? 100.0 * double(greedy_agree) / double(n_tokens) : 100.0)
              << "% of the tokens\n    but gives a tree for only " << greedy_trees << " splits.\n"
              << std::setprecision(3);
    arcs = biaffine::score_list<float>();
    log.checkpoint("arc scores freed");

    // --- labels, streamed -------------------------------------------------------
    std::vector<std::vector<std::size_t>> labels;
    if (o.labels > 0) {
        biaffine::scorer_config lcfg = cfg;
        lcfg.labels = o.labels;
        lcfg.seed = o.seed + 1;
        biaffine::biaffine_scorer<float> label_scorer(lcfg);  // [n, n, labels] per split
        log.checkpoint("label scorer initialised");
        labels.resize(heads.size());
        biaffine::batch_options bo;
        bo.threads = o.threads;
        auto pipeline = biaffine::with_splits(
            biaffine::with_minibatch_by_padded_size(label_scorer, biaffine::budget::megabytes(o.budget_mb), bo));
        const auto t2 = clock::now();
        // The sink sees each split's [n, n, labels] scores once (in batch
        // order, never concurrently); keep only the best label of each
        // token's decoded head. The view is only valid during the call.
        pipeline.predict_stream(docs, splits,
                                [&](std::size_t k, std::size_t /*doc*/, biaffine::score_view<const float> s) {
                                    labels[k].resize(s.n);
                                    for (std::size_t m = 0; m < s.n; ++m) {
                                        const std::size_t h = heads[k][m];
                                        std::size_t best = 0;
                                        for (std::size_t lab = 1; lab < s.labels; ++lab) {
                                            if (s(m, h, lab) > s(m, h, best)) best = lab;
                                        }
                                        labels[k][m] = best;
                                    }
                                });
        const double t_labels = std::chrono::duration<double>(clock::now() - t2).count();
        log.checkpoint("labels (streamed)");
        std::cout << "[4] Labelled every arc with a " << o.labels
                  << "-label scorer through predict_stream, keeping no [n, n, labels] tensor (" << t_labels
                  << " s).\n";
    }

    // --- show a few sentences ---------------------------------------------------
    const std::size_t shown = std::min(o.show, heads.size());
    std::cout << "\nFirst " << shown
              << " parsed splits (token -> head, R = root; the weights are random, so the trees are arbitrary):\n";
    for (std::size_t k = 0; k < shown; ++k) {
        std::cout << "  split " << k << " (" << heads[k].size() << " tokens)\n";
        std::vector<std::size_t> index(heads[k].size());
        for (std::size_t m = 0; m < index.size(); ++m) index[m] = m;
        for (std::size_t start = 0; start < heads[k].size(); start += 16) {
            const std::size_t end = std::min(heads[k].size(), start + 16);
            print_row("token:", start, end, index, false);
            print_row("head: ", start, end, heads[k], true);
            if (!labels.empty()) print_row("label:", start, end, labels[k], false);
        }
    }

    // --- memory -----------------------------------------------------------------
    std::cout << "\nMemory log (every byte the library allocates is tracked; the document is on the tracked heap\n"
              << "too; peak = highest point since the previous checkpoint):\n"
              << log.summary();
    if (!o.csv.empty()) {
        log.write_csv(o.csv);
        std::cout << "(also written to " << o.csv << ")\n";
    }
    const std::uint64_t bound = (o.budget_mb << 20) * o.threads;
    const bool within = work <= bound;
    std::cout << "\nWorking set while scoring arcs (tracked peak minus the score matrices handed back): "
              << biaffine::format_bytes(double(work)) << "\n"
              << "Budget: " << o.budget_mb << " MB x " << o.threads << " thread(s) = "
              << biaffine::format_bytes(double(bound)) << " -> " << (within ? "within budget" : "OVER BUDGET")
              << (oversize ? " (" + std::to_string(oversize) + " split(s) exceeded the budget alone and ran alone)" : "")
              << "\n";
    const bool ok = trees == heads.size() && (within || oversize > 0);
    if (!ok) std::cout << "FAILED: " << (trees != heads.size() ? "a split did not decode to a tree" : "over budget") << "\n";
    return ok ? 0 : 1;
}
