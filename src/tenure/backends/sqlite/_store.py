"""The SQL and the blocking sqlite3 calls behind ``sqlite://``, shared by both flavours.

Each operation is ONE write transaction (``BEGIN IMMEDIATE``, or a single write statement,
which SQLite runs as one): the write lock is taken before anything is read, so two processes
can never both see a lock free. Expiry is judged by SQLite's clock, ``julianday('now')``,
which is the same host clock for every process using the file.

Fences live in the row, which is never deleted: a release clears the token and keeps the
fence, so it only ever grows, across releases and process restarts.
"""

from __future__ import annotations

import contextlib
import datetime
import os
import pathlib
import sqlite3
import threading
from collections.abc import Iterator, Sequence
from typing import Any

from tenure._errors import BackendError, ConfigurationError, limit_mismatch
from tenure._types import Busy, Grant, Holder, LeaseInfo, LockInfo, Renewal
from tenure._waiters import Waiters, permit_key
from tenure.backends.sqlite import _semaphore_sql as semaphore_sql
from tenure.backends.sqlite._clock import NOW

__all__ = ["SQLiteStore"]

SCHEMA_VERSION = 1


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

# Inputs :name :token :ttl :host :pid :thread :value (NULL for a lock). Takes the lock if the
# row is absent, free, expired, or already ours (a retried acquire); bumps the fence unless it
# was already ours, and a retry keeps the value it stored. RETURNING yields the fence when
# granted and no row when held by another token. In an upsert's SET, column names mean the
# old row; excluded.* the proposed one.
ACQUIRE = f"""
INSERT INTO tenure_locks
    (name, fence, token, expires_at, acquired_at, host, pid, thread, value, value_token)
VALUES (:name, 1, :token, {NOW} + :ttl, {NOW}, :host, :pid, :thread, :value, :token)
ON CONFLICT (name) DO UPDATE SET
    fence = CASE WHEN token IS excluded.token THEN fence ELSE fence + 1 END,
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
WHERE token IS NULL OR expires_at <= excluded.acquired_at OR token IS excluded.token
RETURNING fence
"""

# Inputs :name. The holder's remaining lease, to bound a waiter's back-off.
TTL_LEFT = f"SELECT expires_at - {NOW} FROM tenure_locks WHERE name = :name"

FREE = (
    "token = NULL, expires_at = NULL, acquired_at = NULL, host = NULL, pid = NULL, "
    "thread = NULL, value = NULL, value_token = NULL"
)

# Inputs :name :token :value. One row changed = the value of our live lease was replaced.
SET_VALUE = f"""
UPDATE tenure_locks SET value = :value
WHERE name = :name AND token = :token AND value_token = :token AND expires_at > {NOW}
"""

# Inputs :name :token. One row changed = our live lease was released.
RELEASE = f"""
UPDATE tenure_locks SET {FREE}
WHERE name = :name AND token = :token AND expires_at > {NOW}
"""

# Inputs :name :token :ttl. One row changed = our live lease was extended.
EXTEND = f"""
UPDATE tenure_locks SET expires_at = {NOW} + :ttl
WHERE name = :name AND token = :token AND expires_at > {NOW}
"""

OWNED = f"""
SELECT 1 FROM tenure_locks WHERE name = :name AND token = :token AND expires_at > {NOW}
"""

# Inputs :name. One row changed = a live lease was broken.
BREAK = f"UPDATE tenure_locks SET {FREE} WHERE name = :name AND expires_at > {NOW}"

COLUMNS = f"""
SELECT name, fence, expires_at > {NOW}, host, pid, thread, acquired_at, expires_at - {NOW},
       CASE WHEN value_token IS token THEN value END
FROM tenure_locks
"""
INSPECT = COLUMNS + " WHERE name = :name"
# substr() compares the prefix as text: LIKE/GLOB would read % _ * ? in it as patterns.
LIST = COLUMNS + " WHERE substr(name, 1, length(:prefix)) = :prefix ORDER BY name"

_waiters_by_path: dict[str, Waiters] = {}
_waiters_mutex = threading.Lock()


