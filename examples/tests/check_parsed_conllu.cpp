// check_parsed_conllu - the test of what train_treebank_parser --parse IN
// --out OUT writes: OUT reads back with the library's CoNLL-U reader (which
// rejects head cycles and heads out of range), every word has a head and a
// relation and a UPOS tag (predicted where IN has `_`), each sentence has
// exactly one root, and the sentences and words are IN's: the same forms in
// the same order (IN plain text: its whitespace-separated tokens, one
// sentence a non-blank line; IN CoNLL-U: also the same comments,
// multiword/empty-node lines and columns other than HEAD and DEPREL, UPOS
// where IN has one).
//
//   check_parsed_conllu OUT IN
//
// Exit status: 0 when all of that holds, 1 naming the first thing that does
// not, 2 on bad usage or unreadable files.

#include <biaffine/conllu.hpp>

#include <cstddef>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

namespace {

namespace conllu = biaffine::conllu;

struct failed {
    std::string what;
};

void require(bool ok, const std::string& what)
{
    if (!ok) throw failed{what};
}

// The token lists of a plain-text file, split independently of the parser's reader.
std::vector<std::vector<std::string>> text_tokens(const std::string& path)
{
    std::ifstream in(path, std::ios::binary);
    if (!in) throw biaffine::conllu_error(path + ": cannot open for reading");
    std::vector<std::vector<std::string>> out;
    for (std::string line; std::getline(in, line);) {
        std::vector<std::string> toks;
        std::string cur;
        for (char c : line + ' ') {
            if (c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f') {
                if (!cur.empty()) toks.push_back(cur);
                cur.clear();
            } else {
                cur += c;
            }
        }
        if (!toks.empty()) out.push_back(toks);
    }
    return out;
}

}  // namespace

int main(int argc, char** argv)
{
    if (argc != 3) {
        std::cerr << "usage: check_parsed_conllu OUT IN\n";
        return 2;
    }
    const std::string out_path = argv[1], in_path = argv[2];
    try {
        const auto out = conllu::read_file(out_path);
        const bool text = in_path.size() >= 4 && in_path.compare(in_path.size() - 4, 4, ".txt") == 0;
        std::vector<conllu::sentence> in;
        std::vector<std::vector<std::string>> tokens;
        if (text) {
            tokens = text_tokens(in_path);
        } else {
            in = conllu::read_file(in_path);
            for (const auto& s : in) {
                tokens.emplace_back();
                for (const auto& w : s.words) tokens.back().push_back(w.form);
            }
        }
        require(out.size() == tokens.size(), out_path + " has " + std::to_string(out.size()) + " sentences, " + in_path + " " +
                                                 std::to_string(tokens.size()));
        std::size_t words = 0;
        for (std::size_t i = 0; i < out.size(); ++i) {
            const auto& s = out[i];
            const std::string where = out_path + ":" + std::to_string(s.line) + ": ";
            require(s.words.size() == tokens[i].size(), where + std::to_string(s.words.size()) + " words, the input sentence " +
                                                            std::to_string(tokens[i].size()));
            std::size_t roots = 0;
            for (std::size_t m = 0; m < s.words.size(); ++m) {
                const auto& w = s.words[m];
                require(w.form == tokens[i][m], where + "word " + std::to_string(m + 1) + " is '" + w.form + "', the input's '" +
                                                    tokens[i][m] + "'");
                require(w.head != conllu::no_head && w.head <= s.words.size(), where + "word " + std::to_string(m + 1) + " has no head");
                require(!w.deprel.empty() && w.deprel != "_", where + "word " + std::to_string(m + 1) + " has no relation");
                require(w.upos != "_", where + "word " + std::to_string(m + 1) + " has no UPOS (the parser's tagger fills it in)");
                roots += w.head == 0;
                if (!text) {
                    const auto& g = in[i].words[m];
                    require(w.lemma == g.lemma && (w.upos == g.upos || g.upos == "_") && w.xpos == g.xpos && w.feats == g.feats && w.deps == g.deps &&
                                w.misc == g.misc,
                            where + "word " + std::to_string(m + 1) + ": a column other than HEAD and DEPREL changed");
                }
            }
            require(roots == 1, where + std::to_string(roots) + " roots (HEAD 0), expected exactly one");
            if (!text) {
                require(s.comments == in[i].comments, where + "comments differ from the input's");
                require(s.extras.size() == in[i].extras.size(), where + "multiword / empty-node lines differ from the input's");
                for (std::size_t e = 0; e < s.extras.size(); ++e)
                    require(s.extras[e].text == in[i].extras[e].text && s.extras[e].after_words == in[i].extras[e].after_words,
                            where + "multiword / empty-node line " + std::to_string(e + 1) + " differs from the input's");
            }
            words += s.words.size();
        }
        std::cout << out_path << ": " << out.size() << " sentences, " << words
                  << " words of the input, each with a head and a relation, one root per sentence\n";
        return 0;
    } catch (const failed& f) {
        std::cerr << "check_parsed_conllu: " << f.what << "\n";
        return 1;
    } catch (const std::exception& e) {
        std::cerr << "check_parsed_conllu: " << e.what() << "\n";
        return 2;
    }
}
