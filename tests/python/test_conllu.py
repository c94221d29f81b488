# biaffine.conllu, the pure-Python mirror of biaffine/conllu.hpp: the same
# checks on the same shipped EWT sample and snippets as tests/test_conllu.cpp,
# and the same scores on the same files as the C++ evaluation
# (tests/data/ud-english-ewt-sample/cpp_scores.txt, written by the C++ side).
import pytest

from biaffine import conllu


@pytest.fixture(scope="module")
def sample(data_dir):
    return data_dir / "ud-english-ewt-sample"


def w(i, form, upos, head, rel):
    return f"{i}\t{form}\t_\t{upos}\t_\t_\t{head}\t{rel}\t_\t_\n"


@pytest.mark.parametrize("name,sentences,words,extras,newdocs", [
    ("en_ewt-sample-train.conllu", 400, 9323, 88 + 3, 9),
    ("en_ewt-sample-dev.conllu", 150, 3145, 51 + 1, 12),
])
def test_sample_round_trip(sample, tmp_path, name, sentences, words, extras, newdocs):
    path = sample / name
    s = conllu.read(path)
    assert len(s) == sentences
    assert sum(len(x.words) for x in s) == words
    assert sum(len(x.extras) for x in s) == extras
    assert sum(x.newdoc for x in s) == newdocs
    assert len(conllu.documents(s)) == newdocs
    out = tmp_path / "out.conllu"
    conllu.write(out, s)
    assert out.read_bytes() == path.read_bytes()


def test_multiword_and_empty_nodes():
    text = ("# sent_id = a\n# text = I don't know\n" + w(1, "I", "PRON", 4, "nsubj")
            + "2-3\tdon't\t_\t_\t_\t_\t_\t_\t_\t_\n" + w(2, "do", "AUX", 4, "aux") + w(3, "n't", "PART", 4, "advmod")
            + w(4, "know", "VERB", 0, "root") + "4.1\tknow\tknow\tVERB\t_\t_\t_\t_\t0:root\t_\n\n")
    s = conllu.parse(text)
    assert len(s) == 1 and len(s[0].words) == 4 and len(s[0].comments) == 2
    assert [e[0] for e in s[0].extras] == [1, 4]
    assert conllu.format_sentences(s) == text
    assert conllu.scorer_heads(s[0]) == [3, 3, 3, 3]
    conllu.set_scorer_heads(s[0], [1, 3, 3, 3])
    assert s[0].words[0].head == 2 and s[0].words[3].head == 0
    with pytest.raises(conllu.ConlluError):
        conllu.set_scorer_heads(s[0], [3, 3, 3])
    with pytest.raises(conllu.ConlluError):
        conllu.set_scorer_heads(s[0], [3, 3, 4, 3])


def test_documents_every_n():
    one = w(1, "x", "X", 0, "root") + "\n"
    s = conllu.parse(one * 7)
    assert conllu.documents(s, 3) == [(0, 3), (3, 6), (6, 7)]
    marked = conllu.parse(one + "# newdoc id = b\n" + one + one + "# newdoc\n" + one)
    assert conllu.documents(marked, 1) == [(0, 1), (1, 3), (3, 4)]
    with pytest.raises(conllu.ConlluError):
        conllu.documents(s, 0)


OK = w(1, "a", "X", 0, "root")


