"""The PostgreSQL transport: a small pool of idle autocommit connections, each statement run
under the client-side deadline of ``_watchdog``, driver errors translated in one place.

A lock never depends on which connection runs the next statement, nor on a transaction
staying open: a step borrows a connection, runs its statement (or one short transaction),
and gives it back. Connections belong to one process and one event loop: after a fork, or
from another loop, the pool starts afresh and leaves the old ones alone.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import psycopg
import psycopg.errors

from tenure._concurrency import async_io as io
from tenure._errors import BackendError
from tenure.backends._sql_common import SqlOptions, abandon, has_pending_input
from tenure.backends.postgresql._watchdog import Deadline, guard

__all__ = ["AsyncConnectionPool", "Connection", "close_quietly"]

T = TypeVar("T")
Connection = psycopg.AsyncConnection[tuple[Any, ...]]


class AsyncConnectionPool:
    """Connections to one server, opened on demand, ``options.pool_size`` kept idle.

    ``prepare`` runs once on the first connection used (creating the tables), and again
    after a statement found its table missing (dropped behind our back)."""

    def __init__(
        self,
        conninfo: str,
        connect_args: dict[str, Any],
        options: SqlOptions,
        display: str,
        prepare: Callable[[Connection], Awaitable[None]],
    ) -> None:
        self._conninfo = conninfo
        self._connect_args = connect_args
        self._options = options
        self._display = display
        self._prepare = prepare
        self._ready = False
        self._closed = False
        self._mutex = io.Mutex()
        self._idle: list[Connection] = []
        self._owner: tuple[int, object] | None = None

    async def connect(self) -> Connection:
        """A new connection of our own (not pooled), set up as every statement expects."""
        try:
            connection = await psycopg.AsyncConnection.connect(
                self._conninfo, autocommit=True, **self._connect_args
            )
        except psycopg.Error as exc:
            raise BackendError(f"PostgreSQL {self._display}: cannot connect: {exc}") from exc
        try:
            with guard(connection.fileno(), self._options.timeout):
                # READ COMMITTED is what the statements' guarantees rest on; the server-side
                # statement_timeout frees the server if this client vanishes.
                await connection.execute(
                    "SELECT set_config('default_transaction_isolation', 'read committed', "
                    "false), set_config('statement_timeout', %(ms)s, false), "
                    "set_config('TimeZone', 'UTC', false)",
                    {"ms": str(int(self._options.timeout * 1000))},
                )
        except BaseException as exc:
            await close_quietly(connection)
            if isinstance(exc, psycopg.Error):
                raise BackendError(f"PostgreSQL {self._display}: {exc}") from exc
            raise
        return connection

    async def run(self, work: Callable[[Connection], Awaitable[T]]) -> T:
        """``work`` on a pooled connection, within the statement timeout; psycopg errors
        come out as BackendError. ``work`` is one statement or one short transaction."""
        if self._closed:
            raise BackendError(f"PostgreSQL {self._display}: the client is closed")
        # A statement cancelled half-way may still commit after the caller's undo (a
        # release): it runs to its end first. The deadlines bound the wait.
        return await io.complete(self._run_unshielded(work))

    async def execute(self, sql: str, params: dict[str, Any]) -> list[tuple[Any, ...]]:
        """One autocommit statement; its rows (none if it returns no result)."""

        async def fetch(connection: Connection) -> list[tuple[Any, ...]]:
            cursor = await connection.execute(sql, params)
            return await cursor.fetchall() if cursor.description is not None else []

        return await self.run(fetch)

    async def aclose(self) -> None:
        self._closed = True
        with self._mutex:
            idle, self._idle = self._idle, []
        if self._owner is not None and self._owner[0] == os.getpid():
            for connection in idle:
                await close_quietly(connection)
        else:
            abandon(idle)

    async def _run_unshielded(self, work: Callable[[Connection], Awaitable[T]]) -> T:
        self._claim()
        connection = await self._checkout()
        deadline: Deadline | None = None
        try:
            with guard(connection.fileno(), self._options.timeout) as deadline:
                if not self._ready:
                    await self._prepare(connection)
                    self._ready = True
                result = await work(connection)
        except BaseException as exc:
            await close_quietly(connection)
            if isinstance(exc, psycopg.Error):
                if isinstance(exc, psycopg.errors.UndefinedTable):
                    self._ready = False  # dropped behind our back: create it again next time
                raise self._error(exc, deadline) from exc
            raise
        await self._checkin(connection)
        return result

    def _claim(self) -> None:
        """Adopt this process / event loop: connections from a parent process (after fork)
        or from another event loop can't be used here."""
        pid = os.getpid()
        owner = (pid, io.scope())
        if self._owner == owner:
            return
        if self._owner is not None and self._owner[0] != pid:
            self._mutex = io.Mutex()  # a parent's thread may have held it at fork time
        with self._mutex:
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
            with self._mutex:
                connection = self._idle.pop() if self._idle else None
            if connection is None:
                return await self.connect()
            if connection.closed or has_pending_input(connection.fileno()):
                await close_quietly(connection)  # the server closed it while idle
                continue
            return connection

    async def _checkin(self, connection: Connection) -> None:
        with self._mutex:
            keep = not self._closed and len(self._idle) < self._options.pool_size
            if keep:
                self._idle.append(connection)
        if not keep:
            await close_quietly(connection)

    def _error(self, exc: psycopg.Error, deadline: Deadline | None) -> BackendError:
        if deadline is not None and deadline.fired:
            return BackendError(
                f"PostgreSQL {self._display}: no answer within {self._options.timeout} s"
            )
        return BackendError(f"PostgreSQL {self._display}: {exc}")


async def close_quietly(connection: Connection) -> None:
    with contextlib.suppress(Exception):
        await connection.close()
