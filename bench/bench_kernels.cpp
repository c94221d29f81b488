// bench_kernels - Google Benchmark micro-benchmarks of the pieces.
//
//   bench_kernels                                  # everything
//   bench_kernels --benchmark_filter=forward       # a subset
//
// Scorer forward / backward by split length (8, 18, 40, 100) and labels (1,
// 50) on a batch of about 2048 tokens of equal-length splits, the padded
// reference path and the pad/unpad layer around it, and the batching rule.
// FLOPS counters use the GEMM FLOP model of bench/workload.hpp. Memory: the
// counting operator new of bench/counting_new.hpp is hooked to Google
// Benchmark's MemoryManager, so every benchmark also reports its allocations
// and peak heap bytes (on 1.7.1 through Stop(Result*); shown with
// --benchmark_format=json). Google Benchmark runs the whole benchmark
// function again for that, so the figures include each benchmark's setup.
#include "counting_new.hpp"  // the one TU of this binary that replaces operator new

#include <benchmark/benchmark.h>

#include <vector>

#include <biaffine/biaffine.hpp>

// The AVX2 micro-kernel is declared where the target has AVX2 + FMA, whether
// or not the scorer uses it (BIAFFINE_NO_GEMM_KERNEL): its benches run then.
#if defined(__AVX2__) && defined(__FMA__)
#include <biaffine/detail/compute/avx2_backend.hpp>
#define BIAFFINE_BENCH_KERNEL 1
#else
#define BIAFFINE_BENCH_KERNEL 0
#endif

#include "workload.hpp"

namespace bb = biaffine_bench;
using biaffine::mode;

