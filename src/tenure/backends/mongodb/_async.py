"""``mongodb://`` and ``mongodb+srv://`` for asyncio, through PyMongo's ``AsyncMongoClient``.

Each primitive is one server-side step built from ``_documents`` (locks), ``_semaphores`` or
``_rwlocks`` (read-write and fair locks); this module only does the I/O: the client (opened on
first use, and again in a forked child), each collection's TTL index (created on first use of
that collection), error translation, and the waiting helpers.

Waiting: a release in this process wakes this process's waiters at once; waiters elsewhere
retry with jittered back-off (the lock logic's), each pause bounded by the holder's remaining
lease: its expiry as the server wrote it, less the server's time. MongoDB's change streams
could announce releases across processes on a replica set, but the stand-in server the test
suite runs on has none, so they are not used (see docs/backends/mongodb.md). A waiter in a
read-write or fair lock's queue pauses at most a third of its place's lease between attempts
(the lock logic bounds it), so its place stays alive while it waits.
"""

from __future__ import annotations

import contextlib
import datetime
import os
import threading
import time
from collections.abc import Iterator, Sequence
from typing import Any

from bson.codec_options import CodecOptions
from bson.errors import BSONError
from pymongo import ASCENDING, AsyncMongoClient, ReturnDocument, UpdateOne
from pymongo.asynchronous.collection import AsyncCollection
from pymongo.errors import DuplicateKeyError, PyMongoError

from tenure._async.backend import AsyncBackend
from tenure._async.capabilities import (
    AsyncLeaseValueSupport,
    AsyncQueueSupport,
    AsyncSemaphoreSupport,
)
from tenure._async.wakeups import wait_for_notice
from tenure._concurrency import async_io as io
from tenure._errors import BackendError, InvalidArgument, InvalidArgumentType, limit_mismatch
from tenure._types import Busy, Capabilities, Grant, Holder, LockInfo, Renewal
from tenure._urls import redact
from tenure._validation import validate_name
from tenure._waiters import permit_key, queue_key
from tenure.backends.mongodb import SCHEMES
from tenure.backends.mongodb._documents import (
    Document,
    acquire_update,
    break_filter,
    extend_update,
    free_update,
    held_by,
    info_pipeline,
    milliseconds,
    name_filter,
    owned_among,
    prefix_filter,
    set_value_update,
    to_info,
)
from tenure.backends.mongodb._errors import driver_message
from tenure.backends.mongodb._rwlocks import (
    acquire_queued_update,
    break_update,
    extend_lease_update,
    has_entry,
    holds_lease,
    live_entries,
    queue_info_pipeline,
    release_update,
    to_queue_info,
)
from tenure.backends.mongodb._semaphores import (
    acquire_permit_update,
    extend_permit_update,
    holds_permit,
    live_permits,
    release_permit_update,
    semaphore_info_pipeline,
    to_semaphore_info,
)
from tenure.backends.mongodb._settings import MongoSettings, parse_settings, release_waiters

__all__ = ["BACKEND", "AsyncMongoDBBackend"]

GC_INDEX = "tenure_gc_at"
# Dates come back as aware UTC datetimes, so LockInfo.acquired_at is one.
CODEC_OPTIONS: CodecOptions[Document] = CodecOptions(
    document_class=dict, tz_aware=True, tzinfo=datetime.UTC
)
CLOCK_SAMPLE_INTERVAL = 60.0
"""Seconds a sample of the server's clock is trusted (only for bounding waiters' pauses)."""


