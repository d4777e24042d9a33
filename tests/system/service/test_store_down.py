"""The PostgreSQL store's connections under outages (issue 43, item 4), on a real server: which errors are an outage
(StoreDown) and which are not, a pooled connection whose session the server ended is replaced before it is handed
out, a read whose connection is lost under it is run again at once, a write is not, and the service answers
StoreDown with 503, Retry-After and one JSON line."""

from __future__ import annotations

import threading
import time

import psycopg
import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from psycopg_pool import PoolTimeout

from lcrag.store.postgres_database import PostgresStore, StoreDown, outage
from lcrag.service.http.errors import add_handlers
from postgres_fixtures import database, postgres  # noqa: F401 - fixtures


def test_an_outage_is_a_connection_failure_not_what_a_statement_did():
    assert outage(PoolTimeout("couldn't get a connection after 3.00 sec"))
    assert outage(psycopg.OperationalError("consuming input failed: server closed the connection unexpectedly"))
    assert outage(psycopg.errors.AdminShutdown("terminating connection due to administrator command"))
    assert outage(psycopg.errors.CannotConnectNow("the database system is starting up"))
    assert not outage(psycopg.errors.DiskFull("could not extend file"))  # 507, the store's storage
    assert not outage(psycopg.errors.QueryCanceled("canceling statement due to statement timeout"))
    assert not outage(psycopg.errors.UniqueViolation("duplicate key"))
    assert not outage(ValueError("not psycopg's"))


def _terminate_others(url: str) -> int:
    """End every other session of the database (as a restart does); how many."""
    with psycopg.connect(url, autocommit=True) as db:
        return len(db.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = "
                              "current_database() AND pid <> pg_backend_pid()").fetchall())


def test_pooled_connections_ended_by_the_server_cost_no_error(database):
    store = PostgresStore(database, connections=4)
    try:
        for _ in range(4):
            assert store.read(lambda db: db.execute("SELECT 1").fetchone()) == (1,)
        assert _terminate_others(database) >= 1
        for _ in range(8):  # each stale connection is found by the pool's check and made again
            assert store.read(lambda db: db.execute("SELECT 2").fetchone()) == (2,)
            with store.connection() as db:
                assert db.execute("SELECT 3").fetchone() == (3,)
    finally:
        store.close()


def _lost_midway(database: str, store: PostgresStore, work) -> list:
    """``work(store)`` while its first query's session is ended by the server under it; what each attempt saw."""
    attempts = []

    def query(db):
        attempts.append(db.info.backend_pid)
        if len(attempts) == 1:
            db.execute("SELECT pg_sleep(5)")  # ended under it
        return db.execute("SELECT 1").fetchone()

    def terminate():
        deadline = time.monotonic() + 5
        while not attempts and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.2)
        with psycopg.connect(database, autocommit=True) as db:
            db.execute("SELECT pg_terminate_backend(%s)", (attempts[0],))

    killer = threading.Thread(target=terminate)
    killer.start()
    try:
        return [work(store, query), attempts]
    finally:
        killer.join()


def test_a_read_whose_connection_is_lost_is_run_again_a_write_is_not(database):
    store = PostgresStore(database, connections=4)
    try:
        result, attempts = _lost_midway(database, store, lambda s, query: s.read(query))
        assert result == (1,) and len(attempts) == 2 and attempts[0] != attempts[1]

        def write(s, query):
            with s.connection() as db:
                return query(db)

        with pytest.raises(StoreDown) as lost:
            _lost_midway(database, store, write)
        assert lost.value.lost and "cannot be reached" in lost.value.detail
    finally:
        store.close()


def test_a_database_that_is_gone_is_store_down_within_the_wait(database):
    store = PostgresStore(database, connections=2, wait=1.0)
    server, name = database.rsplit("/", 1)
    try:
        with psycopg.connect(f"{server}/postgres", autocommit=True) as db:  # no new session, and none is left
            db.execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS false')
            db.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s", (name,))
        with pytest.raises(StoreDown) as down:  # not a wait without end: refused once the wait is over
            store.read(lambda db: db.execute("SELECT 1").fetchone())
        assert "\n" not in down.value.detail and "\n" not in str(down.value) and "cannot be reached" in str(down.value)
    finally:
        with psycopg.connect(f"{server}/postgres", autocommit=True) as db:
            db.execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS true')
        store.close()


def test_the_service_answers_store_down_with_503_retry_after_and_one_json_line():
    app = FastAPI()
    add_handlers(app)

    @app.get("/down")
    def down():
        raise StoreDown("the store postgresql://***@db:5432/lcrag cannot be reached: connection refused")

    response = TestClient(app).get("/down")
    assert response.status_code == 503 and response.headers["retry-after"].isdigit()
    assert response.json()["error"]["type"] == "unavailable_error"
    assert "db:5432" not in response.text and "cannot be reached" in response.json()["error"]["message"]
