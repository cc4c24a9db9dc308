"""Rule 10 on a real PostgreSQL: the record of a name idle for ``gc_after`` is removed by the
clean-up, a record with a live lease, permit or waiting place never is, and fences never go
back: not after a clean-up, not after the rows were lost. Checked against what the tables
hold, for locks, semaphores and read-write locks.

The clean-up runs in the background after a grant or a release of its kind, at most every
``gc_after`` here (0.3 s): the tests trigger it with an acquire and release of another name
and wait for its effect."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

import tenure
from tenure._types import Busy, Holder, Kind, LeaseSpec, Mode
from tenure.backends.postgresql._rwlock_sql import RwlockStatements
from tenure.backends.postgresql._semaphore_sql import SemaphoreStatements
from tenure.backends.postgresql._sync.store import PostgreSQLStore
from tests.integration.sql_support import raw

pytestmark = pytest.mark.postgresql

GC_AFTER = 0.3


@pytest.fixture
def table() -> str:
    """A lock table of its own: rows counted here are this test's only."""
    return f"gc_{uuid.uuid4().hex[:12]}"


@pytest.fixture
def locks(postgresql_url: str, table: str) -> Iterator[tenure.Locks]:
    with tenure.connect(postgresql_url, table=table, gc_after=GC_AFTER) as client:
        yield client


def lock_rows(url: str, table: str, name: str) -> list[tuple[Any, ...]]:
    return raw(url, f'SELECT fence FROM "{table}" WHERE name = %s', (name,))


def permit_rows(url: str, table: str, name: str) -> list[tuple[Any, ...]]:
    quoted = SemaphoreStatements(table).quoted
    return raw(url, f"SELECT token FROM {quoted} WHERE name = %s", (name,))


def rwlock_rows(url: str, table: str, name: str) -> list[tuple[Any, ...]]:
    sql = RwlockStatements(table)
    return raw(
        url,
        f"SELECT name FROM {sql.quoted_records} WHERE name = %(name)s UNION ALL "
        f"SELECT token FROM {sql.quoted_entries} WHERE name = %(name)s",
        {"name": name},
    )