class AsyncMongoDBBackend(
    AsyncBackend, AsyncSemaphoreSupport, AsyncQueueSupport, AsyncLeaseValueSupport
):
    """Options (URL query or keyword): ``database``, ``collection``, ``write_concern``,
    ``read_concern``, ``timeout``, ``gc_after``; every other one goes to PyMongo. See
    ``tenure.backends.mongodb._settings`` and docs/backends/mongodb.md."""

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
    max_backoff = 0.05

    def __init__(self, settings: MongoSettings) -> None:
        self.settings = settings
        self._client: AsyncMongoClient[Document] | None = None
        self._locks_collection: AsyncCollection[Document] | None = None
        self._semaphores_collection: AsyncCollection[Document] | None = None
        self._rwlocks_collection: AsyncCollection[Document] | None = None
        self._pid = 0
        self._indexed = settings.gc_after is None
        self._semaphores_indexed = settings.gc_after is None
        self._rwlocks_indexed = settings.gc_after is None
        self._closed = False
        self._mutex = threading.Lock()
        self._waiters = release_waiters(settings)
        # (the server's clock, this client's monotonic clock just before it was read).
        self._clock_sample: tuple[datetime.datetime | None, float] | None = None

    @classmethod
    def from_url(cls, url: str, **options: Any) -> AsyncMongoDBBackend:
        return cls(parse_settings(url, options))

    def describe(self) -> str:
        return redact(self.settings.url)

    def renewal_backend(self) -> AsyncMongoDBBackend:
        # PyMongo's asyncio client belongs to the loop that opened it.
        return type(self)(self.settings)

    def unanswered(self, seconds: float) -> BaseException:
        # The driver's last word on each server (refused, timed out, ...), kept in its
        # topology while server selection goes on: what the caller's deadline cut short.
        client = self._client
        if client is not None:
            for server in client.topology_description.server_descriptions().values():
                if server.error is not None:
                    return server.error
        return super().unanswered(seconds)

    # ---- the client ------------------------------------------------------------------------

    def _open(self) -> AsyncCollection[Document]:
        with self._mutex:
            if self._closed:
                raise BackendError(f"MongoDB {self.describe()}: the client is closed")
            pid = os.getpid()
            if self._locks_collection is not None and self._pid == pid:
                return self._locks_collection
            # First use, or a forked child: PyMongo has reset the parent's client here, and
            # it must not be used or closed; this process opens its own.
            settings = self.settings
            client: AsyncMongoClient[Document] = AsyncMongoClient(
                settings.client_url, **settings.client_options
            )
            database = client.get_database(
                settings.database,
                codec_options=CODEC_OPTIONS,
                write_concern=settings.write_concern,
                read_concern=settings.read_concern,
            )
            self._client = client
            self._locks_collection = database.get_collection(settings.collection)
            self._semaphores_collection = database.get_collection(
                f"{settings.collection}.semaphores"
            )
            self._rwlocks_collection = database.get_collection(f"{settings.collection}.rwlocks")
            self._pid = pid
            return self._locks_collection

    async def _locks(self) -> AsyncCollection[Document]:
        """The collection, with the clean-up index in place (created on first use)."""
        collection = self._locks_collection
        if collection is None or self._pid != os.getpid():
            collection = self._open()
        if not self._indexed:
            # Idempotent: racing creators (threads, processes) all succeed.
            await collection.create_index(
                [("gc_at", ASCENDING)], name=GC_INDEX, expireAfterSeconds=0
            )
            self._indexed = True
        return collection

    async def _semaphores(self) -> AsyncCollection[Document]:
        """The semaphores' collection (``{collection}.semaphores``), indexed like the locks'."""
        if self._semaphores_collection is None or self._pid != os.getpid():
            self._open()
        collection = self._semaphores_collection
        assert collection is not None
        if not self._semaphores_indexed:
            await collection.create_index(
                [("gc_at", ASCENDING)], name=GC_INDEX, expireAfterSeconds=0
            )
            self._semaphores_indexed = True
        return collection

    async def _rwlocks(self) -> AsyncCollection[Document]:
        """The read-write and fair locks' collection (``{collection}.rwlocks``), created and
        indexed on first use like the semaphores' (a user of plain locks never needs it)."""
        if self._rwlocks_collection is None or self._pid != os.getpid():
            self._open()
        collection = self._rwlocks_collection
        assert collection is not None
        if not self._rwlocks_indexed:
            await collection.create_index(
                [("gc_at", ASCENDING)], name=GC_INDEX, expireAfterSeconds=0
            )
            self._rwlocks_indexed = True
        return collection

    @contextlib.contextmanager
    def _errors(self, action: str) -> Iterator[None]:
        try:
            yield
        except (PyMongoError, BSONError) as exc:
            raise BackendError(
                f"MongoDB {self.describe()}: {action} failed: {driver_message(exc)}"
            ) from exc

    async def aclose(self) -> None:
        with self._mutex:
            self._closed = True
            client, self._client = self._client, None
            self._locks_collection = None
            self._semaphores_collection = None
            self._rwlocks_collection = None
            owned = self._pid == os.getpid()
        if client is not None and owned:
            with self._errors("close"):
                await client.close()

    # ---- the atomic steps ------------------------------------------------------------------

    async def acquire(
        self, name: str, token: str, ttl: float, holder: Holder, waited: Busy | None = None
    ) -> Grant | Busy:
        validate_name(name)
        update = acquire_update(token, milliseconds(ttl), holder, self.settings.gc_after_ms)
        # Runs to its end even if the caller is cancelled: the lock logic's undo (a release
        # of this token) must come after it, and PyMongo's connections stay out of their
        # cancelled-mid-I/O paths.
        return await io.complete(self._acquire(name, token, update))

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
        """``acquire``'s one step, with the value written (tagged with ``token``) in the same
        pipeline that grants the lease; plain acquires keep their own, shorter pipeline."""
        validate_name(name)
        update = acquire_update(
            token, milliseconds(ttl), holder, self.settings.gc_after_ms, value=value
        )
        return await io.complete(self._acquire(name, token, update))

    async def set_value(self, name: str, token: str, value: str) -> bool:
        validate_name(name)
        with self._errors("set the value"):
            locks = await self._locks()
            result = await locks.update_one(held_by(name, token), set_value_update(token, value))
        return result.matched_count == 1

    async def _acquire(self, name: str, token: str, update: list[Document]) -> Grant | Busy:
        with self._errors("acquire"):
            locks = await self._locks()
            try:
                document = await locks.find_one_and_update(
                    name_filter(name),
                    update,
                    upsert=True,
                    return_document=ReturnDocument.AFTER,
                )
            except DuplicateKeyError:
                # Another client's upsert created the document first: it holds the lock.
                return Busy(None)
            if document is not None and document.get("token") == token:
                return Grant(int(document["fence"]))
            return await self._busy(locks, document)

    async def _busy(
        self, locks: AsyncCollection[Document], document: Document | None
    ) -> Busy:
        """Busy, with the holder's time left: its expiry (server clock, from the after-image)
        less the server's time now, estimated from a recent sample of the server's clock."""
        expires_at = None if document is None else document.get("expires_at")
        server_now = await self._server_now(locks)
        if not isinstance(expires_at, datetime.datetime) or server_now is None:
            return Busy(None)
        return Busy(max(0.0, (expires_at - server_now).total_seconds()))

    async def _server_now(self, locks: AsyncCollection[Document]) -> datetime.datetime | None:
        """The server's clock now, from ``hello``'s ``localTime`` sampled at most every
        CLOCK_SAMPLE_INTERVAL and carried forward on this client's monotonic clock (None if
        the server does not say or fails to). The sample is dated from before the question, so the
        estimate runs ahead by at most a round trip: a waiter's pause bound errs early, never
        past the holder's expiry."""
        sample = self._clock_sample
        if sample is None or time.monotonic() - sample[1] > CLOCK_SAMPLE_INTERVAL:
            asked = time.monotonic()
            try:
                reply = await locks.database.command("hello", codec_options=CODEC_OPTIONS)
            except PyMongoError:
                # The acquire itself was answered; only the pause bound is missing (the next
                # attempt reports a failing server). Old servers lack `hello` (4.2.10+).
                reply = {}
            local_time = reply.get("localTime")
            if not isinstance(local_time, datetime.datetime):
                local_time = None
            sample = self._clock_sample = (local_time, asked)
        server_time, measured = sample
        if server_time is None:
            return None
        return server_time + datetime.timedelta(seconds=time.monotonic() - measured)

    async def release(self, name: str, token: str) -> bool:
        validate_name(name)
        with self._errors("release"):
            locks = await self._locks()
            result = await locks.update_one(
                held_by(name, token), free_update(self.settings.gc_after_ms)
            )
        released = result.matched_count == 1
        if released:
            self._waiters.notify(name)
        return released

    async def extend(self, name: str, token: str, ttl: float) -> bool:
        validate_name(name)
        update = extend_update(milliseconds(ttl), self.settings.gc_after_ms)
        with self._errors("extend"):
            locks = await self._locks()
            result = await locks.update_one(held_by(name, token), update)
        return result.matched_count == 1

    async def extend_many(self, renewals: Sequence[Renewal]) -> list[bool]:
        """One unordered bulk write of conditional updates. Its reply counts matches but does
        not say which matched; when some did not, one read (by the server's clock) tells which
        leases are still ours. A lease is never ours again once lost (tokens are not reused),
        so that read cannot report a refused renewal as a success."""
        if len(renewals) <= 1:
            return [await self.extend(r.name, r.token, r.ttl) for r in renewals]
        for renewal in renewals:
            validate_name(renewal.name)
        gc_after_ms = self.settings.gc_after_ms
        requests = [
            UpdateOne(held_by(r.name, r.token), extend_update(milliseconds(r.ttl), gc_after_ms))
            for r in renewals
        ]
        with self._errors("extend"):
            locks = await self._locks()
            result = await locks.bulk_write(requests, ordered=False)
            if result.matched_count == len(requests):
                return [True] * len(requests)
            names = sorted({r.name for r in renewals})
            rows = await locks.find(owned_among(names), {"token": 1}).to_list()
        live = {(row["_id"], row.get("token")) for row in rows}
        return [(r.name, r.token) in live for r in renewals]

    async def owned(self, name: str, token: str) -> bool:
        validate_name(name)
        with self._errors("owned"):
            locks = await self._locks()
            return await locks.find_one(held_by(name, token), {"_id": 1}) is not None

    async def inspect(self, name: str) -> LockInfo | None:
        validate_name(name)
        with self._errors("inspect"):
            locks = await self._locks()
            cursor = await locks.aggregate(info_pipeline(name_filter(name)))
            rows = await cursor.to_list()
        return to_info(rows[0]) if rows else None

    async def list_locks(self, prefix: str) -> list[LockInfo]:
        _check_prefix(prefix)
        with self._errors("list"):
            locks = await self._locks()
            cursor = await locks.aggregate(info_pipeline(prefix_filter(prefix)))
            rows = await cursor.to_list()
        return [to_info(row) for row in rows]

    async def break_lock(self, name: str) -> bool:
        validate_name(name)
        with self._errors("break"):
            locks = await self._locks()
            result = await locks.update_one(
                break_filter(name), free_update(self.settings.gc_after_ms)
            )
        broken = result.matched_count == 1
        if broken:
            self._waiters.notify(name)
        return broken

    async def wait_for_release(
        self, name: str, timeout: float, busy: Busy | None = None
    ) -> None:
        await wait_for_notice(self._waiters, name, timeout)

    # ---- semaphores (documents in ``_semaphores``) ---------------------------------------

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
        validate_name(name)
        update = acquire_permit_update(
            token, milliseconds(ttl), limit, holder, self.settings.gc_after_ms
        )
        return await io.complete(self._acquire_permit(name, token, limit, update))

    async def _acquire_permit(
        self, name: str, token: str, limit: int, update: list[Document]
    ) -> Grant | Busy:
        with self._errors("acquire a permit"):
            semaphores = await self._semaphores()
            try:
                document = await semaphores.find_one_and_update(
                    name_filter(name), update, upsert=True,
                    return_document=ReturnDocument.AFTER,
                )
            except DuplicateKeyError:
                return Busy(0.0)  # another client created the document first: try again
            permits = [] if document is None else document.get("permits") or []
            mine = next((p for p in permits if p.get("token") == token), None)
            if mine is not None:
                return Grant(int(mine["fence"]))
            stored = None if document is None else document.get("limit")
            if permits and stored is not None and int(stored) != limit:
                raise limit_mismatch(name, int(stored), limit)
            soonest = min(
                (p["expires_at"] for p in permits
                 if isinstance(p.get("expires_at"), datetime.datetime)),
                default=None,
            )
            return await self._busy(semaphores, {"expires_at": soonest})

    async def release_permit(self, name: str, token: str) -> bool:
        validate_name(name)
        gc_after_ms = self.settings.gc_after_ms
        with self._errors("release a permit"):
            semaphores = await self._semaphores()
            result = await semaphores.update_one(
                holds_permit(name, token), release_permit_update(token, gc_after_ms)
            )
            released = result.matched_count == 1
            if not released:
                # Expired: its entry still goes (nothing else is changed by this).
                await semaphores.update_one(
                    name_filter(name), release_permit_update(token, gc_after_ms)
                )
        self._waiters.notify(permit_key(name))
        return released

    async def extend_permits(self, renewals: Sequence[Renewal]) -> list[bool]:
        """One unordered bulk write of conditional updates; when some did not match, each
        is asked again on its own (a renewal twice only restarts the lease twice)."""
        gc_after_ms = self.settings.gc_after_ms
        updates = [
            (holds_permit(r.name, r.token),
             extend_permit_update(r.token, milliseconds(r.ttl), gc_after_ms))
            for r in renewals
        ]
        if not updates:
            return []
        with self._errors("renew permits"):
            semaphores = await self._semaphores()
            result = await semaphores.bulk_write(
                [UpdateOne(where, update) for where, update in updates], ordered=False
            )
            if result.matched_count == len(updates):
                return [True] * len(updates)
            results = []
            for where, update in updates:
                single = await semaphores.update_one(where, update)
                results.append(single.matched_count == 1)
        return results

    async def permit_owned(self, name: str, token: str) -> bool:
        validate_name(name)
        with self._errors("check a permit"):
            semaphores = await self._semaphores()
            return await semaphores.find_one(holds_permit(name, token), {"_id": 1}) is not None

    async def inspect_semaphore(self, name: str) -> LockInfo | None:
        validate_name(name)
        with self._errors("inspect a semaphore"):
            semaphores = await self._semaphores()
            cursor = await semaphores.aggregate(semaphore_info_pipeline(name_filter(name)))
            rows = await cursor.to_list()
        return to_semaphore_info(rows[0]) if rows else None

    async def list_semaphores(self, prefix: str) -> list[LockInfo]:
        _check_prefix(prefix)
        with self._errors("list semaphores"):
            semaphores = await self._semaphores()
            cursor = await semaphores.aggregate(semaphore_info_pipeline(prefix_filter(prefix)))
            rows = await cursor.to_list()
        return [to_semaphore_info(row) for row in rows]

    async def break_semaphore(self, name: str) -> bool:
        validate_name(name)
        live = {"$expr": {"$gt": [{"$size": live_permits()}, 0]}}
        with self._errors("break a semaphore"):
            semaphores = await self._semaphores()
            result = await semaphores.update_one(
                {**name_filter(name), **live}, [{"$set": {"permits": []}}]
            )
        broken = result.matched_count == 1
        if broken:
            self._waiters.notify(permit_key(name))
        return broken

    async def wait_for_permit(
        self, name: str, timeout: float, busy: Busy | None = None
    ) -> None:
        await wait_for_notice(self._waiters, permit_key(name), timeout)

    # ---- read-write and fair locks (documents in ``_rwlocks``) ---------------------------

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
        validate_name(name)
        update = acquire_queued_update(
            token, holder, mode=mode, ttl_ms=milliseconds(ttl),
            queue_ttl_ms=milliseconds(queue_ttl), gc_after_ms=self.settings.gc_after_ms,
        )
        # Runs to its end even if the caller is cancelled, as acquire does: the lock logic's
        # undo (leaving the queue, or releasing a grant) must come after it.
        return await io.complete(self._acquire_queued(name, token, update))

    async def _acquire_queued(
        self, name: str, token: str, update: list[Document]
    ) -> Grant | Busy:
        with self._errors("acquire a read-write lock"):
            rwlocks = await self._rwlocks()
            try:
                document = await rwlocks.find_one_and_update(
                    name_filter(name), update, upsert=True,
                    return_document=ReturnDocument.AFTER,
                )
            except DuplicateKeyError:
                # Another client's upsert created the document between our look and our
                # insert: it exists now, so the same step updates it.
                document = await rwlocks.find_one_and_update(
                    name_filter(name), update, upsert=True,
                    return_document=ReturnDocument.AFTER,
                )
        leases = [] if document is None else document.get("leases") or []
        mine = next((lease for lease in leases if lease.get("token") == token), None)
        if mine is not None:
            return Grant(int(mine["fence"]))
        # Both dates come from this step's after-image: the holders' time left by the
        # server's clock, with no second question.
        now = None if document is None else document.get("updated_at")
        ends = [
            (lease["expires_at"] - now).total_seconds() for lease in leases
            if isinstance(lease.get("expires_at"), datetime.datetime)
            and isinstance(now, datetime.datetime)
        ]
        return Busy(max(0.0, min(ends)) if ends else None)

    async def release_queued(self, name: str, token: str) -> bool:
        """A live lease goes in one conditional update (True). Otherwise (a waiter leaving,
        or a lease that lapsed) a second update removes the token's place or lapsed lease:
        only the token's own owner ever adds either, so nothing can come between the two."""
        validate_name(name)
        update = release_update(token, self.settings.gc_after_ms)
        with self._errors("release a read-write lock"):
            rwlocks = await self._rwlocks()
            result = await rwlocks.update_one(holds_lease(name, token), update)
            released = result.matched_count == 1
            changed = released
            if not released:
                left = await rwlocks.update_one(has_entry(name, token), update)
                changed = left.matched_count == 1
        if changed:
            self._waiters.notify(queue_key(name))
        return released

    async def extend_queued(self, renewals: Sequence[Renewal]) -> list[bool]:
        """One unordered bulk write of conditional updates; when some did not match, each
        is asked again on its own (a renewal twice only restarts the lease twice)."""
        gc_after_ms = self.settings.gc_after_ms
        for renewal in renewals:
            validate_name(renewal.name)
        updates = [
            (holds_lease(r.name, r.token),
             extend_lease_update(r.token, milliseconds(r.ttl), gc_after_ms))
            for r in renewals
        ]
        if not updates:
            return []
        with self._errors("renew read-write leases"):
            rwlocks = await self._rwlocks()
            if len(updates) == 1:
                (where, update), = updates
                single = await rwlocks.update_one(where, update)
                return [single.matched_count == 1]
            result = await rwlocks.bulk_write(
                [UpdateOne(where, update) for where, update in updates], ordered=False
            )
            if result.matched_count == len(updates):
                return [True] * len(updates)
            results = []
            for where, update in updates:
                single = await rwlocks.update_one(where, update)
                results.append(single.matched_count == 1)
        return results

    async def queued_owned(self, name: str, token: str) -> bool:
        validate_name(name)
        with self._errors("check a read-write lease"):
            rwlocks = await self._rwlocks()
            return await rwlocks.find_one(holds_lease(name, token), {"_id": 1}) is not None

    async def inspect_queue(self, name: str) -> LockInfo | None:
        validate_name(name)
        with self._errors("inspect a read-write lock"):
            rwlocks = await self._rwlocks()
            cursor = await rwlocks.aggregate(queue_info_pipeline(name_filter(name)))
            rows = await cursor.to_list()
        return to_queue_info(rows[0]) if rows else None

    async def list_queues(self, prefix: str) -> list[LockInfo]:
        _check_prefix(prefix)
        with self._errors("list read-write locks"):
            rwlocks = await self._rwlocks()
            cursor = await rwlocks.aggregate(queue_info_pipeline(prefix_filter(prefix)))
            rows = await cursor.to_list()
        return [to_queue_info(row) for row in rows]

    async def break_queue(self, name: str) -> bool:
        validate_name(name)
        # Matches only while a lease is live; keeps the places (the queue) and the fence.
        live = {"$expr": {"$gt": [{"$size": live_entries("$leases")}, 0]}}
        with self._errors("break a read-write lock"):
            rwlocks = await self._rwlocks()
            result = await rwlocks.update_one(
                {**name_filter(name), **live}, break_update(self.settings.gc_after_ms)
            )
        broken = result.matched_count == 1
        if broken:
            self._waiters.notify(queue_key(name))
        return broken

    async def wait_for_turn(self, name: str, timeout: float, busy: Busy | None = None) -> None:
        await wait_for_notice(self._waiters, queue_key(name), timeout)


def _check_prefix(prefix: object) -> None:
    if not isinstance(prefix, str):
        raise InvalidArgumentType(f"prefix must be a str, not {type(prefix).__name__}")
    try:
        prefix.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidArgument(f"prefix is not valid Unicode text: {exc.reason}") from None


BACKEND = AsyncMongoDBBackend
