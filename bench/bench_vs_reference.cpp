// bench_vs_reference - the same workloads through this library and through
// reference implementations of the same math, in one process, same threads,
// interleaved repetitions, medians.
//
//   bench_vs_reference                  # the issue targets (see --help)
//   bench_vs_reference --tokens 100k --labels 1 --threads 1 [--train] --json
//
// Implementations:
//   ours            with_splits(with_minibatch_by_padded_size(scorer,
//                   budget::bytes(B), {threads})): length-aware, per-split outputs.
//   eigen_naive     plain Eigen, written here: every split padded to the
//                   longest in one batch, every padded position computed
//                   (projections, u.W', v.T^T, mask), the reference's shapes.
//   torch_naive     the reference module's semantics on libtorch's C++ API:
//                   linear + relu, ones columns, the einsum pair
//                   einsum("bli,oij->bloj", u, W) then einsum("bmj,bloj->bmlo",
//                   v, .), the broadcast -10000 mask (softmax in train), all
//                   splits in one padded batch.
//   torch_batched   the same module over batches formed by the spaCy rule
//                   (minibatch_by_padded_size, a padded-items size), padding
//                   each batch and unpadding per-split outputs, as spaCy's
//                   with_pad_seq_unpad_matrix does.
//   gemm            one large Eigen GEMM [M, 1024] x [1024, 1024] with the
//                   same FLOP count as ours' true work.
//   blas_gemm       the same product through libtorch's mm (its BLAS). The
//                   faster of the two is the roofline.
//   blas_shapes     libtorch's mm on ours' batch-wide products at ours' shapes
//                   (the projections [N, 256] x [256, 128] twice, U W' as
//                   [rows, 129] x [129, o * 129] over chunks of 16 MiB of T,
//                   and in train their backward products): how fast the BLAS
//                   runs the products this model is made of, against the
//                   square roofline GEMM (K = 1024). Not a full implementation:
//                   no per-split scores, bias, relu or softmax.
// GFLOP/s everywhere counts the true (length-aware) FLOPs of the workload,
// so it reads as useful work per second; padded implementations execute
// more (listed as "executed GFLOP"). Train = forward, a cross-entropy-like
// gradient built in place on the outputs, backward to the document.
#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <fstream>
#include <functional>
#include <iostream>
#include <memory>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <ATen/Parallel.h>
#include <torch/torch.h>

#include "biaffine/detail/eigen.hpp"  // Eigen, without GCC 12's AVX-512 false positives
#include <biaffine/biaffine.hpp>
#include <biaffine/detail/compute/amx_bf16_gemm.hpp>

#include "common.hpp"
#include "workload.hpp"

namespace bb = biaffine_bench;
using biaffine::mode;
using bb::fmt;
using bb::tokens_label;
using RM = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

namespace {

struct case_cfg {
    std::size_t tokens = 100000;
    std::size_t labels = 1;
    bool train = false;
    int threads = 1;
    // Targets (issue 5); 0 = none.
    double min_speedup = 0;    // torch_batched median / ours median
    double min_roofline = 0;   // ours GFLOP/s / the faster GEMM's GFLOP/s
    double max_seconds = 0;    // ours median wall time
};

/// --budget-mb, --max-gb, --json and --md are bb::common_flags; so are the
/// case flags --tokens, --labels, --threads and --train, which parse() turns
/// into `cases`.
struct options : bb::common_flags {
    std::vector<case_cfg> cases;
    std::vector<std::string> impls{"ours",      "eigen_naive", "torch_naive", "torch_batched",
                                   "gemm",      "blas_gemm",   "blas_shapes"};
    int reps = 5;
    int min_reps = 3;
    double case_seconds = 90;  // stop adding repetitions past this (>= min_reps)
    std::uint64_t ref_items = 4096;
    int blas_threads = 0;  // 0: the case's thread count
    bool keep_blas_core = false;  // read in main() before parsing: no re-exec for OpenBLAS's core
    std::vector<std::string> lengths_from;  // CoNLL-U files: split lengths and documents from them
    std::string precision = "fp32";  // bf16: ours_bf16 and gemm_bf16 beside ours and the fp32 GEMMs
    bb::treebank_lengths treebank;
    options() { labels = {1}; }
    void add_flags(bb::flag_table& t)
    {
        t.add("--impls", impls).add("--reps", reps).add("--case-seconds", case_seconds);
        t.add("--ref-items", ref_items).add("--blas-threads", blas_threads).add("--keep-blas-core", keep_blas_core);
        t.add("--lengths-from", lengths_from).add("--precision", precision);
    }
};

std::vector<case_cfg> default_cases()
{
    std::vector<case_cfg> c(4);
    // Issue 5's speed-ups and time, issue 14's 85% of the roofline.
    c[0].tokens = 100000, c[0].labels = 1, c[0].threads = 1, c[0].min_speedup = 2.5;
    c[1].tokens = 20000, c[1].labels = 50, c[1].threads = 1, c[1].min_speedup = 5;
    c[2].tokens = 100000, c[2].labels = 1, c[2].threads = 1, c[2].train = true, c[2].min_speedup = 3;
    c[3].tokens = 1000000, c[3].labels = 1, c[3].threads = 2, c[3].max_seconds = 2.5;
    for (case_cfg& x : c) x.min_roofline = 0.85;
    return c;
}

[[noreturn]] void usage(int code)
{
    std::cout << R"(bench_vs_reference - this library vs naive Eigen, libtorch (naive and spaCy-batched) and a GEMM roofline

Usage: bench_vs_reference [flags]
  (no case flags)    the issue-5 targets: 100k tokens o=1 inference 1 thread;
                     20k o=50 inference 1 thread; 100k o=1 train 1 thread;
                     1M o=1 inference 2 threads
  --tokens LIST      instead: these document lengths ...
  --labels LIST      ... these label counts (default 1) ...
  --threads N        ... this thread count (default 1) ...
  --train            ... forward + backward
  --impls LIST       ours,eigen_naive,torch_naive,torch_batched,gemm,blas_gemm,blas_shapes
                     (default all)
  --reps N           timed repetitions per implementation (default 5; fewer, but
                     at least 3, when a case passes --case-seconds)
  --case-seconds S   time budget per case for repetitions (default 90)
  --budget-mb X      ours: byte budget in MiB (default 16)
  --ref-items N      torch_batched: spaCy padded-items size (default 4096)
  --blas-threads N   OpenBLAS's own thread pool (default: the case's thread count)
  --lengths-from FILES  split lengths from CoNLL-U files (comma list) instead of the
                     generated log-normal ones: each case's document is the files'
                     sentences in order, repeated to its token count; ours gets
                     one document per # newdoc
  --precision P      fp32 (default) or bf16: adds ours_bf16 (the same scorer with
                     compute_precision::bf16; in train cases the mixed-precision
                     training step) and gemm_bf16 (a bf16
                     GEMM of the same FLOPs: AMX tiles or VDPBF16PS, the bf16
                     roofline) to every case
  --keep-blas-core   don't re-run with OPENBLAS_CORETYPE when OpenBLAS picked kernels
                     older than the CPU's ISA (the report then warns loudly)
  --max-gb X         skip an implementation whose predicted memory exceeds X GiB (default 8)
  --json             one JSON line per (case, implementation) and per case summary
  --md FILE          also write the Markdown report to FILE
)";
    std::exit(code);
}

options parse(int argc, char** argv)
{
    options o = bb::parse_flags<options>(argc, argv, "bench_vs_reference", usage);
    if (!o.workload_given) {
        o.cases = default_cases();
    } else {
        if (o.tokens.empty()) o.tokens = {100000};
        for (auto t : o.tokens) {
            for (auto l : o.labels) {
                case_cfg c;
                c.tokens = t;
                c.labels = l;
                c.threads = o.threads;
                c.train = o.train;
                o.cases.push_back(c);
            }
        }
    }
    if (o.precision != "fp32" && o.precision != "bf16") {
        std::cerr << "bench_vs_reference: --precision takes fp32 or bf16, not " << o.precision << "\n";
        std::exit(2);
    }
    if (o.precision == "bf16") {
        for (const char* i : {"ours_bf16", "gemm_bf16"})
            if (std::find(o.impls.begin(), o.impls.end(), i) == o.impls.end()) o.impls.push_back(i);
    }
    static const std::set<std::string> known{"ours", "eigen_naive", "torch_naive", "torch_batched", "gemm",
                                             "blas_gemm", "blas_shapes", "ours_bf16", "gemm_bf16"};
    for (const auto& i : o.impls) {
        if (!known.count(i)) {
            std::cerr << "bench_vs_reference: unknown implementation " << i << "\n";
            std::exit(2);
        }
    }
    if (o.reps < 1 || o.threads < 1) usage(2);
    if (!o.lengths_from.empty()) o.treebank = bb::read_treebank_lengths(o.lengths_from);
    o.min_reps = std::min(o.min_reps, o.reps);
    return o;
}

