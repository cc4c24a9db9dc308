"""``postgresql://`` and ``postgres://`` for asyncio, on psycopg 3's ``AsyncConnection``.

Every verb is one autocommit statement (``_sql``; a semaphore's acquire sometimes, a
read-write or fair lock's acquire always, one short pipelined transaction: see
``_semaphore_sql`` and ``_rwlock_sql``) on a connection borrowed from the store's pool
(``connection``). Locks live in the lock table, semaphores' permits and read-write leases in
tables of their own (``schema``), so each verb picks its kind's statements; waiters sleep
until a ``NOTIFY`` for their name (``listener``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from tenure._async.store import WITH_WEIGHTS, AsyncStore, extend_by_kind
from tenure._errors import limit_mismatch
from tenure._types import Busy, Capabilities, Grant, Holder, Kind, LeaseSpec, LockInfo, Renewal
from tenure.backends._sql_common import clip
from tenure.backends.postgresql import SCHEMES
from tenure.backends.postgresql._async.attempt import AsyncPostgreSQLAttempt
from tenure.backends.postgresql._async.cleanup import AsyncCleanup
from tenure.backends.postgresql._async.connection import AsyncPool, Connection, granted_under_lock
from tenure.backends.postgresql._async.listener import AsyncListener, Mark
from tenure.backends.postgresql._async.schema import AsyncSchema
from tenure.backends.postgresql._config import PostgreSQLSettings, settings_from_url
from tenure.backends.postgresql._errors import DRIVER_ERRORS
from tenure.backends.postgresql._records import record
from tenure.backends.postgresql._rwlock_sql import WAKE_PREFIX as RWLOCK_WAKE_PREFIX
from tenure.backends.postgresql._rwlock_sql import RwlockStatements
from tenure.backends.postgresql._semaphore_sql import WAKE_PREFIX as SEMAPHORE_WAKE_PREFIX
from tenure.backends.postgresql._semaphore_sql import SemaphoreStatements
from tenure.backends.postgresql._sql import Statements

__all__ = ["AsyncPostgreSQLStore"]

CHANNEL_PREFIXES = {Kind.LOCK: "", Kind.SEMAPHORE: SEMAPHORE_WAKE_PREFIX,
                    Kind.RWLOCK: RWLOCK_WAKE_PREFIX}
"""A NOTIFY payload names the kind and the name: a waiter hears its own kind's releases."""


@dataclasses.dataclass(frozen=True)
class _Statements:
    """One kind's statements for the verbs after acquire (each kind's records live in
    tables of their own), and the table its clean-up sweeps."""

    release: str
    extend_many: str
    owned: str
    inspect: str
    listing: str
    breaking: str
    records: str
    sweep: str


