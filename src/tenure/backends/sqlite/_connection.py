"""The only code that touches sqlite3 for ``sqlite://``: one database file's connections
(one per thread, as sqlite3 requires, and one per forked child), the schema, statements
retried while another connection holds the write lock, transactions and read snapshots, and
the WAL checkpoints. Shared by both flavours."""

from __future__ import annotations

import contextlib
import os
import random
import sqlite3
import threading
import time
import weakref
from collections.abc import Iterator
from typing import Any

from tenure._errors import ConfigurationError
from tenure.backends.sqlite import _lock_sql as lock_sql
from tenure.backends.sqlite import _rwlock_sql as rwlock_sql
from tenure.backends.sqlite import _semaphore_sql as semaphore_sql
from tenure.backends.sqlite._clock import NOW, register_clock
from tenure.backends.sqlite._config import Settings, display
from tenure.backends.sqlite._errors import busy

__all__ = ["CONTENDED_FOR", "WAL_SIZE_LIMIT", "Database"]

CHECKPOINT_EVERY = 1000
"""WAL frames (pages) between two checkpoints of the file, whoever wrote them: about SQLite's
own default of 1000 (a lock write is one frame). Each store checkpoints after its own writes
make its share of that (see ``_Cadence``), give or take a random quarter, so that processes
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
holds it for tens of microseconds); past that it is PASSIVE, and the next one tries again.
The wait doubles with every further RESTART_FRAMES the WAL holds (20 ms at 1,000 frames,
40 ms at 2,000, ... at most RESTART_WAIT_MOST_MS from 7,000 on): a WAL that large means the
restarts before this one all gave up. On a loaded machine a reader or writer that lost its
core keeps its snapshot or the write lock for longer than a short wait: a wait growing by
20 ms per 1,000 frames still let the WAL reach 33 MB and 36 MB (past twice
``WAL_SIZE_LIMIT``) in two loaded full runs. Doubling reaches a wait no descheduled reader
outlasts before the WAL has doubled, and only the store that finds the WAL that far over pays
it (its release returns that much later; the other processes' writes wait as long)."""

RESTART_WAIT_MOST_MS = 1000
"""The longest a RESTART checkpoint waits, however large the WAL (see RESTART_WAIT_MS)."""

WAL_SIZE_LIMIT = 16 * 1024 * 1024
"""Bytes the WAL file is truncated to when it starts over (``journal_size_limit``): what one
burst of traffic grew it to is given back."""

CONTENDED_FOR = 1.0
"""Seconds after a try refused in its transaction (a lock's first try, a permit's try) during
which this store's tries skip the one-statement attempt (``_first_try``): under contention
it is mostly refused, and the transaction would have to make the try again."""



def _checkpoint_interval(writes: float = CHECKPOINT_EVERY) -> int:
    return max(FEWEST_WRITES, round(writes * random.uniform(0.75, 1.25)))


