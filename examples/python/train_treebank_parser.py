#!/usr/bin/env python3
"""train_treebank_parser.py - a labelled dependency parser trained on a CoNLL-U treebank
(e.g. Universal Dependencies English EWT) with a Thinc encoder and this package's Thinc layers.

The Python counterpart of examples/train_treebank_parser.cpp. What to copy into your parser:

  * CoNLL-U in and out (biaffine.conllu): sentences grouped into documents by
    "# newdoc", split lengths from sentences, split-relative gold heads
    (conllu.scorer_heads), predictions written back (conllu.set_scorer_heads),
    scores as the CoNLL 2018 shared task (conllu.evaluate).
  * the encoder, all Thinc: embeddings summed (Embed of the lowercased
    word from a vocabulary, HashEmbed of a 3-letter suffix, Embed of a shape
    class; of the gold UPOS only with --gold-tags) -> residual dilated window blocks over Ragged
    sentences: each token's row is gathered with its neighbours at distance d
    inside its sentence (zeros past the ends; the `dilated_window` layer below),
    then Relu (Linear 3D -> D + ReLU + dropout), added back to the input
    (Thinc's `residual`). Dilations 1, 2, 4, 8: each token sees +-15 words.
  * the scorers, biaffine.thinc: arcs with
    with_splits(with_minibatch_by_padded_size(BiaffineScorer(train_outputs="logits")))
    trained with biaffine.cross_entropy_heads (the stable loss on logits; --loss local,
    the default) or with the first-order tree CRF (--loss crf: biaffine.thinc.TreeCRFLoss,
    log Z over the trees with one root minus the gold tree's score, gradient the arc
    marginals minus the gold arcs; over projective trees with --projective, the training
    sentences whose gold tree is not projective then skipped and counted);
    labels with BiaffineLabeler at the gold heads in training, at the
    predicted heads when parsing, trained with biaffine.cross_entropy_labels.
    A tagger (Thinc's Softmax on the encoder's rows, trained jointly) predicts
    the UPOS written where the input has none. The scorers' and the tagger's
    dX are summed into the encoder's backprop.
  * Thinc's Adam (beta1 0.9, beta2 0.9) with parameter averaging: the
    averages (optimizer.averages, model.use_params) parse the dev file.
  * parsing: read -> encode -> arc logits -> heads (--decode mst: mst_heads, or eisner_heads
    with --projective; --decode mbr: biaffine.mbr_heads, the tree with the most expected
    correct heads under the tree CRF's arc marginals, projective with --projective) -> labels at the
    decoded heads -> CoNLL-U written, timed end to end. No gold tag is read
    (unless --gold-tags), so it parses CoNLL-U whose HEAD, DEPREL and UPOS are
    `_` and plain text (--format, or any file named *.txt: a sentence a line,
    tokens split at whitespace, blank lines skipped), writing CoNLL-U with
    heads, relations and predicted UPOS filled in.

  * a saved parser, Thinc's to_disk / from_disk conventions (Parser.to_disk,
    Parser.from_disk): a folder with config.json (format, version, sizes, the
    arc loss trained with, the decoder and tree kind that parse), vocab.json and model/
    (the whole Thinc model's Model.to_disk: encoder, arc scorer and labeler, the averaged
    parameters that parse). Version 3 records --loss, --decode and --projective; a version 2
    folder (before them) loads as local / mst / non-projective, what it was trained for.

    python3 examples/python/train_treebank_parser.py --train FILE --dev FILE [--epochs N]
        [--minutes M (15)] [--threads N] [--out FILE] [--parse FILE]... [--quick]
        [--width D] [--layers L] [--arc-hidden H] [--label-hidden H] [--lr LR]
        [--dropout P] [--batch-words W] [--seed S] [--gold-tags] [--save DIR] [--no-check]
        [--loss local|crf] [--decode mst|mbr] [--projective]
    python3 examples/python/train_treebank_parser.py --model DIR [--dev FILE] [--parse FILE]...
        [--format auto|conllu|text] [--out FILE] [--threads N] [--decode mst|mbr] [--projective]

--save DIR writes the trained parser (its averaged parameters, which parse);
--model DIR loads one instead of training and gives the same parses, byte for
byte; it decodes as saved (--decode, --projective given with it decode otherwise).
--out FILE writes the parse of the one --parse file (else of the dev file).

Defaults: width 256, 4 blocks, arc hidden 256, label hidden 128, dropout 0.25, lr 2e-3,
batches of about 1000 words, at most 30 epochs (--quick: 128 / 128 / 64, 500 words, 6 epochs).
On UD English EWT (train -> dev, --threads 1) they reached dev UAS 85.18 / LAS 82.91 after
4 epochs and 86.30 / 84.11 after 11, in 15 minutes (docs/real-data.md, "The Python example").

Each epoch prints one line: the epoch, the training loss per word, training
words/s, "dev UAS xx.xx LAS yy.yy" (percent, punctuation included) and the
training time so far (wall and CPU seconds; CPU counts every thread). --minutes M:
no epoch starts that would, as long as the last one, end past M minutes of
training. At the end: parsing words/s on the --parse files (default: the dev
file) on 1 thread and on --threads, and peak memory (the library's tracked
peak and the process's max RSS).

--threads N: the C++ batcher's threads (prediction batches scored concurrently in
with_minibatch_by_padded_size and BiaffineLabeler) and the BLAS / OpenMP pools numpy
loads (threadpoolctl when installed, else OMP_NUM_THREADS / OPENBLAS_NUM_THREADS, set
before numpy is imported). Thinc's GEMMs run on numpy's BLAS when threadpoolctl finds
OpenBLAS or MKL there, else on Thinc's own BLIS (which --threads does not set).
OMP_WAIT_POLICY defaults to passive here: idle OpenMP threads that spin take the CPU
from the rest on a shared machine.

--quick: a few seconds on the shipped EWT sample (tests/data/ud-english-ewt-sample),
the ctest smoke test. Exit status 0 when the final dev UAS is at least 15 points
above the best of two trivial baselines measured on the dev file (every word
attached to its left neighbour / to its right neighbour); 1 otherwise; 2 on bad
usage, unreadable input or a saved parser that does not load (--no-check: 0
after training; with --model, 0 once parsed). Without Thinc it prints
"SKIPPED: ..." and exits 0.
"""
import argparse
import contextlib
import json
import os
import sys
import time
import zlib
from pathlib import Path

