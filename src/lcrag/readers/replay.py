"""Recorded answers as a reader: ``replay:SOURCE`` answers every call from recordings, with no model call.

A recording is a reader's answer to (question, mode) on a document: ``lc`` (the whole document in the prompt) or
``rag`` (retrieved chunks). ``lcrag eval --llm replay:SOURCE --strategies lc,self-route`` then writes LC and
Self-Route rows for recorded answers — lcrag's own retrieval runs on the same document as usual (chunks, scores,
decline test); only the answer text is replayed — so routers can be fitted on answers of readers one cannot run.

SOURCE is a recordings JSONL (see :mod:`lcrag.readers.recordings`), or a folder of one model's predictions in a
dataset's own layout, read by the dataset format that declares ``predictions`` (``DATASET_FORMATS``: LaRA's
``predictions/MODEL`` folder, :mod:`lcrag.evaluation.datasets.lara_predictions`); this module knows no folder layout.

Which recording answers a call is read from what the call is for, given with it (``params.asking``: the
question, its document and the call's route, see :mod:`lcrag.readers.call_context`), never parsed from the prompt.
A question recorded on several documents (LaRA's 32k and 128k splits) is matched to the current document by its path (a suffix of the recorded one) or by its text (sha256 of the file
read as lcrag reads it). Token counts come from a stand-in tokenizer (the recorded readers' own are not available
offline): the bundled SmolLM2's (its chat template included), or ``--tokenizer tokenizer.json``; the counts of long
prompts are kept in ``CACHE/token_counts.sqlite``, so replaying a second reader over the same prompts costs a hash.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lcrag.core.errors import InputError, NoAnswer
from lcrag.core.lru import SizedLRU
from lcrag.readers.base import Completion, GenerationParams, Message
from lcrag.core.registry import DATASET_FORMATS, READERS

if TYPE_CHECKING:
    from lcrag.readers.recordings import Recording
    from lcrag.core.tokenization import Tokenizer
    from lcrag.core.types import Document

log = logging.getLogger(__name__)

# Recorded answers saw the whole document: an LC prompt is never cut.
REPLAY_CONTEXT_WINDOW = 10_000_000
# Chat templates add a few tokens per message: what a tokenizer.json stand-in (which has no template) adds.
TEMPLATE_TOKENS_PER_MESSAGE = 8
# Texts at least this long are tokenized only when their ids are read (their length comes from the count cache).
LONG_TEXT = 4096
# Token counts kept in memory besides the disk (a hash and a number each: a few MB)
COUNTS_KEPT = 50_000


def _short(text: str, limit: int = 100) -> str:
    return repr(text if len(text) <= limit else text[: limit - 3] + "...")


# -- recordings ----------------------------------------------------------------------------------------------------
class Recordings:
    """Recorded answers by (question, document, mode), loaded and checked from a JSONL file or a LaRA folder."""

    def __init__(self, source: Path, model: str, sha256: str):
        self.source = source
        self.model = model
        self.sha256 = sha256
        self.by_key: dict[tuple[str, Path, str], Recording] = {}
        self.documents: dict[str, set[Path]] = {}  # question -> every document it was recorded on (any mode)
        self.unusable: dict[tuple[str, Path, str], str] = {}  # why a key has no recording (empty, conflicting)
        self.skipped: Counter[str] = Counter()  # empty predictions per file
        self.missing: Counter[str] = Counter()  # answers about a document that does not exist (LaRA), per file
        self.duplicates = 0
        self.conflicts = 0
        self._conflicting: set[tuple[str, Path, str]] = set()
        self._text_hashes: dict[Path, frozenset[str]] = {}
        self._lock = threading.Lock()

    @classmethod
    def load(cls, source: str | Path) -> Recordings:
        """A recordings JSONL (a conflicting duplicate is an error naming both lines) or a LaRA predictions folder
        (upstream data that cannot be fixed here: a conflicting pair is set aside with a warning, and asking that
        question is the error)."""
        path = Path(source).expanduser()
        if path.is_dir():
            folder = _prediction_folder(path)
            recordings = cls(path, folder.model, _files_sha256(folder.files, path))
            recordings._add(folder.records, strict=False)
        elif path.is_file():
            with path.open("rb") as f:
                recordings = cls(path, "", hashlib.file_digest(f, "sha256").hexdigest())
            recordings._add(_jsonl_records(path), strict=True)
            models = sorted({r.model for r in recordings.by_key.values() if r.model})
            recordings.model = "+".join(models) or path.stem
        else:
            raise InputError(f"replay source {path} does not exist")
        if not recordings.by_key:
            raise InputError(f"{path} holds no recorded answers")
        recordings._report()
        return recordings

    def _add(self, records: Iterable[tuple[Recording, bool]], strict: bool) -> None:
        """``records``: each recording, and whether its document is missing (LaRA's only)."""
        for rec, missing in records:
            key = (rec.question, rec.document, rec.mode)
            self.documents.setdefault(rec.question, set()).add(rec.document)
            if missing:
                self.missing[rec.where.rsplit(":", 1)[0]] += 1
                self.unusable.setdefault(key, f"its document {rec.document} does not exist")
                continue
            if rec.prediction is None:
                self.skipped[rec.where.rsplit(":", 1)[0]] += 1
                self.unusable.setdefault(key, f"its prediction at {rec.where} is empty (the recorded call failed)")
                continue
            if key in self._conflicting:
                continue  # a third line of a conflicting pair: set aside with them
            earlier = self.by_key.get(key)
            if earlier is None:
                self.by_key[key] = rec
            elif earlier.prediction == rec.prediction:
                self.duplicates += 1
            else:
                by = (f" (recorded by {earlier.model} and {rec.model}: replay one model's answers per reader)"
                      if earlier.model != rec.model else "")
                message = (f"{rec.where}: a different prediction for the question, document and mode recorded at "
                           f"{earlier.where}{by}")
                if strict:
                    raise InputError(message)
                log.warning("%s; neither is replayed", message)
                del self.by_key[key]
                self._conflicting.add(key)
                self.conflicts += 1
                self.unusable[key] = f"it is recorded at {earlier.where} and {rec.where} with predictions that differ"

    def _report(self) -> None:
        if self.missing:
            per_file = ", ".join(f"{Path(f).name}: {n}" for f, n in sorted(self.missing.items()))
            log.warning("replay: skipped %d recorded answer(s) about documents that do not exist (asking their "
                        "questions is an error) — %s", sum(self.missing.values()), per_file)
        if self.skipped:
            per_file = ", ".join(f"{Path(f).name}: {n}" for f, n in sorted(self.skipped.items()))
            log.warning("replay: skipped %d recorded answer(s) with an empty prediction (null, false or \"\": the "
                        "recorded call failed; asking their questions is an error) — %s",
                        sum(self.skipped.values()), per_file)

    def counts(self) -> dict[str, int]:
        modes = Counter(mode for _, _, mode in self.by_key)
        return {"lc": modes["lc"], "rag": modes["rag"], "skipped": sum(self.skipped.values()),
                "missing_documents": sum(self.missing.values()),
                "duplicates": self.duplicates, "conflicts": self.conflicts}

    # -- finding the recording of a call ---------------------------------------------------------------------------
    def find(self, question: str, mode: str, document: Document | None) -> Recording:
        """The recording that answers ``question`` in ``mode`` on ``document``, or an :class:`InputError` saying why
        there is none."""
        question = question.strip()
        recorded_on = self.documents.get(question)
        if not recorded_on:
            raise NoAnswer(f"replay: no recording of the question {_short(question)} in {self.source}")
        path = self._document_of(question, sorted(recorded_on), document)
        rec = self.by_key.get((question, path, mode))
        if rec is not None:
            return rec
        why = self.unusable.get((question, path, mode))
        if why is None:
            other = [m for m in ("lc", "rag") if (question, path, m) in self.by_key]
            why = f"it is recorded only as {other[0]}" if other else "no line records it in this mode"
        raise NoAnswer(f"replay: no {mode} recording of the question {_short(question)} on {path.name} in "
                         f"{self.source}: {why}")

    def _document_of(self, question: str, candidates: list[Path], document: Document | None) -> Path:
        """The recorded document that is ``document``: the only one, else the one its path or its text names."""
        if len(candidates) == 1:
            return candidates[0]
        names = ", ".join(str(c) for c in candidates)
        if document is None:
            raise InputError(f"replay: the question {_short(question)} is recorded on {len(candidates)} documents "
                             f"({names}) and the call names no document")
        source = getattr(document, "source", "") or ""
        if source:
            by_path = [c for c in candidates if _same_file(source, c)]
            if len(by_path) == 1:
                return by_path[0]
        plain = getattr(document, "layout", None) is None and not getattr(document, "parts", ())
        # a plain text's content hash is the sha256 of its text (computed once per document)
        digest = document.content_hash if plain else hashlib.sha256(document.text.encode("utf-8")).hexdigest()
        by_text = [c for c in candidates if digest in self._text_hashes_of(c)]
        if len(by_text) == 1:
            return by_text[0]
        raise InputError(f"replay: the question {_short(question)} is recorded on {len(candidates)} documents "
                         f"({names}), {'more than one' if by_text else 'none'} of which has this document's text "
                         f"(sha256 {digest[:12]})")

    def _text_hashes_of(self, path: Path) -> frozenset[str]:
        """sha256 of the document's text as lcrag reads a text file, and as written (UTF-8, a byte-order mark kept;
        also with universal newlines): a dataset may read it either way (LaRA's loader reads it as LaRA does)."""
        with self._lock:
            if path not in self._text_hashes:
                from lcrag.documents.files import read_regular_file
                from lcrag.documents.loaders import read_text

                texts = set()
                try:
                    texts.add(read_text(path))
                    raw = read_regular_file(path).decode("utf-8")
                    texts |= {raw, raw.replace("\r\n", "\n").replace("\r", "\n")}
                except UnicodeDecodeError:
                    pass
                except InputError as exc:
                    log.warning("replay: %s", exc)
                self._text_hashes[path] = frozenset(hashlib.sha256(t.encode("utf-8")).hexdigest() for t in texts)
            return self._text_hashes[path]


def _same_file(source: str, recorded: Path) -> bool:
    """Whether a document's source path names the recorded file: the same file, or (relative) a suffix of its path
    (``32k/book/A Christmas Carol.txt``)."""
    given = Path(source)
    try:
        if given.exists() and recorded.exists() and given.resolve() == recorded.resolve():
            return True
    except OSError:
        pass
    parts = [p for p in given.parts if p not in (".", "")]
    return not given.is_absolute() and bool(parts) and list(recorded.parts[-len(parts):]) == parts


def _files_sha256(files: list[Path], base: Path) -> str:
    """sha256 of the files' names (relative to ``base``) and contents, in order: what the recordings are."""
    digest = hashlib.sha256()
    for f in files:
        digest.update(str(f.relative_to(base)).encode("utf-8") + b"\0")
        with f.open("rb") as fh:
            digest.update(hashlib.file_digest(fh, "sha256").digest())
    return digest.hexdigest()


def _jsonl_records(path: Path) -> Iterator[tuple[Recording, bool]]:
    from lcrag.readers.recordings import parse_recording
    from lcrag.documents.records import RecordError, jsonl_records

    documents: dict[Path, bool] = {}
    for n, record in jsonl_records(path):
        try:
            if isinstance(record, RecordError):
                raise record
            yield parse_recording(record, path, n, documents), False
        except RecordError as exc:
            raise InputError(f"{path}:{n}: {exc}") from None


def _prediction_folder(directory: Path) -> Any:
    """The folder's recordings, read by the dataset format whose layout it is (the one declaring ``predictions``:
    model, files, and each recording with whether its document is missing); the first format's refusal when none
    reads it."""
    readers = [part.meta["predictions"] for part in DATASET_FORMATS.parts() if part.meta.get("predictions")]
    if not readers:
        raise InputError(f"{directory} is a folder, and no dataset format reads a folder of predictions")
    refusals: list[InputError] = []
    for read in readers:
        try:
            return read(directory)
        except InputError as exc:
            refusals.append(exc)
    raise refusals[0]


# -- token counts ----------------------------------------------------------------------------------------------------
class TokenCounts:
    """Token counts by sha256 of (tokenizer, text): in memory, and on disk (``token_counts.sqlite`` in lcrag's cache
    directory; SQLite with WAL, shared safely by processes; damaged: set aside and recreated)."""

    def __init__(self, path: Path | None):
        self._store = None
        if path is not None:
            from lcrag.core.sqlite_store import KeyValueStore

            self._store = KeyValueStore(path, "token_counts", "tokens", "INTEGER",
                                        ("counts are computed again", "counts are not kept"))
        self._memory: SizedLRU[str, int] = SizedLRU.counted(COUNTS_KEPT)  # the disk (if any) keeps all
        self.hits = self.misses = 0

    def count(self, namespace: str, text: str, compute: Callable[[], int]) -> int:
        key = hashlib.sha256(f"{namespace}\0{text}".encode("utf-8")).hexdigest()
        found = self._memory.get(key)
        keep = self._store is not None
        if found is None and keep:
            stored = self._store.get(key)
            found = stored if isinstance(stored, int) and not isinstance(stored, bool) and stored >= 0 else None
        if found is not None:
            self.hits += 1
            self._memory.put(key, found)
            return found
        self.misses += 1
        found = self._memory.put(key, compute())
        if keep:
            self._store.put(key, found)
        return found

    def close(self) -> None:
        if self._store is not None:
            self._store.close()


class _Ids(Sequence):
    """A text's token ids whose number is known (from the count cache) and which are computed only when read: an
    LC prompt within the window needs only the length of its document (truncation reads the ids)."""

    def __init__(self, length: int, encode: Callable[[], list[int]]):
        self._length, self._encode, self._ids = length, encode, None

    def __len__(self) -> int:
        return self._length

    def __getitem__(self, index):
        if self._ids is None:
            self._ids = self._encode()
        return self._ids[index]


class CountedTokenizer:
    """The stand-in tokenizer, its counts of long texts kept in :class:`TokenCounts` (the tokenizer itself is made
    only when a count is missing or ids are read: a fully cached replay starts no tokenizer)."""

    def __init__(self, name: str, make: Callable[[], Tokenizer], counts: TokenCounts):
        self.name = name
        self._make, self._inner, self._counts = make, None, counts

    @property
    def inner(self) -> Tokenizer:
        if self._inner is None:
            self._inner = self._make()
        return self._inner

    def encode(self, text: str) -> Sequence[int]:
        if len(text) < LONG_TEXT:
            return self.inner.encode(text)
        computed: list[list[int]] = []
        length = self._count(text, computed)
        return computed[0] if computed else _Ids(length, lambda: self.inner.encode(text))

    def count(self, text: str) -> int:
        """The number of tokens of ``text``, from the count cache when it has it."""
        return self._count(text, []) if text else 0

    def _count(self, text: str, computed: list[list[int]]) -> int:
        def compute() -> int:  # the ids are kept in ``computed``: encode returns them
            computed.append(self.inner.encode(text))
            return len(computed[0])

        return self._counts.count(f"{self.name}\0text", text, compute)

    def decode(self, ids: Sequence[int]) -> str:
        return self.inner.decode(list(ids))

    def token_spans(self, text: str) -> list[tuple[int, int]]:
        return self.inner.token_spans(text)


# -- stand-in tokenizers ---------------------------------------------------------------------------------------------
class TokenizerStandIn:
    """A tokenizer (a ``tokenizer.json``) standing in: a chat prompt is its messages' tokens plus
    :data:`TEMPLATE_TOKENS_PER_MESSAGE` each (it has no chat template)."""

    def __init__(self, tokenizer: Tokenizer, label: str | None = None):
        self.identity = tokenizer.name
        self.name = label or tokenizer.name
        self._tokenizer = tokenizer

    def make_tokenizer(self) -> Tokenizer:
        return self._tokenizer

    def count_prompt_tokens(self, messages: list[Message], tokenizer: CountedTokenizer) -> int:
        return sum(tokenizer.count(m["content"]) + TEMPLATE_TOKENS_PER_MESSAGE for m in messages)

    def close(self) -> None:
        pass


class BundledStandIn:
    """The bundled SmolLM2-135M-Instruct's tokenizer and chat template, through its llama.cpp (started on the first
    count that is not cached; it generates nothing)."""

    def __init__(self):
        from lcrag.readers.llamacpp import EmbeddedLlamaReader

        self._reader = EmbeddedLlamaReader(threads=1)
        self.identity = self._reader.identity
        self.name = f"{self._reader.model} (bundled)"

    def make_tokenizer(self) -> Tokenizer:
        return self._reader.tokenizer  # starts its llama.cpp

    def count_prompt_tokens(self, messages: list[Message], tokenizer: CountedTokenizer) -> int:
        return self._reader.count_prompt_tokens(messages)

    def close(self) -> None:
        self._reader.close()


# -- the reader ------------------------------------------------------------------------------------------------------
class ReplayReader:
    """Answers each call with the recording of its (question, mode) on its document; no model is called.

    ``model`` is ``replay:<recorded reader>``; ``identity`` adds the recordings' sha256 and the stand-in tokenizer
    (cached answers never mix two recordings or two token counts); ``stand_in_tokenizer`` names whose tokens the
    counts are. No log-probabilities: Self-Route reads the written answer.
    """

    context_window = REPLAY_CONTEXT_WINDOW

    def __init__(self, recordings: Recordings, stand_in: TokenizerStandIn | BundledStandIn,
                 counts_path: Path | None = None):
        self.recordings = recordings
        self.stand_in = stand_in
        self.model = f"replay:{recordings.model}"
        self.stand_in_tokenizer = stand_in.name
        self.identity = f"replay:{recordings.model}@sha256:{recordings.sha256}#tokens:{stand_in.identity}"
        self.counts = TokenCounts(counts_path)
        self.tokenizer = CountedTokenizer(f"stand-in:{stand_in.identity}", stand_in.make_tokenizer, self.counts)
        c = recordings.counts()
        extra = "".join(f", {c[key]} {what}" for key, what in (("missing_documents", "about missing documents"),
                                                                 ("conflicts", "conflicting pairs set aside"))
                        if c[key])
        log.warning("replay: %s from %s: %d lc and %d rag answers (%d empty skipped, %d duplicates kept once%s); token "
                    "counts are %s's, standing in for the recorded reader's", recordings.model, recordings.source,
                    c["lc"], c["rag"], c["skipped"], c["duplicates"], extra, stand_in.name)

    def count_prompt_tokens(self, messages: list[Message]) -> int:
        text = json.dumps(messages, ensure_ascii=False, sort_keys=True)
        return self.counts.count(f"{self.tokenizer.name}\0chat", text,
                                 lambda: self.stand_in.count_prompt_tokens(messages, self.tokenizer))

    def recording(self, params: GenerationParams) -> Recording:
        """The recording that answers a call made with ``params`` (what it is for: ``params.asking``)."""
        asked = params.asking
        if asked is None:
            raise InputError(f"{self.model} answers questions asked through lcrag (a strategy answering a question); "
                             "this call is for no question (a retriever's or summariser's call: give those another "
                             "reader, e.g. --summary-llm)")
        if asked.route not in ("lc", "rag"):
            what = f"a {asked.route!r} call" if asked.route else "a call on no route"
            raise InputError(f"{self.model} replays recorded lc and rag answers; {what} has none")
        return self.recordings.find(asked.question, asked.route, asked.document)

    def complete(self, messages: list[Message], params: GenerationParams) -> Completion:
        started = time.perf_counter()
        rec = self.recording(params)
        prompt_tokens = self.count_prompt_tokens(messages)
        completion_tokens = self.tokenizer.count(rec.prediction)
        return Completion(text=rec.prediction, model=self.model, prompt_tokens=prompt_tokens,
                          completion_tokens=completion_tokens, seconds=time.perf_counter() - started, logprobs=None)

    def close(self) -> None:
        self.counts.close()
        self.stand_in.close()


def _source(rest: str | None) -> tuple[str, None]:
    """The SOURCE of a ``replay:SOURCE`` spec, checked to exist now."""
    if not rest:
        raise InputError("replay: needs its recordings: replay:RECORDINGS.jsonl or replay:LARA_PREDICTIONS_FOLDER")
    if not Path(rest).expanduser().exists():
        raise InputError(f"replay source {rest} does not exist")
    return rest, None


@READERS.register("replay", help="recorded answers, no model call: replay:RECORDINGS.jsonl (question, document, mode, "
                  "prediction per line) or replay:FOLDER of LaRA predictions; tokens counted by the bundled tokenizer "
                  "or --tokenizer", prefixes=("replay",), forms=("replay:RECORDINGS",), parse=_source)
def replay_reader(source: str, url: None, *, context_window: int | None = None, tokenizer: str | None = None,
                  **_unused: Any) -> ReplayReader:
    """The reader of a ``replay:SOURCE`` spec; ``tokenizer`` (a tokenizer.json) replaces the bundled stand-in."""
    if context_window is not None:
        raise InputError("a replay reader takes no --context-window: recorded answers saw the whole document, so LC "
                         "prompts are never cut")
    from lcrag.core.paths import default_cache_dir

    recordings = Recordings.load(source)
    if tokenizer:
        from lcrag.core.tokenization import HFTokenizer

        hf = HFTokenizer(tokenizer)
        stand_in: TokenizerStandIn | BundledStandIn = TokenizerStandIn(hf, f"{Path(tokenizer).name} ({hf.name})")
    else:
        stand_in = BundledStandIn()
    return ReplayReader(recordings, stand_in, default_cache_dir() / "token_counts.sqlite")