class AsyncPostgreSQLStore(AsyncStore):
    """Options (URL query or keyword): ``table`` (default ``tenure_locks``), ``timeout``
    seconds for connecting and for each statement (default 5; libpq connects in whole
    seconds, at least 2), ``pool_size`` idle connections kept (default 10), ``gc_after``
    seconds a name's record outlives its last use before clean-up removes it (default 30
    days; ``none`` keeps records forever). Every other query parameter goes to libpq
    (``sslmode``, ``application_name``, ``connect_timeout``...)."""
    attempt_class = AsyncPostgreSQLAttempt

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
    offers = WITH_WEIGHTS
    driver_errors = DRIVER_ERRORS
    max_backoff = 0.5
    notifies = True
    """Waiters are woken by NOTIFY; this only bounds the wait if a notification is lost
    (the listening connection reconnecting)."""

    def __init__(self, settings: PostgreSQLSettings) -> None:
        self._settings = settings
        table = settings.options.table
        self._sql = Statements(table)
        self._semaphores = semaphores = SemaphoreStatements(table)
        self._rwlocks = rwlocks = RwlockStatements(table)
        self._schema = AsyncSchema(self._sql, semaphores, rwlocks)
        self._pool = AsyncPool(settings, prepare=self._schema.prepare,
                               forget=self._schema.forget)
        self._cleanup = AsyncCleanup(self._pool, settings.gc_after)
        self._listener: AsyncListener | None = None
        sql = self._sql
        self._statements = {
            Kind.LOCK: _Statements(
                sql.release, sql.extend_many, sql.owned, sql.inspect, sql.list_locks,
                sql.break_lock, sql.table, sql.sweep,
            ),
            Kind.SEMAPHORE: _Statements(
                semaphores.release, semaphores.extend_many, semaphores.owned,
                semaphores.inspect, semaphores.list_semaphores, semaphores.break_semaphore,
                semaphores.permits, semaphores.sweep,
            ),
            Kind.RWLOCK: _Statements(
                rwlocks.release, rwlocks.extend_many, rwlocks.owned, rwlocks.inspect,
                rwlocks.list_queues, rwlocks.break_queue, rwlocks.records, rwlocks.sweep,
            ),
        }

    @classmethod
    def from_url(cls, url: str, **options: Any) -> AsyncPostgreSQLStore:
        return cls(settings_from_url(url, **options))

    def describe(self) -> str:
        return self._settings.display

    def renewal_store(self) -> AsyncPostgreSQLStore:
        # psycopg's asyncio connections belong to the loop that opened them (``_claim``).
        return type(self)(self._settings)

    async def aclose(self) -> None:
        if self._listener is not None:
            self._listener.close()
        await self._pool.aclose()

    # ---- the verbs ------------------------------------------------------------------------

    async def acquire(
        self, name: str, spec: LeaseSpec, token: str, ttl: float, holder: Holder
    ) -> Grant | Busy:
        params: dict[str, Any] = {
            "name": name, "token": token, "ttl": ttl, "host": clip(holder.host, 1024),
            "pid": holder.pid, "thread": clip(holder.thread, 1024),
        }
        if spec.kind is Kind.SEMAPHORE:
            return await self._acquire_permit(name, spec, params)
        if spec.kind is Kind.RWLOCK:
            return await self._acquire_queued(spec, params)
        params["value"] = spec.value
        fence, ttl_left = (await self._pool.execute(self._sql.acquire, params))[0]
        if fence is not None:
            self._cleanup.collect(self._sql.table, self._sql.sweep)
            return Grant(int(fence))
        return _busy(ttl_left)

    async def _acquire_permit(self, name: str, spec: LeaseSpec, params: dict[str, Any]
                              ) -> Grant | Busy:
        sql = self._semaphores
        limit = spec.limit
        params.update(limit=limit, weight=spec.weight, queue_ttl=spec.queue_ttl,
                      channel=self._sql.table)
        await self._schema.permits(self._pool, create=True)

        async def decide(connection: Connection) -> tuple[Any, ...]:
            cursor = await connection.execute(sql.acquire, params)
            row = await cursor.fetchone()
            assert row is not None
            mine, granted, others, soonest, stored, room, queue = row
            if mine is not None or granted is not None or (others and stored != limit):
                return mine, granted, others, soonest, stored
            if not room and not queue and spec.queue_ttl is None:
                return mine, granted, others, soonest, stored
            # A grant landed between ACQUIRE's snapshot and its lock, or the name has a
            # queue, or this refusal takes a place in it: decide again, under the name's
            # row lock.
            row = await granted_under_lock(connection, sql.lock_name, sql.grant, params)
            return tuple(row[:5])

        mine, granted, others, soonest, stored = await self._pool.run(decide)
        if mine is not None or granted is not None:
            self._cleanup.collect(sql.permits, sql.sweep)
            return Grant(int(mine if mine is not None else granted))
        if others and stored != limit:
            # Neither step writes anything on a mismatch (only expired permits go, as any
            # acquire would drop them), so refusing after the commit leaves no trace.
            raise limit_mismatch(name, int(stored), limit)
        return _busy(soonest)

    async def _acquire_queued(self, spec: LeaseSpec, params: dict[str, Any]) -> Grant | Busy:
        sql = self._rwlocks
        params.update(mode=str(spec.mode), queue_ttl=spec.queue_ttl, channel=self._sql.table,
                      fair=spec.fair or None)
        await self._schema.rwlock_tables(self._pool, create=True)

        async def decide(connection: Connection) -> tuple[Any, ...]:
            return await granted_under_lock(connection, sql.lock_name, sql.grant, params)

        renewed, granted, soonest, _ = await self._pool.run(decide)
        if renewed is not None or granted is not None:
            self._cleanup.collect(sql.records, sql.sweep)
            return Grant(int(renewed if renewed is not None else granted))
        return _busy(soonest)

    async def release(self, kind: Kind, name: str, token: str) -> bool:
        statements = await self._kind(kind, write=True)
        if statements is None:
            return False
        params = {"name": name, "token": token, "channel": self._sql.table}
        rows = await self._pool.execute(statements.release, params)
        self._cleanup.collect(statements.records, statements.sweep)
        if kind is Kind.LOCK:
            return len(rows) == 1
        return bool(rows and rows[0][0])  # False: a waiting place left, no lease ended

    async def extend_many(self, renewals: Sequence[Renewal]) -> list[bool]:
        return await extend_by_kind(renewals, self._extend)

    async def _extend(self, kind: Kind, renewals: Sequence[Renewal]) -> list[bool]:
        statements = await self._kind(kind, write=True)
        if statements is None or not renewals:
            return [False] * len(renewals)
        # The statement returns the (name, token) of every lease it extended.
        rows = await self._pool.execute(statements.extend_many, {
            "names": [r.name for r in renewals],
            "tokens": [r.token for r in renewals],
            "ttls": [r.ttl for r in renewals],
        })
        extended = {tuple(row) for row in rows}
        return [(r.name, r.token) in extended for r in renewals]

    async def owned(self, kind: Kind, name: str, token: str) -> bool:
        statements = await self._kind(kind, write=True)
        if statements is None:
            return False
        rows = await self._pool.execute(statements.owned, {"name": name, "token": token})
        return len(rows) == 1

    async def inspect(self, kind: Kind, name: str) -> LockInfo | None:
        statements = await self._kind(kind, write=False)
        if statements is None:
            return None
        rows = await self._pool.execute(statements.inspect, {"name": name})
        return record(kind, rows[0]) if rows else None

    async def list_records(self, kind: Kind, prefix: str) -> list[LockInfo]:
        if not _storable(prefix):
            return []  # no accepted name contains NUL or unencodable text
        statements = await self._kind(kind, write=False)
        if statements is None:
            return []
        rows = await self._pool.execute(statements.listing, {"prefix": prefix})
        return [record(kind, row) for row in rows]

    async def break_leases(self, kind: Kind, name: str) -> bool:
        statements = await self._kind(kind, write=False)
        if statements is None:
            return False
        params = {"name": name, "channel": self._sql.table}
        return len(await self._pool.execute(statements.breaking, params)) > 0

    async def set_value(self, name: str, token: str, value: str) -> bool:
        params = {"name": name, "token": token, "value": value}
        return len(await self._pool.execute(self._sql.set_value, params)) == 1

    async def _kind(self, kind: Kind, *, write: bool) -> _Statements | None:
        """``kind``'s statements; None if its tables were never made (so it holds nothing).
        The lock table is made by the first statement of all (``schema``)."""
        if kind is Kind.LOCK or await self._schema.ready(self._pool, kind, write=write):
            return self._statements[kind]
        return None

    # ---- waiting (for ``AsyncPostgreSQLAttempt``) ------------------------------------------

    @staticmethod
    def channel(kind: Kind, name: str) -> str:
        """The NOTIFY payload a release of ``kind`` on ``name`` sends."""
        return CHANNEL_PREFIXES[kind] + name

    def mark(self, channel: str) -> Mark | None:
        """How far the listener had got, taken before an acquire is sent (None: none yet)."""
        listener = self._listener
        return None if listener is None else listener.mark(channel)

    async def wait(self, channel: str, timeout: float, mark: Mark | None) -> None:
        """Sleep until a NOTIFY on ``channel`` or ``timeout``; at once if one came since
        ``mark``. Starts this process's (event loop's) listener on first use."""
        listener = self._listener
        if listener is None or not listener.serves_here():
            if listener is not None:
                listener.abandon()
            listener = self._listener = AsyncListener(self._pool, self._sql.listen)
            listener.start()
        await listener.wait(channel, timeout, mark)


def _busy(ttl_left: Any) -> Busy:
    return Busy(None if ttl_left is None else max(0.0, float(ttl_left)))


def _storable(text: str) -> bool:
    if "\x00" in text:
        return False
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True
