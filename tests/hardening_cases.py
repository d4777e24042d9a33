"""Hardening cases (issue 14): lcrag tried as a new user would, on bad inputs, damaged caches and concurrent runs, each
case judged; tests/system/test_hardening.py runs them (moved from benchmarks/audit_hardening.py: they pass or fail,
they measure nothing).

Everything is generated in a temporary directory (no benchmark data is read); every command runs as a subprocess of the
installed `lcrag`, stdin closed, stdout/stderr pipes (not a TTY), in its own process group, with
LCRAG_CACHE_DIR/--cache-dir pointing into the temporary directory.

- inputs: ~200 bad documents, option values, prompts files, datasets, run directories and base URLs, for every
  command. CLEAN = exit 2, exactly one non-empty stderr line, no traceback, not hung (a timeout is a HANG), no
  password from a URL echoed. Decodable text (UTF-16, Latin-1) is CLEAN when it exits 0 and decodes right. A typer
  usage box (exit 2, 'Usage:' + a framed error) is not one line, so it is not clean.
- damage: one real index (bm25 + dense) and one real `lcrag ask -r hybrid` (filling the completion cache and the
  token table); then 19 kinds of damage, each on a fresh copy of the cache, and the same ask again. CLEAN = exit 0,
  the same answer and chunks as the clean run, at most one stderr line.
- concurrency: four asks building one index; two evals on one run directory; two corpus builds on one index
  directory; two asks writing one completion cache.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from lcrag.core.question_settings import by_name

TIMEOUT = 60
LCRAG = [str(Path(sys.executable).with_name("lcrag"))]
SECRET = "s3cretPW"
ASK = ["-s", "rag", "-k", "1", "--max-tokens", "8"]
Q = "What is the secret password of the old lighthouse?"


@dataclass
class Case:
    group: str
    name: str
    args: list
    expect: str = "error"  # error: exit 2 and one line; ok: exit 0 (decodable text)
    check: object = None  # ok cases: extra check, returns a complaint or None
    mem_limit: bool = False
    verdict: str = ""
    err: str = ""


# -- running ------------------------------------------------------------------------------------------------------
def _limit_memory() -> None:
    import resource
    resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))  # /dev/zero must not eat a shared machine's RAM


def start(args: list, env: dict, cwd: Path, mem_limit: bool = False) -> subprocess.Popen:
    p = subprocess.Popen(LCRAG + [str(a) for a in args], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, errors="replace", cwd=cwd, env=env,
                         start_new_session=True, preexec_fn=_limit_memory if mem_limit else None)
    p.t0 = time.monotonic()
    return p


def finish(p: subprocess.Popen, timeout: float = TIMEOUT) -> tuple[int | None, str, str, float]:
    try:
        out, err = p.communicate(timeout=max(1.0, timeout - (time.monotonic() - p.t0)))
        return p.returncode, out, err, time.monotonic() - p.t0
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)  # the process group this audit started for this case
        out, err = p.communicate()
        return None, out, err, time.monotonic() - p.t0


def run(args: list, env: dict, cwd: Path, timeout: float = TIMEOUT, mem_limit: bool = False):
    return finish(start(args, env, cwd, mem_limit), timeout)


def child_env(cache: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LCRAG_", "OPENAI_"))}
    env.update(LCRAG_CACHE_DIR=str(cache), NO_COLOR="1", PYTHONWARNINGS="ignore::DeprecationWarning")
    return env


def lines(text: str) -> list[str]:
    return [s for s in text.splitlines() if s.strip()]


def traceback_of(err: str) -> str | None:
    if "Traceback" not in err:
        return None
    return "traceback: " + (lines(err)[-1][:120] if lines(err) else "?")


def judge(case: Case, rc, out: str, err: str) -> str:
    if rc is None:
        return f"HANG (killed after {TIMEOUT} s)"
    if tb := traceback_of(err):
        return tb
    if SECRET in out + err:
        return "password from the URL printed"
    if case.expect == "ok":
        return (f"exit {rc}" if rc != 0 else case.check(out) if case.check else None) or "clean"
    if rc == 0:
        return "accepted (exit 0)"
    if rc != 2:
        return f"exit {rc}"
    got = lines(err)
    if got and got[0].startswith("Usage:"):
        return "typer usage box (%d lines)" % len(got)
    return "clean" if len(got) == 1 else f"exit 2 with {len(got)} stderr lines"


# -- bad inputs ---------------------------------------------------------------------------------------------------
PNG = (b"\x89PNG\r\n\x1a\n" + b"\x00\x00\x00\rIHDR\x00\x00\x00\x01\x00\x00\x00\x01\x08\x02\x00\x00\x00\x90wS\xde"
       + b"\x00\x00\x00\x0cIDATx\x9cc\xf8\x0f\x00\x00\x01\x01\x00\x05\x18\xd8N\x00\x00\x00\x00IEND\xaeB`\x82")
LATIN = "Le café de Zürich est très célèbre. Der Schlüssel heißt Zephyr. " * 20


def write(path: Path, data: bytes | str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data.encode() if isinstance(data, str) else data)
    return path


def jsonl(path: Path, *records: object) -> Path:
    return write(path, "".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in records))


def rand_bytes(n: int = 4000) -> bytes:
    import random
    rng = random.Random(14)
    return bytes(rng.randrange(0x80, 0x100) for _ in range(n))


def story(words: int, seed: int) -> str:
    import random
    rng = random.Random(seed)
    vocab = "river castle garden winter market lantern harbor meadow village bridge forest tower".split()
    paras = [" ".join(rng.choice(vocab) for _ in range(70)) + f". The keeper of gate {i} is Keeper{i}{seed}."
             for i in range(max(1, words // 75))]
    paras.insert(len(paras) // 2, f"The secret password of the old lighthouse is Zephyr-{seed}.")
    return "\n\n".join(paras)


def make_files(w: Path) -> dict:
    f = {"doc": write(w / "doc.txt", story(550, 1)), "rand": write(w / "rand.txt", rand_bytes()),
         "png": write(w / "img.png", PNG), "empty": write(w / "empty.txt", b""), "blank": write(w / "blank.txt", " \n\t\n "),
         "fifo": w / "fifo.txt", "devzero": Path("/dev/zero"), "emptydir": w / "emptydir", "missing": w / "missing.txt",
         "pngdir": write(w / "pngdir" / "img.png", PNG).parent, "utf16": write(w / "utf16.txt", LATIN.encode("utf-16")),
         "latin1": write(w / "latin1.txt", LATIN.encode("latin-1")),
         "dj_notjson": write(w / "docs_notjson.jsonl", "{not json\n"), "dj_notext": jsonl(w / "docs_notext.jsonl", {"id": "x"}),
         "dj_textnum": jsonl(w / "docs_textnum.jsonl", {"text": 5})}
    jsonl(w / "ds.jsonl", {"id": "a", "question": "What is the password?", "answers": ["Zephyr-42"],
                           "context": "The lighthouse password is Zephyr-42. " * 5},
          {"id": "b", "question": "Who keeps gate 3?", "answers": ["Keeper3"], "context": "Gate 3 is kept by Keeper3. " * 5})
    os.mkfifo(f["fifo"])
    f["emptydir"].mkdir()
    f["fifo_jsonl"] = w / "fifo.jsonl"
    os.mkfifo(f["fifo_jsonl"])
    return f


BAD_DOCS = ["rand", "png", "empty", "blank", "fifo", "devzero", "emptydir", "missing", "pngdir", "dj_notjson",
            "dj_notext", "dj_textnum"]


def decodes(path: Path):
    def check(out: str) -> str | None:
        code = "import sys; from lcrag.documents import load_document; print('Zürich' in load_document(sys.argv[1]).text)"
        r = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, timeout=TIMEOUT)
        return None if r.stdout.strip() == "True" else "decoded wrongly (no 'Zürich' in the text)"
    return check


def document_cases(f: dict) -> list[Case]:
    cases = []
    for cmd, extra in (("ask", [Q] + ASK), ("index", [])):
        cases += [Case(f"documents ({cmd})", k, [cmd, f[k], *extra], mem_limit=k == "devzero") for k in BAD_DOCS]
        cases += [Case(f"documents ({cmd})", k, [cmd, f[k], *extra], "ok", decodes(f[k])) for k in ("utf16", "latin1")]
    return cases


def specs(text: str, w: Path) -> list[list[str]]:
    """'-k 0 | --llm $W/x.gguf | ...' -> [['-k', '0'], ['--llm', '/tmp/.../x.gguf'], ...]."""
    return [shlex.split(x.replace("$W", str(w))) for x in text.split("|")]


def with_base(base: list, extra: list) -> list:
    """``base`` (flag value pairs) without the flags that ``extra`` sets, then ``extra``."""
    pairs = [base[i:i + 2] for i in range(0, len(base), 2)]
    return [x for flag, v in pairs if flag not in extra for x in (flag, v)] + list(extra)


ASK_OPTS = """--strategy bogus | -r bogus | -k 0 | -k -1 | -k abc | -k 100000000000000000000 | --budget 0 | --budget -1 |
    --order bogus | --chunking words:0 | --chunking words:-1 | --chunking tokens:0 | --chunking sentences:0 |
    --chunking bogus:300 | --chunking words:abc | --llm bogus | --llm $W/missing.gguf |
    --embedder bogus | --context-window 0 | --context-window -1 | --context-window abc | --max-tokens 0 |
    --max-tokens -1 | --max-tokens 1000000000000 | --threads 0 | --threads -1 | -r sentence-window --window -1 |
    -r tree --tree-navigation bogus | -r tree --summary-llm bogus | --tokenizer $W/missing.json"""
INDEX_OPTS = "--chunking words:0 | --chunking bogus | -r bogus | --llm bogus | --embedder bogus | --embedder st:/nonexistent/m"
DEMO_OPTS = "--words 0 | --words -1 | --words abc | -r bogus | --llm bogus | --seed abc"
PASSKEY_OPTS = """--lengths 0 | --lengths -5 | --lengths abc | --lengths '' | --depths 2 | --depths -0.1 | --depths abc |
    --variants bogus | --tokenizer bogus | --seed abc"""
EVAL_OPTS = """--strategies bogus | --strategies '' | --retriever bogus | -k 0 | -k -1 | -k abc | --budget 0 | --budget -5 |
    --budget abc | --limit 0 | --limit -1 | --concurrency 0 | --concurrency -1 | --context-window 0 |
    --context-window -1 | --threads 0 | --retriever sentence-window --window -1 | --format bogus | --chunking words:0 |
    --chunking bogus | --strategies longrag --unit bogus | --retriever tree --tree-navigation bogus | --llm bogus |
    --embedder bogus | --corpus $W/missing_corpus | --retriever tree --summary-llm bogus"""


def option_cases(w: Path, f: dict) -> list[Case]:
    g, pk = "options (ask, index, demo, passkey)", ["--lengths", "256", "--depths", "0.5", "--variants", "passkey"]
    name = lambda cmd, a: f"{cmd} {shlex.join(a)}".replace(str(w), "$W")
    cases = [Case(g, name("ask", a), ["ask", f["doc"], Q, *with_base(ASK, a)]) for a in specs(ASK_OPTS, w)]
    cases.append(Case(g, "ask with an empty question", ["ask", f["doc"], "", *ASK]))
    # Valid by design, so they must run: k above the chunk count (its declared maximum; beyond it is a bad input
    # above) retrieves every chunk; a unit alone takes its documented default size (words:300).
    cases += [Case(g, name("ask", a) + " (valid)", ["ask", f["doc"], Q, *with_base(ASK, a)], expect="ok")
              for a in (["-k", str(by_name()["k"].high)], ["--chunking", "words"])]
    cases += [Case(g, f"--max-file-mb {v} ask", ["--max-file-mb", v, "ask", f["doc"], Q, *ASK]) for v in ("0", "-1", "abc")]
    cases += [Case(g, name("index", a), ["index", f["doc"], *a]) for a in specs(INDEX_OPTS, w)]
    cases += [Case(g, name("demo", a), ["demo", *a]) for a in specs(DEMO_OPTS, w)]
    cases += [Case(g, name("passkey", a), ["passkey", w / "pk" / str(i), *with_base(pk, a)])
              for i, a in enumerate(specs(PASSKEY_OPTS, w))]
    cases.append(Case(g, "passkey OUT is an existing file", ["passkey", f["doc"], *pk]))
    ev = lambda i, a: ["eval", "--dataset", w / "ds.jsonl", "--out", w / "runs" / f"opt{i}",
                       *with_base(["--strategies", "rag"], a)]
    return cases + [Case("options (eval)", name("eval", a), ev(i, a)) for i, a in enumerate(specs(EVAL_OPTS, w))]


def prompt_cases(w: Path, f: dict) -> list[Case]:
    p = w / "prompts"
    files = {"non-string value": write(p / "a.json", '{"rag": 5}'),
             "nested format spec": write(p / "b.json", '{"rag": "{context:{question}} Q: {question}"}'),
             "{context:>999999999}": write(p / "c.json", '{"rag": "{context:>999999999}\\n{question}"}'),
             "{document:>999999999}": write(p / "d.json", '{"rag": "{document:>999999999}\\n{question}"}'),
             "unknown key": write(p / "e.json", '{"sytem": "You are helpful."}'),
             "invalid JSON": write(p / "f.json", '{"rag": '), "a JSON list": write(p / "g.json", '["x"]'),
             "conversion !r": write(p / "h.json", '{"rag": "{context!r} {question}"}'),
             "missing {question}": write(p / "i.json", '{"rag": "Answer from {context}"}'),
             "positional {}": write(p / "j.json", '{"rag": "{} {context} {question}"}'),
             "random bytes": write(p / "k.json", rand_bytes(500)), "missing file": p / "missing.json"}
    return [Case("prompts files (ask --prompts)", n, ["ask", f["doc"], Q, *ASK, "--prompts", path])
            for n, path in files.items()]


def dataset_cases(w: Path, f: dict) -> list[Case]:
    d, g = w / "datasets", {"answers": ["x"], "context": "Some context."}
    lb = lambda name, **r: jsonl(d / "longbench" / f"{name}.jsonl", {"input": "q", "context": "c", "answers": ["a"],
                                                                     "dataset": name, "_id": "1", **r})
    files = {"random bytes": write(d / "rand.jsonl", rand_bytes()), "PNG named .jsonl": write(d / "img.jsonl", PNG),
             ".gz not gzip": write(d / "plain.jsonl.gz", '{"question": "q", "answers": ["a"], "context": "c"}\n'),
             "cp1252 JSONL": write(d / "cp1252.jsonl", json.dumps({"question": "Qu’est-ce?", "answers": ["café"],
                                                                  "context": "Le café’s"}, ensure_ascii=False).encode("cp1252") + b"\n"),
             "UTF-16 JSONL": write(d / "utf16.jsonl", json.dumps({"question": "q", "answers": ["a"], "context": "c"}).encode("utf-16")),
             "empty file": write(d / "empty.jsonl", b""), "FIFO": f["fifo_jsonl"], "/dev/zero": f["devzero"],
             "empty directory": f["emptydir"], "nonexistent": d / "missing.jsonl",
             "line not JSON": write(d / "notjson.jsonl", "{oops\n"), "record is a list": jsonl(d / "list.jsonl", [1, 2]),
             "question a number": jsonl(d / "qnum.jsonl", {"question": 5, **g}),
             "question NaN": jsonl(d / "qnan.jsonl", '{"question": NaN, "answers": ["x"], "context": "c"}'),
             "context a number": jsonl(d / "cnum.jsonl", {"question": "q", "answers": ["x"], "context": 7}),
             "answers a number": jsonl(d / "anum.jsonl", {"question": "q", "answers": 5, "context": "c"}),
             "answers missing": jsonl(d / "amiss.jsonl", {"question": "q", "context": "c"}),
             "document path missing": jsonl(d / "dmiss.jsonl", {"question": "q", "answers": ["x"], "document": "nosuch.txt"}),
             "document is random bytes": jsonl(d / "drand.jsonl", {"question": "q", "answers": ["x"], "document": "rand.jsonl"}),
             "LongBench answers an int": lb("qasper", answers=5), "LongBench context a list": lb("narrativeqa", context=["a"]),
             "LongBench input a dict": lb("hotpotqa", input={"q": 1}), "LongBench unknown task": lb("nosuchtask"),
             "InfiniteBench answer a dict": jsonl(d / "infinitebench" / "passkey.jsonl",
                                                  {"id": 0, "input": "q", "context": "c", "answer": {"k": 1}})}
    cases = [Case("datasets (eval --dataset)", n, ["eval", "--dataset", p, "--out", w / "runs" / f"ds{i}",
                                                   "--strategies", "lc"], mem_limit=p == f["devzero"])
             for i, (n, p) in enumerate(files.items())]
    cases.append(Case("--out is an existing file", "eval --out FILE",
                      ["eval", "--dataset", w / "ds.jsonl", "--out", f["doc"], "--strategies", "lc"]))
    cases.append(Case("--out is an existing file", "corpus build --out FILE",
                      ["corpus", "build", w / "corpus.jsonl", "--out", f["doc"], "--tokenizer", "words"]))
    return cases


def corpus_cases(w: Path, f: dict) -> list[Case]:
    c = w / "corpora"
    files = {k: f[k] for k in ("rand", "png", "empty", "devzero", "emptydir", "missing")}
    files |= {"FIFO": f["fifo_jsonl"], "line not JSON": write(c / "notjson.jsonl", "{oops\n"),
              "text a number": jsonl(c / "tnum.jsonl", {"id": "a", "title": "t", "text": 5}),
              "text missing": jsonl(c / "tmiss.jsonl", {"id": "a", "title": "t"}),
              ".gz not gzip": write(c / "plain.jsonl.gz", '{"id": "a", "title": "t", "text": "x"}\n'),
              "UTF-16": write(c / "u16.jsonl", json.dumps({"id": "a", "title": "t", "text": "x"}).encode("utf-16"))}
    cb = lambda i, corpus, a=(): ["corpus", "build", corpus, "--out", w / "cb" / str(i), *with_base(["--tokenizer", "words"], a)]
    cases = [Case("corpus build (documents)", n, cb(i, p), mem_limit=p == f["devzero"])
             for i, (n, p) in enumerate(files.items())]
    opts = """--unit bogus | --grouping bogus | --group-tokens 0 | --group-tokens -1 | --piece-words 0 | --piece-words -1 |
        --batch 0 | --faiss bogus | --executor bogus | --tokenizer bogus | --embedder bogus"""
    cases += [Case("corpus build (options)", shlex.join(a), cb(100 + i, w / "corpus.jsonl", a))
              for i, a in enumerate(specs(opts, w))]
    ca = lambda idx, *a: ["ask", idx, "Who keeps gate 3?", "-s", "longrag", *a]  # the one way to ask a corpus
    cases += [Case("corpus ask", n, ca(d)) for n, d in (("index dir missing", w / "nosuch"), ("index dir is a file", f["doc"]),
                                                       ("index dir empty", f["emptydir"]))]
    opts = """-k 0 | -k -1 | --budget 0 | --budget -1 | -r bogus | --option task=bogus | --unit bogus |
        --option faiss=flat | --option faiss=bogus | --context-window 0 | --llm bogus"""
    return cases + [Case("corpus ask", shlex.join(a), ca(w / "cidx", *a)) for a in specs(opts, w)]


def rundir_cases(w: Path, f: dict) -> list[Case]:
    ok, made = w / "run_ok", []

    def bad(kind: str) -> Path:
        """A copy of the setup run with one kind of damage."""
        made.append(dst := w / "rundirs" / f"{kind}{len(made)}")
        shutil.copytree(ok, dst) if ok.exists() else dst.mkdir(parents=True)
        rows, man = dst / "rows.jsonl", dst / "manifest.json"
        if kind == "rows_mid":
            text = rows.read_text().splitlines(keepends=True) if rows.exists() else []
            rows.write_text("".join(text[:1] + ["{oops not json\n"] + text[1:]))
        elif kind == "rows_rand":  # a first line of random bytes, then the good rows: not a torn last line
            rows.write_bytes(rand_bytes() + b"\n" + (rows.read_bytes() if rows.exists() else b""))
        elif kind == "manifest":
            man.write_text("{corrupt")
        return dst

    cases = []
    for cmd in (["report"], ["analyze", "failures"], ["analyze", "questions"]):
        name = " ".join(cmd)
        cases += [Case(f"run directories ({name})", n, [*cmd, p]) for n, p in (
            ("missing", w / "nosuch_run"), ("a file", f["doc"]), ("empty dir", f["emptydir"]),
            ("rows.jsonl bad line mid-file", bad("rows_mid")), ("rows.jsonl line 1 random bytes", bad("rows_rand")),
            ("manifest.json corrupted", bad("manifest")))]
    cases += [Case("run directories (analyze failures)", n, ["analyze", "failures", bad("copy"), *a]) for n, a in (
        ("--llm bogus", ["--llm", "bogus"]), ("--dataset missing", ["--dataset", w / "nosuch.jsonl"]))]
    cases += [Case("run directories (analyze questions)", n, ["analyze", "questions", bad("copy"), *a]) for n, a in (
        ("--top 0", ["--top", "0"]), ("--top -1", ["--top", "-1"]), ("--rag-config bogus", ["--rag-config", "bogus"]))]
    return cases


def base_url_cases(w: Path, f: dict) -> list[Case]:
    urls = ["notaurl", "ftp://example.com/v1", "http://", "http://[::1", "http://127.0.0.1:9/v1",
            f"http://user:{SECRET}@127.0.0.1:9/v1"]
    cases = [Case("--base-url", f"ask --base-url {u}", ["ask", f["doc"], Q, *ASK, "--llm", "openai:m", "--base-url", u])
             for u in urls]
    secret = urls[-1]
    cases.append(Case("--base-url", "eval --base-url with a password", ["eval", "--dataset", w / "ds.jsonl", "--out",
                      w / "runs" / "url", "--strategies", "lc", "--llm", "openai:m", "--base-url", secret]))
    cases.append(Case("--base-url", "corpus ask --base-url with a password",
                      ["ask", w / "cidx", "q", "-s", "longrag", "--llm", "openai:m", "--base-url", secret]))
    return cases


def input_setup(w: Path, env: dict) -> None:
    """A corpus index and an eval run for the commands that read them: without them those cases would test less."""
    jsonl(w / "corpus.jsonl", *[{"id": f"d{i}", "title": f"Gate {i}", "text": f"Gate {i} is kept by Keeper{i}. " * 20}
                                for i in range(6)])
    for args in (["corpus", "build", w / "corpus.jsonl", "--out", w / "cidx", "--tokenizer", "words"],
                 ["eval", "--dataset", w / "ds.jsonl", "--out", w / "run_ok", "--limit", "1"]):
        rc, _, err, _ = run(args, env, w, timeout=300)
        assert rc == 0, f"setup `lcrag {' '.join(map(str, args[:2]))}` failed (exit {rc}): {(lines(err) or ['?'])[-1]}"


def audit_inputs(w: Path) -> tuple[list[Case], list[str]]:
    env, f = child_env(w / "cache"), make_files(w)
    cases = document_cases(f) + option_cases(w, f) + prompt_cases(w, f)
    input_setup(w, env)
    cases += dataset_cases(w, f) + corpus_cases(w, f) + rundir_cases(w, f) + base_url_cases(w, f)
    for i, case in enumerate(cases, 1):
        rc, out, err, _ = run(case.args, env, w, mem_limit=case.mem_limit)
        case.verdict, case.err = judge(case, rc, out, err), err
    return cases, []


# -- damaged derived files -----------------------------------------------------------------------------------------
def _one(d: Path, pattern: str) -> Path:
    """The largest file matching ``pattern`` in ``d``."""
    return max(d.glob(pattern), key=lambda p: p.stat().st_size)


def _truncate(p: Path, keep: float) -> None:
    os.truncate(p, int(p.stat().st_size * keep))


def _write_at(p: Path, data: bytes) -> None:
    with open(p, "r+b") as fh:
        fh.write(data)


def _lines(p: Path, fn) -> None:
    p.write_text("".join(fn(p.read_text().splitlines(keepends=True))))


def _sql(cache: Path, value: str) -> None:
    with sqlite3.connect(cache / "completions.sqlite") as db:
        db.execute("UPDATE completions SET value = ?", (value,))


def _zero_rows(p: Path) -> None:
    import numpy as np
    a = np.load(p)
    a[: max(1, len(a) // 2)] = 0
    np.save(p, a)


SHIFT = lambda rows: [json.dumps([r[0], r[1] + 7, r[2] + 7]) + "\n" for r in map(json.loads, rows)]
NPY, TOKENS = "embeddings-*.npy", "tokens-*.json"
DAMAGES = {  # name -> fn(cache dir, index dir)
    "completions.sqlite header overwritten": lambda c, i: _write_at(c / "completions.sqlite", b"garbage!" * 4),
    "completions.sqlite truncated": lambda c, i: _truncate(c / "completions.sqlite", 0.5),
    "completions row with wrong fields": lambda c, i: _sql(c, '{"answer": 1, "tokens": "x"}'),
    "completions row not JSON": lambda c, i: _sql(c, "not json {"),
    "embeddings .npy truncated": lambda c, i: _truncate(_one(i, NPY), 0.7),
    "embeddings .npy emptied": lambda c, i: _truncate(_one(i, NPY), 0),
    "embeddings .npy header overwritten": lambda c, i: _write_at(_one(i, NPY), b"\x00" * 12),
    "embeddings rows zeroed (valid .npy)": lambda c, i: _zero_rows(_one(i, NPY)),
    "chunks.jsonl offsets shifted": lambda c, i: _lines(i / "chunks.jsonl", SHIFT),
    "chunks.jsonl a line removed": lambda c, i: _lines(i / "chunks.jsonl", lambda r: r[:1] + r[2:]),
    "chunks.jsonl a line not JSON": lambda c, i: _lines(i / "chunks.jsonl", lambda r: r[:1] + ["{oops\n"] + r[2:]),
    "chunks.jsonl emptied": lambda c, i: _truncate(i / "chunks.jsonl", 0),
    "chunks meta.json corrupted": lambda c, i: (i / "meta.json").write_text("{corrupt"),
    "tantivy segment file truncated": lambda c, i: _truncate(_one(i / "bm25", "*.term"), 0.5),
    "tantivy segment file deleted": lambda c, i: _one(i / "bm25", "*.idx").unlink(),
    "bm25 meta.json corrupted": lambda c, i: (i / "bm25" / "meta.json").write_text('{"segments": [oops'),
    "token table not JSON": lambda c, i: _one(i, TOKENS).write_text("{oops"),
    "token table wrong counts (valid JSON)": lambda c, i: _one(i, TOKENS).write_text(
        json.dumps(dict.fromkeys(json.loads(_one(i, TOKENS).read_text()), 1))),
    "index manifest.json corrupted": lambda c, i: (i / "manifest.json").write_text("{corrupt"),
}


def ask_args(doc: Path, cache: Path, question: str = Q, extra=("--budget", "800")) -> list:
    return ["ask", doc, question, "--strategy", "rag", "-r", "hybrid", "--max-tokens", "8", *extra,
            "--cache-dir", cache, "--json"]


def answer_of(out: str):
    try:
        r = json.loads(out)
        return r["text"], [(c["index"], c["start"], c["end"]) for c in r["chunks"]], r
    except (ValueError, KeyError, TypeError):
        return None, None, None


def judge_damage(ref, rc, out: str, err: str) -> str:
    if rc is None:
        return "HANG"
    if tb := traceback_of(err):
        return tb
    if rc != 0:
        return f"exit {rc}: {(lines(err) or [''])[-1][:120]}"
    text, chunks, _ = answer_of(out)
    if text is None:
        return "no JSON answer on stdout"
    if chunks != ref[1]:
        return f"silently different chunks {chunks} (clean run: {ref[1]})"
    if text != ref[0]:
        return f"different answer {text!r}"
    return "clean" if len(lines(err)) <= 1 else f"{len(lines(err))} stderr lines"


def audit_damage(w: Path) -> tuple[list[Case], list[str]]:
    doc, c0 = write(w / "dmg" / "doc.txt", story(1500, 2)), w / "dmg" / "C0"
    run(["index", doc, "--cache-dir", c0], child_env(c0), w, timeout=300)
    rc, out, err, _ = run(ask_args(doc, c0), child_env(c0), w, timeout=180)
    ref = answer_of(out)
    if rc != 0 or ref[0] is None:
        return [], [f"clean reference ask failed (exit {rc}): {' | '.join(lines(err)[-3:])}"]
    notes = [f"clean run: answer {ref[0]!r}, chunks {ref[1]}; stderr lines: {len(lines(err))}"]
    cases = []
    for n, (name, damage) in enumerate(DAMAGES.items()):
        cache = w / "dmg" / f"C{n + 1}"
        shutil.copytree(c0, cache)
        idx = next(p for p in (cache / "indexes").iterdir() if p.is_dir())
        case = Case("damaged derived files", name, ask_args(doc, cache))
        damage(cache, idx)  # a file to damage that is not there (the layout changed) fails the test
        rc, out, err, _ = run(case.args, child_env(cache), w, timeout=180)
        case.verdict, case.err = judge_damage(ref, rc, out, err), err
        cases.append(case)
    return cases, notes


# -- concurrency -------------------------------------------------------------------------------------------------
def together(argss: list, env: dict, w: Path, timeout: float = 300) -> list[tuple]:
    procs = [start(a, env, w) for a in argss]
    with ThreadPoolExecutor(len(procs)) as pool:  # each process's own end time
        return list(pool.map(lambda p: finish(p, timeout), procs))


def outcome(res: list[tuple]) -> str:
    """Each process's exit code, seconds and last stderr line."""
    return "; ".join(f"#{i + 1} exit {rc} after {s:.0f} s: {(lines(err) or ['(no stderr)'])[-1][:140]}"
                     for i, (rc, _, err, s) in enumerate(res))


