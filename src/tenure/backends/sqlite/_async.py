"""``sqlite:///relative.db`` and ``sqlite:////absolute.db`` for asyncio: the blocking
sqlite3 calls of ``_store`` run in worker threads (``AsyncBlockingShell``).

Waiting is queued and woken (see ``_locks`` and ``_doorbell``): a refused attempt takes a
place in the name's queue, a release rings the longest waiter, and a free lock goes to that
waiter rather than to whoever asks first. Read-write and fair locks queue in the same table
and are woken the same way: a release rings every waiter the grant rule now admits. The
attempt (``AsyncSQLiteAttempt``) keeps its place, a ``Ticket``, from one try to the next."""

from __future__ import annotations

import functools
from typing import Any

from tenure._async.blocking_store import AsyncBlockingAttempt, AsyncBlockingShell
from tenure._async.store import WITH_WEIGHTS
from tenure._concurrency import async_io as io
from tenure._types import Busy, Capabilities, Grant, Holder, Kind, LeaseSpec
from tenure.backends.sqlite import SCHEMES
from tenure.backends.sqlite._config import display, settings
from tenure.backends.sqlite._doorbell import Ticket
from tenure.backends.sqlite._errors import DRIVER_ERRORS
from tenure.backends.sqlite._store import SQLiteFile

__all__ = ["BACKEND", "AsyncSQLiteAttempt", "AsyncSQLiteStore"]


class AsyncSQLiteAttempt(AsyncBlockingAttempt):
    """One acquire call's tries. A lock or a read-write lock keeps its ``Ticket`` (its place
    in the name's queue, and the ring a release sends it) from one try to the next; a
    semaphore waits for a release in this process, or its back-off."""

    store: AsyncSQLiteStore

    @functools.cached_property
    def ticket(self) -> Ticket | None:
        """A lock's or a read-write lock's place in the name's queue; None for a semaphore."""
        kind = self.spec.kind
        return None if kind is Kind.SEMAPHORE else Ticket(kind.value, self.name, self.token)

    async def try_once(self) -> Grant | Busy:
        tried, self.quick_tried = self.quick_tried, False  # (the first try's news only)
        return await io.run_blocking(
            self.store.store.acquire, self.name, self.spec, self.token, self.ttl, self.holder,
            ticket=self.ticket, tried=tried,
        )

    async def wait(self, timeout: float, busy: Busy) -> None:
        """Until the waiter's doorbell rings (a release or break admitted it), or
        ``timeout``."""
        ticket = self.ticket
        if ticket is None:
            await super().wait(timeout, busy)
            return
        timeout = self.before_place_lapses(timeout)
        if not ticket.placed:
            await io.sleep(timeout)
            return
        signal = io.Signal()
        if not ticket.attach(signal):
            return  # rung between two attempts
        try:
            await signal.wait(timeout)
        finally:
            ticket.detach()

    @property
    def holds_place(self) -> bool:
        return self.spec.queues or (self.ticket is not None and self.ticket.placed)

    async def leave(self) -> None:
        if self.spec.queues:
            await self.store.release(self.spec.kind, self.name, self.token)
        elif self.ticket is not None and self.ticket.placed:
            await io.run_blocking(self.store.store.leave, self.ticket)


class AsyncSQLiteStore(AsyncBlockingShell[SQLiteFile]):
    """Options (URL query or keyword): ``busy_timeout`` seconds to wait for SQLite's write
    lock (default 10), ``synchronous`` = normal (default: durable across process crashes)
    or full (also across power loss, at one fsync per operation), ``gc_after`` seconds an
    idle name's record is kept (default 10 minutes; ``none``: forever)."""
    attempt_class = AsyncSQLiteAttempt

    schemes = SCHEMES
    capabilities = Capabilities(
        fencing=(
            "strictly increasing per name, at least the host's clock in microseconds: never "
            "back, across releases, restarts, a lost file and the clean-up of a name idle "
            "for gc_after (10 minutes by default)"
        ),
        fences_survive_restart=True,
        fences_count_per_name=False,
        leases_survive_restart=True,
        wakeups="queued, first come first served; woken across processes (unix sockets)",
        multi_host=False,
        fault_tolerant=False,
    )
    offers = WITH_WEIGHTS
    driver_errors = DRIVER_ERRORS
    max_backoff = 0.25
    """Only a lost ring waits this long: a waiter is woken by the release itself."""
    local = True
    notifies = True

    @classmethod
    def from_url(cls, url: str, **options: Any) -> AsyncSQLiteStore:
        return cls(SQLiteFile(settings(url, options)))

    async def quick_try(
        self, name: str, spec: LeaseSpec, token: str, ttl: float, holder: Holder
    ) -> Grant | None:
        return await io.run_blocking(self.store.quick_try, name, spec, token, ttl, holder)

    def describe(self) -> str:
        return display(self.store.path)


BACKEND = AsyncSQLiteStore
