// tests/test_errors.cpp - walks the bad-input table of docs/bad-input.md ("## Bad input").
//
// Every row of the table names a scenario (its id), the exception type and
// the exact message. This test parses the table, runs each scenario and checks
// both; it also fails when a scenario here has no row there, so the document
// and the library cannot drift apart. On a mismatch it prints the row as it
// should read.
#include <catch2/catch.hpp>

#include <array>
#include <filesystem>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <functional>
#include <iostream>
#include <limits>
#include <map>
#include <new>
#include <sstream>
#include <string>
#include <vector>

#include <xtensor/xarray.hpp>
#include <xtensor/xtensor.hpp>

#include "biaffine/biaffine.hpp"
#include "biaffine/decode.hpp"
#include "biaffine/lazy_split.hpp"

using namespace biaffine;

namespace {

const char* k_table = BIAFFINE_TEST_DATA_DIR "/../../docs/bad-input.md";

struct table_row {
    std::string id, kind, type, message;
};

std::string trim(const std::string& s)
{
    const auto b = s.find_first_not_of(" \t");
    if (b == std::string::npos) return "";
    const auto e = s.find_last_not_of(" \t");
    return s.substr(b, e - b + 1);
}

// `text` -> text (the table quotes ids, types and messages as code).
std::string unquote(const std::string& s)
{
    const std::string t = trim(s);
    if (t.size() >= 2 && t.front() == '`' && t.back() == '`') return t.substr(1, t.size() - 2);
    return t;
}

/// Rows of the table in docs/bad-input.md's "## Bad input" section: lines
/// `| `id` | kind | `type` | `message` |` (other sections' tables are skipped).
std::vector<table_row> read_table(const std::string& path)
{
    std::ifstream in(path);
    REQUIRE(in.good());
    std::vector<table_row> rows;
    std::string line;
    bool in_section = false;
    while (std::getline(in, line)) {
        if (line.rfind("## ", 0) == 0) in_section = line == "## Bad input";
        if (!in_section || line.rfind("| `", 0) != 0) continue;
        std::vector<std::string> cells;
        std::size_t start = 1;
        for (;;) {
            const std::size_t bar = line.find(" | ", start);
            if (bar == std::string::npos) break;
            cells.push_back(line.substr(start, bar - start));
            start = bar + 3;
        }
        const std::size_t last = line.rfind('|');
        cells.push_back(line.substr(start, last - start));
        INFO(line);
        REQUIRE(cells.size() == 4);
        rows.push_back({unquote(cells[0]), trim(cells[1]), unquote(cells[2]), unquote(cells[3])});
    }
    return rows;
}

/// The most derived type of a library exception, as the table spells it.
std::string type_name(const std::exception& e)
{
    if (dynamic_cast<const overflow_error*>(&e)) return "biaffine::overflow_error";
    if (dynamic_cast<const budget_error*>(&e)) return "biaffine::budget_error";
    if (dynamic_cast<const shape_error*>(&e)) return "biaffine::shape_error";
    if (dynamic_cast<const length_error*>(&e)) return "biaffine::length_error";
    if (dynamic_cast<const backprop_error*>(&e)) return "biaffine::backprop_error";
    if (dynamic_cast<const head_error*>(&e)) return "biaffine::head_error";
    if (dynamic_cast<const error*>(&e)) return "biaffine::error";
    if (dynamic_cast<const std::bad_alloc*>(&e)) return "std::bad_alloc";
    return "std::exception";
}

using doc_t = xt::xtensor<double, 2>;

scorer_config small_config()
{
    scorer_config c;
    c.n_in = 3;
    c.hidden = 2;
    return c;
}

doc_t doc(std::size_t rows, std::size_t cols = 3) { return xt::ones<double>({rows, cols}) * 0.5; }

/// A scenario: predict_padded on a small scorer with a padded batch of ones
/// `[batch, length, width]` and the given lengths.
std::function<void()> predict_padded_ones(std::array<std::size_t, 3> shape, std::vector<int> lengths)
{
    return [shape, lengths] {
        biaffine_scorer<double> sc(small_config());
        const xt::xtensor<double, 3> x = xt::ones<double>(shape);
        sc.predict_padded(x, lengths);
    };
}

/// Scenario id -> a call that must throw the row's exception.
std::map<std::string, std::function<void()>> scenarios()
{
    std::map<std::string, std::function<void()>> s;
    // ---- documents and split lengths (with_splits)
    s["doc-count"] = [] {
        biaffine_scorer<double> sc(small_config());
        std::vector<doc_t> docs{doc(2), doc(3)};
        std::vector<std::vector<int>> lengths{{2}};
        with_splits(sc).predict(docs, lengths);
    };
    s["split-sum"] = [] {
        biaffine_scorer<double> sc(small_config());
        std::vector<doc_t> docs{doc(2), doc(6)};
        std::vector<std::vector<int>> lengths{{2}, {3, 2}};
        with_splits(sc).predict(docs, lengths);
    };
    s["negative-length"] = [] {
        biaffine_scorer<double> sc(small_config());
        std::vector<doc_t> docs{doc(2)};
        std::vector<std::vector<int>> lengths{{4, -2}};
        with_splits(sc).predict(docs, lengths);
    };
    s["doc-width"] = [] {
        biaffine_scorer<double> sc(small_config());
        std::vector<doc_t> docs{doc(2, 4)};
        std::vector<std::vector<int>> lengths{{2}};
        with_splits(sc).predict(docs, lengths);
    };
    s["split-width"] = [] {
        biaffine_scorer<double> sc(small_config());
        const doc_t d = doc(2, 2);
        std::vector<seq_view<const double>> items{as_const_view(d)};
        sc.predict(items);
    };
    // ---- labels at given heads
    s["heads-missing"] = [] {
        biaffine_scorer<double> sc(small_config());
        std::vector<doc_t> docs{doc(2), doc(3)};
        std::vector<std::vector<int>> lengths{{2}, {3}};
        with_splits(sc).predict_heads(docs, lengths, std::vector<std::vector<int>>{{0, 0}});
    };
    s["heads-length"] = [] {
        biaffine_scorer<double> sc(small_config());
        std::vector<doc_t> docs{doc(3)};
        std::vector<std::vector<int>> lengths{{1, 2}};
        with_splits(sc).predict_heads(docs, lengths, std::vector<std::vector<int>>{{0, 1}});
    };
    s["heads-range"] = [] {
        biaffine_scorer<double> sc(small_config());
        std::vector<doc_t> docs{doc(2), doc(4)};
        std::vector<std::vector<int>> lengths{{2}, {2, 2}};
        with_splits(sc).predict_heads(docs, lengths, std::vector<std::vector<int>>{{1, 0}, {0, 0, 2, 1}});
    };
    s["heads-negative"] = [] {
        biaffine_scorer<double> sc(small_config());
        const doc_t d = doc(2);
        std::vector<seq_view<const double>> items{as_const_view(d)};
        sc.predict_heads(items, std::vector<std::vector<int>>{{0, -1}});
    };
    s["heads-padded-shape"] = [] {
        biaffine_scorer<double> sc(small_config());
        const xt::xtensor<double, 3> x = xt::ones<double>({2, 4, 3});
        const xt::xtensor<int, 2> h = xt::zeros<int>({2, 3});
        sc.predict_heads_padded(x, std::vector<int>{4, 2}, h);
    };
    s["heads-grad-shape"] = [] {
        biaffine_scorer<double> sc(small_config());
        std::vector<doc_t> docs{doc(2)};
        std::vector<std::vector<int>> lengths{{2}};
        auto layer = with_splits(sc);
        auto [Y, bp] = layer.forward_heads(docs, lengths, std::vector<std::vector<int>>{{1, 1}});
        std::vector<xt::xtensor<double, 2>> g{xt::zeros<double>({3, 1})};
        bp(decltype(layer)::head_grad_views(g));
    };
    // ---- gradients
    s["grad-count"] = [] {
        biaffine_scorer<double> sc(small_config());
        std::vector<doc_t> docs{doc(5)};
        std::vector<std::vector<int>> lengths{{1, 2, 2}};
        auto layer = with_splits(sc);
        auto [Y, bp] = layer.forward(docs, lengths);
        Y.pop_back();
        bp(decltype(layer)::grad_views(Y));
    };
    s["grad-shape"] = [] {
        biaffine_scorer<double> sc(small_config());
        std::vector<doc_t> docs{doc(5)};
        std::vector<std::vector<int>> lengths{{3, 2}};
        auto layer = with_splits(sc);
        auto [Y, bp] = layer.forward(docs, lengths);
        std::vector<xt::xarray<double>> g{xt::zeros<double>({3, 3}), xt::zeros<double>({3, 3})};
        bp(decltype(layer)::grad_views(g));
    };
    s["grad-not-square"] = [] {
        std::vector<xt::xarray<double>> g{xt::zeros<double>({2, 3})};
        with_splits_layer<biaffine_scorer<double>&>::grad_views(g);
    };
    s["padded-grad-shape"] = [] {
        biaffine_scorer<double> sc(small_config());
        const xt::xtensor<double, 3> x = xt::ones<double>({2, 4, 3});
        const std::vector<int> lengths{4, 2};
        auto [y, bp] = sc.forward_padded(x, lengths);
        bp(xt::zeros<double>({2, 4, 3}));
    };
    s["backprop-twice"] = [] {
        biaffine_scorer<double> sc(small_config());
        std::vector<doc_t> docs{doc(2)};
        std::vector<std::vector<int>> lengths{{2}};
        auto layer = with_splits(sc);
        auto [Y, bp] = layer.forward(docs, lengths);
        const auto g = decltype(layer)::grad_views(Y);
        bp(g);
        bp(g);
    };
    s["backprop-empty"] = [] {
        backprop_fn<void()> bp;
        bp();
    };
    // ---- budgets and batching
    s["budget-zero"] = [] { budget::bytes(0); };
    s["budget-megabytes-overflow"] = [] { budget::megabytes(std::uint64_t(1) << 50); };
    s["buffer-zero"] = [] {
        biaffine_scorer<double> sc(small_config());
        batch_options o;
        o.buffer = 0;
        with_minibatch_by_padded_size(sc, budget::items(8), o);
    };
    s["threads-zero"] = [] {
        biaffine_scorer<double> sc(small_config());
        batch_options o;
        o.threads = 0;
        with_minibatch_by_padded_size(sc, budget::items(8), o);
    };
    s["budget-below-bookkeeping"] = [] {
        biaffine_scorer<double> sc(small_config());
        std::vector<doc_t> docs{doc(3)};
        std::vector<std::vector<int>> lengths{{1, 1, 1}};
        with_splits(with_minibatch_by_padded_size(sc, budget::bytes(200))).predict(docs, lengths);
    };
    s["budget-below-one-split"] = [] {
        // Refused when the layer is built: no call could ever run.
        biaffine_scorer<double> sc(small_config());
        with_minibatch_by_padded_size(sc, budget::bytes(100));
    };
    s["budget-below-index"] = [] {
        // Covers the batcher's 408 bytes but not the per-document index on top.
        biaffine_scorer<double> sc(small_config());
        std::vector<doc_t> docs{doc(3), doc(0), doc(0), doc(0)};
        std::vector<std::vector<int>> lengths{{1, 1, 1}, {}, {}, {}};
        with_splits(with_minibatch_by_padded_size(sc, budget::bytes(420))).predict(docs, lengths);
    };
    s["oversize-throw"] = [] {
        biaffine_scorer<double> sc(small_config());
        std::vector<doc_t> docs{doc(7)};
        std::vector<std::vector<int>> lengths{{2, 5}};
        batch_options o;
        o.oversize = oversize_policy::throw_error;
        with_splits(with_minibatch_by_padded_size(sc, budget::items(4), o)).predict(docs, lengths);
    };
    s["oversize-throw-bytes"] = [] {
        // The message leads with the budget the user set, then what the
        // bookkeeping left of it.
        biaffine_scorer<double> sc(small_config());
        std::vector<doc_t> docs{doc(40)};
        std::vector<std::vector<int>> lengths{{40}};
        batch_options o;
        o.oversize = oversize_policy::throw_error;
        with_splits(with_minibatch_by_padded_size(sc, budget::bytes(8192), o)).predict(docs, lengths);
    };
    s["size-overflow"] = [] {
        // A split of 2^32 rows (a stride-0 view: no memory behind it) would
        // need 2^64 score cells.
        biaffine_scorer<double> sc(small_config());
        const double row[3] = {0, 0, 0};
        std::vector<seq_view<const double>> items{{row, std::size_t(1) << 32, 3, 0, 1}};
        sc.predict(items);
    };
    s["size-overflow-budget"] = [] {
        biaffine_scorer<double> sc(small_config());
        const double row[3] = {0, 0, 0};
        std::vector<seq_view<const double>> items{{row, std::size_t(1) << 32, 3, 0, 1}};
        with_minibatch_by_padded_size(sc, budget::megabytes(64)).predict(items);
    };
    s["memory-limit"] = [] {
        biaffine_scorer<double> sc(small_config());
        std::vector<doc_t> docs{doc(4)};
        std::vector<std::vector<int>> lengths{{4}};
        struct reset {
            ~reset() { tracker().set_limit(0); }
        } r;
        tracker().set_limit(tracker().current_bytes() + 1);
        with_splits(sc).predict(docs, lengths);
    };
    // ---- the scorer and its padded interface
    s["config-size"] = [] {
        scorer_config c = small_config();
        c.n_in = 0;
        biaffine_scorer<double> sc(c);
    };
    s["config-dropout"] = [] {
        scorer_config c = small_config();
        c.dropout = 1.0;
        biaffine_scorer<double> sc(c);
    };
    s["padded-rank"] = [] {
        biaffine_scorer<double> sc(small_config());
        const xt::xarray<double> x = xt::ones<double>({4, 3});
        sc.predict_padded(x, std::vector<int>{4});
    };
    s["padded-width"] = predict_padded_ones({2, 4, 5}, {4, 4});
    s["padded-lengths-count"] = predict_padded_ones({2, 4, 3}, {4});
    s["padded-length-range"] = predict_padded_ones({2, 4, 3}, {4, 5});
    s["set-parameter-shape"] = [] {
        biaffine_scorer<double> sc(small_config());
        sc.set_parameter("head_bias", xt::xtensor<double, 1>{1.0, 2.0, 3.0});
    };
    s["set-parameter-name"] = [] {
        biaffine_scorer<double> sc(small_config());
        sc.set_parameter("nope", xt::xtensor<double, 1>{1.0});
    };
    s["load-npy-missing"] = [] {
        biaffine_scorer<double> sc(small_config());
        biaffine::load_npy(sc, "/nonexistent");
    };
    // A saved set in a fixed folder (the messages name the files), then one
    // file spoiled per scenario.
    auto spoiled = [](const char* file, const std::string& bytes) {
        const std::string dir = "/tmp/biaffine_bad_input_npy";
        std::filesystem::create_directories(dir);
        biaffine_scorer<double> good(small_config());
        biaffine::save_npy(good, dir);
        std::ofstream(dir + "/" + file, std::ios::binary | std::ios::trunc) << bytes;
        biaffine_scorer<double> sc(small_config());
        biaffine::load_npy(sc, dir);
    };
    auto npy = [](const std::string& dict, std::size_t data_bytes) {
        std::string h = dict;
        while ((10 + h.size() + 1) % 64 != 0) h += ' ';
        h += '\n';
        return std::string("\x93NUMPY\x01\x00", 8) + static_cast<char>(h.size()) + '\0' + h +
               std::string(data_bytes, '\0');
    };
    s["npy-truncated"] = [=] {
        spoiled("head_bias.npy", npy("{'descr': '<f8', 'fortran_order': False, 'shape': (2,), }", 8));
    };
    s["npy-shape"] = [=] {
        spoiled("bilinear_weight.npy", npy("{'descr': '<f8', 'fortran_order': False, 'shape': (1, 2, 3), }", 48));
    };
    s["npy-dtype"] = [=] {
        spoiled("head_bias.npy", npy("{'descr': '<i8', 'fortran_order': False, 'shape': (2,), }", 16));
    };
    s["npy-not-npy"] = [=] { spoiled("dependent_bias.npy", "hello"); };
    s["save-npy-folder"] = [] {
        biaffine_scorer<double> sc(small_config());
        biaffine::save_npy(sc, "/nonexistent/folder");
    };
    s["config-size-overflow"] = [] {
        scorer_config c = small_config();
        c.hidden = std::size_t(1) << 62;
        biaffine_scorer<float> sc(c);
    };
    s["loss-gold-head"] = [] {
        score_list<double> Y;
        Y.push_back(score_tensor<double>::from_shape({2, 2}));
        Y.back().fill(0.0);
        cross_entropy_heads<double>(Y, std::vector<std::vector<int>>{{0, 2}});
    };
    s["as-view-rank"] = [] {
        const xt::xarray<double> x = xt::ones<double>({2, 2, 2});
        as_view(x);
    };
    s["bilinear-shapes"] = [] {
        const tensor<double, 3> u = xt::ones<double>({1, 2, 3});
        const tensor<double, 3> v = xt::ones<double>({1, 2, 4});
        const tensor<double, 3> w = xt::ones<double>({1, 4, 4});
        pairwise_bilinear(u, v, w, true, true);
    };
    // ---- splitting and decoding
    s["lazy-split-max-length"] = [] { lazy_split(std::vector<float>{0.1f, 0.9f}, 0); };
    s["cap-split-scores"] = [] { cap_split_lengths({2, 3}, 2, std::vector<float>{0, 1, 2, 3}); };
    s["decode-nan"] = [] {
        const double nan = std::numeric_limits<double>::quiet_NaN();
        const std::vector<double> scores{0.0, 1.0, nan, 0.0};
        mst_heads(scores.data(), 2, 2);
    };
    s["decode-label-view"] = [] {
        const std::vector<double> scores(2 * 2 * 3, 0.0);
        mst_heads(score_view<const double>{scores.data(), 2, 3, 6});
    };
    s["labels-at-heads-range"] = [] {
        const std::vector<double> scores(2 * 2 * 3, 0.0);
        labels_at_heads(score_view<const double>{scores.data(), 2, 3, 6}, std::vector<int>{0, 2});
    };
    s["grad-view-stride"] = [] {
        biaffine_scorer<double> sc(small_config());
        auto model = with_splits(with_minibatch_by_padded_size(sc, budget::megabytes(1)));
        const std::vector<doc_t> docs{doc(5)};
        const std::vector<std::vector<int>> lens{{2, 3}};
        auto [Y, bp] = model.forward(docs, lens, mode::train);
        std::vector<double> g0(4, 1.0), g1(9, 1.0);
        const std::vector<score_view<const double>> dY{{g0.data(), 2, 1, 2}, {g1.data(), 3, 1, 2}};
        bp(dY);
    };
    s["decode-not-square"] = [] { mst_heads(xt::xtensor<double, 2>(xt::zeros<double>({2, 3}))); };
    return s;
}

}  // namespace