SAMPLE_DIR = Path(__file__).resolve().parents[2] / "tests" / "data" / "ud-english-ewt-sample"
BASELINE_MARGIN = 15.0  # UAS points above the best trivial baseline


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--train", help="training CoNLL-U file")
    ap.add_argument("--dev", help="dev CoNLL-U file (scored after every epoch)")
    ap.add_argument("--epochs", type=int, default=None, help="at most this many epochs (default 30; --quick 6)")
    ap.add_argument("--minutes", type=float, default=15.0,
                    help="training time limit: no epoch starts that would end past it (default 15; 0: none)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", help="write the parse of the --parse file (else of the dev file) here")
    ap.add_argument("--save", metavar="DIR", help="save the trained parser to this folder")
    ap.add_argument("--model", metavar="DIR", help="load a saved parser instead of training")
    ap.add_argument("--no-check", action="store_true", help="exit 0 after training whatever the dev UAS")
    ap.add_argument("--gold-tags", action="store_true",
                    help="the gold UPOS as a feature (then the files parsed need UPOS too); default: predicted")
    ap.add_argument("--format", choices=("auto", "conllu", "text"), default="auto",
                    help="of the --parse files: CoNLL-U, plain text (a sentence a line, tokens split at "
                         "whitespace), or auto (default): text when the name ends in .txt")
    ap.add_argument("--parse", action="append", default=[], metavar="FILE",
                    help="time parsing this file after training (repeatable; default: the dev file)")
    ap.add_argument("--quick", action="store_true", help="a few seconds on the shipped EWT sample (smoke test)")
    ap.add_argument("--width", type=int, default=None, help="encoder width D (default 256; --quick 128)")
    ap.add_argument("--layers", type=int, default=4, help="dilated blocks (dilations 1, 2, 4, ...)")
    ap.add_argument("--arc-hidden", type=int, default=None, help="arc scorer's hidden width (default 256; --quick 128)")
    ap.add_argument("--label-hidden", type=int, default=None,
                    help="label scorer's hidden width (default 128; --quick 64)")
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--dropout", type=float, default=0.25)
    ap.add_argument("--batch-words", type=int, default=None,
                    help="words per training batch (default 1000; --quick 500)")
    ap.add_argument("--budget-mb", type=float, default=16.0, help="the scorers' batch budget")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--loss", choices=("local", "crf"), default=None,
                    help="arc loss: local (cross_entropy_heads, default) or crf (the tree CRF)")
    ap.add_argument("--decode", choices=("mst", "mbr"), default=None,
                    help="heads: mst (the best tree of the scores, default) or mbr (the most expected correct "
                         "heads under the tree CRF's marginals); with --model: the saved parser's unless given")
    ap.add_argument("--projective", action="store_true", default=None,
                    help="projective trees: Eisner's decoder, the projective CRF (non-projective training "
                         "sentences skipped under --loss crf)")
    a = ap.parse_args(argv)
    if a.quick:
        a.train = a.train or str(SAMPLE_DIR / "en_ewt-sample-train.conllu")
        a.dev = a.dev or str(SAMPLE_DIR / "en_ewt-sample-dev.conllu")
    if a.model:
        if a.train or a.save or a.quick or a.gold_tags or a.loss:
            ap.error("--model DIR parses with a saved parser: --train, --save, --quick, --gold-tags and --loss do "
                     "not go with it")
        if not a.dev and not a.parse:
            ap.error("--model DIR needs something to parse: --parse FILE or --dev FILE")
    elif not a.train or not a.dev:
        ap.error("--train and --dev are required (or --quick, or --model DIR)")
    else:  # training: the defaults (with --model, None: the saved parser's)
        a.loss, a.decode, a.projective = a.loss or "local", a.decode or "mst", bool(a.projective)
    if a.out and len(a.parse) > 1:
        ap.error(f"--out FILE writes the parse of one --parse file (or of --dev), not of {len(a.parse)}")
    # Unset sizes: --quick's smaller ones, so that the smoke test takes seconds.
    for name, full, quick in (("epochs", 30, 6), ("batch_words", 1000, 500), ("width", 256, 128),
                              ("arc_hidden", 256, 128), ("label_hidden", 128, 64)):
        if getattr(a, name) is None:
            setattr(a, name, quick if a.quick else full)
    for name in ("epochs", "threads", "width", "layers", "arc_hidden", "label_hidden", "batch_words"):
        if getattr(a, name) < 1:
            ap.error(f"--{name.replace('_', '-')} must be at least 1")
    if not 0 <= a.dropout < 1 or a.lr <= 0 or a.budget_mb <= 0 or a.minutes < 0:
        ap.error("--dropout must be in [0, 1), --lr and --budget-mb positive, --minutes not negative")
    a.write_parse = bool(a.parse)
    if not a.parse:
        a.parse = [a.dev]
    return a


