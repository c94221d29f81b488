#!/usr/bin/env python3
"""spacy_components_check.py - biaffine.PairwiseBilinear.v1 and
biaffine.Bilinear.v1 inside spacy-experimental 0.6.4's experimental_arc_predicter
and experimental_arc_labeler (spaCy 3.7, no PyTorch): initialize, train on a
toy treebank, evaluate (UAS / LAS on the training docs), save and reload.

    python3 -m venv v && v/bin/pip install "spacy>=3.7,<3.8" spacy-experimental==0.6.4 click
    PYTHONPATH=build/python v/bin/python scripts/spacy_components_check.py

Prints SKIPPED when spaCy or spacy-experimental is not installed; exits 1
when the trained pipeline does not reach UAS and LAS 0.9 on its toy data, or
when torch got imported.
"""
import importlib.util
import random
import sys
import tempfile
import time

if importlib.util.find_spec("spacy") is None or importlib.util.find_spec("spacy_experimental") is None:
    print("SKIPPED: spacy and spacy-experimental are not installed here (see the docstring for a venv)")
    sys.exit(0)

import spacy  # noqa: E402
import spacy_experimental  # noqa: E402,F401  (registers the components)
from spacy.tokens import Doc  # noqa: E402
from spacy.training import Example  # noqa: E402

import biaffine.spacy_architectures as arch  # noqa: E402
print("registered:", arch.REGISTERED, "torch imported:", "torch" in sys.modules)

tok2vec = {"@architectures": "spacy.HashEmbedCNN.v2", "pretrained_vectors": None, "width": 32, "depth": 2,
           "embed_size": 500, "window_size": 1, "maxout_pieces": 2, "subword_features": True}
nlp = spacy.blank("en")
nlp.add_pipe("sentencizer")
nlp.add_pipe("experimental_arc_predicter", config={"model": {"@architectures": "biaffine.PairwiseBilinear.v1",
             "hidden_width": 32, "nO": 1, "tok2vec": tok2vec, "budget_megabytes": 1.0}})
nlp.add_pipe("experimental_arc_labeler", config={"model": {"@architectures": "biaffine.Bilinear.v1",
             "hidden_width": 32, "tok2vec": tok2vec}})
random.seed(0)
def sent():
    # det adj noun verb det noun .: heads fixed pattern
    w = [random.choice(["the", "a"]), random.choice(["big", "small"]), random.choice(["dog", "cat"]),
         random.choice(["saw", "ate"]), random.choice(["the", "a"]), random.choice(["fish", "bird"]), "."]
    heads = [2, 2, 3, 3, 5, 3, 3]
    deps = ["det", "amod", "nsubj", "ROOT", "det", "dobj", "punct"]
    return w, heads, deps
train = []
for _ in range(60):
    w1, h1, d1 = sent(); w2, h2, d2 = sent()
    words_ = w1 + w2
    heads = h1 + [h + 7 for h in h2]
    deps = d1 + d2
    doc = Doc(nlp.vocab, words=words_, sent_starts=[True] + [False] * 6 + [True] + [False] * 6)
    ex = Example.from_dict(doc, {"heads": heads, "deps": deps, "sent_starts": [1] + [0] * 6 + [1] + [0] * 6})
    train.append(ex)
opt = nlp.initialize(lambda: train)
print("nI:", nlp.get_pipe("experimental_arc_predicter").cfg["nI"],
      "labels:", nlp.get_pipe("experimental_arc_labeler").labels)
t0 = time.time()
for epoch in range(15):
    losses = {}
    random.shuffle(train)
    for i in range(0, len(train), 8):
        nlp.update(train[i:i + 8], sgd=opt, losses=losses)
    if epoch % 5 == 4:
        print("epoch", epoch, {k: round(v, 3) for k, v in losses.items()})
print("train s:", round(time.time() - t0, 2))
scores = nlp.evaluate(train[:20])
print("UAS", scores["dep_uas"], "LAS", scores["dep_las"])
with tempfile.TemporaryDirectory() as d:
    nlp.to_disk(d)
    nlp2 = spacy.load(d)
    text = "the big dog saw a fish . a small cat ate the bird ."
    a = [t.head.i for t in nlp(text)]
    b = [t.head.i for t in nlp2(text)]
    print("heads:", a, "reloaded equal:", a == b, [t.dep_ for t in nlp2(text)])
print("torch imported:", "torch" in sys.modules)
ok = scores["dep_uas"] >= 0.9 and scores["dep_las"] >= 0.9 and "torch" not in sys.modules and a == b
sys.exit(0 if ok else 1)