@pytest.mark.parametrize("text,where,what", [
    (OK + "2\tb\t_\tX\t_\t_\t1\tdep\t_\n\n", ":2:", "expected 10 tab-separated columns, found 9"),
    (OK + w(2, "b", "X", "one", "dep") + "\n", ":2:", "head 'one' is not"),
    (OK + w(2, "b", "X", "-1", "dep") + "\n", ":2:", "head '-1'"),
    (OK + w(2, "b", "X", 3, "dep") + "\n", ":2:", "head 3 out of range"),
    (OK + w(2, "b", "X", 2, "dep") + "\n", ":2:", "its own head"),
    (OK + w(3, "b", "X", 1, "dep") + "\n", ":2:", "word id 3 out of sequence, expected 2"),
    (w(0, "a", "X", 0, "root") + "\n", ":1:", "out of sequence"),
    (w("x", "a", "X", 0, "root") + "\n", ":1:", "id 'x' is not"),
    (OK, ":1:", "missing blank line after the last sentence"),
    (OK + "\n" + OK, ":3:", "missing blank line"),
    (OK + "\n\n" + OK + "\n", ":3:", "blank line where a sentence should start"),
    (OK + "# late\n\n", ":2:", "comment line after"),
    ("# only a comment\n\n", ":2:", "sentence without words"),
    (OK + "3-4\tab\t_\t_\t_\t_\t_\t_\t_\t_\n" + w(2, "b", "X", 1, "dep") + "\n", ":2:", "multiword token '3-4'"),
    (OK + "2.1\tb\t_\t_\t_\t_\t_\t_\t_\t_\n\n", ":2:", "empty node '2.1'"),
    ("1-3\tab\t_\t_\t_\t_\t_\t_\t_\t_\n" + OK + w(2, "b", "X", 1, "dep") + "\n", ":1:",
     "multiword token ends at word 3 but the sentence has 2 words"),
    ("1-2\tab\t_\t_\t_\t_\t_\t_\t_\t_\n" + OK + "2-3\tbc\t_\t_\t_\t_\t_\t_\t_\t_\n" + w(2, "b", "X", 1, "dep")
     + w(3, "c", "X", 1, "dep") + "\n", ":3:", "multiword token '2-3' overlaps the one before, which ends at word 2"),
    (OK + w(2, "b", "X", 1, "_") + "\n", ":2:", "no relation"),
    ("1\ta\t_\tX\t_\t_\t0\troot\t_\t_\r\n\r\n", ":1:", "carriage return"),
])
def test_malformed_names_file_and_line(text, where, what):
    with pytest.raises(conllu.ConlluError) as e:
        conllu.parse(text, "snippet.conllu")
    msg = str(e.value)
    assert msg.startswith("snippet.conllu" + where), msg
    assert what in msg, msg


def test_missing_file(tmp_path):
    with pytest.raises(conllu.ConlluError, match="nope.conllu: cannot open"):
        conllu.read(tmp_path / "nope.conllu")


def test_scores_hand_computed():
    mwt = "1-2\tIt's\t_\t_\t_\t_\t_\t_\t_\t_\n"
    gold = (mwt + w(1, "It", "PRON", 3, "nsubj") + w(2, "'s", "AUX", 3, "cop") + w(3, "late", "ADJ", 0, "root")
            + w(4, "now", "ADV", 3, "advmod") + w(5, ".", "PUNCT", 3, "punct") + "\n")
    sys_ = (mwt + w(1, "It", "PRON", 3, "nsubj:outer") + w(2, "'s", "AUX", 3, "aux") + w(3, "late", "ADJ", 0, "root")
            + w(4, "now", "ADV", 2, "advmod") + w(5, ".", "PUNCT", 3, "dep") + "\n")
    # By hand (as in test_conllu.cpp): heads 4/5, labelled 2/5; without PUNCT 3/4 and 2/4.
    r = conllu.evaluate(conllu.parse(gold), conllu.parse(sys_))
    assert (r.words, r.heads, r.labelled, r.words_np, r.heads_np, r.labelled_np) == (5, 4, 2, 4, 3, 2)
    assert r.uas == pytest.approx(80) and r.las == pytest.approx(40)
    assert r.uas_no_punct == pytest.approx(75) and r.las_no_punct == pytest.approx(50)
    other = conllu.parse(sys_)
    other[0].words[3].form = "then"
    with pytest.raises(conllu.ConlluError, match="'now' vs 'then'"):
        conllu.evaluate(conllu.parse(gold), other)
    with pytest.raises(conllu.ConlluError):
        conllu.evaluate(conllu.parse(gold), [])


def test_same_scores_as_cpp(sample):
    # The counts the C++ evaluation gives on the same two files (tests/test_conllu.cpp checks them too).
    tokens = (sample / "en_ewt-sample-dev.system.scores").read_text().split()
    want = dict(zip(tokens[0::2], map(int, tokens[1::2])))
    r = conllu.evaluate(conllu.read(sample / "en_ewt-sample-dev.conllu"),
                        conllu.read(sample / "en_ewt-sample-dev.system.conllu"))
    assert {k: getattr(r, k) for k in want} == want
    assert len(want) == 6


def test_write_drops_nothing():
    s = conllu.parse(OK + "\n")
    s[0].extras.append((7, "7.1\tx\t_\t_\t_\t_\t_\t_\t_\t_"))
    with pytest.raises(conllu.ConlluError, match=r"\(7\.1\) after word 7, out of order or past its 1 words"):
        conllu.format_sentences(s)


def _without_trees(text):
    out = []
    for line in text.split("\n"):
        if line and not line.startswith("#"):
            cols = line.split("\t")
            if "-" not in cols[0] and "." not in cols[0]:
                cols[6] = cols[7] = "_"
            line = "\t".join(cols)
        out.append(line)
    return "\n".join(out)


