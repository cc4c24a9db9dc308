"""MySQL's semaphores: a record and a row per permit (SQL in ``_semaphore_sql``), blocking
steps for both flavours. Their waiters back off across processes, woken early by a release
in this process (a permit has many holders; a gate follows one session's lease)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pymysql  # type: ignore[import-untyped]

from tenure._errors import limit_mismatch
from tenure._types import Busy, Grant, Holder, Kind, LockInfo
from tenure._waiters import permit_key
from tenure.backends._sql_common import clip
from tenure.backends.mysql._connection import Cursor, execute, hexed, micros
from tenure.backends.mysql._kind_table import KindTable
from tenure.backends.mysql._records import Row, records
from tenure.backends.mysql._semaphore_sql import GRANTED, MINE, MISMATCH, SemaphoreStatements

__all__ = ["Permits"]


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


def _semaphore_records(rows: Sequence[tuple[Any, ...]]) -> list[LockInfo]:
    shaped: list[Row] = []
    for name, fence, limit, host, pid, thread, acquired_at, left_us, permit_fence in rows:
        lease = None if permit_fence is None else (
            host, pid, thread, acquired_at, left_us, permit_fence, None)
        shaped.append((name, fence, limit, 0, None, lease))
    return records(Kind.SEMAPHORE, shaped)
