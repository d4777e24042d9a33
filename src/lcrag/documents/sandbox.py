"""Reading untrusted files in a sandbox: each file is parsed in a process of its own, forked from a server process
that has the parsers loaded (multiprocessing's ``forkserver``), under a CPU-time and an address-space limit
(``resource.setrlimit``) and a wall-clock deadline, at most ``workers`` at a time. A parse over a limit is killed and
the file refused in one line naming the limit; the service, and every other file, go on.

What a parse gives (the documents, text and layout, or the one-line refusal) is kept by the file's content: on disk
under the cache directory (:class:`ParseCache`, shared by ``lcrag serve`` and ``lcrag mcp`` and kept across
restarts), and the latest few in memory. A file is parsed once, however many questions, indexing runs and MCP
resource reads ask for it, and however many ask at once. The documents cross from the parsing process as JSON, never
pickles: whatever a hostile file makes of a parser, what comes back is data."""

from __future__ import annotations

import hashlib
import json
import logging
import math
import multiprocessing
import os
import signal
import sys
import threading
import types
import time
import zlib
from dataclasses import dataclass
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from lcrag.core import json_pieces
from lcrag.documents.files import check_regular_file
from lcrag.documents.limits import ParseLimits
from lcrag.core.errors import InputError
from lcrag.core.lru import SizedLRU
from lcrag.core.provenance import ROOT, Layout, Segment
from lcrag.core.files import atomic_write_bytes, set_aside
from lcrag.core.types import Document

log = logging.getLogger(__name__)

FORMAT = 3  # of a cached parse and of what a parsing process sends back; bump when either changes
# The libraries whose versions can change what a file parses to: part of every cache key.
LIBRARIES = ("lcrag", "pypdfium2", "python-docx", "trafilatura", "lxml", "markdown-it-py", "charset-normalizer")
# Loaded once in the fork server, so each parsing process starts with them (a fork, not an import).
PRELOAD = ["lcrag.documents", "lcrag.documents.sandbox", "pypdfium2", "docx", "trafilatura", "markdown_it",
           "lxml.etree", "charset_normalizer"]
MAX_CACHE_MB = 2048  # the parse cache on disk (LCRAG_PARSE_CACHE_MB); the least recently used go first
RECENT_BYTES = 64 << 20  # parses kept in memory besides the disk (the one just used always stays)
HASHES_KEPT = 4096  # files' content hashes remembered while the files are unchanged
KILL_GRACE = 5.0  # seconds to reap a killed parsing process


# -- documents as data --------------------------------------------------------------------------------------------
def _document_data(doc: Document) -> dict[str, Any]:
    layout = doc.layout
    return {"text": doc.text, "id": doc.id, "title": doc.title, "source": doc.source,
            "parts": [[offset, _document_data(part)] for offset, part in doc.parts],
            "layout": None if layout is None else {
                "segments": [[s.start, s.end, s.page, s.section_id] for s in layout.segments],
                "sections": [list(node) for node in layout.sections],  # each title once: (parent, title)
                "page_numbering": layout.page_numbering, "extractor": layout.extractor, "verbatim": layout.verbatim}}


def _sections(data: list) -> tuple[tuple[int, str], ...]:
    """A section table as sent: the first is the root, and each other's parent comes before it (so a path's walk up
    its parents ends); anything else is a ValueError (a damaged parse)."""
    sections = tuple((int(parent), title) for parent, title in data)
    if not sections or sections[0] != (ROOT, ""):
        raise ValueError("a section table starts with its root")
    for number, (parent, title) in enumerate(sections[1:], start=1):
        if not (isinstance(title, str) and 0 <= parent < number):
            raise ValueError(f"section {number}: a title under an earlier section")
    return sections


def _layout(data: dict[str, Any]) -> Layout:
    sections = _sections(data["sections"])
    segments = tuple(Segment(int(start), int(end), page, int(section_id))
                     for start, end, page, section_id in data["segments"])
    if any(not 0 <= s.section_id < len(sections) or not isinstance(s.page, (str, type(None))) for s in segments):
        raise ValueError("a segment's section or page is not one of the layout's")
    return Layout(segments, data["page_numbering"], data["extractor"], bool(data["verbatim"]), sections)


