// Smoke test of bench/bench_memory: runs the real binary through its
// re-executing driver on a tiny workload (--tokens 2000 --labels 1 --json),
// parses the JSON lines with plain string search, and checks the keys, the
// sizes implied by the workload it reports (split count, longest split, sum
// of squared lengths), and that the batched layers peak below naive padding.
// It runs only the binary: the bench's workload code is the bench's own.
//
// The binary's path comes from BIAFFINE_BENCH_MEMORY_EXE, defined by
// bench/CMakeLists.txt when the benches are built; without it the test only
// warns (a build with -DBIAFFINE_BUILD_BENCH=OFF has no binary to run).
#include <catch2/catch.hpp>

#include <cstdio>
#include <map>
#include <string>
#include <vector>

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
                                            "seconds", "gflop"};
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
    for (const char* extra : {"", " --train"}) {
        const std::string args = std::string("--tokens 3000 --labels 1,3 --modes naive,batched,streaming,heads "
                                             "--precision fp32,bf16 --json") + extra;
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

#else

TEST_CASE("bench_memory smoke test (bench binaries not built)", "[bench]")
{
    WARN("BIAFFINE_BENCH_MEMORY_EXE is not defined (configure with -DBIAFFINE_BUILD_BENCH=ON): nothing to run");
    SUCCEED();
}

#endif
