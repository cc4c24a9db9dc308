"""PostgreSQL's read-write and fair locks on a real server, checked against what it stores:
tables made on first use only, places kept in arrival order and turned into leases, a
renewal committed while a grant waits for its row lock, lapsed entries dropped with a
notification, a user granted rights on the tables a DBA made, and the acquire without
pipeline mode (libpq before 14); the command line's views from another process."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

import tenure
from tenure._types import Busy, Grant, Holder, Kind, LeaseSpec, Mode, Renewal
from tenure.backends.postgresql._rwlock_sql import RwlockStatements
from tenure.backends.postgresql._sync import connection as postgresql_connection
from tenure.backends.postgresql._sync.store import PostgreSQLStore
from tests.integration.processes import ROOT
from tests.integration.sql_support import all_at_once, raw

pytestmark = pytest.mark.postgresql

HOLDER = Holder("test-host", 1, "main")


@pytest.fixture
def table() -> str:
    """A lock table of its own, so the rwlock tables start absent."""
    return f"rw_{uuid.uuid4().hex[:12]}"


@pytest.fixture
def backend(postgresql_url: str, table: str) -> Iterator[PostgreSQLStore]:
    backend = PostgreSQLStore.from_url(postgresql_url, table=table)
    try:
        yield backend
    finally:
        backend.close()


def exists(url: str, table: str) -> bool:
    ((found,),) = raw(url, "SELECT to_regclass(%s) IS NOT NULL", (f'"{table}"',))
    return bool(found)


def entries(url: str, table: str, name: str) -> list[tuple[Any, ...]]:
    """(token, kind, mode, seq) of every row of ``name`` with a holder, by seq: ended ones
    (released, broken: kept, with no holder, as the name's last use) are left out."""
    sql = RwlockStatements(table)
    return raw(url, f"SELECT token, kind, mode, seq FROM {sql.quoted_entries} "
                    "WHERE name = %s AND pid IS NOT NULL ORDER BY kind, seq", (name,))


def ended(url: str, table: str, name: str) -> list[str]:
    """The tokens of the name's ended entries."""
    sql = RwlockStatements(table)
    return [token for (token,) in raw(
        url, f"SELECT token FROM {sql.quoted_entries} WHERE name = %s AND pid IS NULL "
             "ORDER BY token", (name,))]


def granted(answer: Grant | Busy) -> int:
    assert isinstance(answer, Grant), answer
    return answer.fence


def record(url: str, table: str, name: str) -> tuple[Any, ...]:
    sql = RwlockStatements(table)
    ((fence, arrivals),) = raw(
        url, f"SELECT fence, arrivals FROM {sql.quoted_records} WHERE name = %s", (name,)
    )
    return fence, arrivals


def acquire(backend: PostgreSQLStore, name: str, token: str, mode: str, *, ttl: float = 10,
            queue_ttl: float = 3) -> Grant | Busy:
    spec = LeaseSpec(Kind.RWLOCK, mode=Mode(mode), queue_ttl=queue_ttl)
    return backend.acquire(name, spec, token, ttl, HOLDER)


def test_tables_are_made_by_the_first_read_write_acquire_only(
    postgresql_url: str, table: str, name: str
) -> None:
    sql = RwlockStatements(table)
    with tenure.connect(postgresql_url, table=table) as locks:
        with locks.lock(name, ttl=10):
            pass
        assert locks.inspect(name, kind="rwlock") is None
        assert [info.name for info in locks.list_locks("")] == [name]
        assert locks.break_lock(name, kind="rwlock") is False
        assert not exists(postgresql_url, sql.records)
        assert not exists(postgresql_url, sql.entries)
        with locks.rwlock(name, ttl=10).read() as reader:
            fence = reader.fence
            assert fence is not None
            ((_, *lease),) = entries(postgresql_url, table, name)
            assert lease == ["lease", "read", fence]
        assert exists(postgresql_url, sql.records) and exists(postgresql_url, sql.entries)
    assert entries(postgresql_url, table, name) == []
    assert len(ended(postgresql_url, table, name)) == 1  # the released lease, as last use
    assert record(postgresql_url, table, name) == (fence, 0)


def test_places_keep_their_arrival_order_and_become_leases(
    postgresql_url: str, table: str, backend: PostgreSQLStore, name: str
) -> None:
    first = granted(acquire(backend, name, "w1", "write"))
    waiting = acquire(backend, name, "r1", "read")
    assert isinstance(waiting, Busy)
    assert waiting.ttl_left is not None and 9 < waiting.ttl_left <= 10
    assert isinstance(acquire(backend, name, "w2", "write"), Busy)
    assert isinstance(acquire(backend, name, "r1", "read"), Busy)  # refreshed, same place
    assert entries(postgresql_url, table, name) == [
        ("w1", "lease", "write", first), ("r1", "place", "read", 1),
        ("w2", "place", "write", 2),
    ]
    assert record(postgresql_url, table, name) == (first, 2)
    assert backend.release(Kind.RWLOCK, name, "w1") is True
    late = acquire(backend, name, "w2", "write")
    assert isinstance(late, Busy) and late.ttl_left is None  # only a place ahead blocks it
    second = granted(acquire(backend, name, "r1", "read"))
    assert second > first
    assert isinstance(acquire(backend, name, "r2", "read"), Busy)  # behind the writer
    assert entries(postgresql_url, table, name) == [
        ("r1", "lease", "read", second), ("w2", "place", "write", 2),
        ("r2", "place", "read", 3),
    ]
    assert ended(postgresql_url, table, name) == []  # w1's, dropped by the grant
    assert acquire(backend, name, "r1", "read") == Grant(second)  # a retry keeps its fence
    assert backend.release(Kind.RWLOCK, name, "r1") is True
    third = granted(acquire(backend, name, "w2", "write"))
    assert third > second
    assert backend.release(Kind.RWLOCK, name, "r2") is False  # a place leaves, no lease released
    assert entries(postgresql_url, table, name) == [("w2", "lease", "write", third)]
    assert ended(postgresql_url, table, name) == ["r2"]
    info = backend.inspect(Kind.RWLOCK, name)
    assert info is not None and info.kind == "rwlock" and info.fence == third
    assert info.queued == 0
    (lease,) = info.leases
    assert (lease.mode, lease.fence, lease.holder) == ("write", third, HOLDER)
    assert backend.break_leases(Kind.RWLOCK, name) is True
    assert backend.break_leases(Kind.RWLOCK, name) is False
    assert record(postgresql_url, table, name) == (third, 3)
    assert ended(postgresql_url, table, name) == ["r2", "w2"]


def test_a_renewal_committed_while_a_grant_waits_is_not_taken_for_an_expired_lease(
    postgresql_url: str, table: str, backend: PostgreSQLStore, name: str
) -> None:
    """The grant reads the name's entries FOR UPDATE: it waits for the renewal's row lock and
    then judges the lease at the version the renewal committed."""
    granted(acquire(backend, name, "holder", "write", ttl=0.5))
    sql = RwlockStatements(table)
    conninfo = postgresql_url.partition("?")[0]
    with psycopg.connect(conninfo, autocommit=True) as renewal:
        with renewal.transaction():
            renewal.execute(
                f"UPDATE {sql.quoted_entries} SET expires_at = clock_timestamp() "
                "+ interval '30 seconds' WHERE name = %s AND token = 'holder'", (name,)
            )
            time.sleep(0.7)  # the committed lease has run out; the renewal is not in yet
            outcome: list[Grant | Busy] = []
            grant = threading.Thread(
                target=lambda: outcome.append(acquire(backend, name, "other", "write"))
            )
            grant.start()
            grant.join(0.5)
            assert grant.is_alive(), "the grant did not wait for the renewal's row lock"
        grant.join(10)
    (answer,) = outcome
    assert isinstance(answer, Busy) and answer.ttl_left is not None and answer.ttl_left > 25
    assert backend.owned(Kind.RWLOCK, name, "holder") is True


def test_lapsed_places_are_dropped_and_waiters_told(
    postgresql_url: str, table: str, backend: PostgreSQLStore,
    name: str,
) -> None:
    fence = granted(acquire(backend, name, "holder", "write"))
    assert isinstance(acquire(backend, name, "gone", "write", queue_ttl=0.2), Busy)
    conninfo = postgresql_url.partition("?")[0]
    with psycopg.connect(conninfo, autocommit=True) as listener:
        listener.execute(f'LISTEN "{table}"')
        time.sleep(0.3)
        assert isinstance(acquire(backend, name, "next", "write"), Busy)
        notices = [notice.payload for notice in listener.notifies(timeout=5, stop_after=1)]
    assert notices == [f"rwlock:{name}"]
    assert entries(postgresql_url, table, name) == [
        ("holder", "lease", "write", fence), ("next", "place", "write", 2),
    ]
    info = backend.inspect(Kind.RWLOCK, name)
    assert info is not None and info.queued == 1


def test_a_user_granted_rights_on_dba_made_tables(postgresql_url: str, table: str) -> None:
    with tenure.connect(postgresql_url, table=table) as admin:  # the DBA's one-time set-up
        assert admin.rwlock("setup", ttl=1).write().acquire(blocking=False)
    sql = RwlockStatements(table)
    role = f"app_{uuid.uuid4().hex[:12]}"
    raw(postgresql_url, f'CREATE ROLE "{role}" LOGIN')
    raw(postgresql_url, f'REVOKE CREATE ON SCHEMA public FROM PUBLIC, "{role}"')
    raw(postgresql_url, f'GRANT SELECT, INSERT, UPDATE ON "{table}" TO "{role}"')
    for made in (sql.quoted_records, sql.quoted_entries):
        raw(postgresql_url, f'GRANT SELECT, INSERT, UPDATE, DELETE ON {made} TO "{role}"')
    app_url = postgresql_url.replace("postgres@", f"{role}@", 1)
    with tenure.connect(app_url, table=table) as locks:
        rw = locks.rwlock("app", ttl=10, renew=True)
        with rw.read() as first, rw.read() as second:
            assert first.fence is not None and second.fence is not None
            last = max(first.fence, second.fence)
            first.extend()
            assert rw.write().acquire(blocking=False) is False
        with locks.lock("app", fair=True, ttl=10) as fair:
            assert fair.fence is not None and fair.fence > last
        assert [info.name for info in locks.list_locks("app")] == ["app"]


def test_without_pipeline_mode_the_same_transaction_runs_message_by_message(
    postgresql_url: str, table: str, backend: PostgreSQLStore, name: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """libpq before 14 has no pipeline mode: the acquire sends its transaction's messages one
    by one, with the same outcome."""
    monkeypatch.setattr(postgresql_connection, "PIPELINES", False)
    first = granted(acquire(backend, name, "writer", "write"))
    assert isinstance(acquire(backend, name, "reader", "read"), Busy)
    assert backend.release(Kind.RWLOCK, name, "writer") is True
    second = granted(acquire(backend, name, "reader", "read"))
    assert second > first
    assert entries(postgresql_url, table, name) == [("reader", "lease", "read", second)]


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tenure", *args], cwd=ROOT, capture_output=True, text=True,
        timeout=60, check=False,
    )


def test_ls_show_break_from_another_process(postgresql_url: str, name: str) -> None:
    with tenure.connect(postgresql_url) as locks:
        rw = locks.rwlock(name, ttl=60)
        readers = [rw.read(), rw.read()]
        for reader in readers:
            assert reader.acquire(blocking=False)
        assert isinstance(acquire_place(locks, name), Busy)  # a writer's place, left there
        listed = cli("ls", name, "--url", postgresql_url)
        assert listed.returncode == 0, listed.stderr
        rows = [line.split() for line in listed.stdout.splitlines()[1:]]
        assert [row[1:5] for row in rows] == [["rwlock", "read", "+1", "queued"]] * 2
        shown = cli("show", name, "--json", "--url", postgresql_url)
        assert shown.returncode == 0, shown.stderr
        entry = json.loads(shown.stdout)
        assert entry["kind"] == "rwlock" and entry["queued"] == 1
        assert [holder["mode"] for holder in entry["holders"]] == ["read", "read"]
        assert entry["fence"] == max(reader.fence or 0 for reader in readers)
        broken = cli("break", name, "--rwlock", "--url", postgresql_url)
        assert broken.returncode == 0 and "broke read-write lock" in broken.stdout, broken.stderr
        assert [reader.owned() for reader in readers] == [False, False]
        info = locks.inspect(name, kind="rwlock")
        assert info is not None and not info.held and info.queued == 1  # the queue stays


def acquire_place(locks: tenure.Locks, name: str) -> Grant | Busy:
    """A writer's place in the queue of ``name``, with nobody refreshing it."""
    backend = locks.backend
    assert isinstance(backend, PostgreSQLStore)
    spec = LeaseSpec(Kind.RWLOCK, mode=Mode.WRITE, queue_ttl=30)
    return backend.acquire(name, spec, "a-writer", 60, HOLDER)


def test_a_renewal_that_waited_while_its_lease_ended_does_not_revive_it(
    postgresql_url: str, table: str, backend: PostgreSQLStore, name: str
) -> None:
    """A renewal reads the clock, then waits for its lease's row while a release (here a raw
    one, as the release writes it) ends it: the end it then sees is later than its clock,
    and it must not take the lease for live and revive it."""
    granted(acquire(backend, name, "holder", "read", ttl=30))
    sql = RwlockStatements(table)
    conninfo = postgresql_url.partition("?")[0]
    with psycopg.connect(conninfo, autocommit=True) as ender:
        with ender.transaction():
            ender.execute(f"SELECT 1 FROM {sql.quoted_entries} "
                          "WHERE name = %s AND token = 'holder' FOR UPDATE", (name,))
            outcome: list[list[bool]] = []
            renewal = threading.Thread(target=lambda: outcome.append(
                backend.extend_many([Renewal(name, "holder", 30, kind=Kind.RWLOCK)])
            ))
            renewal.start()
            renewal.join(0.5)
            assert renewal.is_alive(), "the renewal did not wait for the row"
            ender.execute(
                f"UPDATE {sql.quoted_entries} SET expires_at = clock_timestamp(), host = NULL, "
                "pid = NULL, thread = NULL WHERE name = %s AND token = 'holder'", (name,)
            )
        renewal.join(10)
    assert outcome == [[False]]
    assert entries(postgresql_url, table, name) == []
    granted(acquire(backend, name, "writer", "write"))


def test_a_place_lists_its_waiter_and_an_older_tenures_place_no_start(
    postgresql_url: str, table: str, backend: PostgreSQLStore, name: str
) -> None:
    granted(acquire(backend, name, "holder", "write"))
    assert isinstance(acquire(backend, name, "waiter", "read"), Busy)
    info = backend.inspect(Kind.RWLOCK, name)
    assert info is not None
    (waiter,) = info.waiters
    assert (waiter.holder, waiter.mode) == (HOLDER, "read") and waiter.since is not None
    # An older tenure wrote its places without a start: listed, since unknown.
    sql = RwlockStatements(table)
    raw(postgresql_url, f"UPDATE {sql.quoted_entries} SET acquired_at = NULL "
        "WHERE name = %s AND kind = 'place'", (name,))
    info = backend.inspect(Kind.RWLOCK, name)
    assert info is not None
    assert [(w.holder, w.since, w.mode) for w in info.waiters] == [(HOLDER, None, "read")]


def entry_columns(url: str, table: str) -> list[str]:
    rows = raw(url, "SELECT attname FROM pg_attribute WHERE attrelid = to_regclass(%s) "
                    "AND attnum > 0 AND NOT attisdropped ORDER BY attnum",
               (RwlockStatements(table).quoted_entries,))
    return [str(row[0]) for row in rows]


def test_entries_from_before_the_fair_column_are_read_as_is_and_upgraded_by_an_acquire(
    postgresql_url: str, table: str, name: str
) -> None:
    sql = RwlockStatements(table)
    with tenure.connect(postgresql_url, table=table) as locks, locks.lock("plain", ttl=10):
        pass  # the lock table
    for statement in sql.create:  # as a tenure from before the fair column made them
        raw(postgresql_url, statement.replace("    fair        boolean,\n", ""))
    assert "fair" not in entry_columns(postgresql_url, table)
    # An older tenure's fair lock: its record and its live write lease.
    raw(postgresql_url, f"INSERT INTO {sql.quoted_records} VALUES (%s, 7, 0)", (name,))
    raw(postgresql_url,
        f"INSERT INTO {sql.quoted_entries} VALUES (%s, 'old-token', 'lease', 'write', 7, "
        "clock_timestamp() + interval '60 seconds', clock_timestamp(), 'old-host', 7, "
        "'old-thread')", (name,))
    with tenure.connect(postgresql_url, table=table) as locks:
        info = locks.inspect(name, kind="fair")
        # Read without altering the table: an entry from before the column is a read-write
        # lock's (nothing says otherwise).
        assert info is not None and info.kind == "rwlock" and info.fence == 7
        assert [(lease.holder.host, lease.fair) for lease in info.leases] == [("old-host", False)]
        assert [i.kind for i in locks.list_locks(name)] == ["rwlock"]
        assert "fair" not in entry_columns(postgresql_url, table)
        # The first acquire adds the column and goes on.
        with locks.lock(f"{name}-new", ttl=10, fair=True):
            assert entry_columns(postgresql_url, table)[-1] == "fair"
            shown = locks.inspect(f"{name}-new", kind="rwlock")
            assert shown is not None and shown.kind == "fair"
            assert [lease.fair for lease in shown.leases] == [True]
        info = locks.inspect(name, kind="rwlock")
        assert info is not None and info.kind == "rwlock" and info.held  # the old lease stays
        assert locks.break_lock(name, kind="rwlock")
        fair = locks.lock(name, ttl=10, fair=True)
        assert fair.acquire(blocking=False) and (fair.fence or 0) > 7
        shown = locks.inspect(name, kind="rwlock")
        assert shown is not None and shown.kind == "fair"
        fair.release()


def test_many_clients_upgrading_old_entries_at_once_all_succeed(
    postgresql_url: str, table: str
) -> None:
    with tenure.connect(postgresql_url, table=table) as locks, locks.lock("plain", ttl=10):
        pass
    for statement in RwlockStatements(table).create:
        raw(postgresql_url, statement.replace("    fair        boolean,\n", ""))

    def client(number: int) -> None:
        with (tenure.connect(postgresql_url, table=table) as locks,
              locks.lock(f"fair-{number}", ttl=10, fair=True)):
            info = locks.inspect(f"fair-{number}", kind="rwlock")
            assert info is not None and info.kind == "fair"

    assert all_at_once(6, client) == []
    assert entry_columns(postgresql_url, table).count("fair") == 1
