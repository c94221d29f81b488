// bench_memory - the before/after memory table: naive padding vs the
// split-batched layers vs streaming, by document length and labels.
//
//   bench_memory                                   # the default table
//   bench_memory --tokens 1k,10k --labels 1 --json  # JSON lines on stdout
//   bench_memory --svg peak.svg --csv runs.csv --md table.md
//   bench_memory --precision fp32,bf16             # both precisions, same run
//
// Modes (all on the same standard workload, bench/workload.hpp):
//   naive      the "before": every split of the document padded to the
//              longest into one [n_splits, L, n_in] batch and scored in ONE
//              call of the scorer's reference interface (predict_padded /
//              forward_padded): padded input and padded [n_splits, L, L(, o)]
//              output.
//   batched    with_splits(with_minibatch_by_padded_size(scorer,
//              budget::bytes(B))): per-split outputs, a byte budget for
//              everything else.
//   streaming  the same composition's predict_stream: each split's scores
//              go to a sink and the memory is reused; nothing is kept.
//   heads      (not in the default list) the same composition's labels at
//              given heads, predict_heads / forward_heads with one head per
//              token (the previous token): `[n, o]` per split instead of
//              `[n, n, o]`, batched by the scorer's heads_cost. Compare with
//              `--modes batched,heads --labels 50`.
// --precision bf16 runs each configuration with compute_precision::bf16 and
// biaffine::bfloat16 outputs (biaffine_scorer<float, B, bfloat16>): scores,
// streamed blocks and score gradients in 2 bytes; training in mixed precision
// (bf16 products, fp32 weights, gradients and kept activations) with its
// outputs and their gradients in bf16.
// Every mode decodes heads (argmax over each score row) inside the timed
// region, so the streaming sink's work is not a handicap and no mode's
// output can be optimised away.
//
// Each configuration runs in a fresh process (max RSS is per process): the
// driver re-executes /proc/self/exe with --one for every configuration and
// collects its JSON line. Measured per run: the library tracker's peak
// (increase over what was alive before the call: parameters and the input
// document are not counted), output bytes, the counting operator new's peak
// (same convention), max RSS (and its growth over the RSS before the call),
// all of the first call; then the time of --reps warm calls (their median,
// min and max; the first call's time apart: page faults and one-time setup),
// FLOPs and GFLOP/s at the median. Every row carries the CPU, its vector ISA
// flags, the build and the timing protocol, so --replot renders the header too.
#include "counting_new.hpp"  // the one TU of this binary that replaces operator new

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <iostream>
#include <map>
#include <set>
#include <tuple>
#include <string>
#include <vector>

#include <sys/wait.h>
#include <unistd.h>

#include <biaffine/biaffine.hpp>

#include "common.hpp"
#include "workload.hpp"

namespace bb = biaffine_bench;
using biaffine::mode;
using bb::fmt;
using bb::tokens_label;

namespace {

/// --tokens, --labels, --threads, --train, --budget-mb, --max-gb, --json and
/// --md are bb::common_flags.
struct options : bb::common_flags {
    std::vector<std::string> modes{"naive", "batched", "streaming"};
    std::vector<std::string> precisions{"fp32"};
    bool recompute = false;  // scorer_config::recompute_in_backward
    bool logits = false;     // scorer_config::train_outputs = logits
    bool one = false;
    bool dry_run = false;
    int reps = 5;             // warm repetitions timed after the first call
    double rep_seconds = 15;  // stop them once all calls add up to this (0: no limit)
    std::string replot;  // JSON lines of an earlier run to re-render
    std::string csv, svg;
    options()
    {
        tokens = {1000, 10000, 100000, 1000000};
        labels = {1, 50};
    }
    void add_flags(bb::flag_table& t)
    {
        t.add("--modes", modes).add("--precision", precisions).add("--recompute", recompute).add("--logits", logits).add("--one", one).add("--dry-run", dry_run).add("--replot", replot);
        t.add("--reps", reps).add("--rep-seconds", rep_seconds);
        t.add("--csv", csv).add("--svg", svg);
    }
};

[[noreturn]] void usage(int code)
{
    std::cout <<
        R"(bench_memory - peak memory and time of naive padding vs split-batched vs streaming scoring

Usage: bench_memory [flags]
  --tokens LIST      document lengths (default 1k,10k,100k,1M; k/M suffixes ok)
  --labels LIST      label counts o (default 1,50)
  --modes LIST       naive,batched,streaming (default), heads (labels at given
                     heads, [n, o] per split; compare with batched)
  --precision LIST   fp32 (default), bf16: compute_precision::bf16 with bfloat16
                     outputs (half the output bytes; training in mixed
                     precision with bf16 outputs and gradients); fp32,bf16 runs both
                     and adds a fp32 / bf16 table
  --budget-mb X      byte budget of the batched/streaming layers in MiB (default 16)
  --threads N        passed to the library's thread option when it has one
                     (otherwise the run is single-threaded and says so)
  --reps N           time each configuration as the median of N warm calls
                     after the first one (default 5; min and max kept in the
                     JSON and CSV); the first call, whose memory is reported,
                     is timed on its own (cold: page faults, one-time setup)
  --rep-seconds S    stop a configuration's warm calls once its calls, the
                     first included, add up to S seconds (default 15; 0: no
                     limit): a first call of S seconds or more runs alone and
                     its time stands for the row (reps 0), so the minute-long
                     configurations of the default table take no longer than
                     before; the JSON's "reps" says how many ran
  --train            forward + backward (streaming has no training path: skipped)
  --recompute        train with scorer_config::recompute_in_backward: nothing
                     but split views kept between forward and backward
  --logits           train returning logits (train_output::logits): no copy
                     of the outputs kept for the softmax backward
  --max-gb X         skip configurations whose predicted memory (input
                     document + working set + outputs) exceeds X GiB (default 8)
  --json             one JSON object per configuration per line on stdout
                     (the table then goes to stderr)
  --csv FILE         all measurements as CSV
  --svg FILE         plot: tracker peak vs document length, log-log, per mode
  --md FILE          the Markdown tables (as printed) into FILE
  --dry-run          print what each configuration is predicted to need; run nothing
  --replot FILE      no runs: re-render the tables / --csv / --svg / --md from
                     the JSON lines of an earlier --json run
  --one              run exactly one configuration in this process (used by
                     the driver; takes single values for --modes/--tokens/--labels)
)";
    std::exit(code);
}