if __name__ == "__main__":
    ARGS = parse_args(sys.argv[1:])
    # Before numpy loads its BLAS: the thread pools' sizes when threadpoolctl is missing.
    os.environ.setdefault("OMP_WAIT_POLICY", "passive")
    for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "BLIS_NUM_THREADS"):
        os.environ.setdefault(_var, str(ARGS.threads))

import resource  # noqa: E402

import numpy as np  # noqa: E402

try:
    from thinc.api import (Adam, Dropout, Embed, HashEmbed, Model, NumpyOps, Relu, Softmax, add,  # noqa: E402
                           chain, fix_random_seed, residual, set_current_ops, with_array)
    from thinc.types import Ragged  # noqa: E402
except ImportError as e:  # the smoke test is skipped, not failed, where Thinc is not installed
    if __name__ != "__main__":  # imported (parse_corpus_ray.py): the importer says what is missing
        raise
    print(f"SKIPPED: thinc is not importable ({e}); pip install thinc, or apt install python3-thinc")
    sys.exit(0)

try:
    from threadpoolctl import threadpool_info, threadpool_limits  # noqa: E402
except ImportError:
    threadpool_info = threadpool_limits = None


def choose_gemm():
    """Thinc's GEMMs on numpy's BLAS when it is an optimised one (it ran the encoder's
    [1000, 768] x [768, 256] in 3.0 ms of CPU against 4.3 ms on Thinc's BLIS, and its threads
    follow --threads), else on BLIS (Debian's numpy may run the reference BLAS)."""
    fast = {"openblas", "mkl"}
    if threadpool_info is not None and any(p.get("internal_api") in fast for p in threadpool_info()):
        set_current_ops(NumpyOps(use_blis=False))
        return "numpy's BLAS"
    return "Thinc's BLIS"


import biaffine  # noqa: E402
from biaffine import conllu  # noqa: E402
from biaffine.thinc import (BiaffineLabeler, BiaffineScorer, TreeCRFLoss,  # noqa: E402
                            with_minibatch_by_padded_size, with_splits)

# --- features ----------------------------------------------------------------

N_SHAPES = 6
SUFFIX_BUCKETS = 4096


def shape_of(form: str) -> int:
    """0 empty, 1 digit first, 2 all capitals, 3 capitalised, 4 lower case, 5 anything else."""
    if not form:
        return 0
    c = form[0]
    if c.isdigit():
        return 1
    if c.isupper():
        return 2 if not any(x.islower() for x in form) else 3
    if c.islower():
        return 4
    return 5


class Vocab:
    """Words seen twice or more in training (else 0, the unknown word), UPOS tags (0: unseen) and
    relations, from the training sentences; features() gives a sentence's [n, 4] uint64 ids (the
    UPOS column 0 unless gold_tags: then the tags are only the tagger's targets)."""

    def __init__(self, train, gold_tags=False):
        self.gold_tags = gold_tags
        counts = {}
        self.upos, self.labels, self.label_names = {}, {}, []
        for s in train:
            for w in s.words:
                low = w.form.lower()
                counts[low] = counts.get(low, 0) + 1
                self.upos.setdefault(w.upos, len(self.upos) + 1)
                if w.deprel not in self.labels:
                    self.labels[w.deprel] = len(self.label_names)
                    self.label_names.append(w.deprel)
        self.words = {}
        word_count = [0]
        for low, c in counts.items():
            if c >= 2:
                self.words[low] = len(word_count)
                word_count.append(c)
        self.word_count = np.asarray(word_count, dtype=np.float64)
        self._form_cache = {}

    def to_dict(self):
        return {"words": self.words, "word_count": self.word_count.tolist(), "upos": self.upos,
                "label_names": self.label_names, "gold_tags": self.gold_tags}

    @classmethod
    def from_dict(cls, d):
        v = cls.__new__(cls)
        v.words, v.upos, v.label_names, v.gold_tags = d["words"], d["upos"], d["label_names"], d["gold_tags"]
        v.labels = {name: i for i, name in enumerate(v.label_names)}
        v.word_count = np.asarray(d["word_count"], dtype=np.float64)
        v._form_cache = {}
        return v

    def _form(self, form):
        f = self._form_cache.get(form)
        if f is None:
            low = form.lower()
            # crc32: a hash that is the same in every run (Python's hash() of a str is not).
            f = (self.words.get(low, 0), zlib.crc32(low[-3:].encode("utf-8")), shape_of(form))
            self._form_cache[form] = f
        return f

    def upos_names(self):
        """By id: "" for 0 (unseen)."""
        names = [""] * (len(self.upos) + 1)
        for tag, i in self.upos.items():
            names[i] = tag
        return names

    def features(self, s):
        if not self.gold_tags:
            return np.asarray([self._form(w.form) + (0,) for w in s.words], dtype=np.uint64)
        for w in s.words:
            if w.upos == "_":
                # parse_file puts the file name in front.
                raise conllu.ConlluError(f"{s.line}: a word without UPOS ('_') in the sentence of this line, and the "
                                         "parser takes gold tags (--gold-tags): parse tagged text, or train without")
        return np.asarray([self._form(w.form) + (self.upos.get(w.upos, 0),) for w in s.words], dtype=np.uint64)

    def tag_ids(self, s):
        return np.asarray([self.upos.get(w.upos, 0) for w in s.words], dtype=np.int64)


