"""What the tables of MySQL's optional kinds share (a semaphore's permits, a read-write
lock's leases and places): each is made on its kind's first acquire, not with the lock table
(a user of locks alone needs no privilege on it), and every verb but acquire and release is
one statement of the kind's own over it. Blocking steps, for both flavours."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, ClassVar

from tenure._types import Kind, LockInfo, Renewal
from tenure._waiters import Waiters
from tenure.backends.mysql._connection import Cursor, Pool, execute, hexed, prefix_params
from tenure.backends.mysql._sql import Statements

__all__ = ["KindTable"]


class KindTable:
    """One optional kind's steps on one lock table's companion tables. A subclass names its
    statements (``statements``, made for the lock table's name: ``extend``, ``owned``,
    ``inspect``, ``listing``, ``breaking`` and the rest), the table whose existence says the
    kind is set up, how it is made, its rows' converter and the key its waiters wait on."""

    kind: ClassVar[Kind]
    statements: ClassVar[type[Any]]
    sql: Any

    def __init__(
        self, pool: Pool, lock_sql: Statements, waiters: Waiters,
        collect_if_due: Callable[[], None],
    ) -> None:
        self.pool = pool
        self.lock_sql = lock_sql
        self.sql = self.statements(lock_sql.table)
        self.waiters = waiters
        self._collect_if_due = collect_if_due

    # ---- what each kind says -----------------------------------------------------------

    def table_name(self) -> str:
        raise NotImplementedError

    def create(self) -> Sequence[str]:
        raise NotImplementedError

    def wake_key(self, name: str) -> str:
        raise NotImplementedError

    def info(self, rows: Sequence[tuple[Any, ...]]) -> list[LockInfo]:
        raise NotImplementedError

    def upgrade(self, cursor: Cursor) -> None:
        """Bring tables found made by an older tenure up to this one's columns (in place,
        ``Pool.add_columns``); none by default."""

    # ---- the steps they share ----------------------------------------------------------

    def exist(self, *, create: bool) -> bool:
        """Whether the kind's tables exist; with ``create``, make them first."""
        if self.pool.ready_kinds.get(self.kind):
            return True

        def ensure(cursor: Cursor) -> bool:
            cursor.execute(self.lock_sql.schema, {"table": self.table_name()})
            if cursor.fetchone() is not None:
                self.upgrade(cursor)
                return True
            if create:
                for statement in self.create():
                    cursor.execute(statement)
            return create

        ready = self.pool.ready_kinds[self.kind] = self.pool.run(ensure)
        return ready

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
        found = self.info(self.pool.rows(self.sql.inspect, {"name": hexed(name)}))
        return found[0] if found else None

    def list_records(self, prefix: str) -> list[LockInfo]:
        params = prefix_params(prefix)
        if params is None or not self.exist(create=False):
            return []
        return self.info(self.pool.rows(self.sql.listing, params))

    def break_leases(self, name: str) -> bool:
        if not self.exist(create=False):
            return False
        params = {"name": hexed(name)}
        broken = self.pool.run(lambda cursor: execute(cursor, self.sql.breaking, params) > 0)
        if broken:
            self.waiters.notify(self.wake_key(name))
        return broken