def _document(data: dict[str, Any], rebase) -> Document:
    layout = data["layout"]
    return Document(text=data["text"], id=data["id"], title=data["title"], source=rebase(data["source"]),
                    parts=tuple((int(offset), _document(part, rebase)) for offset, part in data["parts"]),
                    layout=None if layout is None else _layout(layout))


def encode(outcome: dict[str, Any]) -> bytes:
    try:
        return json.dumps(outcome, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate a parser let through: escaped, it comes back as it was
        return json.dumps(outcome, separators=(",", ":")).encode("ascii")


def outcome_of(documents: list[Document] | None, path: Path, error: str | None = None,
               bounds: dict[str, float] | None = None) -> dict[str, Any]:
    """What a parse of ``path`` gave, as data: its documents, or the line that refused it; ``bounds``: the parsing
    process's limits, for a refusal that holds under them only (its time or memory ran out, or it crashed)."""
    return {"format": FORMAT, "path": str(path), "error": error, "bounds": bounds,
            "documents": [_document_data(d) for d in documents or ()]}


def documents_of(outcome: dict[str, Any], path: Path) -> list[Document]:
    """The documents of ``outcome`` (a parse of the same content, perhaps at another path, named as ``path``), or
    its refusal as an :class:`InputError`."""
    parsed_as, here = outcome["path"], str(path)

    def rebase(text: str) -> str:  # "/a/x.pdf", "/a/x.pdf:12" (a JSONL record) and messages quoting the path
        return text.replace(parsed_as, here) if parsed_as != here else text

    if outcome["error"] is not None:
        raise InputError(rebase(outcome["error"]))
    return [_document(d, rebase) for d in outcome["documents"]]


def _checked(outcome: Any) -> dict[str, Any]:
    """``outcome`` when it has the shape of a parse's, else a ValueError (a damaged cache file)."""
    if (not isinstance(outcome, dict) or outcome.get("format") != FORMAT or not isinstance(outcome.get("path"), str)
            or not isinstance(outcome.get("documents"), list) or not isinstance(outcome.get("error"), (str, type(None)))
            or not isinstance(outcome.get("bounds"), (dict, type(None)))):
        raise ValueError("not a parse of this version")
    documents_of(outcome, Path(outcome["path"]))  # every field as a Document needs it (raises on a refusal: fine)
    return outcome


def _shape_checked(outcome: Any) -> dict[str, Any]:
    try:
        return _checked(outcome)
    except InputError:
        return outcome
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise ValueError(f"not a parse ({type(exc).__name__})") from None


# -- the cache ----------------------------------------------------------------------------------------------------
def _versions() -> str:
    found = []
    for name in LIBRARIES:
        try:
            found.append(f"{name}={version(name)}")
        except PackageNotFoundError:
            found.append(f"{name}=none")
    return ";".join(found)


def cache_size_limit() -> int:
    value = os.environ.get("LCRAG_PARSE_CACHE_MB")
    try:
        mb = float(value) if value else MAX_CACHE_MB
    except ValueError:
        raise InputError(f"LCRAG_PARSE_CACHE_MB must be a number of megabytes, not {value!r}") from None
    return int(mb * (1 << 20))


def content_of(key: str) -> str:
    """The content hash a parse's key starts with (:meth:`Sandbox.key`): what finds a content's parses."""
    return key.partition("-")[0]


class ParseCache:
    """Parses on disk, one compressed JSON file each under ``directory``, by key; written atomically, a damaged one
    set aside and parsed again; at most ``max_bytes`` in all (the least recently used removed first). A key starts
    with the file's content hash (:meth:`Sandbox.key`), and a parse is kept under that hash's first two characters:
    a removed content's parses are found and removed (:meth:`drop`) without reading the others."""

    def __init__(self, directory: Path, max_bytes: int | None = None):
        self.directory = Path(directory)
        self.max_bytes = cache_size_limit() if max_bytes is None else max_bytes
        self._lock = threading.Lock()
        self._total: int | None = None  # the cache's bytes, as listed once and counted since (other processes too)
        self._remove_unkeyed()

    def _file(self, key: str) -> Path:
        return self.directory / key[:2] / f"{key}.json.z"

    def _remove_unkeyed(self) -> None:
        """Remove the parses kept under keys without their content (an earlier lcrag's): never read again, and a
        removed file's text must not stay in them."""
        for path in self.directory.glob("*/*.json.z"):
            if "-" not in path.name:
                path.unlink(missing_ok=True)

    def drop(self, content_hashes: Iterable[str]) -> int:
        """Remove every parse of these contents (any name, limits or parsers' versions); how many went."""
        gone = 0
        for content in set(content_hashes):
            if len(content) != 64 or not all(c in "0123456789abcdef" for c in content):
                continue  # (not a SHA-256: no glob of anything else)
            for path in self.directory.glob(f"{content[:2]}/{content}-*.json.z"):
                try:
                    size = path.stat().st_size
                    path.unlink()
                except FileNotFoundError:
                    continue
                gone += 1
                with self._lock:
                    if self._total is not None:
                        self._total -= size
        return gone

    def get(self, key: str) -> dict[str, Any] | None:
        path = self._file(key)
        try:
            raw = path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as exc:
            log.warning("cannot read the cached parse %s (%s); parsing again", path.name, exc.strerror or exc)
            return None
        try:
            outcome = _shape_checked(json_pieces.loads(zlib.decompress(raw)))
        except (zlib.error, ValueError, UnicodeDecodeError, RecursionError) as exc:
            set_aside(path, str(exc)[:200])
            return None
        try:
            os.utime(path)  # recently used: removed last
        except OSError:
            pass
        return outcome

    def put(self, key: str, outcome: dict[str, Any]) -> None:
        data = json_pieces.compressed(outcome)  # (a piece at a time: a large parse never holds the interpreter)
        try:
            atomic_write_bytes(self._file(key), data)
        except OSError as exc:  # a full or read-only cache: the parse still answers, it is only not kept
            log.warning("cannot keep a parse in %s (%s)", self.directory, exc.strerror or exc)
            return
        with self._lock:  # the cache is listed once, then counted as it grows: a put never lists it all again
            self._total = self._trim() if self._total is None else self._total + len(data)
            if self._total > self.max_bytes:
                self._total = self._trim()

    def _trim(self) -> int:
        """Remove the least recently used parses beyond :attr:`max_bytes` (the lock held); the bytes left."""
        entries = []
        for path in self.directory.glob("*/*.json.z"):
            try:
                info = path.stat()
            except OSError:
                continue
            entries.append((info.st_mtime, info.st_size, path))
        total = sum(size for _, size, _ in entries)
        for _, size, path in sorted(entries, key=lambda entry: entry[0]):
            if total <= self.max_bytes:
                break
            path.unlink(missing_ok=True)
            total -= size
        return total


# -- the parsing process ------------------------------------------------------------------------------------------
# Plain text is decoded, checked and counted (the text limits), with no parser that a file could exploit: a small one
# is read in this process, not one started per file (a process costs ~100 ms; a collection of a thousand notes,
# minutes); a large one in a process still, so that decoding it never holds this process's interpreter from questions.
PLAIN_TEXT = (".txt", ".text")
PLAIN_TEXT_HERE_BYTES = 1 << 20


def _address_space() -> int | None:
    """This process's virtual memory size in bytes (Linux), or None where it cannot be read."""
    try:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


def _confine(limits: ParseLimits) -> None:
    """Limit this (parsing) process: its CPU time, its address space beyond what it already maps, no core file,
    and a lower priority than the service it works for."""
    import resource

    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    cpu = math.ceil(limits.seconds) + 1  # SIGXCPU, then SIGKILL a second later
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
    mapped = _address_space()
    if mapped is not None:
        most = mapped + int(limits.memory_mb * (1 << 20))
        resource.setrlimit(resource.RLIMIT_AS, (most, most))
    try:
        os.nice(10)
    except OSError:
        pass


def _parse_here(path: Path, limits: ParseLimits) -> dict[str, Any]:
    """Parse ``path`` in this process, within ``limits``: its documents, or the line that refuses it."""
    from lcrag.documents.loaders import load_documents

    try:
        return outcome_of(load_documents(path, limits), path)
    except InputError as exc:
        return outcome_of(None, path, str(exc))
    except MemoryError:
        return outcome_of(None, path, _over_memory(path, limits), limits.process_bounds())
    except RecursionError:
        return outcome_of(None, path, f"{path}: nested too deeply to read (a damaged or hostile file)")
    except Exception as exc:  # noqa: BLE001 - any parser's own failure on one damaged file
        return outcome_of(None, path, f"{path}: could not be read ({type(exc).__name__}: "
                                      f"{' '.join(str(exc).split())[:200]})")


def _over_memory(path: Path, limits: ParseLimits) -> str:
    return (f"{path}: reading it needs more than the {limits.memory_mb:,g} MB of memory one file may take "
            "(--max-parse-mb)")


PR_SET_PDEATHSIG = 1  # prctl(2): the signal a process gets when its parent thread ends


def die_with(owner: int) -> None:
    """End this helper process when process ``owner`` (the lcrag process it works for) ends, however that ends (kill
    -9 included). A process started through multiprocessing's fork server is the fork server's child, and the fork
    server outlives lcrag while any of its children lives (each holds its "alive" pipe, and the resource tracker's),
    so the parent's death signal (``PR_SET_PDEATHSIG``, set too: the fork server killed kills its children) is not
    enough: a daemon thread waits on a pidfd of ``owner`` and kills this process when it ends (where pidfds are
    missing, it looks once a second). With its children gone, the fork server and the resource tracker see their
    pipes' ends and exit by themselves. Called first in each helper process."""
    import ctypes
    import select

    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):  # not Linux: the watch below does it
        pass
    try:
        watched = os.pidfd_open(owner)
    except ProcessLookupError:  # gone already
        os._exit(1)
    except (AttributeError, OSError):
        watched = None

    def watch() -> None:
        if watched is not None:
            select.select([watched], [], [])  # readable once the process has ended
        else:
            while _alive(owner):
                time.sleep(1.0)
        os.kill(os.getpid(), signal.SIGKILL)

    threading.Thread(target=watch, daemon=True, name="lcrag-lifeline").start()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _child_of(owner: int, connection, path: str, limits: ParseLimits) -> None:
    """A parsing process of the lcrag process ``owner``: it dies with it (:func:`die_with`), then parses."""
    die_with(owner)
    _child(connection, path, limits)