# --- input ---------------------------------------------------------------------


def read_text(path):
    """Plain text as unannotated sentences: a sentence a line, tokens split at whitespace, blank
    lines skipped. Errors (unreadable, not UTF-8) raise ConlluError naming the file and line."""
    try:
        data = Path(path).read_bytes()
    except OSError as e:
        raise conllu.ConlluError(f"{os.fspath(path)}: cannot open for reading ({e.strerror})") from e
    out = []
    for lineno, raw in enumerate(data.split(b"\n"), 1):
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise conllu.ConlluError(f"{os.fspath(path)}:{lineno}: not UTF-8 (byte 0x{raw[e.start]:02x} at byte "
                                     f"{e.start + 1} of the line)") from None
        tokens = line.split()
        if tokens:
            out.append(conllu.Sentence(words=[conllu.Word(t, "_", "_", "_", "_", None, "_", "_", "_") for t in tokens],
                                       line=lineno))
    return out


def is_text(path, fmt="auto"):
    return fmt == "text" or (fmt == "auto" and os.fspath(path).endswith(".txt"))


def read_input(path, fmt="auto"):
    """A file to parse: plain text (fmt "text", or "auto" and named *.txt), else CoNLL-U."""
    return read_text(path) if is_text(path, fmt) else conllu.read(path)


def parse_file(p, path, fmt="auto"):
    """The sentences of a file, parsed by Parser p; errors raise ConlluError "file:line: what"."""
    sents = read_input(path, fmt)
    try:
        p.parse(sents)
    except conllu.ConlluError as e:
        raise conllu.ConlluError(f"{os.fspath(path)}:{e}") from None
    return sents


# --- the encoder ---------------------------------------------------------------


def dilated_window(d: int) -> Model:
    """Ragged [N, D] -> Ragged [N, 3D]: row t becomes (x[t - d], x[t], x[t + d]), zeros where
    t -/+ d falls outside t's sentence. The backprop adds each third back where it came from."""

    def forward(model, X, is_train):
        data, lengths = X.data, model.ops.to_numpy(X.lengths)
        N, D = data.shape
        ends = np.cumsum(lengths)
        pos = np.arange(N) - np.repeat(ends - lengths, lengths)  # position in the sentence
        left = np.flatnonzero(pos >= d)                          # rows with a left neighbour at d
        right = np.flatnonzero(pos + d < np.repeat(lengths, lengths))
        G = np.zeros((N, 3 * D), dtype=data.dtype)
        G[:, D:2 * D] = data
        G[left, :D] = data[left - d]
        G[right, 2 * D:] = data[right + d]

        def backprop(dY):
            dG = dY.data
            dX = np.ascontiguousarray(dG[:, D:2 * D])
            # left - d (right + d) has no repeated rows, so fancy-index += adds every term.
            dX[left - d] += dG[left, :D]
            dX[right + d] += dG[right, 2 * D:]
            return Ragged(dX, X.lengths)

        return Ragged(G, X.lengths), backprop

    return Model(f"dilated_window_{d}", forward)


def build_encoder(v: Vocab, width: int, layers: int, dropout: float, seed: int) -> Model:
    """Ragged feature ids [N, 4] -> Ragged [N, width]."""
    embeds = [Embed(width, len(v.word_count), column=0), HashEmbed(width, SUFFIX_BUCKETS, column=1, seed=seed),
              Embed(width, N_SHAPES, column=2)]
    if v.gold_tags:
        embeds.append(Embed(width, len(v.upos) + 1, column=3))
    embed = with_array(chain(add(*embeds), Dropout(dropout)))
    blocks = [residual(chain(dilated_window(2 ** i), with_array(Relu(width, 3 * width, dropout=dropout))))
              for i in range(layers)]
    return chain(embed, *blocks)


# --- the parser ----------------------------------------------------------------