def crashes(res: list[tuple], ok=(0,)) -> list[str]:
    return [f"#{i + 1} " + ("HANG" if rc is None else traceback_of(err) or f"exit {rc}")
            for i, (rc, _, err, _) in enumerate(res) if rc not in ok or traceback_of(err)]


def refused_at_once(res: list[tuple]) -> bool:
    """One process finished, the other refused quickly (< 15 s) with one stderr line."""
    codes = sorted(r[0] for r in res if r[0] is not None)
    return codes == [0, 2] and all(len(lines(r[2])) == 1 and r[3] < 15 for r in res if r[0] == 2)


def four_asks(w: Path) -> tuple[list, list[tuple], list[str]]:
    doc, cache, single = write(w / "cc1" / "doc.txt", story(900, 3)), w / "cc1" / "C", w / "cc1" / "S"
    args = ask_args(doc, cache, extra=("-k", "1"))
    res = together([args] * 4, child_env(cache), w)
    bad = crashes(res)
    if len({json.dumps(answer_of(r[1])[:2]) for r in res if r[0] == 0}) > 1:
        bad.append("different answers or chunks")
    run(["index", doc, "--cache-dir", single], child_env(single), w, timeout=300)
    for name in ("chunks.jsonl", "embeddings-*.npy"):
        a, b = (sorted((c / "indexes").glob(f"*/{name}")) for c in (cache, single))
        if not a or not b or a[0].read_bytes() != b[0].read_bytes():
            bad.append(f"{name} differs from a single build's")
    return args, res, bad


