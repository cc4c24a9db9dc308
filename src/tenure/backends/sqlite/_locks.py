"""SQLite's plain locks (and elections: a lock whose lease carries a value), blocking steps
for both flavours. SQL in ``_lock_sql``; the design in ``_store``.

Waiting is fair: a waiting acquire holds a ``Ticket`` (its attempt's) and takes a place in
``tenure_waiters`` in the transaction that refused it, so a release can never fall between
its refusal and its queueing; the acquire statement grants a free lock only if no live
waiter is ahead of the caller, and a release reads the head of the queue in its own
statement and rings it (``_doorbell``)."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Sequence
from typing import Any

from tenure._types import Busy, Grant, Holder, Kind, LockInfo, Renewal
from tenure.backends.sqlite import _lock_sql as sql
from tenure.backends.sqlite._connection import Database
from tenure.backends.sqlite._doorbell import Ticket, doorbell
from tenure.backends.sqlite._errors import busy
from tenure.backends.sqlite._records import record

__all__ = ["Locks"]


class Locks:
    """The lock steps on one file."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def quick_try(
        self, name: str, token: str, ttl: float, holder: Holder, *, value: str | None
    ) -> Grant | None:
        """The ACQUIRE statement alone (``first_try``), unless this file was found contended
        lately (``CONTENDED_FOR``); None: not granted, nothing written (the attempt's first
        try, told ``tried``, decides in the queueing transaction)."""
        db = self.db
        if time.monotonic() < db.contended_until:
            return None
        return first_try(db, sql.ACQUIRE, _params(name, token, ttl, holder, value))

    def acquire(
        self, name: str, token: str, ttl: float, holder: Holder, *, value: str | None,
        ticket: Ticket | None, tried: bool = False,
    ) -> Grant | Busy:
        """``ticket``: the attempt's place in the queue (None: a try that queues nothing).
        A refused attempt takes (or keeps) its place in the same transaction. ``tried``: the
        lone ACQUIRE statement was just refused (``quick_try``): not sent again."""
        queued = ticket is not None and ticket.placed
        params = _params(name, token, ttl, holder, value)
        db = self.db
        # The hot path, written out: no context managers (each costs a generator).
        if not queued and not tried and time.monotonic() >= db.contended_until:
            # Likely uncontended: the try is the ACQUIRE statement alone (see first_try). A
            # refusal is tried again below, in the transaction that also queues the attempt.
            granted = first_try(db, sql.ACQUIRE, params)
            if granted is not None:
                return granted
        connection = db.connection()
        try:
            connection.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as exc:
            if not busy(exc):
                raise
            db.execute(connection, "BEGIN IMMEDIATE")
        try:
            if queued:
                assert ticket is not None
                params["seq"] = self._keep_place(connection, ticket)
            row = connection.execute(sql.ACQUIRE, params).fetchone()
            if row is not None:
                if queued:
                    connection.execute(sql.LEAVE, {"token": token})
            else:
                if ticket is not None and not queued:
                    params["seq"] = self._new_place(connection, ticket)
                left = connection.execute(sql.TTL_LEFT, params).fetchone()
        except BaseException:
            connection.execute("ROLLBACK")
            raise
        connection.execute("COMMIT")
        if row is not None:
            if queued:
                assert ticket is not None
                ticket.placed = False
                doorbell().unregister(ticket)
            return Grant(int(row[0]))
        if not queued:  # a first try refused: the name is contended (see CONTENDED_FOR)
            db.contended()
        if ticket is not None:
            ticket.placed = True
        return Busy(None if left is None or left[0] is None else float(left[0]))

    def _keep_place(self, connection: sqlite3.Connection, ticket: Ticket) -> int:
        """Refresh ``ticket``'s place, or take a new one at the back if it lapsed."""
        row = connection.execute(
            sql.KEEP_PLACE, {"token": ticket.token, "place": sql.PLACE_TTL}
        ).fetchone()
        return int(row[0]) if row is not None else self._new_place(connection, ticket)

    @staticmethod
    def _new_place(connection: sqlite3.Connection, ticket: Ticket) -> int:
        """A place at the back of ``ticket``'s queue (dropping the lapsed ones), ringable
        before any releaser can read it: the doorbell is bound before the commit."""
        where = {"kind": ticket.kind, "name": ticket.name}
        connection.execute(sql.DROP_LAPSED, where)
        (seq,) = connection.execute(sql.NEW_PLACE, {
            **where, "token": ticket.token, "place": sql.PLACE_TTL,
            "wake": doorbell().register(ticket),
        }).fetchone()
        return int(seq)

    def leave(self, ticket: Ticket) -> None:
        """The waiting attempt ``ticket`` gave up: drop its place; if the lock is free, ring
        the next waiter (a ring meant for this one may have been spent on it)."""
        head = None
        params = {"kind": ticket.kind, "name": ticket.name}
        with self.db.step() as connection, self.db.transaction(connection):
            connection.execute(sql.LEAVE, {"token": ticket.token})
            if connection.execute(sql.LOCK_FREE, params).fetchone()[0]:
                head = connection.execute(sql.HEAD, params).fetchone()
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
            with self.db.step() as connection, self.db.transaction(connection):
                connection.execute(sql.LEAVE, {"token": token})
                if connection.execute(sql.LOCK_FREE, params).fetchone()[0]:
                    head = connection.execute(sql.HEAD, params).fetchone()
            if head is None:
                return
            token, wake = head

    def release(self, name: str, token: str) -> bool:
        rows = self.db.one_statement(sql.RELEASE, {"name": name, "token": token})
        # This release and (most often) the acquire it ends; checkpoint after the ring.
        self.db.writes += 2
        if not rows:
            return False
        head, wake = rows[0]
        if head is not None:
            self._ring("lock", name, head, wake)
        if self.db.writes >= self.db.checkpoint_at:
            self.db.wrote(0)
        return True

    def set_value(self, name: str, token: str, value: str) -> bool:
        with self.db.step() as connection:
            params = {"name": name, "token": token, "value": value}
            return self.db.execute(connection, sql.SET_VALUE, params).rowcount == 1

    def extend_many(self, renewals: Sequence[Renewal]) -> list[bool]:
        with self.db.step() as connection, self.db.transaction(connection):
            return [
                connection.execute(
                    sql.EXTEND, {"name": r.name, "token": r.token, "ttl": r.ttl}
                ).rowcount == 1
                for r in renewals
            ]

    def owned(self, name: str, token: str) -> bool:
        with self.db.step() as connection:
            params = {"name": name, "token": token}
            return self.db.execute(connection, sql.OWNED, params).fetchone() is not None

    def inspect(self, name: str) -> LockInfo | None:
        with self.db.step() as connection:
            row = self.db.execute(connection, sql.INSPECT, {"name": name}).fetchone()
        return None if row is None else _lock_record(row)

    def list_records(self, prefix: str) -> list[LockInfo]:
        with self.db.step() as connection:
            rows = self.db.execute(connection, sql.LIST, {"prefix": prefix}).fetchall()
        return [_lock_record(row) for row in rows]

    def break_leases(self, name: str) -> bool:
        with self.db.step() as connection:
            rows = self.db.execute(connection, sql.BREAK, {"name": name}).fetchall()
        if not rows:
            return False
        head, wake = rows[0]
        if head is not None:
            self._ring("lock", name, head, wake)
        return True