def _child(connection, path: str, limits: ParseLimits) -> None:
    """The parsing process: confined, it parses and sends the outcome back as JSON, then exits."""
    _confine(limits)
    outcome = _parse_here(Path(path), limits)
    try:
        payload = encode(outcome)
    except MemoryError:
        outcome = None
        payload = encode(outcome_of(None, Path(path), _over_memory(Path(path), limits), limits.process_bounds()))
    except Exception as exc:  # noqa: BLE001 - a text the encoder refuses: one line, never a traceback
        payload = encode(outcome_of(None, Path(path), f"{path}: could not be read ({type(exc).__name__})"))
    connection.send_bytes(payload)
    connection.close()


# -- the sandbox --------------------------------------------------------------------------------------------------
_MAIN = threading.Lock()


@contextmanager
def _main_hidden() -> Iterator[None]:
    """The program's ``__main__`` module hidden while a parsing process starts. multiprocessing makes each new
    process run the parent's main module again (``lcrag``'s script, importing the CLI and everything it imports:
    150-250 ms a process, measured, where the fork itself takes 2); the parsing process needs none of it (its
    function is :func:`_child`, imported by name), so it is started as if there were no main module to copy."""
    with _MAIN:
        main = sys.modules["__main__"]
        sys.modules["__main__"] = types.ModuleType("__main__")
        try:
            yield
        finally:
            sys.modules["__main__"] = main


