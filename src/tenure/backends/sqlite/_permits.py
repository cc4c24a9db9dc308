"""SQLite's semaphores: a set of weighted permits per name and a queue of waiting places
(SQL in ``_semaphore_sql``), blocking steps for both flavours. A refused blocking attempt
keeps its place in the transaction that refused it; waiters poll (their back-off, bounded so
that each try refreshes the place before it lapses), woken early by a release in this
process (``waiters``, under the semaphore's notice key)."""

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
from tenure.backends.sqlite._lock_sql import NOT_QUEUED
from tenure.backends.sqlite._locks import first_try
from tenure.backends.sqlite._records import record

__all__ = ["Permits", "extend_stamped"]


class Permits:
    """The semaphore steps on one file."""

    def __init__(self, db: Database, waiters: Waiters) -> None:
        self.db = db
        self.waiters = waiters
        self._placed = False
        """Whether this process made sure of the waiters' place columns."""
        self._places_read: bool | None = None
        """Whether the file's waiters' table has the place columns (None: not asked yet)."""

    def quick_try(
        self, name: str, token: str, ttl: float, holder: Holder, limit: int, *, weight: int
    ) -> Grant | None:
        """The common grant, GRANT alone (``first_try``), unless this file was found
        contended lately (``CONTENDED_FOR``); None: not granted, nothing written (the
        attempt's first try, told ``tried``, decides in a transaction)."""
        db = self.db
        if time.monotonic() < db.contended_until:
            return None
        params = _params(name, token, ttl, holder, limit=limit, weight=weight)
        first = first_try(db, sql.GRANT, params)
        if first is not None:
            db.writes += 1  # (the release counts its own, and checkpoints when due)
        return first

    def acquire(
        self, name: str, token: str, ttl: float, holder: Holder, limit: int, *,
        weight: int = 1, queue_ttl: float | None = None, tried: bool = False,
    ) -> Grant | Busy:
        """Grant a permit of ``weight`` when the live permits' units, plus the weights of
        the live places ahead of this token's (every live place, when it has none), plus
        ``weight`` stay within ``limit``. ``queue_ttl``: a refused attempt takes (or
        refreshes) its place in the same transaction, so later arrivals stand behind it.
        ``tried``: the lone GRANT statement was just refused (``quick_try``): not sent
        again."""
        db = self.db
        params = _params(name, token, ttl, holder, limit=limit, weight=weight)
        if not tried and time.monotonic() >= db.contended_until:
            first = first_try(db, sql.GRANT, params)
            if first is not None:
                db.writes += 1  # (the release counts its own, and checkpoints when due)
                return first
        self._make_place_columns()
        with db.step() as connection, db.transaction(connection):
            (now,) = connection.execute(sql.CLOCK).fetchone()
            params.update(now=float(now), floor=clock_us(), place=queue_ttl)
            mine = connection.execute(sql.RENEW_LIVE, params).fetchone()
            if mine is not None:  # a retry after a lost reply: same permit, same fence
                connection.execute(sql.STAMP, params)
                return Grant(int(mine[0]))
            dropped = connection.execute(sql.DROP_EXPIRED, params).rowcount
            dropped += connection.execute(sql.DROP_LAPSED, params).rowcount
            live, units, soonest = connection.execute(sql.STATE, params).fetchone()
            if live:
                (stored,) = connection.execute(sql.STORED_LIMIT, params).fetchone()
                if stored != limit:
                    # Raised inside the transaction: it rolls back, nothing is written.
                    raise limit_mismatch(name, int(stored), limit)
            place = connection.execute(sql.PLACE, params).fetchone()
            params["seq"] = NOT_QUEUED if place is None else int(place[0])
            (ahead,) = connection.execute(sql.AHEAD, params).fetchone()
            answer: Grant | Busy
            if int(units) + int(ahead) + weight <= limit:
                (fence,) = connection.execute(
                    sql.GRANT_FENCE, {**params, "live": live}
                ).fetchone()
                connection.execute(sql.INSERT_PERMIT, {**params, "fence": fence})
                if place is not None:
                    connection.execute(sql.LEAVE, params)
                answer = Grant(int(fence))
            else:
                if queue_ttl is not None and connection.execute(
                    sql.KEEP_PLACE, params
                ).fetchone() is None:
                    connection.execute(sql.NEW_PLACE, params)
                db.contended()
                answer = Busy(None if soonest is None else float(soonest))
        if dropped:
            # A lapsed permit or place may have been all that held a waiter back.
            self.waiters.notify(permit_key(name))
        return answer

    def _make_place_columns(self) -> None:
        """The waiters' table gets the place columns a semaphore's place fills (made by the
        first acquire of each process that is not a lone statement's grant, each only if
        missing, in one step: counting the places ahead reads their weights)."""
        if self._placed:
            return
        with self.db.step() as connection, self.db.transaction(connection):
            present = _columns(connection, "tenure_waiters")
            for column, kind in sql.PLACE_COLUMNS:
                if column not in present:
                    connection.execute(f"ALTER TABLE tenure_waiters ADD COLUMN {column} {kind}")
        self._placed = True

    def release(self, name: str, token: str) -> bool:
        """End the token's permit, or its waiting place (an attempt that gives up)."""
        params = {"name": name, "token": token}
        with self.db.step() as connection:
            rows = self.db.execute(connection, sql.RELEASE, params).fetchall()
            left = 0
            if not any(ours for ours, _ in rows):
                left = self.db.execute(connection, sql.LEAVE, params).rowcount
        if rows or left:
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
            return None if row is None else self._semaphore_record(connection, row)

    def list_records(self, prefix: str) -> list[LockInfo]:
        with self.db.step() as connection, self.db.snapshot(connection):
            rows = self.db.execute(connection, sql.LIST, {"prefix": prefix}).fetchall()
            return [self._semaphore_record(connection, row) for row in rows]

    def break_leases(self, name: str) -> bool:
        with self.db.step() as connection:
            rows = self.db.execute(connection, sql.BREAK, {"name": name}).fetchall()
        if rows:
            self.waiters.notify(permit_key(name))
        return any(live for (live,) in rows)

    def _semaphore_record(
        self, connection: sqlite3.Connection, row: tuple[Any, ...]
    ) -> LockInfo:
        """The record of ``row`` (name, fence, limit): its permits and, where the file has
        the place columns, its waiters, read in the caller's snapshot."""
        name, fence, limit = row
        leases = connection.execute(sql.PERMITS, {"name": name}).fetchall()
        places: list[Any] = []
        if self._has_places(connection):
            (now,) = connection.execute(sql.CLOCK).fetchone()
            places = connection.execute(sql.PLACES, {"name": name, "now": now}).fetchall()
        return record(Kind.SEMAPHORE, name, fence, leases, limit=int(limit),
                      queued=len(places), places=places)

    def _has_places(self, connection: sqlite3.Connection) -> bool:
        """Whether the waiters' table has the weight column (made with the other place
        columns before any semaphore place): asked again until it is there."""
        if not self._places_read:
            self._places_read = "weight" in _columns(connection, "tenure_waiters")
        return self._places_read


def _params(
    name: str, token: str, ttl: float, holder: Holder, *, limit: int, weight: int
) -> dict[str, Any]:
    """GRANT's inputs (``_semaphore_sql``)."""
    return {
        "name": name, "token": token, "limit": limit, "weight": weight, "ttl": ttl,
        "host": holder.host, "pid": holder.pid, "thread": holder.thread,
    }


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


def _columns(connection: sqlite3.Connection, table: str) -> set[str]:
    return {row[1] for row in connection.execute(f"PRAGMA table_info({table})")}