options parse(int argc, char** argv)
{
    options o = bb::parse_flags<options>(argc, argv, "bench_memory", usage);
    for (const auto& m : o.modes) {
        if (m != "naive" && m != "batched" && m != "streaming" && m != "heads") {
            std::cerr << "bench_memory: unknown mode '" << m << "' (naive, batched, streaming, heads)\n";
            std::exit(2);
        }
    }
    for (const auto& p : o.precisions) {
        if (p != "fp32" && p != "bf16") {
            std::cerr << "bench_memory: unknown precision '" << p << "' (fp32, bf16)\n";
            std::exit(2);
        }
    }
    if (o.precisions.empty()) {
        std::cerr << "bench_memory: --precision needs fp32 and/or bf16\n";
        std::exit(2);
    }
    if (o.reps < 1 || !(o.rep_seconds >= 0)) {
        std::cerr << "bench_memory: --reps must be >= 1 and --rep-seconds >= 0 (got --reps " << o.reps
                  << ", --rep-seconds " << o.rep_seconds << ")\n";
        std::exit(2);
    }
    if (o.threads < 1 || o.budget_mb <= 0 || o.tokens.empty() || o.labels.empty()) {
        std::cerr << "bench_memory: --threads, --budget-mb, --tokens and --labels must be positive\n";
        std::exit(2);
    }
    for (auto l : o.labels) {
        if (l == 0) {
            std::cerr << "bench_memory: labels must be >= 1\n";
            std::exit(2);
        }
    }
    return o;
}

std::uint64_t budget_bytes(const options& o) { return static_cast<std::uint64_t>(o.budget_mb * bb::mib); }

// ------------------------------------------------------------ prediction

/// What a configuration is predicted to need, from the split lengths alone
/// and the scorer's own cost reports: the working set plus outputs (and,
/// separately, the input document, which exists in every mode).
struct prediction {
    double run_bytes = 0;
    double input_bytes = 0;
    double total() const { return run_bytes + input_bytes; }
};

/// The scorer of a configuration: the workload's, with --recompute / --logits.
biaffine::scorer_config config_for(const options& o, std::size_t labels, const std::string& precision)
{
    biaffine::scorer_config c = bb::scorer_config_for(labels);
    if (precision == "bf16") c.precision = biaffine::compute_precision::bf16;
    c.recompute_in_backward = o.recompute;
    if (o.logits) c.train_outputs = biaffine::train_output::logits;
    return c;
}

prediction predict(const options& opt, const std::string& m, std::size_t tokens, std::size_t labels,
                   const std::string& precision)
{
    const bool train = opt.train;
    const std::uint64_t budget = budget_bytes(opt);
    const bb::workload w = bb::make_workload(tokens, labels, /*with_doc=*/false);
    biaffine::biaffine_scorer<float> s(config_for(opt, labels, precision));
    const double f = sizeof(float);
    const double fo = precision == "bf16" ? 2.0 : f;  // output scalar
    const double b = static_cast<double>(w.splits.size()), L = static_cast<double>(w.max_len());
    const double N = static_cast<double>(tokens), o = static_cast<double>(labels);
    const double n_in = 256, hu = static_cast<double>(s.hu()), hv = static_cast<double>(s.hv());
    const double outputs = static_cast<double>(w.sum_sq()) * o * fo;
    prediction p;
    p.input_bytes = N * n_in * f;
    if (m == "naive") {
        // Padded input and padded output, plus the scorer's packed buffers on
        // the true rows (its padded path skips padding). The scorer's own
        // padded_cost() is an upper bound that counts padded rows; this is
        // closer to what the run allocates.
        const double pad = b * L * n_in * f, y = b * L * L * o * fo;
        const double packed = N * (n_in + hu + hv + o * hv) * f;
        p.run_bytes = pad + y + packed;
        if (train) p.run_bytes += outputs + packed + pad;  // saved softmax, backward buffers, padded dx
    } else if (m == "batched") {
        p.run_bytes = outputs + static_cast<double>(budget);
        if (train) {
            // dX is input-sized; unless recomputing, every batch keeps U, V, T
            // and (returning probabilities) its softmax outputs until backward.
            p.run_bytes += N * n_in * f;
            if (!opt.recompute) p.run_bytes += (opt.logits ? 0.0 : outputs) + N * (hu + hv + o * hv) * f;
        }
    } else if (m == "heads") {
        const double labels_out = N * o * fo;
        p.run_bytes = labels_out + static_cast<double>(budget);
        if (train) p.run_bytes += labels_out + N * (hu + hv + o * hv) * f + N * n_in * f;
    } else {
        p.run_bytes = static_cast<double>(budget);
    }
    return p;
}

/// Forward (+ backward) FLOPs of labels at given heads: the projections and
/// T = U W' as for full scores, then o * hv per token instead of n * o * hv.
double heads_flops(const bb::dims& d, double tokens, bool train)
{
    const double n_in = static_cast<double>(d.n_in), h = static_cast<double>(d.hidden);
    const double hu = static_cast<double>(d.hu()), hv = static_cast<double>(d.hv()), o = static_cast<double>(d.labels);
    const double f = 2.0 * (2.0 * tokens * n_in * h) + 2.0 * tokens * hu * o * hv + 2.0 * tokens * o * hv;
    return train ? 3.0 * f : f;
}

// ------------------------------------------------------------- one run

/// Argmax over every row of one split's scores (heads, or head-label pairs
/// when o > 1); returns the sum of the chosen heads.
template <class View>
std::uint64_t decode_heads(const View& s)
{
    std::uint64_t sum = 0;
    const std::size_t width = s.n * s.labels;
    for (std::size_t m = 0; m < s.n; ++m) {
        const auto* row = s.data + static_cast<std::ptrdiff_t>(m) * s.row_stride;
        std::size_t best = 0;
        float bv = static_cast<float>(row[0]);
        for (std::size_t i = 1; i < width; ++i) {
            const float x = static_cast<float>(row[i]);  // exact for bfloat16
            if (x > bv) {
                bv = x;
                best = i;
            }
        }
        sum += best / s.labels;
    }
    return sum;
}

/// x - 1 in x's type (float or bfloat16).
template <class O>
O minus_one(O x)
{
    return static_cast<O>(static_cast<float>(x) - 1.0f);
}

/// In place: scores -> a cross-entropy-like gradient (minus one at a "gold"
/// head, the previous token), the way a trainer reuses its output buffer.
template <class View>
void make_gradient(const View& s)
{
    for (std::size_t m = 0; m < s.n; ++m) {
        const std::size_t gold = bb::gold_head(m);
        auto& x = s.data[static_cast<std::ptrdiff_t>(m) * s.row_stride + static_cast<std::ptrdiff_t>(gold * s.labels)];
        x = minus_one(x);
    }
}

struct measured {
    std::uint64_t peak = 0, work_peak = 0, outputs = 0, tracker_allocs = 0;
    std::int64_t heap_peak = 0, heap_allocs = 0;
    double seconds = 0, cpu_seconds = 0;
    std::uint64_t checksum = 0;
    std::uint64_t batches = 0, oversize = 0;
};

