#!/usr/bin/env python3
"""parse_corpus_ray.py - a corpus parsed on a Ray cluster by a saved treebank parser, one output
file per input file.

    pip install biaffine[ray]        # Ray Data (and thinc) beside the library
    python3 examples/python/train_treebank_parser.py --train TRAIN --dev DEV --save model/
    python3 examples/python/parse_corpus_ray.py --model model/ --out parsed/ corpus/ [more files,
        folders or globs] [--workers N] [--address ADDR] [--format auto|conllu|text]

Inputs: CoNLL-U (HEAD, DEPREL and UPOS may be `_`) or plain text (a sentence a line, tokens split
at whitespace; --format text, or any file named *.txt); a folder means its *.conllu and *.txt
files; a glob is expanded here. Each input IN gives OUT/<name of IN without .conllu/.txt>.conllu,
CoNLL-U with heads, relations and (where the input has none) predicted UPOS.

How it runs (docs/scaling.md): the file list becomes a Ray Data dataset of one row per file;
map_batches runs the class ParseFiles on an actor pool of --workers actors (one CPU each), each
of which loads the saved parser once (train_treebank_parser.Parser.from_disk) and parses one whole
file per call, so a file is never split between tasks. Ray restarts an actor that died and runs
its calls again (Ray Data's default for actor pools), so a file may be parsed twice; the output
is written exactly once all the same: each attempt writes a temporary name of its own in OUT
(host, process id, random part), then renames it into place (atomic on one filesystem); the
driver removes the temporary files of dead attempts once every file is done (one listing of OUT,
on every run: a run that was itself killed leaves them to the next). An output that exists is
finished: a re-run skips it.

A bad input file (not CoNLL-U, not UTF-8, unreadable) is caught in the task - an exception left
to Ray would fail the whole dataset - and reported as "file:line: what" at the end; the other
files still finish, and the exit status is 1. Exit 2: bad usage, or no parser at --model.

--address ADDR joins a running cluster (`ray start --head` on one machine, `ray start --address`
on the others; "auto" finds the local one); without it a local cluster of this machine's CPUs
is started for the run. Every machine needs this folder, the library and the model folder at the
same paths (a shared filesystem, or the same image), and OUT must be one shared filesystem.
--threads: the C++ batcher's threads inside each actor (default 1: one actor a core).
"""
import argparse
import glob
import os
import socket
import sys
import time
import uuid
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parent
TMP_MARK = ".tmp-"  # temporary outputs: .<name>.tmp-<host>-<pid>-<random>


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("inputs", nargs="+", help="input files, folders (their *.conllu and *.txt) or globs")
    ap.add_argument("--model", required=True, metavar="DIR", help="a parser saved by train_treebank_parser.py --save")
    ap.add_argument("--out", required=True, metavar="DIR", help="output folder (one .conllu per input)")
    ap.add_argument("--format", choices=("auto", "conllu", "text"), default="auto",
                    help="of the inputs: auto (default): text when named *.txt, else CoNLL-U")
    ap.add_argument("--address", default=None,
                    help="the Ray cluster to join (e.g. auto, or ray://HOST:10001); default: a local one")
    ap.add_argument("--workers", type=int, default=None, help="parsing actors (default: the cluster's CPUs)")
    ap.add_argument("--threads", type=int, default=1, help="the batcher's threads in each actor (default 1)")
    ap.add_argument("--budget-mb", type=float, default=16.0, help="the scorers' batch budget in each actor")
    ap.add_argument("--no-progress", action="store_true", help="no progress bar")
    a = ap.parse_args(argv)
    if a.workers is not None and a.workers < 1 or a.threads < 1 or a.budget_mb <= 0:
        ap.error("--workers and --threads must be at least 1, --budget-mb positive")
    return a


def list_inputs(specs):
    """The input files, in order, each once: files as given, folders' *.conllu and *.txt (sorted),
    globs expanded. Raises ValueError for a name that matches nothing."""
    out, seen = [], set()
    for spec in specs:
        if os.path.isdir(spec):
            found = sorted(str(p) for p in Path(spec).iterdir() if p.suffix in (".conllu", ".txt") and p.is_file())
        elif any(c in spec for c in "*?["):
            found = sorted(glob.glob(spec, recursive=True))
        else:
            found = [spec] if os.path.isfile(spec) else []
        if not found:
            raise ValueError(f"{spec}: no such file, or no .conllu / .txt file in it")
        for f in found:
            f = os.path.abspath(f)
            if f not in seen:
                seen.add(f)
                out.append(f)
    return out