def _params(
    name: str, token: str, ttl: float, holder: Holder, value: str | None
) -> dict[str, Any]:
    """ACQUIRE's inputs (``_lock_sql``), :seq that of an acquire without a place."""
    return {
        "name": name, "token": token, "ttl": ttl, "seq": sql.NOT_QUEUED,
        "host": holder.host, "pid": holder.pid, "thread": holder.thread, "value": value,
    }


def first_try(db: Database, grant: str, params: dict[str, Any]) -> Grant | None:
    """The ``grant`` statement alone, a transaction of its own (SQLite takes the write lock
    before it reads anything): two statements fewer than BEGIN IMMEDIATE ... COMMIT, for an
    acquire that is likely to be granted. Its RETURNING row is the fence; None when it was
    refused, having written nothing. The caller then decides in a transaction, and a refusal
    there makes this file's first tries go there directly for CONTENDED_FOR."""
    rows = db.one_statement(grant, params)
    return Grant(int(rows[0][0])) if rows else None


def _lock_record(row: tuple[Any, ...]) -> LockInfo:
    name, fence, live, host, pid, thread, acquired_at, ttl_left, value = row
    leases = [(host, pid, thread, acquired_at, ttl_left, None, None)] if live else []
    return record(Kind.LOCK, name, fence, leases, value=value)
