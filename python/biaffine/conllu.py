"""CoNLL-U in and out, and attachment scores as the CoNLL 2018 shared task computes them.

Pure Python (no numpy), the mirror of the C++ header biaffine/conllu.hpp: the same
checks, the same error messages ("file:line: what"), the same scores.

    sents = read("en_ewt-ud-dev.conllu")
    for begin, end in documents(sents):          # by "# newdoc", else every N sentences
        heads = [scorer_heads(s) for s in sents[begin:end]]  # split-relative, root -> itself
    write("out.conllu", sents)                   # byte for byte what was read
    scores = evaluate(gold, system)              # scores.uas, .las, .uas_no_punct, .las_no_punct

Multiword-token lines (``3-4``) and empty nodes (``5.1``) are kept verbatim for writing
back but are not words: the basic tree, and the scores, cover words only.

Text to be parsed has no tree: a sentence whose every word has HEAD and DEPREL ``_`` reads
as unannotated (``Word.head is None``, written back as ``_``); a tree on some of its words
only is an error, as is scoring or taking gold heads from a sentence without one. Known heads
that form a cycle are an error naming the sentence's first line.
"""

from __future__ import annotations

import io
import os
from dataclasses import dataclass, field
from typing import Iterable, List, Optional, Sequence, Tuple, Union

__all__ = [
    "ConlluError", "Word", "Sentence", "AttachmentScores", "read", "parse", "write", "format_sentences",
    "documents", "scorer_heads", "set_scorer_heads", "universal_relation", "evaluate",
]


class ConlluError(ValueError):
    """Malformed CoNLL-U; the message starts with "file:line: "."""


@dataclass
class Word:
    form: str
    lemma: str
    upos: str
    xpos: str
    feats: str
    head: Optional[int]  # 0: the root, else the 1-based id of the head word; None: "_"
    deprel: str
    deps: str
    misc: str


@dataclass
class Sentence:
    comments: List[str] = field(default_factory=list)  # verbatim, each starting with '#'
    words: List[Word] = field(default_factory=list)
    extras: List[Tuple[int, str]] = field(default_factory=list)  # (words before it, verbatim line)
    line: int = 0  # 1-based line of its first line

    @property
    def annotated(self) -> bool:
        """Whether its words carry a tree (HEAD and DEPREL); False when they are "_"."""
        return not self.words or self.words[0].head is not None

    @property
    def newdoc(self) -> bool:
        return any(c.startswith("# newdoc") and (len(c) == 8 or c[8] in " \t") for c in self.comments)


def universal_relation(deprel: str) -> str:
    """The universal part of a relation: "nsubj:pass" -> "nsubj"."""
    return deprel.split(":", 1)[0]


def _index(s: str):
    # Decimal, no sign, no leading zeros: written back as the same bytes.
    if not s or len(s) > 9 or (len(s) > 1 and s[0] == "0") or not all("0" <= c <= "9" for c in s):
        return None
    return int(s)


def _head_cycle(words: Sequence[Word]) -> str:
    # The first cycle among the known heads, "2 -> 3 -> 2", or "" (as the C++
    # detail::head_cycle; heads already in range). Each word is walked once.
    def up(v: int) -> int:
        h = words[v - 1].head
        return 0 if h is None else h

    state = [0] * (len(words) + 1)  # 0 not seen, 1 on the walk, 2 ends at the root or a "_"
    for start in range(1, len(words) + 1):
        v = start
        while v != 0 and state[v] == 0:
            state[v] = 1
            v = up(v)
        if v != 0 and state[v] == 1:
            cycle, u = [v], up(v)
            while u != v:
                cycle.append(u)
                u = up(u)
            return " -> ".join(map(str, cycle + [v]))
        v = start
        while v != 0 and state[v] == 1:
            state[v] = 2
            v = up(v)
    return ""


