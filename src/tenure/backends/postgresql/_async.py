"""``postgresql://`` and ``postgres://`` for asyncio, on psycopg 3's ``AsyncConnection``.

Every operation is one autocommit statement (see ``_sql``; a semaphore's acquire sometimes,
a read-write or fair lock's acquire always, one short pipelined transaction, see
``_semaphore_sql`` and ``_rwlock_sql``) on a connection borrowed from a
small pool of idle connections; a lock never depends on which connection runs the next
statement, nor on a transaction staying open. Waiters sleep until a ``NOTIFY`` for their
name arrives on the backend's one listening connection, shared by every waiter of the process
(or event loop).
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import logging
import math
import os
import threading
import time
import urllib.parse
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

import psycopg
import psycopg.conninfo
import psycopg.errors

from tenure._async.backend import AsyncBackend
from tenure._async.capabilities import (
    AsyncLeaseValueSupport,
    AsyncQueueSupport,
    AsyncSemaphoreSupport,
)
from tenure._concurrency import async_io as io
from tenure._errors import BackendError, ConfigurationError, limit_mismatch
from tenure._options import DEFAULT_GC_AFTER, gc_after_option
from tenure._types import Busy, Capabilities, Grant, Holder, LeaseInfo, LockInfo, Renewal
from tenure._urls import redact
from tenure._waiters import Waiters
from tenure.backends._sql_common import (
    SCHEMA_VERSION,
    SqlOptions,
    abandon,
    clip,
    has_pending_input,
    parse_schema_mark,
    schema_mark,
    sql_options,
)
from tenure.backends.postgresql import SCHEMES
from tenure.backends.postgresql._rwlock_sql import WAKE_PREFIX as RWLOCK_WAKE_PREFIX
from tenure.backends.postgresql._rwlock_sql import RwlockStatements
from tenure.backends.postgresql._semaphore_sql import WAKE_PREFIX, SemaphoreStatements
from tenure.backends.postgresql._sql import SWEEP_LOCK_TIMEOUT, Statements
from tenure.backends.postgresql._watchdog import Deadline, guard, shut_down

__all__ = ["BACKEND", "AsyncPostgreSQLBackend"]

T = TypeVar("T")
Connection = psycopg.AsyncConnection[tuple[Any, ...]]
logger = logging.getLogger("tenure")

OPTIONS = ("table", "timeout", "pool_size", "gc_after")
PIPELINES = hasattr(psycopg, "Pipeline") and psycopg.Pipeline.is_supported()
"""Whether psycopg (3.1 and later) and the libpq under it (14 and later) have pipeline mode;
without it the same messages go one by one (psycopg 3.0, the floor, has no pipelines)."""
MAX_REMEMBERED_NOTICES = 4096
SWEEP_EVERY = 60.0
"""Seconds between two clean-ups of one table by one backend object, at most (and at most
``gc_after``): an idle record goes between gc_after and gc_after + this after its last use."""
SWEEP_LIMIT = 1000
"""Names one clean-up removes at most; a clean-up that removed this many is due again at
once, so a backlog goes in bounded steps."""
SWEEP_LOCK_WAIT_MS = 100
"""A clean-up waits this long at most for a row lock, then gives up until next time."""


@dataclasses.dataclass(frozen=True)
class _Attempt:
    """Where the listener stood when an acquire attempt was sent (see ``wait_for_release``)."""

    listener: object
    name: str
    sequence: int
    epoch: int


@dataclasses.dataclass(frozen=True)
class _LeaseTable:
    """A primitive whose leases live apart from the locks (semaphores, read-write and fair
    locks): the statements of its steps, and how to read its rows."""

    kind: str
    release: str
    extend_many: str
    owned: str
    inspect: str
    listing: str
    breaking: str
    records: str
    """The table the clean-up sweeps, and its statement."""
    sweep: str
    info: Callable[[tuple[Any, ...]], LockInfo]


class AsyncPostgreSQLBackend(
    AsyncBackend, AsyncSemaphoreSupport, AsyncQueueSupport, AsyncLeaseValueSupport
):
    """Options (URL query or keyword): ``table`` (default ``tenure_locks``), ``timeout``
    seconds for connecting and for each statement (default 5; libpq connects in whole
    seconds, at least 2), ``pool_size`` idle connections kept (default 10), ``gc_after``
    seconds a name's record outlives its last use before clean-up removes it (default 30
    days; ``none`` keeps records forever). Every other query parameter goes to libpq
    (``sslmode``, ``application_name``, ``connect_timeout``...)."""

    schemes = SCHEMES
    capabilities = Capabilities(
        fencing="strictly increasing per name, and never going back: each is at least the "
        "server's clock in microseconds, so also after the clean-up of a name idle for "
        "gc_after (10 minutes by default) or a table that lost its rows",
        fences_survive_restart=True,
        fences_count_per_name=False,
        leases_survive_restart=True,
        wakeups="notification (LISTEN/NOTIFY)",
        multi_host=True,
        fault_tolerant=False,
    )
    max_backoff = 0.5
    notifies = True
    """Waiters are woken by NOTIFY; this only bounds the wait if a notification is lost
    (the listening connection reconnecting)."""

    def __init__(self, conninfo: str, connect_args: dict[str, Any], options: SqlOptions,
                 display: str, gc_after: float | None = DEFAULT_GC_AFTER) -> None:
        self._conninfo = conninfo
        self._gc_after = gc_after
        self._sweep_due: dict[str, float] = {}
        """When each table's next clean-up may run (``time.monotonic()``), by table."""
        self._connect_args = connect_args
        self._options = options
        self._display = display
        self._sql = Statements(options.table)
        self._semaphores = SemaphoreStatements(options.table)
        self._ready = False
        self._permits_ready = False
        self._rwlocks = RwlockStatements(options.table)
        self._rwlocks_ready = False
        semaphores, rwlocks = self._semaphores, self._rwlocks
        self._permit_table = _LeaseTable(
            "semaphore", semaphores.release, semaphores.extend_many, semaphores.owned,
            semaphores.inspect, semaphores.list_semaphores, semaphores.break_semaphore,
            semaphores.permits, semaphores.sweep, _semaphore_info,
        )
        self._queue_table = _LeaseTable(
            "rwlock", rwlocks.release, rwlocks.extend_many, rwlocks.owned, rwlocks.inspect,
            rwlocks.list_queues, rwlocks.break_queue, rwlocks.records, rwlocks.sweep,
            _queue_info,
        )
        self._closed = False
        self._mutex = io.Mutex()
        self._idle: list[Connection] = []
        self._owner: tuple[int, object] | None = None
        self._listener: AsyncListener | None = None

    @classmethod
    def from_url(cls, url: str, **options: Any) -> AsyncPostgreSQLBackend:
        parts = urllib.parse.urlsplit(url)
        if parts.scheme.lower() not in cls.schemes:
            raise ConfigurationError(f"not a PostgreSQL URL: {redact(url)!r}")
        query = urllib.parse.parse_qsl(parts.query, keep_blank_values=True)
        ours = {key: value for key, value in query if key in OPTIONS}
        settings, rest = sql_options("postgresql", ours, options, extra=("gc_after",))
        gc_after = gc_after_option("postgresql", rest.pop("gc_after", DEFAULT_GC_AFTER))
        libpq_query = urllib.parse.urlencode([(k, v) for k, v in query if k not in OPTIONS])
        # Rebuilt by hand, not with urlunsplit: that drops the "//" of an empty host, and
        # libpq's postgresql:///db (the local socket, or $PGHOST) becomes postgresql:/db,
        # which libpq does not read as a URL.
        conninfo = f"{parts.scheme}://{parts.netloc}{parts.path}"
        if libpq_query:
            conninfo += f"?{libpq_query}"
        try:
            params = psycopg.conninfo.conninfo_to_dict(conninfo)
        except psycopg.Error as exc:
            raise ConfigurationError(
                f"bad PostgreSQL URL {redact(url)!r}: {str(exc).strip()}"
            ) from None
        connect_args: dict[str, Any] = {}
        if "connect_timeout" not in params:
            connect_args["connect_timeout"] = max(2, math.ceil(settings.timeout))
        if "application_name" not in params:
            connect_args["application_name"] = "tenure"
        return cls(conninfo, connect_args, settings, redact(url), gc_after)

    def describe(self) -> str:
        return self._display

    def renewal_backend(self) -> AsyncPostgreSQLBackend:
        # psycopg's asyncio connections belong to the loop that opened them (``_claim``).
        return type(self)(
            self._conninfo, self._connect_args, self._options, self._display, self._gc_after
        )

    # ---- the atomic steps --------------------------------------------------------------

    async def acquire(
        self, name: str, token: str, ttl: float, holder: Holder, waited: Busy | None = None
    ) -> Grant | Busy:
        return await self._acquire(name, token, ttl, holder, None)

    async def acquire_with_value(
        self,
        name: str,
        token: str,
        ttl: float,
        holder: Holder,
        *,
        value: str,
        waited: Busy | None = None,
    ) -> Grant | Busy:
        return await self._acquire(name, token, ttl, holder, value)

    async def set_value(self, name: str, token: str, value: str) -> bool:
        params = {"name": name, "token": token, "value": value}
        return len(await self._execute(self._sql.set_value, params)) == 1

    async def _acquire(
        self, name: str, token: str, ttl: float, holder: Holder, value: str | None
    ) -> Grant | Busy:
        """The one acquire statement, for a plain lock (``value`` None) and an election."""
        listener = self._listener
        # Noted before the statement is sent, handed to wait_for_release in the Busy answer.
        attempt = None if listener is None else listener.attempt(name)
        params = {
            "name": name, "token": token, "ttl": ttl, "host": clip(holder.host, 1024),
            "pid": holder.pid, "thread": clip(holder.thread, 1024), "value": value,
        }
        rows = await self._execute(self._sql.acquire, params)
        fence, ttl_left = rows[0]
        if fence is not None:
            self._collect(self._sql.table, self._sql.sweep)
            return Grant(int(fence))
        return Busy(None if ttl_left is None else max(0.0, float(ttl_left)), attempt)

    async def release(self, name: str, token: str) -> bool:
        params = {"name": name, "token": token, "channel": self._sql.table}
        released = len(await self._execute(self._sql.release, params)) == 1
        self._collect(self._sql.table, self._sql.sweep)
        return released

    async def extend(self, name: str, token: str, ttl: float) -> bool:
        params = {"name": name, "token": token, "ttl": ttl}
        return len(await self._execute(self._sql.extend, params)) == 1

    async def extend_many(self, renewals: Sequence[Renewal]) -> list[bool]:
        if not renewals:
            return []
        return await self._extend_batch(self._sql.extend_many, renewals)

    async def _extend_batch(self, statement: str, renewals: Sequence[Renewal]) -> list[bool]:
        """Run one of the batched renewal statements (locks, permits, read-write leases):
        it returns the (name, token) of every lease it extended."""
        params = {
            "names": [r.name for r in renewals],
            "tokens": [r.token for r in renewals],
            "ttls": [r.ttl for r in renewals],
        }
        extended = {tuple(row) for row in await self._execute(statement, params)}
        return [(r.name, r.token) in extended for r in renewals]

    async def owned(self, name: str, token: str) -> bool:
        rows = await self._execute(self._sql.owned, {"name": name, "token": token})
        return len(rows) == 1

    async def inspect(self, name: str) -> LockInfo | None:
        rows = await self._execute(self._sql.inspect, {"name": name})
        return _info(rows[0]) if rows else None

    async def list_locks(self, prefix: str) -> list[LockInfo]:
        if not _storable(prefix):
            return []  # no accepted name contains NUL or unencodable text
        rows = await self._execute(self._sql.list_locks, {"prefix": prefix})
        return [_info(row) for row in rows]

    async def break_lock(self, name: str) -> bool:
        params = {"name": name, "channel": self._sql.table}
        return len(await self._execute(self._sql.break_lock, params)) == 1

    async def wait_for_release(
        self, name: str, timeout: float, busy: Busy | None = None
    ) -> None:
        """Sleep until a NOTIFY for ``name`` or ``timeout``.

        A release that lands between the failed acquire and the start of this wait would
        be missed; the acquire therefore noted in its ``busy`` answer how far the listener
        had got, and if a notice for ``name`` (or a reconnection of the listener) came
        since, this returns at once.
        """
        listener = self._listener_here()
        attempt = None if busy is None else busy.waiting
        signal = io.Signal()
        with listener.waiters.waiting(name, signal):
            if (
                isinstance(attempt, _Attempt)
                and attempt.listener is listener
                and attempt.name == name
                and listener.changed_since(attempt)
            ):
                return
            await signal.wait(timeout)

    async def aclose(self) -> None:
        self._closed = True
        if self._listener is not None:
            self._listener.close()
        with self._mutex:
            idle, self._idle = self._idle, []
        if self._owner is not None and self._owner[0] == os.getpid():
            for connection in idle:
                await _close_quietly(connection)
        else:
            abandon(idle)

    # ---- semaphores (SQL in ``_semaphore_sql``) -----------------------------------------

    async def _permits(self, *, create: bool, slots: bool = True) -> bool:
        """Whether the permits table exists (and, with ``slots``, has the slot rows' column;
        see ``_semaphore_sql``); with ``create``, make it, or add the column to one made
        before it, first (once, even with many processes racing). Made on the first
        semaphore acquire, not with the lock table: a user of locks alone needs no privilege
        on it. Without ``create`` nothing is written: a permit of ours can only be in a table
        with the column (our acquire added it), and reading or breaking permits needs none."""
        if self._permits_ready:
            return True
        sql, params = self._semaphores, {"permits": self._semaphores.quoted}

        async def ensure(connection: Connection) -> tuple[bool, bool]:
            cursor = await connection.execute(sql.exists, params)
            row = await cursor.fetchone()
            assert row is not None
            exists, upgraded = row
            if (exists and upgraded) or not create:
                return exists, upgraded
            async with connection.transaction():
                await connection.execute(self._sql.create_lock, {"table": self._sql.quoted})
                # Again under the lock: another process may have made or upgraded it since.
                cursor = await connection.execute(sql.exists, params)
                row = await cursor.fetchone()
                assert row is not None
                exists, upgraded = row
                if not exists:
                    await connection.execute(sql.create)
                elif not upgraded:
                    try:
                        await connection.execute(sql.add_holder_token)
                    except psycopg.errors.InsufficientPrivilege as exc:
                        raise ConfigurationError(
                            f"table {sql.permits!r} was created by an older tenure and this "
                            f"user may not add the column its semaphores now need; have the "
                            f"table's owner run: {sql.add_holder_token}"
                        ) from exc
            return True, True

        exists, upgraded = await self._run(ensure)
        self._permits_ready = exists and upgraded
        return exists and (upgraded or not slots)

    async def acquire_permit(
        self,
        name: str,
        token: str,
        ttl: float,
        holder: Holder,
        limit: int,
        *,
        waited: Busy | None = None,
    ) -> Grant | Busy:
        listener = self._listener
        attempt = None if listener is None else listener.attempt(WAKE_PREFIX + name)
        params = {
            "name": name, "token": token, "ttl": ttl, "limit": limit,
            "host": clip(holder.host, 1024), "pid": holder.pid,
            "thread": clip(holder.thread, 1024),
        }
        sql = self._semaphores
        await self._permits(create=True)

        async def decide(connection: Connection) -> tuple[Any, ...]:
            cursor = await connection.execute(sql.acquire, params)
            row = await cursor.fetchone()
            assert row is not None
            mine, granted, others, soonest, stored, room = row
            if mine is not None or granted is not None or not room:
                return mine, granted, others, soonest, stored
            # A grant landed between ACQUIRE's snapshot and its lock: decide again, under
            # the name's row lock.
            return await _granted_under_lock(connection, sql.lock_name, sql.grant, params)

        mine, granted, others, soonest, stored = await self._run(decide)
        if mine is not None or granted is not None:
            self._collect(sql.permits, sql.sweep)
            return Grant(int(mine if mine is not None else granted))
        if others and stored != limit:
            # Neither step writes anything on a mismatch (only expired permits go, as any
            # acquire would drop them), so refusing after the commit leaves no trace.
            raise limit_mismatch(name, int(stored), limit)
        return Busy(None if soonest is None else max(0.0, float(soonest)), attempt)

    async def release_permit(self, name: str, token: str) -> bool:
        return await self._release_lease(self._permit_table, name, token)

    async def extend_permits(self, renewals: Sequence[Renewal]) -> list[bool]:
        return await self._extend_leases(self._permit_table, renewals)

    async def permit_owned(self, name: str, token: str) -> bool:
        return await self._lease_owned(self._permit_table, name, token)

    async def inspect_semaphore(self, name: str) -> LockInfo | None:
        return await self._inspect_leases(self._permit_table, name)

    async def list_semaphores(self, prefix: str) -> list[LockInfo]:
        return await self._list_leases(self._permit_table, prefix)

    async def break_semaphore(self, name: str) -> bool:
        return await self._break_leases(self._permit_table, name)

    async def wait_for_permit(
        self, name: str, timeout: float, busy: Busy | None = None
    ) -> None:
        await self.wait_for_release(WAKE_PREFIX + name, timeout, busy)

    # ---- read-write and fair locks (SQL in ``_rwlock_sql``) -----------------------------

    async def _rwlock_tables(self, *, create: bool) -> bool:
        """Whether the read-write lock tables exist; with ``create``, make them first (once,
        even with many processes racing). Made on the first read-write or fair acquire, as
        the permits table is: a user of locks alone needs no privilege on them."""
        if self._rwlocks_ready:
            return True
        sql, params = self._rwlocks, {"entries": self._rwlocks.quoted_entries}

        async def ensure(connection: Connection) -> bool:
            cursor = await connection.execute(sql.exists, params)
            row = await cursor.fetchone()
            if row is not None and row[0]:
                return True
            if not create:
                return False
            async with connection.transaction():
                await connection.execute(self._sql.create_lock, {"table": self._sql.quoted})
                for statement in sql.create:
                    await connection.execute(statement)
            return True

        self._rwlocks_ready = await self._run(ensure)
        return self._rwlocks_ready

    async def acquire_queued(
        self,
        name: str,
        token: str,
        ttl: float,
        holder: Holder,
        *,
        mode: str,
        queue_ttl: float,
        waited: Busy | None = None,
    ) -> Grant | Busy:
        listener = self._listener
        # Noted before the statements are sent, handed to wait_for_turn in the Busy answer.
        attempt = None if listener is None else listener.attempt(RWLOCK_WAKE_PREFIX + name)
        params = {
            "name": name, "token": token, "ttl": ttl, "queue_ttl": queue_ttl, "mode": mode,
            "host": clip(holder.host, 1024), "pid": holder.pid,
            "thread": clip(holder.thread, 1024), "channel": self._sql.table,
        }
        sql = self._rwlocks
        await self._rwlock_tables(create=True)

        async def decide(connection: Connection) -> tuple[Any, ...]:
            return await _granted_under_lock(connection, sql.lock_name, sql.grant, params)

        renewed, granted, soonest, _ = await self._run(decide)
        if renewed is not None or granted is not None:
            self._collect(sql.records, sql.sweep)
            return Grant(int(renewed if renewed is not None else granted))
        return Busy(None if soonest is None else max(0.0, float(soonest)), attempt)

    async def release_queued(self, name: str, token: str) -> bool:
        return await self._release_lease(self._queue_table, name, token)

    async def extend_queued(self, renewals: Sequence[Renewal]) -> list[bool]:
        return await self._extend_leases(self._queue_table, renewals)

    async def queued_owned(self, name: str, token: str) -> bool:
        return await self._lease_owned(self._queue_table, name, token)

    async def inspect_queue(self, name: str) -> LockInfo | None:
        return await self._inspect_leases(self._queue_table, name)

    async def list_queues(self, prefix: str) -> list[LockInfo]:
        return await self._list_leases(self._queue_table, prefix)

    async def break_queue(self, name: str) -> bool:
        return await self._break_leases(self._queue_table, name)

    async def wait_for_turn(self, name: str, timeout: float, busy: Busy | None = None) -> None:
        await self.wait_for_release(RWLOCK_WAKE_PREFIX + name, timeout, busy)

    # ---- the steps semaphores and queued locks share: leases kept apart from the locks ----

    async def _table_ready(self, table: _LeaseTable, *, write: bool) -> bool:
        """Whether ``table``'s tables exist (a permit is written only to a permits table with
        the slot rows' column: see ``_permits``); nothing is created or altered."""
        if table.kind == "semaphore":
            return await self._permits(create=False, slots=write)
        return await self._rwlock_tables(create=False)

    async def _release_lease(self, table: _LeaseTable, name: str, token: str) -> bool:
        if not await self._table_ready(table, write=True):
            return False
        params = {"name": name, "token": token, "channel": self._sql.table}
        rows = await self._execute(table.release, params)
        self._collect(table.records, table.sweep)
        return bool(rows and rows[0][0])

    async def _extend_leases(self, table: _LeaseTable, renewals: Sequence[Renewal]) -> list[bool]:
        if not renewals or not await self._table_ready(table, write=True):
            return [False] * len(renewals)
        return await self._extend_batch(table.extend_many, renewals)

    async def _lease_owned(self, table: _LeaseTable, name: str, token: str) -> bool:
        if not await self._table_ready(table, write=True):
            return False
        return len(await self._execute(table.owned, {"name": name, "token": token})) == 1

    async def _inspect_leases(self, table: _LeaseTable, name: str) -> LockInfo | None:
        if not await self._table_ready(table, write=False):
            return None
        rows = await self._execute(table.inspect, {"name": name})
        return table.info(rows[0]) if rows else None

    async def _list_leases(self, table: _LeaseTable, prefix: str) -> list[LockInfo]:
        if not _storable(prefix) or not await self._table_ready(table, write=False):
            return []
        return [table.info(row) for row in await self._execute(table.listing, {"prefix": prefix})]

    async def _break_leases(self, table: _LeaseTable, name: str) -> bool:
        if not await self._table_ready(table, write=False):
            return False
        params = {"name": name, "channel": self._sql.table}
        return len(await self._execute(table.breaking, params)) > 0

    # ---- clean-up (rule 10) -------------------------------------------------------------

    def _collect(self, table: str, statement: str) -> None:
        """Start the clean-up of ``table`` (a ``sweep`` statement) in the background if it is
        due: at most once per ``min(gc_after, SWEEP_EVERY)`` per table and backend object,
        after a grant or a release of its kind. The acquire/release cycle itself never waits
        for it nor sends anything more."""
        gc_after = self._gc_after
        if gc_after is None:
            return
        now = time.monotonic()
        with self._mutex:
            if self._closed or self._sweep_due.get(table, 0.0) > now:
                return
            # Claimed under the mutex: other threads and tasks skip it until then.
            self._sweep_due[table] = now + min(gc_after, SWEEP_EVERY)
        params = {"gc_after": gc_after, "limit": SWEEP_LIMIT, "ms": str(SWEEP_LOCK_WAIT_MS)}

        async def sweep(connection: Connection) -> int:
            # A transaction, only so that the lock timeout is its own and ends with it.
            async with connection.transaction():
                await connection.execute(SWEEP_LOCK_TIMEOUT, params)
                cursor = await connection.execute(statement, params)
                row = await cursor.fetchone()
            assert row is not None
            return int(row[0])

        async def clean_up() -> None:
            try:
                # On a connection of its own: the pool the lock steps use stays as it was
                # (no extra idle connection left behind, none taken from under them).
                removed = await self._run(sweep, pooled=False)
            except BackendError as exc:  # a lock wait given up, a server away: next time
                logger.debug("tenure: PostgreSQL clean-up of %s: %s", table, exc)
                return
            if removed >= SWEEP_LIMIT:
                with self._mutex:
                    self._sweep_due[table] = 0.0  # more to remove: due again at once

        io.start_background(clean_up, name="tenure-postgresql-clean-up")

    # ---- connections -------------------------------------------------------------------

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

    async def _connect(self) -> Connection:
        try:
            connection = await psycopg.AsyncConnection.connect(
                self._conninfo, autocommit=True, **self._connect_args
            )
        except psycopg.Error as exc:
            raise BackendError(f"PostgreSQL {self._display}: cannot connect: {exc}") from exc
        try:
            with guard(connection.fileno(), self._options.timeout):
                # READ COMMITTED is what the acquire statement's guarantee rests on; the
                # server-side statement_timeout frees the server if this client vanishes.
                await connection.execute(
                    "SELECT set_config('default_transaction_isolation', 'read committed', "
                    "false), set_config('statement_timeout', %(ms)s, false), "
                    "set_config('TimeZone', 'UTC', false)",
                    {"ms": str(int(self._options.timeout * 1000))},
                )
        except BaseException as exc:
            await _close_quietly(connection)
            if isinstance(exc, psycopg.Error):
                raise BackendError(f"PostgreSQL {self._display}: {exc}") from exc
            raise
        return connection

    async def _checkout(self) -> Connection:
        while True:
            with self._mutex:
                connection = self._idle.pop() if self._idle else None
            if connection is None:
                return await self._connect()
            if connection.closed or has_pending_input(connection.fileno()):
                await _close_quietly(connection)  # the server closed it while idle
                continue
            return connection

    async def _checkin(self, connection: Connection) -> None:
        with self._mutex:
            keep = not self._closed and len(self._idle) < self._options.pool_size
            if keep:
                self._idle.append(connection)
        if not keep:
            await _close_quietly(connection)

    async def _run(self, work: Callable[[Connection], Awaitable[T]], *,
                   pooled: bool = True) -> T:
        """Run ``work`` on a connection of the pool, or (``pooled=False``) on one of its own,
        closed afterwards."""
        if self._closed:
            raise BackendError(f"PostgreSQL {self._display}: the client is closed")
        # A statement cancelled half-way may still commit after the caller's undo (a
        # release): it runs to its end first. The deadlines bound the wait.
        return await io.complete(self._run_unshielded(work, pooled))

    async def _run_unshielded(self, work: Callable[[Connection], Awaitable[T]],
                              pooled: bool) -> T:
        self._claim()
        connection = await self._checkout() if pooled else await self._connect()
        deadline: Deadline | None = None
        try:
            with guard(connection.fileno(), self._options.timeout) as deadline:
                if not self._ready:
                    await self._prepare(connection)
                    self._ready = True
                result = await work(connection)
        except BaseException as exc:
            await _close_quietly(connection)
            if isinstance(exc, psycopg.Error):
                if isinstance(exc, (psycopg.errors.UndefinedTable, psycopg.errors.UndefinedColumn)):
                    # Dropped (or made anew by an older tenure, without the value's columns)
                    # behind our back: create or upgrade it again next time.
                    self._ready = False
                    self._permits_ready = False
                    self._rwlocks_ready = False
                raise self._error(exc, deadline) from exc
            raise
        if pooled:
            await self._checkin(connection)
        else:
            await _close_quietly(connection)
        return result

    async def _execute(self, sql: str, params: dict[str, Any]) -> list[tuple[Any, ...]]:
        async def fetch(connection: Connection) -> list[tuple[Any, ...]]:
            cursor = await connection.execute(sql, params)
            return await cursor.fetchall() if cursor.description is not None else []

        return await self._run(fetch)

    def _error(self, exc: psycopg.Error, deadline: Deadline | None) -> BackendError:
        if deadline is not None and deadline.fired:
            return BackendError(
                f"PostgreSQL {self._display}: no answer within {self._options.timeout} s"
            )
        return BackendError(f"PostgreSQL {self._display}: {exc}")

    async def _prepare(self, connection: Connection) -> None:
        """Create the table on first use, or add the election value's columns to one made
        before them (once, even with many processes racing), and check its schema version."""
        params = {"table": self._sql.quoted}
        cursor = await connection.execute(self._sql.schema, params)
        row = await cursor.fetchone()
        assert row is not None
        exists, comment, values = row
        if exists:
            _check_schema(self._sql.table, comment)  # never alter a table that is not ours
        if not exists or not values:
            async with connection.transaction():
                await connection.execute(self._sql.create_lock, params)
                cursor = await connection.execute(self._sql.schema, params)
                row = await cursor.fetchone()
                assert row is not None
                exists, comment, values = row
                if not exists:
                    await connection.execute(self._sql.create)
                    await connection.execute(self._sql.comment)
                    comment = schema_mark()
                elif not values:
                    _check_schema(self._sql.table, comment)
                    try:
                        await connection.execute(self._sql.add_values)
                    except psycopg.errors.InsufficientPrivilege as exc:
                        raise ConfigurationError(
                            f"table {self._sql.table!r} was created by an older tenure and "
                            f"this user may not add the columns elections need; have the "
                            f"table's owner run: {self._sql.add_values.strip()}"
                        ) from exc
        _check_schema(self._sql.table, comment)

    # ---- waiting -----------------------------------------------------------------------

    def _listener_here(self) -> AsyncListener:
        listener = self._listener
        if listener is None or not listener.serves_here():
            if listener is not None:
                listener.abandon()
            listener = self._listener = AsyncListener(self)
            listener.start()
        return listener


