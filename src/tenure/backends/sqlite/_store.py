"""The blocking store behind ``sqlite://``, shared by both flavours: the narrow verbs, the kind
as data, dispatched to each kind's steps (``_locks``, ``_permits``, ``_queues``) on one file
(``_connection``).

Each operation is ONE write transaction (``BEGIN IMMEDIATE``, or a single write statement,
which SQLite runs as one): the write lock is taken before anything is read, so two processes
can never both see a lock free. Expiry is judged by SQLite's clock, ``julianday('now')``,
which is the same host clock for every process using the file.

Fences live in the row: a release clears the token and keeps the fence. A grant's fence is
max(the stored fence + 1, the host's clock in microseconds) (``_clock.clock_us``, read holding
the write lock: by SQLite itself in the lock's acquire statement), so fences strictly
increase per name while the row lives, and never go back when it is gone: when the clean-up
removed the row of a name idle for ``gc_after``, or the file was lost or replaced, the next
fence starts from the clock, above every fence before.

Clean-up (``gc_after``, a ``connect`` option): a pass, at most once per ``collect_every``
seconds per store and run by a release after it rang its waiter (so never inside a hand-off,
and never a statement more in the acquire/release cycle: a monotonic clock read decides),
looks at the next ``GC_BATCH`` names of each record table after a cursor kept in the file
(``tenure_sweep``, so short-lived processes sweep on where the last pass stopped) and deletes
those idle longer than ``gc_after``, in one write transaction it never waits for. The idle
condition is judged by the DELETE itself, under the write lock: no live lease, no live place
in the queue, the last lease ended ``gc_after`` ago by SQLite's clock.

Waiting is fair: a waiting acquire takes a place in ``tenure_waiters`` (arrival order per name,
a short lease of its own by SQLite's clock, refreshed by each of its attempts), and the
acquire statement grants a free lock only if no live waiter is ahead of the caller; a release
reads the head of the queue in its own statement and rings it (``_doorbell``). The lock row
alone says who holds the lease: the queue only decides who may take a free one.
"""


from __future__ import annotations

import contextlib
import sqlite3
import threading
import time

from tenure._types import Busy, Grant, Holder, Kind, LeaseSpec
from tenure._waiters import Waiters
from tenure.backends._by_kind import ByKind
from tenure.backends.sqlite import _lock_sql as lock_sql
from tenure.backends.sqlite import _rwlock_sql as rwlock_sql
from tenure.backends.sqlite import _semaphore_sql as semaphore_sql
from tenure.backends.sqlite._config import Settings
from tenure.backends.sqlite._connection import Database
from tenure.backends.sqlite._doorbell import Ticket
from tenure.backends.sqlite._locks import Locks
from tenure.backends.sqlite._permits import Permits
from tenure.backends.sqlite._queues import Queues

__all__ = ["SQLiteFile"]

GC_BATCH = 500
"""Names of one record table one clean-up pass looks at (about 0.2 ms of the write lock)."""

COLLECT_EVERY = 10.0
"""Seconds between two clean-up passes of one store (less when gc_after is shorter: half
of it). With GC_BATCH, one busy process sweeps 50 names a second, 4.3 million a day."""


# Read once: an enum member read from its class is slow on Python 3.11 (70 ns), and every
# quick try dispatches on the kind.
_LOCK, _SEMAPHORE = Kind.LOCK, Kind.SEMAPHORE

_waiters_by_path: dict[str, Waiters] = {}
_waiters_mutex = threading.Lock()