// --------------------------------------------------------------- helpers

/// Which BLAS / OpenMP libraries are mapped into this process.
std::vector<std::string> mapped_math_libraries()
{
    std::ifstream f("/proc/self/maps");
    std::set<std::string> libs;
    for (std::string line; std::getline(f, line);) {
        const auto p = line.find('/');
        if (p == std::string::npos) continue;
        const std::string path = line.substr(p);
        std::string base = path.substr(path.rfind('/') + 1);
        if (base.find("blas") != std::string::npos || base.find("lapack") != std::string::npos ||
            base.find("mkl") != std::string::npos || base.find("omp") != std::string::npos) {
            char buf[4096];
            const char* r = realpath(path.c_str(), buf);
            libs.insert(r ? std::string(r) : path);
        }
    }
    return {libs.begin(), libs.end()};
}

/// The kernels OpenBLAS chose ("Haswell", "Prescott", ...), or "" when the
/// BLAS libtorch loaded is not OpenBLAS.
std::string openblas_core()
{
    using core_fn = char* (*)();
    auto core = reinterpret_cast<core_fn>(dlsym(RTLD_DEFAULT, "openblas_get_corename"));
    return core ? std::string(core()) : std::string();
}

/// The OPENBLAS_CORETYPE that gives this CPU kernels of its own ISA when
/// OpenBLAS picked older ones (Debian's 0.3.21 does not know recent Xeons and
/// falls back to SSE3 "Prescott"), else "".
std::string better_openblas_core(std::string core)
{
    if (core.empty()) return "";
    std::transform(core.begin(), core.end(), core.begin(), [](unsigned char c) { return std::tolower(c); });
    const std::set<std::string> avx512{"skylakex", "cooperlake", "sapphirerapids"};
    const std::set<std::string> avx2{"haswell", "zen", "excavator", "skylakex", "cooperlake", "sapphirerapids"};
    const std::string isa = bb::cpu_isa();
    if (isa == "AVX-512" && !avx512.count(core)) return "SkylakeX";
    if (isa == "AVX2+FMA" && !avx2.count(core)) return "Haswell";
    return "";
}

/// OpenBLAS's pthread build ignores torch::set_num_threads: set its own pool.
std::string set_openblas_threads(int n)
{
    using set_fn = void (*)(int);
    using get_fn = int (*)();
    auto set = reinterpret_cast<set_fn>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads"));
    auto get = reinterpret_cast<get_fn>(dlsym(RTLD_DEFAULT, "openblas_get_num_threads"));
    if (set == nullptr) return "no openblas_set_num_threads symbol (not OpenBLAS)";
    set(n);
    return "openblas_set_num_threads(" + std::to_string(n) + ") -> " + (get ? std::to_string(get()) : "?");
}

// ------------------------------------------------------- implementations

struct impl {
    std::string name;
    std::string description;
    double executed_gflop = 0;
    double predicted_bytes = 0;
    std::function<void()> run;      // timed
    std::function<void()> release;  // untimed: drop outputs
    // After run(), before release(): split k's score (m, l, label) / dX(row, col).
    std::function<float(std::size_t, std::size_t, std::size_t, std::size_t)> score;
    std::function<float(std::size_t, std::size_t)> dx;
    std::vector<double> times, cpu_times;
    std::string skipped;
    double max_abs_diff = -1;
    double max_abs_ref = 0;  // train: the largest |dX| of ours, for scale
};

/// Everything a case shares: the workload and the parameters (ours' scorer
/// holds them; the references get copies).
struct shared_case {
    case_cfg cfg;
    bb::workload w;
    std::vector<std::size_t> off;
    std::vector<xt::xtensor<float, 2>> docs;  // docs[0] is the document
    std::vector<std::vector<int>> lens;
    // What ours is given: the document as one or (--lengths-from) several
    // documents, views of docs[0], with their split lengths and first rows.
    std::vector<Eigen::Map<const RM>> views;
    std::vector<std::vector<int>> view_lens;
    std::vector<std::size_t> view_rows;
    std::unique_ptr<biaffine::biaffine_scorer<float>> scorer;
    std::unique_ptr<biaffine::biaffine_scorer<float>> scorer_bf16;  // the same parameters, compute_precision::bf16
    double true_gflop = 0;
    const float* doc() const { return docs[0].data(); }
};

// ---- ours

impl make_ours(shared_case& c, std::uint64_t budget, std::size_t* effective_threads,
               biaffine::biaffine_scorer<float>& scorer, const std::string& name)
{
    struct state {
        biaffine::score_list<float> Y;
        biaffine::tracked_vector<biaffine::tensor<float, 2>> dX;
    };
    auto st = std::make_shared<state>();
    biaffine::batch_options opts;
    *effective_threads = static_cast<std::size_t>(bb::apply_threads(opts, c.cfg.threads));
    using model_t = decltype(biaffine::with_splits(biaffine::with_minibatch_by_padded_size(
        std::declval<biaffine::biaffine_scorer<float>&>(), biaffine::budget::items(1), opts)));
    auto model = std::make_shared<model_t>(
        biaffine::with_splits(biaffine::with_minibatch_by_padded_size(scorer, biaffine::budget::bytes(budget), opts)));
    impl i;
    i.name = name;
    i.description = name + " (batched, " + fmt("%g", static_cast<double>(budget) / bb::mib) + " MiB budget, " +
                    std::to_string(*effective_threads) + " thread" + (*effective_threads > 1 ? "s" : "") + ")";
    i.executed_gflop = c.true_gflop;
    const double o = static_cast<double>(c.cfg.labels);
    i.predicted_bytes = static_cast<double>(c.w.sum_sq()) * o * 4 + static_cast<double>(budget) * c.cfg.threads;
    if (c.cfg.train) {
        const double N = static_cast<double>(c.cfg.tokens);
        i.predicted_bytes += static_cast<double>(c.w.sum_sq()) * o * 4 + N * (129 + 129 + o * 129) * 4 + N * 256 * 4;
    }
    shared_case* cp = &c;
    biaffine::biaffine_scorer<float>* sc = &scorer;
    i.run = [st, model, cp, sc] {
        if (!cp->cfg.train) {
            st->Y = model->predict(cp->views, cp->view_lens);
            return;
        }
        sc->zero_grad();
        auto fw = model->forward(cp->views, cp->view_lens, mode::train);
        for (auto& y : fw.first) {
            const std::size_t n = y.shape()[0], o = y.dimension() == 3 ? y.shape()[2] : 1;
            for (std::size_t m = 0; m < n; ++m) y.data()[(m * n + bb::gold_head(m)) * o] -= 1.0f;
        }
        auto views = std::remove_reference_t<decltype(*model)>::grad_views(fw.first);
        st->dX = fw.second(biaffine::span<const biaffine::score_view<const float>>(views.data(), views.size()));
        st->Y = std::move(fw.first);
    };
    i.release = [st] {
        st->Y = biaffine::score_list<float>();
        st->dX = {};
    };
    const std::size_t labels = c.cfg.labels;
    i.score = [st, labels](std::size_t k, std::size_t m, std::size_t l, std::size_t lab) {
        const auto& y = st->Y[k];
        const std::size_t n = y.shape()[0];
        return y.data()[(m * n + l) * labels + lab];
    };
    i.dx = [st, cp](std::size_t r, std::size_t col) {
        const std::size_t d = std::size_t(std::upper_bound(cp->view_rows.begin(), cp->view_rows.end(), r) - cp->view_rows.begin()) - 1;
        return st->dX[d](r - cp->view_rows[d], col);
    };
    return i;
}

// ---- plain Eigen, naive padded

