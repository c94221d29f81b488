// Tests for biaffine/conllu.hpp: byte-exact round trips of the shipped UD
// English EWT sample (counts checked against grep of the files, see
// tests/data/ud-english-ewt-sample/README.md), documents by # newdoc and
// every N sentences, split-relative heads, hand-written malformed snippets
// (each must name the file and the line), and attachment scores against a
// case computed by hand.
#include <catch2/catch.hpp>

#include <cstddef>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include "biaffine/conllu.hpp"

using namespace biaffine;

namespace {

const std::string sample_dir = std::string(BIAFFINE_TEST_DATA_DIR) + "/ud-english-ewt-sample/";

std::string slurp(const std::string& path)
{
    std::ifstream in(path, std::ios::binary);
    REQUIRE(in);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

std::vector<conllu::sentence> parse(const std::string& text, const std::string& name = "snippet.conllu")
{
    std::istringstream in(text);
    return conllu::read(in, name);
}

std::string render(const std::vector<conllu::sentence>& s)
{
    std::ostringstream out;
    conllu::write(out, s);
    return out.str();
}

// A word line with the given id, form, upos, head and relation.
std::string w(const std::string& id, const std::string& form, const std::string& upos, const std::string& head,
              const std::string& rel)
{
    return id + "\t" + form + "\t_\t" + upos + "\t_\t_\t" + head + "\t" + rel + "\t_\t_\n";
}

void require_error(const std::string& text, const std::string& where, const std::string& what)
{
    try {
        parse(text);
        FAIL("no error for: " << what);
    } catch (const conllu_error& e) {
        const std::string msg = e.what();
        INFO(msg);
        CHECK(msg.rfind(where, 0) == 0);
        CHECK(msg.find(what) != std::string::npos);
    }
}

}  // namespace

TEST_CASE("the EWT sample reads and writes back byte for byte")
{
    struct expect {
        const char* file;
        std::size_t sentences, words, extras, newdocs;
    };
    // Counts from grep: blank lines, '^\d+\t', '^\d+[-.]', '# newdoc'.
    for (const expect& e : {expect{"en_ewt-sample-train.conllu", 400, 9323, 88 + 3, 9},
                            expect{"en_ewt-sample-dev.conllu", 150, 3145, 51 + 1, 12}}) {
        INFO(e.file);
        const std::string path = sample_dir + e.file;
        const auto s = conllu::read_file(path);
        std::size_t words = 0, extras = 0, newdocs = 0;
        for (const auto& x : s) {
            words += x.words.size();
            extras += x.extras.size();
            newdocs += x.newdoc();
        }
        CHECK(s.size() == e.sentences);
        CHECK(words == e.words);
        CHECK(extras == e.extras);
        CHECK(newdocs == e.newdocs);
        CHECK(conllu::documents(s).size() == e.newdocs);
        CHECK(render(s) == slurp(path));
    }
}

TEST_CASE("multiword tokens and empty nodes stay in place but are not words")
{
    const std::string text = "# sent_id = a\n# text = I don't know\n" + w("1", "I", "PRON", "3", "nsubj") +
                             "2-3\tdon't\t_\t_\t_\t_\t_\t_\t_\t_\n" + w("2", "do", "AUX", "4", "aux") +
                             w("3", "n't", "PART", "4", "advmod") + w("4", "know", "VERB", "0", "root") +
                             "4.1\tknow\tknow\tVERB\t_\t_\t_\t_\t0:root\t_\n\n";
    const auto s = parse(text);
    REQUIRE(s.size() == 1);
    REQUIRE(s[0].words.size() == 4);
    CHECK(s[0].comments.size() == 2);
    REQUIRE(s[0].extras.size() == 2);
    CHECK(s[0].extras[0].after_words == 1);
    CHECK(s[0].extras[1].after_words == 4);
    CHECK(s[0].words[2].form == "n't");
    CHECK(render(s) == text);
    CHECK(conllu::scorer_heads(s[0]) == std::vector<std::size_t>{2, 3, 3, 3});
    auto t = s;
    conllu::set_scorer_heads(t[0], {3, 3, 3, 3});
    CHECK(t[0].words[0].head == 4);
    CHECK(t[0].words[3].head == 0);
    CHECK_THROWS_AS(conllu::set_scorer_heads(t[0], {3, 3, 3}), conllu_error);
    CHECK_THROWS_AS(conllu::set_scorer_heads(t[0], {3, 3, 4, 3}), conllu_error);
    // A rejected head list leaves every head as it was, not only those after the bad one.
    CHECK_THROWS_AS(conllu::set_scorer_heads(t[0], {0, 0, 9, 0}), conllu_error);
    CHECK(t[0].words[0].head == 4);
    // Nothing read back is silently dropped on writing: an extra line past the
    // words (or out of order) is an error, not a missing line.
    auto u = s;
    u[0].extras.push_back({7, "7.1\tx\t_\t_\t_\t_\t_\t_\t_\t_"});
    CHECK_THROWS_WITH(render(u), Catch::Contains("(7.1) after word 7, out of order or past its 4 words"));
}

TEST_CASE("documents: by # newdoc when the file has any, else every N sentences")
{
    std::string one = w("1", "x", "X", "0", "root") + "\n";
    std::string text;
    for (int i = 0; i < 7; ++i) text += one;
    const auto s = parse(text);
    const auto d3 = conllu::documents(s, 3);
    REQUIRE(d3.size() == 3);
    CHECK(d3[0] == std::pair<std::size_t, std::size_t>{0, 3});
    CHECK(d3[2] == std::pair<std::size_t, std::size_t>{6, 7});
    const auto marked = parse(one + "# newdoc id = b\n" + one + one + "# newdoc\n" + one);
    const auto dm = conllu::documents(marked, 1);
    REQUIRE(dm.size() == 3);  // the first sentence opens a document even unmarked
    CHECK(dm[1] == std::pair<std::size_t, std::size_t>{1, 3});
    CHECK_THROWS_AS(conllu::documents(s, 0), conllu_error);
}

TEST_CASE("malformed CoNLL-U names the file and the line")
{
    const std::string ok = w("1", "a", "X", "0", "root");
    require_error(ok + "2\tb\t_\tX\t_\t_\t1\tdep\t_\n\n", "snippet.conllu:2:", "expected 10 tab-separated columns, found 9");
    require_error(ok + w("2", "b", "X", "one", "dep") + "\n", "snippet.conllu:2:", "head 'one' is not");
    require_error(ok + w("2", "b", "X", "-1", "dep") + "\n", "snippet.conllu:2:", "head '-1'");
    require_error(ok + w("2", "b", "X", "3", "dep") + "\n", "snippet.conllu:2:", "head 3 out of range");
    require_error(ok + w("2", "b", "X", "2", "dep") + "\n", "snippet.conllu:2:", "its own head");
    require_error(ok + w("3", "b", "X", "1", "dep") + "\n", "snippet.conllu:2:", "word id 3 out of sequence, expected 2");
    require_error(w("0", "a", "X", "0", "root") + "\n", "snippet.conllu:1:", "out of sequence");
    require_error(w("x", "a", "X", "0", "root") + "\n", "snippet.conllu:1:", "id 'x' is not");
    require_error(ok, "snippet.conllu:1:", "missing blank line after the last sentence");
    require_error(ok + "\n" + ok, "snippet.conllu:3:", "missing blank line");
    require_error(ok + "\n\n" + ok + "\n", "snippet.conllu:3:", "blank line where a sentence should start");
    require_error(ok + "# late\n\n", "snippet.conllu:2:", "comment line after");
    require_error("# only a comment\n\n", "snippet.conllu:2:", "sentence without words");
    require_error(ok + "3-4\tab\t_\t_\t_\t_\t_\t_\t_\t_\n" + w("2", "b", "X", "1", "dep") + "\n", "snippet.conllu:2:",
                  "multiword token '3-4'");
    require_error(ok + "2.1\tb\t_\t_\t_\t_\t_\t_\t_\t_\n\n", "snippet.conllu:2:", "empty node '2.1'");
    // A multiword token past the sentence's last word, and two that overlap.
    require_error("1-3\tab\t_\t_\t_\t_\t_\t_\t_\t_\n" + ok + w("2", "b", "X", "1", "dep") + "\n", "snippet.conllu:1:",
                  "multiword token ends at word 3 but the sentence has 2 words");
    require_error("1-2\tab\t_\t_\t_\t_\t_\t_\t_\t_\n" + ok + "2-3\tbc\t_\t_\t_\t_\t_\t_\t_\t_\n" +
                      w("2", "b", "X", "1", "dep") + w("3", "c", "X", "1", "dep") + "\n",
                  "snippet.conllu:3:", "multiword token '2-3' overlaps the one before, which ends at word 2");
    require_error(ok + w("2", "b", "X", "1", "_") + "\n", "snippet.conllu:2:", "no relation");
    require_error("1\ta\t_\tX\t_\t_\t0\troot\t_\t_\r\n\r\n", "snippet.conllu:1:", "carriage return");
    CHECK_THROWS_WITH(conllu::read_file(sample_dir + "no-such-file.conllu"), Catch::Contains("no-such-file.conllu: cannot open"));
}

TEST_CASE("heads that form a cycle are an error naming the file and the sentence's first line")
{
    const std::string ok = w("1", "a", "X", "0", "root") + "\n";  // lines 1-2
    // Lines 3-7: a comment, then a root and a 2-cycle (2 -> 3 -> 2).
    const std::string two = "# sent_id = 2\n" + w("1", "a", "X", "0", "root") + w("2", "b", "X", "3", "dep") +
                            w("3", "c", "X", "2", "dep") + "\n";
    require_error(ok + two, "snippet.conllu:3:", "form a cycle (words 2 -> 3 -> 2)");
    // No root at all: every chain ends in the cycle 1 -> 2 -> 3 -> 1.
    require_error(w("1", "a", "X", "2", "dep") + w("2", "b", "X", "3", "dep") + w("3", "c", "X", "1", "dep") + "\n",
                  "snippet.conllu:1:", "form a cycle (words 1 -> 2 -> 3 -> 1)");
    // A chain into a cycle (4 -> 2 -> 3 -> 2) names the cycle, not the chain.
    require_error(w("1", "a", "X", "0", "root") + w("2", "b", "X", "3", "dep") + w("3", "c", "X", "2", "dep") +
                      w("4", "d", "X", "2", "dep") + "\n",
                  "snippet.conllu:1:", "(words 2 -> 3 -> 2)");
    // Trees (deep chains, several roots as some treebanks' fragments) and
    // sentences without heads ('_') still read.
    const auto trees = parse(ok + w("1", "a", "X", "2", "dep") + w("2", "b", "X", "3", "dep") +
                             w("3", "c", "X", "0", "root") + w("4", "d", "X", "3", "dep") + "\n" +
                             "1\ta\t_\tX\t_\t_\t_\t_\t_\t_\n2\tb\t_\tX\t_\t_\t_\t_\t_\t_\n\n");
    REQUIRE(trees.size() == 3);
    CHECK(trees[1].words[0].head == 2);
    CHECK_FALSE(trees[2].annotated());
}

TEST_CASE("attachment scores as the CoNLL 2018 shared task: words, universal relations, and without punctuation")
{
    // Gold: 5 words, one of them PUNCT, plus a multiword token that must not count.
    const std::string gold = "1-2\tIt's\t_\t_\t_\t_\t_\t_\t_\t_\n" + w("1", "It", "PRON", "3", "nsubj") +
                             w("2", "'s", "AUX", "3", "cop") + w("3", "late", "ADJ", "0", "root") +
                             w("4", "now", "ADV", "3", "advmod") + w("5", ".", "PUNCT", "3", "punct") + "\n";
    // System: word 1 right with a subtype (the universal part counts: LAS hit);
    // word 2 right head, wrong label; word 3 right; word 4 wrong head, right
    // label; word 5 (PUNCT) right head, wrong label.
    const std::string sys = "1-2\tIt's\t_\t_\t_\t_\t_\t_\t_\t_\n" + w("1", "It", "PRON", "3", "nsubj:outer") +
                            w("2", "'s", "AUX", "3", "aux") + w("3", "late", "ADJ", "0", "root") +
                            w("4", "now", "ADV", "2", "advmod") + w("5", ".", "PUNCT", "3", "dep") + "\n";
    const auto r = conllu::evaluate(parse(gold), parse(sys));
    // By hand: heads right for words 1,2,3,5 (4 of 5); labelled for 1,3 (2 of 5).
    // Without punctuation: words 1-4: heads 1,2,3 (3 of 4), labelled 1,3 (2 of 4).
    CHECK(r.words == 5);
    CHECK(r.uas() == Approx(80.0));
    CHECK(r.las() == Approx(40.0));
    CHECK(r.words_np == 4);
    CHECK(r.uas_no_punct() == Approx(75.0));
    CHECK(r.las_no_punct() == Approx(50.0));
    // The gold file against itself scores 100 on the sample.
    const auto dev = conllu::read_file(sample_dir + "en_ewt-sample-dev.conllu");
    const auto self = conllu::evaluate(dev, dev);
    CHECK(self.words == 3145);
    CHECK(self.las() == Approx(100.0));
    // Mismatched tokenisation is an error, not a silent alignment.
    auto other = parse(sys);
    other[0].words[3].form = "then";
    CHECK_THROWS_WITH(conllu::evaluate(parse(gold), other), Catch::Contains("'now' vs 'then'"));
    CHECK_THROWS_AS(conllu::evaluate(parse(gold), {}), conllu_error);
}

TEST_CASE("a parser's output on the dev sample scores as recorded (the Python mirror checks the same file)")
{
    std::ifstream in(sample_dir + "en_ewt-sample-dev.system.scores");
    REQUIRE(in);
    std::string key;
    std::size_t want[6] = {};
    for (std::size_t& v : want) in >> key >> v;
    REQUIRE(in);
    const auto r = conllu::evaluate(conllu::read_file(sample_dir + "en_ewt-sample-dev.conllu"),
                                    conllu::read_file(sample_dir + "en_ewt-sample-dev.system.conllu"));
    CHECK(r.words == want[0]);
    CHECK(r.heads == want[1]);
    CHECK(r.labelled == want[2]);
    CHECK(r.words_np == want[3]);
    CHECK(r.heads_np == want[4]);
    CHECK(r.labelled_np == want[5]);
    CHECK(r.labelled < r.heads);  // some relations wrong at right heads: the label comparison is exercised
}

namespace {

// The text with HEAD and DEPREL of every word line replaced by '_' (what a
// parser is given to parse).
std::string without_trees(const std::string& text)
{
    std::istringstream in(text);
    std::string line, out;
    std::vector<std::string> cols;
    while (std::getline(in, line)) {
        if (!line.empty() && line[0] != '#') {
            cols.clear();
            std::size_t start = 0;
            for (std::size_t tab; (tab = line.find('\t', start)) != std::string::npos; start = tab + 1)
                cols.push_back(line.substr(start, tab - start));
            cols.push_back(line.substr(start));
            REQUIRE(cols.size() == 10);
            if (cols[0].find_first_of("-.") == std::string::npos) cols[6] = cols[7] = "_";
            line = cols[0];
            for (std::size_t c = 1; c < cols.size(); ++c) line += "\t" + cols[c];
        }
        out += line + "\n";
    }
    return out;
}

}  // namespace

TEST_CASE("a sentence without a tree (HEAD and DEPREL '_') reads, writes back, and is parsed by setting heads and relations")
{
    const std::string gold_text = slurp(sample_dir + "en_ewt-sample-dev.conllu");
    const std::string raw_text = without_trees(gold_text);
    REQUIRE(raw_text != gold_text);
    auto raw = parse(raw_text, "raw.conllu");
    const auto gold = conllu::read_file(sample_dir + "en_ewt-sample-dev.conllu");
    REQUIRE(raw.size() == gold.size());
    for (const auto& s : raw) {
        CHECK_FALSE(s.annotated());
        CHECK(s.words.front().head == conllu::no_head);
    }
    CHECK(render(raw) == raw_text);  // '_' written back
    // A parser's step: heads and relations set on the unannotated sentences
    // give back the annotated file, byte for byte (here from the gold trees).
    for (std::size_t i = 0; i < raw.size(); ++i) {
        conllu::set_scorer_heads(raw[i], conllu::scorer_heads(gold[i]));
        for (std::size_t m = 0; m < raw[i].words.size(); ++m) raw[i].words[m].deprel = gold[i].words[m].deprel;
    }
    CHECK(render(raw) == gold_text);

    // Without a tree there is nothing to score or to train on.
    const auto bare = parse(w("1", "a", "X", "_", "_") + w("2", "b", "X", "_", "_") + "\n");
    CHECK_THROWS_WITH(conllu::scorer_heads(bare[0]), Catch::Contains("line 1 has no tree"));
    const auto tree = parse(w("1", "a", "X", "0", "root") + w("2", "b", "X", "1", "dep") + "\n");
    CHECK_THROWS_WITH(conllu::evaluate(tree, bare), Catch::Contains("the system sentence of line 1 has no tree"));
    CHECK_THROWS_WITH(conllu::evaluate(bare, tree), Catch::Contains("the gold sentence of line 1 has no tree"));
    // A tree on some words only, a relation without a head, and a byte order mark.
    require_error(w("1", "a", "X", "0", "root") + w("2", "b", "X", "_", "_") + "\n", "snippet.conllu:2:",
                  "word 2 has no head ('_') but word 1 of its sentence has one");
    require_error(w("1", "a", "X", "_", "_") + w("2", "b", "X", "1", "dep") + "\n", "snippet.conllu:2:",
                  "word 2 has a head but word 1 of its sentence has none");
    require_error(w("1", "a", "X", "_", "root") + "\n", "snippet.conllu:1:", "has a relation (DEPREL 'root') but no head");
    require_error("\xEF\xBB\xBF" + w("1", "a", "X", "0", "root") + "\n", "snippet.conllu:1:", "byte order mark");
}
