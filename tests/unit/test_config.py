"""Run files (YAML/TOML) and the configuration objects: one validation, flags over the file, stored without secrets."""

import json
from pathlib import Path

import pytest

import lcrag.cli
import lcrag.evaluation.runner
import lcrag.pipeline.pipeline
from lcrag.pipeline.config import Config, ConfigFileError, EvalConfig, ReaderConfig, RetrievalConfig, StrategyConfig
from lcrag.core.errors import LcragError
from lcrag.pipeline.pipeline import Settings
from lcrag.core.registry import RETRIEVERS
from cli_runs import run_main

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

YAML = """\
reader:
  llm: smollm2
  max_tokens: 32
retrieval:
  retriever: bm25
  k: 3
strategy:
  strategy: rag
eval:
  strategies: [lc, rag]
  ks: [2, 4]
  limit: 1
"""
TOML = """\
[reader]
llm = "smollm2"
max_tokens = 32

[retrieval]
retriever = "bm25"
k = 3

[strategy]
strategy = "rag"

[eval]
strategies = ["lc", "rag"]
ks = [2, 4]
limit = 1
"""


@pytest.fixture
def doc(tmp_path):
    path = tmp_path / "doc.txt"
    path.write_text("Some text. " * 50)
    return path


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_yaml_and_toml_load_to_the_same_config(tmp_path):
    from_yaml = Config.from_file(write(tmp_path, "run.yaml", YAML))
    assert from_yaml == Config.from_file(write(tmp_path, "run.toml", TOML))
    assert from_yaml.retrieval.k == 3 and from_yaml.eval.ks == (2, 4) and from_yaml.reader.max_tokens == 32
    assert from_yaml.embedder == Config().embedder  # sections left out keep their defaults


def test_the_examples_parse_and_validate():
    run = Config.from_file(EXAMPLES / "longbench.yaml")
    assert run.eval.dataset is not None and run.eval.out is not None and run.eval.limit
    assert isinstance(run.settings(), Settings)
    assert Config.from_file(EXAMPLES / "ask.toml").strategy.strategy == "op-rag"


@pytest.mark.parametrize(("text", "expected"), [
    ("retrieval:\n  kk: 3\n", "retrieval.kk: unknown key; the keys are retriever, k,"),
    ("retrieval:\n  k: five\n", "retrieval.k: must be a whole number, got 'five'"),
    ("retrieval:\n  k: 0\n", "retrieval.k: must be ≥ 1, got 0"),
    ("reader:\n  max_tokens: 8\n  context_window: 8\n", "reader.context_window: must be above max_tokens (8), got 8"),
    ("reader:\n  timeout: -1\n", "reader.timeout: must be a number of seconds above 0"),
    ("reader:\n  llm: nosuch:model\n", "reader.llm: "),
    ("cache:\n  cache: 'yes'\n", "cache.cache: must be true or false, got 'yes'"),
    ("eval:\n  ks: [1, two]\n", "eval.ks: must be a list, each a whole number, got [1, 'two']"),
    ("eval:\n  concurrency: 0\n", "eval.concurrency: must be ≥ 1, got 0"),
    ("eval:\n  strategies: [nope]\n", "eval.strategies: unknown strategy 'nope'"),
    ("strategy:\n  strategy: nope\n", "strategy.strategy: must be one of"),
    # names checked against the registries in the file, not later by the CLI without the file's name
    ("retrieval:\n  retriever: grep\n", "retrieval.retriever: must be one of bm25, dense"),
    ("strategy:\n  strategy: map-reduce\n", "strategy.strategy: must be one of closed-book"),  # not installed
    ("eval:\n  retrievers: [bm25, grep]\n", "eval.retrievers: unknown retriever 'grep'; choose one of bm25"),
    ("eval:\n  strategies: [longrag]\n  retrievers: [hybrid]\n",
     "eval.retrievers: unknown retriever 'hybrid'; choose one of dense, bm25 (the corpus index's scorers"),
    ("eval:\n  units: [pages]\n", "eval.units: unknown unit 'pages'; choose one of passage, document, grouped"),
    ("readers:\n  llm: smollm2\n", "readers: unknown section; the sections are reader, embedder,"),
    ("reader: smollm2\n", "reader: must be a table of keys, got 'smollm2'"),
    ("- just\n- a list\n", "must be a table of sections"),
])
def test_an_invalid_file_is_one_line_naming_file_and_key(tmp_path, monkeypatch, capsys, doc, text, expected):
    path = write(tmp_path, "run.yaml", text)
    with pytest.raises(ConfigFileError) as raised:
        Config.from_file(path)
    assert str(raised.value).startswith(f"{path}: ") and expected in str(raised.value)
    code, err = run_main(["ask", doc, "q", "--config", path], monkeypatch, capsys)
    assert code == 2 and err.count("\n") == 1 and err.startswith(f"lcrag: error: {path}: ") and expected in err