def two_evals(w: Path) -> tuple[list, list[tuple], list[str]]:
    ds = jsonl(w / "cc2" / "ds.jsonl", *[{"id": str(i), "question": f"Who keeps gate {i}?", "answers": [f"Keeper{i}"],
                                           "context": f"Gate {i} is kept by Keeper{i}. The river is wide. " * 8}
                                          for i in range(3)])
    out = w / "cc2" / "run"
    args = ["eval", "--dataset", ds, "--out", out, "--strategies", "lc,rag"]
    res = together([args, args], child_env(w / "cc2" / "C"), w)
    if refused_at_once(res) and not crashes(res, ok=(0, 2)):
        return args, res, []
    bad = crashes(res)
    if not bad:
        keys = [(r.get("item_id"), r.get("config")) for r in map(json.loads, lines((out / "rows.jsonl").read_text()))]
        if len(keys) != 6 or len(set(keys)) != 6:
            bad.append(f"{len(keys)} rows ({len(keys) - len(set(keys))} duplicates), expected 6 distinct")
    return args, res, bad


def two_corpus_builds(w: Path) -> tuple[list, list[tuple], list[str]]:
    corpus = jsonl(w / "cc3" / "corpus.jsonl", *[{"id": f"d{i}", "title": f"Gate {i}",
                                                   "text": f"Gate {i} is kept by Keeper{i}. " * 60} for i in range(60)])
    args = ["corpus", "build", corpus, "--out", w / "cc3" / "idx", "--tokenizer", "words"]
    res = together([args, args], child_env(w / "cc3" / "C"), w)
    return args, res, [] if refused_at_once(res) and not crashes(res, ok=(0, 2)) else crashes(res)


