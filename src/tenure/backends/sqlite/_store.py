"""The SQL and the blocking sqlite3 calls behind ``sqlite://``, shared by both flavours.

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
import datetime
import os
import pathlib
import random
import sqlite3
import threading
import time
import weakref
from collections.abc import Iterator, Sequence
from typing import Any

from tenure._errors import BackendError, ConfigurationError, limit_mismatch
from tenure._options import DEFAULT_GC_AFTER
from tenure._types import Busy, Grant, Holder, LeaseInfo, LockInfo, Renewal
from tenure._waiters import Waiters, permit_key
from tenure.backends.sqlite import _rwlock_sql as rwlock_sql
from tenure.backends.sqlite import _semaphore_sql as semaphore_sql
from tenure.backends.sqlite._clock import CLOCK_US, NOW, clock_us, register_clock
from tenure.backends.sqlite._doorbell import Ticket, doorbell

__all__ = ["SQLiteStore"]

SCHEMA_VERSION = 2
"""2: records are deleted when idle (``gc_after``) and fences are floored at the clock. A
tenure of schema 1 refuses the file: it would restart a collected name's fences at 1."""


CREATE_TABLE = """
CREATE TABLE IF NOT EXISTS tenure_locks (
    name        TEXT PRIMARY KEY NOT NULL,
    fence       INTEGER NOT NULL,
    token       TEXT,
    expires_at  REAL,
    acquired_at REAL,
    host        TEXT,
    pid         INTEGER,
    thread      TEXT,
    value       TEXT,
    value_token TEXT
) WITHOUT ROWID
"""

# An election leader's value lives in its lease row. ``value_token`` is the token that wrote
# it: a value counts only while that token holds the row, so a tenure from before these
# columns, which neither sets nor clears them, can never make a stale value look current.
# Added to an older file in place (plain nullable columns, the schema version unchanged):
# older tenure processes keep working on the same file.
VALUE_COLUMNS = (("value", "TEXT"), ("value_token", "TEXT"))

# The queue of waiting acquires, per primitive (``kind``: "lock" today; a queued primitive
# such as a fair read-write lock adds its own kind, and a column for its mode, in place). seq
# is the arrival order within (kind, name): max + 1 at arrival. expires_at is the place's own
# lease, by SQLite's clock: a waiter that stops refreshing it (killed, stalled longer than
# PLACE_TTL) stops blocking the waiters behind it. wake is the waiting process's doorbell.
WAITERS_TABLE = """
CREATE TABLE IF NOT EXISTS tenure_waiters (
    kind       TEXT NOT NULL,
    name       TEXT NOT NULL,
    seq        INTEGER NOT NULL,
    token      TEXT NOT NULL UNIQUE,
    expires_at REAL NOT NULL,
    wake       TEXT,
    PRIMARY KEY (kind, name, seq)
) WITHOUT ROWID
"""

# The clean-up's cursor per record table (``kind``: lock, semaphore, rwlock): the last name the
# previous pass looked at, '' to start from the first. Shared by every process of the file.
SWEEP_TABLE = """
CREATE TABLE IF NOT EXISTS tenure_sweep (
    kind  TEXT PRIMARY KEY NOT NULL,
    after TEXT NOT NULL
) WITHOUT ROWID
"""

GC_BATCH = 500
"""Names of one record table one clean-up pass looks at (about 0.2 ms of the write lock)."""

COLLECT_EVERY = 10.0
"""Seconds between two clean-up passes of one store (less when gc_after is shorter: half
of it). With GC_BATCH, one busy process sweeps 50 names a second, 4.3 million a day."""

CHECKPOINT_EVERY = 1000
"""WAL frames (pages) between two checkpoints of the file, whoever wrote them: about SQLite's
own default of 1000 (a lock write is one frame). Each store checkpoints after its own writes
make its share of that (see ``_checkpoint``), give or take a random quarter, so that processes
started together do not checkpoint in lockstep. A checkpoint's fsync grows with the frames it
copies, and while it runs other processes' commits may stall (measured: 20k frames, 50 ms)."""

FEWEST_WRITES = 25
"""The fewest writes of one store between two of its checkpoints, however many others write."""

RESTART_FRAMES = CHECKPOINT_EVERY
"""WAL frames at which a checkpoint also starts the WAL over (RESTART). SQLite starts the WAL
over only after a checkpoint that copied every frame, and under steady traffic from several
processes a PASSIVE one never does: writes land while it copies. The WAL then grew for as
long as the traffic lasted (8 processes contending on one lock: about 55 MB a second). After
the PASSIVE copy, the RESTART has only the last few frames to copy."""

RESTART_WAIT_MS = 20
"""How long a RESTART checkpoint may wait for the write lock and for readers to move on (each
holds it for tens of microseconds); past that it is PASSIVE, and the next one tries again."""

WAL_SIZE_LIMIT = 16 * 1024 * 1024
"""Bytes the WAL file is truncated to when it starts over (``journal_size_limit``): what one
burst of traffic grew it to is given back."""

PLACE_TTL = 2.0
"""Seconds a waiter's place lasts without a refresh. Its attempts refresh it at least every
``max_backoff`` (0.25 s), so only a waiter that died or stalled for seconds loses it."""

CONTENDED_FOR = 1.0
"""Seconds after a try refused in its transaction (a lock's first try, a permit's try) during
which this store's tries skip the one-statement attempt (``_first_try``): under contention
it is mostly refused, and the transaction would have to make the try again."""

NOT_QUEUED = 2**63 - 1
"""The :seq of an acquire that holds no place: every live waiter is ahead of it."""

# Inputs :name :seq. A live waiter arrived before seq: a free lock is theirs, not ours. An
# index seek into an empty range when nobody waits, the uncontended case.
AHEAD = f"""EXISTS (SELECT 1 FROM tenure_waiters AS w
    WHERE w.kind = 'lock' AND w.name = :name AND w.seq < :seq AND w.expires_at > {NOW})"""

