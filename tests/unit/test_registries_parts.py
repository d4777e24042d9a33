"""Readers, embedders, loaders, dataset formats and metrics come from their registries: a part added from a new
module (as a new file in the tree or a plugin would) is used without editing any other file."""

from __future__ import annotations

import importlib
import json
import sys
import textwrap

import pytest

from lcrag.documents import load_documents
from lcrag.core.errors import DatasetError, InputError
from lcrag.evaluation.datasets import detect_format, load_dataset
from lcrag.evaluation.metrics import METRICS
from lcrag.readers import make_reader, parse_reader_spec
from lcrag.core.registry import DATASET_FORMATS, EMBEDDERS, LOADERS, READERS
from lcrag.core.registry import METRICS as METRIC_PARTS
from lcrag.retrieval.embedders import make_embedder, parse_embedder_spec

PART_MODULE = '''
    import numpy as np

    from lcrag.core.registry import DATASET_FORMATS, EMBEDDERS, LOADERS, METRICS, READERS
    from lcrag.core.types import Document


    @LOADERS.register("reversed", help="text written backwards", suffixes=(".rev",), forms=(".rev",))
    def load_reversed(path, limits):
        return [Document(text=path.read_text()[::-1], id=path.stem, title=path.stem, source=str(path))]


    class ConstantEmbedder:
        """Every text maps to the same unit vector of the dimension the spec names."""

        def __init__(self, dimension):
            self.dimension = dimension
            self.name = f"constant:{dimension}"

        def embed(self, texts):
            vectors = np.zeros((len(texts), self.dimension), dtype=np.float32)
            vectors[:, 0] = 1.0
            return vectors


    @EMBEDDERS.register("constant", help="a constant vector", prefixes=("constant",), forms=("constant:DIM",))
    def constant_embedder(name, **_endpoint):
        return ConstantEmbedder(int(name))


    @READERS.register("echo", help="repeats the question", prefixes=("echo",), forms=("echo:NAME",))
    def echo_reader(model, url, **_settings):
        return ("echo", model)


    @METRICS.register("shouted", help="the prediction is a gold answer in capitals")
    def shouted(prediction, answers):
        return float(prediction in [a.upper() for a in answers])


    @DATASET_FORMATS.register("qa-tsv", help="question<TAB>answer<TAB>context lines",
                              detect=lambda path: path.suffix == ".tsv")
    def qa_tsv(record, path, n):
        from lcrag.evaluation.datasets import EvalItem

        return [EvalItem(id=str(n), dataset="tsv", question=record["q"], answers=[record["a"]],
                         context=record["c"], task="tsv", metric="shouted")]
'''
ADDED = ((LOADERS, "reversed"), (EMBEDDERS, "constant"), (READERS, "echo"), (METRIC_PARTS, "shouted"),
         (DATASET_FORMATS, "qa-tsv"))


@pytest.fixture
def new_parts(tmp_path, monkeypatch):
    """A module, outside the package, that registers one part of each kind; forgotten again afterwards."""
    folder = tmp_path / "site"
    folder.mkdir()
    (folder / "lcrag_test_parts.py").write_text(textwrap.dedent(PART_MODULE))
    monkeypatch.syspath_prepend(str(folder))
    yield importlib.import_module("lcrag_test_parts")
    sys.modules.pop("lcrag_test_parts", None)
    for registry, name in ADDED:
        registry.remove(name)