def parse(text: str, name: str = "<string>") -> List[Sentence]:
    """Sentences of CoNLL-U text; `name` is the file name errors give."""

    def fail(line: int, what: str):
        raise ConlluError(f"{name}:{line}: {what}")

    out: List[Sentence] = []
    cur = Sentence()
    open_, in_words = False, False
    word_lines: List[int] = []
    ranges: List[Tuple[int, int]] = []  # the multiword tokens' (line, last word)
    lines = text.split("\n")
    # "a\n" splits into ["a", ""]: the final "" is the end of the text, not a line.
    if lines and lines[-1] == "":
        lines.pop()
    lineno = 0
    for lineno, line in enumerate(lines, 1):
        if line.endswith("\r"):
            fail(lineno, "carriage return (CRLF line end); CoNLL-U lines end with LF")
        if lineno == 1 and line.startswith("\ufeff"):
            fail(lineno, "UTF-8 byte order mark at the start of the file; CoNLL-U files have none (drop the first 3 bytes)")
        if not line:
            if not open_:
                fail(lineno, "blank line where a sentence should start (two blank lines in a row, or a blank first line)")
            if not cur.words:
                fail(lineno, "sentence without words (only comments / multiword or empty-node lines)")
            n = len(cur.words)
            for wl, w in zip(word_lines, cur.words):
                if w.head is not None and w.head > n:
                    fail(wl, f"head {w.head} out of range: the sentence has {n} words")
            cycle = _head_cycle(cur.words)
            if cycle:  # no path to the root: not a tree
                fail(cur.line, f"the heads of the sentence starting here form a cycle (words {cycle}): every word's "
                     "chain of heads must reach the root (HEAD 0)")
            for at, last in ranges:
                if last > n:
                    fail(at, f"multiword token ends at word {last} but the sentence has {n} words")
            out.append(cur)
            cur, open_, in_words, word_lines, ranges = Sentence(), False, False, [], []
            continue
        if not open_:
            cur.line, open_ = lineno, True
        if line[0] == "#":
            if in_words:
                fail(lineno, "comment line after the first token line of a sentence")
            cur.comments.append(line)
            continue
        in_words = True
        cols = line.split("\t")
        if len(cols) != 10:
            fail(lineno, f"expected 10 tab-separated columns, found {len(cols)}")
        ident = cols[0]
        n = len(cur.words)
        if "-" in ident or "." in ident:
            sep = "-" if "-" in ident else "."
            a, _, b = ident.partition(sep)
            a, b = _index(a), _index(b)
            if a is None or b is None:
                fail(lineno, f"malformed id '{ident}'")
            if sep == "-" and (a != n + 1 or b <= a):
                fail(lineno, f"multiword token '{ident}' must span {n + 1}-k with k > {n + 1}")
            if sep == "-" and ranges and a <= ranges[-1][1]:
                fail(lineno, f"multiword token '{ident}' overlaps the one before, which ends at word {ranges[-1][1]}")
            if sep == "-":
                ranges.append((lineno, b))
            if sep == "." and (a != n or b == 0):
                fail(lineno, f"empty node '{ident}' must be numbered {n}.k, k >= 1")
            cur.extras.append((n, line))
            continue
        i = _index(ident)
        if i is None:
            fail(lineno, f"id '{ident}' is not a positive integer")
        if i != n + 1:
            fail(lineno, f"word id {ident} out of sequence, expected {n + 1}")
        no_tree = cols[6] == "_"
        if no_tree:
            head = None
            if cols[7] != "_":
                fail(lineno, f"word {ident} has a relation (DEPREL '{cols[7]}') but no head (HEAD '_')")
        else:
            head = _index(cols[6])
            if head is None:
                fail(lineno, f"head '{cols[6]}' is not a non-negative integer or '_'")
            if head == i:
                fail(lineno, f"word {ident} is its own head")
            if not cols[7] or cols[7] == "_":
                fail(lineno, f"word {ident} has no relation (DEPREL)")
        if cur.words and no_tree != (cur.words[0].head is None):
            fail(lineno, f"word {ident} " + ("has no head ('_')" if no_tree else "has a head") + " but word 1 of its "
                 "sentence " + ("has one" if no_tree else "has none ('_')") + ": a sentence carries a tree on every "
                 "word or on none")
        cur.words.append(Word(cols[1], cols[2], cols[3], cols[4], cols[5], head, cols[7], cols[8], cols[9]))
        word_lines.append(lineno)
    if open_:
        fail(lineno, "missing blank line after the last sentence (the file must end with an empty line)")
    return out