TEST_CASE("bad-input table: every row's scenario throws that type with that message", "[errors]")
{
    const std::vector<table_row> rows = read_table(k_table);
    REQUIRE(rows.size() >= 20);
    auto runs = scenarios();
    std::map<std::string, int> seen;
    std::ostringstream corrected;  // the rows as they should read
    bool all_ok = true;
    for (const table_row& r : rows) {
        INFO("row " << r.id);
        ++seen[r.id];
        REQUIRE(seen[r.id] == 1);
        const auto it = runs.find(r.id);
        if (it == runs.end()) FAIL("docs/bad-input.md has a row without a scenario in this test: " << r.id);
        std::string type = "(nothing thrown)", message;
        try {
            it->second();
        } catch (const std::exception& e) {
            type = type_name(e);
            message = e.what();
        }
        const bool ok = type == r.type && message == r.message;
        all_ok = all_ok && ok;
        CHECK(type == r.type);
        CHECK(message == r.message);
        corrected << "| `" << r.id << "` | " << r.kind << " | `" << type << "` | `" << message << "` |\n";
    }
    for (const auto& [id, fn] : runs) {
        INFO("scenario " << id);
        CHECK(seen.count(id) == 1);  // every scenario is documented
    }
    if (!all_ok) std::cout << "docs/bad-input.md: the table rows as they should read:\n" << corrected.str();
}

TEST_CASE("bad-input table: every library exception is a biaffine::error, bad_alloc aside", "[errors]")
{
    for (const table_row& r : read_table(k_table)) {
        INFO("row " << r.id);
        CHECK((r.type.rfind("biaffine::", 0) == 0 || r.type == "std::bad_alloc"));
        CHECK(!r.message.empty());
    }
}