# Inputs :name :token :ttl :host :pid :thread :value (NULL for a lock) :seq (the caller's place,
# NOT_QUEUED if none). Takes the lock if the row is absent, or free or expired with no live
# waiter ahead of the caller, or already ours (a retried acquire); the fence becomes
# max(fence + 1, the clock floor) unless the lock was already ours (a retry keeps its fence,
# and the value it stored). The floor is read by SQLite (CLOCK_US), so that the statement can
# be a transaction of its own (the uncontended acquire) and still read it under the write
# lock. RETURNING yields the fence when granted and no row when held by another token (or kept
# for a waiter ahead). In an upsert's SET, column names mean the old row; excluded.* the
# proposed one.
ACQUIRE = f"""
INSERT INTO tenure_locks
    (name, fence, token, expires_at, acquired_at, host, pid, thread, value, value_token)
VALUES (:name, {CLOCK_US}, :token, {NOW} + :ttl, {NOW}, :host, :pid, :thread, :value, :token)
ON CONFLICT (name) DO UPDATE SET
    fence = CASE WHEN token IS excluded.token THEN fence ELSE max(fence + 1, excluded.fence) END,
    acquired_at = CASE WHEN token IS excluded.token THEN acquired_at
                       ELSE excluded.acquired_at END,
    value = CASE WHEN token IS excluded.token AND value_token IS excluded.token THEN value
                 ELSE excluded.value END,
    value_token = excluded.token,
    token = excluded.token,
    expires_at = excluded.expires_at,
    host = excluded.host,
    pid = excluded.pid,
    thread = excluded.thread
WHERE token IS excluded.token
   OR ((token IS NULL OR expires_at <= excluded.acquired_at) AND NOT {AHEAD})
RETURNING fence
"""

# Inputs :name :seq. The holder's remaining lease, to bound a waiter's back-off; NULL when a
# waiter is ahead (the lock's expiry is then theirs to notice: this one waits for its ring).
TTL_LEFT = f"""
SELECT CASE WHEN {AHEAD} THEN NULL ELSE expires_at - {NOW} END
FROM tenure_locks WHERE name = :name
"""

# Inputs :token :place. Refreshes a waiter's place; no row if it lapsed and was dropped.
KEEP_PLACE = f"""
UPDATE tenure_waiters SET expires_at = {NOW} + :place WHERE token = :token RETURNING seq
"""

# Inputs :kind :name :token :place :wake. A place at the back of the queue.
NEW_PLACE = f"""
INSERT INTO tenure_waiters (kind, name, seq, token, expires_at, wake)
SELECT :kind, :name, coalesce(max(seq), 0) + 1, :token, {NOW} + :place, :wake
FROM tenure_waiters WHERE kind = :kind AND name = :name
RETURNING seq
"""

# Inputs :kind :name. Places that lapsed (their waiter died or stalled).
DROP_LAPSED = f"""
DELETE FROM tenure_waiters WHERE kind = :kind AND name = :name AND expires_at <= {NOW}
"""

# Inputs :token.
LEAVE = "DELETE FROM tenure_waiters WHERE token = :token"

# Inputs :name. The lock is free (or was never taken).
LOCK_FREE = f"""
SELECT NOT EXISTS (SELECT 1 FROM tenure_locks
                   WHERE name = :name AND token IS NOT NULL AND expires_at > {NOW})
"""

# Inputs :kind :name. The longest-waiting live waiter: its token and doorbell address.
HEAD = f"""
SELECT token, wake FROM tenure_waiters
WHERE kind = :kind AND name = :name AND expires_at > {NOW} ORDER BY seq LIMIT 1
"""

# The head's token and doorbell, as two columns of a lock statement's RETURNING (:name).
_HEAD_COLUMN = f"""(SELECT w.{{column}} FROM tenure_waiters AS w
    WHERE w.kind = 'lock' AND w.name = :name AND w.expires_at > {NOW} ORDER BY w.seq LIMIT 1)"""
RETURNING_HEAD = (
    f"RETURNING {_HEAD_COLUMN.format(column='token')}, {_HEAD_COLUMN.format(column='wake')}"
)

# A free row's expires_at is when its last lease ended (released or broken: both change only
# a live lease, so now): the clean-up counts gc_after from it.
FREE = (
    f"token = NULL, expires_at = {NOW}, acquired_at = NULL, host = NULL, pid = NULL, "
    "thread = NULL, value = NULL, value_token = NULL"
)

# Inputs :name :token :value. One row changed = the value of our live lease was replaced.
SET_VALUE = f"""
UPDATE tenure_locks SET value = :value
WHERE name = :name AND token = :token AND value_token = :token AND expires_at > {NOW}
"""

# Inputs :name :token. A row = our live lease was released; it names the waiter to ring.
RELEASE = f"""
UPDATE tenure_locks SET {FREE}
WHERE name = :name AND token = :token AND expires_at > {NOW}
{RETURNING_HEAD}
"""

# Inputs :name :token :ttl. One row changed = our live lease was extended.
EXTEND = f"""
UPDATE tenure_locks SET expires_at = {NOW} + :ttl
WHERE name = :name AND token = :token AND expires_at > {NOW}
"""

OWNED = f"""
SELECT 1 FROM tenure_locks WHERE name = :name AND token = :token AND expires_at > {NOW}
"""

# Inputs :name. A row = a live lease was broken; it names the waiter to ring.
BREAK = f"""
UPDATE tenure_locks SET {FREE} WHERE name = :name AND expires_at > {NOW}
{RETURNING_HEAD}
"""