namespace {

// ------------------------------------------------------- memory manager

class counting_memory_manager : public benchmark::MemoryManager {
public:
    void Start() override
    {
        bb::heap::reset_peak();
        start_current_ = bb::heap::current();
        start_allocs_ = bb::heap::allocs();
        start_total_ = bb::heap::total();
    }
    // 1.7.1 declares Stop(Result*) pure virtual and routes Stop(Result&) to it.
    void Stop(Result* r) override
    {
        r->num_allocs = bb::heap::allocs() - start_allocs_;
        r->max_bytes_used = bb::heap::peak() - start_current_;
        r->total_allocated_bytes = bb::heap::total() - start_total_;
        r->net_heap_growth = bb::heap::current() - start_current_;
    }

private:
    std::int64_t start_current_ = 0, start_allocs_ = 0, start_total_ = 0;
};

// ------------------------------------------------------------- fixtures

constexpr std::size_t batch_tokens = 2048;

/// A batch of equal-length splits (views into one document).
struct batch {
    std::size_t len, count;
    xt::xtensor<float, 2> doc;
    std::vector<biaffine::seq_view<const float>> items;
    explicit batch(std::size_t l) : len(l), count(std::max<std::size_t>(1, batch_tokens / l))
    {
        doc = bb::make_document(len * count, 256);
        const auto v = biaffine::as_const_view(doc);
        for (std::size_t k = 0; k < count; ++k) items.push_back(v.rows_view(k * len, len));
    }
    double forward_flops(std::size_t labels) const
    {
        bb::dims d;
        d.labels = labels;
        return static_cast<double>(count) * bb::forward_flops(d, static_cast<double>(len));
    }
};

void set_flops(benchmark::State& state, double flops_per_iteration)
{
    state.counters["FLOPS"] =
        benchmark::Counter(flops_per_iteration * static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
}

// ----------------------------------------------------------- benchmarks

// Inference on a batch, inside a workspace sized by the scorer's own cost
// report (what the batching layer does).
void BM_scorer_forward(benchmark::State& state)
{
    const std::size_t len = static_cast<std::size_t>(state.range(0)), labels = static_cast<std::size_t>(state.range(1));
    batch b(len);
    biaffine::biaffine_scorer<float> s(bb::scorer_config_for(labels));
    biaffine::workspace_scope ws(s.cost(b.count, len).scratch);
    for (auto _ : state) {
        auto y = s.predict(b.items);
        benchmark::DoNotOptimize(y.data());
    }
    set_flops(state, b.forward_flops(labels));
    state.counters["splits"] = static_cast<double>(b.count);
}

// Streaming inference: no output allocation, one split's scores at a time.
void BM_scorer_stream(benchmark::State& state)
{
    const std::size_t len = static_cast<std::size_t>(state.range(0)), labels = static_cast<std::size_t>(state.range(1));
    batch b(len);
    biaffine::biaffine_scorer<float> s(bb::scorer_config_for(labels));
    biaffine::workspace_scope ws(s.cost(b.count, len).scratch);
    for (auto _ : state) {
        float acc = 0;
        s.predict_stream(b.items, [&](std::size_t, biaffine::score_view<const float> v) { acc += v.data[0]; });
        benchmark::DoNotOptimize(acc);
    }
    set_flops(state, b.forward_flops(labels));
}

// Backward only (the forward of each iteration is untimed): 2x forward FLOPs.
void BM_scorer_backward(benchmark::State& state)
{
    const std::size_t len = static_cast<std::size_t>(state.range(0)), labels = static_cast<std::size_t>(state.range(1));
    batch b(len);
    biaffine::biaffine_scorer<float> s(bb::scorer_config_for(labels));
    std::vector<xt::xtensor<float, 2>> dx(b.count, xt::xtensor<float, 2>::from_shape({len, 256}));
    std::vector<biaffine::seq_view<float>> dxv;
    for (auto& d : dx) dxv.push_back(biaffine::as_view(d));
    for (auto _ : state) {
        state.PauseTiming();
        auto [y, bp] = s.forward(b.items, mode::train);
        std::vector<biaffine::score_view<const float>> dy;
        for (const auto& t : y) dy.push_back(biaffine::as_score_view(t));
        state.ResumeTiming();
        {
            biaffine::workspace_scope ws(s.cost(b.count, len, mode::train).scratch);
            bp(biaffine::span<const biaffine::score_view<const float>>(dy.data(), dy.size()),
               biaffine::span<const biaffine::seq_view<float>>(dxv.data(), dxv.size()));
        }
        benchmark::ClobberMemory();
    }
    set_flops(state, 2.0 * b.forward_flops(labels));
}

// The reference interface on a pre-padded batch [count, len, n_in].
void BM_scorer_predict_padded(benchmark::State& state)
{
    const std::size_t len = static_cast<std::size_t>(state.range(0)), labels = static_cast<std::size_t>(state.range(1));
    batch b(len);
    biaffine::biaffine_scorer<float> s(bb::scorer_config_for(labels));
    xt::xtensor<float, 3> x = xt::xtensor<float, 3>::from_shape({b.count, len, 256});
    std::copy(b.doc.begin(), b.doc.end(), x.begin());
    std::vector<int> lengths(b.count, static_cast<int>(len));
    for (auto _ : state) {
        auto y = s.predict_padded(x, lengths);
        benchmark::DoNotOptimize(y.data());
    }
    set_flops(state, b.forward_flops(labels));
}

// pad -> padded scorer -> unpad (with_pad_seq_unpad_matrix): the time over
// BM_scorer_forward of the same arguments is the layer's pad + unpad cost
// (equal-length splits here, so no padding FLOPs either way).
void BM_pad_unpad_layer(benchmark::State& state)
{
    const std::size_t len = static_cast<std::size_t>(state.range(0)), labels = static_cast<std::size_t>(state.range(1));
    batch b(len);
    biaffine::biaffine_scorer<float> s(bb::scorer_config_for(labels));
    auto layer = biaffine::with_pad_seq_unpad_matrix(s);
    biaffine::workspace_scope ws(layer.cost(b.count, len).scratch);
    for (auto _ : state) {
        auto y = layer.predict(b.items);
        benchmark::DoNotOptimize(y.data());
    }
    set_flops(state, b.forward_flops(labels));
}

// The spaCy batching rule over the split lengths of a 100k-token document.
void BM_batching_rule(benchmark::State& state)
{
    const auto lengths32 = bb::make_split_lengths(static_cast<std::size_t>(state.range(0)));
    const std::vector<std::size_t> lengths(lengths32.begin(), lengths32.end());
    for (auto _ : state) {
        auto batches = biaffine::minibatch_by_padded_size(lengths, 4096, 256);
        benchmark::DoNotOptimize(batches.data());
    }
    state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations()) * static_cast<std::int64_t>(lengths.size()));
}