class Parser:
    """The encoder, the arc scorer, the labeler and the tagger as the layers of one Thinc model, so
    that one finish_update / use_params covers all their parameters."""

    def __init__(self, v: Vocab, a):
        self.v = v
        self.args = a
        self.encoder = build_encoder(v, a.width, a.layers, a.dropout, a.seed)
        budget = biaffine.budget.megabytes(a.budget_mb)
        self.batcher = with_minibatch_by_padded_size(
            BiaffineScorer(nO=1, hidden_width=a.arc_hidden, dropout=a.dropout, seed=a.seed + 1,
                           train_outputs="logits"),
            size=budget, threads=a.threads)
        self.arcs = with_splits(self.batcher)
        self.labeler = BiaffineLabeler(nO=len(v.label_names), hidden_width=a.label_hidden, dropout=a.dropout,
                                       seed=a.seed + 2, train_outputs="logits", budget=budget, threads=a.threads)
        self.tagger = Softmax(len(v.upos) + 1, a.width)
        self.model = Model("treebank_parser", self._forward,
                           layers=[self.encoder, self.arcs, self.labeler, self.tagger])
        # How it was trained and how it decodes (config.json's "loss", "decode", "projective").
        self.loss, self.decode, self.projective = a.loss, a.decode, a.projective

    # Version 2: the tagger, and gold tags only when trained with them (vocab.json's gold_tags).
    # Version 3: the arc loss, the decoder and the tree kind (--loss, --decode, --projective).
    FORMAT, VERSION = "biaffine-treebank-parser-py", 3
    SIZES = ("width", "layers", "arc_hidden", "label_hidden", "dropout", "seed")
    # What a version 2 folder was trained and parsed with.
    V2_DEFAULTS = {"loss": "local", "decode": "mst", "projective": False}

    def to_disk(self, path):
        """Thinc's convention: a folder; config.json written last, so a save that failed half
        way leaves a folder that does not load."""
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        (path / "config.json").unlink(missing_ok=True)
        (path / "vocab.json").write_text(json.dumps(self.v.to_dict()), encoding="utf-8")
        self.model.to_disk(path / "model")
        config = {"format": self.FORMAT, "version": self.VERSION, "loss": self.loss, "decode": self.decode,
                  "projective": self.projective, **{k: getattr(self.args, k) for k in self.SIZES}}
        (path / "config.json").write_text(json.dumps(config, indent=1), encoding="utf-8")

    @classmethod
    def from_disk(cls, path, threads: int, budget_mb: float):
        """A parser as to_disk saved it (version 3, or 2 with V2_DEFAULTS); a folder that does not
        fit raises ValueError or OSError naming the file."""
        path = Path(path)
        config_path = path / "config.json"
        config = json.loads(config_path.read_text(encoding="utf-8"))
        version = config.get("version")
        if version == 2:  # before --loss / --decode / --projective
            expect = (("format", cls.FORMAT), ("loss", "cross_entropy_heads+cross_entropy_labels"),
                      ("decoder", "mst_heads"))
        else:
            expect = (("format", cls.FORMAT), ("version", cls.VERSION))
        for key, want in expect:
            if config.get(key) != want:
                reads = "2 or 3" if key == "version" else repr(want)
                raise ValueError(f"{config_path}: {key} {config.get(key)!r}, this program reads {reads}")
        if version == 2:  # what it was trained and parsed with
            config = {**config, **cls.V2_DEFAULTS}
        else:
            for key, allowed in (("loss", ("local", "crf")), ("decode", ("mst", "mbr")), ("projective", (False, True))):
                if config.get(key) not in allowed:
                    raise ValueError(f"{config_path}: {key} {config.get(key)!r}, expected one of {allowed}")
        v = Vocab.from_dict(json.loads((path / "vocab.json").read_text(encoding="utf-8")))
        args = argparse.Namespace(threads=threads, budget_mb=budget_mb, **{k: config[k] for k in cls.SIZES},
                                  loss=config["loss"], decode=config["decode"], projective=config["projective"])
        p = cls(v, args)
        p.model.from_disk(path / "model")
        return p

    def heads(self, A):
        """Heads of each split's arc logits [n, n], by the parser's decoder and tree kind."""
        if self.decode == "mbr":
            return biaffine.mbr_heads(A, projective=self.projective)
        decoder = biaffine.eisner_heads if self.projective else biaffine.mst_heads
        return [decoder(a) for a in A]

    def describe(self):
        return (f"arc loss {self.loss}, decoder {self.decode} "
                f"({'projective' if self.projective else 'non-projective'} trees)")

    def set_threads(self, n: int):
        self.batcher.attrs["threads"] = n
        self.labeler.attrs["threads"] = n

    def initialize(self, feats, lengths, heads):
        X = Ragged(feats, lengths)
        self.encoder.initialize(X=X)
        H = self.encoder.predict(X).data
        self.arcs.initialize(X=([H], [lengths]))
        self.labeler.initialize(X=(H, heads))
        self.tagger.initialize()

    @staticmethod
    def _forward(model, X, is_train):
        """(Ragged features, sentence lengths, gold heads as batch rows) -> (arc logits per
        sentence, label logits [N, labels] at the gold heads, UPOS probabilities [N, tags]);
        backprop((dA, dL, dT)), dT the gradient of the tags' logits."""
        encoder, arcs, labeler, tagger = model.layers
        R, heads = X
        H, bp_encoder = encoder(R, is_train)
        A, bp_arcs = arcs(([H.data], [R.lengths]), is_train)
        L, bp_labels = labeler((H.data, heads), is_train)
        T, bp_tags = tagger(H.data, is_train)

        def backprop(dY):
            dA, dL, dT = dY
            (dH,), _ = bp_arcs(dA)
            dH += bp_labels(dL)[0]
            dH += bp_tags(dT)
            bp_encoder(Ragged(dH, R.lengths))
            return X

        return (A, L, T), backprop

    def parse(self, sents, chunk: int = 4000):
        """Sets HEAD and DEPREL of every word, and UPOS (predicted) where it is `_`; documents by
        # newdoc, about `chunk` words encoded at once."""
        upos_names = self.v.upos_names()
        docs = conllu.documents(sents)
        d0 = 0
        while d0 < len(docs):
            d1, rows = d0, 0
            while d1 < len(docs) and (d1 == d0 or rows < chunk):
                rows += sum(len(s.words) for s in sents[docs[d1][0]:docs[d1][1]])
                d1 += 1
            first, last = docs[d0][0], docs[d1 - 1][1]
            batch = sents[first:last]
            lengths = np.asarray([len(s.words) for s in batch], dtype=np.int32)
            H = self.encoder.predict(Ragged(np.concatenate([self.v.features(s) for s in batch]), lengths)).data
            doc_X, doc_splits, r = [], [], 0
            for b, e in docs[d0:d1]:
                split = lengths[b - first:e - first]
                doc_X.append(H[r:r + int(split.sum())])
                doc_splits.append(split)
                r += int(split.sum())
            heads = self.heads(self.arcs.predict((doc_X, doc_splits)))
            starts = np.cumsum(lengths) - lengths
            rows_of_heads = np.concatenate([h + s for h, s in zip(heads, starts)])
            best = self.labeler.predict((H, rows_of_heads)).argmax(axis=1)
            tags = self.tagger.predict(H)[:, 1:].argmax(axis=1) + 1  # never 0, the unseen tag
            names = self.v.label_names
            for s, h, start in zip(batch, heads, starts):
                conllu.set_scorer_heads(s, h.tolist())
                end = start + len(s.words)
                for w, lab, tag in zip(s.words, best[start:end], tags[start:end]):
                    w.deprel = names[lab]
                    if w.upos == "_":
                        w.upos = upos_names[tag]
            d0 = d1


