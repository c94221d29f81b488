# examples/python/train_treebank_parser.py's saved parsers (Thinc's to_disk /
# from_disk): a tiny parser trained one epoch on the shipped sample and saved;
# loaded, it parses byte for byte as it did in memory; a folder of another
# format version or with a file missing is refused, naming the file.
import json
import os
import pathlib
import shutil
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "python" / "train_treebank_parser.py"
SAMPLE_DEV = ROOT / "tests" / "data" / "ud-english-ewt-sample" / "en_ewt-sample-dev.conllu"
TINY = ["--epochs", "1", "--width", "16", "--layers", "2", "--arc-hidden", "16", "--label-hidden", "16",
        "--batch-words", "500", "--minutes", "0", "--no-check"]


def run_example(*args):
    return subprocess.run([sys.executable, str(EXAMPLE), *map(str, args)], capture_output=True, text=True,
                          env=dict(os.environ), timeout=600)


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    work = tmp_path_factory.mktemp("treebank_parser")
    r = run_example("--train", SAMPLE_DEV, "--dev", SAMPLE_DEV, *TINY, "--save", work / "model",
                    "--parse", SAMPLE_DEV, "--out", work / "in_memory.conllu")
    assert r.returncode == 0, r.stdout + r.stderr
    return work


def test_saved_parser_parses_as_in_memory(saved):
    r = run_example("--model", saved / "model", "--parse", SAMPLE_DEV, "--out", saved / "loaded.conllu")
    assert r.returncode == 0, r.stdout + r.stderr
    in_memory = (saved / "in_memory.conllu").read_bytes()
    assert in_memory != SAMPLE_DEV.read_bytes()  # parsed, not copied: one epoch of a tiny model gets heads wrong
    assert (saved / "loaded.conllu").read_bytes() == in_memory


@pytest.mark.parametrize("damage, named, what", [
    ("version", "config.json", "version 2, this program reads 1"),
    ("missing", "vocab.json", "No such file"),
])
def test_damaged_saved_parser_is_refused(saved, tmp_path, damage, named, what):
    model = tmp_path / "model"
    shutil.copytree(saved / "model", model)
    if damage == "version":
        config = json.loads((model / "config.json").read_text())
        config["version"] = 2
        (model / "config.json").write_text(json.dumps(config))
    else:
        (model / named).unlink()
    r = run_example("--model", model, "--parse", SAMPLE_DEV, "--out", tmp_path / "never.conllu")
    assert r.returncode == 2, r.stdout + r.stderr
    assert str(model / named) in r.stderr and what in r.stderr, r.stderr
    assert not (tmp_path / "never.conllu").exists()