class AsyncListener:
    """The backend's one LISTEN connection: a background task (threads: a daemon thread)
    that turns notifications into wake-ups of this process's waiters, reconnecting with
    back-off when the connection drops."""

    def __init__(self, backend: AsyncPostgreSQLBackend) -> None:
        self.waiters = Waiters()
        self._backend = backend
        self._pid = os.getpid()
        self._scope = io.scope()
        self._mutex = threading.Lock()  # the listener and the waiters may be different threads
        self._sequence = 0
        self._epoch = 0
        self._connected = False
        self._notices: OrderedDict[str, int] = OrderedDict()
        self._closed = False
        self._connection: Connection | None = None

    def serves_here(self) -> bool:
        return not self._closed and self._pid == os.getpid() and self._scope is io.scope()

    def start(self) -> None:
        io.start_background(self._run, name="tenure-postgresql-listener")

    def attempt(self, name: str) -> _Attempt:
        with self._mutex:
            epoch = self._epoch if self._connected else -1
            return _Attempt(self, name, self._sequence, epoch)

    def changed_since(self, attempt: _Attempt) -> bool:
        """A notice for the attempt's name arrived, or the connection came up or went down,
        since the attempt: the lock may be free now."""
        with self._mutex:
            epoch = self._epoch if self._connected else -1
            if epoch != attempt.epoch:
                return epoch != -1 or attempt.epoch != -1
            return self._notices.get(attempt.name, -1) > attempt.sequence

    def close(self) -> None:
        with self._mutex:
            self._closed = True
            connection = self._connection
            if connection is not None and not connection.closed:
                # Wakes the listener out of its wait; it then closes the connection itself.
                shut_down(connection.fileno())

    def abandon(self) -> None:
        """Forget a listener of a parent process or of another event loop, without touching
        its connection through a loop or thread that no longer runs."""
        with self._mutex:
            self._closed = True
            connection = self._connection
        if connection is None:
            return
        if self._pid != os.getpid():
            abandon([connection])
        else:
            connection.pgconn.finish()

    def _stopped(self) -> bool:
        return self._closed

    def _deliver(self, name: str) -> None:
        with self._mutex:
            self._sequence += 1
            self._notices[name] = self._sequence
            self._notices.move_to_end(name)
            if len(self._notices) > MAX_REMEMBERED_NOTICES:
                self._notices.popitem(last=False)
        self.waiters.notify(name)

    async def _run(self) -> None:
        retry = 0.05
        while not self._closed:
            connection: Connection | None = None
            try:
                connection = await self._backend._connect()
                with self._mutex:
                    if self._stopped():
                        break
                    self._connection = connection
                await connection.execute(self._backend._sql.listen)
                with self._mutex:
                    self._epoch += 1
                    self._connected = True
                retry = 0.05
                async for notice in connection.notifies():
                    self._deliver(notice.payload)
            except (BackendError, psycopg.Error) as exc:
                if not self._closed:
                    logger.debug("tenure: PostgreSQL listener: %s; reconnecting", exc)
            finally:
                with self._mutex:
                    self._connected = False
                    self._connection = None
                if connection is not None and self._pid == os.getpid():
                    await _close_quietly(connection)
            if not self._closed:
                await io.sleep(retry)
                retry = min(retry * 2, 2.0)