/// Wall and CPU seconds of the warm calls of one configuration. Without any
/// (a first call that used up --rep-seconds alone) the first call's stand in.
struct warm_times {
    std::vector<double> wall, cpu;
    double first_wall = 0, first_cpu = 0;
    double median() const { return wall.empty() ? first_wall : bb::median(wall); }
    double cpu_median() const { return cpu.empty() ? first_cpu : bb::median(cpu); }
    double min() const { return wall.empty() ? first_wall : *std::min_element(wall.begin(), wall.end()); }
    double max() const { return wall.empty() ? first_wall : *std::max_element(wall.begin(), wall.end()); }
    /// The wall times as written ("0.0123 0.0119 ..."): one JSON string, so
    /// that the flat JSON lines stay flat and a reader can recompute the median.
    std::string samples() const
    {
        std::string out;
        for (double x : wall) out += (out.empty() ? "" : " ") + fmt("%.6g", x);
        return out;
    }
};

/// Runs `one()` (returning a call's wall and CPU seconds) --reps times, or
/// fewer once the configuration's calls, the first one included, add up to
/// --rep-seconds: a first call that long runs alone (its minute-long
/// configurations would otherwise double the default table's run time).
template <class F>
warm_times time_warm_calls(const options& o, const measured& first, F&& one)
{
    warm_times t;
    t.first_wall = first.seconds;
    t.first_cpu = first.cpu_seconds;
    double spent = first.seconds;
    for (int i = 0; i < o.reps; ++i) {
        if (o.rep_seconds > 0 && spent >= o.rep_seconds) break;
        const auto [wall, cpu] = one();
        t.wall.push_back(wall);
        t.cpu.push_back(cpu);
        spent += wall;
    }
    return t;
}

/// How the bf16 products of this build run: the kernel the compiler targets.
const char* bf16_products()
{
#if defined(__AVX512F__) && defined(__AVX512BF16__) && BIAFFINE_DETAIL_AMX_TARGET
    return "AMX tiles";
#elif defined(__AVX512F__) && defined(__AVX512BF16__)
    return "AVX512_BF16";
#else
    return "emulated on the fp32 kernels";
#endif
}

/// What every row of a run carries besides its measurements, so that
/// --replot renders the same header: the machine, the build, the timing
/// protocol and the load when the row was taken.
void add_run_fields(bb::json_line& j, const options& o)
{
    j.add("cpu", bb::cpu_model())
        .add("cpu_flags", bb::cpu_vector_flags())
        .add("build", biaffine::abi_tag)
        .add("bf16_products", bf16_products())
        .add("reps_requested", o.reps)
        .add("rep_seconds", o.rep_seconds)
        .add("load_average", bb::load_average());
}

