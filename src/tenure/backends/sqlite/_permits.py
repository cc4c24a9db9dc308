"""SQLite's semaphores: a set of permits per name (SQL in ``_semaphore_sql``), blocking steps
for both flavours. Waiters poll, woken early by a release in this process
(``waiters``, under the semaphore's notice key)."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Sequence
from typing import Any

from tenure._errors import limit_mismatch
from tenure._types import Busy, Grant, Holder, Kind, LockInfo, Renewal
from tenure._waiters import Waiters, permit_key
from tenure.backends.sqlite import _semaphore_sql as sql
from tenure.backends.sqlite._clock import clock_us
from tenure.backends.sqlite._connection import Database
from tenure.backends.sqlite._locks import first_try
from tenure.backends.sqlite._records import record

__all__ = ["Permits", "extend_stamped"]


class Permits:
    """The semaphore steps on one file."""

    def __init__(self, db: Database, waiters: Waiters) -> None:
        self.db = db
        self.waiters = waiters

    def acquire(
        self, name: str, token: str, ttl: float, holder: Holder, limit: int
    ) -> Grant | Busy:
        db = self.db
        if time.monotonic() >= db.contended_until:
            first = first_try(db, sql.GRANT, {
                "name": name, "token": token, "limit": limit, "ttl": ttl,
                "host": holder.host, "pid": holder.pid, "thread": holder.thread,
            })
            if first is not None:
                db.writes += 1  # (the release counts its own, and checkpoints when due)
                return first
        with db.step() as connection, db.transaction(connection):
            params = {"name": name, "token": token, "limit": limit, "ttl": ttl,
                      "floor": clock_us()}
            granted = connection.execute(sql.TAKE_FENCE, params).fetchone()
            if granted is not None:
                _insert_permit(
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
                db.contended()
                return Busy(float(soonest))
            fence = int(granted[0])
            _insert_permit(connection, name, token, fence=fence, ttl=ttl, holder=holder)
        return Grant(fence)

    def release(self, name: str, token: str) -> bool:
        with self.db.step() as connection:
            rows = self.db.execute(
                connection, sql.RELEASE, {"name": name, "token": token}
            ).fetchall()
        if rows:
            self.waiters.notify(permit_key(name))
        return any(ours and live for ours, live in rows)

    def extend_many(self, renewals: Sequence[Renewal]) -> list[bool]:
        return extend_stamped(self.db, sql.EXTEND, sql.STAMP, renewals)

    def owned(self, name: str, token: str) -> bool:
        with self.db.step() as connection:
            params = {"name": name, "token": token}
            return self.db.execute(connection, sql.OWNED, params).fetchone() is not None

    def inspect(self, name: str) -> LockInfo | None:
        with self.db.step() as connection, self.db.snapshot(connection):
            row = self.db.execute(connection, sql.SEMAPHORE, {"name": name}).fetchone()
            return None if row is None else _semaphore_record(connection, row)

    def list_records(self, prefix: str) -> list[LockInfo]:
        with self.db.step() as connection, self.db.snapshot(connection):
            rows = self.db.execute(connection, sql.LIST, {"prefix": prefix}).fetchall()
            return [_semaphore_record(connection, row) for row in rows]

    def break_leases(self, name: str) -> bool:
        with self.db.step() as connection:
            rows = self.db.execute(connection, sql.BREAK, {"name": name}).fetchall()
        if rows:
            self.waiters.notify(permit_key(name))
        return any(live for (live,) in rows)


def extend_stamped(
    db: Database, extend: str, stamp: str, renewals: Sequence[Renewal]
) -> list[bool]:
    """Renew leases kept apart from their name's record (permits, read-write leases); each
    renewed lease keeps its record in use until its new end (``stamp``)."""
    extended = []
    with db.step() as connection, db.transaction(connection):
        for r in renewals:
            params = {"name": r.name, "token": r.token, "ttl": r.ttl}
            done = connection.execute(extend, params).rowcount == 1
            if done:
                connection.execute(stamp, params)
            extended.append(done)
    return extended


def _insert_permit(
    connection: sqlite3.Connection, name: str, token: str, *, fence: int, ttl: float,
    holder: Holder,
) -> None:
    connection.execute(sql.INSERT_PERMIT, {
        "name": name, "token": token, "fence": fence, "ttl": ttl,
        "host": holder.host, "pid": holder.pid, "thread": holder.thread,
    })


def _semaphore_record(connection: sqlite3.Connection, row: tuple[Any, ...]) -> LockInfo:
    name, fence, limit = row
    leases = connection.execute(sql.PERMITS, {"name": name}).fetchall()
    return record(Kind.SEMAPHORE, name, fence, leases, limit=int(limit))
