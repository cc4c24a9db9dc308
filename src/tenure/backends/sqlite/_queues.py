"""SQLite's read-write and fair locks: leases with modes, granted in arrival order from the
waiters' queue (SQL in ``_rwlock_sql``), blocking steps for both flavours. A refused attempt
takes (or refreshes) its place in the transaction that refused it; a release, a break or a
dropped place rings every waiter the grant rule now admits (``_doorbell``)."""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterator, Sequence
from typing import Any

from tenure._types import Busy, Grant, Holder, Kind, LockInfo, Renewal
from tenure.backends.sqlite import _lock_sql as lock_sql
from tenure.backends.sqlite import _rwlock_sql as sql
from tenure.backends.sqlite._clock import clock_us
from tenure.backends.sqlite._connection import Database
from tenure.backends.sqlite._doorbell import Ticket, doorbell
from tenure.backends.sqlite._permits import extend_stamped
from tenure.backends.sqlite._records import record

__all__ = ["Queues"]

class Queues:
    """The read-write lock steps on one file."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self._ready = False
        """Whether the file has the read-write lock tables (``exist``)."""
        self._made = False
        """Whether this process made sure of the tables and every column (``_make_tables``)."""
        self._reads: tuple[str, str] | None = None
        """The inspect statements (leases, places) once the file has every column they read."""

    def _make_tables(self) -> None:
        """Made by the first read-write (or fair) lock acquire, not at open: a file used for
        plain locks only (even listed by ``tenure ls``) never gets the lease table nor the
        waiters' place columns. All are additions (IF NOT EXISTS, nullable columns), so the
        schema version stays and an older tenure keeps using the file. The first acquire of
        each process checks the columns, in one step: each one an older tenure's tables lack
        (the places' holders, the fair column of either table) is added then."""
        if self._made:
            return
        with self.db.step() as connection, self.db.transaction(connection):
            connection.execute(sql.CREATE_TABLE)
            for table, columns in sql.ADDED_COLUMNS:
                present = _columns(connection, table)
                for column, kind in columns:
                    if column not in present:
                        connection.execute(f"ALTER TABLE {table} ADD COLUMN {column} {kind}")
        self._made = self._ready = True
        self._reads = (sql.LEASES, sql.PLACES)

    def exist(self) -> bool:
        """Whether the file has the read-write lock tables: without them, no read-write lock
        was ever acquired, and the other steps answer so without making them. (The table and
        the column are made in one transaction: finding the table means both are there.)"""
        if not self._ready:
            with self.db.step() as connection:
                found = self.db.execute(connection, sql.TABLE_EXISTS).fetchone()
            self._ready = found is not None
        return self._ready

    @contextlib.contextmanager
    def _step(self, *, write: bool = True) -> Iterator[tuple[sqlite3.Connection, float]]:
        """One step: a write transaction (or, ``write=False``, a read snapshot) and SQLite's
        clock, read once in it so that all its statements judge expiry at one instant."""
        db = self.db
        with (
            db.step() as connection,
            db.transaction(connection) if write else db.snapshot(connection),
        ):
            (now,) = connection.execute(sql.CLOCK).fetchone()
            yield connection, float(now)

    def acquire(
        self, name: str, token: str, ttl: float, holder: Holder, *, mode: str,
        queue_ttl: float, ticket: Ticket | None, fair: bool = False,
    ) -> Grant | Busy:
        """``ticket``: the attempt's place in the queue (None: a ticket of this try's own,
        whose place the token's release removes). A refused attempt takes (or refreshes) its
        place in the same transaction, so a release can never fall between its refusal and
        its queueing."""
        params: dict[str, Any] = {
            "name": name, "token": token, "ttl": ttl, "mode": mode, "place": queue_ttl,
            "host": holder.host, "pid": holder.pid, "thread": holder.thread,
            "fair": 1 if fair else None,
        }
        to_ring: list[tuple[str, str | None]] = []
        self._make_tables()
        with self._step() as (connection, now):
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
                params["seq"] = lock_sql.NOT_QUEUED if place is None else int(place[0])
                if connection.execute(sql.GRANTABLE, params).fetchone()[0]:
                    (fence,) = connection.execute(sql.NEXT_FENCE, params).fetchone()
                    connection.execute(sql.INSERT_LEASE, {**params, "fence": fence})
                    if place is not None:
                        connection.execute(sql.LEAVE, params)
                    answer = Grant(int(fence))
                else:
                    if ticket is None:
                        ticket = Ticket(Kind.RWLOCK.value, name, token)
                    # Ringable before any releaser can read the place: bound before commit.
                    params["wake"] = doorbell().register(ticket)
                    connection.execute(sql.NEW_PLACE if place is None else sql.KEEP_PLACE,
                                       params).fetchall()
                    (left,) = connection.execute(sql.SOONEST, params).fetchone()
                    answer = Busy(None if left is None else float(left))
            if dropped:
                # A lapsed lease or place may have been all that held a waiter back.
                to_ring = connection.execute(sql.TO_RING, params).fetchall()
        if ticket is not None:
            ticket.placed = isinstance(answer, Busy)
            if not ticket.placed:
                doorbell().unregister(ticket)
        if to_ring:
            self._ring(name, to_ring)
        return answer

    def _ring(self, name: str, rows: list[tuple[str, str | None]]) -> None:
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
            with self._step() as (connection, now):
                for token in dead:
                    connection.execute(sql.LEAVE, {"name": name, "token": token})
                rows = connection.execute(sql.TO_RING, {"name": name, "now": now}).fetchall()

    def release(self, name: str, token: str) -> bool:
        if not self.exist():
            return False
        to_ring: list[tuple[str, str | None]] = []
        with self._step() as (connection, now):
            params = {"name": name, "token": token, "now": now}
            lease = connection.execute(sql.RELEASE, params).fetchone()
            left = connection.execute(sql.LEAVE, params).rowcount
            if lease is not None or left:
                to_ring = connection.execute(sql.TO_RING, params).fetchall()
        if left:
            doorbell().forget(token)
        if to_ring:
            self._ring(name, to_ring)
        return lease is not None and bool(lease[0])

    def extend_many(self, renewals: Sequence[Renewal]) -> list[bool]:
        if not self.exist():
            return [False] * len(renewals)
        return extend_stamped(self.db, sql.EXTEND, sql.STAMP, renewals)

    def owned(self, name: str, token: str) -> bool:
        if not self.exist():
            return False
        with self.db.step() as connection:
            params = {"name": name, "token": token}
            return self.db.execute(connection, sql.OWNED, params).fetchone() is not None

    def inspect(self, name: str) -> LockInfo | None:
        if not self.exist():
            return None
        with self._step(write=False) as (connection, now):
            row = connection.execute(sql.RECORD, {"name": name, "now": now}).fetchone()
            return None if row is None else self._queue_record(connection, row, now)

    def list_records(self, prefix: str) -> list[LockInfo]:
        if not self.exist():
            return []
        with self._step(write=False) as (connection, now):
            rows = connection.execute(sql.LIST, {"prefix": prefix, "now": now}).fetchall()
            return [self._queue_record(connection, row, now) for row in rows]

    def break_leases(self, name: str) -> bool:
        if not self.exist():
            return False
        to_ring: list[tuple[str, str | None]] = []
        with self._step() as (connection, now):
            params = {"name": name, "now": now}
            broken = connection.execute(sql.BREAK, params).fetchall()
            if broken:
                to_ring = connection.execute(sql.TO_RING, params).fetchall()
        if to_ring:
            self._ring(name, to_ring)
        return any(live for (live,) in broken)

    def _statements(self, connection: sqlite3.Connection) -> tuple[str, str]:
        """The inspect statements (leases, places) for this file's columns: a column its
        tables lack (made by an older tenure) read as NULL, and asked again on each read
        until it is there (another process's acquire may add it). A read never alters the
        file."""
        if self._reads is not None:
            return self._reads
        leases = _columns(connection, "tenure_rwlocks")
        places = _columns(connection, "tenure_waiters")
        reads = (sql.leases_read(leases), sql.places_read(places))
        if reads == (sql.LEASES, sql.PLACES):
            self._reads = reads
        return reads

    def _queue_record(
        self, connection: sqlite3.Connection, row: tuple[Any, ...], now: float
    ) -> LockInfo:
        """The record of ``row`` (name, fence, live places), its leases and its waiters
        read in the caller's snapshot."""
        name, fence, queued = row
        params = {"name": name, "now": now}
        leases_read, places_read = self._statements(connection)
        leases = connection.execute(leases_read, params).fetchall()
        places = connection.execute(places_read, params).fetchall()
        return record(Kind.RWLOCK, name, fence, leases, queued=int(queued), places=places)


def _columns(connection: sqlite3.Connection, table: str) -> set[str]:
    return {row[1] for row in connection.execute(f"PRAGMA table_info({table})")}
