#!/usr/bin/env bash
# A real client: spaCy's own CLI trains spacy-experimental's biaffine parser
# (experimental_arc_predicter + experimental_arc_labeler) on this package's
# architectures (biaffine.PairwiseBilinear.v1, biaffine.Bilinear.v1), without
# PyTorch, then evaluates it.
#
#   bash scripts/spacy_check.sh [TRAIN.conllu DEV.conllu] [STEPS]
#
# Makes a venv (build-spacy/venv) from PyPI with spaCy 3.7, spacy-experimental
# 0.6.4 (the newest beside spaCy 3.7) and this package (pip install .), checks
# torch is not installed, takes the first 2000 sentences of TRAIN and 500 of
# DEV (default: UD English EWT from ../shared/data/ud-english-ewt, CC BY-SA
# 4.0, not shipped), converts them with `spacy convert`, runs `spacy train` for
# STEPS (default 300) steps and prints UAS / LAS from `spacy evaluate`.
# BIAFFINE_PIP_SPEC=<wheel or directory> installs that biaffine instead of
# this checkout. Prints SKIPPED when PyPI or the data is not there. Not in .ci/run (it
# installs spaCy and trains for minutes).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
shared="$root/../shared/data/ud-english-ewt"
train_in=${1:-$shared/en_ewt-ud-train.conllu}
dev_in=${2:-$shared/en_ewt-ud-dev.conllu}
steps=${3:-300}
for f in "$train_in" "$dev_in"; do
  if [ ! -f "$f" ]; then
    echo "SKIPPED: no CoNLL-U file $f (pass TRAIN.conllu DEV.conllu)"
    exit 0
  fi
done
w=build-spacy
mkdir -p "$w"
if [ ! -x "$w/venv/bin/spacy" ]; then
  rm -rf "$w/venv"
  /usr/bin/python3 -m venv "$w/venv"
  # click: spaCy 3.7.5's CLI imports it, and its typer no longer brings it.
  if ! "$w/venv/bin/pip" install -q "spacy>=3.7,<3.8" "spacy-experimental==0.6.4" click 2>"$w/pip.err"; then
    echo "SKIPPED: cannot install spaCy 3.7 and spacy-experimental 0.6.4 from PyPI: $(tail -1 "$w/pip.err")"
    exit 0
  fi
fi
# BIAFFINE_PIP_SPEC: what to install as biaffine (a wheel, another checkout;
# "installed": keep the venv's); default this checkout.
if [ "${BIAFFINE_PIP_SPEC:-.}" != installed ]; then
  "$w/venv/bin/pip" install -q "${BIAFFINE_PIP_SPEC:-.}"
fi
py="$w/venv/bin/python"
if "$py" -c "import importlib.util, sys; sys.exit(importlib.util.find_spec('torch') is None)"; then
  echo "spacy_check: torch is installed in $w/venv; this check is about running without it" >&2
  exit 1
fi
"$py" -m biaffine > "$w/info.txt"
head -3 "$w/info.txt"

# The first N sentences of a CoNLL-U file (sentences end at a blank line).
head_sentences() { awk -v n="$2" 'BEGIN { RS = ""; ORS = "\n\n" } NR <= n' "$1"; }
mkdir -p "$w/conllu" "$w/corpus"
head_sentences "$train_in" 2000 > "$w/conllu/train.conllu"
head_sentences "$dev_in" 500 > "$w/conllu/dev.conllu"
"$w/venv/bin/spacy" convert "$w/conllu/train.conllu" "$w/corpus" --converter conllu -n 10 > /dev/null
"$w/venv/bin/spacy" convert "$w/conllu/dev.conllu" "$w/corpus" --converter conllu -n 10 > /dev/null

cat > "$w/base.cfg" <<EOF
[paths]
train = "$w/corpus/train.spacy"
dev = "$w/corpus/dev.spacy"

[system]
seed = 0
gpu_allocator = null

[nlp]
lang = "en"
pipeline = ["sentencizer","tok2vec","arc_predicter","arc_labeler"]
batch_size = 256

[components]

[components.sentencizer]
factory = "sentencizer"

[components.tok2vec]
factory = "tok2vec"

[components.tok2vec.model]
@architectures = "spacy.Tok2Vec.v2"

[components.tok2vec.model.embed]
@architectures = "spacy.MultiHashEmbed.v2"
width = 96
attrs = ["NORM","PREFIX","SUFFIX","SHAPE"]
rows = [5000,1000,2500,2500]
include_static_vectors = false

[components.tok2vec.model.encode]
@architectures = "spacy.MaxoutWindowEncoder.v2"
width = 96
depth = 4
window_size = 1
maxout_pieces = 3

[components.arc_predicter]
factory = "experimental_arc_predicter"

[components.arc_predicter.model]
@architectures = "biaffine.PairwiseBilinear.v1"
hidden_width = 64
nO = 1
dropout = 0.1

[components.arc_predicter.model.tok2vec]
@architectures = "spacy.Tok2VecListener.v1"
width = 96
upstream = "tok2vec"

[components.arc_labeler]
factory = "experimental_arc_labeler"

[components.arc_labeler.model]
@architectures = "biaffine.Bilinear.v1"
hidden_width = 64
dropout = 0.1

[components.arc_labeler.model.tok2vec]
@architectures = "spacy.Tok2VecListener.v1"
width = 96
upstream = "tok2vec"

[corpora]

[corpora.train]
@readers = "spacy.Corpus.v1"
path = \${paths.train}

[corpora.dev]
@readers = "spacy.Corpus.v1"
path = \${paths.dev}

[training]
seed = \${system.seed}
dropout = 0.1
max_steps = $steps
max_epochs = 0
eval_frequency = 100
patience = 0
annotating_components = ["sentencizer"]
train_corpus = "corpora.train"
dev_corpus = "corpora.dev"

[training.batcher]
@batchers = "spacy.batch_by_words.v1"
size = 1000
tolerance = 0.2

[training.optimizer]
@optimizers = "Adam.v1"
learn_rate = 0.002

[training.score_weights]
dep_uas = 0.5
dep_las = 0.5

[initialize]
EOF
# spaCy's defaults for everything the base config leaves out.
"$w/venv/bin/spacy" init fill-config "$w/base.cfg" "$w/config.cfg" > /dev/null
echo "spacy_check: spacy train, $steps steps ($(grep -c '^# sent_id' "$w/conllu/train.conllu") training sentences)"
t0=$SECONDS
"$w/venv/bin/spacy" train "$w/config.cfg" --output "$w/model"
echo "spacy_check: trained in $((SECONDS - t0)) s"
echo "spacy_check: parse with the trained pipeline:"
"$py" - "$w/model/model-last" <<'PY'
import sys, spacy
nlp = spacy.load(sys.argv[1])
doc = nlp("The parser scores every head of every token in bounded memory.")
print(" ".join(f"{t.text}<-{t.head.i}:{t.dep_}" for t in doc))
print("torch imported:", "torch" in sys.modules)
PY
"$w/venv/bin/spacy" evaluate "$w/model/model-last" "$w/corpus/dev.spacy" --output "$w/metrics.json" | sed -n '/UAS\|LAS\|SPEED/p'
"$py" -c "import json; m = json.load(open('$w/metrics.json')); print(f\"spacy_check: dev UAS {m['dep_uas']:.3f} LAS {m['dep_las']:.3f}\")"
