// stream_long_document - stream a million-token document through the scorer
// and decode heads on the fly, with memory bounded by the batch budget.
//
// What to copy into your parser:
//   * lazy splitting (make_splits): cut a long document only where it must be
//     cut, at the most likely sentence starts, so that no split is longer than
//     --max-split tokens: lazy_split(sentence_start_probabilities, max_split).
//   * the streaming call (main): with_splits(with_minibatch_by_padded_size(
//     scorer, budget, {threads, concurrent_sink = true})).predict_stream(docs,
//     splits, sink). The sink receives each split's [n, n] scores once, as a
//     view valid only during the call, and decodes it right there (mst_heads,
//     or eisner_heads / argmax_heads with --decoder, on the view's pointer and
//     row stride): no score matrix outlives its batch, so the library's memory
//     stays within threads x budget whatever the document's length.
//   * decoding on every thread: with concurrent_sink the sink runs on the
//     thread that scored the split, several at once, so it only writes that
//     split's own slots (the head array by token) and atomic counters. The
//     decoders keep their scratch per thread, so this is safe.
//   * measuring: the tracker's working-set peak against the budget, and the
//     process's max RSS (getrusage) as an outside check.
//
// The document: the library takes each document as one `[n_tokens, n_in]`
// matrix (a view, never copied), so the caller holds the whole input. At
// 1M tokens x 256 features x 4 bytes that alone would be 1 GB; this example
// uses n_in = 64 (256 MB, --n-in to change) and generates it in place, row by
// row, from a cheap deterministic generator. With an encoder, feed its output
// matrix instead. (To bound the input too, cut the text into chunks of a few
// thousand tokens and pass each chunk as its own document: with_splits takes
// any number of documents.)
//
// Sentence-start probabilities are generated too: true sentence boundaries
// every 5..60 tokens score 0.5..1, other tokens 0..0.4 (a segmenter's output).
//
//   stream_long_document [--tokens N] [--n-in D] [--hidden H] [--budget-mb B]
//                        [--threads T] [--max-split L] [--seed S]
//                        [--decoder mst|eisner|argmax]
//
// It prints the end-to-end time and tokens/s, and how the threads' time
// splits between decoding (measured inside the sink, summed over threads)
// and the rest (scoring and batching).
//
// Exit status: 0 when every split decoded to a tree (argmax: need not), every token got a head,
// and the tracked working set stayed within threads x budget; 1 otherwise; 2
// on bad usage.

#include <biaffine/biaffine.hpp>

#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <iomanip>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

namespace {

struct options {
    std::size_t tokens = 1000000;
    std::size_t n_in = 64;
    std::size_t hidden = 128;
    std::uint64_t budget_mb = 32;
    std::size_t threads = std::max(1u, std::thread::hardware_concurrency());
    std::size_t max_split = 128;
    std::uint64_t seed = 3;
    std::string decoder = "mst";
};

[[noreturn]] void usage(const std::string& problem)
{
    std::cerr << "stream_long_document: " << problem << "\n"
              << "usage: stream_long_document [--tokens N] [--n-in D] [--hidden H] [--budget-mb B]\n"
              << "                            [--threads T] [--max-split L] [--seed S]\n"
              << "                            [--decoder mst|eisner|argmax]\n";
    std::exit(2);
}

options parse_args(int argc, char** argv)
{
    options o;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        if (a == "--help" || a == "-h") usage("stream a long document and decode heads on the fly");
        if (i + 1 >= argc) usage("missing value after " + a);
        const std::string v = argv[++i];
        if (a == "--decoder") {
            if (v != "mst" && v != "eisner" && v != "argmax") usage("--decoder must be mst, eisner or argmax");
            o.decoder = v;
            continue;
        }
        char* end = nullptr;
        const unsigned long long x = std::strtoull(v.c_str(), &end, 10);
        if (v.empty() || *end != '\0' || v[0] == '-') usage("expected a non-negative integer after " + a);
        if (a == "--tokens") o.tokens = x;
        else if (a == "--n-in") o.n_in = x;
        else if (a == "--hidden") o.hidden = x;
        else if (a == "--budget-mb") o.budget_mb = x;
        else if (a == "--threads") o.threads = x;
        else if (a == "--max-split") o.max_split = x;
        else if (a == "--seed") o.seed = x;
        else usage("unknown option " + a);
    }
    if (o.tokens == 0 || o.n_in == 0 || o.hidden == 0 || o.budget_mb == 0 || o.threads == 0 || o.max_split == 0) {
        usage("all values must be positive");
    }
    return o;
}

// Process peak resident set size in bytes (Linux reports kilobytes).
std::uint64_t max_rss_bytes()
{
    rusage u{};
    getrusage(RUSAGE_SELF, &u);
    return static_cast<std::uint64_t>(u.ru_maxrss) * 1024;
}