/// One configuration with outputs (and score gradients) in Out.
template <class Out>
int run_one_as(const options& o)
{
    using scorer_t = biaffine::scorer_with_output<float, Out>;
    const std::string m = o.modes.at(0);
    const std::string precision = o.precisions.at(0);
    const std::size_t tokens = o.tokens.at(0), labels = o.labels.at(0);
    const std::uint64_t budget = budget_bytes(o);
    if (m == "streaming" && o.train) {
        std::cerr << "bench_memory: streaming has no training path\n";
        return 2;
    }

    bb::workload w = bb::make_workload(tokens, labels);
    scorer_t scorer(config_for(o, labels, precision));
    const bb::dims d = w.d;
    const std::size_t n_in = d.n_in, n_splits = w.splits.size(), L = w.max_len();
    // Inputs in the shape the pipeline takes, built before measuring (moves, no copies).
    std::vector<xt::xtensor<float, 2>> docs;
    docs.push_back(std::move(w.doc));
    std::vector<std::vector<int>> lens{w.splits};

    // Gradient buffers are allocated on first need; a trainer has them from
    // its first step (zero_grad): parameters, like the weights, not counted.
    if (o.train) scorer.zero_grad();
    biaffine::batch_options bopts;
    const int threads = bb::apply_threads(bopts, o.threads);
    auto model = biaffine::with_splits(biaffine::with_minibatch_by_padded_size(scorer, biaffine::budget::bytes(budget), bopts));
    // heads mode: one head per token (the previous token), split-relative.
    std::vector<std::vector<int>> heads(1);
    if (m == "heads") {
        heads[0].reserve(tokens);
        for (int n : w.splits) {
            for (int t = 0; t < n; ++t) heads[0].push_back(static_cast<int>(bb::gold_head(static_cast<std::size_t>(t))));
        }
    }

    // One call of the configuration, decoding included: sets r's time,
    // outputs and checksum. The first call is measured for memory; the warm
    // ones after it only for time.
    auto call = [&](measured& r) {
        const std::uint64_t out_start = biaffine::tracker().stats().output_bytes;
        const double c0 = bb::cpu_seconds();
        const double t0 = bb::now_seconds();
        double t1 = t0;
        if (m == "naive") {
            // The "before": pad everything to the longest split, one call.
            const auto off = w.offsets();
            const float* src = docs[0].data();
            biaffine::tensor<float, 3> x = biaffine::tensor<float, 3>::from_shape({n_splits, L, n_in});
            for (std::size_t k = 0; k < n_splits; ++k) {
                float* dst = x.data() + k * L * n_in;
                const std::size_t n = static_cast<std::size_t>(w.splits[k]);
                std::copy(src + off[k] * n_in, src + (off[k] + n) * n_in, dst);
                std::fill(dst + n * n_in, dst + L * n_in, 0.0f);
            }
            auto view = [&](biaffine::score_array<Out>& y, std::size_t k) {
                return biaffine::score_view<Out>{y.data() + k * L * L * labels,
                                                   static_cast<std::size_t>(w.splits[k]), labels,
                                                   static_cast<std::ptrdiff_t>(L * labels)};
            };
            if (!o.train) {
                biaffine::score_array<Out> y = scorer.predict_padded(x, w.splits);
                for (std::size_t k = 0; k < n_splits; ++k) r.checksum += decode_heads(view(y, k));
                t1 = bb::now_seconds();
                r.outputs = y.size() * sizeof(Out);
            } else {
                auto fw = scorer.forward_padded(x, w.splits, mode::train);
                biaffine::score_array<Out>& y = fw.first;
                for (std::size_t k = 0; k < n_splits; ++k) make_gradient(view(y, k));
                biaffine::tensor<float, 3> dx = fw.second(y);
                r.checksum = static_cast<std::uint64_t>(std::abs(dx(0, 0, 0)) * 1e6);
                t1 = bb::now_seconds();
                r.outputs = y.size() * sizeof(Out);
            }
        } else if (m == "batched") {
            if (!o.train) {
                biaffine::score_list<Out> Y = model.predict(docs, lens);
                for (const auto& y : Y) r.checksum += decode_heads(biaffine::as_score_view(y));
                t1 = bb::now_seconds();
                r.outputs = biaffine::tracker().stats().output_bytes - out_start;
            } else {
                auto fw = model.forward(docs, lens, mode::train);
                for (auto& y : fw.first) {
                    const auto v = biaffine::as_score_view(y);
                    make_gradient(biaffine::score_view<Out>{y.data(), v.n, v.labels, v.row_stride});
                }
                r.outputs = biaffine::tracker().stats().output_bytes - out_start;
                auto views = decltype(model)::grad_views(fw.first);
                auto dX = fw.second(biaffine::span<const biaffine::score_view<const Out>>(views.data(), views.size()));
                r.checksum = static_cast<std::uint64_t>(std::abs(dX[0](0, 0)) * 1e6);
                t1 = bb::now_seconds();
            }
        } else if (m == "heads") {
            // The best label per token: argmax over each [o] row.
            auto best_labels = [&](const biaffine::score_list<Out>& Y) {
                for (const auto& y : Y) {
                    const std::size_t n = y.shape()[0];
                    for (std::size_t t = 0; t < n; ++t) {
                        const Out* row = y.data() + t * labels;
                        const auto less = [](Out a, Out b) { return static_cast<float>(a) < static_cast<float>(b); };
                        r.checksum += static_cast<std::uint64_t>(std::max_element(row, row + labels, less) - row);
                    }
                }
            };
            if (!o.train) {
                biaffine::score_list<Out> Y = model.predict_heads(docs, lens, heads);
                best_labels(Y);
                t1 = bb::now_seconds();
                r.outputs = biaffine::tracker().stats().output_bytes - out_start;
            } else {
                auto fw = model.forward_heads(docs, lens, heads, mode::train);
                for (auto& y : fw.first) {
                    for (std::size_t t = 0; t < y.shape()[0]; ++t) y.data()[t * labels] = minus_one(y.data()[t * labels]);
                }
                r.outputs = biaffine::tracker().stats().output_bytes - out_start;
                auto views = decltype(model)::head_grad_views(fw.first);
                auto dX = fw.second(biaffine::span<const biaffine::seq_view<const Out>>(views.data(), views.size()));
                r.checksum = static_cast<std::uint64_t>(std::abs(dX[0](0, 0)) * 1e6);
                t1 = bb::now_seconds();
            }
        } else {
            model.predict_stream(docs, lens, [&](std::size_t, std::size_t, biaffine::score_view<const Out> s) {
                r.checksum += decode_heads(s);
            });
            t1 = bb::now_seconds();
            r.outputs = 0;  // nothing is kept
        }
        r.seconds = t1 - t0;
        r.cpu_seconds = bb::cpu_seconds() - c0;
    };

    const std::uint64_t rss_before = bb::current_rss_bytes();
    measured r;
    {
        biaffine::scoped_peak sp;
        bb::heap::reset_peak();
        const std::int64_t heap_start = bb::heap::current();
        const std::int64_t heap_allocs_start = bb::heap::allocs();
        const std::uint64_t allocs_start = biaffine::tracker().stats().allocations;
        call(r);
        r.peak = sp.peak_increase();
        r.work_peak = sp.work_peak_bytes() > sp.start_bytes() ? sp.work_peak_bytes() - sp.start_bytes() : 0;
        r.heap_peak = bb::heap::peak() - heap_start;
        r.heap_allocs = bb::heap::allocs() - heap_allocs_start;
        r.tracker_allocs = biaffine::tracker().stats().allocations - allocs_start;
    }
    r.batches = model.inner().batch_count();
    r.oversize = model.inner().oversize_count();
    const std::uint64_t max_rss = bb::max_rss_bytes();

    // Warm repetitions, after everything above is read: the time reported is
    // their median, without first-touch page faults and one-time setup
    // (bf16 weight packing, the thread pool), which stay in the first call's.
    const warm_times warm = time_warm_calls(o, r, [&] {
        measured again;
        call(again);
        return std::make_pair(again.seconds, again.cpu_seconds);
    });

    const std::uint64_t score_cells = m == "naive"  ? static_cast<std::uint64_t>(n_splits) * L * L * labels
                                      : m == "heads" ? static_cast<std::uint64_t>(tokens) * labels
                                                     : w.sum_sq() * labels;
    const double gflop = (m == "heads" ? heads_flops(d, static_cast<double>(tokens), o.train)
                                       : bb::true_flops(d, w.splits, o.train)) / 1e9;
    const double gflop_padded = bb::padded_flops(d, n_splits, L, o.train) / 1e9;
    const prediction p = predict(o, m, tokens, labels, precision);
    bb::json_line j;
    j.add("mode", m)
        .add("precision", precision)
        .add("output_scalar_bytes", static_cast<std::uint64_t>(sizeof(Out)))
        .add("tokens", static_cast<std::uint64_t>(tokens))
        .add("labels", static_cast<std::uint64_t>(labels))
        .add("threads", threads)
        .add("threads_requested", o.threads)
        .add("train", o.train)
        .add("recompute", o.recompute)
        .add("logits", o.logits)
        .add("budget_bytes", budget)
        .add("splits", static_cast<std::uint64_t>(n_splits))
        .add("max_len", static_cast<std::uint64_t>(L))
        .add("sum_sq_lengths", w.sum_sq())
        .add("peak_bytes", r.peak)
        .add("work_peak_bytes", r.work_peak)
        .add("output_bytes", r.outputs)
        // The scores themselves (elements x sizeof(Out): kept outputs, none
        // when streaming) and the largest one split's block a caller or sink
        // receives, apart from the tracker's containers.
        .add("score_bytes", m == "streaming" ? std::uint64_t(0) : score_cells * sizeof(Out))
        .add("block_bytes", static_cast<std::uint64_t>(L) * (m == "heads" ? 1 : L) * labels * sizeof(Out))
        .add("heap_peak_bytes", r.heap_peak)
        .add("heap_allocs", r.heap_allocs)
        .add("tracker_allocs", r.tracker_allocs)
        .add("max_rss_bytes", max_rss)
        .add("rss_before_bytes", rss_before)
        .add("rss_growth_bytes", max_rss > rss_before ? max_rss - rss_before : std::uint64_t(0))
        .add("input_bytes", static_cast<std::uint64_t>(tokens * n_in * sizeof(float)))
        // The split-batched bound: outputs + budget, and in training what
        // backprop needs by definition: the input-sized dX it returns and the
        // per-split gradient views the caller hands it (naive has no bound).
        .add("bound_bytes", r.outputs + budget +
                                (o.train ? static_cast<std::uint64_t>(tokens * n_in * sizeof(float) +
                                                                      n_splits * sizeof(biaffine::score_view<const Out>))
                                         : 0))
        .add("predicted_bytes", p.run_bytes)
        .add("seconds", warm.median())
        .add("seconds_min", warm.min())
        .add("seconds_max", warm.max())
        .add("seconds_reps", warm.samples())
        .add("reps", static_cast<std::uint64_t>(warm.wall.size()))
        .add("cpu_seconds", warm.cpu_median())
        .add("cold_seconds", r.seconds)
        .add("cold_cpu_seconds", r.cpu_seconds)
        .add("gflop", gflop)
        .add("gflop_padded", gflop_padded)
        .add("gflops", warm.median() > 0 ? gflop / warm.median() : 0.0)
        .add("batches", m == "naive" ? std::uint64_t(1) : r.batches)
        .add("oversize", r.oversize)
        .add("checksum", r.checksum)
        .add("skipped", false);
    add_run_fields(j, o);
    std::cout << j.str() << std::endl;
    return 0;
}

