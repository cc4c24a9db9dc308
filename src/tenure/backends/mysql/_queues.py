"""MySQL's read-write and fair locks: leases with modes granted in arrival order from a queue
of waiting places (SQL in ``_rwlock_sql``: one short transaction sent as one text), blocking
steps for both flavours. Their waiters back off across processes, woken early by a release,
a break or a dropped place in this process."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from tenure._types import Busy, Grant, Holder, Kind, LockInfo, queue_kind
from tenure._waiters import queue_key
from tenure.backends._sql_common import clip
from tenure.backends.mysql._connection import (
    Cursor,
    hexed,
    micros,
    run_batch,
    run_transaction,
)
from tenure.backends.mysql._kind_table import KindTable
from tenure.backends.mysql._records import Row, records
from tenure.backends.mysql._rwlock_sql import RwlockStatements

__all__ = ["Queues"]


class Queues(KindTable):
    """The read-write lock steps on one table's read-write tables."""

    kind = Kind.RWLOCK
    statements = RwlockStatements
    sql: RwlockStatements

    def table_name(self) -> str:
        return self.sql.entries_name

    def create(self) -> Sequence[str]:
        return list(self.sql.create)

    def wake_key(self, name: str) -> str:
        return queue_key(name)

    def info(self, rows: Sequence[tuple[Any, ...]]) -> list[LockInfo]:
        return _queue_records(rows)

    def upgrade(self, cursor: Cursor) -> None:
        """An entries table from before the fair column gets it (every entry already there
        reads as a read-write lock's)."""
        cursor.execute(self.sql.fair_column, {"table": self.sql.entries_name})
        (present,) = cursor.fetchone()
        if not int(present):
            self.pool.add_columns(
                cursor, self.sql.add_fair_column,
                f"the fair column to table {self.sql.entries_name!r}",
                "see the docs on read-write locks",
            )

    def acquire(
        self, name: str, token: str, ttl: float, holder: Holder, *, mode: str, queue_ttl: float,
        fair: bool = False,
    ) -> Grant | Busy:
        self.exist(create=True)
        params = {
            "name": hexed(name), "token": token, "ttl_us": micros(ttl),
            "queue_us": micros(queue_ttl), "mode": mode,
            "host": clip(holder.host), "pid": holder.pid, "thread": clip(holder.thread),
            "fair": 1 if fair else None,
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


def _queue_records(rows: Sequence[tuple[Any, ...]]) -> list[LockInfo]:
    shaped: list[Row] = []
    places: dict[bytes, list[tuple[Any, ...]]] = {}
    fair_places: dict[str, int] = {}  # a name's live places a fair lock's
    for (name, fence, queued, mode, host, pid, thread, acquired_at, left_us, seq, fair,
         entry) in rows:
        if entry == "place":  # (after the name's leases, in arrival order)
            places.setdefault(bytes(name), []).append((host, pid, thread, acquired_at, mode))
            shown = bytes(name).decode("utf-8")
            fair_places[shown] = fair_places.get(shown, 0) + (fair == 1)
            lease = None
        else:
            lease = None if seq is None else (
                host, pid, thread, acquired_at, left_us, seq, mode, fair == 1
            )
        shaped.append((name, fence, None, queued, None, lease))
    return [
        dataclasses.replace(info, kind=queue_kind(
            len(info.leases) + info.queued,
            sum(lease.fair for lease in info.leases) + fair_places.get(info.name, 0),
        ))
        for info in records(Kind.RWLOCK, shaped, places)
    ]
