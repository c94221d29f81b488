// biaffine/conllu.hpp - CoNLL-U in and out, and attachment scores as the
// CoNLL 2018 shared task computes them.
//
// I/O, kept apart from compute (as scorer_io.hpp): nothing here includes
// Eigen or xtensor, and no compute header includes this one (only the
// umbrella biaffine.hpp does). It is in the library rather than in examples/
// because tests, benches (--lengths-from) and the examples all read treebanks,
// and a parser built on this library needs exactly this glue: split lengths
// from sentences, split-relative gold heads (the root pointing at itself, as
// cross_entropy_heads and mst_heads take them) and predictions written back.
//
// Reading keeps everything needed to write a file back byte for byte:
// comments, multiword-token lines (`3-4`) and empty nodes (`5.1`) verbatim,
// the ten columns of every word. The basic tree (what is scored) is the
// words only. Malformed input throws conllu_error with "file:line: what".
//
// Text to be parsed comes without a tree: a sentence whose every word has
// HEAD and DEPREL `_` reads as unannotated (head = no_head; written back as
// `_`), so a parser reads raw CoNLL-U, sets heads and relations, and writes
// it. A sentence is parsed or not as a whole: a tree on some words only is an
// error, as is scoring or training on a sentence without one. Known heads
// that form a cycle are an error naming the sentence's first line.
#pragma once

#include <biaffine/abi.hpp>
#include <biaffine/errors.hpp>

#include <cstddef>
#include <fstream>
#include <istream>
#include <ostream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

BIAFFINE_NAMESPACE_BEGIN

/// Malformed CoNLL-U; what() starts with "file:line: ".
class conllu_error : public error {
public:
    using error::error;
};

namespace conllu {

/// The head of a word in a sentence without a tree (HEAD `_`).
constexpr std::size_t no_head = static_cast<std::size_t>(-1);

/// One word line (integer id = its index in the sentence + 1).
struct word {
    std::string form, lemma, upos, xpos, feats;
    std::size_t head = 0;  ///< 0: the root; else the 1-based id of the head word; no_head: `_`
    std::string deprel, deps, misc;
};

/// A line that is not a word: a multiword token or an empty node, kept
/// verbatim with the number of words written before it.
struct extra_line {
    std::size_t after_words = 0;
    std::string text;
};

struct sentence {
    std::vector<std::string> comments;  ///< verbatim, each starting with '#'
    std::vector<word> words;
    std::vector<extra_line> extras;     ///< in file order
    std::size_t line = 0;               ///< 1-based line of its first line in the file

    /// Whether its words carry a tree (HEAD and DEPREL); false when they are `_`.
    bool annotated() const { return words.empty() || words.front().head != no_head; }