int run_one(const options& o)
{
    return o.precisions.at(0) == "bf16" ? run_one_as<biaffine::bfloat16>(o) : run_one_as<float>(o);
}

// ---------------------------------------------------------------- driver

struct row {
    std::string mode;
    std::string precision = "fp32";
    std::uint64_t tokens = 0, labels = 0;
    std::string line;    // the JSON line
    bool skipped = false;
    std::string reason;  // why skipped / failed
    double predicted = 0;
    double num(const std::string& k) const { return bb::json_num(line, k); }
};

/// Runs `argv` as a child, returns (exit status, its stdout).
std::pair<int, std::string> run_child(const std::vector<std::string>& argv)
{
    int fds[2];
    if (pipe(fds) != 0) throw std::runtime_error(std::string("pipe: ") + std::strerror(errno));
    const pid_t pid = fork();
    if (pid < 0) throw std::runtime_error(std::string("fork: ") + std::strerror(errno));
    if (pid == 0) {
        dup2(fds[1], STDOUT_FILENO);
        close(fds[0]);
        close(fds[1]);
        std::vector<char*> cargv;
        for (const auto& s : argv) cargv.push_back(const_cast<char*>(s.c_str()));
        cargv.push_back(nullptr);
        execv("/proc/self/exe", cargv.data());
        std::perror("execv /proc/self/exe");
        _exit(127);
    }
    close(fds[1]);
    std::string out;
    char buf[4096];
    for (;;) {
        const ssize_t n = read(fds[0], buf, sizeof(buf));
        if (n > 0) {
            out.append(buf, static_cast<std::size_t>(n));
        } else if (n == 0 || errno != EINTR) {
            break;
        }
    }
    close(fds[0]);
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    return {status, out};
}

// 0.1, 1, 10, 1,000, 10,000 ...
std::string thousands(double v)
{
    if (v < 1000) return fmt("%g", v);
    std::string digits = fmt("%.0f", v), out;
    for (std::size_t i = 0; i < digits.size(); ++i) {
        if (i != 0 && (digits.size() - i) % 3 == 0) out += ',';
        out += digits[i];
    }
    return out;
}

std::string mib_str(double b) { return fmt(b >= 100 * bb::mib ? "%.0f" : (b >= 10 * bb::mib ? "%.1f" : "%.2f"), b / bb::mib); }

/// The run as its rows describe it: the same whether the run renders its own
/// tables or --replot renders them from its JSON lines.
struct run_info {
    // Empty when the JSON lines predate these fields.
    std::string cpu, cpu_flags, build, bf16;
    std::string load;  // at the end of the last row
    int threads = 1;
    int reps = 0;  // --reps; 0: rows from before --reps, one (first) call each
    double rep_seconds = 0;
};

run_info describe(const std::vector<row>& rows)
{
    run_info i;
    if (rows.empty()) return i;
    const std::string& first = rows.front().line;
    i.cpu = bb::json_get(first, "cpu").value_or("");
    i.cpu_flags = bb::json_get(first, "cpu_flags").value_or("");
    i.build = bb::json_get(first, "build").value_or("");
    i.bf16 = bb::json_get(first, "bf16_products").value_or("");
    i.load = bb::json_get(rows.back().line, "load_average").value_or("");
    i.threads = static_cast<int>(bb::json_num(first, "threads", 1));
    i.reps = static_cast<int>(bb::json_num(first, "reps_requested", 0));
    i.rep_seconds = bb::json_num(first, "rep_seconds", 0);
    return i;
}

/// "median of 5 warm calls after the first (at most 10 s of them)".
std::string timing_protocol(const run_info& i)
{
    if (i.reps == 0) return "one (first, cold) call per configuration: JSON lines from before --reps";
    return "median of " + std::to_string(i.reps) + " warm call" + (i.reps == 1 ? "" : "s") + " after the first" +
           (i.rep_seconds > 0 ? " (fewer once the calls pass " + fmt("%g", i.rep_seconds) +
                                    " s; reps 0: the first call alone passed them, its time stands)"
                              : "");
}

/// The machine and the build in one line (the tables' header, the plot's subtitle).
std::string machine(const run_info& i)
{
    if (i.cpu.empty()) return "CPU: not recorded in these JSON lines";
    return "CPU: " + i.cpu + " (vector ISA: " + i.cpu_flags + "); build " + i.build + ", bf16 products on " + i.bf16;
}