// splitmix64: a cheap, deterministic stream of random bits.
struct splitmix {
    std::uint64_t s;
    std::uint64_t next()
    {
        std::uint64_t z = (s += 0x9e3779b97f4a7c15ULL);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
        return z ^ (z >> 31);
    }
    float uniform(float lo, float hi) { return lo + (hi - lo) * float(next() >> 40) * 0x1.0p-24f; }
};

// Per-token sentence-start probabilities `[n_tokens]` of a document whose
// sentences are 5..60 tokens long (what a sentence segmenter would output).
std::vector<float> sentence_start_probabilities(std::size_t n_tokens, splitmix& rng)
{
    std::vector<float> p(n_tokens);
    std::size_t next_start = 0;
    for (std::size_t t = 0; t < n_tokens; ++t) {
        if (t == next_start) {
            p[t] = rng.uniform(0.5f, 1.0f);
            next_start += 5 + rng.next() % 56;
        } else {
            p[t] = rng.uniform(0.0f, 0.4f);
        }
    }
    return p;
}

// Split lengths of the document: cut lazily, only pieces longer than
// max_split, at their most probable sentence start.
std::vector<std::size_t> make_splits(const std::vector<float>& p, std::size_t max_split)
{
    return biaffine::lazy_split(p, max_split);
}

}  // namespace