COLUMNS = f"""
SELECT name, fence, expires_at > {NOW}, host, pid, thread, acquired_at, expires_at - {NOW},
       CASE WHEN value_token IS token THEN value END
FROM tenure_locks
"""
INSPECT = COLUMNS + " WHERE name = :name"
# substr() compares the prefix as text: LIKE/GLOB would read % _ * ? in it as patterns.
LIST = COLUMNS + " WHERE substr(name, 1, length(:prefix)) = :prefix ORDER BY name"

# ---- clean-up (``SQLiteStore._collect``) ------------------------------------------------------

# Inputs :kind. The cursor: no row before the first pass.
SWEEP_AFTER = "SELECT after FROM tenure_sweep WHERE kind = :kind"

# Inputs :kind :after.
SWEEP_MOVE = """
INSERT INTO tenure_sweep (kind, after) VALUES (:kind, :after)
ON CONFLICT (kind) DO UPDATE SET after = excluded.after
"""

# Inputs :after :batch. The window of one pass: how many names follow the cursor (up to
# :batch) and the last of them. Fewer than :batch: the sweep reached the end and wraps.
LOCK_WINDOW = """
SELECT count(*), max(name) FROM
    (SELECT name FROM tenure_locks WHERE name > :after ORDER BY name LIMIT :batch)
"""

# Inputs :after :last :gc_after. Deletes the window's idle rows: the last lease ended (or
# was released, or broken) gc_after ago or more, so none is live, and no waiter holds a live
# place. A live place is kept even on a free row: the row's absence would let a newcomer's
# insert take the lock ahead of that waiter.
COLLECT_LOCKS = f"""
DELETE FROM tenure_locks
WHERE name > :after AND name <= :last AND expires_at <= {NOW} - :gc_after
  AND NOT EXISTS (SELECT 1 FROM tenure_waiters AS w
                  WHERE w.kind = 'lock' AND w.name = tenure_locks.name AND w.expires_at > {NOW})
"""

# Inputs :gc_after :batch. Places that lapsed gc_after ago (a waiter that died; a live one
# refreshes its place every 0.25 s). The table holds only waiters, so this scan is short.
COLLECT_PLACES = f"""
DELETE FROM tenure_waiters WHERE token IN
    (SELECT token FROM tenure_waiters WHERE expires_at <= {NOW} - :gc_after LIMIT :batch)
"""

_waiters_by_path: dict[str, Waiters] = {}
_waiters_mutex = threading.Lock()
_stores: weakref.WeakSet[SQLiteStore] = weakref.WeakSet()


def _checkpoint_interval(writes: float = CHECKPOINT_EVERY) -> int:
    return max(FEWEST_WRITES, round(writes * random.uniform(0.75, 1.25)))


def _checkpoint(connection: sqlite3.Connection, writes: int) -> int:
    """Copy the WAL into the database without waiting for anyone; once it holds
    RESTART_FRAMES, also start it over (see there), waiting at most RESTART_WAIT_MS.
    ``writes``: this store's writes since its last checkpoint. Returns how many of its
    writes to make before the next one: its share of CHECKPOINT_EVERY, judged by the
    frames the WAL gained meanwhile (with other processes writing, more than ours)."""
    ((_, frames, _),) = connection.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
    if frames >= RESTART_FRAMES:
        connection.execute(f"PRAGMA busy_timeout = {RESTART_WAIT_MS}")
        try:
            connection.execute("PRAGMA wal_checkpoint(RESTART)").fetchall()
        finally:
            connection.execute("PRAGMA busy_timeout = 0")
    share = 1.0 if frames <= writes else writes / frames
    return _checkpoint_interval(CHECKPOINT_EVERY * share)


def _forget_after_fork() -> None:
    for store in list(_stores):
        store._local = threading.local()
        store._all_mutex = threading.Lock()


os.register_at_fork(after_in_child=_forget_after_fork)


