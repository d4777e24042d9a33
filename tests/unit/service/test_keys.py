"""Keys per person (issue 43, item 5): what a key is and how it is kept (only its SHA-256, compared in constant time),
roles and collection patterns, the audit log, and /metrics for a scoped key (over real HTTP on loopback, each role's
403s, a scoped key's 404s, keys managed over HTTP, revocation and `lcrag keys`: tests/integration/service/test_keys.py)."""

from __future__ import annotations

import hmac
import time

import pytest
from prometheus_client import CollectorRegistry, Counter, generate_latest

from lcrag.core.errors import InputError
from lcrag.service import keys as keys_module
from lcrag.service.access import ScopedRegistry
from lcrag.service.keys import KeyExists, Keys, Principal, SqliteDatabase, key_hash


@pytest.fixture
def keys(tmp_path):
    store = Keys(SqliteDatabase(tmp_path / "collections.sqlite"))
    yield store
    store.close()


def test_a_key_is_random_and_only_its_sha256_is_kept(keys, tmp_path):
    first, second = keys.add("alice", "reader")["key"], keys.add("bob", "reader")["key"]
    assert first != second and first.startswith("lcrag_") and len(first) > 50
    kept = b"".join(p.read_bytes() for p in tmp_path.glob("collections.sqlite*"))
    assert first.encode() not in kept and first.split("_", 2)[2].encode() not in kept
    assert key_hash(first).encode() in kept
    keys.refresh(force=True)
    assert keys.identify(first) == Principal("alice", "reader")
    assert keys.identify(first[:-1] + ("A" if first[-1] != "A" else "B")) is None
    assert keys.identify("lcrag_000000000000_" + "x" * 43) is None and keys.identify("not a key") is None


def test_a_key_is_compared_in_constant_time(keys, monkeypatch):
    key = keys.add("alice", "writer")["key"]
    keys.refresh(force=True)
    compared, compare = [], hmac.compare_digest

    def spy(a, b):
        compared.append((a, b))
        return compare(a, b)

    monkeypatch.setattr(keys_module.hmac, "compare_digest", spy)
    assert keys.identify(key) is not None and compared == [(key_hash(key), key_hash(key))]
    assert keys.identify("lcrag_ffffffffffff_wrong") is None and len(compared) == 2  # an unknown id compared too


def test_roles_and_patterns():
    reader, writer = Principal("r", "reader", ("team-a*",)), Principal("w", "writer")
    admin = Principal("a", "admin", ("team-a*", "shared"))
    assert reader.can("reader") and not reader.can("writer") and writer.can("writer") and not writer.can("admin")
    assert admin.can("reader") and admin.can("admin") and not admin.unscoped_admin
    assert Principal("x", "admin").unscoped_admin
    assert reader.sees("team-a") and reader.sees("team-a-eu") and not reader.sees("team-b")
    assert not reader.sees("TEAM-A")  # collection names are case-sensitive: so are patterns
    assert admin.sees("shared") and not admin.sees("shared2") and writer.sees("anything")


def test_bad_input_is_refused_in_words(keys):
    keys.add("alice", "reader")
    with pytest.raises(KeyExists, match="exists"):
        keys.add("alice", "admin")
    with pytest.raises(InputError, match="unknown role 'boss'"):
        keys.add("bob", "boss")
    with pytest.raises(InputError, match="key names"):
        keys.add("bob smith", "reader")
    with pytest.raises(InputError, match="--api-key"):
        keys.add("api-key", "reader")
    with pytest.raises(InputError, match="collection pattern"):
        keys.add("bob", "reader", ["../etc"])
    with pytest.raises(LookupError, match="no key named 'carol'"):
        keys.revoke("carol")


def test_a_revoked_key_is_refused_its_name_may_be_given_again_and_keys_stay_required(keys):
    old = keys.add("alice", "writer", ["team-a*"])["key"]
    keys.revoke("alice")
    keys.refresh(force=True)
    assert keys.identify(old) is None and keys.required()  # revoking the last key never opens the server
    assert [k["name"] for k in keys.listed()] == [] and keys.listed(revoked=True)[0]["revoked"]
    new = keys.add("alice", "reader")["key"]
    keys.refresh(force=True)
    assert keys.identify(old) is None and keys.identify(new) == Principal("alice", "reader")


def test_when_a_key_was_last_used_is_written_at_the_next_refresh(keys, tmp_path):
    key = keys.add("alice", "reader")["key"]
    keys.refresh(force=True)
    before = time.time()
    assert keys.identify(key) is not None
    keys.refresh(force=True)
    other = Keys(SqliteDatabase(tmp_path / "collections.sqlite"))
    assert other.listed()[0]["last_used"] >= before and other.listed()[0]["created"] <= before
    other.close()


def test_the_audit_log_is_newest_first_in_bounded_pages(keys):
    keys.add("alice", "admin")
    for n in range(5):
        keys.record("alice", "file.upload", "team-a", f"f{n}.txt")
    page = keys.audit(limit=3)
    assert [e["detail"] for e in page] == ["f4.txt", "f3.txt", "f2.txt"] and page[0]["actor"] == "alice"
    rest = keys.audit(limit=3, before=page[-1]["id"])
    assert [e["detail"] for e in rest] == ["f1.txt", "f0.txt", "alice (admin)"]
    assert rest[-1]["action"] == "key.add" and rest[-1]["actor"] == "cli"
    assert len(keys.audit(limit=10**9)) == 6  # bounded by MAX_AUDIT_PAGE, not an error


def test_metrics_for_a_scoped_key_leave_out_other_collections_series():
    registry = CollectorRegistry()
    uploads = Counter("uploads", "per collection", ["collection"], registry=registry)
    uploads.labels("team-a").inc()
    uploads.labels("team-b").inc()
    Counter("requests", "not per collection", registry=registry).inc()
    shown = generate_latest(ScopedRegistry(registry, Principal("r", "reader", ("team-a*",)))).decode()
    assert 'collection="team-a"' in shown and "team-b" not in shown and "requests_total 1.0" in shown


def test_the_audit_log_keeps_its_entries_for_the_retention_and_no_longer(tmp_path, monkeypatch):
    keys = Keys(SqliteDatabase(tmp_path / "collections.sqlite"), audit_retention=3600)
    now = time.time()
    monkeypatch.setattr(keys_module.time, "time", lambda: now)
    keys.record("rita", "file.delete", "team-a", "old.txt")
    monkeypatch.setattr(keys_module.time, "time", lambda: now + 1800)
    keys.record("rita", "file.delete", "team-a", "half.txt")
    assert [e["detail"] for e in keys.audit()] == ["half.txt", "old.txt"]  # both within the hour
    monkeypatch.setattr(keys_module.time, "time", lambda: now + 3700)
    keys.record("sam", "collection.delete", "team-b")
    assert [e["detail"] for e in keys.audit()] == [None, "half.txt"]  # the first is older than the hour: gone
    keys.close()
