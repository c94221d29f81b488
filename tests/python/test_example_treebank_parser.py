# examples/python/train_treebank_parser.py's saved parsers (Thinc's to_disk /
# from_disk): a tiny parser trained one epoch on the shipped sample and saved;
# loaded, it parses byte for byte as it did in memory; a folder of another
# format version or with a file missing is refused, naming the file. Text that
# nobody annotated (CoNLL-U with UPOS, HEAD and DEPREL `_`, plain text) parses
# into CoNLL-U the library's reader takes back, a tree on every sentence; no
# gold tag is read: the annotated file parses to the same trees.
import json
import os
import pathlib
import shutil
import subprocess
import sys

import pytest

from biaffine import conllu

ROOT = pathlib.Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "python" / "train_treebank_parser.py"
SAMPLE_DEV = ROOT / "tests" / "data" / "ud-english-ewt-sample" / "en_ewt-sample-dev.conllu"
TINY = ["--epochs", "1", "--width", "16", "--layers", "2", "--arc-hidden", "16", "--label-hidden", "16",
        "--batch-words", "500", "--minutes", "0", "--no-check"]


def unannotated(path, dest):
    """The CoNLL-U at `path` with UPOS, HEAD, DEPREL and DEPS blanked (`_`), as text to parse."""
    out = []
    for line in path.read_text(encoding="utf-8").split("\n"):
        cols = line.split("\t")
        if len(cols) == 10 and cols[0].isdigit():
            cols[3] = cols[6] = cols[7] = cols[8] = "_"
        out.append("\t".join(cols))
    dest.write_text("\n".join(out), encoding="utf-8")
    return dest


def plain_text(path, dest):
    """The words of the CoNLL-U at `path`, a sentence a line, joined by spaces or tabs."""
    lines = ["\t ".join(w.form for w in s.words) if i % 2 else " ".join(w.form for w in s.words)
             for i, s in enumerate(conllu.read(path))]
    dest.write_text("\n\n".join(lines) + "\n", encoding="utf-8")  # blank lines between: skipped
    return dest


def trees(sents):
    return [[(w.form, w.head, w.deprel) for w in s.words] for s in sents]


def run_example(*args):
    return subprocess.run([sys.executable, str(EXAMPLE), *map(str, args)], capture_output=True, text=True,
                          env=dict(os.environ), timeout=600)


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    work = tmp_path_factory.mktemp("treebank_parser")
    unannotated(SAMPLE_DEV, work / "dev_unannotated.conllu")
    r = run_example("--train", SAMPLE_DEV, "--dev", SAMPLE_DEV, *TINY, "--save", work / "model",
                    "--parse", work / "dev_unannotated.conllu", "--out", work / "in_memory.conllu")
    assert r.returncode == 0, r.stdout + r.stderr
    return work


def test_saved_parser_parses_as_in_memory(saved):
    r = run_example("--model", saved / "model", "--parse", saved / "dev_unannotated.conllu",
                    "--out", saved / "loaded.conllu")
    assert r.returncode == 0, r.stdout + r.stderr
    assert (saved / "loaded.conllu").read_bytes() == (saved / "in_memory.conllu").read_bytes()


def check_parsed(path, source_sents):
    """`path` reads back with the library's reader: the source's words, each with a head, a
    relation and a UPOS, one root per sentence (a cycle would not read)."""
    parsed = conllu.read(path)
    assert [[w.form for w in s.words] for s in parsed] == [[w.form for w in s.words] for s in source_sents]
    for s in parsed:
        assert all(w.head is not None and w.deprel != "_" and w.upos != "_" for w in s.words), s.line
        assert sum(w.head == 0 for w in s.words) == 1, s.line
    return parsed


@pytest.mark.parametrize("kind", ["unannotated", "text", "text_flag"])
def test_unannotated_input_parses_to_trees(saved, tmp_path, kind):
    if kind == "unannotated":
        source = saved / "dev_unannotated.conllu"
        flags = []
    else:
        # --format text reads a file of any name as text; auto takes *.txt as text.
        source = plain_text(SAMPLE_DEV, tmp_path / ("words.tok" if kind == "text_flag" else "words.txt"))
        flags = ["--format", "text"] if kind == "text_flag" else []
    r = run_example("--model", saved / "model", "--parse", source, *flags, "--out", tmp_path / "out.conllu")
    assert r.returncode == 0, r.stdout + r.stderr
    parsed = check_parsed(tmp_path / "out.conllu", conllu.read(SAMPLE_DEV))
    # Same words, same trees whatever the input's form (and parsed, not copied: one epoch of a
    # tiny model gets heads wrong).
    in_memory = conllu.read(saved / "in_memory.conllu")
    assert trees(parsed) == trees(in_memory)
    assert trees(parsed) != trees(conllu.read(SAMPLE_DEV))


def test_no_gold_tags_read(saved, tmp_path):
    # The annotated dev file (gold UPOS, HEAD, DEPREL) parses to the trees of the blanked one.
    r = run_example("--model", saved / "model", "--parse", SAMPLE_DEV, "--out", tmp_path / "annotated.conllu")
    assert r.returncode == 0, r.stdout + r.stderr
    annotated = check_parsed(tmp_path / "annotated.conllu", conllu.read(SAMPLE_DEV))
    assert trees(annotated) == trees(conllu.read(saved / "in_memory.conllu"))
    # The gold UPOS is kept where the input has one.
    assert [w.upos for s in annotated for w in s.words] == [w.upos for s in conllu.read(SAMPLE_DEV) for w in s.words]