std::string tables(const options& o, const std::vector<row>& rows)
{
    const run_info info = describe(rows);
    std::ostringstream s;
    s << "Workload: one document per configuration, `n_in = 256` float32, sentences log-normal (median 18, "
         "sigma 0.6, clipped to [1, 100]); scorer `h = 128`, both bias columns; "
      << (o.train ? std::string("forward + backward (train mode") + (o.recompute ? ", recompute_in_backward" : "") +
                        (o.logits ? ", train_output::logits" : "") + ")"
                  : std::string("inference"))
      << "; budget " << o.budget_mb << " MiB; threads "
      << info.threads
      << (bb::has_threads_member<biaffine::batch_options>::value ? "" : " (the library has no thread option: 1)")
      << "; time: " << timing_protocol(info) << ". " << machine(info)
      << (info.load.empty() ? "" : "; load average at the end " + info.load) << ".\n\n"
      << "Peak = the library tracker's peak increase during the first call (parameters and the input document "
         "excluded); heap = the counting `operator new` peak increase; RSS = process max RSS (growth over the "
         "RSS before the call in brackets), read after the first call. "
      << (info.reps == 0 ? "Time = the first call's wall time, CPU s its process CPU time. "
                         : "Time = wall time of the warm calls: their median, min-max in brackets, `reps` of them; "
                           "first call = the first call's wall time (cold: page faults and one-time setup such as "
                           "bf16 weight packing; the call whose memory is reported); CPU s = the warm calls' median "
                           "process CPU time. ")
      << "Every call includes decoding heads (argmax per row). GFLOP/s = the true (length-aware) FLOPs over "
      << (info.reps == 0 ? "that time." : "the median time. The ratio tables use the medians.") << "\n\n";
    s << "| configuration | peak MiB | outputs MiB | heap peak MiB | max RSS MiB (growth) | time s (min-max) | reps | "
         "first call s | CPU s | GFLOP/s |\n"
      << "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n";
    for (const row& r : rows) {
        s << "| " << tokens_label(r.tokens) << " tokens, o=" << r.labels << ", " << r.mode
          << (r.precision == "fp32" ? "" : ", " + r.precision) << " | ";
        if (r.skipped) {
            s << r.reason << " | | | | | | | | |\n";
            continue;
        }
        // Rows from before --reps have one (cold) time and nothing else.
        const bool warm = bb::json_get(r.line, "reps").has_value();
        s << mib_str(r.num("peak_bytes")) << " | " << mib_str(r.num("output_bytes")) << " | "
          << mib_str(r.num("heap_peak_bytes")) << " | " << fmt("%.0f", r.num("max_rss_bytes") / bb::mib) << " ("
          << fmt("%.0f", r.num("rss_growth_bytes") / bb::mib) << ") | " << fmt("%.3f", r.num("seconds"))
          << (warm && r.num("reps") > 0 ? " (" + fmt("%.3f", r.num("seconds_min")) + "-" + fmt("%.3f", r.num("seconds_max")) + ")" : "")
          << " | " << (warm ? fmt("%.0f", r.num("reps")) : "-") << " | "
          << (warm ? fmt("%.3f", r.num("cold_seconds")) : "-") << " | " << fmt("%.3f", r.num("cpu_seconds")) << " | "
          << fmt("%.1f", r.num("gflops")) << " |\n";
    }
    // Ratios per (tokens, labels).
    // The ratio tables below compare modes within the first precision run.
    const std::string first_precision = rows.empty() ? std::string("fp32") : rows.front().precision;
    auto find_as = [&](std::uint64_t t, std::uint64_t l, const std::string& m, const std::string& p) -> const row* {
        for (const row& r : rows) {
            if (r.tokens == t && r.labels == l && r.mode == m && r.precision == p && !r.skipped) return &r;
        }
        return nullptr;
    };
    auto find = [&](std::uint64_t t, std::uint64_t l, const std::string& m) { return find_as(t, l, m, first_precision); };
    std::ostringstream rs;
    bool any = false;
    rs << "\n| configuration | peak naive / batched | peak naive / streaming | time naive / batched | "
          "time batched / streaming |\n|---|---:|---:|---:|---:|\n";
    std::set<std::pair<std::uint64_t, std::uint64_t>> seen;
    for (const row& r0 : rows) {
        const auto key = std::make_pair(r0.tokens, r0.labels);
        if (!seen.insert(key).second) continue;
        const row* n = find(r0.tokens, r0.labels, "naive");
        const row* b = find(r0.tokens, r0.labels, "batched");
        const row* st = find(r0.tokens, r0.labels, "streaming");
        auto ratio = [](const row* a, const row* c, const char* k) -> std::string {
            if (a == nullptr || c == nullptr || c->num(k) <= 0) return "-";
            return fmt("%.1fx", a->num(k) / c->num(k));
        };
        if ((n && (b || st)) || (b && st)) any = true;
        rs << "| " << tokens_label(r0.tokens) << " tokens, o=" << r0.labels << " | " << ratio(n, b, "peak_bytes")
           << " | " << ratio(n, st, "peak_bytes") << " | " << ratio(n, b, "seconds") << " | "
           << ratio(b, st, "seconds") << " |\n";
    }
    if (any) s << rs.str();
    // Full [n, n, o] scores (batched) against labels at given heads.
    std::ostringstream hs;
    bool any_heads = false;
    hs << "\n| configuration | peak batched / heads | outputs batched / heads | time batched / heads |\n"
          "|---|---:|---:|---:|\n";
    seen.clear();
    for (const row& r0 : rows) {
        const auto key = std::make_pair(r0.tokens, r0.labels);
        if (!seen.insert(key).second) continue;
        const row* b = find(r0.tokens, r0.labels, "batched");
        const row* h = find(r0.tokens, r0.labels, "heads");
        if (b == nullptr || h == nullptr) continue;
        any_heads = true;
        auto ratio = [&](const char* k) -> std::string { return h->num(k) > 0 ? fmt("%.1fx", b->num(k) / h->num(k)) : "-"; };
        hs << "| " << tokens_label(r0.tokens) << " tokens, o=" << r0.labels << " | " << ratio("peak_bytes") << " | "
           << ratio("output_bytes") << " | " << ratio("seconds") << " |\n";
    }
    if (any_heads) s << hs.str();
    // fp32 against bf16 (outputs as biaffine::bfloat16), per configuration.
    std::ostringstream ps;
    bool any_precision = false;
    ps << "\n| configuration | scores fp32 / bf16 | largest block fp32 / bf16 | tracked outputs fp32 / bf16 | "
          "peak fp32 / bf16 | time fp32 / bf16 | CPU time fp32 / bf16 |\n|---|---:|---:|---:|---:|---:|---:|\n";
    std::set<std::tuple<std::uint64_t, std::uint64_t, std::string>> seen_modes;
    for (const row& r0 : rows) {
        if (!seen_modes.insert(std::make_tuple(r0.tokens, r0.labels, r0.mode)).second) continue;
        const row* a = find_as(r0.tokens, r0.labels, r0.mode, "fp32");
        const row* b = find_as(r0.tokens, r0.labels, r0.mode, "bf16");
        if (a == nullptr || b == nullptr) continue;
        any_precision = true;
        auto ratio = [&](const char* k) -> std::string { return b->num(k) > 0 ? fmt("%.2fx", a->num(k) / b->num(k)) : "-"; };
        ps << "| " << tokens_label(r0.tokens) << " tokens, o=" << r0.labels << ", " << r0.mode << " | "
           << ratio("score_bytes") << " | " << ratio("block_bytes") << " | " << ratio("output_bytes") << " | "
           << ratio("peak_bytes") << " | " << ratio("seconds") << " | " << ratio("cpu_seconds") << " |\n";
    }
    if (any_precision) s << ps.str();
    return s.str();
}

void write_csv(const std::string& path, const std::vector<row>& rows)
{
    static const char* keys[] = {"mode", "precision", "tokens", "labels", "threads", "train", "recompute", "logits", "budget_bytes", "splits",
                                 "max_len", "peak_bytes", "work_peak_bytes", "output_bytes", "score_bytes", "block_bytes", "heap_peak_bytes",
                                 "max_rss_bytes", "rss_growth_bytes", "predicted_bytes", "seconds", "seconds_min", "seconds_max",
                                 "reps", "seconds_reps", "cpu_seconds", "cold_seconds", "cold_cpu_seconds", "gflop",
                                 "gflop_padded", "gflops", "batches", "oversize", "skipped", "reason", "cpu", "cpu_flags",
                                 "build", "bf16_products", "reps_requested", "rep_seconds"};
    std::ofstream f(path);
    for (std::size_t i = 0; i < std::size(keys); ++i) f << (i ? "," : "") << keys[i];
    f << "\n";
    for (const row& r : rows) {
        for (std::size_t i = 0; i < std::size(keys); ++i) {
            const auto v = bb::json_get(r.line, keys[i]);
            std::string s = v ? *v : "";
            if (s == "null") s.clear();
            if (s.find(',') != std::string::npos) s = "\"" + s + "\"";
            f << (i ? "," : "") << s;
        }
        f << "\n";
    }
}

