"""Defect 21: caches key on what a model is (a GGUF's content, a server's URL and build), not on its name."""

import json
import struct


from lcrag.core import bundled_models as models

QUESTION = [{"role": "user", "content": "same question"}]


def fake_gguf(path, weights: bytes, metadata: dict[str, str] | None = None):
    """A small GGUF-shaped file: header, string metadata, then ``weights``."""
    metadata = metadata or {"general.name": "tiny"}
    kv = b""
    for key, value in metadata.items():
        kv += struct.pack("<Q", len(key)) + key.encode() + struct.pack("<I", 8)
        kv += struct.pack("<Q", len(value)) + value.encode()
    # one array of strings, as a tokenizer's vocabulary is stored
    vocab = [b"a", b"bb", b"ccc"]
    kv += struct.pack("<Q", 10) + b"tok.tokens" + struct.pack("<IIQ", 9, 8, len(vocab))
    kv += b"".join(struct.pack("<Q", len(t)) + t for t in vocab)
    header = b"GGUF" + struct.pack("<IQQ", 3, 0, len(metadata) + 1)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(header + kv + weights)
    return len(header) + len(kv)


def test_same_named_ggufs_in_two_directories_have_different_identities(tmp_path):
    a = tmp_path / "one" / "model.gguf"
    b = tmp_path / "two" / "model.gguf"
    copy = tmp_path / "three" / "model.gguf"
    fake_gguf(a, b"\x01" * 3_000_000)
    # Same name, header and size; other weights (a fine-tune). The fingerprint samples the weights, so it tells
    # models apart, not single edited bytes.
    fake_gguf(b, bytes(range(256)) * (3_000_000 // 256) + b"\x01" * (3_000_000 % 256))
    fake_gguf(copy, b"\x01" * 3_000_000)
    assert models.gguf_identity(a) != models.gguf_identity(b)
    assert models.gguf_identity(a) == models.gguf_identity(copy)  # the content decides, not the path
    assert models.gguf_identity(a).startswith("gguf:model.gguf#") and str(tmp_path) not in models.gguf_identity(a)


def test_gguf_metadata_is_read_to_its_end_and_counts(tmp_path):
    path = tmp_path / "m.gguf"
    end = fake_gguf(path, b"\x00" * 100)
    with path.open("rb") as f:
        assert models._gguf_metadata_end(f) == end
    other = tmp_path / "other" / "m.gguf"
    fake_gguf(other, b"\x00" * 100, {"general.name": "tinY"})
    assert models.gguf_identity(path) != models.gguf_identity(other)
    not_gguf = tmp_path / "plain.bin"
    not_gguf.write_bytes(b"not a gguf")
    with not_gguf.open("rb") as f:
        assert models._gguf_metadata_end(f) == 0


def test_fingerprint_follows_a_rewritten_file(tmp_path):
    path = tmp_path / "m.gguf"
    fake_gguf(path, b"\x01" * 1000)
    before = models.gguf_identity(path)
    fake_gguf(path, b"\x02" * 1000)  # replaced in place: same path and size
    import os

    os.utime(path, ns=(1, 1))  # a different mtime, as any rewrite gives
    assert models.gguf_identity(path) != before


def test_hf_tokenizer_name_follows_its_content(tmp_path):
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel

    from lcrag.core.tokenization import HFTokenizer

    path = tmp_path / "tokenizer.json"
    Tokenizer(WordLevel({"a": 0, "[UNK]": 1}, unk_token="[UNK]")).save(str(path))
    before = HFTokenizer(path).name
    Tokenizer(WordLevel({"b": 0, "[UNK]": 1}, unk_token="[UNK]")).save(str(path))
    assert HFTokenizer(path).name != before and str(tmp_path) not in before
