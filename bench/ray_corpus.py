#!/usr/bin/env python3
"""ray_corpus.py - words/s of examples/python/parse_corpus_ray.py on a local Ray cluster (1 and 2
workers) against the same parse in one plain process, and each actor's resident memory over the
run (docs/scaling.md).

    python3 bench/ray_corpus.py --treebank $EWT/en_ewt-ud-train.conllu [--repeat 5] [--files-per-copy 10]
        [--model DIR] [--workdir DIR]

The corpus: the treebank's sentences with HEAD, DEPREL and UPOS blanked, written --repeat times
as --files-per-copy files each (EWT train x 5: ~1M words in 50 files). The parser: --model, else
one trained here for one epoch on the shipped sample at the example's default sizes (width 256,
4 blocks, arc hidden 256, label hidden 128): its speed is that of any parser of these sizes,
trained or not. Every run writes the same outputs, compared byte for byte with the plain
process's (a mismatch fails the bench, exit 1).

Timings, in this order in one run (the machine may be shared: compare ratios within a run):
  plain    one process, no Ray: Parser.from_disk, then parse_file -> CoNLL-U written, per file;
  ray 1    a local cluster (ray.init(num_cpus=2), started once and warmed up on one file, not
           timed), --workers 1:
           from the dataset's creation to the last output, actor start-up (the parser loaded) included;
  ray 2    the same with --workers 2.
Each actor's resident memory (/proc/self/statm) after every file it parsed: first, peak, last.
"""
import argparse
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples" / "python"
SAMPLE = ROOT / "tests" / "data" / "ud-english-ewt-sample"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--treebank", required=True, help="CoNLL-U whose sentences make the corpus (EWT train)")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--files-per-copy", type=int, default=10)
    ap.add_argument("--model", help="a saved parser (default: one trained here, see above)")
    ap.add_argument("--workdir", default="build-bench-ray", help="corpus, model and outputs go here")
    a = ap.parse_args()
    if a.repeat < 1 or a.files_per_copy < 1:
        ap.error("--repeat and --files-per-copy must be at least 1")
    # One thread a process, as Ray gives an actor of one CPU (OMP_NUM_THREADS=1): the plain
    # process too, before numpy loads its BLAS.
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "BLIS_NUM_THREADS"):
        os.environ[var] = "1"
    # The actors import the examples (parse_corpus_ray, train_treebank_parser): a local
    # cluster's workers inherit this environment.
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(EXAMPLES), os.environ.get("PYTHONPATH")]))
    sys.path.insert(0, str(EXAMPLES))
    import subprocess

    import ray

    import parse_corpus_ray as pcr
    import train_treebank_parser as ttp
    from biaffine import conllu

    work = Path(a.workdir).resolve()
    corpus = work / "corpus"
    corpus.mkdir(parents=True, exist_ok=True)
    model = Path(a.model) if a.model else work / "model"
    if not (model / "config.json").exists():
        subprocess.run([sys.executable, str(EXAMPLES / "train_treebank_parser.py"), "--train",
                        str(SAMPLE / "en_ewt-sample-train.conllu"), "--dev", str(SAMPLE / "en_ewt-sample-dev.conllu"),
                        "--epochs", "1", "--minutes", "0", "--no-check", "--save", str(model)],
                       check=True, stdout=subprocess.DEVNULL)
    sents = conllu.read(a.treebank)
    for s in sents:
        for w in s.words:
            w.upos, w.head, w.deprel, w.deps = "_", None, "_", "_"
    per = -(-len(sents) // a.files_per_copy)
    for r in range(a.repeat):
        for f in range(a.files_per_copy):
            path = corpus / f"copy{r}_part{f:02d}.conllu"
            if not path.exists():
                conllu.write(path, sents[f * per:(f + 1) * per])
    inputs = sorted(corpus.glob("*.conllu"))
    words = a.repeat * sum(len(s.words) for s in sents)
    print(f"corpus: {len(inputs)} files, {words} words ({a.treebank} x {a.repeat}, blanked); parser {model}")

    # plain: one process, the example's own code, written to disk as the actors write.
    plain_out = work / "out_plain"
    plain_out.mkdir(exist_ok=True)
    t0, c0 = time.perf_counter(), time.process_time()
    parser = ttp.Parser.from_disk(model, 1, 16.0)
    for path in inputs:
        (plain_out / path.name).write_bytes(conllu.format_sentences(ttp.parse_file(parser, path)).encode("utf-8"))
    plain, plain_cpu = time.perf_counter() - t0, time.process_time() - c0
    print(f"plain process:  {plain:7.1f} s  {words / plain:8.0f} words/s (parser load included); "
          f"{words / plain_cpu:.0f} words per CPU second", flush=True)
    del parser

    ray.init(num_cpus=2, include_dashboard=False)
    # Warm-up, not timed: Ray's first dataset starts its worker processes and imports.
    warm = work / "out_warmup"
    for p in warm.glob("*"):
        p.unlink()
    warm.mkdir(exist_ok=True)
    pcr.run([(str(inputs[0]), pcr.output_name(inputs[0], warm))],
            argparse.Namespace(workers=1, model=str(model), format="auto", threads=1, budget_mb=16.0))
    results = {}
    failed = False
    for workers in (1, 2):
        out = work / f"out_ray{workers}"
        for p in out.glob("*"):
            p.unlink()
        out.mkdir(exist_ok=True)
        args = argparse.Namespace(workers=workers, model=str(model), format="auto", threads=1, budget_mb=16.0)
        pairs = [(str(p), pcr.output_name(p, out)) for p in inputs]
        t0 = time.perf_counter()
        rows = pcr.run(pairs, args)
        secs = time.perf_counter() - t0
        results[workers] = secs
        bad = [r["error"] for r in rows if r["status"] != "parsed"]
        differ = [p.name for p in inputs if (out / p.name).read_bytes() != (plain_out / p.name).read_bytes()]
        if bad or differ:
            print(f"ray {workers}: FAILED: {bad[:3]} {len(differ)} outputs differ from the plain process's", flush=True)
            failed = True
        busy = sum(float(r["seconds"]) for r in rows)
        cpu = sum(float(r["cpu_seconds"]) for r in rows)
        # CPU / busy: the share of a core an actor got while parsing (a loaded machine gives less than 1).
        print(f"ray, {workers} worker(s): {secs:7.1f} s  {words / secs:8.0f} words/s  (actors busy {busy:.1f} s, "
              f"{cpu:.1f} s CPU: {words / cpu:.0f} words per CPU second, {cpu / busy:.2f} of a core while busy)",
              flush=True)
        by_pid = {}
        for r in rows:
            by_pid.setdefault(int(r["pid"]), []).append(float(r["rss_mb"]))
        for pid, rss in sorted(by_pid.items()):
            print(f"  actor pid {pid}: {len(rss)} files, resident MB after the first {rss[0]:.0f}, "
                  f"peak {max(rss):.0f}, "
                  f"last {rss[-1]:.0f}, median {statistics.median(rss):.0f}; after each file: "
                  + " ".join(f"{x:.0f}" for x in rss))
    ray.shutdown()
    print(f"\nspeed-up 1 -> 2 workers: {results[1] / results[2]:.2f}x; Ray (1 worker) against the plain process: "
          f"{100 * (results[1] / plain - 1):+.1f}% time")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