impl make_eigen_naive(shared_case& c)
{
    const std::size_t b = c.w.splits.size(), L = c.w.max_len(), n_in = 256, h = 128, hu = 129, hv = 129;
    const std::size_t o = c.cfg.labels;
    struct state {
        RM Wh, Wd;
        Eigen::RowVectorXf bh, bd;
        std::vector<RM> W;  // o x [hu, hv]
        RM X, U, V, T, S, dX;
    };
    auto st = std::make_shared<state>();
    const auto& sc = *c.scorer;
    st->Wh = Eigen::Map<const RM>(sc.head_weight().data(), h, n_in);
    st->Wd = Eigen::Map<const RM>(sc.dependent_weight().data(), h, n_in);
    st->bh = Eigen::Map<const Eigen::RowVectorXf>(sc.head_bias().data(), h);
    st->bd = Eigen::Map<const Eigen::RowVectorXf>(sc.dependent_bias().data(), h);
    for (std::size_t k = 0; k < o; ++k) st->W.push_back(Eigen::Map<const RM>(sc.bilinear_weight().data() + k * hu * hv, hu, hv));
    impl i;
    i.name = "eigen_naive";
    i.description = "plain Eigen, all splits padded to " + std::to_string(L) + " in one batch";
    i.executed_gflop = bb::padded_flops(c.w.d, b, L, c.cfg.train) / 1e9;
    const double rows = static_cast<double>(b * L);
    i.predicted_bytes = rows * (n_in + hu + hv + o * hv + L * o) * 4;
    if (c.cfg.train) i.predicted_bytes += rows * (n_in + hu + hv + o * hv + L * o) * 4;
    shared_case* cp = &c;
    const bool train = c.cfg.train;
    i.run = [st, cp, b, L, hv, o, train] {
        const auto& splits = cp->w.splits;
        const auto& off = cp->off;
        const Eigen::Index BL = static_cast<Eigen::Index>(b * L);
        st->X.resize(BL, n_in);
        for (std::size_t k = 0; k < b; ++k) {
            const std::size_t n = static_cast<std::size_t>(splits[k]);
            st->X.middleRows(k * L, n) = Eigen::Map<const RM>(cp->doc() + off[k] * n_in, n, n_in);
            st->X.middleRows(k * L + n, L - n).setZero();
        }
        auto project = [&](const RM& w, const Eigen::RowVectorXf& bias, RM& out) {
            out.resize(BL, h + 1);
            out.leftCols(h).noalias() = st->X * w.transpose();
            out.leftCols(h) = (out.leftCols(h).rowwise() + bias).cwiseMax(0.0f);
            out.col(h).setOnes();
        };
        project(st->Wh, st->bh, st->U);
        project(st->Wd, st->bd, st->V);
        st->T.resize(BL, o * hv);
        for (std::size_t k = 0; k < o; ++k) st->T.middleCols(k * hv, hv).noalias() = st->U * st->W[k];
        st->S.resize(BL, L * o);
        const float mask = biaffine::mask_value<float>();
        for (std::size_t k = 0; k < b; ++k) {
            Eigen::Map<const RM> tk(st->T.data() + k * L * o * hv, L * o, hv);
            auto sk = st->S.middleRows(k * L, L);
            sk.noalias() = st->V.middleRows(k * L, L) * tk.transpose();
            const std::size_t n = static_cast<std::size_t>(splits[k]);
            sk.rightCols((L - n) * o).array() += mask;
        }
        if (!train) return;
        // Softmax over the last axis (heads when o == 1, labels otherwise).
        const std::size_t group = o == 1 ? L : o;
        for (Eigen::Index r = 0; r < BL; ++r) {
            float* row = st->S.row(r).data();
            for (std::size_t g = 0; g < L * o; g += group) {
                float mx = row[g];
                for (std::size_t q = 1; q < group; ++q) mx = std::max(mx, row[g + q]);
                float sum = 0;
                for (std::size_t q = 0; q < group; ++q) sum += (row[g + q] = std::exp(row[g + q] - mx));
                for (std::size_t q = 0; q < group; ++q) row[g + q] /= sum;
            }
        }
        // dY: the outputs inside each split minus one at the gold head, zero outside.
        RM G = RM::Zero(BL, L * o);
        for (std::size_t k = 0; k < b; ++k) {
            const std::size_t n = static_cast<std::size_t>(splits[k]);
            G.block(k * L, 0, n, n * o) = st->S.block(k * L, 0, n, n * o);
            for (std::size_t m = 0; m < n; ++m) G(k * L + m, bb::gold_head(m) * o) -= 1.0f;
        }
        // Softmax backward, in place into G.
        for (Eigen::Index r = 0; r < BL; ++r) {
            const float* y = st->S.row(r).data();
            float* g = G.row(r).data();
            for (std::size_t q0 = 0; q0 < L * o; q0 += group) {
                float dot = 0;
                for (std::size_t q = 0; q < group; ++q) dot += y[q0 + q] * g[q0 + q];
                for (std::size_t q = 0; q < group; ++q) g[q0 + q] = y[q0 + q] * (g[q0 + q] - dot);
            }
        }
        RM dV(BL, hv), dT(BL, o * hv), dU = RM::Zero(BL, hu);
        for (std::size_t k = 0; k < b; ++k) {
            Eigen::Map<const RM> tk(st->T.data() + k * L * o * hv, L * o, hv);
            Eigen::Map<RM> dtk(dT.data() + k * L * o * hv, L * o, hv);
            const auto gk = G.middleRows(k * L, L);
            dV.middleRows(k * L, L).noalias() = gk * tk;
            dtk.noalias() = gk.transpose() * st->V.middleRows(k * L, L);
        }
        std::vector<RM> dW(o, RM::Zero(hu, hv));
        for (std::size_t k = 0; k < o; ++k) {
            dU.noalias() += dT.middleCols(k * hv, hv) * st->W[k].transpose();
            dW[k].noalias() += st->U.transpose() * dT.middleCols(k * hv, hv);
        }
        RM dzu = (st->U.leftCols(h).array() > 0.0f).select(dU.leftCols(h), 0.0f);
        RM dzv = (st->V.leftCols(h).array() > 0.0f).select(dV.leftCols(h), 0.0f);
        RM dWh = dzu.transpose() * st->X;
        RM dWd = dzv.transpose() * st->X;
        Eigen::RowVectorXf dbh = dzu.colwise().sum(), dbd = dzv.colwise().sum();
        RM dXp = dzu * st->Wh;
        dXp.noalias() += dzv * st->Wd;
        st->dX.resize(static_cast<Eigen::Index>(cp->cfg.tokens), n_in);
        for (std::size_t k = 0; k < b; ++k) {
            st->dX.middleRows(off[k], splits[k]) = dXp.middleRows(k * L, splits[k]);
        }
    };
    i.release = [st] {
        st->X.resize(0, 0);
        st->U.resize(0, 0);
        st->V.resize(0, 0);
        st->T.resize(0, 0);
        st->S.resize(0, 0);
        st->dX.resize(0, 0);
    };
    i.score = [st, L, o](std::size_t k, std::size_t m, std::size_t l, std::size_t lab) {
        return st->S(static_cast<Eigen::Index>(k * L + m), static_cast<Eigen::Index>(l * o + lab));
    };
    i.dx = [st](std::size_t r, std::size_t col) { return st->dX(r, col); };
    return i;
}

// ---- libtorch reference

struct torch_params {
    torch::Tensor Wh, bh, Wd, bd, W;
};

/// The reference module's forward on one padded batch `x [b, L, n_in]`.
torch::Tensor torch_forward(const torch_params& p, const torch::Tensor& x, const torch::Tensor& lengths,
                            std::size_t labels, bool train)
{
    const auto b = x.size(0), L = x.size(1);
    auto head = torch::relu(torch::linear(x, p.Wh, p.bh));
    auto dep = torch::relu(torch::linear(x, p.Wd, p.bd));
    auto ones = torch::ones({b, L, 1}, x.options());
    auto u = torch::cat({head, ones}, -1);
    auto v = torch::cat({dep, ones}, -1);
    auto inter = torch::einsum("bli,oij->bloj", {u, p.W});       // [b, L, o, hv]
    auto logits = torch::einsum("bmj,bloj->bmlo", {v, inter});    // [b, L, L, o]
    // The broadcast mask of the reference: head columns past the length.
    auto token_mask = torch::arange(L).unsqueeze(0) < lengths.unsqueeze(1);  // [b, L]
    auto logits_mask = (token_mask.to(torch::kFloat) - 1.0f) * 10000.0f;
    logits = logits + logits_mask.view({b, 1, L, 1});
    if (labels == 1) logits = logits.squeeze(-1);
    if (train) logits = logits.softmax(-1);
    return logits;
}