def test_sentences_without_trees_read_write_and_parse(sample):
    gold_path = sample / "en_ewt-sample-dev.conllu"
    gold_text = gold_path.read_text(encoding="utf-8")
    raw_text = _without_trees(gold_text)
    assert raw_text != gold_text
    raw = conllu.parse(raw_text, "raw.conllu")
    gold = conllu.read(gold_path)
    assert len(raw) == len(gold)
    assert not any(s.annotated for s in raw)
    assert all(w.head is None for s in raw for w in s.words)
    assert conllu.format_sentences(raw) == raw_text
    for r, g in zip(raw, gold):
        conllu.set_scorer_heads(r, conllu.scorer_heads(g))
        for rw, gw in zip(r.words, g.words):
            rw.deprel = gw.deprel
    assert conllu.format_sentences(raw) == gold_text

    bare = conllu.parse(w(1, "a", "X", "_", "_") + w(2, "b", "X", "_", "_") + "\n")
    with pytest.raises(conllu.ConlluError, match="line 1 has no tree"):
        conllu.scorer_heads(bare[0])
    tree = conllu.parse(w(1, "a", "X", 0, "root") + w(2, "b", "X", 1, "dep") + "\n")
    with pytest.raises(conllu.ConlluError, match="the system sentence of line 1 has no tree"):
        conllu.evaluate(tree, bare)
    with pytest.raises(conllu.ConlluError, match="the gold sentence of line 1 has no tree"):
        conllu.evaluate(bare, tree)


@pytest.mark.parametrize("text,where,what", [
    (w(1, "a", "X", 0, "root") + w(2, "b", "X", "_", "_") + "\n", ":2:",
     "word 2 has no head ('_') but word 1 of its sentence has one"),
    (w(1, "a", "X", "_", "_") + w(2, "b", "X", 1, "dep") + "\n", ":2:",
     "word 2 has a head but word 1 of its sentence has none"),
    (w(1, "a", "X", "_", "root") + "\n", ":1:", "has a relation (DEPREL 'root') but no head"),
    ("\ufeff" + w(1, "a", "X", 0, "root") + "\n", ":1:", "byte order mark"),
])
def test_partial_trees_and_bom_name_file_and_line(text, where, what):
    with pytest.raises(conllu.ConlluError) as e:
        conllu.parse(text, "snippet.conllu")
    msg = str(e.value)
    assert msg.startswith("snippet.conllu" + where), msg
    assert what in msg, msg


@pytest.mark.parametrize("text,where,what", [
    # After a one-word sentence (lines 1-2): a comment, a root and a 2-cycle.
    (OK + "\n# sent_id = 2\n" + w(1, "a", "X", 0, "root") + w(2, "b", "X", 3, "dep") + w(3, "c", "X", 2, "dep")
     + "\n", ":3:", "form a cycle (words 2 -> 3 -> 2)"),
    # No root at all.
    (w(1, "a", "X", 2, "dep") + w(2, "b", "X", 3, "dep") + w(3, "c", "X", 1, "dep") + "\n", ":1:",
     "form a cycle (words 1 -> 2 -> 3 -> 1)"),
    # A chain into a cycle names the cycle.
    (OK + w(2, "b", "X", 3, "dep") + w(3, "c", "X", 2, "dep") + w(4, "d", "X", 2, "dep") + "\n", ":1:",
     "(words 2 -> 3 -> 2)"),
])
def test_head_cycle_names_file_and_first_line(tmp_path, text, where, what):
    with pytest.raises(conllu.ConlluError) as e:
        conllu.parse(text, "snippet.conllu")
    msg = str(e.value)
    assert msg.startswith("snippet.conllu" + where), msg
    assert what in msg, msg
    p = tmp_path / "cycle.conllu"
    p.write_text(text)
    with pytest.raises(conllu.ConlluError, match="cycle.conllu" + where):
        conllu.read(p)


def test_trees_and_unannotated_sentences_have_no_cycle():
    text = (OK + "\n" + w(1, "a", "X", 2, "dep") + w(2, "b", "X", 3, "dep") + w(3, "c", "X", 0, "root")
            + w(4, "d", "X", 3, "dep") + "\n" + w(1, "a", "X", "_", "_") + w(2, "b", "X", "_", "_") + "\n")
    s = conllu.parse(text, "snippet.conllu")
    assert [x.head for x in s[1].words] == [2, 3, 0, 3]
    assert not s[2].annotated


def test_not_utf8_names_file_and_line(tmp_path):
    p = tmp_path / "latin1.conllu"
    p.write_bytes((w(1, "a", "X", 0, "root") + "\n").encode() + b"1\tcaf\xe9\t_\tX\t_\t_\t0\troot\t_\t_\n\n")
    with pytest.raises(conllu.ConlluError, match=r"latin1.conllu:3: not UTF-8 \(byte 0xe9 at byte 6 of the line\)"):
        conllu.read(p)
