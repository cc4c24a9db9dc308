"""SQLite's read-write and fair locks where the conformance suite cannot look: the tables made
on first use only (a file used for plain locks never gets them, and keeps working for an
older tenure), the waiters a release or a break rings (exactly those the grant rule admits
now), places kept in arrival order in the lock's waiter table, and lapsed entries dropped
with a ring. Counts and rows, not timings."""

from __future__ import annotations

import pathlib
import sqlite3
import threading

import pytest

import tenure
from tenure._types import Busy, Grant, Holder, Kind, LeaseSpec, Mode
from tenure.backends.sqlite._config import Settings
from tenure.backends.sqlite._doorbell import Ticket
from tenure.backends.sqlite._lock_sql import SCHEMA_VERSION
from tenure.backends.sqlite._store import SQLiteFile

pytestmark = pytest.mark.sqlite

HOLDER = Holder("test-host", 1, "main")


@pytest.fixture
def path(tmp_path: pathlib.Path) -> pathlib.Path:
    return tmp_path / "locks.db"


@pytest.fixture
def store(path: pathlib.Path) -> SQLiteFile:
    return SQLiteFile(Settings(path))


def tables(path: pathlib.Path) -> set[str]:
    with sqlite3.connect(path) as raw:
        return {row[0] for row in raw.execute("SELECT name FROM sqlite_master WHERE type='table'")}


def waiter_columns(path: pathlib.Path) -> list[str]:
    with sqlite3.connect(path) as raw:
        return [row[1] for row in raw.execute("PRAGMA table_info(tenure_waiters)")]


def places(path: pathlib.Path, name: str) -> list[tuple[str, str, int]]:
    with sqlite3.connect(path) as raw:
        return raw.execute(
            "SELECT token, mode, seq FROM tenure_waiters WHERE kind = 'rwlock' AND name = ? "
            "ORDER BY seq", (name,)
        ).fetchall()


def take(store: SQLiteFile, name: str, token: str, mode: str, ticket: Ticket | None = None,
         queue_ttl: float = 60) -> Grant | Busy:
    spec = LeaseSpec(Kind.RWLOCK, mode=Mode(mode), queue_ttl=queue_ttl)
    return store.acquire(name, spec, token, 60, HOLDER, ticket=ticket)


def queue(store: SQLiteFile, name: str, token: str, mode: str,
          queue_ttl: float = 60) -> Ticket:
    """A refused try's ticket: the attempt's place, kept for its next try."""
    ticket = Ticket("rwlock", name, token)
    answer = take(store, name, token, mode, ticket, queue_ttl=queue_ttl)
    assert isinstance(answer, Busy) and ticket.placed
    return ticket


def fence_of(answer: Grant | Busy) -> int:
    assert isinstance(answer, Grant), answer
    return answer.fence


def rung(ticket: Ticket) -> bool:
    """Whether a ring reached ``ticket`` since its last wait (and consume it)."""
    event = threading.Event()
    if not ticket.attach(event):
        return True
    ticket.detach()
    return False


def test_the_tables_are_made_on_first_use_and_plain_locks_never_need_them(
    path: pathlib.Path, name: str
) -> None:
    url = f"sqlite:///{path}"
    with tenure.connect(url) as locks:
        with locks.lock(name, ttl=10):
            pass
        # Looking for read-write locks (as `tenure ls` does) finds none and makes nothing.
        assert locks.inspect(name, kind="rwlock") is None
        assert [info.kind for info in locks.list_locks("")] == ["lock"]
        assert locks.break_lock(name, kind="rwlock") is False
        assert "tenure_rwlocks" not in tables(path)
        assert "mode" not in waiter_columns(path)
        with locks.rwlock(name, ttl=10).read():
            pass
    assert "tenure_rwlocks" in tables(path)
    assert waiter_columns(path)[-6:] == ["mode", "host", "pid", "thread", "placed_at", "fair"]
    with sqlite3.connect(path) as raw:
        # The schema version is unchanged by the tables: made on first use, not by a version.
        assert raw.execute("PRAGMA user_version").fetchone() == (SCHEMA_VERSION,)
        # An older tenure's lock waiter names its columns: its place has no mode.
        raw.execute(
            "INSERT INTO tenure_waiters (kind, name, seq, token, expires_at, wake) "
            "VALUES ('lock', 'old', 1, 'old-token', 0, NULL)"
        )
    with tenure.connect(url) as locks, locks.lock("old", ttl=10) as lock:
        assert lock.fence is not None  # its lapsed place holds nobody back