def output_name(src, out_dir):
    stem = Path(src).name
    for ext in (".conllu", ".txt"):
        if stem.endswith(ext):
            stem = stem[:-len(ext)]
            break
    return os.path.join(os.path.abspath(out_dir), stem + ".conllu")


def plan(inputs, out_dir):
    """(input, output) pairs; two inputs of one output name, or an output that is an input, are
    refused (ValueError) before anything runs."""
    pairs, by_out = [], {}
    for src in inputs:
        dst = output_name(src, out_dir)
        if dst in by_out:
            raise ValueError(f"{src} and {by_out[dst]} would both be written to {dst}: rename one")
        if os.path.abspath(src) == dst:
            raise ValueError(f"{src}: the output would overwrite the input: choose another --out")
        by_out[dst] = src
        pairs.append((src, dst))
    return pairs


def remove_temporaries(out_dir, dsts):
    """Removes the temporary files of the outputs `dsts` in out_dir; called when no attempt runs,
    so each is a dead attempt's. One listing of the folder, whatever the number of files."""
    names = {os.path.basename(d) for d in dsts}
    removed = 0
    for name in os.listdir(out_dir):
        if name.startswith(".") and TMP_MARK in name and name[1:name.rindex(TMP_MARK)] in names:
            with_missing_ok(os.unlink, os.path.join(out_dir, name))
            removed += 1
    return removed


def with_missing_ok(fn, path):
    try:
        fn(path)
    except FileNotFoundError:  # another attempt removed it first
        pass


def rss_mb():
    """This process's resident memory now (not its peak), from /proc."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


class ParseFiles:
    """A Ray Data actor: loads the saved parser once; each call parses whole files. Batches are
    {"src": [...], "dst": [...]}; each row gives status ("parsed", "finished": the output existed,
    "failed"), the error ("file:line: what"), sentences, words, seconds (wall and the process's
    CPU), and the actor's pid and resident MB after the file."""

    def __init__(self, model, fmt, threads, budget_mb):
        if str(EXAMPLES) not in sys.path:
            sys.path.insert(0, str(EXAMPLES))
        import train_treebank_parser as ttp  # the parser's code: this folder, on every machine
        self.ttp = ttp
        self.fmt = fmt
        self.parser = ttp.Parser.from_disk(model, threads, budget_mb)
        self.host = socket.gethostname().replace("-", "_")

    def parse_one(self, src, dst):
        if os.path.exists(dst):  # an earlier attempt of this file finished before its actor died
            return "finished", "", 0, 0
        tmp = os.path.join(os.path.dirname(dst), f".{os.path.basename(dst)}{TMP_MARK}{self.host}-{os.getpid()}-"
                                                 f"{uuid.uuid4().hex}")
        try:
            sents = self.ttp.parse_file(self.parser, src, self.fmt)
            with open(tmp, "wb") as f:
                f.write(self.ttp.conllu.format_sentences(sents).encode("utf-8"))
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, dst)
        except Exception as e:  # noqa: BLE001 - reported by the driver: one bad file fails only itself
            with_missing_ok(os.unlink, tmp)
            what = str(e) if isinstance(e, self.ttp.conllu.ConlluError) else f"{src}: {type(e).__name__}: {e}"
            return "failed", what, 0, 0
        return "parsed", "", len(sents), sum(len(s.words) for s in sents)

    def __call__(self, batch):
        cols = {k: [] for k in ("src", "dst", "status", "error", "sentences", "words", "seconds", "cpu_seconds",
                                "pid", "rss_mb")}
        for src, dst in zip(batch["src"], batch["dst"]):
            t0, c0 = time.perf_counter(), time.process_time()
            status, error, n_sents, n_words = self.parse_one(str(src), str(dst))
            for k, v in (("src", str(src)), ("dst", str(dst)), ("status", status), ("error", error),
                         ("sentences", n_sents), ("words", n_words), ("seconds", time.perf_counter() - t0),
                         ("cpu_seconds", time.process_time() - c0), ("pid", os.getpid()), ("rss_mb", rss_mb())):
                cols[k].append(v)
        return cols


