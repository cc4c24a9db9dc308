"""SQLite's one-statement grants: an uncontended lock acquire is the ACQUIRE upsert alone and
a permit's is the GRANT insert alone (its record moved by a trigger), each its own
transaction; every other case is decided in a ``BEGIN IMMEDIATE`` transaction. These tests
mix the two paths, and a tenure from before the trigger writing to the same file, and read
the rows: fences keep increasing across all of them, and a grant ends its transaction (the
file's write lock is free for another connection the moment it returns)."""

from __future__ import annotations

import pathlib
import sqlite3
from typing import Any

import pytest

from tenure._types import Busy, Grant, Holder, Kind, LeaseSpec
from tenure.backends.sqlite import _lock_sql as lock_sql
from tenure.backends.sqlite import _semaphore_sql as semaphore_sql
from tenure.backends.sqlite._clock import NOW, clock_us
from tenure.backends.sqlite._config import Settings
from tenure.backends.sqlite._doorbell import Ticket
from tenure.backends.sqlite._store import SQLiteFile

pytestmark = pytest.mark.sqlite

HOLDER = Holder("test-host", 1, "main")

# An older tenure's permit grant (before the trigger and the weight column), as it wrote it:
# the fence taken from the record row, then the permit inserted, naming its columns.
OLD_TAKE_FENCE = f"""
UPDATE tenure_permits
SET fence = max(fence + 1, :floor), expires_at = max(coalesce(expires_at, 0), {NOW} + :ttl)
WHERE name = :name AND token = '' AND permits = :limit
  AND (SELECT count(*) FROM tenure_permits
       WHERE name = :name AND token != '' AND expires_at > {NOW}) < :limit
  AND NOT EXISTS (SELECT 1 FROM tenure_permits WHERE name = :name AND token = :token)
RETURNING fence
"""
OLD_INSERT_PERMIT = f"""
INSERT INTO tenure_permits (name, token, fence, expires_at, acquired_at, host, pid, thread)
VALUES (:name, :token, :fence, {NOW} + :ttl, {NOW}, :host, :pid, :thread)
"""
LOCK = LeaseSpec()


def pool(limit: int) -> LeaseSpec:
    return LeaseSpec(Kind.SEMAPHORE, limit=limit)


@pytest.fixture
def store(tmp_path: pathlib.Path) -> SQLiteFile:
    return SQLiteFile(Settings(tmp_path / "locks.db", busy_timeout=5.0))


def record(path: pathlib.Path, name: str) -> tuple[int, float]:
    """The semaphore record's (fence, expires_at)."""
    with sqlite3.connect(path) as raw:
        fence, expires_at = raw.execute(
            "SELECT fence, expires_at FROM tenure_permits WHERE name = ? AND token = ''",
            (name,),
        ).fetchone()
    return int(fence), float(expires_at)


def permit(path: pathlib.Path, name: str, token: str) -> tuple[int, float]:
    with sqlite3.connect(path) as raw:
        fence, expires_at = raw.execute(
            "SELECT fence, expires_at FROM tenure_permits WHERE name = ? AND token = ?",
            (name, token),
        ).fetchone()
    return int(fence), float(expires_at)


def granted(outcome: Grant | Busy) -> int:
    assert isinstance(outcome, Grant), outcome
    return outcome.fence


def write_lock_is_free(path: pathlib.Path) -> bool:
    """Whether another connection can take the file's write lock at once."""
    other = sqlite3.connect(path, timeout=0, isolation_level=None)
    try:
        other.execute("BEGIN IMMEDIATE")
        other.execute("ROLLBACK")
        return True
    except sqlite3.OperationalError:
        return False
    finally:
        other.close()


def test_a_one_statement_lock_grant_ends_its_transaction(store: SQLiteFile) -> None:
    path = store.path
    first = granted(store.acquire("job", LOCK, "t1", 30.0, HOLDER))
    assert write_lock_is_free(path)
    assert store.release(Kind.LOCK, "job", "t1")
    second = granted(store.acquire("job", LOCK, "t2", 30.0, HOLDER))
    assert write_lock_is_free(path)
    assert second > first


