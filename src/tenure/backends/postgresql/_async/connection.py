"""The only code that talks to psycopg: a small pool of idle autocommit connections for one
store, each statement under the client-side deadline of ``_watchdog``.

A lock never depends on which connection runs the next statement, nor on a transaction
staying open. Driver errors leave as they are (the store's base names them); a statement
the watchdog cut short leaves as a TimeoutError saying so.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import psycopg

from tenure._concurrency import async_io as io
from tenure._errors import StoreFault
from tenure.backends._sql_common import abandon, has_pending_input
from tenure.backends.postgresql._config import PostgreSQLSettings
from tenure.backends.postgresql._errors import SCHEMA_GONE
from tenure.backends.postgresql._watchdog import Deadline, guard

__all__ = [
    "PIPELINES", "AsyncPool", "Connection", "close_quietly", "fetch_row", "granted_under_lock",
]

T = TypeVar("T")
Connection = psycopg.AsyncConnection[tuple[Any, ...]]
Rows = list[tuple[Any, ...]]
PIPELINES = hasattr(psycopg, "Pipeline") and psycopg.Pipeline.is_supported()
"""Whether psycopg (3.1 and later) and the libpq under it (14 and later) have pipeline mode;
without it the same messages go one by one (psycopg 3.0, the floor, has no pipelines)."""


class AsyncPool:
    """Connections of one store: ``run`` lends one to a piece of work, ``execute`` runs one
    statement. ``prepare`` runs on the first connection used (the lock table's set-up) and
    again after ``forget`` (called when a table went missing behind our back)."""

    def __init__(
        self,
        settings: PostgreSQLSettings,
        *,
        prepare: Callable[[Connection], Awaitable[None]],
        forget: Callable[[], None],
    ) -> None:
        self.settings = settings
        self.closed = False
        self.mutex = io.Mutex()
        """Guards the idle list (and the store's clean-up schedule); replaced after a fork."""
        self._prepare = prepare
        self._forget = forget
        self._prepared = False
        self._idle: list[Connection] = []
        self._owner: tuple[int, object] | None = None

    async def execute(self, sql: str, params: dict[str, Any]) -> Rows:
        async def fetch(connection: Connection) -> Rows:
            cursor = await connection.execute(sql, params)
            return await cursor.fetchall() if cursor.description is not None else []

        return await self.run(fetch)

    async def run(self, work: Callable[[Connection], Awaitable[T]], *,
                  pooled: bool = True) -> T:
        """Run ``work`` on a connection of the pool, or (``pooled=False``) on one of its own,
        closed afterwards."""
        if self.closed:
            raise StoreFault("the client is closed")
        # A statement cancelled half-way may still commit after the caller's undo (a
        # release): it runs to its end first. The deadlines bound the wait.
        return await io.complete(self._run_unshielded(work, pooled))

    async def _run_unshielded(self, work: Callable[[Connection], Awaitable[T]],
                              pooled: bool) -> T:
        self._claim()
        connection = await self._checkout() if pooled else await self.connect()
        deadline: Deadline | None = None
        try:
            with guard(connection.fileno(), self.settings.options.timeout) as deadline:
                if not self._prepared:
                    await self._prepare(connection)
                    self._prepared = True
                result = await work(connection)
        except BaseException as exc:
            await close_quietly(connection)
            if isinstance(exc, SCHEMA_GONE):
                self._prepared = False
                self._forget()
            if isinstance(exc, psycopg.Error) and deadline is not None and deadline.fired:
                raise TimeoutError(
                    f"no answer within {self.settings.options.timeout} s"
                ) from exc
            raise
        if pooled:
            await self._checkin(connection)
        else:
            await close_quietly(connection)
        return result

    async def connect(self) -> Connection:
        """A new connection, set up (outside the pool: the listener's own uses this)."""
        connection = await psycopg.AsyncConnection.connect(
            self.settings.conninfo, autocommit=True, **self.settings.connect_args
        )
        try:
            with guard(connection.fileno(), self.settings.options.timeout):
                # READ COMMITTED is what the acquire statement's guarantee rests on; the
                # server-side statement_timeout frees the server if this client vanishes.
                await connection.execute(
                    "SELECT set_config('default_transaction_isolation', 'read committed', "
                    "false), set_config('statement_timeout', %(ms)s, false), "
                    "set_config('TimeZone', 'UTC', false)",
                    {"ms": str(int(self.settings.options.timeout * 1000))},
                )
        except BaseException:
            await close_quietly(connection)
            raise
        return connection

    async def aclose(self) -> None:
        self.closed = True
        with self.mutex:
            idle, self._idle = self._idle, []
        if self._owner is not None and self._owner[0] == os.getpid():
            for connection in idle:
                await close_quietly(connection)
        else:
            abandon(idle)

    def _claim(self) -> None:
        """Adopt this process / event loop: connections from a parent process (after fork)
        or from another event loop can't be used here."""
        pid = os.getpid()
        owner = (pid, io.scope())
        if self._owner == owner:
            return
        if self._owner is not None and self._owner[0] != pid:
            self.mutex = io.Mutex()  # a parent's thread may have held it at fork time
        with self.mutex:
            if self._owner == owner:
                return
            stale, self._idle = self._idle, []
            previous, self._owner = self._owner, owner
        if previous is not None and previous[0] != pid:
            abandon(stale)
        else:
            for connection in stale:
                connection.pgconn.finish()  # another event loop's: can't be awaited from here

    async def _checkout(self) -> Connection:
        while True:
            with self.mutex:
                connection = self._idle.pop() if self._idle else None
            if connection is None:
                return await self.connect()
            if connection.closed or has_pending_input(connection.fileno()):
                await close_quietly(connection)  # the server closed it while idle
                continue
            return connection

    async def _checkin(self, connection: Connection) -> None:
        with self.mutex:
            keep = not self.closed and len(self._idle) < self.settings.options.pool_size
            if keep:
                self._idle.append(connection)
        if not keep:
            await close_quietly(connection)


async def close_quietly(connection: Connection) -> None:
    with contextlib.suppress(Exception):
        await connection.close()


async def fetch_row(connection: Connection, sql: str, params: Any = None) -> tuple[Any, ...]:
    """The first row of one statement's answer (one that always answers a row)."""
    cursor = await connection.execute(sql, params)
    row = await cursor.fetchone()
    assert row is not None
    return row


async def granted_under_lock(
    connection: Connection, lock_name: str, grant: str, params: dict[str, Any]
) -> tuple[Any, ...]:
    """``grant``'s row, decided in one transaction under the name's record row lock
    (``lock_name``): a semaphore's locked retry, a read-write lock's acquire. In a pipeline
    the transaction's four messages go out together and their answers come back together
    (one round trip); the server runs them in order, and a failed one aborts the rest and
    the connection is dropped (``run``), so that transaction never commits."""

    async def send() -> psycopg.AsyncCursor[tuple[Any, ...]]:
        await connection.execute("BEGIN")
        await connection.execute(lock_name, params)
        cursor = await connection.execute(grant, params)
        await connection.execute("COMMIT")
        return cursor

    if PIPELINES:
        async with connection.pipeline():
            cursor = await send()
    else:  # libpq before 14: one round trip per message
        cursor = await send()
    row = await cursor.fetchone()
    assert row is not None
    return row