/// Hand-written SVG: tracker peak (MiB) vs tokens, log-log, one line per
/// (mode, labels); skipped configurations drawn hollow at their predicted size.
void write_svg(const std::string& path, const options& o, const std::vector<row>& rows)
{
    const double W = 740, H = 480, ml = 90, mr = 190, mt = 62, mb = 60;
    const double pw = W - ml - mr, ph = H - mt - mb;
    double xmin = 1e300, xmax = 0, ymin = 1e300, ymax = 0;
    auto yval = [](const row& r) { return r.skipped ? r.predicted : std::max(r.num("peak_bytes"), 1.0); };
    for (const row& r : rows) {
        if (r.skipped && r.predicted <= 0) continue;
        xmin = std::min(xmin, double(r.tokens));
        xmax = std::max(xmax, double(r.tokens));
        ymin = std::min(ymin, yval(r) / bb::mib);
        ymax = std::max(ymax, yval(r) / bb::mib);
    }
    if (xmax <= 0) return;
    const double bmib = o.budget_mb;
    ymin = std::min(ymin, bmib);
    ymax = std::max(ymax, bmib);
    const double lx0 = std::floor(std::log10(xmin)), lx1 = std::max(std::ceil(std::log10(xmax)), lx0 + 1);
    const double ly0 = std::floor(std::log10(ymin)), ly1 = std::max(std::ceil(std::log10(ymax)), ly0 + 1);
    auto X = [&](double v) { return ml + (std::log10(v) - lx0) / (lx1 - lx0) * pw; };
    auto Y = [&](double v) { return mt + ph - (std::log10(v) - ly0) / (ly1 - ly0) * ph; };
    std::ofstream f(path);
    f << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << W << "\" height=\"" << H << "\" viewBox=\"0 0 " << W
      << " " << H << "\" font-family=\"sans-serif\" font-size=\"12\">\n"
      << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
      << "<text x=\"" << ml + pw / 2 << "\" y=\"22\" text-anchor=\"middle\" font-size=\"14\">Peak memory vs document "
         "length (" << (o.train ? "train" : "inference") << ", float32, n_in=256, h=128)</text>\n";
    // The tables' header in two lines: where and how the figures were taken.
    const run_info info = describe(rows);
    auto text = [](const std::string& x) {
        std::string e;
        for (char c : x) e += c == '&' ? std::string("&amp;") : c == '<' ? std::string("&lt;") : c == '>' ? std::string("&gt;") : std::string(1, c);
        return e;
    };
    f << "<text x=\"" << W / 2 << "\" y=\"38\" text-anchor=\"middle\" font-size=\"9\" fill=\"#444\">"
      << text(machine(info)) << "</text>\n<text x=\"" << W / 2
      << "\" y=\"50\" text-anchor=\"middle\" font-size=\"9\" fill=\"#444\">threads " << info.threads
      << "; time: " << text(timing_protocol(info)) << "; memory from the first call</text>\n";
    // Grid and ticks.
    for (double e = lx0; e <= lx1 + 1e-9; e += 1) {
        const double x = X(std::pow(10.0, e));
        f << "<line x1=\"" << x << "\" y1=\"" << mt << "\" x2=\"" << x << "\" y2=\"" << mt + ph
          << "\" stroke=\"#ddd\"/>\n<text x=\"" << x << "\" y=\"" << mt + ph + 18 << "\" text-anchor=\"middle\">"
          << tokens_label(static_cast<std::uint64_t>(std::pow(10.0, e) + 0.5)) << "</text>\n";
    }
    for (double e = ly0; e <= ly1 + 1e-9; e += 1) {
        const double y = Y(std::pow(10.0, e));
        const double v = std::pow(10.0, e);
        f << "<line x1=\"" << ml << "\" y1=\"" << y << "\" x2=\"" << ml + pw << "\" y2=\"" << y
          << "\" stroke=\"#ddd\"/>\n<text x=\"" << ml - 6 << "\" y=\"" << y + 4 << "\" text-anchor=\"end\">"
          << thousands(v) << "</text>\n";
    }
    f << "<rect x=\"" << ml << "\" y=\"" << mt << "\" width=\"" << pw << "\" height=\"" << ph
      << "\" fill=\"none\" stroke=\"#333\"/>\n"
      << "<text x=\"" << ml + pw / 2 << "\" y=\"" << H - 18 << "\" text-anchor=\"middle\">document length (tokens)</text>\n"
      << "<text transform=\"translate(18," << mt + ph / 2 << ") rotate(-90)\" text-anchor=\"middle\">peak tracked "
         "memory during the call (MiB)</text>\n";
    // Budget line.
    f << "<line x1=\"" << ml << "\" y1=\"" << Y(bmib) << "\" x2=\"" << ml + pw << "\" y2=\"" << Y(bmib)
      << "\" stroke=\"#888\" stroke-dasharray=\"2,3\"/>\n<text x=\"" << ml + pw - 4 << "\" y=\"" << Y(bmib) + 14
      << "\" text-anchor=\"end\" fill=\"#666\" font-size=\"11\">budget " << bmib << " MiB</text>\n";
    const std::map<std::string, std::string> colour{{"naive", "#d62728"}, {"batched", "#1f77b4"},
                                                    {"streaming", "#2ca02c"}};
    std::vector<std::tuple<std::string, std::uint64_t, std::string>> series;
    for (const row& r : rows) {
        const auto k = std::make_tuple(r.mode, r.labels, r.precision);
        if (std::find(series.begin(), series.end(), k) == series.end()) series.push_back(k);
    }
    double ly = mt + 10;
    for (const auto& [mname, lab, prec] : series) {
        const std::string c = colour.count(mname) ? colour.at(mname) : "#000";
        const std::string dash = lab == 1 ? (prec == "fp32" ? "" : " stroke-dasharray=\"2,2\"")
                                          : (prec == "fp32" ? " stroke-dasharray=\"6,4\"" : " stroke-dasharray=\"6,2,2,2\"");
        std::vector<const row*> pts;
        for (const row& r : rows) {
            if (r.mode == mname && r.labels == lab && r.precision == prec && !(r.skipped && r.predicted <= 0)) {
                pts.push_back(&r);
            }
        }
        std::sort(pts.begin(), pts.end(), [](const row* a, const row* b) { return a->tokens < b->tokens; });
        std::string poly;
        for (const row* r : pts) poly += fmt("%.1f,", X(double(r->tokens))) + fmt("%.1f ", Y(yval(*r) / bb::mib));
        f << "<polyline points=\"" << poly << "\" fill=\"none\" stroke=\"" << c << "\" stroke-width=\"2\"" << dash
          << "/>\n";
        for (const row* r : pts) {
            f << "<circle cx=\"" << X(double(r->tokens)) << "\" cy=\"" << Y(yval(*r) / bb::mib) << "\" r=\"4\" fill=\""
              << (r->skipped ? "white" : c) << "\" stroke=\"" << c << "\" stroke-width=\"1.5\"/>\n";
        }
        const double lx = ml + pw + 14;
        f << "<line x1=\"" << lx << "\" y1=\"" << ly << "\" x2=\"" << lx + 26 << "\" y2=\"" << ly << "\" stroke=\"" << c
          << "\" stroke-width=\"2\"" << dash << "/>\n<text x=\"" << lx + 32 << "\" y=\"" << ly + 4 << "\">" << mname
          << ", o=" << lab << (prec == "fp32" ? "" : ", " + prec) << "</text>\n";
        ly += 20;
    }
    f << "<circle cx=\"" << ml + pw + 27 << "\" cy=\"" << ly << "\" r=\"4\" fill=\"white\" stroke=\"#555\"/>\n<text x=\""
      << ml + pw + 46 << "\" y=\"" << ly + 4 << "\" font-size=\"11\">predicted, not run</text>\n";
    f << "</svg>\n";
}