def churn(locks: tenure.Locks, seconds: float) -> None:
    """Grants and releases of other names of every kind for ``seconds``: each one may start
    a clean-up (one per gc_after at most)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        with locks.lock("churn", ttl=5):
            pass
        with locks.semaphore("churn", limit=1, ttl=5):
            pass
        with locks.rwlock("churn", ttl=5).write():
            pass
        time.sleep(0.05)


def collected(locks: tenure.Locks, rows: Any, what: str) -> None:
    """Churn until ``rows()`` is empty (the clean-up removed them)."""
    deadline = time.monotonic() + 5
    while rows() and time.monotonic() < deadline:
        churn(locks, 0.2)
    assert rows() == [], f"{what} was not collected"


def test_an_idle_lock_record_is_removed_and_fences_never_go_back(
    postgresql_url: str, table: str, locks: tenure.Locks, name: str
) -> None:
    lock = locks.lock(name, ttl=5)
    assert lock.acquire(blocking=False)
    first = lock.fence
    assert first is not None and first > 1_000_000_000_000_000  # the server's clock, in us
    lock.release()
    assert lock_rows(postgresql_url, table, name) == [(first,)]  # kept for gc_after
    collected(locks, lambda: lock_rows(postgresql_url, table, name), "the idle record")
    assert locks.inspect(name) is None and locks.list_locks(name) == []
    again = locks.lock(name, ttl=5)
    assert again.acquire(blocking=False)
    second = again.fence
    assert second is not None and second > first
    again.release()
    # Lost data (a restore from an old backup, rows deleted by hand): still greater.
    raw(postgresql_url, f'DELETE FROM "{table}"')
    third = locks.lock(name, ttl=5)
    assert third.acquire(blocking=False)
    assert third.fence is not None and third.fence > second
    third.release()


def test_an_expired_lease_is_collected_gc_after_its_end(
    postgresql_url: str, table: str, locks: tenure.Locks, name: str
) -> None:
    lock = locks.lock(name, ttl=0.2)
    assert lock.acquire(blocking=False)
    fence = lock.fence
    assert fence is not None
    collected(locks, lambda: lock_rows(postgresql_url, table, name), "the expired lease")
    again = locks.lock(name, ttl=5)
    assert again.acquire(blocking=False)
    assert again.fence is not None and again.fence > fence
    again.release()


def test_live_leases_permits_and_places_are_never_removed(
    postgresql_url: str, table: str, name: str
) -> None:
    # gc_after far below the leases' ttl: only the idle condition protects them.
    with tenure.connect(postgresql_url, table=table, gc_after=0.05) as locks:
        # Idle names beside them: their removal shows the clean-ups ran meanwhile.
        idle = f"{name}:idle"
        with locks.lock(idle, ttl=30), locks.semaphore(idle, limit=1, ttl=30):
            pass
        with locks.rwlock(idle, ttl=30).read():
            pass
        held = locks.lock(name, ttl=30)
        assert held.acquire(blocking=False)
        permit = locks.semaphore(name, limit=2, ttl=30)
        assert permit.acquire(blocking=False)
        writer = locks.rwlock(name, ttl=30).write()
        assert writer.acquire(blocking=False)
        # A waiting place of its own, behind a writer lease that then ends: a record with
        # only a place is in use too.
        other = f"{name}:queued"
        ahead = locks.rwlock(other, ttl=30).write()
        assert ahead.acquire(blocking=False)
        queued = locks.backend
        assert isinstance(queued, PostgreSQLStore)
        spec = LeaseSpec(Kind.RWLOCK, mode=Mode.WRITE, queue_ttl=30)
        place = queued.acquire(other, spec, "a-place", 30, Holder("h", 1, "t"))
        assert isinstance(place, Busy)
        ahead.release()
        churn(locks, 1.5)  # many clean-ups
        assert lock_rows(postgresql_url, table, idle) == []
        assert permit_rows(postgresql_url, table, idle) == []
        assert rwlock_rows(postgresql_url, table, idle) == []
        assert lock_rows(postgresql_url, table, name) == [(held.fence,)]
        assert len(permit_rows(postgresql_url, table, name)) == 2  # record + permit
        assert len(rwlock_rows(postgresql_url, table, name)) == 2  # record + lease
        assert ("a-place",) in rwlock_rows(postgresql_url, table, other)
        info = locks.inspect(other, kind="rwlock")
        assert info is not None and info.queued == 1
        assert held.owned() and permit.owned() and writer.owned()
        held.release()
        permit.release()
        writer.release()


def test_gc_after_none_keeps_records_forever(
    postgresql_url: str, table: str, name: str
) -> None:
    with tenure.connect(postgresql_url, table=table, gc_after="none") as locks:
        with locks.lock(name, ttl=0.1) as lock:
            fence = lock.fence
        with locks.semaphore(name, limit=1, ttl=0.1):
            pass
        with locks.rwlock(name, ttl=0.1).read():
            pass
        time.sleep(0.5)
        churn(locks, 0.5)
        assert lock_rows(postgresql_url, table, name) == [(fence,)]
        assert permit_rows(postgresql_url, table, name) != []
        assert rwlock_rows(postgresql_url, table, name) != []


def test_an_idle_semaphore_is_removed_and_fences_never_go_back(
    postgresql_url: str, table: str, locks: tenure.Locks, name: str
) -> None:
    permit = locks.semaphore(name, limit=2, ttl=5)
    assert permit.acquire(blocking=False)
    first = permit.fence
    assert first is not None
    permit.release()
    assert len(permit_rows(postgresql_url, table, name)) == 2  # record + the ended permit
    collected(locks, lambda: permit_rows(postgresql_url, table, name), "the idle semaphore")
    assert locks.inspect(name, kind="semaphore") is None
    again = locks.semaphore(name, limit=2, ttl=5)
    assert again.acquire(blocking=False)
    second = again.fence
    assert second is not None and second > first
    raw(postgresql_url, f"DELETE FROM {SemaphoreStatements(table).quoted}")  # lost data
    third = locks.semaphore(name, limit=2, ttl=5)
    assert third.acquire(blocking=False)
    assert third.fence is not None and third.fence > second
    third.release()


def test_an_idle_rwlock_is_removed_and_fences_never_go_back(
    postgresql_url: str, table: str, locks: tenure.Locks, name: str
) -> None:
    rw = locks.rwlock(name, ttl=5)
    with rw.read() as reader:
        first = reader.fence
    assert first is not None
    collected(locks, lambda: rwlock_rows(postgresql_url, table, name), "the idle rwlock")
    assert locks.inspect(name, kind="rwlock") is None
    with rw.write() as writer:
        second = writer.fence
    assert second is not None and second > first
    sql = RwlockStatements(table)
    for quoted in (sql.quoted_entries, sql.quoted_records):  # lost data
        raw(postgresql_url, f"DELETE FROM {quoted}")
    with locks.lock(name, fair=True, ttl=5) as fair:
        assert fair.fence is not None and fair.fence > second


@pytest.mark.parametrize("value", ["-1", "0", "soon", "inf", "nan"])
def test_a_bad_gc_after_is_a_configuration_error(postgresql_url: str, value: str) -> None:
    with pytest.raises(tenure.ConfigurationError, match="gc_after"):
        separator = "&" if "?" in postgresql_url else "?"
        tenure.connect(f"{postgresql_url}{separator}gc_after={value}")
    with pytest.raises(tenure.ConfigurationError, match="gc_after"):
        tenure.connect(postgresql_url, gc_after=value)
    with pytest.raises(tenure.ConfigurationError, match="gc_after"):
        tenure.connect(postgresql_url, gc_after=True)