def test_a_loader_for_a_new_suffix_is_used_for_files_and_directories(new_parts, tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.rev").write_text("olleh")
    (tmp_path / "docs" / "b.txt").write_text("plain")
    assert [d.text for d in load_documents(tmp_path / "docs" / "a.rev")] == ["hello"]
    assert [d.text for d in load_documents(tmp_path / "docs")] == ["hello", "plain"]


def test_a_directory_without_readable_files_names_every_registered_suffix(new_parts, tmp_path):
    with pytest.raises(InputError, match=r"holds no \.txt, \.jsonl, \.md, \.pdf, \.docx, \.html, \.epub or \.rev files"):
        load_documents(tmp_path / "site")  # holds only a .py file


def test_an_embedder_prefix_from_a_new_module_is_used_by_make_embedder(new_parts):
    assert parse_embedder_spec("constant:3") == ("constant", "3")
    embedder = make_embedder("constant:3")
    assert isinstance(embedder, new_parts.ConstantEmbedder) and embedder.embed(["a", "b"]).shape == (2, 3)
    assert parse_embedder_spec("minilm") == ("minilm", "")  # the built-ins still win their own specs


def test_a_reader_prefix_from_a_new_module_is_used_by_make_reader(new_parts):
    assert parse_reader_spec("echo:parrot") == ("echo", "parrot", None)
    assert make_reader("echo:parrot") == ("echo", "parrot")
    with pytest.raises(InputError, match=r"^unknown reader 'x'; use smollm2, PATH\.gguf, "
                                         r"openai:MODEL\[@URL\], ") as caught:
        parse_reader_spec("x")
    # then the others, in the order they registered (replay:RECORDINGS, a built-in imported on first use, and echo)
    assert sorted(str(caught.value).split(", ")[-1].split(" or ")) == ["echo:NAME", "replay:RECORDINGS"]


@pytest.mark.parametrize(("parse", "spec", "message"), [
    (parse_reader_spec, "mystery", "unknown reader 'mystery'; use smollm2, PATH.gguf, openai:MODEL[@URL] or "
                                   "replay:RECORDINGS"),
    (parse_reader_spec, "openai:", "openai: needs a model name, e.g. openai:gpt-4o-mini"),
    (parse_reader_spec, "gguf:/no/such.gguf", "GGUF model /no/such.gguf does not exist"),
    (parse_embedder_spec, "bogus", "unknown embedder 'bogus'; use minilm, st:NAME_OR_PATH or openai:MODEL"),
    (parse_embedder_spec, "openai:", "unknown embedder 'openai:'; use minilm, st:NAME_OR_PATH or openai:MODEL"),
    (parse_embedder_spec, "minilm:x", "unknown embedder 'minilm:x'; use minilm, st:NAME_OR_PATH or openai:MODEL"),
    (parse_embedder_spec, "openai:m@http://u:pw@h/v1x", None),  # accepted (the URL is the server's business)
])
def test_unknown_and_malformed_specs_keep_their_one_line_messages(parse, spec, message):
    if message is None:
        parse(spec)
        return
    with pytest.raises(InputError) as caught:
        parse(spec)
    assert str(caught.value) == message


def test_the_built_in_specs_parse_as_before():
    assert parse_reader_spec(" smollm2 ") == parse_reader_spec("") == parse_reader_spec("default") == ("gguf", None, None)
    assert parse_reader_spec("openai:m@http://127.0.0.1:9") == ("openai", "m", "http://127.0.0.1:9")
    assert [parse_embedder_spec(s) for s in ("", "default", "st:", "st:x", "openai:m")] == [
        ("minilm", ""), ("minilm", ""), ("st", ""), ("st", "x"), ("openai", "m")]


def test_a_metric_from_a_new_module_is_usable_by_name(new_parts, tmp_path):
    assert "shouted" in METRICS and METRICS["shouted"].variant == "the prediction is a gold answer in capitals"
    assert METRICS["shouted"].score("PARIS", ["Paris"]) == 1.0
    record = {"question": "Capital?", "answers": ["Paris"], "context": "Paris is the capital.", "metric": "shouted"}
    (tmp_path / "d.jsonl").write_text(json.dumps(record) + "\n")
    assert load_dataset(tmp_path / "d.jsonl").items[0].metric == "shouted"  # generic records may name it


def test_a_dataset_format_from_a_new_module_is_chosen_and_detected(new_parts, tmp_path):
    path = tmp_path / "qa.tsv"
    path.write_text(json.dumps({"q": "Capital?", "a": "Paris", "c": "Paris is the capital."}) + "\n")
    assert detect_format(path) == "qa-tsv"
    assert [i.id for i in load_dataset(path).items] == ["qa.tsv/1"]  # ids qualified by the file
    assert load_dataset(path, fmt="qa-tsv").items[0].metric == "shouted"


def test_unknown_names_list_the_registered_ones():
    with pytest.raises(DatasetError, match="^unknown dataset format 'x'; choose one of longbench, leval, "
                                           "infinitebench, hotpotqa, nq, musique, generic, ") as caught:
        load_dataset(__file__, fmt="x")
    assert "recordings" in str(caught.value).split(", ")  # then the formats of their own modules
    assert "shouted" not in METRICS and "qa_f1" in METRICS
    with pytest.raises(KeyError):
        METRICS["shouted"]