    /// Whether a `# newdoc` comment opens it.
    bool newdoc() const
    {
        for (const auto& c : comments)
            if (c.compare(0, 8, "# newdoc") == 0 && (c.size() == 8 || c[8] == ' ' || c[8] == '\t')) return true;
        return false;
    }
};

/// The universal part of a relation: "nsubj:pass" -> "nsubj".
inline std::string universal_relation(const std::string& deprel) { return deprel.substr(0, deprel.find(':')); }

namespace detail {

[[noreturn]] inline void fail(const std::string& file, std::size_t line, const std::string& what)
{
    throw conllu_error(file + ":" + std::to_string(line) + ": " + what);
}

/// A decimal integer without sign or leading zeros (as UD writes ids and
/// heads), so that writing the number back gives the same bytes.
inline bool parse_index(const std::string& s, std::size_t& out)
{
    if (s.empty() || s.size() > 9 || (s.size() > 1 && s[0] == '0')) return false;
    std::size_t v = 0;
    for (char c : s) {
        if (c < '0' || c > '9') return false;
        v = v * 10 + std::size_t(c - '0');
    }
    out = v;
    return true;
}

/// The first cycle among a sentence's known heads, as "2 -> 3 -> 2", or ""
/// when every chain of heads ends at the root or at a `_` head. Heads are
/// already in range (0..n or no_head). O(n): each word is walked once.
inline std::string head_cycle(const std::vector<word>& words)
{
    const std::size_t n = words.size();
    const auto up = [&](std::size_t v) { return words[v - 1].head == no_head ? std::size_t{0} : words[v - 1].head; };
    std::vector<unsigned char> state(n + 1, 0);  // 0 not seen, 1 on the walk, 2 ends at the root or a '_'
    for (std::size_t start = 1; start <= n; ++start) {
        std::size_t v = start;
        while (v != 0 && state[v] == 0) {
            state[v] = 1;
            v = up(v);
        }
        if (v != 0 && state[v] == 1) {
            std::string s = std::to_string(v);
            std::size_t u = v;
            do {
                u = up(u);
                s += " -> " + std::to_string(u);
            } while (u != v);
            return s;
        }
        for (v = start; v != 0 && state[v] == 1; v = up(v)) state[v] = 2;
    }
    return {};
}

inline void split_tabs(const std::string& line, std::vector<std::string>& cols)
{
    cols.clear();
    std::size_t start = 0;
    for (;;) {
        const std::size_t tab = line.find('\t', start);
        cols.emplace_back(line, start, tab == std::string::npos ? std::string::npos : tab - start);
        if (tab == std::string::npos) return;
        start = tab + 1;
    }
}

}  // namespace detail

/// Reads every sentence of a CoNLL-U stream; `name` is the file name errors
/// give. Every sentence, the last included, must end with a blank line.
inline std::vector<sentence> read(std::istream& in, const std::string& name)
{
    std::vector<sentence> out;
    sentence cur;
    bool open = false;     // a line of the current sentence has been read
    bool in_words = false; // past the comments
    std::string line;
    std::vector<std::string> cols;
    std::size_t lineno = 0;
    std::vector<std::size_t> word_lines;  // the current sentence's word lines, for head errors
    std::vector<std::pair<std::size_t, std::size_t>> ranges;  // the multiword tokens' (line, last word)
    while (std::getline(in, line)) {
        ++lineno;
        if (!line.empty() && line.back() == '\r') detail::fail(name, lineno, "carriage return (CRLF line end); CoNLL-U lines end with LF");
        if (lineno == 1 && line.compare(0, 3, "\xEF\xBB\xBF") == 0)
            detail::fail(name, lineno, "UTF-8 byte order mark at the start of the file; CoNLL-U files have none (drop the first 3 bytes)");
        if (line.empty()) {
            if (!open) detail::fail(name, lineno, "blank line where a sentence should start (two blank lines in a row, or a blank first line)");
            if (cur.words.empty()) detail::fail(name, lineno, "sentence without words (only comments / multiword or empty-node lines)");
            for (std::size_t w = 0; w < cur.words.size(); ++w)
                if (cur.words[w].head != no_head && cur.words[w].head > cur.words.size())
                    detail::fail(name, word_lines[w], "head " + std::to_string(cur.words[w].head) + " out of range: the sentence has " +
                                                          std::to_string(cur.words.size()) + " words");
            // A cycle has no path to the root: not a tree (what the scorer's
            // gold heads and the decoders assume).
            if (const std::string c = detail::head_cycle(cur.words); !c.empty())
                detail::fail(name, cur.line, "the heads of the sentence starting here form a cycle (words " + c +
                                                 "): every word's chain of heads must reach the root (HEAD 0)");
            for (const auto& [at, last] : ranges)
                if (last > cur.words.size())
                    detail::fail(name, at, "multiword token ends at word " + std::to_string(last) + " but the sentence has " +
                                               std::to_string(cur.words.size()) + " words");
            out.push_back(std::move(cur));
            cur = sentence{};
            word_lines.clear();
            ranges.clear();
            open = in_words = false;
            continue;
        }
        if (!open) {
            cur.line = lineno;
            open = true;
        }
        if (line[0] == '#') {
            if (in_words) detail::fail(name, lineno, "comment line after the first token line of a sentence");
            cur.comments.push_back(line);
            continue;
        }
        in_words = true;
        detail::split_tabs(line, cols);
        if (cols.size() != 10)
            detail::fail(name, lineno, "expected 10 tab-separated columns, found " + std::to_string(cols.size()));
        const std::string& id = cols[0];
        const std::size_t dash = id.find('-'), dot = id.find('.');
        if (dash != std::string::npos || dot != std::string::npos) {
            // Multiword token a-b (starts at the next word) or empty node i.j (after word i).
            const std::size_t cut = dash != std::string::npos ? dash : dot;
            std::size_t a = 0, b = 0;
            if (!detail::parse_index(id.substr(0, cut), a) || !detail::parse_index(id.substr(cut + 1), b))
                detail::fail(name, lineno, "malformed id '" + id + "'");
            const std::size_t n = cur.words.size();
            if (dash != std::string::npos && (a != n + 1 || b <= a))
                detail::fail(name, lineno, "multiword token '" + id + "' must span " + std::to_string(n + 1) + "-k with k > " +
                                               std::to_string(n + 1));
            if (dash != std::string::npos && !ranges.empty() && a <= ranges.back().second)
                detail::fail(name, lineno, "multiword token '" + id + "' overlaps the one before, which ends at word " +
                                               std::to_string(ranges.back().second));
            if (dash != std::string::npos) ranges.emplace_back(lineno, b);
            if (dot != std::string::npos && (a != n || b == 0))
                detail::fail(name, lineno, "empty node '" + id + "' must be numbered " + std::to_string(n) + ".k, k >= 1");
            cur.extras.push_back({n, line});
            continue;
        }
        std::size_t n = 0;
        if (!detail::parse_index(id, n)) detail::fail(name, lineno, "id '" + id + "' is not a positive integer");
        if (n != cur.words.size() + 1)
            detail::fail(name, lineno, "word id " + id + " out of sequence, expected " + std::to_string(cur.words.size() + 1));
        word w;
        const bool no_tree = cols[6] == "_";
        if (no_tree) {
            w.head = no_head;
            if (cols[7] != "_")
                detail::fail(name, lineno, "word " + id + " has a relation (DEPREL '" + cols[7] + "') but no head (HEAD '_')");
        } else {
            if (!detail::parse_index(cols[6], w.head))
                detail::fail(name, lineno, "head '" + cols[6] + "' is not a non-negative integer or '_'");
            if (w.head == n) detail::fail(name, lineno, "word " + id + " is its own head");
            if (cols[7].empty() || cols[7] == "_") detail::fail(name, lineno, "word " + id + " has no relation (DEPREL)");
        }
        if (!cur.words.empty() && no_tree != (cur.words.front().head == no_head))
            detail::fail(name, lineno, "word " + id + (no_tree ? " has no head ('_')" : " has a head") + " but word 1 of its sentence " +
                                           (no_tree ? "has one" : "has none ('_')") +
                                           ": a sentence carries a tree on every word or on none");
        w.form = std::move(cols[1]);
        w.lemma = std::move(cols[2]);
        w.upos = std::move(cols[3]);
        w.xpos = std::move(cols[4]);
        w.feats = std::move(cols[5]);
        w.deprel = std::move(cols[7]);
        w.deps = std::move(cols[8]);
        w.misc = std::move(cols[9]);
        cur.words.push_back(std::move(w));
        word_lines.push_back(lineno);
    }
    if (open) detail::fail(name, lineno, "missing blank line after the last sentence (the file must end with an empty line)");
    return out;
}

/// Reads a CoNLL-U file; errors name it.
inline std::vector<sentence> read_file(const std::string& path)
{
    std::ifstream in(path, std::ios::binary);
    if (!in) throw conllu_error(path + ": cannot open for reading");
    return read(in, path);
}

/// Writes sentences as CoNLL-U; what read() gave is written back byte for byte.
inline void write(std::ostream& out, const std::vector<sentence>& sentences)
{
    std::string buf;
    for (const sentence& s : sentences) {
        buf.clear();
        for (const auto& c : s.comments) (buf += c) += '\n';
        std::size_t e = 0;
        for (std::size_t i = 0; i <= s.words.size(); ++i) {
            for (; e < s.extras.size() && s.extras[e].after_words == i; ++e) (buf += s.extras[e].text) += '\n';
            if (i == s.words.size()) break;
            const word& w = s.words[i];
            buf += std::to_string(i + 1);
            for (const std::string* f : {&w.form, &w.lemma, &w.upos, &w.xpos, &w.feats}) (buf += '\t') += *f;
            ((buf += '\t') += (w.head == no_head ? std::string("_") : std::to_string(w.head))) += '\t';
            for (const std::string* f : {&w.deprel, &w.deps}) (buf += *f) += '\t';
            (buf += w.misc) += '\n';
        }
        if (e != s.extras.size())
            throw conllu_error("write: the sentence of line " + std::to_string(s.line) + " has a multiword or empty-node line (" +
                               s.extras[e].text.substr(0, s.extras[e].text.find('\t')) + ") after word " +
                               std::to_string(s.extras[e].after_words) + ", out of order or past its " +
                               std::to_string(s.words.size()) + " words");
        buf += '\n';
        out.write(buf.data(), std::streamsize(buf.size()));
    }
}

inline void write_file(const std::string& path, const std::vector<sentence>& sentences)
{
    std::ofstream out(path, std::ios::binary);
    if (!out) throw conllu_error(path + ": cannot open for writing");
    write(out, sentences);
    if (!out) throw conllu_error(path + ": write failed");
}

/// Documents as [begin, end) sentence ranges: a new one at each `# newdoc`
/// when the file has any, else every `every` sentences.
inline std::vector<std::pair<std::size_t, std::size_t>> documents(const std::vector<sentence>& s, std::size_t every = 32)
{
    if (every == 0) throw conllu_error("conllu::documents: every must be positive");
    bool marked = false;
    for (const auto& x : s) marked = marked || x.newdoc();
    std::vector<std::pair<std::size_t, std::size_t>> out;
    for (std::size_t i = 0; i < s.size(); ++i) {
        const bool start = i == 0 || (marked ? s[i].newdoc() : i % every == 0);
        if (start) out.push_back({i, i});
        out.back().second = i + 1;
    }
    return out;
}

/// Split-relative heads as the scorer's losses and decoders take them:
/// word m's head index in 0..n-1, the root pointing at itself.
inline std::vector<std::size_t> scorer_heads(const sentence& s)
{
    if (!s.annotated())
        throw conllu_error("scorer_heads: the sentence of line " + std::to_string(s.line) + " has no tree (HEAD and DEPREL are '_')");
    std::vector<std::size_t> h(s.words.size());
    for (std::size_t m = 0; m < h.size(); ++m) h[m] = s.words[m].head == 0 ? m : s.words[m].head - 1;
    return h;
}

/// The inverse of scorer_heads: sets the HEAD column from split-relative heads
/// (on a sentence read without a tree too: set each word's deprel as well, or
/// the file written will not read back).
inline void set_scorer_heads(sentence& s, const std::vector<std::size_t>& heads)
{
    if (heads.size() != s.words.size())
        throw conllu_error("set_scorer_heads: " + std::to_string(heads.size()) + " heads for a sentence of " +
                           std::to_string(s.words.size()) + " words (line " + std::to_string(s.line) + ")");
    for (std::size_t m = 0; m < heads.size(); ++m)  // all checked first: an error leaves the sentence as it was
        if (heads[m] >= heads.size())
            throw conllu_error("set_scorer_heads: head " + std::to_string(heads[m]) + " out of range for word " +
                               std::to_string(m + 1) + " of " + std::to_string(heads.size()));
    for (std::size_t m = 0; m < heads.size(); ++m) s.words[m].head = heads[m] == m ? 0 : heads[m] + 1;
}

/// Attachment scores over words (multiword tokens and empty nodes are not
/// words). As the CoNLL 2018 shared task: UAS = head right, LAS = head and
/// universal relation (before ':') right, punctuation included. The `_np`
/// counts leave out words whose *gold* UPOS is PUNCT.
struct attachment_scores {
    std::size_t words = 0, heads = 0, labelled = 0;
    std::size_t words_np = 0, heads_np = 0, labelled_np = 0;