class Sandbox:
    """Parses files in confined processes, at most ``workers`` at a time, each outcome kept by the file's content
    under ``cache_dir`` (None: in memory only). :meth:`load` is :func:`lcrag.documents.load_documents` for one
    file; :meth:`load_files` is :func:`lcrag.documents.loaders.load_files`. Thread-safe."""

    def __init__(self, limits: ParseLimits | None = None, cache_dir: Path | None = None, workers: int = 2):
        if workers < 1:
            raise InputError(f"parse workers: at least 1, got {workers}")
        self.limits = limits or ParseLimits()
        self.cache = ParseCache(cache_dir) if cache_dir is not None else None
        self._slots = threading.BoundedSemaphore(workers)
        # Parses just made or read (refusals by the deadline only here: a busy machine may pass it next time).
        self._recent: SizedLRU[str, Kept] = SizedLRU(RECENT_BYTES, lambda kept: kept.size)
        # Files' SHA-256 by (device, inode, size, times): a file unchanged since is not read again to be named.
        self._hashes: SizedLRU[tuple, str] = SizedLRU.counted(HASHES_KEPT)
        self._versions = _versions()
        self.parses = 0  # parsing processes started: what the cache saves is what this does not count
        self._running: set = set()  # the parsing processes now running (killed by close)
        self._closed = False
        self._context = multiprocessing.get_context("forkserver")
        self._context.set_forkserver_preload(PRELOAD)

    # -- keys
    def _content_hash(self, path: Path) -> str:
        """The file's SHA-256, streamed; remembered while the file is unchanged (device, inode, size, times)."""
        info = path.stat()
        key = (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)
        kept = self._hashes.get(key)
        if kept is not None:
            return kept
        with open(path, "rb") as f:
            return self._hashes.put(key, hashlib.file_digest(f, "sha256").hexdigest())

    def key(self, path: Path) -> str:
        """What a parse of ``path`` depends on: its content, its name (documents are named after it), the limits
        and the parsers' versions."""
        content = self._content_hash(path)
        rest = hashlib.sha256("\0".join((content, path.name, self.limits.key(), self._versions, str(FORMAT)))
                              .encode("utf-8", "surrogateescape")).hexdigest()
        return f"{content}-{rest}"  # the content first: its parses are found when it is removed (ParseCache.drop)

    def forget(self, content_hashes: Iterable[str]) -> None:
        """Let go of every parse of these contents, kept in memory or on disk (their files were removed)."""
        contents = set(content_hashes)
        self._recent.drop(lambda key: content_of(key) in contents)
        if self.cache is not None:
            self.cache.drop(contents)

    # -- parsing
    def load(self, path: str | Path) -> list[Document]:
        """The documents of the file ``path``, parsed once per content; a file that cannot be read, or is over a
        limit, is an :class:`InputError` naming it and the limit."""
        path = Path(path)
        check_regular_file(path, self.limits.file_bytes)
        try:
            key = self.key(path)
        except OSError as exc:
            raise InputError(f"cannot read {path}: {exc.strerror or exc}") from None
        return documents_of(self._recent.get_or_put(key, lambda: Kept.of(self._stored_or_parsed(path, key))).outcome,
                            path)

    def _stored_or_parsed(self, path: Path, key: str) -> dict[str, Any]:
        stored = self.cache.get(key) if self.cache is not None else None
        if stored is not None and stored["bounds"] in (None, self.limits.process_bounds()):
            return stored  # (a refusal for time or memory under other limits: parsed again under these)
        outcome, lasting = self._parse(path)
        if lasting and self.cache is not None:
            self.cache.put(key, outcome)
        return outcome

    def _parse(self, path: Path) -> tuple[dict[str, Any], bool]:
        """The outcome of parsing ``path`` in a confined process, and whether it would be the same next time (a
        refusal for the wall-clock deadline may not be, on a less busy machine)."""
        limits = self.limits
        with self._slots:
            if self._closed:
                raise InputError(f"{path}: not read: the service is stopping")
            self.parses += 1
            if path.suffix.lower() in PLAIN_TEXT and path.stat().st_size <= PLAIN_TEXT_HERE_BYTES:
                return _parse_here(path, limits), True  # decoding under the text limits runs no parser: no process
            receiving, sending = self._context.Pipe(duplex=False)
            process = self._context.Process(target=_child_of, args=(os.getpid(), sending, str(path), limits),
                                            daemon=True, name=f"lcrag-parse {path.name[:40]}")
            started = time.monotonic()
            try:
                with _main_hidden():
                    process.start()
            except OSError as exc:  # no process to be had (a process or memory limit of the server's own)
                receiving.close()
                raise InputError(f"{path}: could not start a process to read it ({exc.strerror or exc}); try "
                                 "again") from None
            finally:
                sending.close()  # the child's end: the parent keeps none, so a child's death reads as the end
            self._running.add(process)
            payload = None
            try:
                if receiving.poll(limits.seconds):
                    try:
                        payload = receiving.recv_bytes()
                    except EOFError:  # the process ended without a word: killed by a limit, or crashed
                        payload = None
                elapsed = time.monotonic() - started
            finally:
                if process.is_alive():
                    process.kill()
                process.join(KILL_GRACE)
                self._running.discard(process)
                receiving.close()
        if payload is None and self._closed:  # killed by close: nothing to say about the file
            raise InputError(f"{path}: not read: the service is stopping")
        if payload is not None:
            try:
                return _shape_checked(json_pieces.loads(payload)), True  # (a piece at a time, as above)
            except (ValueError, UnicodeDecodeError, RecursionError) as exc:
                return outcome_of(None, path, f"{path}: could not be read (the parser sent {exc})"), True
        return self._stopped(path, process.exitcode, elapsed)

    def _stopped(self, path: Path, exitcode: int | None, elapsed: float) -> tuple[dict[str, Any], bool]:
        limits, bounds = self.limits, self.limits.process_bounds()
        if exitcode in (None, -signal.SIGKILL) and elapsed >= limits.seconds:
            return outcome_of(None, path, f"{path}: reading it takes more than the {limits.seconds:g} s one file may "
                                          "take (--max-parse-seconds); the file was refused", bounds), False
        if exitcode == -signal.SIGXCPU or (exitcode == -signal.SIGKILL and elapsed >= limits.seconds - 1):
            return outcome_of(None, path, f"{path}: reading it takes more than the {limits.seconds:g} s of CPU time "
                                          "one file may take (--max-parse-seconds); the file was refused", bounds), True
        name = signal.Signals(-exitcode).name if exitcode and exitcode < 0 and -exitcode in signal.valid_signals() \
            else f"exit code {exitcode}"
        return outcome_of(None, path, f"{path}: the parser stopped ({name}) on it: a damaged file, or one needing "
                                      f"more than the {limits.memory_mb:,g} MB of memory one file may take "
                                      "(--max-parse-mb)", bounds), True

    def load_files(self, files: list[Path], progress=None) -> tuple[list[Document], list[str]]:
        """As :func:`lcrag.documents.loaders.load_files`: the documents of ``files`` and one line for each file that
        could not be read; ``progress(done, total)`` after each."""
        docs: list[Document] = []
        failed: list[str] = []
        for i, f in enumerate(files):
            try:
                docs.extend(self.load(f))
            except InputError as exc:
                failed.append(str(exc))
                log.warning("skipped %s", exc)
            if progress:
                progress(i + 1, len(files))
        return docs, failed

    def start(self) -> None:
        """Start the fork server now (it loads the parsers), so the first upload does not wait for it."""
        from multiprocessing import forkserver

        forkserver.ensure_running()

    def close(self) -> None:
        """Refuse further parses and kill those running (their callers get a refusal)."""
        self._closed = True
        for process in list(self._running):
            if process.is_alive():
                process.kill()


@dataclass(frozen=True)
class Kept:
    """A parse's outcome kept in memory, with the bytes it holds (measured once: it never changes)."""

    outcome: dict[str, Any]
    size: int

    @classmethod
    def of(cls, outcome: dict[str, Any]) -> Kept:
        return cls(outcome, data_bytes(outcome))


def data_bytes(value: Any) -> int:
    """The bytes a JSON value (as ``json.loads`` makes it) holds in memory, by ``sys.getsizeof`` over everything in
    it: its texts, and the lists of its segments and sections, which for a file of many headings outweigh its text.
    A walk with a stack of its own: a value nested deeply costs no recursion."""
    size, pending = 0, [value]
    while pending:
        item = pending.pop()
        if item is None or isinstance(item, bool) or (type(item) is int and -5 <= item <= 256):
            continue  # shared by the whole interpreter
        size += sys.getsizeof(item)
        if isinstance(item, dict):
            pending.extend(item.values())  # (its keys: a few names, shared by every dict json.loads makes)
        elif isinstance(item, list):
            pending.extend(item)
    return size