def tag_cross_entropy(P, gold, scale):
    """Loss and gradient of the tags' logits for the tagger's probabilities P [N, tags] (Thinc's
    Softmax backprops the gradient of its logits); rows whose gold id is 0 (unseen) are left out."""
    rows = np.flatnonzero(gold != 0)
    dT = np.zeros_like(P)
    dT[rows] = P[rows]
    dT[rows, gold[rows]] -= 1.0
    loss = -float(np.log(np.maximum(P[rows, gold[rows]], 1e-30)).sum())
    return loss * scale, dT * scale


def parse_dev(p, path, gold):
    """The dev file parsed as text would be: UPOS blanked and predicted (unless the parser takes
    gold tags). Returns the scores and the share of words whose predicted UPOS is the gold one (%)."""
    parsed = conllu.read(path)
    if not p.v.gold_tags:
        for s in parsed:
            for w in s.words:
                w.upos = "_"
    p.parse(parsed)
    words = right = 0
    for g, s in zip(gold, parsed):
        for gw, sw in zip(g.words, s.words):
            words += 1
            right += gw.upos == sw.upos
    return conllu.evaluate(gold, parsed), 100.0 * right / max(words, 1)


def neighbour_baselines(path):
    """UAS of attaching every word to its left (right) neighbour, the first (last) word the root."""
    gold, left, right = conllu.read(path), conllu.read(path), conllu.read(path)
    for s in left:
        for m, w in enumerate(s.words):
            w.head = m  # the 1-based id of word m - 1; 0 (the root) for the first
    for s in right:
        for m, w in enumerate(s.words):
            w.head = 0 if m + 1 == len(s.words) else m + 2
    return conllu.evaluate(gold, left).uas, conllu.evaluate(gold, right).uas


def is_projective(heads):
    """Whether no two arcs of a tree (split-relative heads, the root pointing at itself) cross,
    the root's arc coming from before the first word."""
    spans = [(-1, d) if h == d else (min(h, d), max(h, d)) for d, h in enumerate(heads)]
    return not any(a < c < b < e for a, b in spans for c, e in spans)


def cpu_seconds():
    return time.process_time()


def max_rss_mb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # KiB on Linux