def two_cache_writers(w: Path) -> tuple[list, list[tuple], list[str]]:
    doc, cache = write(w / "cc4" / "doc.txt", story(600, 4)), w / "cc4" / "C"
    run(["index", doc, "--cache-dir", cache], child_env(cache), w, timeout=300)
    qs = [Q, "Who is the keeper of gate 2?"]
    res = together([ask_args(doc, cache, q, extra=("-k", "1")) for q in qs], child_env(cache), w)
    bad = crashes(res)
    for q, first in zip(qs, res if not bad else []):
        rc, out, _, _ = run(ask_args(doc, cache, q, extra=("-k", "1")), child_env(cache), w)
        text, _, full = answer_of(out)
        if rc != 0 or text != answer_of(first[1])[0] or not all(c.get("from_cache") for c in full["calls"]):
            bad.append(f"repeating {q!r}: exit {rc}, not the same answer from the cache")
    return ask_args(doc, cache, "Q1 | Q2", extra=("-k", "1")), res, bad


def audit_concurrency(w: Path) -> tuple[list[Case], list[str]]:
    cases = []
    for name, fn in (("four asks -r hybrid build one index", four_asks), ("two evals on one --out", two_evals),
                     ("two corpus builds on one --out", two_corpus_builds),
                     ("two asks write one completion cache", two_cache_writers)):
        args, res, bad = fn(w)
        cases.append(Case("concurrency", name, args, verdict="; ".join(bad) or "clean", err=outcome(res)))
    return cases, []


# -- what a failure says ----------------------------------------------------------------------------------------------
def shown(case: Case, w: Path) -> str:
    args = [str(a).replace(str(w), "$W") for a in case.args]
    return " ".join(["lcrag"] + [a if a and " " not in a else json.dumps(a) for a in args])


def item(c: Case, w: Path) -> str:
    got = lines(c.err)
    if "Traceback" in c.err:  # the last frame in lcrag's own code, and the exception
        got = [s for s in got if "/lcrag/" in s and s.strip().startswith("File")][-1:] + got[-1:]
    err = " ⏎ ".join(s.strip()[:300] for s in got[:3]).replace(str(w), "$W") or "(empty)"
    return f"- **{c.group} / {c.name}** — {c.verdict}\n  `{shown(c, w)}`\n  stderr: `{err}`"
