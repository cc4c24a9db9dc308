"""MySQL's read-write and fair locks: leases with modes granted in arrival order from a queue
of waiting places (SQL in ``_rwlock_sql``: one short transaction sent as one text), blocking
steps for both flavours. Their waiters back off across processes, woken early by a release,
a break or a dropped place in this process."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from tenure._types import Busy, Grant, Holder, Kind, LockInfo, Renewal
from tenure._waiters import Waiters, queue_key
from tenure.backends._sql_common import clip
from tenure.backends.mysql._connection import (
    Cursor,
    Pool,
    execute,
    hexed,
    micros,
    prefix_params,
    run_batch,
    run_transaction,
)
from tenure.backends.mysql._records import Row, records
from tenure.backends.mysql._rwlock_sql import RwlockStatements
from tenure.backends.mysql._sql import Statements

__all__ = ["Queues"]


class Queues:
    """The read-write lock steps on one table's read-write tables."""

    def __init__(
        self, pool: Pool, lock_sql: Statements, waiters: Waiters,
        collect_if_due: Callable[[], None],
    ) -> None:
        self.pool = pool
        self.lock_sql = lock_sql
        self.sql = RwlockStatements(lock_sql.table)
        self.waiters = waiters
        self._collect_if_due = collect_if_due

    def exist(self, *, create: bool) -> bool:
        """Whether the read-write lock tables exist; with ``create``, make them first. Made
        on the first read-write (or fair) lock acquire, as the permits table is."""
        if self.pool.rwlocks_ready:
            return True

        def ensure(cursor: Cursor) -> bool:
            cursor.execute(self.lock_sql.schema, {"table": self.sql.entries_name})
            if cursor.fetchone() is not None:
                return True
            if create:
                for statement in self.sql.create:
                    cursor.execute(statement)
            return create

        self.pool.rwlocks_ready = self.pool.run(ensure)
        return self.pool.rwlocks_ready

    def acquire(
        self, name: str, token: str, ttl: float, holder: Holder, *, mode: str, queue_ttl: float
    ) -> Grant | Busy:
        self.exist(create=True)
        params = {
            "name": hexed(name), "token": token, "ttl_us": micros(ttl),
            "queue_us": micros(queue_ttl), "mode": mode,
            "host": clip(holder.host), "pid": holder.pid, "thread": clip(holder.thread),
        }
        retried, granted, soonest_us, dropped = self.pool.run(
            lambda cursor: run_transaction(cursor, self.sql.acquire, params)
        )
        if dropped is not None and int(dropped) > 0:
            # A lapsed lease or place may have been all that held a waiter here back.
            self.waiters.notify(queue_key(name))
        if retried is not None:
            return Grant(int(retried))
        if granted is not None:
            self._collect_if_due()
            return Grant(int(granted))
        return Busy(None if soonest_us is None else max(0.0, int(soonest_us) / 1e6))

    def release(self, name: str, token: str) -> bool:
        if not self.exist(create=False):
            return False
        params = {"name": hexed(name), "token": token}
        (released,) = self.pool.run(lambda cursor: run_batch(cursor, self.sql.release, params))
        # A place that left may have been all that held a waiter back, as a lease may.
        self.waiters.notify(queue_key(name))
        self._collect_if_due()
        return released is not None and int(released) == 1

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
        found = _queue_records(self.pool.rows(self.sql.inspect, {"name": hexed(name)}))
        return found[0] if found else None

    def list_records(self, prefix: str) -> list[LockInfo]:
        params = prefix_params(prefix)
        if params is None or not self.exist(create=False):
            return []
        return _queue_records(self.pool.rows(self.sql.list_queues, params))

    def break_leases(self, name: str) -> bool:
        if not self.exist(create=False):
            return False
        params = {"name": hexed(name)}
        broken = self.pool.run(lambda cursor: execute(cursor, self.sql.break_queue, params) > 0)
        if broken:
            self.waiters.notify(queue_key(name))
        return broken


def _queue_records(rows: Sequence[tuple[Any, ...]]) -> list[LockInfo]:
    shaped: list[Row] = []
    for name, fence, queued, mode, host, pid, thread, acquired_at, left_us, seq in rows:
        lease = None if seq is None else (host, pid, thread, acquired_at, left_us, seq, mode)
        shaped.append((name, fence, None, queued, None, lease))
    return records(Kind.RWLOCK, shaped)