def read(path: Union[str, os.PathLike]) -> List[Sentence]:
    """Sentences of a CoNLL-U file (UTF-8); errors name the file."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise ConlluError(f"{os.fspath(path)}: cannot open for reading ({e.strerror})") from e
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        column = e.start - (data.rfind(b"\n", 0, e.start) + 1) + 1
        raise ConlluError(f"{os.fspath(path)}:{line}: not UTF-8 (byte 0x{data[e.start]:02x} at byte {column} of the "
                          f"line); CoNLL-U is UTF-8") from None
    return parse(text, os.fspath(path))


def format_sentences(sentences: Iterable[Sentence]) -> str:
    """CoNLL-U text; what parse() gave comes back character for character."""
    buf = io.StringIO()
    for s in sentences:
        for c in s.comments:
            buf.write(c + "\n")
        e = 0
        for i in range(len(s.words) + 1):
            while e < len(s.extras) and s.extras[e][0] == i:
                buf.write(s.extras[e][1] + "\n")
                e += 1
            if i == len(s.words):
                break
            w = s.words[i]
            head = "_" if w.head is None else str(w.head)
            buf.write("\t".join((str(i + 1), w.form, w.lemma, w.upos, w.xpos, w.feats, head, w.deprel,
                                 w.deps, w.misc)) + "\n")
        if e != len(s.extras):
            after, text = s.extras[e]
            raise ConlluError(f"write: the sentence of line {s.line} has a multiword or empty-node line "
                              f"({text.split(chr(9), 1)[0]}) after word {after}, out of order or past its "
                              f"{len(s.words)} words")
        buf.write("\n")
    return buf.getvalue()


def write(path: Union[str, os.PathLike], sentences: Iterable[Sentence]) -> None:
    with open(path, "wb") as f:
        f.write(format_sentences(sentences).encode("utf-8"))


def documents(sentences: Sequence[Sentence], every: int = 32) -> List[Tuple[int, int]]:
    """Documents as [begin, end) ranges: at each "# newdoc" when any sentence has one, else every `every`."""
    if every <= 0:
        raise ConlluError("documents: every must be positive")
    marked = any(s.newdoc for s in sentences)
    out: List[List[int]] = []
    for i, s in enumerate(sentences):
        if i == 0 or (s.newdoc if marked else i % every == 0):
            out.append([i, i])
        out[-1][1] = i + 1
    return [(a, b) for a, b in out]


def scorer_heads(s: Sentence) -> List[int]:
    """Split-relative heads (0..n-1), the root pointing at itself, as the scorer's losses take them."""
    if not s.annotated:
        raise ConlluError(f"scorer_heads: the sentence of line {s.line} has no tree (HEAD and DEPREL are '_')")
    return [m if w.head == 0 else w.head - 1 for m, w in enumerate(s.words)]


def set_scorer_heads(s: Sentence, heads: Sequence[int]) -> None:
    """The inverse of scorer_heads: sets the HEAD column (on a sentence read without a tree, set
    each word's deprel as well, or the file written will not read back)."""
    n = len(s.words)
    if len(heads) != n:
        raise ConlluError(f"set_scorer_heads: {len(heads)} heads for a sentence of {n} words (line {s.line})")
    for m, h in enumerate(heads):
        if not 0 <= h < n:
            raise ConlluError(f"set_scorer_heads: head {h} out of range for word {m + 1} of {n}")
    for m, h in enumerate(heads):
        s.words[m].head = 0 if h == m else h + 1


@dataclass
class AttachmentScores:
    """Counts over words; `_np` leaves out words whose gold UPOS is PUNCT."""
    words: int = 0
    heads: int = 0
    labelled: int = 0
    words_np: int = 0
    heads_np: int = 0
    labelled_np: int = 0

    @staticmethod
    def _pct(a: int, b: int) -> float:
        return 100.0 * a / b if b else 0.0

    @property
    def uas(self) -> float:
        return self._pct(self.heads, self.words)

    @property
    def las(self) -> float:
        return self._pct(self.labelled, self.words)

    @property
    def uas_no_punct(self) -> float:
        return self._pct(self.heads_np, self.words_np)

    @property
    def las_no_punct(self) -> float:
        return self._pct(self.labelled_np, self.words_np)


def evaluate(gold: Sequence[Sentence], system: Sequence[Sentence]) -> AttachmentScores:
    """UAS / LAS as the CoNLL 2018 shared task (words, punctuation included, LAS on the universal
    relation), plus both without gold-PUNCT words. Tokenisations must match (same words, same forms)."""
    if len(gold) != len(system):
        raise ConlluError(f"evaluate: gold has {len(gold)} sentences, system {len(system)}")
    r = AttachmentScores()
    for i, (g, s) in enumerate(zip(gold, system)):
        for which, x in (("gold", g), ("system", s)):
            if not x.annotated:
                raise ConlluError(f"evaluate: the {which} sentence of line {x.line} has no tree (HEAD and DEPREL are '_')")
        if len(g.words) != len(s.words):
            raise ConlluError(f"evaluate: sentence {i + 1} (gold line {g.line}) has {len(g.words)} gold words, "
                              f"{len(s.words)} system words")
        for m, (gw, sw) in enumerate(zip(g.words, s.words)):
            if gw.form != sw.form:
                raise ConlluError(f"evaluate: word {m + 1} of the sentence at gold line {g.line} differs: "
                                  f"'{gw.form}' vs '{sw.form}'")
            head = gw.head == sw.head
            lab = head and universal_relation(gw.deprel) == universal_relation(sw.deprel)
            r.words += 1
            r.heads += head
            r.labelled += lab
            if gw.upos != "PUNCT":
                r.words_np += 1
                r.heads_np += head
                r.labelled_np += lab
    return r