// The whole composition on a document (batched by a 16 MiB byte budget).
void BM_pipeline_predict(benchmark::State& state)
{
    const std::size_t tokens = static_cast<std::size_t>(state.range(0)), labels = static_cast<std::size_t>(state.range(1));
    bb::workload w = bb::make_workload(tokens, labels);
    std::vector<xt::xtensor<float, 2>> docs;
    docs.push_back(std::move(w.doc));
    std::vector<std::vector<int>> lens{w.splits};
    biaffine::biaffine_scorer<float> s(bb::scorer_config_for(labels));
    auto model = biaffine::with_splits(biaffine::with_minibatch_by_padded_size(s, biaffine::budget::megabytes(16)));
    for (auto _ : state) {
        auto y = model.predict(docs, lens);
        benchmark::DoNotOptimize(y.data());
    }
    set_flops(state, bb::true_flops(w.d, w.splits, false));
}

// One split's S = Va . Tr^T (hv = 129, the bias column included): the
// register-blocked row_dots (arg path = 0) against Eigen's packed GEMM (1),
// the GEMM kernel's transposed store (2, where built) and what the AVX2
// backend chooses (3: the kernel on full panels, row_dots on the rows left
// over, or one of the others; see kernel_score_rows). Sets the crossovers
// BIAFFINE_ROW_DOTS_* and BIAFFINE_AVX2_SCORES_* of config.hpp.
void BM_bilinear_right(benchmark::State& state)
{
    const auto n = static_cast<Eigen::Index>(state.range(0)), labels = static_cast<Eigen::Index>(state.range(1));
    const auto path = state.range(2);
#if !BIAFFINE_BENCH_KERNEL
    if (path >= 2) {
        state.SkipWithError("AVX2 kernel not built (needs AVX2 + FMA)");
        return;
    }
#endif
    const Eigen::Index hv = 129, m = n * labels;
    using rm = biaffine::row_matrix<float>;
    const rm va = rm::Random(n, hv), tr = rm::Random(m, hv);
    rm s(n, m);
    std::vector<float> packed((static_cast<std::size_t>(n) + 15) / 16 * 16 * hv);  // Va^T in 16-column panels
    for (auto _ : state) {
        if (path == 1) {
            s.noalias() = va * tr.transpose();
        } else if (path == 2) {
#if BIAFFINE_BENCH_KERNEL
            biaffine::detail::gemm_pack_b(va.data(), 1, hv, hv, static_cast<std::size_t>(n), packed.data());
            biaffine::detail::gemm_store_transposed(tr.data(), hv, static_cast<std::size_t>(m), hv, packed.data(),
                                                    static_cast<std::size_t>(n), s.data(), m);
#endif
        } else if (path == 3) {
#if BIAFFINE_BENCH_KERNEL
            biaffine::detail::avx2_backend::split_scores(
                biaffine::detail::const_row_block(va.data(), static_cast<std::size_t>(n), static_cast<std::size_t>(hv)),
                tr.data(), static_cast<std::size_t>(labels),
                biaffine::score_view<float>{s.data(), static_cast<std::size_t>(n), static_cast<std::size_t>(labels), m},
                packed.data());
#endif
        } else {
            biaffine::detail::row_dots(va.data(), hv, n, tr.data(), hv, m, hv, s.data(), m);
        }
        benchmark::DoNotOptimize(s.data());
        benchmark::ClobberMemory();
    }
    set_flops(state, 2.0 * static_cast<double>(n * m * hv));
}

// Its backward, dVa = dS . Tr and dTr = dS^T . Va: row_combos (gemm = 0)
// against Eigen (1). Sets detail::use_row_combos.
void BM_bilinear_right_backward(benchmark::State& state)
{
    const auto n = static_cast<Eigen::Index>(state.range(0)), labels = static_cast<Eigen::Index>(state.range(1));
    const bool gemm = state.range(2) != 0;
    const Eigen::Index hv = 129, m = n * labels;
    using rm = biaffine::row_matrix<float>;
    const rm ds = rm::Random(n, m), tr = rm::Random(m, hv), va = rm::Random(n, hv);
    rm dva(n, hv), dtr(m, hv);
    for (auto _ : state) {
        if (gemm) {
            dva.noalias() = ds * tr;
            dtr.noalias() = ds.transpose() * va;
        } else {
            biaffine::detail::row_combos(ds.data(), m, 1, n, m, tr.data(), hv, hv, dva.data(), hv);
            biaffine::detail::row_combos(ds.data(), 1, m, m, n, va.data(), hv, hv, dtr.data(), hv);
        }
        benchmark::DoNotOptimize(dva.data());
        benchmark::DoNotOptimize(dtr.data());
        benchmark::ClobberMemory();
    }
    set_flops(state, 4.0 * static_cast<double>(n * m * hv));
}