class SQLiteStore:
    """One database file. Thread-safe: each thread (and each forked child) opens its own
    connection, as sqlite3 requires."""

    def __init__(self, path: pathlib.Path, busy_timeout: float, synchronous: str) -> None:
        self.path = path
        self.busy_timeout = busy_timeout
        self.synchronous = synchronous
        key = str(path.resolve()) if path.exists() else str(path.absolute())
        with _waiters_mutex:
            self.waiters = _waiters_by_path.setdefault(key, Waiters())
        self._local = threading.local()
        self._all: list[sqlite3.Connection] = []
        self._all_mutex = threading.Lock()
        self._initialise()

    # ---- connections -----------------------------------------------------------------

    def _initialise(self) -> None:
        try:
            connection = self._connection()
            connection.execute("PRAGMA journal_mode = WAL").fetchone()
            version = connection.execute("PRAGMA user_version").fetchone()[0]
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
                connection.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        except (sqlite3.Error, OSError) as exc:
            raise ConfigurationError(f"cannot use SQLite database {self.path}: {exc}") from exc

    def _connection(self) -> sqlite3.Connection:
        pid = os.getpid()
        if getattr(self._local, "pid", None) != pid:
            # A forked child must not touch its parent's connection: open its own.
            connection = sqlite3.connect(
                self.path,
                timeout=self.busy_timeout,
                isolation_level=None,
                check_same_thread=False,
            )
            connection.execute(f"PRAGMA synchronous = {self.synchronous}")
            self._local.connection = connection
            self._local.pid = pid
            with self._all_mutex:
                self._all.append(connection)
        connection_: sqlite3.Connection = self._local.connection
        return connection_

    @contextlib.contextmanager
    def _transaction(self, connection: sqlite3.Connection) -> Iterator[None]:
        connection.execute("BEGIN IMMEDIATE")
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

    def close(self) -> None:
        with self._all_mutex:
            connections, self._all = self._all, []
        for connection in connections:
            with contextlib.suppress(sqlite3.Error):
                connection.close()
        self._local = threading.local()

    # ---- the atomic steps ----------------------------------------------------------------

    def acquire(
        self, name: str, token: str, ttl: float, holder: Holder, value: str | None = None
    ) -> Grant | Busy:
        params: dict[str, Any] = {
            "name": name, "token": token, "ttl": ttl,
            "host": holder.host, "pid": holder.pid, "thread": holder.thread, "value": value,
        }
        with self._errors() as connection, self._transaction(connection):
            row = connection.execute(ACQUIRE, params).fetchone()
            if row is not None:
                return Grant(int(row[0]))
            left = connection.execute(TTL_LEFT, {"name": name}).fetchone()
        return Busy(None if left is None or left[0] is None else float(left[0]))

    def release(self, name: str, token: str) -> bool:
        with self._errors() as connection:
            released = connection.execute(RELEASE, {"name": name, "token": token}).rowcount == 1
        if released:
            self.waiters.notify(name)
        return released

    def set_value(self, name: str, token: str, value: str) -> bool:
        with self._errors() as connection:
            params = {"name": name, "token": token, "value": value}
            return connection.execute(SET_VALUE, params).rowcount == 1

    def extend(self, name: str, token: str, ttl: float) -> bool:
        with self._errors() as connection:
            params = {"name": name, "token": token, "ttl": ttl}
            return connection.execute(EXTEND, params).rowcount == 1

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
            return connection.execute(OWNED, {"name": name, "token": token}).fetchone() is not None

    def inspect(self, name: str) -> LockInfo | None:
        with self._errors() as connection:
            row = connection.execute(INSPECT, {"name": name}).fetchone()
        return None if row is None else _info(row)

    def list_locks(self, prefix: str) -> list[LockInfo]:
        with self._errors() as connection:
            rows = connection.execute(LIST, {"prefix": prefix}).fetchall()
        return [_info(row) for row in rows]

    def break_lock(self, name: str) -> bool:
        with self._errors() as connection:
            broken = connection.execute(BREAK, {"name": name}).rowcount == 1
        if broken:
            self.waiters.notify(name)
        return broken

    # ---- semaphores: a set of permits per name (SQL in ``_semaphore_sql``) ----------------

    def acquire_permit(
        self, name: str, token: str, ttl: float, holder: Holder, limit: int
    ) -> Grant | Busy:
        sql = semaphore_sql
        with self._errors() as connection, self._transaction(connection):
            granted = connection.execute(
                sql.TAKE_FENCE, {"name": name, "token": token, "limit": limit}
            ).fetchone()
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
                connection.execute(sql.RENEW_OWN, {"name": name, "token": token, "ttl": ttl})
                return Grant(int(mine))
            granted = None
            if live < limit:
                if expired:
                    connection.execute(sql.DROP_EXPIRED, {"name": name})
                granted = connection.execute(
                    sql.GRANT_FENCE, {"name": name, "limit": limit, "live": live}
                ).fetchone()
            if granted is None and live:
                (stored,) = connection.execute(sql.STORED_LIMIT, {"name": name}).fetchone()
                if stored != limit:
                    # Raised inside the transaction: it rolls back, nothing is written.
                    raise limit_mismatch(name, int(stored), limit)
            if granted is None:
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
            rows = connection.execute(
                semaphore_sql.RELEASE, {"name": name, "token": token}
            ).fetchall()
        if rows:
            self.waiters.notify(permit_key(name))
        return any(ours and live for ours, live in rows)

    def extend_permits(self, renewals: Sequence[Renewal]) -> list[bool]:
        with self._errors() as connection, self._transaction(connection):
            return [
                connection.execute(
                    semaphore_sql.EXTEND, {"name": r.name, "token": r.token, "ttl": r.ttl}
                ).rowcount == 1
                for r in renewals
            ]

    def permit_owned(self, name: str, token: str) -> bool:
        with self._errors() as connection:
            params = {"name": name, "token": token}
            return connection.execute(semaphore_sql.OWNED, params).fetchone() is not None

    def inspect_semaphore(self, name: str) -> LockInfo | None:
        with self._errors() as connection, self._snapshot(connection):
            row = connection.execute(semaphore_sql.SEMAPHORE, {"name": name}).fetchone()
            return None if row is None else self._semaphore_info(connection, row)

    def list_semaphores(self, prefix: str) -> list[LockInfo]:
        with self._errors() as connection, self._snapshot(connection):
            rows = connection.execute(semaphore_sql.LIST, {"prefix": prefix}).fetchall()
            return [self._semaphore_info(connection, row) for row in rows]

    def break_semaphore(self, name: str) -> bool:
        with self._errors() as connection:
            rows = connection.execute(semaphore_sql.BREAK, {"name": name}).fetchall()
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
