"""The only code of the MongoDB wing that touches PyMongo, written for asyncio: the client
(opened on first use, and again in a forked child), each kind's collection with its clean-up
index (created on first use of that collection), the few calls the store makes, and the
server's clock sampled for waiters' pause bounds.

Driver errors leave these calls as they are, as does the ``StoreFault`` of a closed client:
the store's base turns them into the one ``BackendError`` form (see
``tenure.backends.mongodb._errors``).
"""

from __future__ import annotations

import datetime
import os
import threading
import time
from collections.abc import Sequence

from bson.codec_options import CodecOptions
from pymongo import ASCENDING, AsyncMongoClient, ReturnDocument, UpdateOne
from pymongo.asynchronous.collection import AsyncCollection
from pymongo.errors import DuplicateKeyError, PyMongoError

from tenure._errors import StoreFault
from tenure._types import Kind
from tenure.backends.mongodb._config import MongoSettings
from tenure.backends.mongodb._documents import Document, Pipeline
from tenure.backends.mongodb._kinds import STATEMENTS

__all__ = ["AsyncConnection"]

GC_INDEX = "tenure_gc_at"
# Dates come back as aware UTC datetimes, so LockInfo.acquired_at is one.
CODEC_OPTIONS: CodecOptions[Document] = CodecOptions(
    document_class=dict, tz_aware=True, tzinfo=datetime.UTC
)
CLOCK_SAMPLE_INTERVAL = 60.0
"""Seconds a sample of the server's clock is trusted (only for bounding waiters' pauses)."""


class AsyncConnection:
    """One PyMongo client and the kinds' collections, for one store."""

    def __init__(self, settings: MongoSettings, describe: str) -> None:
        self.settings = settings
        self.describe = describe
        self._client: AsyncMongoClient[Document] | None = None
        self._collections: dict[Kind, AsyncCollection[Document]] = {}
        self._indexed: set[Kind] = set(Kind) if settings.gc_after is None else set()
        self._pid = 0
        self._closed = False
        self._mutex = threading.Lock()
        # (the server's clock, this client's monotonic clock just before it was read).
        self._clock_sample: tuple[datetime.datetime | None, float] | None = None

    def _open(self) -> dict[Kind, AsyncCollection[Document]]:
        with self._mutex:
            if self._closed:
                raise StoreFault("the client is closed")
            pid = os.getpid()
            if self._collections and self._pid == pid:
                return self._collections
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
            self._collections = {
                kind: database.get_collection(settings.collection + statements.collection_suffix)
                for kind, statements in STATEMENTS.items()
            }
            self._pid = pid
            return self._collections

    async def collection(self, kind: Kind) -> AsyncCollection[Document]:
        """``kind``'s collection, with the clean-up index in place (created on first use, so
        a user of plain locks never creates the others)."""
        collections = self._collections
        if not collections or self._pid != os.getpid():
            collections = self._open()
        collection = collections[kind]
        if kind not in self._indexed:
            # Idempotent: racing creators (threads, processes) all succeed.
            await collection.create_index(
                [("gc_at", ASCENDING)], name=GC_INDEX, expireAfterSeconds=0
            )
            self._indexed.add(kind)
        return collection

    async def upsert(self, kind: Kind, name: str, update: Pipeline) -> Document | None:
        """ONE find_one_and_update of ``name`` (upsert, after-image); None when another
        client's upsert created the document between this one's look and its insert."""
        collection = await self.collection(kind)
        try:
            return await collection.find_one_and_update(
                {"_id": name}, update, upsert=True, return_document=ReturnDocument.AFTER
            )
        except DuplicateKeyError:
            return None

    async def update(self, kind: Kind, where: Document, update: Pipeline | Document) -> bool:
        """ONE update_one: whether it matched."""
        collection = await self.collection(kind)
        result = await collection.update_one(where, update)
        return result.matched_count == 1

    async def update_each(
        self, kind: Kind, updates: Sequence[tuple[Document, Pipeline]]
    ) -> list[bool]:
        """Several conditional updates in one unordered bulk write; when some did not match
        (its reply counts matches but does not say which), each is asked again on its own: a
        renewal twice only restarts the lease twice, and a lease once lost is never matched
        again (tokens are not reused)."""
        if len(updates) == 1:
            (where, update), = updates
            return [await self.update(kind, where, update)]
        collection = await self.collection(kind)
        result = await collection.bulk_write(
            [UpdateOne(where, update) for where, update in updates], ordered=False
        )
        if result.matched_count == len(updates):
            return [True] * len(updates)
        return [await self.update(kind, where, update) for where, update in updates]

    async def exists(self, kind: Kind, where: Document) -> bool:
        collection = await self.collection(kind)
        return await collection.find_one(where, {"_id": 1}) is not None

    async def rows(self, kind: Kind, pipeline: Pipeline) -> list[Document]:
        """An aggregation's rows."""
        collection = await self.collection(kind)
        cursor = await collection.aggregate(pipeline)
        return await cursor.to_list()

    async def server_now(self, kind: Kind) -> datetime.datetime | None:
        """The server's clock now, from ``hello``'s ``localTime`` sampled at most every
        CLOCK_SAMPLE_INTERVAL and carried forward on this client's monotonic clock (None if
        the server does not say or fails to). The sample is dated from before the question,
        so the estimate runs ahead by at most a round trip: a waiter's pause bound errs
        early, never past the holder's expiry."""
        sample = self._clock_sample
        if sample is None or time.monotonic() - sample[1] > CLOCK_SAMPLE_INTERVAL:
            collection = await self.collection(kind)
            asked = time.monotonic()
            try:
                reply = await collection.database.command("hello", codec_options=CODEC_OPTIONS)
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

    def last_error(self) -> BaseException | None:
        """The driver's last word on any server (refused, timed out, ...), kept in its
        topology while server selection goes on."""
        client = self._client
        if client is not None:
            for server in client.topology_description.server_descriptions().values():
                if server.error is not None:
                    return server.error
        return None

    async def aclose(self) -> None:
        with self._mutex:
            self._closed = True
            client, self._client = self._client, None
            self._collections = {}
            owned = self._pid == os.getpid()
        if client is not None and owned:
            await client.close()