impl make_torch(shared_case& c, bool batched, std::uint64_t ref_items)
{
    const std::size_t n_in = 256, o = c.cfg.labels;
    const bool train = c.cfg.train;
    auto p = std::make_shared<torch_params>();
    const auto& sc = *c.scorer;
    auto copy = [](const float* d, std::vector<int64_t> shape) {
        return torch::from_blob(const_cast<float*>(d), shape, torch::kFloat).clone();
    };
    p->Wh = copy(sc.head_weight().data(), {128, 256});
    p->bh = copy(sc.head_bias().data(), {128});
    p->Wd = copy(sc.dependent_weight().data(), {128, 256});
    p->bd = copy(sc.dependent_bias().data(), {128});
    p->W = copy(sc.bilinear_weight().data(), {static_cast<int64_t>(o), 129, 129});
    if (train) {
        for (auto* t : {&p->Wh, &p->bh, &p->Wd, &p->bd, &p->W}) t->set_requires_grad(true);
    }
    // The batches: spaCy's rule, or everything at once.
    std::vector<std::vector<std::size_t>> batches;
    if (batched) {
        std::vector<std::size_t> lengths(c.w.splits.begin(), c.w.splits.end());
        batches = biaffine::minibatch_by_padded_size(lengths, ref_items, 256);
    } else {
        batches.emplace_back(c.w.splits.size());
        for (std::size_t k = 0; k < c.w.splits.size(); ++k) batches[0][k] = k;
    }
    struct state {
        std::vector<torch::Tensor> out;  // per split [n, n(, o)] (batched) or the one padded batch
        std::vector<std::pair<std::size_t, std::size_t>> where;  // split -> (batch, row in batch)
        std::vector<std::size_t> batch_len;
        torch::Tensor dX;  // [tokens, n_in]
    };
    auto st = std::make_shared<state>();
    st->where.resize(c.w.splits.size());
    for (std::size_t bi = 0; bi < batches.size(); ++bi) {
        std::size_t L = 0;
        for (std::size_t j = 0; j < batches[bi].size(); ++j) {
            st->where[batches[bi][j]] = {bi, j};
            L = std::max(L, static_cast<std::size_t>(c.w.splits[batches[bi][j]]));
        }
        st->batch_len.push_back(L);
    }
    impl i;
    i.name = batched ? "torch_batched" : "torch_naive";
    i.description = batched ? "libtorch reference, spaCy rule (" + std::to_string(ref_items) + " padded items, " +
                                  std::to_string(batches.size()) + " batches)"
                            : "libtorch reference, all splits padded to " + std::to_string(c.w.max_len()) +
                                  " in one batch";
    i.executed_gflop = bb::batched_padded_flops(c.w.d, c.w.splits, batches, train) / 1e9;
    {
        // Largest batch: x, u, v, inter [b, L, o, hv], logits (x2 for the mask add / softmax).
        double worst = 0, all = 0;
        for (std::size_t bi = 0; bi < batches.size(); ++bi) {
            const double rows = static_cast<double>(batches[bi].size() * st->batch_len[bi]);
            const double bytes = rows * (n_in + 129 + 129 + o * 129 + 2.0 * st->batch_len[bi] * o) * 4;
            worst = std::max(worst, bytes);
            all += bytes;
        }
        i.predicted_bytes = train ? all * 1.5 : worst + static_cast<double>(c.w.sum_sq()) * o * 4;
    }
    shared_case* cp = &c;
    i.run = [st, p, cp, batches, batched, o, train] {
        const auto& splits = cp->w.splits;
        const auto& off = cp->off;
        std::optional<torch::NoGradGuard> no_grad;
        if (!train) no_grad.emplace();
        if (train) {
            for (auto* t : {&p->Wh, &p->bh, &p->Wd, &p->bd, &p->W}) t->mutable_grad() = torch::Tensor();
            st->dX = torch::zeros({static_cast<int64_t>(cp->cfg.tokens), static_cast<int64_t>(n_in)});
        }
        st->out.assign(batched ? splits.size() : 1, torch::Tensor());
        std::vector<torch::Tensor> xs, ys;  // train: kept until backward
        for (std::size_t bi = 0; bi < batches.size(); ++bi) {
            const auto& items = batches[bi];
            const std::size_t L = st->batch_len[bi], nb = items.size();
            // Pad the batch (zeros past each length).
            torch::Tensor x = torch::zeros({static_cast<int64_t>(nb), static_cast<int64_t>(L), static_cast<int64_t>(n_in)});
            torch::Tensor lengths = torch::empty({static_cast<int64_t>(nb)}, torch::kLong);
            float* xd = x.data_ptr<float>();
            for (std::size_t j = 0; j < nb; ++j) {
                const std::size_t k = items[j], n = static_cast<std::size_t>(splits[k]);
                std::memcpy(xd + j * L * n_in, cp->doc() + off[k] * n_in, n * n_in * sizeof(float));
                lengths.data_ptr<int64_t>()[j] = static_cast<int64_t>(n);
            }
            if (train) x.set_requires_grad(true);
            torch::Tensor y = torch_forward(*p, x, lengths, o, train);
            if (batched) {
                // Unpad in two dimensions: one [n, n(, o)] tensor per split.
                torch::NoGradGuard g;
                for (std::size_t j = 0; j < nb; ++j) {
                    const int64_t n = splits[items[j]];
                    st->out[items[j]] = y[static_cast<int64_t>(j)].narrow(0, 0, n).narrow(1, 0, n).clone();
                }
            } else {
                st->out[0] = train ? y.detach() : y;
            }
            if (train) {
                xs.push_back(x);
                ys.push_back(y);
            }
        }
        if (!train) return;
        // Gradients in place on the outputs, padded back per batch, backward per batch.
        for (std::size_t bi = 0; bi < batches.size(); ++bi) {
            const auto& items = batches[bi];
            const std::size_t L = st->batch_len[bi], nb = items.size();
            torch::Tensor grad;
            if (batched) {
                grad = torch::zeros_like(ys[bi]);
                for (std::size_t j = 0; j < nb; ++j) {
                    const std::size_t k = items[j], n = static_cast<std::size_t>(splits[k]);
                    float* g = st->out[k].data_ptr<float>();
                    for (std::size_t m = 0; m < n; ++m) g[(m * n + bb::gold_head(m)) * o] -= 1.0f;
                    grad[static_cast<int64_t>(j)].narrow(0, 0, static_cast<int64_t>(n)).narrow(1, 0, static_cast<int64_t>(n)).copy_(st->out[k]);
                }
            } else {
                grad = torch::zeros_like(ys[bi]);
                float* g = grad.data_ptr<float>();
                const float* y = st->out[0].data_ptr<float>();
                for (std::size_t j = 0; j < nb; ++j) {
                    const std::size_t n = static_cast<std::size_t>(splits[items[j]]);
                    for (std::size_t m = 0; m < n; ++m) {
                        const std::size_t base = (j * L + m) * L * o;
                        std::copy(y + base, y + base + n * o, g + base);
                        g[base + bb::gold_head(m) * o] -= 1.0f;
                    }
                }
            }
            torch::autograd::backward({ys[bi]}, {grad});
            const float* gx = xs[bi].grad().data_ptr<float>();
            float* dX = st->dX.data_ptr<float>();
            for (std::size_t j = 0; j < nb; ++j) {
                const std::size_t k = items[j], n = static_cast<std::size_t>(splits[k]);
                std::memcpy(dX + off[k] * n_in, gx + j * L * n_in, n * n_in * sizeof(float));
            }
        }
    };
    i.release = [st] {
        st->out.clear();
        st->dX = torch::Tensor();
    };
    i.score = [st, batched, o, train](std::size_t k, std::size_t m, std::size_t l, std::size_t lab) {
        if (batched) {
            const auto& t = st->out[k];
            const std::size_t n = static_cast<std::size_t>(t.size(0));
            return t.data_ptr<float>()[(m * n + l) * o + lab];
        }
        (void)train;
        const auto& t = st->out[0];
        const std::size_t L = static_cast<std::size_t>(t.size(1));
        return t.data_ptr<float>()[((k * L + m) * L + l) * o + lab];
    };
    i.dx = [st](std::size_t r, std::size_t col) { return st->dX.data_ptr<float>()[r * 256 + col]; };
    return i;
}

// ---- roofline

