"""SQLite's bounded storage and fence floor (rule 10): the record of a name idle for
``gc_after`` is removed by a later release's clean-up pass, a record with a live lease or a
live waiting place never is, and fences never go back, whether the clean-up or a hand
removed the record. Rows in the file, not timings: passes are driven by releases."""

from __future__ import annotations

import contextlib
import pathlib
import sqlite3
import time
from collections.abc import Callable

import pytest

import tenure
from tenure._errors import ConfigurationError
from tenure._types import Busy, Grant, Holder, Kind, LeaseSpec, Mode
from tenure.backends.sqlite._config import Settings
from tenure.backends.sqlite._doorbell import Ticket
from tenure.backends.sqlite._lock_sql import SCHEMA_VERSION
from tenure.backends.sqlite._store import SQLiteFile

pytestmark = pytest.mark.sqlite

HOLDER = Holder("test-host", 1, "main")
GC_AFTER = 0.3


@pytest.fixture
def path(tmp_path: pathlib.Path) -> pathlib.Path:
    return tmp_path / "locks.db"


def rows(path: pathlib.Path, table: str, name: str) -> int:
    with sqlite3.connect(path) as raw:
        (count,) = raw.execute(f"SELECT count(*) FROM {table} WHERE name = ?", (name,)).fetchone()
    return int(count)


def sweep_until(locks: tenure.Locks, condition: Callable[[], bool], what: str,
                timeout: float = 5.0) -> None:
    """Release another name over and over (each release may run a clean-up pass) until
    ``condition`` holds."""
    deadline = time.monotonic() + timeout
    tick = locks.lock("tick", ttl=10)
    while not condition():
        assert time.monotonic() < deadline, f"never: {what}"
        with tick:
            pass
        time.sleep(0.02)


def sweep_for(locks: tenure.Locks, seconds: float) -> None:
    """Run clean-up passes (releases of another name) for ``seconds``."""
    deadline = time.monotonic() + seconds
    sweep_until(locks, lambda: time.monotonic() >= deadline, "", timeout=seconds + 5)


def test_an_idle_lock_record_is_collected_and_fences_never_go_back(
    path: pathlib.Path, name: str
) -> None:
    with tenure.connect(f"sqlite:///{path}?gc_after={GC_AFTER}") as locks:
        lock = locks.lock(name, ttl=5)
        assert lock.acquire(blocking=False)
        first = lock.fence
        assert first is not None
        assert first >= time.time_ns() // 1000 - 60_000_000  # floored at the clock, in us
        lock.release()
        assert lock.acquire(blocking=False)
        second = lock.fence
        assert second is not None and second > first
        lock.release()
        sweep_until(locks, lambda: rows(path, "tenure_locks", name) == 0,
                    "the idle record was collected")
        assert locks.inspect(name) is None and locks.list_locks(name) == []
        assert lock.acquire(blocking=False)
        third = lock.fence
        assert third is not None and third > second
        lock.release()
        with sqlite3.connect(path) as raw:  # lost data: the row deleted behind tenure's back
            raw.execute("DELETE FROM tenure_locks WHERE name = ?", (name,))
        assert lock.acquire(blocking=False)
        assert lock.fence is not None and lock.fence > third
        lock.release()


def test_an_idle_election_record_is_collected_and_terms_never_go_back(
    path: pathlib.Path, name: str
) -> None:
    with tenure.connect(f"sqlite:///{path}", gc_after=GC_AFTER) as locks:
        election = locks.election(name, ttl=5)
        leadership = election.campaign(value="a")
        first = leadership.term
        leadership.resign()
        sweep_until(locks, lambda: rows(path, "tenure_locks", name) == 0,
                    "the idle election record was collected")
        assert election.leader() is None
        leadership = election.campaign(value="b")
        assert leadership.term > first
        leadership.resign()


