// bench_decode - head decoding cost per score cell (Google Benchmark).
//
//   bench_decode                                  # everything, then a summary table
//   bench_decode --benchmark_filter=mst           # a subset
//
// For n = 10, 18, 30, 70, 100, 300: mst_heads, the earlier MST it replaced
// (reference/reference_mst.hpp, kept only as a reference, so one run shows the
// speedup), eisner_heads and argmax_heads, on float32 scores drawn from a
// standard normal (what a scorer emits). Each benchmark cycles through 16
// matrices so no single input is learned by the branch predictor. The summary
// at the end is a markdown table of ns per score cell (real time / n^2; the
// fastest of --benchmark_repetitions runs when given).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstddef>
#include <cstdio>
#include <map>
#include <random>
#include <string>
#include <vector>

#include <biaffine/decode.hpp>

#include "reference_mst.hpp"

namespace {

constexpr int k_pool = 16;

// k_pool float matrices `[n, n]`, standard normal, fixed seed per n.
const std::vector<std::vector<float>>& pool(std::size_t n)
{
    static std::map<std::size_t, std::vector<std::vector<float>>> cache;
    auto& p = cache[n];
    if (p.empty()) {
        std::mt19937 rng(static_cast<unsigned>(1000 + n));
        std::normal_distribution<float> nd(0.0f, 1.0f);
        p.resize(k_pool);
        for (auto& m : p) {
            m.resize(n * n);
            for (float& x : m) x = nd(rng);
        }
    }
    return p;
}

template <class Decode>
void run(benchmark::State& state, const Decode& decode)
{
    const auto n = static_cast<std::size_t>(state.range(0));
    const auto& p = pool(n);
    std::size_t i = 0;
    for (auto _ : state) {
        const auto& m = p[i++ % k_pool];
        auto heads = decode(m.data(), n);
        benchmark::DoNotOptimize(heads.data());
        benchmark::ClobberMemory();
    }
    state.counters["ns_per_cell"] = benchmark::Counter(
        static_cast<double>(n * n) * static_cast<double>(state.iterations()),
        benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}

void BM_mst_reference(benchmark::State& state)
{
    run(state, [](const float* s, std::size_t n) { return biaffine_reference::reference_mst(s, n, n); });
}
void BM_mst(benchmark::State& state)
{
    run(state, [](const float* s, std::size_t n) { return biaffine::mst_heads(s, n, n); });
}
void BM_eisner(benchmark::State& state)
{
    run(state, [](const float* s, std::size_t n) { return biaffine::eisner_heads(s, n, n); });
}
void BM_argmax(benchmark::State& state)
{
    run(state, [](const float* s, std::size_t n) { return biaffine::argmax_heads(s, n, n); });
}

void sizes(benchmark::internal::Benchmark* b)
{
    for (int n : {10, 18, 30, 32, 48, 70, 100, 300}) b->Arg(n);  // 32: where the argmax target starts
    b->ArgName("n")->Unit(benchmark::kNanosecond);
}

BENCHMARK(BM_mst_reference)->Apply(sizes);
BENCHMARK(BM_mst)->Apply(sizes);
BENCHMARK(BM_eisner)->Apply(sizes);
BENCHMARK(BM_argmax)->Apply(sizes);

// Console output as usual, plus ns per cell collected for the summary.
class table_reporter : public benchmark::ConsoleReporter {
public:
    std::map<int, std::map<std::string, double>> ns_per_cell;  // n -> benchmark -> ns

    void ReportRuns(const std::vector<Run>& runs) override
    {
        ConsoleReporter::ReportRuns(runs);
        for (const Run& r : runs) {
            if (r.run_type != Run::RT_Iteration || r.error_occurred) continue;
            const std::string name = r.benchmark_name();  // "BM_mst/n:70"
            const auto slash = name.find("/n:");
            if (slash == std::string::npos) continue;
            const int n = std::stoi(name.substr(slash + 3));
            // time_unit is ns for every benchmark here. With
            // --benchmark_repetitions the fastest repetition is kept: on a
            // shared machine it is the one least disturbed.
            const double ns = r.GetAdjustedRealTime() / (double(n) * double(n));
            auto& slot = ns_per_cell[n][name.substr(3, slash - 3)];
            slot = slot > 0 ? std::min(slot, ns) : ns;
        }
    }
};

}  // namespace

int main(int argc, char** argv)
{
    benchmark::Initialize(&argc, argv);
    if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
    table_reporter rep;
    benchmark::RunSpecifiedBenchmarks(&rep);
    benchmark::Shutdown();

    std::printf("\nns per score cell (real time / n^2, float32 scores, one thread):\n\n");
    std::printf("| n | mst_heads (earlier) | mst_heads | speedup | eisner_heads | argmax_heads |\n");
    std::printf("|---|---|---|---|---|---|\n");
    const auto cell = [](const std::map<std::string, double>& row, const char* k) {
        const auto it = row.find(k);
        return it == row.end() ? -1.0 : it->second;
    };
    for (const auto& [n, row] : rep.ns_per_cell) {
        const double ref = cell(row, "mst_reference"), mst = cell(row, "mst");
        std::printf("| %d | %.2f | %.2f | %.1fx | %.2f | %.3f |\n", n, ref, mst,
                    ref > 0 && mst > 0 ? ref / mst : 0.0, cell(row, "eisner"), cell(row, "argmax"));
    }
    return 0;
}