class Threads:
    """--threads for the BLAS / OpenMP pools (threadpoolctl) and the C++ batcher."""

    def __init__(self, parser):
        self.parser = parser
        self._limit = None

    def set(self, n):
        if threadpool_limits is not None:
            self._limit = threadpool_limits(limits=n)
        self.parser.set_threads(n)

    @staticmethod
    def describe():
        if threadpool_limits is None:
            return "threadpoolctl not installed: BLAS threads from OMP_NUM_THREADS / OPENBLAS_NUM_THREADS"
        pools = [f"{p.get('internal_api')} {p.get('num_threads')}" for p in threadpool_info()]
        return "thread pools: " + (", ".join(pools) if pools else "none found")


def train_parser(a, train, dev, log):
    """Trains a parser on `train`, scoring `dev` after every epoch; returns the parser, its
    optimizer (whose averages parse) and the last dev scores."""
    rng = np.random.default_rng(a.seed + 3)
    if a.projective:
        projective = [is_projective(conllu.scorer_heads(s)) for s in train]
        crossing = len(train) - sum(projective)
        if a.loss == "crf":  # the projective CRF has no tree for them: skipped
            train = [s for s, ok in zip(train, projective) if ok]
        print(f"--projective: {crossing} training sentences have a non-projective gold tree: "
              f"{'skipped (the projective CRF has no tree for them)' if a.loss == 'crf' else 'kept (local loss)'}")
    v = Vocab(train, a.gold_tags)
    train_words = sum(len(s.words) for s in train)
    print(f"train: {a.train} ({len(train)} sentences, {train_words} words)\n"
          f"vocabulary {len(v.word_count)} words, {len(v.upos)} UPOS, {len(v.label_names)} relations; "
          f"encoder width {a.width}, {a.layers} blocks (dilations {', '.join(str(2 ** i) for i in range(a.layers))}), "
          f"arc hidden {a.arc_hidden}, label hidden {a.label_hidden}, dropout {a.dropout}, lr {a.lr}, "
          f"batches of {a.batch_words} words, threads {a.threads}; "
          f"{'gold UPOS as a feature' if a.gold_tags else 'no gold tags (UPOS predicted)'}")
    log.checkpoint("treebank read")

    # Every training sentence's features, gold heads and labels, once.
    feats = [v.features(s) for s in train]
    gold_heads = [np.asarray(conllu.scorer_heads(s), dtype=np.int64) for s in train]
    gold_labels = [np.asarray([v.labels[w.deprel] for w in s.words], dtype=np.int64) for s in train]
    gold_tags = [v.tag_ids(s) for s in train]
    word_count = v.word_count

    gemm = choose_gemm()
    p = Parser(v, a)
    threads = Threads(p)
    threads.set(a.threads)
    p.initialize(feats[0], np.asarray([len(feats[0])], dtype=np.int32), gold_heads[0])
    print(f"encoder GEMMs on {gemm}; {Threads.describe()}; {p.describe()}")
    # The tree CRF as a Thinc loss; normalized, its scale is 1 / words of the batch, as below.
    crf = TreeCRFLoss(projective=a.projective) if a.loss == "crf" else None
    optimizer = Adam(a.lr, beta1=0.9, beta2=0.9, use_averages=True)
    log.checkpoint("model initialized")

    last = None
    train_wall = train_cpu = 0.0
    epochs_run = 0
    for epoch in range(1, a.epochs + 1):
        order = rng.permutation(len(train))
        t0, c0 = time.perf_counter(), cpu_seconds()
        loss = 0.0
        i = 0
        while i < len(order):
            idx = []
            n = 0
            while i < len(order) and n < a.batch_words:
                idx.append(order[i])
                n += len(train[order[i]].words)
                i += 1
            lengths = np.asarray([len(gold_heads[k]) for k in idx], dtype=np.int32)
            X = np.concatenate([feats[k] for k in idx])
            # Word dropout: a rare word becomes the unknown word with probability 0.25 / (0.25 + count).
            ids = X[:, 0].astype(np.int64)
            drop = rng.random(len(ids)) < 0.25 / (0.25 + word_count[ids])
            X[drop & (ids != 0), 0] = 0
            starts = np.cumsum(lengths) - lengths
            rows_of_heads = np.concatenate([gold_heads[k] + s for k, s in zip(idx, starts)])
            (A, L, T), backprop = p.model.begin_update((Ragged(X, lengths), rows_of_heads))
            scale = 1.0 / n
            if crf is not None:
                dA, arc_loss = crf(A, [gold_heads[k] for k in idx])
            else:
                arc_loss, dA = biaffine.cross_entropy_heads(A, [gold_heads[k] for k in idx], scale)
            label_loss, (dL,) = biaffine.cross_entropy_labels([L], [np.concatenate([gold_labels[k] for k in idx])],
                                                              scale)
            tag_loss, dT = tag_cross_entropy(T, np.concatenate([gold_tags[k] for k in idx]), scale)
            backprop((dA, dL, dT))
            p.model.finish_update(optimizer)
            optimizer.step_schedules()
            loss += (arc_loss + label_loss + tag_loss) / scale
        secs, cpu = time.perf_counter() - t0, cpu_seconds() - c0
        train_wall += secs
        train_cpu += cpu
        epochs_run += 1
        with p.model.use_params(optimizer.averages):
            last, tag_acc = parse_dev(p, a.dev, dev)
        print(f"epoch {epoch:3d}  loss {loss / train_words:.4f}  {train_words / secs:6.0f} words/s  "
              f"dev UAS {last.uas:.2f} LAS {last.las:.2f} UPOS {tag_acc:.2f}  "
              f"(training so far {train_wall:.0f} s wall, "
              f"{train_cpu:.0f} s CPU)", flush=True)
        if a.minutes > 0 and train_wall + secs > 60 * a.minutes:
            break
    log.checkpoint("trained")
    print(f"\ntrained {epochs_run} epochs: {train_wall:.2f} s wall, {train_cpu:.2f} s CPU "
          f"({train_wall / epochs_run:.2f} s wall per epoch)\n"
          f"dev UAS {last.uas:.2f} LAS {last.las:.2f}; without punctuation (gold UPOS PUNCT) "
          f"UAS {last.uas_no_punct:.2f} LAS {last.las_no_punct:.2f}")

    return p, optimizer, last


