// Smoke test of bench/bench_memory: runs the real binary through its
// re-executing driver on a tiny workload (--tokens 2000 --labels 1 --json),
// parses the JSON lines with plain string search, and checks the keys, the
// sizes implied by the workload it reports (split count, longest split, sum
// of squared lengths), and that the batched layers peak below naive padding.
// It runs only the binary: the bench's workload code is the bench's own.
// The timing protocol (the median, min and max of the warm calls, recomputed
// here from the samples each row lists) and the header of the tables
// (recomputed from /proc/cpuinfo, and carried through --replot) are checked
// the same way.
//
// The binary's path comes from BIAFFINE_BENCH_MEMORY_EXE, defined by
// bench/CMakeLists.txt when the benches are built; without it the test only
// warns (a build with -DBIAFFINE_BUILD_BENCH=OFF has no binary to run).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <unistd.h>

#ifdef BIAFFINE_BENCH_MEMORY_EXE

namespace {

struct run_output {
    int status = -1;
    std::vector<std::string> json;  // lines starting with '{'
    std::string all;
};

run_output run(const std::string& args)
{
    run_output r;
    const std::string cmd = std::string("\"") + BIAFFINE_BENCH_MEMORY_EXE + "\" " + args + " 2>/dev/null";
    FILE* p = popen(cmd.c_str(), "r");
    REQUIRE(p != nullptr);
    std::string line;
    char buf[4096];
    while (std::fgets(buf, sizeof(buf), p) != nullptr) {
        line += buf;
        if (!line.empty() && line.back() == '\n') {
            line.pop_back();
            r.all += line + "\n";
            if (!line.empty() && line[0] == '{') r.json.push_back(line);
            line.clear();
        }
    }
    r.status = pclose(p);
    return r;
}

// Raw value of "key": in a flat JSON object ("" when absent); strings unquoted.
std::string raw(const std::string& obj, const std::string& key)
{
    const std::string pat = "\"" + key + "\":";
    const auto p = obj.find(pat);
    if (p == std::string::npos) return "";
    std::size_t i = obj.find_first_not_of(' ', p + pat.size());
    if (obj[i] == '"') return obj.substr(i + 1, obj.find('"', i + 1) - i - 1);
    return obj.substr(i, obj.find_first_of(",}", i) - i);
}

double num(const std::string& obj, const std::string& key) { return std::stod(raw(obj, key)); }

// The warm calls' wall times a row lists in "seconds_reps".
std::vector<double> samples(const std::string& obj)
{
    std::istringstream ss(raw(obj, "seconds_reps"));
    std::vector<double> v;
    for (double x; ss >> x;) v.push_back(x);
    return v;
}

// The row's median, min and max recomputed from its samples: the same
// numbers as printed (the samples and the summary are written alike, %.6g).
// Without samples (reps 0) the first call's time stands for all three.
void check_summary(const std::string& obj)
{
    INFO(obj);
    std::vector<double> v = samples(obj);
    REQUIRE(v.size() == static_cast<std::size_t>(num(obj, "reps")));
    if (v.empty()) v.push_back(num(obj, "cold_seconds"));
    std::sort(v.begin(), v.end());
    const std::size_t n = v.size();
    const double median = n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
    CHECK(num(obj, "seconds") == Approx(median).epsilon(1e-5));
    CHECK(num(obj, "seconds_min") == Approx(v.front()).epsilon(1e-5));
    CHECK(num(obj, "seconds_max") == Approx(v.back()).epsilon(1e-5));
    CHECK(v.front() > 0);
    CHECK(num(obj, "cold_seconds") > 0);
    CHECK(num(obj, "gflops") == Approx(num(obj, "gflop") / num(obj, "seconds")).epsilon(1e-4));
}

std::string slurp(const std::string& path)
{
    std::ifstream f(path);
    return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

// The "model name" and the "flags" of the first CPU in /proc/cpuinfo.
std::pair<std::string, std::set<std::string>> cpuinfo()
{
    std::ifstream f("/proc/cpuinfo");
    std::string model;
    std::set<std::string> flags;
    for (std::string line; std::getline(f, line);) {
        const auto colon = line.find(':');
        if (colon == std::string::npos) continue;
        std::string value = line.substr(colon + 1);
        value.erase(0, value.find_first_not_of(" \t"));
        if (line.rfind("model name", 0) == 0 && model.empty()) model = value;
        if (line.rfind("flags", 0) == 0 && flags.empty()) {
            std::istringstream ws(value);
            for (std::string w; ws >> w;) flags.insert(w);
        }
    }
    return {model, flags};
}

// A fresh directory for a test's files, removed with it.
struct temp_dir {
    std::string path;
    temp_dir()
    {
        std::string t = "/tmp/test_bench_memory_XXXXXX";
        REQUIRE(mkdtemp(t.data()) != nullptr);
        path = t;
    }
    ~temp_dir() { std::filesystem::remove_all(path); }
    std::string operator/(const std::string& name) const { return path + "/" + name; }
};

}  // namespace

TEST_CASE("bench_memory --json: every configuration reports the required keys; batched peaks below naive",
          "[bench]")
{
    const run_output r = run("--tokens 2000 --labels 1 --json");
    INFO(r.all);
    REQUIRE(r.status == 0);
    REQUIRE(r.json.size() == 3);  // naive, batched, streaming

    const std::vector<std::string> required{"mode", "tokens", "labels", "threads", "train", "budget_bytes",
                                            "splits", "max_len", "sum_sq_lengths", "peak_bytes", "output_bytes", "heap_peak_bytes", "max_rss_bytes",
                                            "seconds", "gflop", "seconds_min", "seconds_max", "seconds_reps", "reps",
                                            "cold_seconds", "cpu", "cpu_flags", "build", "reps_requested"};
    std::map<std::string, std::string> by_mode;
    for (const auto& obj : r.json) {
        INFO(obj);
        for (const auto& k : required) {
            INFO("key " << k);
            CHECK(obj.find("\"" + k + "\":") != std::string::npos);
            CHECK_FALSE(raw(obj, k).empty());
            CHECK(raw(obj, k) != "null");
        }
        CHECK(raw(obj, "skipped") == "false");
        CHECK(num(obj, "tokens") == 2000);
        CHECK(num(obj, "labels") == 1);
        CHECK(raw(obj, "train") == "false");
        CHECK(num(obj, "budget_bytes") == 16.0 * 1024 * 1024);
        CHECK(num(obj, "seconds") > 0);
        CHECK(num(obj, "max_rss_bytes") > 0);
        CHECK(num(obj, "peak_bytes") > 0);
        CHECK(num(obj, "heap_peak_bytes") > 0);
        // The default protocol: 5 warm calls (a 2000-token run stays far
        // below --rep-seconds' 15 s), summarised from their samples.
        CHECK(num(obj, "reps_requested") == 5);
        CHECK(num(obj, "reps") == 5);
        check_summary(obj);
        by_mode[raw(obj, "mode")] = obj;
    }
    REQUIRE(by_mode.count("naive") == 1);
    REQUIRE(by_mode.count("batched") == 1);
    REQUIRE(by_mode.count("streaming") == 1);
    const std::string& naive = by_mode["naive"];
    const std::string& batched = by_mode["batched"];
    const std::string& streaming = by_mode["streaming"];

    // The claim of the table: the batched layers need less than padding everything.
    CHECK(num(batched, "peak_bytes") < num(naive, "peak_bytes"));
    CHECK(num(streaming, "peak_bytes") <= num(batched, "peak_bytes") + 4096);
    // Streaming keeps no outputs; the peaks stay within the byte budget
    // (+ the O(documents) bookkeeping of with_splits, far below a page here).
    CHECK(num(streaming, "output_bytes") == 0);
    CHECK(num(streaming, "peak_bytes") <= num(streaming, "budget_bytes") + 4096);

    // Sizes implied by the workload: naive returns the padded
    // [n_splits, max_len, max_len] array; batched one [n, n] tensor per split
    // (plus the list holding them, a few dozen bytes each). Every mode scores
    // the same splits.
    for (const char* k : {"splits", "max_len", "sum_sq_lengths"}) {
        INFO("key " << k);
        CHECK(num(naive, k) == num(batched, k));
        CHECK(num(batched, k) == num(streaming, k));
    }
    const double b = num(batched, "splits"), max_len = num(batched, "max_len"), sum_sq = num(batched, "sum_sq_lengths");
    CHECK(b > 1);
    CHECK(max_len >= 1);
    CHECK(max_len <= 100);  // the workload clips split lengths to [1, 100]
    CHECK(sum_sq >= 2000);            // sum n^2 >= sum n = tokens
    CHECK(sum_sq <= 2000 * max_len);  // sum n^2 <= max_len * sum n
    CHECK(num(naive, "output_bytes") == b * max_len * max_len * sizeof(float));
    CHECK(num(batched, "output_bytes") >= sum_sq * sizeof(float));
    CHECK(num(batched, "output_bytes") <= sum_sq * sizeof(float) + b * 256);
    // Naive's peak holds at least its padded input and padded output.
    CHECK(num(naive, "peak_bytes") >= b * max_len * (256.0 + max_len) * sizeof(float));
    // Batched's peak: outputs plus at most the budget.
    CHECK(num(batched, "peak_bytes") <= num(batched, "output_bytes") + num(batched, "budget_bytes"));

    // Same work in every mode.
    CHECK(num(naive, "gflop") == Approx(num(batched, "gflop")));
    CHECK(num(batched, "gflop") == Approx(num(streaming, "gflop")));
    CHECK(num(batched, "gflop") > 0);
}

TEST_CASE("bench_memory: configurations over the --max-gb cap are skipped and say what they need", "[bench]")
{
    const run_output r = run("--tokens 5000 --labels 50 --modes naive --max-gb 0.01 --json");
    INFO(r.all);
    REQUIRE(r.status == 0);
    REQUIRE(r.json.size() == 1);
    CHECK(raw(r.json[0], "skipped") == "true");
    CHECK(raw(r.json[0], "reason").find("needs ~") != std::string::npos);
    CHECK(num(r.json[0], "predicted_bytes") > 0.01 * 1024 * 1024 * 1024);
}

TEST_CASE("bench_memory --precision fp32,bf16: bf16 outputs and streamed blocks take half the bytes", "[bench][bf16]")
{
    // One warm call per configuration: this test is about bytes, not time.
    for (const char* extra : {"", " --train"}) {
        const std::string args = std::string("--tokens 3000 --labels 1,3 --modes naive,batched,streaming,heads "
                                             "--precision fp32,bf16 --reps 1 --json") + extra;
        const run_output r = run(args);
        INFO(args << "\n" << r.all);
        REQUIRE(r.status == 0);
        // (naive, batched, streaming, heads) x (fp32, bf16) x 2 label counts.
        REQUIRE(r.json.size() == 16);
        std::map<std::string, std::string> by;  // "mode labels precision"
        for (const auto& obj : r.json) {
            by[raw(obj, "mode") + " " + raw(obj, "labels") + " " + raw(obj, "precision")] = obj;
        }
        for (const char* mode : {"naive", "batched", "streaming", "heads"}) {
            for (const char* labels : {"1", "3"}) {
                const std::string key = std::string(mode) + " " + labels + " ";
                INFO(key);
                REQUIRE(by.count(key + "fp32") == 1);
                REQUIRE(by.count(key + "bf16") == 1);
                const std::string& f = by[key + "fp32"];
                const std::string& b = by[key + "bf16"];
                if (raw(f, "skipped") == "true") {
                    // Streaming has no training path, in either precision.
                    CHECK(std::string(mode) == "streaming");
                    CHECK(raw(b, "skipped") == "true");
                    continue;
                }
                REQUIRE(raw(b, "skipped") == "false");
                CHECK(num(f, "output_scalar_bytes") == 4);
                CHECK(num(b, "output_scalar_bytes") == 2);
                // Same splits, so the same cells at half the bytes each.
                CHECK(num(f, "sum_sq_lengths") == num(b, "sum_sq_lengths"));
                CHECK(num(f, "score_bytes") == 2 * num(b, "score_bytes"));
                CHECK(num(f, "block_bytes") == 2 * num(b, "block_bytes"));
                CHECK(num(b, "block_bytes") > 0);
                if (std::string(mode) == "streaming") {
                    CHECK(num(b, "output_bytes") == 0);
                } else {
                    CHECK(num(b, "score_bytes") > 0);
                    // The tracker's outputs: the scores plus the list holding
                    // them (the same in both), so bf16 saves exactly half the
                    // score bytes.
                    CHECK(num(f, "output_bytes") - num(b, "output_bytes") == num(b, "score_bytes"));
                }
            }
        }
    }
}

TEST_CASE("bench_memory --reps / --rep-seconds: the number of warm calls and their summary", "[bench]")
{
    SECTION("--reps 4: four samples")
    {
        const run_output r = run("--tokens 1000 --labels 1 --modes batched,streaming --reps 4 --json");
        INFO(r.all);
        REQUIRE(r.status == 0);
        REQUIRE(r.json.size() == 2);
        for (const auto& obj : r.json) {
            CHECK(num(obj, "reps_requested") == 4);
            CHECK(num(obj, "reps") == 4);
            check_summary(obj);
        }
    }
    // The one row of a batched run of 1000 tokens, o=1.
    auto one_row = [](const std::string& flags) {
        const run_output r = run("--tokens 1000 --labels 1 --modes batched --json " + flags);
        INFO(flags << "\n" << r.all);
        REQUIRE(r.status == 0);
        REQUIRE(r.json.size() == 1);
        return r.json[0];
    };
    SECTION("a --rep-seconds the first call passes alone: no warm call, the first call's time stands")
    {
        const std::string obj = one_row("--reps 4 --rep-seconds 1e-9");
        INFO(obj);
        CHECK(num(obj, "reps") == 0);
        CHECK(raw(obj, "seconds_reps").empty());
        CHECK(num(obj, "rep_seconds") == 1e-9);
        check_summary(obj);
        CHECK(num(obj, "seconds") == num(obj, "cold_seconds"));
    }
    SECTION("--rep-seconds 0: no limit")
    {
        const std::string obj = one_row("--reps 3 --rep-seconds 0");
        INFO(obj);
        CHECK(num(obj, "reps") == 3);
        check_summary(obj);
    }
    SECTION("bad counts are refused")
    {
        for (const char* bad : {"--reps 0", "--reps -2", "--rep-seconds -1"}) {
            INFO(bad);
            const run_output r = run(std::string("--tokens 1000 --modes batched --json ") + bad);
            CHECK(r.status != 0);
            CHECK(r.json.empty());
        }
    }
}

TEST_CASE("bench_memory --replot: the same tables, CSV and plot, header included, from the JSON lines", "[bench]")
{
    const temp_dir dir;
    const std::string jsonl = dir / "run.jsonl";
    const run_output r = run("--tokens 2000 --labels 1 --modes batched,heads --precision fp32,bf16 --reps 3 --json --md \"" +
                             (dir / "run.md") + "\" --csv \"" + (dir / "run.csv") + "\" --svg \"" + (dir / "run.svg") + "\"");
    INFO(r.all);
    REQUIRE(r.status == 0);
    REQUIRE(r.json.size() == 4);
    {
        std::ofstream f(jsonl);
        for (const auto& obj : r.json) f << obj << "\n";
    }
    const std::string md = slurp(dir / "run.md");

    // The header names what the rows were measured on and how.
    const auto [model, flags] = cpuinfo();
    REQUIRE_FALSE(model.empty());
    CHECK(md.find("CPU: " + model + " (vector ISA: ") != std::string::npos);
    CHECK(md.find("threads 1;") != std::string::npos);
    CHECK(md.find("median of 3 warm calls after the first") != std::string::npos);
    for (const auto& obj : r.json) {
        INFO(obj);
        CHECK(raw(obj, "cpu") == model);
        // Every listed ISA flag is one the CPU has; the ones every x86-64
        // kernel of the library branches on are listed when present.
        std::istringstream ws(raw(obj, "cpu_flags"));
        for (std::string w; ws >> w;) CHECK(flags.count(w) == 1);
        for (const char* w : {"avx2", "fma", "avx512f", "avx512_bf16", "amx_bf16"}) {
            CHECK((raw(obj, "cpu_flags").find(w) != std::string::npos) == (flags.count(w) == 1));
        }
    }
    // The fp32 / bf16 time ratios are the ratios of the medians (wall, then CPU).
    std::map<std::string, std::string> by;
    for (const auto& obj : r.json) by[raw(obj, "mode") + " " + raw(obj, "precision")] = obj;
    REQUIRE(by.size() == 4);
    char ratio[96];
    std::snprintf(ratio, sizeof(ratio), "| %.2fx | %.2fx |\n", num(by["batched fp32"], "seconds") / num(by["batched bf16"], "seconds"),
                  num(by["batched fp32"], "cpu_seconds") / num(by["batched bf16"], "cpu_seconds"));
    const auto precision_row = md.find("| 2k tokens, o=1, batched | 2.00x");
    REQUIRE(precision_row != std::string::npos);
    CHECK(md.substr(precision_row, md.find('\n', precision_row) - precision_row + 1).find(ratio) != std::string::npos);

    // --replot renders the same files from the JSON lines.
    const run_output again = run("--replot \"" + jsonl + "\" --md \"" + (dir / "re.md") + "\" --csv \"" +
                                 (dir / "re.csv") + "\" --svg \"" + (dir / "re.svg") + "\"");
    INFO(again.all);
    REQUIRE(again.status == 0);
    CHECK(slurp(dir / "re.md") == md);
    CHECK(slurp(dir / "re.csv") == slurp(dir / "run.csv"));
    CHECK(slurp(dir / "re.svg") == slurp(dir / "run.svg"));

    // ... from the rows, not from the machine that re-renders them: another
    // CPU, thread count and protocol in the lines are what the header names.
    std::string edited;
    for (std::string obj : r.json) {
        for (const auto& [key, value] : std::vector<std::pair<std::string, std::string>>{
                 {"cpu", "\"Test CPU 9000\""}, {"threads", "2"}, {"reps_requested", "7"}}) {
            const std::string pat = "\"" + key + "\": ";
            const auto p = obj.find(pat) + pat.size();
            obj.replace(p, obj.find_first_of(",}", p) - p, value);
        }
        edited += obj + "\n";
    }
    std::ofstream(dir / "edited.jsonl") << edited;
    const run_output other = run("--replot \"" + (dir / "edited.jsonl") + "\" --md \"" + (dir / "edited.md") +
                                 "\" --svg \"" + (dir / "edited.svg") + "\"");
    INFO(other.all);
    REQUIRE(other.status == 0);
    const std::string md2 = slurp(dir / "edited.md");
    CHECK(md2.find("CPU: Test CPU 9000 (vector ISA: ") != std::string::npos);
    CHECK(md2.find("threads 2;") != std::string::npos);
    CHECK(md2.find("median of 7 warm calls after the first") != std::string::npos);
    const std::string svg2 = slurp(dir / "edited.svg");
    CHECK(svg2.find("CPU: Test CPU 9000") != std::string::npos);
    CHECK(svg2.find("threads 2;") != std::string::npos);
    CHECK(svg2.find("median of 7 warm calls") != std::string::npos);
}

#else

TEST_CASE("bench_memory smoke test (bench binaries not built)", "[bench]")
{
    WARN("BIAFFINE_BENCH_MEMORY_EXE is not defined (configure with -DBIAFFINE_BUILD_BENCH=ON): nothing to run");
    SUCCEED();
}

#endif