def test_a_refused_lock_try_is_queued_and_the_next_grant_keeps_fences_increasing(
    store: SQLiteFile,
) -> None:
    path = store.path
    first = granted(store.acquire("job", LOCK, "holder", 30.0, HOLDER))
    ticket = Ticket("lock", "job", "waiter")
    refused = store.acquire("job", LOCK, "waiter", 30.0, HOLDER, ticket=ticket)
    assert isinstance(refused, Busy) and ticket.placed  # a place was taken
    with sqlite3.connect(path) as raw:
        assert raw.execute(
            "SELECT count(*) FROM tenure_waiters WHERE name = 'job' AND token = 'waiter'"
        ).fetchone() == (1,)
    assert store.release(Kind.LOCK, "job", "holder")
    # The waiter's next try (in the transaction, holding its place) is granted.
    second = granted(store.acquire("job", LOCK, "waiter", 30.0, HOLDER, ticket=ticket))
    assert second > first
    assert store.release(Kind.LOCK, "job", "waiter")
    assert write_lock_is_free(path)



def test_a_refused_lock_try_without_a_ticket_takes_no_place(store: SQLiteFile) -> None:
    """The plain verb (no attempt, so no ticket to keep a place with) changes nothing when
    refused: a place nobody refreshes or leaves would hold later waiters back until it
    lapsed."""
    first = granted(store.acquire("job", LOCK, "holder", 30.0, HOLDER))
    refused = store.acquire("job", LOCK, "other", 30.0, HOLDER)
    assert isinstance(refused, Busy) and refused.ttl_left is not None
    with sqlite3.connect(store.path) as raw:
        assert raw.execute("SELECT count(*) FROM tenure_waiters").fetchone() == (0,)
    assert store.release(Kind.LOCK, "job", "holder")
    assert granted(store.acquire("job", LOCK, "other", 30.0, HOLDER)) > first