    static double pct(std::size_t a, std::size_t b) { return b == 0 ? 0.0 : 100.0 * double(a) / double(b); }
    double uas() const { return pct(heads, words); }
    double las() const { return pct(labelled, words); }
    double uas_no_punct() const { return pct(heads_np, words_np); }
    double las_no_punct() const { return pct(labelled_np, words_np); }
};

/// Scores `system` against `gold`. Both must have the same sentences and
/// words (same forms): the shared task aligns differing tokenisations by
/// characters; a parser on gold tokens never needs that, so a mismatch is
/// an error here, named by the gold line.
inline attachment_scores evaluate(const std::vector<sentence>& gold, const std::vector<sentence>& system)
{
    if (gold.size() != system.size())
        throw conllu_error("evaluate: gold has " + std::to_string(gold.size()) + " sentences, system " +
                           std::to_string(system.size()));
    attachment_scores r;
    for (std::size_t i = 0; i < gold.size(); ++i) {
        const auto& g = gold[i].words;
        const auto& s = system[i].words;
        for (const auto* x : {&gold[i], &system[i]})
            if (!x->annotated())
                throw conllu_error(std::string("evaluate: the ") + (x == &gold[i] ? "gold" : "system") + " sentence of line " +
                                   std::to_string(x->line) + " has no tree (HEAD and DEPREL are '_')");
        if (g.size() != s.size())
            throw conllu_error("evaluate: sentence " + std::to_string(i + 1) + " (gold line " + std::to_string(gold[i].line) +
                               ") has " + std::to_string(g.size()) + " gold words, " + std::to_string(s.size()) + " system words");
        for (std::size_t m = 0; m < g.size(); ++m) {
            if (g[m].form != s[m].form)
                throw conllu_error("evaluate: word " + std::to_string(m + 1) + " of the sentence at gold line " +
                                   std::to_string(gold[i].line) + " differs: '" + g[m].form + "' vs '" + s[m].form + "'");
            const bool head = g[m].head == s[m].head;
            const bool lab = head && universal_relation(g[m].deprel) == universal_relation(s[m].deprel);
            r.words += 1;
            r.heads += head;
            r.labelled += lab;
            if (g[m].upos != "PUNCT") {
                r.words_np += 1;
                r.heads_np += head;
                r.labelled_np += lab;
            }
        }
    }
    return r;
}

}  // namespace conllu
BIAFFINE_NAMESPACE_END
