"""MySQL's semaphores: a record, a row per weighted permit and a row per waiting place (SQL
in ``_semaphore_sql``: the common grant one statement, the rest of the rule one short
transaction sent as one text), blocking steps
for both flavours. Their waiters back off across processes (each try refreshes the place),
woken early by a release, a given-up place or a dropped one in this process (a permit has
many holders; a gate follows one session's lease)."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from tenure._errors import limit_mismatch
from tenure._types import Busy, Grant, Holder, Kind, LockInfo
from tenure._waiters import permit_key
from tenure.backends._sql_common import clip
from tenure.backends.mysql._connection import (
    Cursor,
    execute,
    hexed,
    micros,
    run_batch,
    run_transaction,
)
from tenure.backends.mysql._kind_table import KindTable
from tenure.backends.mysql._records import Row, records
from tenure.backends.mysql._semaphore_sql import GRANTED, MINE, SemaphoreStatements

__all__ = ["Permits"]

logger = logging.getLogger("tenure")


class Permits(KindTable):
    """The semaphore steps on one table's permits table."""

    kind = Kind.SEMAPHORE
    statements = SemaphoreStatements
    sql: SemaphoreStatements

    def table_name(self) -> str:
        return self.sql.quoted.strip("`")

    def create(self) -> Sequence[str]:
        return [self.sql.create]

    def wake_key(self, name: str) -> str:
        return permit_key(name)

    def info(self, rows: Sequence[tuple[Any, ...]]) -> list[LockInfo]:
        return _semaphore_records(rows)

    def upgrade(self, cursor: Cursor) -> None:
        """A slots table from before the weight column gets it (every permit already there
        reads as one unit)."""
        cursor.execute(self.sql.weight_column, {"table": self.table_name()})
        (present,) = cursor.fetchone()
        if not int(present):
            self.pool.add_columns(
                cursor, self.sql.add_weight_column,
                f"the weight column to table {self.table_name()!r}",
                "see the docs on semaphores",
            )

    def acquire(
        self, name: str, token: str, ttl: float, holder: Holder, limit: int, *,
        weight: int = 1, queue_ttl: float | None = None,
    ) -> Grant | Busy:
        """Grant a permit of ``weight`` when the live permits' units, plus the weights of
        the live places ahead of this token's (every live place, when it has none), plus
        ``weight`` stay within ``limit``. ``queue_ttl``: a refused attempt takes (or
        refreshes) its place in the same transaction, so later arrivals stand behind it."""
        self.exist(create=True)
        params = {
            "name": hexed(name), "token": token, "ttl_us": micros(ttl), "limit": limit,
            "weight": weight, "queue_us": None if queue_ttl is None else micros(queue_ttl),
            "host": clip(holder.host), "pid": holder.pid, "thread": clip(holder.thread),
        }
        if weight == 1:
            statement = self.sql.common_grant(limit)

            def attempt(cursor: Cursor) -> int:
                execute(cursor, statement, params)
                return int(cursor.lastrowid)

            state = self.pool.run(attempt)
            if state % 8 in (GRANTED, MINE):
                self._collect_if_due()
                return Grant(state // 8)
        # A heavier permit, a queue that may be live, all slots live, another limit: the
        # grant rule in one transaction.
        retried, granted, soonest_us, dropped, stored, collided = self.pool.run(
            lambda cursor: run_transaction(cursor, self.sql.acquire, params)
        )
        if collided:
            # The slot its reads chose held a live permit when written: nothing was
            # overwritten, the attempt counts as refused. It cannot happen while every
            # grant is made under the record's lock; said aloud, for it would mean a read
            # of this transaction did not see a committed grant.
            logger.warning(
                "%s: semaphore %r: a grant found its slot taken; refused, to be tried again",
                self.pool.display, name,
            )
        if dropped is not None and int(dropped) > 0:
            # A lapsed place may have been all that held a waiter here back.
            self.waiters.notify(permit_key(name))
        if stored is not None:
            raise limit_mismatch(name, int(stored), limit)
        if retried is not None:
            return Grant(int(retried))
        if granted is not None:
            self._collect_if_due()
            return Grant(int(granted))
        return Busy(None if soonest_us is None else max(0.0, int(soonest_us) / 1e6))

    def release(self, name: str, token: str) -> bool:
        """End the token's permit, or its waiting place (an attempt that gives up)."""
        if not self.exist(create=False):
            return False
        params = {"name": hexed(name), "token": token}
        released = self.pool.run(lambda cursor: execute(cursor, self.sql.release, params) == 1)
        if not released:  # no live permit: a waiter giving up its place (or a lost permit)
            self.pool.run(lambda cursor: run_batch(cursor, self.sql.leave, params))
        # A place that left may have been all that held a waiter back, as a permit may.
        self.waiters.notify(permit_key(name))
        self._collect_if_due()
        return released


def _semaphore_records(rows: Sequence[tuple[Any, ...]]) -> list[LockInfo]:
    places: dict[bytes, list[tuple[Any, ...]]] = {}
    for name, _, _, host, pid, thread, since, _, _, weight, slot in rows:
        if slot is not None and int(slot) < 0:  # (after the name's permits, in arrival order)
            places.setdefault(bytes(name), []).append((host, pid, thread, since, weight))
    shaped: list[Row] = []
    for (name, fence, limit, host, pid, thread, acquired_at, left_us, permit_fence, weight,
         slot) in rows:
        lease = None if slot is None or int(slot) < 0 else (
            host, pid, thread, acquired_at, left_us, permit_fence, None, weight)
        shaped.append((name, fence, limit, len(places.get(bytes(name), ())), None, lease))
    return records(Kind.SEMAPHORE, shaped, places)