class Progress:
    """tqdm when installed (biaffine[ray] brings it), else a line every 10 s."""

    def __init__(self, total, enabled):
        self.total, self.done, self.last = total, 0, time.monotonic()
        self.bar = None
        if enabled:
            try:
                from tqdm import tqdm
                self.bar = tqdm(total=total, unit="file", file=sys.stderr)
            except ImportError:
                pass
        self.enabled = enabled

    def update(self, words):
        self.done += 1
        if self.bar is not None:
            self.bar.update(1)
            self.bar.set_postfix(words=words, refresh=False)
        elif self.enabled and (time.monotonic() - self.last > 10 or self.done == self.total):
            self.last = time.monotonic()
            print(f"{self.done}/{self.total} files, {words} words", file=sys.stderr, flush=True)

    def close(self):
        if self.bar is not None:
            self.bar.close()


def run(pairs, a, on_row=None):
    """Parses the pairs still to do on the cluster (ray.init done); returns the rows."""
    import ray
    ctx = ray.data.DataContext.get_current()
    ctx.enable_progress_bars = False  # ours counts files; Ray's count blocks
    workers = a.workers or max(1, int(ray.cluster_resources().get("CPU", 1)))
    ds = ray.data.from_items([{"src": s, "dst": d} for s, d in pairs], override_num_blocks=len(pairs))
    ds = ds.map_batches(ParseFiles, batch_size=1, batch_format="numpy", num_cpus=1,
                        compute=ray.data.ActorPoolStrategy(size=min(workers, len(pairs))),
                        fn_constructor_kwargs={"model": os.path.abspath(a.model), "fmt": a.format,
                                               "threads": a.threads, "budget_mb": a.budget_mb})
    rows = []
    for row in ds.iter_rows():
        rows.append(row)
        if on_row is not None:
            on_row(row)
    return rows


def main(argv=None):
    a = parse_args(sys.argv[1:] if argv is None else argv)
    if not (Path(a.model) / "config.json").is_file():
        print(f"parse_corpus_ray.py: {a.model}: no saved parser (config.json) there", file=sys.stderr)
        return 2
    try:
        pairs = plan(list_inputs(a.inputs), a.out)
    except ValueError as e:
        print(f"parse_corpus_ray.py: {e}", file=sys.stderr)
        return 2
    try:
        import ray
        import ray.data  # noqa: F401
    except ImportError as e:
        print(f"parse_corpus_ray.py: Ray Data is not importable ({e}): pip install biaffine[ray]", file=sys.stderr)
        return 2
    os.makedirs(a.out, exist_ok=True)
    todo = [(s, d) for s, d in pairs if not os.path.exists(d)]
    print(f"{len(pairs)} input files, {len(pairs) - len(todo)} already parsed (skipped), {len(todo)} to parse "
          f"-> {a.out}", flush=True)
    rows = []
    if todo:
        t0 = time.perf_counter()
        if a.address:
            ray.init(address=a.address, log_to_driver=True)
        else:
            ray.init(num_cpus=max(a.workers or 0, os.cpu_count() or 1), include_dashboard=False)
        progress = Progress(len(todo), not a.no_progress)
        words = [0]

        def on_row(row):
            words[0] += int(row["words"])
            progress.update(words[0])

        try:
            rows = run(todo, a, on_row)
        finally:
            progress.close()
            ray.shutdown()
        secs = time.perf_counter() - t0
        n_words = sum(int(r["words"]) for r in rows)
        print(f"parsed {sum(r['status'] == 'parsed' for r in rows)} files, {sum(int(r['sentences']) for r in rows)} "
              f"sentences, {n_words} words in {secs:.1f} s ({n_words / secs:.0f} words/s, start-up included)")
    # Every attempt has ended: a temporary file left now is a dead attempt's (of this run or of
    # an earlier one that was itself killed).
    removed = remove_temporaries(os.path.abspath(a.out), [d for _, d in pairs])
    if removed:
        print(f"removed {removed} temporary file(s) of attempts that died")
    failed = [r for r in rows if r["status"] == "failed"]
    for r in failed:
        print(f"parse_corpus_ray.py: failed: {r['error']}", file=sys.stderr)
    missing = [d for _, d in pairs if not os.path.exists(d) and d not in {r["dst"] for r in failed}]
    for d in missing:  # not expected: Ray returned no row for it
        print(f"parse_corpus_ray.py: no output and no error for {d}", file=sys.stderr)
    if failed or missing:
        print(f"{len(failed) + len(missing)} of {len(pairs)} files not parsed", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