def restart_wait_ms(frames: int) -> int:
    """How long a RESTART checkpoint of a WAL of ``frames`` waits (see RESTART_WAIT_MS)."""
    doublings = min(10, max(0, frames // RESTART_FRAMES - 1))
    return min(RESTART_WAIT_MOST_MS, RESTART_WAIT_MS << doublings)


def _restarts(wal: str) -> int | None:
    """A count of the times the WAL file at ``wal`` was started over: the first salt of its
    header (bytes 16-19, big-endian, see SQLite's file format), which the first write after
    each restart increments by one. (The checkpoint sequence number beside it is each
    connection's own count, so it misses restarts made by other connections.) None while the
    file is missing or empty."""
    try:
        with open(wal, "rb") as file:
            header = file.read(20)
    except OSError:
        return None
    return int.from_bytes(header[16:20], "big") if len(header) == 20 else None


class _Cadence:
    """When one store checkpoints next, from what the WAL gained since its last one."""

    def __init__(self, wal: str) -> None:
        self.wal = wal
        # A first checkpoint soon: it tells the store how many others write to the file.
        self.interval = _checkpoint_interval(CHECKPOINT_EVERY / 4)
        self.frames = 0
        """The WAL's frames after this store's last checkpoint."""
        self.restarts: int | None = None
        """The WAL's restart count expected now if no other store started it over since
        this store's last checkpoint (None: not known)."""
        self.copied_all = False
        """This store's last checkpoint copied every frame (see ``checkpoint``)."""

    def checkpoint(self, connection: sqlite3.Connection, writes: int) -> int:
        """Copy the WAL into the database without waiting for anyone; once it holds
        RESTART_FRAMES, also start it over (see there). ``writes``: this store's writes
        since its last checkpoint. Returns how many of its writes to make before the next
        one: its share of CHECKPOINT_EVERY, judged by the frames the WAL gained meanwhile
        (with other processes writing, more than ours)."""
        before = _restarts(self.wal)
        ((_, frames, copied),) = connection.execute(
            "PRAGMA wal_checkpoint(PASSIVE)").fetchall()
        restarted = frames >= RESTART_FRAMES and _restart(
            connection, restart_wait_ms(frames) / 1000)
        after = _restarts(self.wal)
        expected = self.restarts
        if before is None or before != after or expected is None:
            known = False
        elif before == (expected + 1) % 2**32 and self.copied_all:
            # A checkpoint that copied every frame lets the next write start the WAL over
            # (SQLite does, when no reader is on it): every frame since is a gain.
            self.frames, known = 0, True
        else:
            known = before == expected
        if known:
            gained = frames - self.frames
            share = 1.0 if gained <= writes else writes / gained
            self.interval = _checkpoint_interval(CHECKPOINT_EVERY * share)
        else:
            # Another store started the WAL over since this one's last checkpoint, so
            # ``frames`` counts only from then: the WAL gained more, and this store's share
            # is smaller than ``frames`` says. Shrink to that bound, never grow. Reading a
            # restarted WAL's frames as the whole gain made every store of a busy file take
            # itself for the only writer and wait 1,000 writes: the WAL grew past 32 MiB.
            share = 1.0 if frames <= writes else writes / frames
            self.interval = min(self.interval, _checkpoint_interval(CHECKPOINT_EVERY * share))
        self.frames = 0 if restarted else frames
        self.copied_all = not restarted and copied == frames
        # The first write after a restart increments the count (ours: expect one more).
        self.restarts = None if after is None else (after + restarted) % 2**32
        return self.interval


def _restart(connection: sqlite3.Connection, wait: float) -> bool:
    """Start the WAL over (a RESTART checkpoint), trying again for up to ``wait`` seconds
    while a writer or a reader is in the way. The connection's busy timeout stays 0 and the
    tries come in the same fine steps as ``Database.execute``'s, so the checkpoint competes
    for the write lock on the writers' terms: SQLite's own busy handler sleeps 25-100 ms
    between its tries, while every writer tries again within a millisecond. A try that
    finds the lock taken copies what it can (PASSIVE) and changes nothing else. True if it
    started the WAL over."""
    deadline = time.monotonic() + wait
    pause = 0.00005
    while True:
        try:
            ((blocked, _, _),) = connection.execute("PRAGMA wal_checkpoint(RESTART)").fetchall()
        except sqlite3.OperationalError as exc:
            if not busy(exc):
                raise
            blocked = 1
        if not blocked or time.monotonic() >= deadline:
            return not blocked
        time.sleep(pause)
        pause = min(pause * 2, 0.001)


_databases: weakref.WeakSet[Database] = weakref.WeakSet()


def _forget_after_fork() -> None:
    for database in list(_databases):
        database._local = threading.local()
        database._all_mutex = threading.Lock()


os.register_at_fork(after_in_child=_forget_after_fork)


class Database:
    """One database file. Thread-safe: each thread (and each forked child) opens its own
    connection, as sqlite3 requires."""

    def __init__(self, settings: Settings) -> None:
        self.path = settings.path
        self.busy_timeout = settings.busy_timeout
        self.synchronous = settings.synchronous
        self._local = threading.local()
        self._all: list[sqlite3.Connection] = []
        self._all_mutex = threading.Lock()
        self.writes = 0
        """Write operations since the last checkpoint (see ``wrote``)."""
        self._cadence = _Cadence(f"{self.path}-wal")
        self.checkpoint_at = self._cadence.interval
        self.contended_until = 0.0
        """``time.monotonic()`` until which an acquire's first try is made in the queueing
        transaction, not as a statement of its own (see ``Locks.acquire``)."""
        _databases.add(self)
        self._initialise()

    def _initialise(self) -> None:
        try:
            connection = self.connection()
            self.execute(connection, "PRAGMA journal_mode = WAL").fetchone()
            version = self.execute(connection, "PRAGMA user_version").fetchone()[0]
            if version > lock_sql.SCHEMA_VERSION:
                raise ConfigurationError(
                    f"{display(self.path)}: the database was written by a newer tenure "
                    f"(schema {version}); upgrade tenure"
                )
            with self.transaction(connection):
                connection.execute(lock_sql.CREATE_TABLE)
                present = {row[1] for row in connection.execute("PRAGMA table_info(tenure_locks)")}
                for column, kind in lock_sql.VALUE_COLUMNS:
                    if column not in present:
                        connection.execute(f"ALTER TABLE tenure_locks ADD COLUMN {column} {kind}")
                connection.execute(semaphore_sql.CREATE_TABLE)
                present = {row[1] for row in connection.execute(
                    "PRAGMA table_info(tenure_permits)")}
                for column, kind in semaphore_sql.ADDED_COLUMNS:
                    if column not in present:
                        connection.execute(
                            f"ALTER TABLE tenure_permits ADD COLUMN {column} {kind}")
                connection.execute(semaphore_sql.GRANTED_TRIGGER)
                connection.execute(lock_sql.WAITERS_TABLE)
                connection.execute(lock_sql.SWEEP_TABLE)
                if version < 2:
                    self._stamp_old_records(connection)
                connection.execute(f"PRAGMA user_version = {lock_sql.SCHEMA_VERSION}")
        except (sqlite3.Error, OSError) as exc:
            raise ConfigurationError(
                f"{display(self.path)}: cannot use the database: {exc}"
            ) from exc

    @staticmethod
    def _stamp_old_records(connection: sqlite3.Connection) -> None:
        """A file from schema 1: its free rows (and semaphore and read-write lock records)
        say nothing of when they were last used. They count as used now, so the clean-up
        keeps them a full gc_after from the upgrade."""
        connection.execute(f"UPDATE tenure_locks SET expires_at = {NOW} WHERE expires_at IS NULL")
        connection.execute(semaphore_sql.STAMP_OLD)
        if connection.execute(rwlock_sql.TABLE_EXISTS).fetchone() is not None:
            connection.execute(rwlock_sql.STAMP_OLD)

    def connection(self) -> sqlite3.Connection:
        """This thread's connection."""
        try:
            connection: sqlite3.Connection = self._local.connection
        except AttributeError:
            return self._open()
        return connection

    def _open(self) -> sqlite3.Connection:
        """This thread's connection, opened on its first call (and again in a forked child:
        ``_forget_after_fork`` gives every database a fresh thread-local there, so the child
        never touches its parent's connection). No getpid() per call: it is a system call."""
        # timeout=0: SQLite's own busy handler sleeps 1, 2, 5, 10... ms between tries, so a
        # waiter that meets another process's write transaction (tens of us) would lose
        # milliseconds; execute retries in finer steps, up to busy_timeout.
        connection = sqlite3.connect(
            self.path,
            timeout=0,
            isolation_level=None,
            check_same_thread=False,
        )
        register_clock(connection)
        self.execute(connection, f"PRAGMA synchronous = {self.synchronous}")
        # Checkpoints are run by checkpoint_if_due, after a release has rung its waiter:
        # SQLite's automatic one runs inside a commit, and its fsyncs (up to a second on a
        # busy disk) would hold up the ring, and so every waiter queued behind the woken one.
        self.execute(connection, "PRAGMA wal_autocheckpoint = 0")
        self.execute(connection, f"PRAGMA journal_size_limit = {WAL_SIZE_LIMIT}").fetchall()
        self._local.connection = connection
        with self._all_mutex:
            self._all.append(connection)
        return connection

    def execute(
        self, connection: sqlite3.Connection, sql: str, params: Any = ()
    ) -> sqlite3.Cursor:
        """``connection.execute``, retried while another connection holds the write lock
        (only a statement that could not start is retried: it changed nothing)."""
        try:
            return connection.execute(sql, params)
        except sqlite3.OperationalError as exc:
            if not busy(exc):
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
                if not busy(exc) or time.monotonic() >= deadline:
                    raise

    def one_statement(self, sql: str, params: dict[str, Any]) -> list[Any]:
        """The rows of ``sql`` run alone, a write transaction of its own, retried while
        another connection holds the write lock (``execute``). No context manager: the
        uncontended acquire and release are made of these."""
        # fetchall: the statement, and so its transaction, ends here.
        return self.execute(self.connection(), sql, params).fetchall()

    @contextlib.contextmanager
    def transaction(self, connection: sqlite3.Connection) -> Iterator[None]:
        self.execute(connection, "BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            connection.execute("ROLLBACK")
            raise
        connection.execute("COMMIT")

    @contextlib.contextmanager
    def snapshot(self, connection: sqlite3.Connection) -> Iterator[None]:
        """Several reads as one view of the file (a WAL read transaction)."""
        connection.execute("BEGIN")
        try:
            yield
        finally:
            connection.execute("COMMIT")

    @contextlib.contextmanager
    def step(self) -> Iterator[sqlite3.Connection]:
        """One verb's use of this thread's connection, counted as a write."""
        yield self.connection()
        self.wrote()  # (reads count too: a checkpoint with nothing to copy costs little)

    def contended(self) -> None:
        """A try was refused in its transaction: first tries skip their one statement for
        CONTENDED_FOR (see ``Locks.acquire``)."""
        self.contended_until = time.monotonic() + CONTENDED_FOR

    def wrote(self, count: int = 1) -> None:
        """Count write operations; about every CHECKPOINT_EVERY, checkpoint the WAL (see
        ``_open``). Called after a release has rung its waiter, never inside a lease's
        hand-off. Threads may race on the count: a checkpoint more or less is harmless."""
        self.writes += count
        if self.writes >= self.checkpoint_at:
            writes, self.writes = self.writes, 0
            with contextlib.suppress(sqlite3.Error):
                self.checkpoint_at = self._cadence.checkpoint(self.connection(), writes)

    def close(self) -> None:
        with self._all_mutex:
            connections, self._all = self._all, []
        for connection in connections:
            with contextlib.suppress(sqlite3.Error):
                connection.close()
        self._local = threading.local()
