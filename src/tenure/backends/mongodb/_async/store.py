"""``mongodb://`` and ``mongodb+srv://`` for asyncio, through PyMongo's ``AsyncMongoClient``:
the store's verbs, each written once for every kind.

Each verb is one server-side step built from the kind's statements (``_kinds``, which draws
on ``_documents`` for locks, ``_semaphores``, and ``_rwlocks`` for read-write and fair locks);
the I/O is ``connection``'s, and the driver's errors become the one ``BackendError`` form in
the base (``tenure._async.store``), from the table in ``_errors``.

Waiting: a release in this process wakes this process's waiters at once; waiters elsewhere
retry with jittered back-off (the lease logic's), each pause bounded by the holder's remaining
lease: its expiry as the server wrote it, less the server's time. MongoDB's change streams
could announce releases across processes on a replica set, but the stand-in server the test
suite runs on has none, so they are not used (see docs/backends/mongodb.md). A waiter in a
read-write or fair lock's queue, or a semaphore's (weighted FIFO permits), pauses at most a
third of its place's lease between attempts, so its place stays alive while it waits.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tenure._async.store import WITH_WEIGHTS, AsyncAttempt, AsyncStore, extend_by_kind, failure
from tenure._async.wakeups import wait_for_notice
from tenure._concurrency import async_io as io
from tenure._errors import InvalidArgument, InvalidArgumentType, limit_mismatch
from tenure._types import Busy, Capabilities, Grant, Holder, Kind, LeaseSpec, LockInfo, Renewal
from tenure._urls import redact
from tenure._validation import validate_name
from tenure.backends.mongodb import SCHEMES
from tenure.backends.mongodb._async.connection import AsyncConnection
from tenure.backends.mongodb._config import MongoSettings, parse_settings, release_waiters
from tenure.backends.mongodb._documents import (
    Document,
    held_by,
    milliseconds,
    name_filter,
    prefix_filter,
    set_value_update,
)
from tenure.backends.mongodb._errors import DRIVER_ERRORS, driver_message
from tenure.backends.mongodb._kinds import (
    STATEMENTS,
    acquire_pipeline,
    granted_fence,
    soonest_expiry,
)
from tenure.backends.mongodb._records import to_info, utc

__all__ = ["AsyncMongoDBAttempt", "AsyncMongoDBStore"]


class AsyncMongoDBAttempt(AsyncAttempt):
    """The default polling attempt, whose pauses end at a release in this process."""

    store: AsyncMongoDBStore

    async def wait(self, timeout: float, busy: Busy) -> None:
        key = STATEMENTS[self.spec.kind].wake_key(self.name)
        await wait_for_notice(self.store.waiters, key, self.before_place_lapses(timeout))


class AsyncMongoDBStore(AsyncStore):
    """Options (URL query or keyword): ``database``, ``collection``, ``write_concern``,
    ``read_concern``, ``timeout``, ``gc_after``; every other one goes to PyMongo. See
    ``tenure.backends.mongodb._config`` and docs/backends/mongodb.md."""
    attempt_class = AsyncMongoDBAttempt

    schemes = SCHEMES
    capabilities = Capabilities(
        fencing="strictly increasing per name, and never going back: kept in the lock's "
        "document across releases, and each at least the server's clock in microseconds, so "
        "also after clean-up deleted a document unused for gc_after (10 minutes by default) or "
        "the server lost it",
        fences_survive_restart=True,
        fences_count_per_name=False,
        leases_survive_restart=True,
        wakeups="in-process; back-off across processes",
        multi_host=True,
        fault_tolerant=True,
    )
    offers = WITH_WEIGHTS
    driver_errors = DRIVER_ERRORS
    max_backoff = 0.05

    def __init__(self, settings: MongoSettings) -> None:
        self.settings = settings
        self.connection = AsyncConnection(settings, self.describe())
        self.waiters = release_waiters(settings)

    @classmethod
    def from_url(cls, url: str, **options: Any) -> AsyncMongoDBStore:
        return cls(parse_settings(url, options))

    def describe(self) -> str:
        return redact(self.settings.url)

    def error_detail(self, error: BaseException) -> str:
        return driver_message(error)

    def renewal_store(self) -> AsyncMongoDBStore:
        # PyMongo's asyncio client belongs to the loop that opened it.
        return type(self)(self.settings)

    def unanswered(self, seconds: float) -> BaseException:
        # What the caller's deadline cut short: the driver's last error, where it has one.
        return self.connection.last_error() or super().unanswered(seconds)

    async def aclose(self) -> None:
        try:
            await self.connection.aclose()
        except self.driver_errors as exc:
            raise failure(self.describe(), "close", "the client", exc) from exc

    # ---- the verbs ---------------------------------------------------------------------------

    async def acquire(
        self, name: str, spec: LeaseSpec, token: str, ttl: float, holder: Holder
    ) -> Grant | Busy:
        validate_name(name)
        update = acquire_pipeline(spec, token, ttl, holder, self.settings.gc_after_ms)
        # Runs to its end even if the caller is cancelled: the lease logic's undo (a release
        # of this token, or leaving the queue) must come after it, and PyMongo's connections
        # stay out of their cancelled-mid-I/O paths.
        return await io.complete(self._acquire(name, spec, token, update))

    async def _acquire(
        self, name: str, spec: LeaseSpec, token: str, update: list[Document]
    ) -> Grant | Busy:
        kind = spec.kind
        document = await self.connection.upsert(kind, name, update)
        if document is None and kind is Kind.RWLOCK:
            # Another client's upsert created the document between our look and our insert:
            # it exists now, so the same step updates it.
            document = await self.connection.upsert(kind, name, update)
        if document is None:
            # Another client's upsert created the document first: a lock's holder, or a
            # semaphore's to try again at once.
            return Busy(0.0 if kind is Kind.SEMAPHORE else None)
        fence = granted_fence(kind, document, token)
        if fence is not None:
            return Grant(fence)
        if kind is Kind.SEMAPHORE:
            stored = document.get("limit")
            if document.get("permits") and stored is not None and int(stored) != spec.limit:
                raise limit_mismatch(name, int(stored), spec.limit)
        ends_at = soonest_expiry(kind, document)
        if kind is not Kind.LOCK:
            # The step's own $$NOW is in its after-image: no second question.
            now = utc(document.get("updated_at"))
        else:
            now = None if ends_at is None else await self.connection.server_now(kind)
        if ends_at is None or now is None:
            return Busy(None)
        return Busy(max(0.0, (ends_at - now).total_seconds()))

    async def release(self, kind: Kind, name: str, token: str) -> bool:
        validate_name(name)
        statements = STATEMENTS[kind]
        update = statements.release(token, self.settings.gc_after_ms)
        released = await self.connection.update(kind, statements.holds(name, token), update)
        changed = released
        if not released and statements.leftover is not None:
            changed = await self.connection.update(
                kind, statements.leftover(name, token), update
            )
        if changed:
            self.waiters.notify(statements.wake_key(name))
        return released

    async def extend_many(self, renewals: Sequence[Renewal]) -> list[bool]:
        return await extend_by_kind(renewals, self._extend)

    async def _extend(self, kind: Kind, renewals: Sequence[Renewal]) -> list[bool]:
        """One kind's renewals: one unordered bulk write of conditional updates."""
        if not renewals:
            return []
        statements = STATEMENTS[kind]
        updates = []
        for renewal in renewals:
            validate_name(renewal.name)
            updates.append((
                statements.holds(renewal.name, renewal.token),
                statements.extend(renewal.token, milliseconds(renewal.ttl),
                                  self.settings.gc_after_ms),
            ))
        return await self.connection.update_each(kind, updates)

    async def owned(self, kind: Kind, name: str, token: str) -> bool:
        validate_name(name)
        return await self.connection.exists(kind, STATEMENTS[kind].holds(name, token))

    async def inspect(self, kind: Kind, name: str) -> LockInfo | None:
        validate_name(name)
        rows = await self.connection.rows(kind, STATEMENTS[kind].info(name_filter(name)))
        return to_info(kind, rows[0]) if rows else None

    async def list_records(self, kind: Kind, prefix: str) -> list[LockInfo]:
        _check_prefix(prefix)
        rows = await self.connection.rows(kind, STATEMENTS[kind].info(prefix_filter(prefix)))
        return [to_info(kind, row) for row in rows]

    async def break_leases(self, kind: Kind, name: str) -> bool:
        validate_name(name)
        statements = STATEMENTS[kind]
        broken = await self.connection.update(
            kind, statements.break_filter(name),
            statements.break_update(self.settings.gc_after_ms),
        )
        if broken:
            self.waiters.notify(statements.wake_key(name))
        return broken

    async def set_value(self, name: str, token: str, value: str) -> bool:
        validate_name(name)
        return await self.connection.update(
            Kind.LOCK, held_by(name, token), set_value_update(token, value)
        )


def _check_prefix(prefix: object) -> None:
    if not isinstance(prefix, str):
        raise InvalidArgumentType(f"prefix must be a str, not {type(prefix).__name__}")
    try:
        prefix.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidArgument(f"prefix is not valid Unicode text: {exc.reason}") from None

