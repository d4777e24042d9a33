"""What a corpus index is built with (:class:`CorpusBuildConfig`), recorded in meta.json and checked on every build."""

from __future__ import annotations

import json
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path

from lcrag.chunking.units import GROUPINGS, UNIT_KINDS
from lcrag.core.errors import InputError
from lcrag.retrieval.corpus.files import INDEX_FILES

SCORERS = ("dense", "bm25")
FAISS_KINDS = ("flat", "ivf", "hnsw")


@dataclass(frozen=True)
class CorpusBuildConfig:
    units: tuple[str, ...] = UNIT_KINDS
    piece_words: int = 100  # passages / MaxP pieces; the bundled embedder reads 256 tokens (~190 words)
    grouping: str = "auto"  # auto: links when the corpus has them, else title mentions
    group_tokens: int = 4096  # LongRAG's ~4K-token units
    embedder: str | None = "minilm"  # None: BM25 only
    bm25: bool = True
    faiss: str | None = None  # flat | ivf | hnsw (pip install -e '.[faiss]' in lcrag's checkout)
    executor: str = "local"  # local | ray
    batch: int = 256  # pieces per embedding batch

    def check(self) -> None:
        bad = [u for u in self.units if u not in UNIT_KINDS]
        if bad or not self.units:
            raise InputError(f"unknown unit {', '.join(bad) or '(none)'}; choose from {', '.join(UNIT_KINDS)}")
        if self.grouping not in GROUPINGS:
            raise InputError(f"unknown grouping {self.grouping!r}; choose one of {', '.join(GROUPINGS)}")
        if self.grouping == "neighbours" and not self.embedder:
            raise InputError("grouping by embedding neighbours needs an embedder")
        if self.faiss and self.faiss not in FAISS_KINDS:
            raise InputError(f"unknown faiss index {self.faiss!r}; choose one of {', '.join(FAISS_KINDS)}")
        if self.faiss and not self.embedder:
            raise InputError("a faiss index needs an embedder")
        from lcrag.core.options import at_least

        for name in ("piece_words", "group_tokens", "batch"):
            at_least(name, getattr(self, name), 1)


def grouped_settings(config: CorpusBuildConfig, tokenizer_name: str) -> dict:
    """What grouped units depend on besides the corpus: sizes are in this tokenizer's tokens; neighbours grouping
    also depends on the embedder."""
    settings = {"tokenizer": tokenizer_name, "grouping": config.grouping, "group_tokens": config.group_tokens}
    if config.grouping == "neighbours":
        settings["embedder"] = config.embedder
    return settings


def _differences(built: dict, wanted: dict) -> list[str]:
    def show(value):
        if value is None:
            return "unrecorded"
        return f"{value[:12]}…" if isinstance(value, str) and len(value) == 64 else repr(value)  # sha256: shortened

    return [f"{key} {show(built.get(key))} → {show(value)}" for key, value in wanted.items() if built.get(key) != value]


def reconcile(out: Path, identity: dict, grouped: dict | None, rebuild: bool) -> dict:
    """The index's meta, after checking that what is built was built with these settings. A difference in the
    corpus content or piece size concerns every step, one in the grouping only the grouped units; it is refused,
    naming it, or with ``rebuild`` the affected files are removed so the build makes them again. ``grouped`` is
    None when this build makes no grouped units (then existing ones are left as they are)."""
    meta_path = out / "meta.json"
    meta = json.loads(meta_path.read_text()) if meta_path.exists() else {}
    if not meta:
        return meta
    stale = _differences(meta, identity)
    built_grouped = meta.get("units", {}).get("grouped", {}).get("settings", {})
    has_grouped = (out / "units" / "grouped" / "units.npz").exists()
    stale_grouped = _differences(built_grouped, grouped) if has_grouped and grouped else []
    if not stale and not stale_grouped:
        return meta
    if not rebuild:
        raise InputError(f"{out} holds an index built with other settings ({'; '.join(stale + stale_grouped)}); "
                         "use another --out, or --rebuild to rebuild the affected steps")
    if stale:
        for pattern in INDEX_FILES:
            for path in out.glob(pattern):
                if path.is_dir():
                    shutil.rmtree(path)
                else:
                    path.unlink()
        return {}
    shutil.rmtree(out / "units" / "grouped", ignore_errors=True)
    meta.get("units", {}).pop("grouped", None)
    return meta


def build_record(previous: dict, config: CorpusBuildConfig, built_units: list[str]) -> dict:
    """The build settings for meta.json. The grouping options are recorded only from a build that made grouped
    units: a later ``--unit passage`` run must not claim a group size its groups were not built with."""
    record = previous | asdict(config) | {"units": built_units}
    if "grouped" not in config.units:
        for key in ("grouping", "group_tokens"):
            record.pop(key)
            if key in previous:
                record[key] = previous[key]
    return record