def lone_statements(store: SQLiteFile, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The statements ``store`` runs as transactions of their own from now on (its grants'
    lone statements among them; every other step is a BEGIN IMMEDIATE transaction)."""
    sent: list[str] = []
    one_statement = store.db.one_statement

    def recorded(sql: str, params: dict[str, Any]) -> list[Any]:
        sent.append(sql)
        return one_statement(sql, params)

    monkeypatch.setattr(store.db, "one_statement", recorded)
    return sent


def test_a_quick_lock_try_is_the_lone_statement_and_a_refused_one_is_not_sent_again(
    store: SQLiteFile, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The lease logic's quick try is the lone ACQUIRE (a grant ends its transaction); one
    refused writes nothing, and the attempt's first try after it (``tried``) goes straight
    to the queueing transaction instead of sending that statement a second time."""
    path = store.path
    sent = lone_statements(store, monkeypatch)
    first = store.quick_try("job", LOCK, "holder", 30.0, HOLDER)
    assert first is not None and write_lock_is_free(path)
    assert store.quick_try("job", LOCK, "waiter", 30.0, HOLDER) is None
    assert sent == [lock_sql.ACQUIRE, lock_sql.ACQUIRE]
    with sqlite3.connect(path) as raw:
        assert raw.execute("SELECT count(*) FROM tenure_waiters").fetchone() == (0,)
    ticket = Ticket("lock", "job", "waiter")
    refused = store.acquire("job", LOCK, "waiter", 30.0, HOLDER, ticket=ticket, tried=True)
    assert isinstance(refused, Busy) and ticket.placed
    assert sent == [lock_sql.ACQUIRE, lock_sql.ACQUIRE]  # decided in the transaction alone
    assert store.release(Kind.LOCK, "job", "holder")
    regranted = granted(store.acquire("job", LOCK, "waiter", 30.0, HOLDER, ticket=ticket))
    assert regranted > first.fence


def test_a_quick_permit_try_is_the_lone_grant_and_a_refused_one_is_not_sent_again(
    store: SQLiteFile, monkeypatch: pytest.MonkeyPatch,
) -> None:
    path = store.path
    granted(store.acquire("pool", pool(1), "a", 30.0, HOLDER))  # the record, made
    assert store.release(Kind.SEMAPHORE, "pool", "a")
    sent = lone_statements(store, monkeypatch)
    held = store.quick_try("pool", pool(1), "b", 30.0, HOLDER)
    assert held is not None and write_lock_is_free(path)
    assert record(path, "pool")[0] == held.fence
    assert store.quick_try("pool", pool(1), "c", 30.0, HOLDER) is None
    assert sent == [semaphore_sql.GRANT, semaphore_sql.GRANT]
    assert record(path, "pool")[0] == held.fence  # refused: nothing written
    assert isinstance(store.acquire("pool", pool(1), "c", 30.0, HOLDER, tried=True), Busy)
    assert sent == [semaphore_sql.GRANT, semaphore_sql.GRANT]


def test_permit_grants_by_either_path_and_by_an_older_tenure_keep_fences_increasing(
    store: SQLiteFile,
) -> None:
    path = store.path
    fences = []
    # First use of the name: no record yet, so the transaction makes it (GRANT_FENCE).
    fences.append(granted(store.acquire("pool", pool(2), "a", 30.0, HOLDER)))
    # The record exists: one statement (GRANT); the trigger moves the record to the permit.
    fences.append(granted(store.acquire("pool", pool(2), "b", 30.0, HOLDER)))
    assert write_lock_is_free(path)
    b_fence, b_end = permit(path, "pool", "b")
    assert record(path, "pool")[0] == b_fence == fences[-1]
    assert record(path, "pool")[1] >= b_end
    # Full: refused, nothing written.
    assert isinstance(store.acquire("pool", pool(2), "c", 30.0, HOLDER), Busy)
    assert record(path, "pool")[0] == b_fence
    assert store.release(Kind.SEMAPHORE, "pool", "a")
    assert store.release(Kind.SEMAPHORE, "pool", "b")
    # A tenure from before the trigger shares the file: its grant is OLD_TAKE_FENCE and then
    # OLD_INSERT_PERMIT in one transaction. The trigger fires on its insert and changes
    # nothing; its permit (no weight) counts as one unit.
    with sqlite3.connect(path, isolation_level=None) as older:
        older.execute("BEGIN IMMEDIATE")
        (old_fence,) = older.execute(OLD_TAKE_FENCE, {
            "name": "pool", "token": "old", "limit": 2, "ttl": 30.0, "floor": clock_us(),
        }).fetchone()
        older.execute(OLD_INSERT_PERMIT, {
            "name": "pool", "token": "old", "fence": old_fence, "ttl": 30.0,
            "host": "older", "pid": 2, "thread": "main",
        })
        older.execute("COMMIT")
    fences.append(int(old_fence))
    assert record(path, "pool")[0] == old_fence
    fences.append(granted(store.acquire("pool", pool(2), "d", 30.0, HOLDER)))
    assert store.release(Kind.SEMAPHORE, "pool", "old")
    assert store.release(Kind.SEMAPHORE, "pool", "d")
    # A new limit once none is live: the one statement refuses (another limit is stored),
    # the transaction stores the new limit and grants.
    fences.append(granted(store.acquire("pool", pool(3), "e", 30.0, HOLDER)))
    assert fences == sorted(fences) and len(set(fences)) == len(fences), fences


def test_a_retried_permit_acquire_keeps_its_fence(store: SQLiteFile) -> None:
    first = granted(store.acquire("pool", pool(1), "a", 30.0, HOLDER))
    # The same token again (a retry after a lost reply): the one statement refuses (the token
    # has a row), the transaction renews the permit and answers its fence.
    assert granted(store.acquire("pool", pool(1), "a", 30.0, HOLDER)) == first