def test_an_idle_semaphore_record_is_collected_and_fences_never_go_back(
    path: pathlib.Path, name: str
) -> None:
    with tenure.connect(f"sqlite:///{path}", gc_after=GC_AFTER) as locks:
        # The record is kept gc_after past the end its permits were granted to (ttl).
        semaphore = locks.semaphore(name, limit=2, ttl=0.2)
        assert semaphore.acquire(blocking=False)
        first = semaphore.fence
        assert first is not None
        semaphore.release()
        sweep_until(locks, lambda: rows(path, "tenure_permits", name) == 0,
                    "the idle semaphore record was collected")
        assert locks.inspect(name, kind="semaphore") is None
        assert semaphore.acquire(blocking=False)
        second = semaphore.fence
        assert second is not None and second > first
        semaphore.release()
        with sqlite3.connect(path) as raw:
            raw.execute("DELETE FROM tenure_permits WHERE name = ?", (name,))
        assert semaphore.acquire(blocking=False)
        assert semaphore.fence is not None and semaphore.fence > second
        semaphore.release()


def test_an_idle_rwlock_record_is_collected_and_fences_never_go_back(
    path: pathlib.Path, name: str
) -> None:
    with tenure.connect(f"sqlite:///{path}", gc_after=GC_AFTER) as locks:
        rwlock = locks.rwlock(name, ttl=0.2)
        with rwlock.write() as write:
            first = write.fence
        assert first is not None
        sweep_until(locks, lambda: rows(path, "tenure_rwlocks", name) == 0,
                    "the idle read-write lock record was collected")
        assert locks.inspect(name, kind="rwlock") is None
        with rwlock.read() as read:
            second = read.fence
        assert second is not None and second > first
        with sqlite3.connect(path) as raw:
            raw.execute("DELETE FROM tenure_rwlocks WHERE name = ?", (name,))
        with locks.lock(name, ttl=0.2, fair=True) as fair:
            assert fair.fence is not None and fair.fence > second


def test_a_renewal_keeps_a_semaphore_record_in_use(path: pathlib.Path, name: str) -> None:
    with tenure.connect(f"sqlite:///{path}", gc_after=GC_AFTER) as locks:
        semaphore = locks.semaphore(name, limit=1, ttl=0.2)
        assert semaphore.acquire(blocking=False)
        semaphore.extend(5)  # in use until 5 s from now, even once released
        semaphore.release()
        sweep_for(locks, 1.0)
        assert rows(path, "tenure_permits", name) == 1


def test_gc_after_none_keeps_records_forever(path: pathlib.Path, name: str) -> None:
    # Short leases, so that every record is idle well before the sweeps (a released permit
    # or read-write lease is idle from its lease's end). A loaded machine may let one run
    # out before its release (LockLost): the record it leaves is one to keep all the same.
    with tenure.connect(f"sqlite:///{path}?gc_after=none") as locks:
        with contextlib.suppress(tenure.LockLost), locks.lock(name, ttl=0.05):
            pass
        with contextlib.suppress(tenure.LockLost), locks.semaphore(name, limit=1, ttl=0.05):
            pass
        with contextlib.suppress(tenure.LockLost), locks.rwlock(name, ttl=0.05).write():
            pass
        time.sleep(0.1)
        sweep_for(locks, 0.5)
        assert [rows(path, table, name) for table in
                ("tenure_locks", "tenure_permits", "tenure_rwlocks")] == [1, 1, 1]


def test_live_leases_are_never_collected(path: pathlib.Path, name: str) -> None:
    with tenure.connect(f"sqlite:///{path}", gc_after=0.01) as locks:
        lock = locks.lock(name, ttl=5)
        semaphore = locks.semaphore(name, limit=1, ttl=5)
        read = locks.rwlock(name, ttl=5).read()
        assert lock.acquire(blocking=False) and semaphore.acquire(blocking=False)
        assert read.acquire(blocking=False)
        sweep_for(locks, 0.5)
        assert lock.owned() and semaphore.owned() and read.owned()
        assert [rows(path, table, name) for table in
                ("tenure_locks", "tenure_permits", "tenure_rwlocks")] == [1, 2, 2]
        lock.release()
        semaphore.release()
        read.release()