@pytest.mark.parametrize(("name", "text", "expected"), [
    ("run.yaml", "reader: [unclosed\n", "run.yaml:2: invalid YAML"),
    ("run.toml", "[reader\n", "run.toml: invalid TOML"),
    ("run.json", "{}", "a run file is .yaml, .yml or .toml"),
])
def test_a_file_that_does_not_parse_is_one_line(tmp_path, monkeypatch, capsys, doc, name, text, expected):
    code, err = run_main(["ask", doc, "q", "--config", write(tmp_path, name, text)], monkeypatch, capsys)
    assert code == 2 and err.count("\n") == 1 and expected in err


def test_a_missing_run_file_is_one_line(tmp_path, monkeypatch, capsys, doc):
    code, err = run_main(["ask", doc, "q", "--config", tmp_path / "none.yaml"], monkeypatch, capsys)
    assert code == 2 and err.count("\n") == 1 and "none.yaml" in err


class Stop(LcragError):
    """Raised by the stand-ins below once they have seen what the CLI built."""


@pytest.fixture
def seen(monkeypatch):
    """What `lcrag ask` / `lcrag eval` would run with, captured instead of loading any model."""
    captured = {}

    def pipeline(settings, **kwargs):
        captured["settings"] = settings
        raise Stop("stopped")

    def runner(items, configs, out, settings, **kwargs):
        captured.update(configs=configs, out=out, settings=settings, **kwargs)
        raise Stop("stopped")

    monkeypatch.setattr(lcrag.pipeline.pipeline, "Pipeline", pipeline)  # the CLI imports it when a command runs
    monkeypatch.setattr(lcrag.evaluation.runner, "EvalRunner", runner)
    return captured


def test_ask_takes_the_file_then_the_flags_given(tmp_path, monkeypatch, capsys, doc, seen):
    path = write(tmp_path, "run.toml", TOML)
    code, err = run_main(["ask", doc, "q", "--config", path, "-k", "7", "--no-cache"], monkeypatch, capsys)
    assert code == 2 and "stopped" in err
    settings = seen["settings"]
    assert (settings.k, settings.cache) == (7, False)  # the flags given
    assert (settings.strategy, settings.max_tokens) == ("rag", 32)  # the file
    assert settings.window == 3  # the defaults
    # A flag given with its default value still overrides the file.
    run_main(["ask", doc, "q", "--config", path, "-k", "5", "--strategy", "self-route"], monkeypatch, capsys)
    assert (seen["settings"].k, seen["settings"].strategy) == (5, "self-route")


def test_a_bad_flag_over_a_file_is_worded_as_the_flag(tmp_path, monkeypatch, capsys, doc):
    code, err = run_main(["ask", doc, "q", "--config", write(tmp_path, "run.toml", TOML), "-k", "0"],
                         monkeypatch, capsys)
    assert code == 2 and err == "lcrag: error: -k must be ≥ 1, got 0\n"