# The read-write lock table as tenure made it before the fair column (its waiters' table
# had the mode column, not the fair one).
OLD_RWLOCKS = """
CREATE TABLE tenure_rwlocks (
    name TEXT NOT NULL, token TEXT NOT NULL, mode TEXT, fence INTEGER NOT NULL,
    expires_at REAL, acquired_at REAL, host TEXT, pid INTEGER, thread TEXT,
    PRIMARY KEY (name, token)
) WITHOUT ROWID
"""


def test_tables_from_before_the_fair_column_are_read_as_is_and_upgraded_by_an_acquire(
    path: pathlib.Path, name: str
) -> None:
    url = f"sqlite:///{path}"
    with tenure.connect(url) as locks, locks.lock("plain", ttl=10):
        pass  # the file and its lock tables, as every tenure makes them
    with sqlite3.connect(path) as raw:
        raw.execute(OLD_RWLOCKS)
        raw.execute("ALTER TABLE tenure_waiters ADD COLUMN mode TEXT")
        # An older tenure's fair lock: its record row and its live write lease.
        raw.execute("INSERT INTO tenure_rwlocks (name, token, fence, expires_at) "
                    "VALUES (?, '', 7, unixepoch() + 60)", (name,))
        raw.execute("INSERT INTO tenure_rwlocks VALUES (?, 'old-token', 'write', 7, "
                    "unixepoch() + 60, unixepoch(), 'old-host', 7, 'old-thread')", (name,))
    with tenure.connect(url) as locks:
        info = locks.inspect(name, kind="fair")
        # Read without altering the file: an entry from before the column is a read-write
        # lock's (nothing says otherwise).
        assert info is not None and info.kind == "rwlock" and info.fence == 7
        assert [(lease.holder.host, lease.fair) for lease in info.leases] == [("old-host", False)]
        assert "fair" not in waiter_columns(path)
        assert [i.kind for i in locks.list_locks(name)] == ["rwlock"]
        # The first acquire adds the column to both tables and goes on.
        other = f"{name}-new"
        with locks.lock(other, ttl=10, fair=True):
            assert waiter_columns(path)[-1] == "fair"
            shown = locks.inspect(other, kind="rwlock")
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
    with sqlite3.connect(path) as raw:
        columns = [row[1] for row in raw.execute("PRAGMA table_info(tenure_rwlocks)")]
        assert columns[-1] == "fair"
        assert raw.execute("PRAGMA user_version").fetchone() == (SCHEMA_VERSION,)


def test_a_write_release_rings_every_reader_before_the_next_writer(
    store: SQLiteFile, path: pathlib.Path, name: str
) -> None:
    write = fence_of(take(store, name, "writer", "write"))
    first, second = queue(store, name, "r1", "read"), queue(store, name, "r2", "read")
    next_writer = queue(store, name, "w2", "write")
    late = queue(store, name, "r3", "read")
    assert [(token, mode) for token, mode, _ in places(path, name)] == [
        ("r1", "read"), ("r2", "read"), ("w2", "write"), ("r3", "read"),
    ]
    assert store.release(Kind.RWLOCK, name, "writer") is True
    assert [rung(t) for t in (first, second, next_writer, late)] == [True, True, False, False]
    read_1 = fence_of(take(store, name, "r1", "read", first))
    read_2 = fence_of(take(store, name, "r2", "read", second))
    assert write < read_1 < read_2
    assert store.release(Kind.RWLOCK, name, "r1") is True
    assert [rung(t) for t in (next_writer, late)] == [False, False]  # r2 still reads
    assert store.release(Kind.RWLOCK, name, "r2") is True
    assert [rung(t) for t in (next_writer, late)] == [True, False]
    # Refreshing its place keeps the late reader's position, behind w2.
    assert isinstance(take(store, name, "r3", "read", late), Busy)
    assert [token for token, _, _ in places(path, name)] == ["w2", "r3"]
    write_2 = fence_of(take(store, name, "w2", "write", next_writer))
    assert write_2 > read_2
    info = store.inspect(Kind.RWLOCK, name)
    assert info is not None and info.queued == 1 and info.fence == write_2
    assert [(lease.mode, lease.fence) for lease in info.leases] == [("write", write_2)]