class SQLiteStore:
    """One database file. Thread-safe: each thread (and each forked child) opens its own
    connection, as sqlite3 requires."""

    def __init__(
        self, path: pathlib.Path, busy_timeout: float, synchronous: str,
        gc_after: float | None = DEFAULT_GC_AFTER,
    ) -> None:
        self.path = path
        self.busy_timeout = busy_timeout
        self.synchronous = synchronous
        self.gc_after = gc_after
        """Seconds an idle name's record is kept (None: forever); see ``_collect``."""
        self.collect_every = COLLECT_EVERY if gc_after is None else min(
            COLLECT_EVERY, gc_after / 2)
        self._next_collect = 0.0
        """``time.monotonic()`` at which the next release runs a clean-up pass: the first
        release of a store runs one, so short-lived processes sweep too."""
        key = str(path.resolve()) if path.exists() else str(path.absolute())
        with _waiters_mutex:
            self.waiters = _waiters_by_path.setdefault(key, Waiters())
        self._local = threading.local()
        self._all: list[sqlite3.Connection] = []
        self._all_mutex = threading.Lock()
        self._writes = 0
        # A first checkpoint soon: it tells the store how many others write to the file.
        self._checkpoint_at = _checkpoint_interval(CHECKPOINT_EVERY / 4)
        self._contended_until = 0.0
        """``time.monotonic()`` until which an acquire's first try is made in the queueing
        transaction, not as a statement of its own (see ``acquire``)."""
        self._rwlocks_ready = False
        """Whether the file has the read-write lock tables (``_make_rwlock_tables``)."""
        _stores.add(self)
        self._initialise()

    # ---- connections -----------------------------------------------------------------

    def _initialise(self) -> None:
        try:
            connection = self._connection()
            self._execute(connection, "PRAGMA journal_mode = WAL").fetchone()
            version = self._execute(connection, "PRAGMA user_version").fetchone()[0]
            if version > SCHEMA_VERSION:
                raise ConfigurationError(
                    f"{self.path} was written by a newer tenure (schema {version}); upgrade tenure"
                )
            with self._transaction(connection):
                connection.execute(CREATE_TABLE)
                present = {row[1] for row in connection.execute("PRAGMA table_info(tenure_locks)")}
                for column, kind in VALUE_COLUMNS:
                    if column not in present:
                        connection.execute(f"ALTER TABLE tenure_locks ADD COLUMN {column} {kind}")
                connection.execute(semaphore_sql.CREATE_TABLE)
                connection.execute(semaphore_sql.GRANTED_TRIGGER)
                connection.execute(WAITERS_TABLE)
                connection.execute(SWEEP_TABLE)
                if version < 2:
                    self._stamp_old_records(connection)
                connection.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        except (sqlite3.Error, OSError) as exc:
            raise ConfigurationError(f"cannot use SQLite database {self.path}: {exc}") from exc

    @staticmethod
    def _stamp_old_records(connection: sqlite3.Connection) -> None:
        """A file from schema 1: its free rows (and semaphore and read-write lock records)
        say nothing of when they were last used. They count as used now, so the clean-up
        keeps them a full gc_after from the upgrade."""
        connection.execute(f"UPDATE tenure_locks SET expires_at = {NOW} WHERE expires_at IS NULL")
        connection.execute(semaphore_sql.STAMP_OLD)
        if connection.execute(rwlock_sql.TABLE_EXISTS).fetchone() is not None:
            connection.execute(rwlock_sql.STAMP_OLD)

    def _connection(self) -> sqlite3.Connection:
        try:
            connection: sqlite3.Connection = self._local.connection
        except AttributeError:
            return self._open()
        return connection

    def _open(self) -> sqlite3.Connection:
        """This thread's connection, opened on its first call (and again in a forked child:
        ``_forget_after_fork`` gives every store a fresh thread-local there, so the child
        never touches its parent's connection). No getpid() per call: it is a system call."""
        # timeout=0: SQLite's own busy handler sleeps 1, 2, 5, 10... ms between tries, so a
        # waiter that meets another process's write transaction (tens of us) would lose
        # milliseconds; _execute retries in finer steps, up to busy_timeout.
        connection = sqlite3.connect(
            self.path,
            timeout=0,
            isolation_level=None,
            check_same_thread=False,
        )
        register_clock(connection)
        self._execute(connection, f"PRAGMA synchronous = {self.synchronous}")
        # Checkpoints are run by _checkpoint, after a release has rung its waiter: SQLite's
        # automatic one runs inside a commit, and its fsyncs (up to a second on a busy
        # disk) would hold up the ring, and so every waiter queued behind the woken one.
        self._execute(connection, "PRAGMA wal_autocheckpoint = 0")
        self._execute(connection, f"PRAGMA journal_size_limit = {WAL_SIZE_LIMIT}").fetchall()
        self._local.connection = connection
        with self._all_mutex:
            self._all.append(connection)
        return connection

    def _execute(
        self, connection: sqlite3.Connection, sql: str, params: Any = ()
    ) -> sqlite3.Cursor:
        """``connection.execute``, retried while another connection holds the write lock
        (only a statement that could not start is retried: it changed nothing)."""
        try:
            return connection.execute(sql, params)
        except sqlite3.OperationalError as exc:
            if not _busy(exc):
                raise
        deadline = time.monotonic() + self.busy_timeout
        pause = 0.00005
        while True:
            # Short, growing pauses: write transactions here last tens of microseconds.
            time.sleep(pause)
            pause = min(pause * 2, 0.001)
            try:
                return connection.execute(sql, params)
            except sqlite3.OperationalError as exc:
                if not _busy(exc) or time.monotonic() >= deadline:
                    raise

    @contextlib.contextmanager
    def _transaction(self, connection: sqlite3.Connection) -> Iterator[None]:
        self._execute(connection, "BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            connection.execute("ROLLBACK")
            raise
        connection.execute("COMMIT")

    @contextlib.contextmanager
    def _errors(self) -> Iterator[sqlite3.Connection]:
        try:
            yield self._connection()
        except sqlite3.Error as exc:
            raise BackendError(f"SQLite {self.path}: {exc}") from exc
        self._wrote()  # (reads count too: a checkpoint with nothing to copy costs little)

    def close(self) -> None:
        with self._all_mutex:
            connections, self._all = self._all, []
        for connection in connections:
            with contextlib.suppress(sqlite3.Error):
                connection.close()
        self._local = threading.local()

    # ---- the atomic steps ----------------------------------------------------------------

    def acquire(
        self, name: str, token: str, ttl: float, holder: Holder, value: str | None = None,
        *, ticket: Ticket | None = None,
    ) -> Grant | Busy:
        """``ticket``: the attempt's place in the queue, from the Busy it waited on. A busy
        attempt takes (or keeps) its place in the same transaction, so a release can never
        fall between its refusal and its queueing; the Busy carries the place on."""
        queued = ticket is not None and ticket.placed
        params: dict[str, Any] = {
            "name": name, "token": token, "ttl": ttl, "seq": NOT_QUEUED,
            "host": holder.host, "pid": holder.pid, "thread": holder.thread, "value": value,
        }
        # The hot path, written out: no context managers (each costs a generator).
        if ticket is None and time.monotonic() >= self._contended_until:
            # Likely uncontended: the try is the ACQUIRE statement alone (see _first_try). A
            # refusal is tried again below, in the transaction that also queues the attempt.
            granted = self._first_try(ACQUIRE, params)
            if granted is not None:
                return granted
        connection = self._connection()
        try:
            try:
                connection.execute("BEGIN IMMEDIATE")
            except sqlite3.OperationalError as exc:
                if not _busy(exc):
                    raise
                self._execute(connection, "BEGIN IMMEDIATE")
            try:
                if queued:
                    assert ticket is not None
                    params["seq"] = self._keep_place(connection, ticket)
                row = connection.execute(ACQUIRE, params).fetchone()
                if row is not None:
                    if queued:
                        connection.execute(LEAVE, {"token": token})
                else:
                    if ticket is None:
                        ticket = Ticket("lock", name, token)
                    if not queued:
                        params["seq"] = self._new_place(connection, ticket)
                    left = connection.execute(TTL_LEFT, params).fetchone()
            except BaseException:
                connection.execute("ROLLBACK")
                raise
            connection.execute("COMMIT")
        except sqlite3.Error as exc:
            raise BackendError(f"SQLite {self.path}: {exc}") from exc
        assert ticket is not None or row is not None
        if row is not None:
            if queued:
                assert ticket is not None
                ticket.placed = False
                doorbell().unregister(ticket)
            return Grant(int(row[0]))
        assert ticket is not None
        if not queued:  # a first try refused: the name is contended (see CONTENDED_FOR)
            self._contended_until = time.monotonic() + CONTENDED_FOR
        ticket.placed = True
        return Busy(None if left is None or left[0] is None else float(left[0]), ticket)

    def _first_try(self, grant: str, params: dict[str, Any]) -> Grant | None:
        """The ``grant`` statement alone, a transaction of its own (SQLite takes the write lock
        before it reads anything): two statements fewer than BEGIN IMMEDIATE ... COMMIT, for
        an acquire that is likely to be granted. Its RETURNING row is the fence; None when it
        was refused, having written nothing. The caller then decides in a transaction, and a
        refusal there makes this store's first tries go there directly for CONTENDED_FOR."""
        rows = self._one_statement(grant, params)
        return Grant(int(rows[0][0])) if rows else None

    def _one_statement(self, sql: str, params: dict[str, Any]) -> list[Any]:
        """The rows of ``sql`` run alone, a write transaction of its own, retried while another
        connection holds the write lock (``_execute``). No context manager: the uncontended
        acquire and release are made of these."""
        try:
            # fetchall: the statement, and so its transaction, ends here.
            return self._execute(self._connection(), sql, params).fetchall()
        except sqlite3.Error as exc:
            raise BackendError(f"SQLite {self.path}: {exc}") from exc

    def _keep_place(self, connection: sqlite3.Connection, ticket: Ticket) -> int:
        """Refresh ``ticket``'s place, or take a new one at the back if it lapsed."""
        row = connection.execute(
            KEEP_PLACE, {"token": ticket.token, "place": PLACE_TTL}
        ).fetchone()
        return int(row[0]) if row is not None else self._new_place(connection, ticket)

    @staticmethod
    def _new_place(connection: sqlite3.Connection, ticket: Ticket) -> int:
        """A place at the back of ``ticket``'s queue (dropping the lapsed ones), ringable
        before any releaser can read it: the doorbell is bound before the commit."""
        where = {"kind": ticket.kind, "name": ticket.name}
        connection.execute(DROP_LAPSED, where)
        (seq,) = connection.execute(NEW_PLACE, {
            **where, "token": ticket.token, "place": PLACE_TTL,
            "wake": doorbell().register(ticket),
        }).fetchone()
        return int(seq)

    def leave(self, ticket: Ticket) -> None:
        """The waiting attempt ``ticket`` gave up: drop its place; if the lock is free, ring
        the next waiter (a ring meant for this one may have been spent on it)."""
        head = None
        params = {"kind": ticket.kind, "name": ticket.name}
        with self._errors() as connection, self._transaction(connection):
            connection.execute(LEAVE, {"token": ticket.token})
            if connection.execute(LOCK_FREE, params).fetchone()[0]:
                head = connection.execute(HEAD, params).fetchone()
        ticket.placed = False
        doorbell().unregister(ticket)
        if head is not None:
            self._ring(ticket.kind, ticket.name, head[0], head[1])

    def _ring(self, kind: str, name: str, token: str, wake: str | None) -> None:
        """Wake the waiter at the head of the queue. One whose process is gone loses its
        place, and the next one is rung (a few at most: the rest back off)."""
        bell = doorbell()
        params = {"kind": kind, "name": name}
        for _ in range(8):
            if bell.ring(token, wake):
                return
            head = None
            with self._errors() as connection, self._transaction(connection):
                connection.execute(LEAVE, {"token": token})
                if connection.execute(LOCK_FREE, params).fetchone()[0]:
                    head = connection.execute(HEAD, params).fetchone()
            if head is None:
                return
            token, wake = head

    def release(self, name: str, token: str) -> bool:
        rows = self._one_statement(RELEASE, {"name": name, "token": token})
        # This release and (most often) the acquire it ends; checkpoint after the ring.
        self._writes += 2
        if not rows:
            return False
        head, wake = rows[0]
        if head is not None:
            self._ring("lock", name, head, wake)
        if self._writes >= self._checkpoint_at:
            self._wrote(0)
        if time.monotonic() >= self._next_collect:
            self._collect()
        return True

    def _collect(self) -> None:
        """One clean-up pass (see the module docstring), unless gc_after is None. Run by a
        release once its waiter was rung; never fails the release that ran it: it skips
        when another connection holds the write lock (it does not wait for it) or on any
        SQLite error, and the next pass, ``collect_every`` later, tries again."""
        self._next_collect = time.monotonic() + self.collect_every
        if self.gc_after is None:
            return
        sweeps = [("lock", LOCK_WINDOW, COLLECT_LOCKS),
                  ("semaphore", semaphore_sql.WINDOW, semaphore_sql.COLLECT)]
        with contextlib.suppress(sqlite3.Error):
            connection = self._connection()
            connection.execute("BEGIN IMMEDIATE")
            try:
                if connection.execute(rwlock_sql.TABLE_EXISTS).fetchone() is not None:
                    sweeps.append(("rwlock", rwlock_sql.WINDOW, rwlock_sql.COLLECT))
                for kind, window, collect in sweeps:
                    row = connection.execute(SWEEP_AFTER, {"kind": kind}).fetchone()
                    after = "" if row is None else row[0]
                    seen, last = connection.execute(
                        window, {"after": after, "batch": GC_BATCH}).fetchone()
                    params = {"after": after, "last": last, "gc_after": self.gc_after}
                    if last is not None:
                        connection.execute(collect, params)
                    # A short window reached the end of the table: the next pass wraps.
                    connection.execute(SWEEP_MOVE, {
                        "kind": kind, "after": last if seen == GC_BATCH else ""})
                connection.execute(
                    COLLECT_PLACES, {"gc_after": self.gc_after, "batch": GC_BATCH})
            except BaseException:
                connection.execute("ROLLBACK")
                raise
            connection.execute("COMMIT")

    def _wrote(self, count: int = 1) -> None:
        """Count write operations; about every CHECKPOINT_EVERY, checkpoint the WAL (see
        ``_open``). Called after a release has rung its waiter, never inside a lease's
        hand-off. Threads may race on the count: a checkpoint more or less is harmless."""
        self._writes += count
        if self._writes >= self._checkpoint_at:
            writes, self._writes = self._writes, 0
            with contextlib.suppress(sqlite3.Error):
                self._checkpoint_at = _checkpoint(self._connection(), writes)

    def set_value(self, name: str, token: str, value: str) -> bool:
        with self._errors() as connection:
            params = {"name": name, "token": token, "value": value}
            return self._execute(connection, SET_VALUE, params).rowcount == 1

    def extend(self, name: str, token: str, ttl: float) -> bool:
        with self._errors() as connection:
            params = {"name": name, "token": token, "ttl": ttl}
            return self._execute(connection, EXTEND, params).rowcount == 1

    def extend_many(self, renewals: Sequence[Renewal]) -> list[bool]:
        with self._errors() as connection, self._transaction(connection):
            return [
                connection.execute(
                    EXTEND, {"name": r.name, "token": r.token, "ttl": r.ttl}
                ).rowcount == 1
                for r in renewals
            ]

    def owned(self, name: str, token: str) -> bool:
        with self._errors() as connection:
            params = {"name": name, "token": token}
            return self._execute(connection, OWNED, params).fetchone() is not None

    def inspect(self, name: str) -> LockInfo | None:
        with self._errors() as connection:
            row = self._execute(connection, INSPECT, {"name": name}).fetchone()
        return None if row is None else _info(row)

    def list_locks(self, prefix: str) -> list[LockInfo]:
        with self._errors() as connection:
            rows = self._execute(connection, LIST, {"prefix": prefix}).fetchall()
        return [_info(row) for row in rows]

    def break_lock(self, name: str) -> bool:
        with self._errors() as connection:
            rows = self._execute(connection, BREAK, {"name": name}).fetchall()
        if not rows:
            return False
        head, wake = rows[0]
        if head is not None:
            self._ring("lock", name, head, wake)
        return True

    # ---- semaphores: a set of permits per name (SQL in ``_semaphore_sql``) ----------------

    def acquire_permit(
        self, name: str, token: str, ttl: float, holder: Holder, limit: int
    ) -> Grant | Busy:
        sql = semaphore_sql
        if time.monotonic() >= self._contended_until:
            first = self._first_try(sql.GRANT, {
                "name": name, "token": token, "limit": limit, "ttl": ttl,
                "host": holder.host, "pid": holder.pid, "thread": holder.thread,
            })
            if first is not None:
                self._writes += 1  # (the release counts its own, and checkpoints when due)
                return first
        with self._errors() as connection, self._transaction(connection):
            params = {"name": name, "token": token, "limit": limit, "ttl": ttl,
                      "floor": clock_us()}
            granted = connection.execute(sql.TAKE_FENCE, params).fetchone()
            if granted is not None:
                self._insert_permit(
                    connection, name, token, fence=int(granted[0]), ttl=ttl, holder=holder
                )
                return Grant(int(granted[0]))
            # The rarer cases: first use of the name, a retry, busy, another limit.
            live, soonest, mine, expired = connection.execute(
                sql.ACQUIRE_STATE, {"name": name, "token": token}
            ).fetchone()
            if mine is not None:
                connection.execute(sql.RENEW_OWN, params)
                connection.execute(sql.STAMP, params)
                return Grant(int(mine))
            granted = None
            if live < limit:
                if expired:
                    connection.execute(sql.DROP_EXPIRED, {"name": name})
                granted = connection.execute(sql.GRANT_FENCE, {**params, "live": live}).fetchone()
            if granted is None and live:
                (stored,) = connection.execute(sql.STORED_LIMIT, {"name": name}).fetchone()
                if stored != limit:
                    # Raised inside the transaction: it rolls back, nothing is written.
                    raise limit_mismatch(name, int(stored), limit)
            if granted is None:
                self._contended_until = time.monotonic() + CONTENDED_FOR
                return Busy(float(soonest))
            fence = int(granted[0])
            self._insert_permit(connection, name, token, fence=fence, ttl=ttl, holder=holder)
        return Grant(fence)

    @staticmethod
    def _insert_permit(
        connection: sqlite3.Connection, name: str, token: str, *, fence: int, ttl: float,
        holder: Holder,
    ) -> None:
        connection.execute(semaphore_sql.INSERT_PERMIT, {
            "name": name, "token": token, "fence": fence, "ttl": ttl,
            "host": holder.host, "pid": holder.pid, "thread": holder.thread,
        })

    def release_permit(self, name: str, token: str) -> bool:
        with self._errors() as connection:
            rows = self._execute(
                connection, semaphore_sql.RELEASE, {"name": name, "token": token}
            ).fetchall()
        if rows:
            self.waiters.notify(permit_key(name))
        if time.monotonic() >= self._next_collect:
            self._collect()
        return any(ours and live for ours, live in rows)

    def extend_permits(self, renewals: Sequence[Renewal]) -> list[bool]:
        return self._extend_stamped(semaphore_sql.EXTEND, semaphore_sql.STAMP, renewals)

    def _extend_stamped(self, extend: str, stamp: str, renewals: Sequence[Renewal]) -> list[bool]:
        """Renew leases kept apart from their name's record (permits, read-write leases);
        each renewed lease keeps its record in use until its new end (``stamp``)."""
        extended = []
        with self._errors() as connection, self._transaction(connection):
            for r in renewals:
                params = {"name": r.name, "token": r.token, "ttl": r.ttl}
                done = connection.execute(extend, params).rowcount == 1
                if done:
                    connection.execute(stamp, params)
                extended.append(done)
        return extended

    def permit_owned(self, name: str, token: str) -> bool:
        with self._errors() as connection:
            params = {"name": name, "token": token}
            return self._execute(connection, semaphore_sql.OWNED, params).fetchone() is not None

    def inspect_semaphore(self, name: str) -> LockInfo | None:
        with self._errors() as connection, self._snapshot(connection):
            row = self._execute(connection, semaphore_sql.SEMAPHORE, {"name": name}).fetchone()
            return None if row is None else self._semaphore_info(connection, row)

    def list_semaphores(self, prefix: str) -> list[LockInfo]:
        with self._errors() as connection, self._snapshot(connection):
            rows = self._execute(connection, semaphore_sql.LIST, {"prefix": prefix}).fetchall()
            return [self._semaphore_info(connection, row) for row in rows]

    def break_semaphore(self, name: str) -> bool:
        with self._errors() as connection:
            rows = self._execute(connection, semaphore_sql.BREAK, {"name": name}).fetchall()
        if rows:
            self.waiters.notify(permit_key(name))
        return any(live for (live,) in rows)

    @contextlib.contextmanager
    def _snapshot(self, connection: sqlite3.Connection) -> Iterator[None]:
        """Several reads as one view of the file (a WAL read transaction)."""
        connection.execute("BEGIN")
        try:
            yield
        finally:
            connection.execute("COMMIT")

    @staticmethod
    def _semaphore_info(connection: sqlite3.Connection, row: tuple[Any, ...]) -> LockInfo:
        name, fence, limit = row
        leases = tuple(
            LeaseInfo(
                Holder(host, int(pid), thread),
                datetime.datetime.fromtimestamp(acquired_at, datetime.UTC),
                float(ttl_left),
                int(permit_fence),
            )
            for host, pid, thread, acquired_at, ttl_left, permit_fence in connection.execute(
                semaphore_sql.PERMITS, {"name": name}
            )
        )
        return LockInfo(
            name, int(fence), None, None, None, kind="semaphore", limit=int(limit), leases=leases
        )


    # ---- read-write and fair locks: leases with modes (SQL in ``_rwlock_sql``) -------------

    def _make_rwlock_tables(self) -> None:
        """Made by the first read-write (or fair) lock acquire, not at open: a file used for
        plain locks only (even listed by ``tenure ls``) never gets the lease table nor the
        waiters' mode column. Both are additions (IF NOT EXISTS, a nullable column), so the
        schema version stays and an older tenure keeps using the file."""
        if self._rwlocks_ready:
            return
        with self._errors() as connection, self._transaction(connection):
            connection.execute(rwlock_sql.CREATE_TABLE)
            present = {row[1] for row in connection.execute("PRAGMA table_info(tenure_waiters)")}
            column, kind = rwlock_sql.MODE_COLUMN
            if column not in present:
                connection.execute(f"ALTER TABLE tenure_waiters ADD COLUMN {column} {kind}")
        self._rwlocks_ready = True

    def _has_rwlocks(self) -> bool:
        """Whether the file has the read-write lock tables: without them, no read-write lock
        was ever acquired, and the other steps answer so without making them. (The table and
        the column are made in one transaction: finding the table means both are there.)"""
        if not self._rwlocks_ready:
            with self._errors() as connection:
                found = self._execute(connection, rwlock_sql.TABLE_EXISTS).fetchone()
            self._rwlocks_ready = found is not None
        return self._rwlocks_ready

    @contextlib.contextmanager
    def _rwlock_step(self, *, write: bool = True) -> Iterator[tuple[sqlite3.Connection, float]]:
        """One step: a write transaction (or, ``write=False``, a read snapshot) and SQLite's
        clock, read once in it so that all its statements judge expiry at one instant."""
        with (
            self._errors() as connection,
            self._transaction(connection) if write else self._snapshot(connection),
        ):
            (now,) = connection.execute(rwlock_sql.CLOCK).fetchone()
            yield connection, float(now)

    def acquire_queued(
        self, name: str, token: str, ttl: float, holder: Holder, *, mode: str,
        queue_ttl: float, ticket: Ticket | None = None,
    ) -> Grant | Busy:
        """``ticket``: the attempt's waiting state, from the Busy it waited on. A refused
        attempt takes (or refreshes) its place in the same transaction, so a release can
        never fall between its refusal and its queueing."""
        sql = rwlock_sql
        params: dict[str, Any] = {
            "name": name, "token": token, "ttl": ttl, "mode": mode, "place": queue_ttl,
            "host": holder.host, "pid": holder.pid, "thread": holder.thread,
        }
        to_ring: list[tuple[str, str | None]] = []
        self._make_rwlock_tables()
        with self._rwlock_step() as (connection, now):
            params["now"] = now
            params["floor"] = clock_us()
            dropped = connection.execute(sql.DROP_EXPIRED, params).rowcount
            dropped += connection.execute(sql.DROP_LAPSED, params).rowcount
            mine = connection.execute(sql.RENEW_OWN, params).fetchone()
            answer: Grant | Busy
            if mine is not None:
                connection.execute(sql.STAMP, params)
                answer = Grant(int(mine[0]))
            else:
                place = connection.execute(sql.PLACE, params).fetchone()
                params["seq"] = NOT_QUEUED if place is None else int(place[0])
                if connection.execute(sql.GRANTABLE, params).fetchone()[0]:
                    (fence,) = connection.execute(sql.NEXT_FENCE, params).fetchone()
                    connection.execute(sql.INSERT_LEASE, {**params, "fence": fence})
                    if place is not None:
                        connection.execute(sql.LEAVE, params)
                    answer = Grant(int(fence))
                else:
                    if ticket is None:
                        ticket = Ticket("rwlock", name, token)
                    # Ringable before any releaser can read the place: bound before commit.
                    params["wake"] = doorbell().register(ticket)
                    connection.execute(sql.NEW_PLACE if place is None else sql.KEEP_PLACE,
                                       params).fetchall()
                    (left,) = connection.execute(sql.SOONEST, params).fetchone()
                    answer = Busy(None if left is None else float(left), ticket)
            if dropped:
                # A lapsed lease or place may have been all that held a waiter back.
                to_ring = connection.execute(sql.TO_RING, params).fetchall()
        if ticket is not None:
            ticket.placed = isinstance(answer, Busy)
            if not ticket.placed:
                doorbell().unregister(ticket)
        if to_ring:
            self._ring_queued(name, to_ring)
        return answer

    def _ring_queued(self, name: str, rows: list[tuple[str, str | None]]) -> None:
        """Wake the waiters the grant rule admits now (``TO_RING``: after a write, every
        reader before the first queued writer). One whose process is gone loses its place,
        and the admitted set is read again: a dead writer at the head held readers back."""
        bell = doorbell()
        rung: set[str] = set()
        for _ in range(8):
            dead = []
            for token, wake in rows:
                if token not in rung:
                    rung.add(token)
                    if not bell.ring(token, wake):
                        dead.append(token)
            if not dead:
                return
            with self._rwlock_step() as (connection, now):
                for token in dead:
                    connection.execute(rwlock_sql.LEAVE, {"name": name, "token": token})
                rows = connection.execute(
                    rwlock_sql.TO_RING, {"name": name, "now": now}
                ).fetchall()

    def release_queued(self, name: str, token: str) -> bool:
        if not self._has_rwlocks():
            return False
        sql = rwlock_sql
        to_ring: list[tuple[str, str | None]] = []
        with self._rwlock_step() as (connection, now):
            params = {"name": name, "token": token, "now": now}
            lease = connection.execute(sql.RELEASE, params).fetchone()
            left = connection.execute(sql.LEAVE, params).rowcount
            if lease is not None or left:
                to_ring = connection.execute(sql.TO_RING, params).fetchall()
        if left:
            doorbell().forget(token)
        if to_ring:
            self._ring_queued(name, to_ring)
        if time.monotonic() >= self._next_collect:
            self._collect()
        return lease is not None and bool(lease[0])

    def extend_queued(self, renewals: Sequence[Renewal]) -> list[bool]:
        if not self._has_rwlocks():
            return [False] * len(renewals)
        return self._extend_stamped(rwlock_sql.EXTEND, rwlock_sql.STAMP, renewals)

    def queued_owned(self, name: str, token: str) -> bool:
        if not self._has_rwlocks():
            return False
        with self._errors() as connection:
            params = {"name": name, "token": token}
            return self._execute(connection, rwlock_sql.OWNED, params).fetchone() is not None

    def inspect_queue(self, name: str) -> LockInfo | None:
        if not self._has_rwlocks():
            return None
        with self._rwlock_step(write=False) as (connection, now):
            params = {"name": name, "now": now}
            row = connection.execute(rwlock_sql.RECORD, params).fetchone()
            return None if row is None else _queue_info(connection, row, now)

    def list_queues(self, prefix: str) -> list[LockInfo]:
        if not self._has_rwlocks():
            return []
        with self._rwlock_step(write=False) as (connection, now):
            rows = connection.execute(rwlock_sql.LIST, {"prefix": prefix, "now": now}).fetchall()
            return [_queue_info(connection, row, now) for row in rows]

    def break_queue(self, name: str) -> bool:
        if not self._has_rwlocks():
            return False
        to_ring: list[tuple[str, str | None]] = []
        with self._rwlock_step() as (connection, now):
            params = {"name": name, "now": now}
            broken = connection.execute(rwlock_sql.BREAK, params).fetchall()
            if broken:
                to_ring = connection.execute(rwlock_sql.TO_RING, params).fetchall()
        if to_ring:
            self._ring_queued(name, to_ring)
        return any(live for (live,) in broken)


def _queue_info(connection: sqlite3.Connection, row: tuple[Any, ...], now: float) -> LockInfo:
    name, fence, queued = row
    leases = tuple(
        LeaseInfo(
            Holder(host, int(pid), thread),
            datetime.datetime.fromtimestamp(acquired_at, datetime.UTC),
            float(ttl_left),
            int(lease_fence),
            mode,
        )
        for mode, host, pid, thread, acquired_at, ttl_left, lease_fence in connection.execute(
            rwlock_sql.LEASES, {"name": name, "now": now}
        )
    )
    return LockInfo(
        name, int(fence), None, None, None, kind="rwlock", leases=leases, queued=int(queued)
    )


def _busy(error: sqlite3.OperationalError) -> bool:
    """Another connection holds the lock the statement needed: it did not start."""
    return error.sqlite_errorcode & 0xFF == sqlite3.SQLITE_BUSY


def _info(row: tuple[Any, ...]) -> LockInfo:
    name, fence, live, host, pid, thread, acquired_at, ttl_left, value = row
    if not live:
        return LockInfo(name, int(fence), None, None, None)
    return LockInfo(
        name,
        int(fence),
        Holder(host, int(pid), thread),
        datetime.datetime.fromtimestamp(acquired_at, datetime.UTC),
        float(ttl_left),
        value=value,
    )