def test_eval_takes_the_file_then_the_flags_given(tmp_path, monkeypatch, capsys, seen):
    dataset = write(tmp_path, "qa.jsonl", json.dumps({"question": "q?", "answers": ["a"], "context": "a b"}) + "\n")
    path = write(tmp_path, "run.yaml", YAML + f"  dataset: {dataset}\n  out: {tmp_path / 'from-file'}\n")
    code, err = run_main(["eval", "--config", path, "--out", tmp_path / "run", "-k", "9"], monkeypatch, capsys)
    assert code == 2 and "stopped" in err
    assert seen["out"] == tmp_path / "run"
    assert {c.strategy for c in seen["configs"]} == {"lc", "rag"} and {c.k for c in seen["configs"]} == {9}
    assert seen["settings"].max_tokens == 32 and seen["eval_config"].limit == 1
    assert seen["eval_config"].dataset == dataset


def test_eval_without_a_dataset_anywhere_is_one_line(tmp_path, monkeypatch, capsys):
    code, err = run_main(["eval", "--out", tmp_path / "run"], monkeypatch, capsys)
    assert code == 2 and err.count("\n") == 1 and "--dataset is required" in err


def test_to_dict_has_no_secrets():
    config = Config(reader=ReaderConfig(llm="openai:m@http://u:hunter2@host/v1", base_url="http://u:hunter2@host/v1",
                                        api_key="sk-secret"),
                    retrieval=RetrievalConfig(summary_llm="openai:s@http://u:hunter2@host/v1"))
    text = json.dumps(config.to_dict())
    assert "hunter2" not in text and "sk-secret" not in text and "api_key" not in text
    assert config.to_dict()["reader"]["base_url"] == "http://***@host/v1"


def test_to_dict_round_trips(tmp_path):
    prompts = write(tmp_path, "prompts.json", json.dumps({"system": "Be brief."}))
    config = Config(reader=ReaderConfig(max_tokens=16, context_window=1024),
                    retrieval=RetrievalConfig(retriever="hybrid", budget=512, order="document"),
                    eval=EvalConfig(dataset=tmp_path / "d.jsonl", strategies=("rag",), ks=(1, 3), budgets=(64,)))
    config = config.merged({"prompts": prompts, "chunking": "sentences:100", "cache_dir": tmp_path})
    assert config.strategy.prompts.system == "Be brief."
    assert Config.from_dict(json.loads(json.dumps(config.to_dict()))) == config
    custom = Config(strategy=StrategyConfig(prompts=config.strategy.prompts))  # prompts given as objects, no file
    assert Config.from_dict(custom.to_dict()) == custom


def test_settings_are_the_flat_view_of_the_config():
    config = Config().merged({"k": 2, "llm": "smollm2", "window": 1})
    assert Config.from_settings(config.settings()) == config
    with pytest.raises(LcragError, match="k must be ≥ 1"):
        Config().merged({"k": 0})


def test_an_index_stores_the_configuration_that_built_it(tmp_path):
    from lcrag.pipeline.pipeline import Pipeline
    from lcrag.core.types import Document

    pipeline = Pipeline(Settings(chunking="words:5", cache_dir=tmp_path, cache=False))
    index = pipeline.index(Document(id="d", text="one two three four five six seven eight"))
    meta = json.loads((index.dir / "meta.json").read_text(encoding="utf-8"))
    assert meta["config"] == {"chunking": {"chunking": "words:5"}}