// A projection of the inference path, relu(X W^T + b) with X [2048, 256]
// and W [128, 256]: Eigen's product then the bias + relu pass (arg kernel =
// 0) against the GEMM kernel with W^T packed per call (1, where built).
void BM_projection(benchmark::State& state)
{
    const bool kernel = state.range(0) != 0;
#if !BIAFFINE_BENCH_KERNEL
    if (kernel) {
        state.SkipWithError("AVX2 kernel not built (needs AVX2 + FMA)");
        return;
    }
#endif
    const Eigen::Index rows = 2048, n_in = 256, h = 128;
    using rm = biaffine::row_matrix<float>;
    const rm x = rm::Random(rows, n_in), w = rm::Random(h, n_in);
    const Eigen::Matrix<float, 1, Eigen::Dynamic> b = Eigen::Matrix<float, 1, Eigen::Dynamic>::Random(h);
    rm y(rows, h);
    std::vector<float> packed((h + 15) / 16 * 16 * n_in);  // W^T in 16-column panels
    for (auto _ : state) {
        if (kernel) {
#if BIAFFINE_BENCH_KERNEL
            biaffine::detail::gemm_pack_b(w.data(), 1, n_in, n_in, h, packed.data());
            biaffine::detail::gemm_bias_relu(x.data(), n_in, rows, n_in, packed.data(), h, b.data(), true, y.data(),
                                             h);
#endif
        } else {
            y.noalias() = x * w.transpose();
            y = (y.rowwise() + b).cwiseMax(0.0f);
        }
        benchmark::DoNotOptimize(y.data());
        benchmark::ClobberMemory();
    }
    set_flops(state, 2.0 * static_cast<double>(rows * n_in * h));
}

void by_length_and_labels(benchmark::internal::Benchmark* b)
{
    for (int labels : {1, 50}) {
        for (int len : {8, 18, 40, 100}) b->Args({len, labels});
    }
    b->ArgNames({"len", "labels"})->Unit(benchmark::kMicrosecond);
}

BENCHMARK(BM_bilinear_right)
    ->ArgsProduct({{4, 8, 16, 17, 18, 20, 24, 25, 28, 32, 36, 48, 50, 64, 100}, {1, 4, 50}, {0, 1, 2, 3}})
    ->ArgNames({"n", "labels", "path"});
BENCHMARK(BM_projection)->Arg(0)->Arg(1)->ArgName("kernel");
BENCHMARK(BM_bilinear_right_backward)
    ->ArgsProduct({{4, 8, 12, 16, 24, 32, 48, 100}, {1, 50}, {0, 1}})
    ->ArgNames({"n", "labels", "gemm"});
BENCHMARK(BM_scorer_forward)->Apply(by_length_and_labels);
BENCHMARK(BM_scorer_stream)->Apply(by_length_and_labels);
BENCHMARK(BM_scorer_backward)->Apply(by_length_and_labels);
BENCHMARK(BM_scorer_predict_padded)->Apply(by_length_and_labels);
BENCHMARK(BM_pad_unpad_layer)->Apply(by_length_and_labels);
BENCHMARK(BM_batching_rule)->Arg(100000)->ArgName("tokens")->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_pipeline_predict)->Args({10000, 1})->Args({10000, 50})->ArgNames({"tokens", "labels"})
    ->Unit(benchmark::kMillisecond);

}  // namespace

int main(int argc, char** argv)
{
    static counting_memory_manager mm;
    benchmark::RegisterMemoryManager(&mm);
    benchmark::Initialize(&argc, argv);
    if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
    benchmark::RunSpecifiedBenchmarks();
    benchmark::Shutdown();
    return 0;
}