impl make_gemm(const shared_case& c, int threads)
{
    const Eigen::Index K = 1024, N = 1024;
    const double flops = c.true_gflop * 1e9;
    const Eigen::Index M = std::max<Eigen::Index>(256, static_cast<Eigen::Index>(flops / (2.0 * K * N)));
    struct state {
        RM A, B, C;
    };
    auto st = std::make_shared<state>();
    st->A = RM::Random(M, K);
    st->B = RM::Random(K, N);
    st->C = RM::Zero(M, N);
    impl i;
    i.name = "gemm";
    i.description = "Eigen GEMM [" + std::to_string(M) + ", 1024] x [1024, 1024] (same FLOPs, " +
                    std::to_string(threads) + " thread" + (threads > 1 ? "s" : "") + ")";
    i.executed_gflop = 2.0 * static_cast<double>(M) * K * N / 1e9;
    i.predicted_bytes = static_cast<double>(M) * (K + N) * 4;
    i.run = [st, M, threads] {
        auto part = [&](int t) {
            const Eigen::Index r0 = M * t / threads, r1 = M * (t + 1) / threads;
            st->C.middleRows(r0, r1 - r0).noalias() = st->A.middleRows(r0, r1 - r0) * st->B;
        };
        std::vector<std::thread> pool;
        for (int t = 1; t < threads; ++t) pool.emplace_back(part, t);
        part(0);
        for (auto& th : pool) th.join();
    };
    i.release = [] {};
    return i;
}

/// The same FLOPs as a bf16 GEMM [M, 1024] x [1024, 1024] -> fp32 on this
/// library's bf16 kernels (AMX tiles where the build and Linux allow them,
/// else VDPBF16PS): the bf16 roofline ours_bf16 is held to.
impl make_gemm_bf16(const shared_case& c, int threads)
{
    impl i;
    i.name = "gemm_bf16";
#if BIAFFINE_DETAIL_BF16_GEMM
    namespace bd = biaffine::detail;
    constexpr std::size_t K = 1024, N = 1024;
    constexpr std::size_t slack = 32;  // AMX reads whole 32-row blocks of A
    const double flops = c.true_gflop * 1e9;
    const std::size_t M = std::max<std::size_t>(256, static_cast<std::size_t>(flops / (2.0 * K * N)));
    struct state {
        biaffine::tracked_vector<biaffine::bfloat16> A, B;
        std::vector<float> C;
    };
    auto st = std::make_shared<state>();
    const RM a = RM::Random(static_cast<Eigen::Index>(M + slack), K), b = RM::Random(K, N);
    st->A.resize(a.size());
    for (Eigen::Index e = 0; e < a.size(); ++e) st->A[static_cast<std::size_t>(e)] = biaffine::bfloat16(a.data()[e]);
    st->B.resize(bd::bf16_gemm_packed_size(K, N, 32));
    bd::bf16_gemm_pack_b(b.data(), static_cast<std::ptrdiff_t>(N), 1, K, N, st->B.data(), 32);
    st->C.resize(M * N);
#if BIAFFINE_DETAIL_AMX_BF16
    const bool amx = bd::amx_usable();
#else
    const bool amx = false;
#endif
    i.description = std::string(amx ? "AMX" : "VDPBF16PS") + " bf16 GEMM [" + std::to_string(M) +
                    ", 1024] x [1024, 1024] -> fp32 (same FLOPs, " + std::to_string(threads) + " thread" +
                    (threads > 1 ? "s" : "") + ")";
    i.executed_gflop = 2.0 * static_cast<double>(M) * K * N / 1e9;
    i.predicted_bytes = static_cast<double>(M) * (K + 2 * N) * 2;
    i.run = [st, M, threads, amx] {
        auto part = [&](int t) {
            const std::size_t r0 = M * static_cast<std::size_t>(t) / static_cast<std::size_t>(threads),
                              r1 = M * static_cast<std::size_t>(t + 1) / static_cast<std::size_t>(threads);
            const biaffine::bfloat16* a = st->A.data() + r0 * K;
            float* cc = st->C.data() + r0 * N;
#if BIAFFINE_DETAIL_AMX_BF16
            if (amx) {
                bd::amx_gemm(a, K, r1 - r0, K, st->B.data(), N, {}, false, cc, N);
                return;
            }
#endif
            (void)amx;
            bd::bf16_gemm(a, K, r1 - r0, K, st->B.data(), N, {}, cc, N);
        };
        std::vector<std::thread> pool;
        for (int t = 1; t < threads; ++t) pool.emplace_back(part, t);
        part(0);
        for (auto& th : pool) th.join();
    };
    i.release = [] {};
#else
    (void)c;
    (void)threads;
    i.description = "bf16 GEMM";
    i.skipped = "not built for AVX512_BF16";
#endif
    return i;
}

/// The same GEMM through libtorch (torch::mm -> the BLAS it loaded): how fast
/// the reference's own matrix products can go on this machine.
impl make_blas_gemm(const shared_case& c)
{
    const int64_t K = 1024, N = 1024;
    const double flops = c.true_gflop * 1e9;
    const int64_t M = std::max<int64_t>(256, static_cast<int64_t>(flops / (2.0 * K * N)));
    struct state {
        torch::Tensor A, B, C;
    };
    auto st = std::make_shared<state>();
    st->A = torch::rand({M, K}) - 0.5;
    st->B = torch::rand({K, N}) - 0.5;
    st->C = torch::empty({M, N});
    impl i;
    i.name = "blas_gemm";
    i.description = "libtorch mm (BLAS) [" + std::to_string(M) + ", 1024] x [1024, 1024] (same FLOPs)";
    i.executed_gflop = 2.0 * static_cast<double>(M) * K * N / 1e9;
    i.predicted_bytes = static_cast<double>(M) * (K + N) * 4;
    i.run = [st] {
        torch::NoGradGuard g;
        torch::mm_out(st->C, st->A, st->B);
    };
    i.release = [] {};
    return i;
}

/// libtorch's mm on the batch-wide products of ours, at ours' shapes (see
/// the file comment): what the BLAS makes of K = 256 and K = 129.
impl make_blas_shapes(const shared_case& c)
{
    const int64_t N = static_cast<int64_t>(c.cfg.tokens), n_in = 256, h = 128, hu = 129, hv = 129;
    const int64_t o = static_cast<int64_t>(c.cfg.labels);
    // Rows of T per chunk: 16 MiB of T, as a batch of ours holds at most.
    const int64_t chunk = std::max<int64_t>(1, std::min<int64_t>(N, (int64_t(16) << 20) / (o * hv * 4)));
    const bool train = c.cfg.train;
    struct state {
        torch::Tensor X, Wh, Wd, U, V, W, T, dT, dU, dW, dWh, dWd, dX;
    };
    auto st = std::make_shared<state>();
    auto rnd = [](std::initializer_list<int64_t> shape) { return torch::rand(shape) - 0.5; };
    st->X = rnd({N, n_in});
    st->Wh = rnd({h, n_in});
    st->Wd = rnd({h, n_in});
    st->U = rnd({N, hu});
    st->V = torch::empty({N, h});
    st->W = rnd({hu, o * hv});
    st->T = torch::empty({chunk, o * hv});
    if (train) {
        st->dT = rnd({chunk, o * hv});
        st->dU = torch::empty({chunk, hu});
        st->dW = torch::empty({hu, o * hv});
        st->dWh = torch::empty({h, n_in});
        st->dWd = torch::empty({h, n_in});
        st->dX = torch::empty({N, n_in});
    }
    const double proj = 2.0 * 2.0 * static_cast<double>(N) * n_in * h;
    const double left = 2.0 * static_cast<double>(N) * hu * static_cast<double>(o * hv);
    impl i;
    i.name = "blas_shapes";
    i.description = "libtorch mm (BLAS) on ours' batch-wide products and shapes ([N, 256] x [256, 128] x 2, "
                    "[" + std::to_string(chunk) + ", 129] x [129, " + std::to_string(o * hv) + "] chunks" +
                    (train ? ", and their backward" : "") + ")";
    i.executed_gflop = (train ? 3.0 : 1.0) * (proj + left) / 1e9;
    i.predicted_bytes = static_cast<double>(N) * (n_in * (train ? 2 : 1) + hu + h) * 4 +
                        static_cast<double>(chunk) * o * hv * 4 * (train ? 2 : 1);
    i.run = [st, N, chunk, train] {
        torch::NoGradGuard g;
        auto Uh = st->U.narrow(1, 0, st->Wh.size(0));
        torch::mm_out(Uh, st->X, st->Wh.t());
        torch::mm_out(st->V, st->X, st->Wd.t());
        for (int64_t r0 = 0; r0 < N; r0 += chunk) {
            const int64_t rn = std::min(chunk, N - r0);
            auto Ur = st->U.narrow(0, r0, rn);
            auto Tr = st->T.narrow(0, 0, rn);
            torch::mm_out(Tr, Ur, st->W);
            if (!train) continue;
            auto dTr = st->dT.narrow(0, 0, rn);
            auto dUr = st->dU.narrow(0, 0, rn);
            torch::mm_out(dUr, dTr, st->W.t());          // dU = dT W'^T
            st->dW.addmm_(Ur.t(), dTr);                   // dW += U^T dT
        }
        if (!train) return;
        torch::mm_out(st->dWh, Uh.t(), st->X);           // dWh = dZu^T X
        torch::mm_out(st->dWd, st->V.t(), st->X);        // dWd = dZv^T X
        torch::mm_out(st->dX, Uh, st->Wh);               // dX = dZu Wh + dZv Wd
        st->dX.addmm_(st->V, st->Wd);
    };
    i.release = [] {};
    return i;
}

