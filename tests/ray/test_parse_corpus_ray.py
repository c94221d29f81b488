# examples/python/parse_corpus_ray.py on a local Ray cluster (the script's own
# ray.init, 2 CPUs): 120 small files (CoNLL-U, some without annotation, and
# plain text) parse to what one process parses, byte for byte; a corrupt file
# among them is reported with its file and line, leaves no output, and the exit
# status is 1 while the rest finish; a re-run parses only what is missing; an
# actor's worker process killed with SIGKILL mid-run: the run still finishes,
# every sentence written exactly once, no temporary file left (nor one an
# earlier run's dead attempt left).
#
# Not in tests/python (whose conftest fails skipped tests): Ray is an optional
# extra, so these are skipped with the reason where it is missing, and
# scripts/ci_ray.sh installs it (CI fails the skip there).
import os
import pathlib
import signal
import subprocess
import sys
import time

import pytest

pytest.importorskip("ray.data", reason="Ray Data is not installed (pip install biaffine[ray]; scripts/ci_ray.sh)")
pytest.importorskip("thinc", reason="thinc is not installed (pip install biaffine[ray])")

from biaffine import conllu  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "python"
TRAIN = EXAMPLES / "train_treebank_parser.py"
RAY_SCRIPT = EXAMPLES / "parse_corpus_ray.py"
SAMPLE = ROOT / "tests" / "data" / "ud-english-ewt-sample"
TINY = ["--epochs", "1", "--width", "16", "--layers", "2", "--arc-hidden", "16", "--label-hidden", "16",
        "--batch-words", "500", "--minutes", "0", "--no-check"]
N_FILES = 120
N_TEXT = 20  # of them plain text


def run(script, *args, **kw):
    return subprocess.run([sys.executable, str(script), *map(str, args)], capture_output=True, text=True,
                          timeout=300, **kw)


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    d = tmp_path_factory.mktemp("ray_model") / "model"
    r = run(TRAIN, "--train", SAMPLE / "en_ewt-sample-dev.conllu", "--dev", SAMPLE / "en_ewt-sample-dev.conllu",
            *TINY, "--save", d)
    assert r.returncode == 0, r.stdout + r.stderr
    return d


def blank(s):
    for w in s.words:
        w.upos, w.head, w.deprel, w.deps = "_", None, "_", "_"


@pytest.fixture(scope="module")
def corpus(tmp_path_factory, model):
    """N_FILES small files of the sample's sentences, every third CoNLL-U one blanked, the last
    N_TEXT plain text; with each file's parse by one plain process (the example's own code)."""
    d = tmp_path_factory.mktemp("ray_corpus")
    sents = conllu.read(SAMPLE / "en_ewt-sample-train.conllu") + conllu.read(SAMPLE / "en_ewt-sample-dev.conllu")
    per = len(sents) // N_FILES
    assert per >= 3, "the sample is too small for this many files"
    files = []
    for i in range(N_FILES):
        part = sents[i * per:(i + 1) * per]
        if i >= N_FILES - N_TEXT:
            path = d / f"doc{i:03d}.txt"
            path.write_text("".join(" ".join(w.form for w in s.words) + "\n" for s in part), encoding="utf-8")
        else:
            path = d / f"doc{i:03d}.conllu"
            if i % 3 == 0:
                for s in part:
                    blank(s)
            conllu.write(path, part)
        files.append(path)
    sys.path.insert(0, str(EXAMPLES))
    try:
        import train_treebank_parser as ttp
    finally:
        sys.path.remove(str(EXAMPLES))
    parser = ttp.Parser.from_disk(model, 1, 16.0)
    expected = {}
    for path in files:
        parsed = ttp.parse_file(parser, path)
        expected[path.with_suffix(".conllu").name] = conllu.format_sentences(parsed).encode("utf-8")
    n_sents = sum(len(conllu.parse(t.decode("utf-8"))) for t in expected.values())
    assert n_sents == per * N_FILES
    return d, expected


def leftovers(out):
    return [p.name for p in out.iterdir() if ".tmp-" in p.name]