int main(int argc, char** argv)
{
    using clock = std::chrono::steady_clock;
    const options o = parse_args(argc, argv);
    std::cout << "biaffine " << biaffine::version_string
              << " - stream_long_document: score and parse a long document with bounded memory\n\n";
    const std::uint64_t rss_start = max_rss_bytes();

    // --- the document: one [n_tokens, n_in] float32 matrix, owned by the caller
    splitmix rng{o.seed};
    const auto tg = clock::now();
    biaffine::row_matrix<float> doc(Eigen::Index(o.tokens), Eigen::Index(o.n_in));
    for (Eigen::Index r = 0; r < doc.rows(); ++r) {
        for (Eigen::Index c = 0; c < doc.cols(); ++c) doc(r, c) = rng.uniform(-1.0f, 1.0f);
    }
    const std::vector<float> p = sentence_start_probabilities(o.tokens, rng);
    const std::vector<std::size_t> splits = make_splits(p, o.max_split);
    const double t_gen = std::chrono::duration<double>(clock::now() - tg).count();
    std::size_t longest = 0;
    for (std::size_t n : splits) longest = std::max(longest, n);
    std::cout << "[1] Document: " << o.tokens << " tokens x " << o.n_in << " features (float32, "
              << biaffine::format_bytes(double(o.tokens) * double(o.n_in) * 4) << ", an Eigen row-major matrix), "
              << "generated in " << std::fixed << std::setprecision(2) << t_gen << " s.\n"
              << "    lazy_split(sentence-start probabilities, " << o.max_split << ") -> " << splits.size()
              << " splits, longest " << longest << ", mean " << std::setprecision(1)
              << double(o.tokens) / double(splits.size()) << " tokens.\n";
    const std::uint64_t rss_doc = max_rss_bytes();

    // --- the scorer and the pipeline -----------------------------------------
    biaffine::scorer_config cfg;
    cfg.n_in = o.n_in;
    cfg.hidden = o.hidden;
    cfg.seed = o.seed;
    const biaffine::biaffine_scorer<float> scorer(cfg);  // random weights: use load_npy for trained ones
    biaffine::batch_options bo;
    bo.threads = o.threads;
    bo.concurrent_sink = true;  // decode on the scoring threads (the sink below is thread-safe)
    auto pipeline = biaffine::with_splits(
        biaffine::with_minibatch_by_padded_size(scorer, biaffine::budget::megabytes(o.budget_mb), bo));

    // A batch of one document (a view: with_splits never copies a document)
    // and its split lengths.
    const std::vector<Eigen::Map<const biaffine::row_matrix<float>>> docs{{doc.data(), doc.rows(), doc.cols()}};
    const std::vector<std::vector<std::size_t>> doc_splits{splits};

    // Where each split starts in the document, to store heads as token indices.
    std::vector<std::size_t> split_start(splits.size());
    for (std::size_t k = 0, t = 0; k < splits.size(); t += splits[k], ++k) split_start[k] = t;
    std::vector<std::uint32_t> head(o.tokens, UINT32_MAX);  // document-level head of every token
    // Sink calls run concurrently: shared tallies are atomic, heads go to
    // each split's own tokens.
    std::atomic<std::size_t> trees{0}, decoded{0}, roots{0}, decoding_threads{0};
    std::atomic<std::uint64_t> decode_ns{0};  // time inside the sink, summed over threads
    // The score_view forms check that the view holds arc scores ([n, n]).
    const auto decode = [&o](const biaffine::score_view<const float>& s) {
        if (o.decoder == "eisner") return biaffine::eisner_heads(s);
        if (o.decoder == "argmax") return biaffine::argmax_heads(s);
        return biaffine::mst_heads(s);
    };

    // --- stream ------------------------------------------------------------------
    const biaffine::memory_stats before = biaffine::tracker().stats();
    const std::uint64_t work_before = before.current_bytes - before.output_bytes;
    std::uint64_t work_peak = 0;
    const auto t0 = clock::now();
    {
        biaffine::scoped_peak scope;
        // Called once per split, from the scoring threads, several at once;
        // `s` is split k's [n, n] scores, valid only during the call.
        pipeline.predict_stream(docs, doc_splits,
                                [&](std::size_t k, std::size_t /*doc*/, biaffine::score_view<const float> s) {
                                    thread_local bool counted = false;  // one count per decoding thread
                                    if (!counted) {
                                        counted = true;
                                        ++decoding_threads;
                                    }
                                    const auto td = clock::now();
                                    const std::vector<std::size_t> h = decode(s);
                                    const bool tree = biaffine::is_tree(h);
                                    std::size_t r = 0;
                                    for (std::size_t m = 0; m < h.size(); ++m) {
                                        head[split_start[k] + m] = static_cast<std::uint32_t>(split_start[k] + h[m]);
                                        r += h[m] == m ? 1 : 0;
                                    }
                                    const auto dt = std::chrono::duration_cast<std::chrono::nanoseconds>(clock::now() - td);
                                    decode_ns += static_cast<std::uint64_t>(dt.count());
                                    trees += tree ? 1 : 0;
                                    roots += r;
                                    decoded += h.size();
                                });
        work_peak = scope.work_peak_bytes() - work_before;
    }
    const double seconds = std::chrono::duration<double>(clock::now() - t0).count();
    const std::uint64_t rss_end = max_rss_bytes();
    const bool all_heads = decoded == o.tokens &&
                           std::none_of(head.begin(), head.end(), [](std::uint32_t h) { return h == UINT32_MAX; });

    const double decode_seconds = double(decode_ns.load()) * 1e-9;
    const double thread_seconds = seconds * double(o.threads);
    const std::string decoder_name = o.decoder == "mst" ? "mst_heads" : o.decoder + "_heads";
    std::cout << "[2] Streamed through with_splits(with_minibatch_by_padded_size(scorer, budget::megabytes("
              << o.budget_mb << "), {threads = " << o.threads << ", concurrent_sink = true})).predict_stream\n"
              << "    and decoded each split with " << decoder_name << " inside the sink: " << std::setprecision(2)
              << seconds << " s end to end, " << std::setprecision(0) << double(o.tokens) / seconds << " tokens/s, "
              << pipeline.inner().batch_count() << " batches.\n"
              << "    Time split, over " << o.threads << " thread(s) x " << std::setprecision(2) << seconds
              << " s = " << thread_seconds << " thread-s: decoding " << decode_seconds << " s ("
              << std::setprecision(0) << 100.0 * decode_seconds / thread_seconds << "%, in the sink, on "
              << decoding_threads.load() << " thread(s)), scoring and batching " << std::setprecision(2)
              << thread_seconds - decode_seconds << " s (the rest).\n"
              << "    " << trees.load() << " of " << splits.size() << " splits are trees (" << roots.load()
              << " roots), " << decoded.load() << " of " << o.tokens << " tokens have a head.\n";
    std::cout << "    e.g. tokens 0..9 -> heads:";
    for (std::size_t t = 0; t < std::min<std::size_t>(10, o.tokens); ++t) std::cout << ' ' << head[t];
    std::cout << "\n\n";

    const std::uint64_t bound = (o.budget_mb << 20) * o.threads;
    const bool within = work_peak <= bound;
    std::cout << "Memory\n"
              << "  library working set, peak while streaming: " << std::setw(10)
              << biaffine::format_bytes(double(work_peak)) << "  (tracked; budget " << o.budget_mb << " MB x "
              << o.threads << " thread(s) = " << biaffine::format_bytes(double(bound)) << ": "
              << (within ? "within budget" : "OVER BUDGET") << ")\n"
              << "  score matrices alive at the end:           " << std::setw(10)
              << biaffine::format_bytes(double(biaffine::tracker().stats().output_bytes)) << "\n"
              << "  (materialising every split's scores with predict() would hold "
              << biaffine::format_bytes([&] {
                     double b = 0;
                     for (std::size_t n : splits) b += double(n) * double(n) * 4;
                     return b;
                 }())
              << ")\n"
              << "  process max RSS: at start " << biaffine::format_bytes(double(rss_start))
              << ", with the document " << biaffine::format_bytes(double(rss_doc)) << ", at the end "
              << biaffine::format_bytes(double(rss_end)) << " (+" << biaffine::format_bytes(double(rss_end - rss_doc))
              << " for scoring, decoding and the head array)\n";
    const bool ok = within && all_heads && (o.decoder == "argmax" || trees == splits.size());  // greedy heads need not form trees
    if (!ok) std::cout << "FAILED\n";
    return ok ? 0 : 1;
}