// ----------------------------------------------------------------- driver

struct case_result {
    std::string title;
    std::vector<impl> impls;
    double ours_s = 0, ours_gflops = 0;
};

// A warm-up run longer than this counts as the first repetition.
constexpr double slow_run_seconds = 5.0;

std::string run_case(const options& opt, case_cfg cfg, std::ostream& log, bool json)
{
    shared_case c;
    c.cfg = cfg;
    c.w = bb::make_workload(cfg.tokens, cfg.labels);
    std::vector<std::size_t> doc_splits{c.w.splits.size()};
    if (!opt.lengths_from.empty()) c.w.splits = bb::treebank_split_lengths(opt.treebank, cfg.tokens, doc_splits);
    c.off = c.w.offsets();
    c.docs.push_back(std::move(c.w.doc));
    c.lens = {c.w.splits};
    for (std::size_t d = 0, k = 0; d < doc_splits.size(); k += doc_splits[d++]) {
        const std::size_t rows = c.off[k + doc_splits[d]] - c.off[k];
        c.view_rows.push_back(c.off[k]);
        c.views.emplace_back(c.doc() + c.off[k] * c.w.d.n_in, Eigen::Index(rows), Eigen::Index(c.w.d.n_in));
        c.view_lens.emplace_back(c.w.splits.begin() + std::ptrdiff_t(k), c.w.splits.begin() + std::ptrdiff_t(k + doc_splits[d]));
    }
    c.scorer = std::make_unique<biaffine::biaffine_scorer<float>>(bb::scorer_config_for(cfg.labels));
    {
        biaffine::scorer_config c16 = bb::scorer_config_for(cfg.labels);  // same seed: the same parameters
        c16.precision = biaffine::compute_precision::bf16;
        c.scorer_bf16 = std::make_unique<biaffine::biaffine_scorer<float>>(c16);
    }
    c.true_gflop = bb::true_flops(c.w.d, c.w.splits, cfg.train) / 1e9;

    torch::set_num_threads(cfg.threads);
    Eigen::setNbThreads(cfg.threads);
    const std::string blas_threads = set_openblas_threads(opt.blas_threads > 0 ? opt.blas_threads : cfg.threads);

    const std::uint64_t budget = static_cast<std::uint64_t>(opt.budget_mb * bb::mib);
    std::size_t ours_threads = 1;
    std::vector<impl> impls;
    for (const auto& name : opt.impls) {
        if (name == "ours") impls.push_back(make_ours(c, budget, &ours_threads, *c.scorer, "ours"));
        if (name == "ours_bf16") {
            std::size_t t = 1;
            impls.push_back(make_ours(c, budget, &t, *c.scorer_bf16, "ours_bf16"));
        }
        if (name == "gemm_bf16") impls.push_back(make_gemm_bf16(c, cfg.threads));
        if (name == "eigen_naive") impls.push_back(make_eigen_naive(c));
        if (name == "torch_naive") impls.push_back(make_torch(c, false, opt.ref_items));
        if (name == "torch_batched") impls.push_back(make_torch(c, true, opt.ref_items));
        if (name == "gemm") impls.push_back(make_gemm(c, cfg.threads));
        if (name == "blas_gemm") impls.push_back(make_blas_gemm(c));
        if (name == "blas_shapes") impls.push_back(make_blas_shapes(c));
    }
    const double input = static_cast<double>(cfg.tokens) * 256 * 4;
    for (auto& i : impls) {
        if (i.predicted_bytes + input > opt.max_gb * bb::gib) {
            i.skipped = bb::over_max_gb(i.predicted_bytes + input, opt.max_gb);
        }
    }
    std::ostringstream title;
    title << tokens_label(cfg.tokens) << " tokens, o=" << cfg.labels << ", " << (cfg.train ? "train (fwd+bwd)" : "inference")
          << ", " << cfg.threads << " thread" << (cfg.threads > 1 ? "s" : "");
    if (!opt.lengths_from.empty())
        title << ", lengths from " << opt.lengths_from.front().substr(opt.lengths_from.front().find_last_of('/') + 1) << (opt.lengths_from.size() > 1 ? " etc." : "") << " ("
              << c.views.size() << " documents)";
    log << "bench_vs_reference: " << title.str() << " (" << c.w.splits.size() << " splits, max " << c.w.max_len()
        << ", " << fmt("%.1f", c.true_gflop) << " GFLOP)\n";

    // Warm-up run of each, keeping outputs to check them against ours.
    impl* ours = nullptr;
    for (auto& i : impls) {
        if (i.name == "ours" && i.skipped.empty()) ours = &i;
    }
    if (ours) {
        log << "  warm-up ours ..." << std::flush;
        const double t0 = bb::now_seconds();
        ours->run();
        log << fmt(" %.3f s\n", bb::now_seconds() - t0);
    }
    for (auto& i : impls) {
        if (!i.skipped.empty() || &i == ours) continue;
        log << "  warm-up " << i.name << " ..." << std::flush;
        const double c0 = bb::cpu_seconds();
        const double t0 = bb::now_seconds();
        i.run();
        const double wt = bb::now_seconds() - t0;
        log << fmt(" %.3f s", wt);
        if (wt > slow_run_seconds) {
            // Warm-up effects are noise at this length: count it as repetition 1.
            i.times.push_back(wt);
            i.cpu_times.push_back(bb::cpu_seconds() - c0);
            log << " (counted as repetition 1)";
        }
        if (ours && i.score) {
            double diff = 0;
            const std::size_t ns = c.w.splits.size(), stride = std::max<std::size_t>(1, ns / 400);
            if (!cfg.train) {
                for (std::size_t k = 0; k < ns; k += stride) {
                    const std::size_t n = static_cast<std::size_t>(c.w.splits[k]);
                    for (std::size_t m = 0; m < n; ++m)
                        for (std::size_t l = 0; l < n; ++l)
                            for (std::size_t lab = 0; lab < cfg.labels; ++lab)
                                diff = std::max(diff, double(std::abs(i.score(k, m, l, lab) - ours->score(k, m, l, lab))));
                }
            } else {
                const std::size_t rstride = std::max<std::size_t>(1, cfg.tokens / 4000);
                double scale = 0;
                for (std::size_t r = 0; r < cfg.tokens; r += rstride)
                    for (std::size_t col = 0; col < 256; ++col) {
                        diff = std::max(diff, double(std::abs(i.dx(r, col) - ours->dx(r, col))));
                        scale = std::max(scale, double(std::abs(ours->dx(r, col))));
                    }
                i.max_abs_ref = scale;
            }
            i.max_abs_diff = diff;
            log << fmt(", max |diff| vs ours %.2g", diff);
        }
        log << "\n";
        i.release();
    }
    if (ours) ours->release();

    // Interleaved repetitions, rotating the order.
    const double case_start = bb::now_seconds();
    for (int rep = 0; rep < opt.reps; ++rep) {
        if (rep >= opt.min_reps && bb::now_seconds() - case_start > opt.case_seconds) break;
        for (std::size_t j = 0; j < impls.size(); ++j) {
            impl& i = impls[(j + static_cast<std::size_t>(rep)) % impls.size()];
            if (!i.skipped.empty() || i.times.size() > static_cast<std::size_t>(rep)) continue;
            const double c0 = bb::cpu_seconds();
            const double t0 = bb::now_seconds();
            i.run();
            i.times.push_back(bb::now_seconds() - t0);
            i.cpu_times.push_back(bb::cpu_seconds() - c0);
            i.release();
        }
        log << "  repetition " << rep + 1 << " done\n";
    }

    // Report.
    auto find = [&](const std::string& n) -> impl* {
        for (auto& i : impls) {
            if (i.name == n && i.skipped.empty() && !i.times.empty()) return &i;
        }
        return nullptr;
    };
    impl* o = find("ours");
    impl* tb = find("torch_batched");
    impl* tn = find("torch_naive");
    impl* en = find("eigen_naive");
    impl* g = find("gemm");
    const double ours_med = o ? bb::median(o->times) : 0;
    std::ostringstream md;
    md << "### " << title.str() << "\n\n"
       << c.w.splits.size() << " splits (max length " << c.w.max_len() << "), " << fmt("%.2f", c.true_gflop)
       << " true GFLOP; up to " << impls.front().times.size()
       << " interleaved repetitions, medians (a warm-up run first; for runs over "
       << fmt("%g", slow_run_seconds) << " s the warm-up counts as a repetition). " << blas_threads
       << ".\n\n"
       << "| implementation | median s | min s | median CPU s | GFLOP/s (true work) | executed GFLOP | time / ours | max abs diff vs ours |\n"
       << "|---|---:|---:|---:|---:|---:|---:|---:|\n";
    for (auto& i : impls) {
        md << "| " << i.description << " | ";
        if (!i.skipped.empty()) {
            md << i.skipped << " | | | | | | |\n";
            continue;
        }
        const double med = bb::median(i.times);
        const double mn = *std::min_element(i.times.begin(), i.times.end());
        const bool is_gemm = i.name == "gemm" || i.name == "blas_gemm" || i.name == "blas_shapes";
        const double gflops = is_gemm ? i.executed_gflop / med : c.true_gflop / med;
        md << fmt("%.3f", med) << " | " << fmt("%.3f", mn) << " | " << fmt("%.3f", bb::median(i.cpu_times)) << " | "
           << fmt("%.1f", gflops) << " | "
           << fmt("%.1f", i.executed_gflop) << " | " << (o ? fmt("%.2fx", med / ours_med) : "-") << " | "
           << (i.max_abs_diff < 0 ? std::string("-")
                                  : fmt("%.2g", i.max_abs_diff) +
                                        (i.max_abs_ref > 0 ? " (max abs dX " + fmt("%.2g", i.max_abs_ref) + ")" : ""))
           << " |\n";
        if (json) {
            bb::json_line j;
            j.add("case", title.str()).add("impl", i.name).add("tokens", static_cast<std::uint64_t>(cfg.tokens))
                .add("labels", static_cast<std::uint64_t>(cfg.labels)).add("train", cfg.train)
                .add("threads", i.name == "ours" || i.name == "ours_bf16" ? static_cast<int>(ours_threads) : cfg.threads)
                .add("threads_requested", cfg.threads)
                .add("median_seconds", med).add("min_seconds", mn).add("median_cpu_seconds", bb::median(i.cpu_times)).add("reps", static_cast<std::uint64_t>(i.times.size()))
                .add("gflop", c.true_gflop).add("executed_gflop", i.executed_gflop).add("gflops", gflops)
                .add("max_abs_diff_vs_ours", i.max_abs_diff);
            std::cout << j.str() << std::endl;
        }
    }
    md << "\n";
    bb::json_line summary;
    summary.add("case", title.str()).add("summary", true);
    if (o) {
        const double ours_gflops = c.true_gflop / ours_med;
        if (tb) {
            const double r = bb::median(tb->times) / ours_med;
            const double rc = bb::median(tb->cpu_times) / bb::median(o->cpu_times);
            summary.add("speedup_vs_torch_batched_cpu", rc);
            md << "- libtorch batched (spaCy rule) / ours: **" << fmt("%.2fx", r) << "** wall, " << fmt("%.2fx", rc)
               << " CPU time"
               << (cfg.min_speedup > 0 ? (r >= cfg.min_speedup ? " (target >= " : " (MISSED target >= ") +
                                             fmt("%gx", cfg.min_speedup) + ")"
                                       : "")
               << "\n";
            summary.add("speedup_vs_torch_batched", r);
            if (cfg.min_speedup > 0 && r < cfg.min_speedup) {
                // What the target asks of ours, in GFLOP/s of true work.
                const double need = c.true_gflop / (bb::median(tb->times) / cfg.min_speedup);
                md << "  - the target needs ours at " << fmt("%.1f", need) << " GFLOP/s";
                if (g) md << " = " << fmt("%.2f", need / (g->executed_gflop / bb::median(g->times))) << "x the Eigen GEMM";
                if (impl* bg = find("blas_gemm")) {
                    md << ", " << fmt("%.2f", need / (bg->executed_gflop / bb::median(bg->times))) << "x the BLAS GEMM";
                }
                md << " (libtorch batched executes " << fmt("%.1f", tb->executed_gflop) << " GFLOP at "
                   << fmt("%.1f", tb->executed_gflop / bb::median(tb->times)) << " GFLOP/s)\n";
                summary.add("needed_gflops", need);
            }
        }
        if (tn) {
            const double r = bb::median(tn->times) / ours_med;
            md << "- libtorch naive / ours: " << fmt("%.2fx", r) << "\n";
            summary.add("speedup_vs_torch_naive", r);
        }
        if (en) {
            const double r = bb::median(en->times) / ours_med;
            md << "- Eigen naive / ours: " << fmt("%.2fx", r) << "\n";
            summary.add("speedup_vs_eigen_naive", r);
        }
        // The roofline is the faster GEMM of the run for the same FLOPs:
        // Eigen's, or the BLAS one (libtorch's mm, on OpenBLAS's right kernels
        // unless --keep-blas-core said otherwise).
        double roof = 0, roof_cpu = 0;  // GFLOP/s by wall time, and per CPU second
        const char* roof_name = "";
        const auto per_cpu_second = [](const impl& i) { return i.executed_gflop / bb::median(i.cpu_times); };
        if (g) {
            const double gg = g->executed_gflop / bb::median(g->times);
            roof_cpu = per_cpu_second(*g);
            md << "- Eigen GEMM: " << fmt("%.1f", gg) << " GFLOP/s; ours = " << fmt("%.0f%%", 100 * ours_gflops / gg)
               << " of it\n";
            summary.add("fraction_of_gemm", ours_gflops / gg).add("gemm_gflops", gg);
            roof = gg, roof_name = "Eigen GEMM";
        }
        if (impl* bg = find("blas_gemm")) {
            const double bgg = bg->executed_gflop / bb::median(bg->times);
            md << "- BLAS GEMM (libtorch mm): " << fmt("%.1f", bgg) << " GFLOP/s; ours = "
               << fmt("%.0f%%", 100 * ours_gflops / bgg) << " of it\n";
            summary.add("blas_gemm_gflops", bgg);
            if (bgg > roof) roof = bgg, roof_name = "BLAS GEMM";
            roof_cpu = std::max(roof_cpu, per_cpu_second(*bg));
        }
        if (roof > 0) {
            const double r = ours_gflops / roof;
            md << "- ours at " << fmt("%.1f", ours_gflops) << " GFLOP/s = **" << fmt("%.0f%%", 100 * r)
               << "** of the roofline (the faster GEMM of this run: " << roof_name << ", " << fmt("%.1f", roof)
               << " GFLOP/s)"
               << (cfg.min_roofline > 0 ? (r >= cfg.min_roofline ? " (target >= " : " (MISSED target >= ") +
                                              fmt("%.0f%%)", 100 * cfg.min_roofline)
                                        : "")
               << "\n";
            summary.add("fraction_of_roofline", r).add("roofline_gflops", roof).add("roofline", roof_name);
            // The same by CPU time (what each core delivers, whatever the
            // threads did): ours' true FLOPs per CPU second against the
            // faster GEMM's.
            if (roof_cpu > 0)
                summary.add("fraction_of_roofline_cpu", c.true_gflop / bb::median(o->cpu_times) / roof_cpu);
            // What the BLAS itself reaches on this model's own products: a
            // bound the roofline (K = 1024) does not show.
            if (impl* bs = find("blas_shapes")) {
                const double bsg = bs->executed_gflop / bb::median(bs->times);
                md << "- the BLAS on ours' batch-wide products and shapes (" << fmt("%.0f%%", 100 * bs->executed_gflop / c.true_gflop)
                   << " of ours' FLOPs): " << fmt("%.1f", bsg) << " GFLOP/s = " << fmt("%.0f%%", 100 * bsg / roof)
                   << " of the roofline; ours = " << fmt("%.0f%%", 100 * ours_gflops / bsg) << " of it\n";
                summary.add("blas_shapes_gflops", bsg).add("blas_shapes_fraction_of_roofline", bsg / roof);
            }
        }
        if (impl* o16 = find("ours_bf16")) {
            const double med16 = bb::median(o16->times), g16 = c.true_gflop / med16, r = ours_med / med16;
            // Issue 40: inference >= 1.6x, a mixed-precision training step >= 1.4x.
            const double want = c.cfg.train ? 1.4 : 1.6;
            md << "- ours_bf16: " << fmt("%.3f", med16) << " s, ours / ours_bf16 = **" << fmt("%.2fx", r)
               << "** (target >= " << fmt("%.1fx", want) << (r >= want ? ")" : ", MISSED)") << "; " << fmt("%.1f", g16)
               << " GFLOP/s of true work";
            summary.add("ours_bf16_median_seconds", med16).add("bf16_speedup", r).add("ours_bf16_gflops", g16);
            if (roof > 0) {
                md << " = " << fmt("%.0f%%", 100 * g16 / roof) << " of the fp32 roofline";
                summary.add("ours_bf16_fraction_of_fp32_roofline", g16 / roof);
            }
            if (impl* gb = find("gemm_bf16")) {
                const double gbg = gb->executed_gflop / bb::median(gb->times);
                md << ", " << fmt("%.0f%%", 100 * g16 / gbg) << " of the bf16 roofline (" << gb->description << ": "
                   << fmt("%.1f", gbg) << " GFLOP/s)";
                summary.add("bf16_roofline_gflops", gbg).add("ours_bf16_fraction_of_bf16_roofline", g16 / gbg);
            }
            md << "\n";
        }
        md << "- ours: " << fmt("%.3f", ours_med) << " s wall (median)"
           << (cfg.max_seconds > 0 ? (ours_med <= cfg.max_seconds ? " (target < " : " (MISSED target < ") +
                                         fmt("%g s)", cfg.max_seconds)
                                   : "")
           << "; " << ours_threads << " thread" << (ours_threads > 1 ? "s" : "")
           << (static_cast<int>(ours_threads) != cfg.threads ? " (the library has no thread option)" : "") << "\n\n";
        summary.add("ours_median_seconds", ours_med).add("ours_gflops", ours_gflops);
    }
    if (json) std::cout << summary.str() << std::endl;
    return md.str();
}

}  // namespace