def time_parsing(p, a, threads):
    """Parsing words/s of the --parse files on 1 thread and on --threads, end to end (read ->
    encode -> score -> decode -> labels -> CoNLL-U text; the disk left out)."""
    for n in sorted({1, a.threads}):
        threads.set(n)
        words = 0
        t0, c0 = time.perf_counter(), cpu_seconds()
        for f in a.parse:
            sents = parse_file(p, f, a.format)
            words += sum(len(s.words) for s in sents)
            conllu.format_sentences(sents)  # written to memory: the timing leaves out the disk
        secs, cpu = time.perf_counter() - t0, cpu_seconds() - c0
        print(f"parsing {words} words ({len(a.parse)} file(s), read -> write) on {n} thread(s): "
              f"{words / secs:.0f} words/s ({words / cpu:.0f} words per CPU second)")


def main():
    a = ARGS
    print(f"biaffine {biaffine.__version__} ({biaffine.info()['variant']}), thinc "
          f"{__import__('thinc').__version__}, numpy {np.__version__} - train_treebank_parser.py: "
          "embeddings -> dilated residual window blocks (Thinc) -> arc + label scorers (biaffine.thinc)\n")
    fix_random_seed(a.seed)
    log = biaffine.memory_log()
    try:
        train = None if a.model else conllu.read(a.train)
        dev = conllu.read(a.dev) if a.dev else None
        left, right = neighbour_baselines(a.dev) if a.dev else (0.0, 0.0)
    except conllu.ConlluError as e:
        print(f"train_treebank_parser.py: {e}", file=sys.stderr)
        return 2
    if dev is not None:
        print(f"dev:   {a.dev} ({len(dev)} sentences, {sum(len(s.words) for s in dev)} words); "
              f"baselines: left neighbour UAS {left:.2f}, right neighbour UAS {right:.2f}")
    if a.model:
        try:
            p = Parser.from_disk(a.model, a.threads, a.budget_mb)
        except (OSError, ValueError, KeyError) as e:  # the file is in the message
            print(f"train_treebank_parser.py: cannot load the parser in {a.model}: {type(e).__name__}: {e}",
                  file=sys.stderr)
            return 2
        if a.decode is not None:
            p.decode = a.decode
        if a.projective is not None:
            p.projective = a.projective
        print(f"model: {a.model} (loaded, not trained; {p.describe()})")
        log.checkpoint("loaded")
        averaged = contextlib.nullcontext
        last = None
        if dev is not None:
            last, tag_acc = parse_dev(p, a.dev, dev)
            print(f"dev UAS {last.uas:.2f} LAS {last.las:.2f} UPOS {tag_acc:.2f}")
    else:
        p, optimizer, last = train_parser(a, train, dev, log)

        def averaged():
            return p.model.use_params(optimizer.averages)

        if a.save:
            with averaged():
                p.to_disk(a.save)
            print(f"saved the parser to {a.save}")
    threads = Threads(p)

    # Parsing speed, end to end: read -> encode -> score -> decode -> labels -> write.
    with averaged():
        try:
            time_parsing(p, a, threads)
            log.checkpoint("parsed")
            if a.out:
                source = a.parse[0] if a.write_parse else a.dev
                conllu.write(a.out, parse_file(p, source, a.format if a.write_parse else "conllu"))
                print(f"wrote the parse of {source} to {a.out}")
        except conllu.ConlluError as e:
            print(f"train_treebank_parser.py: {e}", file=sys.stderr)
            return 2
    print("\nMemory log (bytes tracked by the C++ library; peak = highest point since the previous checkpoint):")
    print(log.summary(), end="")
    print(f"peak memory: {biaffine.format_bytes(log.peak_bytes())} tracked by the library, "
          f"process max RSS {max_rss_mb():.0f} MB")
    if a.model or a.no_check:
        return 0
    bound = max(left, right) + BASELINE_MARGIN
    ok = last.uas >= bound
    print(f"\nCheck: dev UAS {last.uas:.2f} >= best neighbour baseline + {BASELINE_MARGIN:.0f} = {bound:.2f}: "
          f"{'PASS' if ok else 'FAIL'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