class SQLiteFile(ByKind):
    """One database file's leases of every kind, each verb blocking (see ``BlockingStore``).
    Thread-safe. sqlite3's errors leave the verbs as they are: the async shell's base
    translates them (``_errors.DRIVER_ERRORS``)."""

    locks: Locks
    permits: Permits
    queues: Queues

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.path = settings.path
        self.gc_after = settings.gc_after
        """Seconds an idle name's record is kept (None: forever); see ``collect``."""
        self.collect_every = COLLECT_EVERY if self.gc_after is None else min(
            COLLECT_EVERY, self.gc_after / 2)
        self._next_collect = 0.0
        """``time.monotonic()`` at which the next release runs a clean-up pass: the first
        release of a store runs one, so short-lived processes sweep too."""
        path = settings.path
        key = str(path.resolve()) if path.exists() else str(path.absolute())
        with _waiters_mutex:
            self.waiters = _waiters_by_path.setdefault(key, Waiters())
        self.db = Database(settings)
        self.locks = Locks(self.db)
        self.permits = Permits(self.db, self.waiters)
        self.queues = Queues(self.db)

    def close(self) -> None:
        self.db.close()

    # ---- the verbs, the kind as data -------------------------------------------------------

    def quick_try(
        self, name: str, spec: LeaseSpec, token: str, ttl: float, holder: Holder
    ) -> Grant | None:
        """A lock's or a permit's lone grant statement, which writes nothing when refused
        (``Locks.quick_try``, ``Permits.quick_try``); None for a read-write lock, whose
        tries are its attempt's from the first."""
        kind = spec.kind
        if kind is _LOCK:
            return self.locks.quick_try(name, token, ttl, holder, value=spec.value)
        if kind is _SEMAPHORE:
            return self.permits.quick_try(name, token, ttl, holder, spec.limit,
                                          weight=spec.weight)
        return None

    def acquire(
        self, name: str, spec: LeaseSpec, token: str, ttl: float, holder: Holder, *,
        ticket: Ticket | None = None, tried: bool = False,
    ) -> Grant | Busy:
        """``ticket``: the attempt's waiting state (its place in the name's queue), kept by
        the attempt from one try to the next; None for a try that waits for nothing (a
        lock's then takes no place; a queued kind's place is the token's own). ``tried``:
        ``quick_try`` was just refused, its statement is not sent again."""
        if spec.kind is Kind.SEMAPHORE:
            return self.permits.acquire(name, token, ttl, holder, spec.limit,
                                        weight=spec.weight, queue_ttl=spec.queue_ttl,
                                        tried=tried)
        if spec.kind is Kind.RWLOCK:
            assert spec.mode is not None and spec.queue_ttl is not None
            return self.queues.acquire(name, token, ttl, holder, mode=spec.mode.value,
                                       queue_ttl=spec.queue_ttl, ticket=ticket,
                                       fair=spec.fair)
        return self.locks.acquire(name, token, ttl, holder, value=spec.value, ticket=ticket,
                                  tried=tried)

    def leave(self, ticket: Ticket) -> None:
        """A lock's waiting attempt gave up: its place goes (a queued kind's goes with its
        token's ``release``)."""
        self.locks.leave(ticket)

    def release(self, kind: Kind, name: str, token: str) -> bool:
        released = self.steps(kind).release(name, token)  # (ByKind's, a frame fewer)
        if time.monotonic() >= self._next_collect:
            self.collect()
        return released

    def set_value(self, name: str, token: str, value: str) -> bool:
        return self.locks.set_value(name, token, value)

    # ---- clean-up --------------------------------------------------------------------------

    def collect(self) -> None:
        """One clean-up pass (see the module docstring), unless gc_after is None. Run by a
        release once its waiter was rung; never fails the release that ran it: it skips
        when another connection holds the write lock (it does not wait for it) or on any
        SQLite error, and the next pass, ``collect_every`` later, tries again."""
        self._next_collect = time.monotonic() + self.collect_every
        if self.gc_after is None:
            return
        sweeps = [("lock", lock_sql.LOCK_WINDOW, lock_sql.COLLECT_LOCKS),
                  ("semaphore", semaphore_sql.WINDOW, semaphore_sql.COLLECT)]
        with contextlib.suppress(sqlite3.Error):
            connection = self.db.connection()
            connection.execute("BEGIN IMMEDIATE")
            try:
                if connection.execute(rwlock_sql.TABLE_EXISTS).fetchone() is not None:
                    sweeps.append(("rwlock", rwlock_sql.WINDOW, rwlock_sql.COLLECT))
                for kind, window, collect in sweeps:
                    row = connection.execute(lock_sql.SWEEP_AFTER, {"kind": kind}).fetchone()
                    after = "" if row is None else row[0]
                    seen, last = connection.execute(
                        window, {"after": after, "batch": GC_BATCH}).fetchone()
                    params = {"after": after, "last": last, "gc_after": self.gc_after}
                    if last is not None:
                        connection.execute(collect, params)
                    # A short window reached the end of the table: the next pass wraps.
                    connection.execute(lock_sql.SWEEP_MOVE, {
                        "kind": kind, "after": last if seen == GC_BATCH else ""})
                connection.execute(
                    lock_sql.COLLECT_PLACES, {"gc_after": self.gc_after, "batch": GC_BATCH})
            except BaseException:
                connection.execute("ROLLBACK")
                raise
            connection.execute("COMMIT")