def test_a_break_and_a_leaving_writer_ring_the_readers_it_held_back(
    store: SQLiteFile, name: str
) -> None:
    read = fence_of(take(store, name, "reader", "read"))
    writer = queue(store, name, "writer", "write")
    reader = queue(store, name, "late", "read")
    assert store.break_leases(Kind.RWLOCK, name) is True
    assert [rung(writer), rung(reader)] == [True, False]  # the writer is at the head
    assert store.release(Kind.RWLOCK, name, "writer") is False  # it gives up: only a place
    assert rung(reader)
    late = fence_of(take(store, name, "late", "read", reader))
    assert late > read
    assert store.break_leases(Kind.RWLOCK, name) is True
    assert store.break_leases(Kind.RWLOCK, name) is False
    info = store.inspect(Kind.RWLOCK, name)
    assert info is not None and info.fence == late and not info.leases and info.queued == 0


def test_a_lapsed_place_is_dropped_and_the_waiter_behind_it_rung(
    store: SQLiteFile, path: pathlib.Path, name: str
) -> None:
    read = fence_of(take(store, name, "reader", "read"))
    queue(store, name, "stalled", "write", queue_ttl=0.05)
    behind = queue(store, name, "behind", "read")
    with sqlite3.connect(path) as raw:  # the stalled writer's place lapses
        raw.execute("UPDATE tenure_waiters SET expires_at = 0 WHERE token = 'stalled'")
    # Any attempt on the name drops it, and rings the reader it held back.
    assert isinstance(take(store, name, "other", "write"), Busy)
    assert rung(behind)
    assert [token for token, _, _ in places(path, name)] == ["behind", "other"]
    assert fence_of(take(store, name, "behind", "read", behind)) > read


def test_an_older_files_places_list_an_unknown_waiter_until_the_columns_come(
    path: pathlib.Path, name: str
) -> None:
    url = f"sqlite:///{path}"
    with tenure.connect(url) as locks, locks.rwlock(name, ttl=10).read():
        pass
    with sqlite3.connect(path) as raw:
        # The file as an older tenure left it: places without their waiter, one of them live.
        for column in ("host", "pid", "thread", "placed_at"):
            raw.execute(f"ALTER TABLE tenure_waiters DROP COLUMN {column}")
        raw.execute(
            "INSERT INTO tenure_waiters (kind, name, seq, token, expires_at, wake, mode) "
            "VALUES ('rwlock', ?, 1, 'old-token', 1e12, NULL, 'write')", (name,),
        )
    with tenure.connect(url) as locks:
        info = locks.inspect(name, kind="rwlock")
        assert info is not None and info.queued == 1
        assert [(w.holder, w.since, w.mode) for w in info.waiters] == [(None, None, "write")]
        # A newer tenure's first acquire adds the columns: its own place lists its waiter.
        queue(SQLiteFile(Settings(path)), name, "new-token", "read")
        assert waiter_columns(path)[-4:] == ["host", "pid", "thread", "placed_at"]
        info = locks.inspect(name, kind="rwlock")
        assert info is not None
        assert [(w.holder, w.mode) for w in info.waiters] == [(None, "write"), (HOLDER, "read")]