def check_outputs(out, expected):
    got = {p.name: p.read_bytes() for p in out.iterdir() if p.suffix == ".conllu"}
    assert sorted(got) == sorted(expected)
    different = [name for name in expected if got[name] != expected[name]]
    assert not different, f"{len(different)} outputs differ from one process's parse, e.g. {different[:3]}"
    assert leftovers(out) == []


def test_corpus_with_a_corrupt_file_then_rerun(tmp_path, corpus, model):
    src, expected = corpus
    inputs = tmp_path / "in"
    inputs.mkdir()
    for p in src.iterdir():
        (inputs / p.name).symlink_to(p)
    bad = inputs / "corrupt.conllu"
    good_text = (src / "doc000.conllu").read_text(encoding="utf-8")
    lines = good_text.split("\n")
    bad_line = 5
    lines[bad_line - 1] = lines[bad_line - 1].replace("\t", " ", 1)  # nine columns
    bad.write_text("\n".join(lines), encoding="utf-8")
    out = tmp_path / "out"
    r = run(RAY_SCRIPT, "--model", model, "--out", out, "--workers", 2, "--no-progress", inputs)
    assert r.returncode == 1, r.stdout + r.stderr
    assert f"{bad}:{bad_line}: expected 10 tab-separated columns, found 9" in r.stderr, r.stderr
    assert "1 of 121 files not parsed" in r.stderr, r.stderr
    assert not (out / "corrupt.conllu").exists()
    check_outputs(out, expected)

    # Re-run with the file repaired: only it is parsed; the others are not written again.
    bad.write_text(good_text, encoding="utf-8")
    stamps = {p.name: p.stat().st_mtime_ns for p in out.iterdir()}
    r = run(RAY_SCRIPT, "--model", model, "--out", out, "--workers", 2, "--no-progress", inputs)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "121 input files, 120 already parsed (skipped), 1 to parse" in r.stdout, r.stdout
    assert all(p.stat().st_mtime_ns == stamps[p.name] for p in out.iterdir() if p.name in stamps)
    check_outputs(out, {**expected, "corrupt.conllu": expected["doc000.conllu"]})


def descendants(pid):
    """The pids below `pid` in the process tree (from /proc)."""
    children = {}
    for d in pathlib.Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                ppid = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(d.name))
    out, todo = [], [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


def cmdline(pid):
    try:
        return pathlib.Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def test_actor_killed_mid_run(tmp_path, corpus, model):
    src, expected = corpus
    out = tmp_path / "out"
    out.mkdir()
    # A leftover of an attempt killed in an earlier run (another host, a pid that is gone).
    (out / ".doc005.conllu.tmp-otherhost-4194305-0123abcd").write_bytes(b"1\tHalf\t_\t_\t_\t_\t0\troot")
    proc = subprocess.Popen([sys.executable, str(RAY_SCRIPT), "--model", str(model), "--out", str(out),
                             "--workers", "2", "--no-progress", str(src)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    killed, done_at_kill = None, None
    deadline = time.monotonic() + 240
    try:
        while killed is None and proc.poll() is None and time.monotonic() < deadline:
            done = len(list(out.glob("*.conllu")))
            if done >= 1:
                # Ray names an actor's worker process after the actor's class (ray::MapWorker(MapBatches(ParseFiles))).
                actors = [p for p in descendants(proc.pid) if "ParseFiles" in cmdline(p)]
                if actors:
                    done_at_kill = len(list(out.glob("*.conllu")))
                    os.kill(actors[0], signal.SIGKILL)
                    killed = actors[0]
                    break
            time.sleep(0.05)
        stdout, stderr = proc.communicate(timeout=max(1, deadline - time.monotonic()))
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    print(f"killed actor process {killed} after {done_at_kill} of {N_FILES} files")
    assert killed is not None, "no actor process found to kill before the run ended:\n" + stdout + stderr
    assert done_at_kill < N_FILES, f"the run had finished all {N_FILES} files before the kill: make it longer"
    assert proc.returncode == 0, stdout + stderr
    assert not os.path.exists(f"/proc/{killed}")
    # Every file once, each as one process parses it: so every sentence exactly once.
    check_outputs(out, expected)
    n_sents = sum(len(conllu.read(p)) for p in out.glob("*.conllu"))
    assert n_sents == sum(len(conllu.parse(t.decode("utf-8"))) for t in expected.values())