int main(int argc, char** argv)
{
    // libgomp (libtorch's OpenMP) spins idle threads by default; on a 2-core
    // machine next to OpenBLAS's own pool that oversubscribes the cores and
    // slows libtorch several-fold at 2 threads. The policy is read when
    // libgomp loads, so set it and re-execute once (a value already set by
    // the user is kept).
    //
    // Likewise OpenBLAS reads OPENBLAS_CORETYPE when it loads: when it picked
    // kernels older than the CPU's ISA, the reference would be measured on
    // the wrong kernels, so re-execute with the right core (unless the user
    // set OPENBLAS_CORETYPE or passed --keep-blas-core) and say so.
    bool reexec = false;
    if (std::getenv("OMP_WAIT_POLICY") == nullptr) {
        setenv("OMP_WAIT_POLICY", "passive", 1);
        reexec = true;
    }
    bool keep_core = false;
    for (int a = 1; a < argc; ++a) keep_core = keep_core || std::strcmp(argv[a], "--keep-blas-core") == 0;
    const std::string better = better_openblas_core(openblas_core());
    if (!better.empty() && !keep_core && std::getenv("OPENBLAS_CORETYPE") == nullptr) {
        setenv("BIAFFINE_BENCH_OPENBLAS_CORE_WAS", openblas_core().c_str(), 1);
        setenv("OPENBLAS_CORETYPE", better.c_str(), 1);
        reexec = true;
    }
    if (reexec) {
        execv("/proc/self/exe", argv);
        std::perror("bench_vs_reference: re-exec with OMP_WAIT_POLICY / OPENBLAS_CORETYPE failed; continuing");
    }
    try {
        const options opt = parse(argc, argv);
        std::ostream& out = opt.json ? std::cerr : std::cout;
        torch::set_num_interop_threads(1);
        // Touch BLAS once so that lazily loaded libraries show up in the maps.
        (void)torch::mm(torch::ones({64, 64}), torch::ones({64, 64})).sum().item<float>();
        std::ostringstream head;
        head << "## Speed against reference implementations\n\nCPU: " << bb::cpu_model() << " ("
             << std::thread::hardware_concurrency() << " hardware threads; load average at start "
             << bb::load_average() << "). libtorch " << TORCH_VERSION
             << "; math libraries mapped: ";
        const auto libs = mapped_math_libraries();
        for (std::size_t k = 0; k < libs.size(); ++k) head << (k ? ", " : "") << "`" << libs[k] << "`";
        head << ". Eigen " << EIGEN_WORLD_VERSION << "." << EIGEN_MAJOR_VERSION << "." << EIGEN_MINOR_VERSION
             << " (ours and the Eigen baselines; Eigen's own threading is "
#ifdef _OPENMP
             << "OpenMP"
#else
             << "off: no OpenMP"
#endif
             << "). OMP_WAIT_POLICY=" << std::getenv("OMP_WAIT_POLICY")
             << ". Float32, n_in = 256, h = 128; ours uses a " << opt.budget_mb
             << " MiB byte budget, libtorch batched the spaCy rule with " << opt.ref_items
             << " padded items. Times cover document in -> per-split scores out (and, in train, the gradient "
                "built in place and backward to the document).\n\n";
        head << "ISA: the CPU runs " << bb::cpu_isa() << ", this build targets " << bb::build_isa()
             << ". Ours, float: backend " << bb::float_backend() << ".";
        const std::string core = openblas_core();
        const char* was = std::getenv("BIAFFINE_BENCH_OPENBLAS_CORE_WAS");
        if (core.empty()) {
            head << " libtorch's BLAS is not OpenBLAS (no openblas_get_corename).";
        } else {
            head << " libtorch's BLAS: OpenBLAS, " << core << " kernels";
            if (was != nullptr) {
                head << " (**re-run with OPENBLAS_CORETYPE=" << std::getenv("OPENBLAS_CORETYPE")
                     << ": OpenBLAS had picked " << was << " kernels, older than this CPU's ISA**)";
            }
            head << ".";
            const std::string better = better_openblas_core(core);
            if (!better.empty()) {
                // Say why no re-run happened: a core the environment forces
                // (some machines export OPENBLAS_CORETYPE=Haswell) is kept.
                const char* forced = was == nullptr ? std::getenv("OPENBLAS_CORETYPE") : nullptr;
                const std::string why = forced != nullptr ? std::string(" (OPENBLAS_CORETYPE=") + forced +
                                                                " is set in the environment, so it was kept)"
                                                          : std::string();
                head << "\n\n**WARNING: OpenBLAS runs " << core << " kernels on a " << bb::cpu_isa() << " CPU" << why
                     << ": every libtorch figure below is on the wrong kernels and the ratios overstate ours. "
                        "Run without --keep-blas-core and without OPENBLAS_CORETYPE, or with OPENBLAS_CORETYPE="
                     << better << ".**";
                std::cerr << "bench_vs_reference: WARNING: OpenBLAS runs " << core << " kernels on a "
                          << bb::cpu_isa() << " CPU" << why << " (OPENBLAS_CORETYPE=" << better
                          << " would fix it)\n";
            }
        }
        head << "\n\n";
        if (opt.json) {
            bb::json_line j;
            j.add("header", true).add("cpu", bb::cpu_model()).add("cpu_isa", bb::cpu_isa())
                .add("build_isa", bb::build_isa()).add("float_backend", biaffine::detail::compute_backend<float>::name)
                .add("float_operations", biaffine::detail::compute_backend<float>::operations)
                .add("openblas_core", core).add("openblas_core_was", was ? std::string(was) : std::string())
                .add("openblas_coretype", std::getenv("OPENBLAS_CORETYPE") ? std::getenv("OPENBLAS_CORETYPE") : "");
            std::cout << j.str() << std::endl;
        }
        out << head.str() << std::flush;
        std::string report = head.str();
        for (const auto& c : opt.cases) {
            const std::string md = run_case(opt, c, std::cerr, opt.json);
            out << md << std::flush;
            report += md;
        }
        if (!opt.md.empty()) std::ofstream(opt.md) << report;
        return 0;
    } catch (const std::exception& e) {
        std::cerr << "bench_vs_reference: " << e.what() << "\n";
        return 1;
    }
}