def test_a_record_with_a_waiting_place_is_never_collected(
    path: pathlib.Path, name: str
) -> None:
    """The holder's lease ends (no release: it expires) while a waiter keeps its place: the
    free record outlives gc_after, and the waiter's grant follows the holder's fence."""
    store = SQLiteFile(Settings(path, gc_after=0.01))
    lock, read, write = (LeaseSpec(), LeaseSpec(Kind.RWLOCK, mode=Mode.READ, queue_ttl=5),
                         LeaseSpec(Kind.RWLOCK, mode=Mode.WRITE, queue_ttl=5))
    held = store.acquire(name, lock, "holder", 0.1, HOLDER)
    assert isinstance(held, Grant)
    waiter = Ticket("lock", name, "waiter")
    assert isinstance(store.acquire(name, lock, "waiter", 5, HOLDER, ticket=waiter), Busy)
    assert waiter.placed
    queued_read = store.acquire(name, read, "reader", 0.1, HOLDER)
    assert isinstance(queued_read, Grant)
    writer = Ticket("rwlock", name, "writer")
    assert isinstance(store.acquire(name, write, "writer", 5, HOLDER, ticket=writer), Busy)
    assert writer.placed
    with tenure.connect(f"sqlite:///{path}", gc_after=0.01) as locks:
        time.sleep(0.2)  # both leases ended; the places (5 s) are live
        sweep_for(locks, 0.5)
    assert rows(path, "tenure_locks", name) == 1
    assert rows(path, "tenure_rwlocks", name) == 2  # the record and the ended read lease
    granted = store.acquire(name, lock, "waiter", 5, HOLDER, ticket=waiter)
    assert isinstance(granted, Grant) and granted.fence > held.fence
    written = store.acquire(name, write, "writer", 5, HOLDER, ticket=writer)
    assert isinstance(written, Grant) and written.fence > queued_read.fence
    assert store.release(Kind.LOCK, name, "waiter")
    assert store.release(Kind.RWLOCK, name, "writer")


def test_a_file_from_before_the_clean_up_counts_its_records_as_used_at_the_upgrade(
    path: pathlib.Path, name: str
) -> None:
    with (
        tenure.connect(f"sqlite:///{path}", gc_after="none") as locks,
        locks.lock(name, ttl=5),
    ):
        pass
    with sqlite3.connect(path) as raw:  # as schema 1 left a released row
        raw.execute("UPDATE tenure_locks SET expires_at = NULL, fence = 7 WHERE name = ?",
                    (name,))
        raw.execute("PRAGMA user_version = 1")
    with tenure.connect(f"sqlite:///{path}", gc_after=GC_AFTER) as locks:
        with sqlite3.connect(path) as raw:
            assert raw.execute("PRAGMA user_version").fetchone() == (SCHEMA_VERSION,)
            (stamped,) = raw.execute(
                "SELECT expires_at FROM tenure_locks WHERE name = ?", (name,)).fetchone()
        assert stamped is not None and abs(stamped - time.time()) < 5
        sweep_until(locks, lambda: rows(path, "tenure_locks", name) == 0,
                    "the upgraded record was collected gc_after later")
        with locks.lock(name, ttl=5) as lock:
            assert lock.fence is not None and lock.fence > 7


@pytest.mark.parametrize("value", [0, -1, "soon", "nan", True, [1]])
def test_bad_gc_after_values_are_refused(path: pathlib.Path, value: object) -> None:
    with pytest.raises(ConfigurationError, match="gc_after"):
        tenure.connect(f"sqlite:///{path}", gc_after=value)
    with pytest.raises(ConfigurationError, match="gc_after"):
        tenure.connect(f"sqlite:///{path}?gc_after={value}")
