"""A parse is kept under its file's content (Sandbox.key starts with the content's SHA-256): a removed content's
parses, under every name and limit, are found and removed from disk and memory, others stay; parses kept under keys
of an earlier lcrag (without their content) are removed when the cache is opened."""

from __future__ import annotations

import hashlib
import zlib

from lcrag.documents.limits import ParseLimits
from lcrag.documents.sandbox import ParseCache, Sandbox, content_of


def test_a_removed_contents_parses_go_from_disk_and_memory_and_others_stay(tmp_path):
    gone, kept = tmp_path / "gone.txt", tmp_path / "kept.txt"
    gone.write_text("The codeword is QX77123.")
    kept.write_text("The harbour master is Ines.")
    copy = tmp_path / "copy of gone.txt"
    copy.write_bytes(gone.read_bytes())
    parsed = tmp_path / "parsed"
    sandbox = Sandbox(cache_dir=parsed)
    other_limits = Sandbox(ParseLimits(title_chars=100), cache_dir=parsed)
    for path in (gone, kept, copy):
        sandbox.load(path)
    other_limits.load(gone)
    content = hashlib.sha256(gone.read_bytes()).hexdigest()
    assert content_of(sandbox.key(gone)) == content == content_of(sandbox.key(copy))
    assert len(list(parsed.glob(f"*/{content}-*.json.z"))) == 3  # two names, two limits
    sandbox.forget({content})
    assert list(parsed.glob(f"*/{content}-*.json.z")) == []
    assert sandbox._recent.get(sandbox.key(gone)) is None and sandbox._recent.get(sandbox.key(kept)) is not None
    assert [p for p in parsed.rglob("*.json.z") if b"Ines" in zlib.decompress(p.read_bytes())]
    parses = sandbox.parses
    assert sandbox.load(kept)[0].text.startswith("The harbour") and sandbox.parses == parses  # still kept
    assert sandbox.load(gone)[0].text.startswith("The codeword") and sandbox.parses == parses + 1  # parsed again


def test_parses_kept_without_their_content_are_removed_when_the_cache_opens(tmp_path):
    old = tmp_path / "ab" / ("ab" + "0" * 62 + ".json.z")
    old.parent.mkdir(parents=True)
    old.write_bytes(zlib.compress(b'{"secret": "QX77123"}'))
    ParseCache(tmp_path)
    assert not old.exists()
    assert ParseCache(tmp_path).drop({"not a hash/../*"}) == 0  # only a SHA-256 is looked for
