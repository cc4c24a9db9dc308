"""MySQL's semaphores: a record and a row per permit (SQL in ``_semaphore_sql``), blocking
steps for both flavours. Their waiters back off across processes, woken early by a release
in this process (a permit has many holders; a gate follows one session's lease)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import pymysql  # type: ignore[import-untyped]

from tenure._errors import limit_mismatch
from tenure._types import Busy, Grant, Holder, Kind, LockInfo, Renewal
from tenure._waiters import Waiters, permit_key
from tenure.backends._sql_common import clip
from tenure.backends.mysql._connection import (
    Cursor,
    Pool,
    execute,
    hexed,
    micros,
    prefix_params,
)
from tenure.backends.mysql._records import Row, records
from tenure.backends.mysql._semaphore_sql import GRANTED, MINE, MISMATCH, SemaphoreStatements
from tenure.backends.mysql._sql import Statements

__all__ = ["Permits"]


class Permits:
    """The semaphore steps on one table's permits table."""

    def __init__(
        self, pool: Pool, lock_sql: Statements, waiters: Waiters,
        collect_if_due: Callable[[], None],
    ) -> None:
        self.pool = pool
        self.lock_sql = lock_sql
        self.sql = SemaphoreStatements(lock_sql.table)
        self.waiters = waiters
        self._collect_if_due = collect_if_due

    def exist(self, *, create: bool) -> bool:
        """Whether the permits table exists; with ``create``, make it first. Made on the
        first semaphore acquire, not with the lock table: a user of locks alone needs no
        privilege on it."""
        if self.pool.permits_ready:
            return True
        name = self.sql.quoted.strip("`")

        def ensure(cursor: Cursor) -> bool:
            cursor.execute(self.lock_sql.schema, {"table": name})
            if cursor.fetchone() is not None:
                return True
            if create:
                cursor.execute(self.sql.create)
            return create

        self.pool.permits_ready = self.pool.run(ensure)
        return self.pool.permits_ready

    def acquire(
        self, name: str, token: str, ttl: float, holder: Holder, limit: int
    ) -> Grant | Busy:
        self.exist(create=True)
        params = {
            "name": hexed(name), "token": token, "ttl_us": micros(ttl), "limit": limit,
            "host": clip(holder.host), "pid": holder.pid, "thread": clip(holder.thread),
        }
        statement = self.sql.acquire(limit)

        def attempt(cursor: Cursor) -> int:
            execute(cursor, statement, params)
            return int(cursor.lastrowid)

        def soonest(cursor: Cursor) -> float | None:
            cursor.execute(self.sql.soonest, params)
            row = cursor.fetchone()
            return None if row is None or row[0] is None else max(0.0, int(row[0]) / 1e6)

        state = self.pool.run(attempt)
        if state % 8 == MISMATCH:
            changed = self.pool.run(lambda cursor: self._change_limit(cursor, name, params))
            if changed is not None:
                return changed
            state = self.pool.run(attempt)  # the limit is ours now (or was changed back)
        if state % 8 in (GRANTED, MINE):
            self._collect_if_due()
            return Grant(state // 8)
        # Refused: a second round trip, on the contended path only, for the waiter's pause.
        return Busy(self.pool.run(soonest))

    def _change_limit(
        self, cursor: Cursor, name: str, params: dict[str, Any]
    ) -> Grant | None:
        """A stored limit other than ours: refuse if permits of other tokens are live, else
        store ours (the record's row lock keeps acquirers out meanwhile). Our own live
        permit (a retry) is granted again as it is. None: try the acquire again."""
        cursor.execute("START TRANSACTION")
        try:
            cursor.execute(self.sql.limit_lock, params)
            row = cursor.fetchone()
            cursor.execute(self.sql.limit_count, params)
            others, mine = cursor.fetchone()
            stored = None if row is None or row[0] is None else int(row[0])
            if mine is not None:
                cursor.execute(self.sql.extend, params)  # a retry restarts its lease
                cursor.execute("COMMIT")
                return Grant(int(mine))
            if int(others) > 0 and stored is not None and stored != params["limit"]:
                cursor.execute("COMMIT")
                raise limit_mismatch(name, stored, params["limit"])
            cursor.execute(self.sql.limit_store, params)
            cursor.execute("COMMIT")
        except pymysql.err.MySQLError:
            cursor.execute("ROLLBACK")
            raise
        return None

    def release(self, name: str, token: str) -> bool:
        if not self.exist(create=False):
            return False
        params = {"name": hexed(name), "token": token}
        released = self.pool.run(lambda cursor: execute(cursor, self.sql.release, params) == 1)
        self.waiters.notify(permit_key(name))
        self._collect_if_due()
        return released

    def extend_many(self, renewals: Sequence[Renewal]) -> list[bool]:
        if not renewals:
            return []
        if not self.exist(create=False):
            return [False] * len(renewals)
        return self.pool.extend_each(self.sql.extend, renewals)

    def owned(self, name: str, token: str) -> bool:
        if not self.exist(create=False):
            return False
        params = {"name": hexed(name), "token": token}
        return self.pool.run(lambda cursor: int(cursor.execute(self.sql.owned, params)) == 1)

    def inspect(self, name: str) -> LockInfo | None:
        if not self.exist(create=False):
            return None
        found = _semaphore_records(self.pool.rows(self.sql.inspect, {"name": hexed(name)}))
        return found[0] if found else None

    def list_records(self, prefix: str) -> list[LockInfo]:
        params = prefix_params(prefix)
        if params is None or not self.exist(create=False):
            return []
        return _semaphore_records(self.pool.rows(self.sql.list_semaphores, params))

    def break_leases(self, name: str) -> bool:
        if not self.exist(create=False):
            return False
        params = {"name": hexed(name)}
        broken = self.pool.run(
            lambda cursor: execute(cursor, self.sql.break_semaphore, params) > 0
        )
        if broken:
            self.waiters.notify(permit_key(name))
        return broken


def _semaphore_records(rows: Sequence[tuple[Any, ...]]) -> list[LockInfo]:
    shaped: list[Row] = []
    for name, fence, limit, host, pid, thread, acquired_at, left_us, permit_fence in rows:
        lease = None if permit_fence is None else (
            host, pid, thread, acquired_at, left_us, permit_fence, None)
        shaped.append((name, fence, limit, 0, None, lease))
    return records(Kind.SEMAPHORE, shaped)
