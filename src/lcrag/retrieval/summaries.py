"""LLM summaries for summary-based indexes (RAPTOR, tree index), with their token bill.

Summaries are one-off indexing cost: :class:`BuildCost` adds up the reader's reported tokens of every summary
call, so a retriever can report it apart from the per-question calls.
"""

from __future__ import annotations

from typing import TYPE_CHECKING
import json
import os
import shutil
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path

from lcrag.assembly.truncation import truncate_middle
from lcrag.core.lazy import lazy_module
from lcrag.readers.base import Completion, GenerationParams, Reader, complete_many, reader_identity
from lcrag.retrieval.embedders import Embedder, uncached
from lcrag.core.types import Chunk

if TYPE_CHECKING:
    import numpy as np
else:  # imported on first use (see lcrag.core.lazy)
    np = lazy_module("numpy")

# RAPTOR (Sarthi et al. 2024), raptor/SummarizationModels.py: system message and prompt, verbatim.
RAPTOR_SYSTEM = "You are a Summarizing Text Portal"
RAPTOR_PROMPT = "Write a summary of the following, including as many key details as possible: {context}:"
# LlamaIndex's tree index (DEFAULT_SUMMARY_PROMPT), verbatim.
TREE_PROMPT = (
    "Write a summary of the following. Try to use only the information provided. "
    "Try to include as many key details as possible.\n\n\n{context}\n\n\nSUMMARY:\"\"\"\n"
)


@dataclass
class BuildCost:
    """Reader tokens spent building an index (summaries), as the reader reported them."""

    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_calls: int = 0  # answered by the completion cache (e.g. a build resumed after a crash): tokens still counted
    seconds: float = 0.0

    def add(self, completion: Completion) -> None:
        self.calls += 1
        self.prompt_tokens += completion.prompt_tokens
        self.completion_tokens += completion.completion_tokens
        self.cached_calls += int(completion.from_cache)
        self.seconds += completion.seconds

    def merge(self, other: BuildCost) -> None:
        for name, value in asdict(other).items():
            setattr(self, name, getattr(self, name) + value)

    def to_dict(self) -> dict:
        data = asdict(self)
        data["seconds"] = round(self.seconds, 3)
        return data

    @classmethod
    def from_dict(cls, data: dict | None) -> BuildCost:
        return cls(**{k: v for k, v in (data or {}).items() if k in cls.__dataclass_fields__})


class Summarizer:
    """Summarises groups of texts with a reader; the input is cut in the middle when it exceeds the window."""

    def __init__(self, reader: Reader, template: str = RAPTOR_PROMPT, system: str | None = RAPTOR_SYSTEM,
                 max_tokens: int = 100, concurrency: int | None = None):
        self.reader = reader
        self.template = template
        self.system = system
        self.params = GenerationParams(max_tokens=max_tokens)
        # The calls of one layer are independent: as many at once as the reader takes (an HTTP server: its
        # connection limit; the embedded reader: its llama.cpp slots, one by default).
        self.concurrency = concurrency or getattr(reader, "max_concurrency", 1)

    @property
    def key(self) -> str:
        """What decides a summary: the model (its identity, not just its name), the prompt and the length limit."""
        return f"{reader_identity(self.reader)}|{self.system}|{self.template}|{self.params.max_tokens}"

    def _messages(self, context: str) -> list[dict[str, str]]:
        messages = [{"role": "system", "content": self.system}] if self.system else []
        return messages + [{"role": "user", "content": self.template.format(context=context)}]

    def _fit(self, context: str) -> str:
        room = self.reader.context_window - self.params.max_tokens - self.reader.count_prompt_tokens(self._messages(""))
        return truncate_middle(context, self.reader.tokenizer, max(room - 8, 16)).text

    def run(self, groups: list[list[str]], cost: BuildCost) -> list[str]:
        """One summary per group of texts (joined by blank lines), in order; every call is added to ``cost``."""
        requests = [(self._messages(self._fit("\n\n".join(texts))), self.params) for texts in groups]
        completions = complete_many(self.reader, requests, self.concurrency)
        for completion in completions:
            cost.add(completion)
        return [c.text.strip() for c in completions]


@dataclass
class SummaryTree:
    """Nodes of a summary index (RAPTOR or tree index), their children and embeddings, and what building cost."""

    document: str  # content hash
    nodes: list[Chunk]  # node id = position; layer 0 = leaves
    children: list[list[int]]
    vectors: np.ndarray
    cost: BuildCost = field(default_factory=BuildCost)
    build_seconds: float = 0.0
    built_now: bool = False

    @property
    def layers(self) -> int:
        return max((n.layer for n in self.nodes), default=0)

    def save(self, directory: Path) -> None:
        directory.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(dir=directory.parent, prefix=directory.name + ".tmp"))
        with (tmp / "nodes.jsonl").open("w", encoding="utf-8") as f:
            for node, kids in zip(self.nodes, self.children):
                f.write(json.dumps([node.layer, node.start, node.end, kids, node.text]) + "\n")
        np.save(tmp / "vectors.npy", np.asarray(self.vectors, dtype=np.float32))
        meta = {"document": self.document, "nodes": len(self.nodes), "layers": self.layers,
                "leaves": sum(1 for n in self.nodes if n.layer == 0), "cost": self.cost.to_dict(),
                "build_seconds": round(self.build_seconds, 3)}
        (tmp / "meta.json").write_text(json.dumps(meta, indent=1))
        shutil.rmtree(directory, ignore_errors=True)
        os.replace(tmp, directory)

    @classmethod
    def load(cls, directory: Path) -> SummaryTree:
        meta = json.loads((directory / "meta.json").read_text())
        nodes, children = [], []
        for i, line in enumerate((directory / "nodes.jsonl").read_text(encoding="utf-8").splitlines()):
            layer, start, end, kids, text = json.loads(line)
            nodes.append(Chunk(i, start, end, text, layer))
            children.append(kids)
        vectors = np.load(directory / "vectors.npy")
        return cls(meta["document"], nodes, children, vectors, BuildCost.from_dict(meta["cost"]),
                   meta["build_seconds"])


def embed_texts(embedder: Embedder, texts: list[str], batch: int = 64) -> np.ndarray:
    bulk = uncached(embedder) if texts else embedder  # summaries: bulk text, past any query cache
    parts = [bulk.embed(texts[i : i + batch]) for i in range(0, len(texts), batch)]
    return np.vstack(parts).astype(np.float32) if parts else np.zeros((0, 0), np.float32)