async def _close_quietly(connection: Connection) -> None:
    with contextlib.suppress(Exception):
        await connection.close()


def _storable(text: str) -> bool:
    if "\x00" in text:
        return False
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


async def _granted_under_lock(
    connection: Connection, lock_name: str, grant: str, params: dict[str, Any]
) -> tuple[Any, ...]:
    """``grant``'s row, decided in one transaction under the name's record row lock
    (``lock_name``): a semaphore's locked retry, a read-write lock's acquire. In a pipeline
    the transaction's four messages go out together and their answers come back together
    (one round trip); the server runs them in order, and a failed one aborts the rest and
    the connection is dropped (``_run``), so that transaction never commits."""

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


def _check_schema(table: str, comment: str | None) -> None:
    version = parse_schema_mark(comment)
    if version is None:
        raise ConfigurationError(
            f"table {table!r} exists but is not a tenure lock table (its comment carries no "
            f"schema mark); choose another table name with the 'table' option"
        )
    if version > SCHEMA_VERSION:
        raise ConfigurationError(
            f"table {table!r} has tenure schema {version}, newer than this tenure's "
            f"{SCHEMA_VERSION}: upgrade tenure"
        )


def _info(row: tuple[Any, ...]) -> LockInfo:
    name, fence, live, host, pid, thread, acquired_at, ttl_left, value = row
    if not live:
        return LockInfo(name, int(fence), None, None, None)
    return LockInfo(
        name,
        int(fence),
        Holder(host, int(pid), thread),
        acquired_at.astimezone(datetime.UTC),
        max(0.0, float(ttl_left)),
        value=value,
    )


def _semaphore_info(row: tuple[Any, ...]) -> LockInfo:
    name, fence, limit, hosts, pids, threads, since, left, fences = row
    leases = tuple(
        LeaseInfo(
            Holder(host, int(pid), thread), acquired.astimezone(datetime.UTC),
            max(0.0, float(ttl_left)), int(permit_fence),
        )
        for host, pid, thread, acquired, ttl_left, permit_fence
        in zip(hosts, pids, threads, since, left, fences, strict=True)
    )
    return LockInfo(
        name, int(fence), None, None, None, kind="semaphore",
        limit=None if limit is None else int(limit), leases=leases,
    )


def _queue_info(row: tuple[Any, ...]) -> LockInfo:
    name, fence, queued, leases = row
    return LockInfo(
        name, int(fence), None, None, None, kind="rwlock", queued=int(queued),
        leases=tuple(
            LeaseInfo(
                Holder(host, int(pid), thread),
                datetime.datetime.fromtimestamp(float(acquired_at), datetime.UTC),
                max(0.0, float(ttl_left)), int(lease_fence), mode,
            )
            for mode, host, pid, thread, acquired_at, ttl_left, lease_fence in leases or ()
        ),
    )


BACKEND = AsyncPostgreSQLBackend