int report(const options& o, const std::vector<row>& rows);

/// Rebuilds the rows from the JSON lines of an earlier run.
int replot(options o)
{
    std::ifstream f(o.replot);
    if (!f) throw std::runtime_error("cannot read " + o.replot);
    std::vector<row> rows;
    for (std::string line; std::getline(f, line);) {
        if (line.empty() || line[0] != '{') continue;
        row r;
        r.line = line;
        r.mode = bb::json_get(line, "mode").value_or("");
        r.precision = bb::json_get(line, "precision").value_or("fp32");
        r.tokens = static_cast<std::uint64_t>(bb::json_num(line, "tokens"));
        r.labels = static_cast<std::uint64_t>(bb::json_num(line, "labels"));
        r.skipped = bb::json_get(line, "skipped").value_or("false") == "true";
        r.reason = bb::json_get(line, "reason").value_or("");
        r.predicted = r.skipped ? bb::json_num(line, "predicted_bytes") : 0;
        o.train = bb::json_get(line, "train").value_or("false") == "true";
        o.recompute = bb::json_get(line, "recompute").value_or("false") == "true";
        o.logits = bb::json_get(line, "logits").value_or("false") == "true";
        o.budget_mb = bb::json_num(line, "budget_bytes") / bb::mib;
        rows.push_back(r);
    }
    o.json = false;
    std::cerr << "bench_memory: re-rendering " << rows.size() << " rows of " << o.replot << "\n";
    return report(o, rows);
}

int drive(const options& o, const char* argv0)
{
    (void)argv0;
    const std::uint64_t budget = budget_bytes(o);
    std::vector<row> rows;
    biaffine::batch_options probe;
    const int threads_effective = bb::apply_threads(probe, o.threads);
    if (!bb::has_threads_member<biaffine::batch_options>::value && o.threads != 1) {
        std::cerr << "bench_memory: the library has no thread option yet; running with 1 thread\n";
    }
    const double cap = o.max_gb * bb::gib;
    for (auto t : o.tokens) {
        for (auto l : o.labels) {
            for (const auto& m : o.modes) {
              for (const auto& prec : o.precisions) {
                row r;
                r.mode = m;
                r.precision = prec;
                r.tokens = t;
                r.labels = l;
                bb::json_line skip;
                skip.add("mode", m).add("precision", prec).add("tokens", t).add("labels", l).add("threads", threads_effective)
                    .add("train", o.train).add("recompute", o.recompute).add("logits", o.logits)
                    .add("budget_bytes", budget);
                auto skipped = [&](const std::string& why, double predicted) {
                    r.skipped = true;
                    r.reason = why;
                    r.predicted = predicted;
                    skip.null("peak_bytes").null("output_bytes").null("heap_peak_bytes").null("max_rss_bytes")
                        .null("seconds").null("gflop").add("predicted_bytes", predicted).add("skipped", true)
                        .add("reason", why);
                    add_run_fields(skip, o);
                    r.line = skip.str();
                };
                const prediction p = predict(o, m, t, l, prec);
                if (m == "streaming" && o.train) {
                    skipped("n/a (no training stream)", 0);
                } else if (o.dry_run) {
                    skipped("dry run: predicted " + fmt("%.2f", p.run_bytes / bb::gib) + " GiB + input " +
                                fmt("%.2f", p.input_bytes / bb::gib) + " GiB" + (p.total() > cap ? " (over the cap)" : ""),
                            p.run_bytes);
                } else if (p.total() > cap) {
                    skipped(bb::over_max_gb(p.total(), o.max_gb), p.run_bytes);
                } else {
                    std::cerr << "bench_memory: " << m << ", " << t << " tokens, o=" << l
                              << (prec == "fp32" ? "" : ", " + prec) << (o.train ? ", train" : "") << " (predicted " << bb::human_bytes(p.total())
                              << ") ..." << std::flush;
                    std::vector<std::string> args{"bench_memory", "--one", "--modes", m, "--tokens",
                                                  std::to_string(t), "--labels", std::to_string(l), "--budget-mb",
                                                  fmt("%.17g", o.budget_mb), "--threads", std::to_string(o.threads),
                                                  "--precision", prec, "--reps", std::to_string(o.reps),
                                                  "--rep-seconds", fmt("%.17g", o.rep_seconds)};
                    if (o.train) args.push_back("--train");
                    if (o.recompute) args.push_back("--recompute");
                    if (o.logits) args.push_back("--logits");
                    const auto [status, out] = run_child(args);
                    std::string line;
                    std::istringstream ss(out);
                    for (std::string x; std::getline(ss, x);) {
                        if (!x.empty() && x[0] == '{') line = x;
                    }
                    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 || line.empty()) {
                        const std::string why = WIFSIGNALED(status)
                                                    ? "failed: killed by signal " + std::to_string(WTERMSIG(status))
                                                    : "failed: exit status " + std::to_string(WEXITSTATUS(status));
                        std::cerr << " " << why << "\n";
                        skipped(why, 0);
                    } else {
                        r.line = line;
                        const double reps = bb::json_num(line, "reps");
                        std::cerr << " " << fmt("%.3f s", bb::json_num(line, "seconds"))
                                  << (reps > 0 ? " (median of " + fmt("%g", reps) + "; first call " +
                                                     fmt("%.3f s", bb::json_num(line, "cold_seconds")) + ")"
                                               : std::string(" (the first call alone: past --rep-seconds)"))
                                  << ", peak "
                                  << mib_str(bb::json_num(line, "peak_bytes")) << " MiB\n";
                    }
                }
                if (o.json) std::cout << r.line << std::endl;
                rows.push_back(r);
              }
            }
        }
    }
    return report(o, rows);
}

int report(const options& o, const std::vector<row>& rows)
{
    const std::string t = tables(o, rows);
    (o.json ? std::cerr : std::cout) << "\n" << t;
    if (!o.md.empty()) std::ofstream(o.md) << t;
    if (!o.csv.empty()) write_csv(o.csv, rows);
    if (!o.svg.empty()) write_svg(o.svg, o, rows);
    for (const row& r : rows) {
        if (r.reason.rfind("failed", 0) == 0) return 1;
    }
    return 0;
}

}  // namespace

int main(int argc, char** argv)
{
    try {
        const options o = parse(argc, argv);
        if (o.one) return run_one(o);
        if (!o.replot.empty()) return replot(o);
        return drive(o, argv[0]);
    } catch (const std::exception& e) {
        std::cerr << "bench_memory: " << e.what() << "\n";
        return 1;
    }
}