def test_gold_tag_parser_refuses_untagged_text(tmp_path):
    model = tmp_path / "model"
    r = run_example("--train", SAMPLE_DEV, "--dev", SAMPLE_DEV, *TINY, "--gold-tags", "--save", model,
                    "--parse", SAMPLE_DEV)
    assert r.returncode == 0, r.stdout + r.stderr
    text = plain_text(SAMPLE_DEV, tmp_path / "words.txt")
    r = run_example("--model", model, "--parse", text, "--out", tmp_path / "never.conllu")
    assert r.returncode == 2, r.stdout + r.stderr
    assert f"{text}:1: a word without UPOS" in r.stderr, r.stderr
    assert not (tmp_path / "never.conllu").exists()


def test_bad_text_named_with_line(saved, tmp_path):
    text = tmp_path / "bad.txt"
    text.write_bytes(b"A fine line .\nA bad \xff line .\n")
    r = run_example("--model", saved / "model", "--parse", text, "--out", tmp_path / "never.conllu")
    assert r.returncode == 2, r.stdout + r.stderr
    assert f"{text}:2: not UTF-8" in r.stderr, r.stderr
    assert not (tmp_path / "never.conllu").exists()


@pytest.mark.parametrize("damage, named, what", [
    ("version", "config.json", "version 4, this program reads 2 or 3"),
    ("decode", "config.json", "decode 'viterbi', expected one of ('mst', 'mbr')"),
    ("missing", "vocab.json", "No such file"),
])
def test_damaged_saved_parser_is_refused(saved, tmp_path, damage, named, what):
    model = tmp_path / "model"
    shutil.copytree(saved / "model", model)
    if damage in ("version", "decode"):
        config = json.loads((model / "config.json").read_text())
        config.update({"version": 4} if damage == "version" else {"decode": "viterbi"})
        (model / "config.json").write_text(json.dumps(config))
    else:
        (model / named).unlink()
    r = run_example("--model", model, "--parse", SAMPLE_DEV, "--out", tmp_path / "never.conllu")
    assert r.returncode == 2, r.stdout + r.stderr
    assert str(model / named) in r.stderr and what in r.stderr, r.stderr
    assert not (tmp_path / "never.conllu").exists()


def test_version_2_parser_loads_with_its_defaults(saved, tmp_path):
    # A folder saved before --loss / --decode / --projective (format version 2) parses as it did:
    # local loss, mst_heads.
    model = tmp_path / "model"
    shutil.copytree(saved / "model", model)
    config = json.loads((model / "config.json").read_text())
    assert (config["version"], config["loss"], config["decode"], config["projective"]) == (3, "local", "mst", False)
    for key in ("decode", "projective"):
        del config[key]
    config.update(version=2, loss="cross_entropy_heads+cross_entropy_labels", decoder="mst_heads")
    (model / "config.json").write_text(json.dumps(config))
    r = run_example("--model", model, "--parse", saved / "dev_unannotated.conllu", "--out", tmp_path / "v2.conllu")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "arc loss local, decoder mst (non-projective trees)" in r.stdout
    assert (tmp_path / "v2.conllu").read_bytes() == (saved / "in_memory.conllu").read_bytes()


def test_crf_mbr_projective_parser_is_saved_with_its_decoder(saved, tmp_path):
    # Trained with the projective tree CRF and parsing by MBR: the saved folder says so, and the
    # loaded parser decodes as the one in memory (projective trees); --decode mst overrides it.
    model = tmp_path / "model"
    r = run_example("--train", SAMPLE_DEV, "--dev", SAMPLE_DEV, *TINY, "--loss", "crf", "--decode", "mbr",
                    "--projective", "--save", model, "--parse", saved / "dev_unannotated.conllu",
                    "--out", tmp_path / "in_memory.conllu")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "training sentences have a non-projective gold tree: skipped" in r.stdout
    assert "arc loss crf, decoder mbr (projective trees)" in r.stdout
    config = json.loads((model / "config.json").read_text())
    assert (config["loss"], config["decode"], config["projective"]) == ("crf", "mbr", True)
    r = run_example("--model", model, "--parse", saved / "dev_unannotated.conllu", "--out", tmp_path / "loaded.conllu")
    assert r.returncode == 0, r.stdout + r.stderr
    assert (tmp_path / "loaded.conllu").read_bytes() == (tmp_path / "in_memory.conllu").read_bytes()
    parsed = check_parsed(tmp_path / "loaded.conllu", conllu.read(SAMPLE_DEV))
    for s in parsed:
        heads = [m if w.head == 0 else w.head - 1 for m, w in enumerate(s.words)]
        spans = [(-1, d) if h == d else (min(h, d), max(h, d)) for d, h in enumerate(heads)]
        assert not any(a < c < b < e for a, b in spans for c, e in spans), s.line  # projective
    r = run_example("--model", model, "--decode", "mst", "--parse", saved / "dev_unannotated.conllu",
                    "--out", tmp_path / "mst.conllu")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "decoder mst (projective trees)" in r.stdout
    check_parsed(tmp_path / "mst.conllu", conllu.read(SAMPLE_DEV))