@pytest.mark.parametrize(("name", "text"), [
    ("bad.yaml", "eval:\n  retrievers: [grep]\n  dataset: {doc}\n  out: {out}\n"),
    ("bad.toml", '[eval]\nretrievers = ["grep"]\ndataset = "{doc}"\nout = "{out}"\n'),
])
def test_eval_refuses_a_bad_retriever_in_the_file_naming_file_and_key(tmp_path, monkeypatch, capsys, doc, name, text):
    path = write(tmp_path, name, text.format(doc=doc, out=tmp_path / "run"))
    code, err = run_main(["eval", "--config", path], monkeypatch, capsys)
    assert code == 2 and err == f"lcrag: error: {path}: eval.retrievers: unknown retriever 'grep'; choose one of " \
                                f"{', '.join(RETRIEVERS.names())}\n"
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(("section", "key", "value", "shown"), [
    ("eval", "dataset", "data/qa.jsonl", "data/qa.jsonl"),
    ("eval", "corpus", "corpus-index", "corpus-index"),
    ("strategy", "prompts", "prompts.json", "prompts.json"),
    ("reader", "tokenizer", "tok/tokenizer.json", "tok/tokenizer.json"),
    ("reader", "llm", "models/tiny.gguf", "models/tiny.gguf"),
    ("reader", "llm", "gguf:models/tiny", "models/tiny"),
    ("retrieval", "summary_llm", "models/summ.gguf", "models/summ.gguf"),
])
def test_a_missing_relative_path_names_file_key_and_where_it_was_looked_for(tmp_path, monkeypatch, capsys, doc,
                                                                              section, key, value, shown):
    (tmp_path / "runs").mkdir()
    path = write(tmp_path / "runs", "run.yaml", f"{section}:\n  {key}: {value}\n")
    monkeypatch.chdir(tmp_path)  # relative paths are relative to here (not to runs/, the file's directory)
    expected = (f"{path}: {section}.{key}: {shown} does not exist (looked for {tmp_path / shown}: relative paths in a "
                f"run file are relative to the current directory")
    with pytest.raises(ConfigFileError) as raised:
        Config.from_file(path)
    assert str(raised.value).startswith(expected)
    code, err = run_main(["ask", doc, "q", "--config", path], monkeypatch, capsys)
    assert code == 2 and err.count("\n") == 1 and err.startswith(f"lcrag: error: {expected}")


def test_relative_paths_stay_relative_to_the_current_directory(tmp_path, monkeypatch):
    (tmp_path / "runs").mkdir()
    (tmp_path / "qa.jsonl").write_text("{}\n")
    write(tmp_path, "prompts.json", json.dumps({"system": "Be brief."}))
    path = write(tmp_path / "runs", "run.yaml", "eval:\n  dataset: qa.jsonl\n  out: out\nstrategy:\n  prompts: prompts.json\n")
    monkeypatch.chdir(tmp_path)
    run = Config.from_file(path)
    assert run.eval.dataset == Path("qa.jsonl") and run.strategy.prompts.system == "Be brief."
    write(tmp_path, "out", "a file")
    with pytest.raises(ConfigFileError, match=f"eval.out: out is a file, not a directory .looked for {tmp_path / 'out'}"):
        Config.from_file(path)


def test_index_takes_the_file_then_the_flags_given(tmp_path, monkeypatch, capsys, doc, seen):
    path = write(tmp_path, "run.yaml", f"reader:\n  max_tokens: 16\nchunking:\n  chunking: words:50\n"
                                       f"cache:\n  cache_dir: {tmp_path / 'cache'}\nretrieval:\n  k: 9\n")
    code, err = run_main(["index", doc, "--config", path], monkeypatch, capsys)
    assert code == 2 and "stopped" in err
    settings = seen["settings"]
    assert (settings.chunking, settings.cache_dir, settings.max_tokens) == ("words:50", tmp_path / "cache", 16)
    assert settings.cache is False and settings.k == 5  # no completion cache to index; the retrieval section unused
    run_main(["index", doc, "--config", path, "--chunking", "words:20", "-r", "all"], monkeypatch, capsys)
    assert seen["settings"].chunking == "words:20"
    run_main(["index", doc, "--config", write(tmp_path, "empty.toml", "")], monkeypatch, capsys)
    assert seen["settings"].chunking == "words:300"  # index's own default when neither gives one


def test_index_refuses_a_bad_file_naming_file_and_key(tmp_path, monkeypatch, capsys, doc):
    path = write(tmp_path, "run.toml", '[chunking]\nchunking = "pages:3"\n')
    code, err = run_main(["index", doc, "--config", path], monkeypatch, capsys)
    assert code == 2 and err.count("\n") == 1 and err.startswith(f"lcrag: error: {path}: chunking.chunking: must be")
