"""A backend still written to the wide interface (``AsyncBackend`` and its three support
interfaces, 24 verbs) seen through the narrow one (``AsyncStore``): the kind that the spec
carries as data is turned into the method name that backend expects. Temporary, while the
backend wings move to ``AsyncStore`` one by one; it goes once the last one has moved.
Written for asyncio; ``scripts/unasync.py`` generates the threads flavour.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any, cast

from tenure._async.backend import AsyncBackend
from tenure._async.capabilities import (
    AsyncLeaseValueSupport,
    AsyncQueueSupport,
    AsyncSemaphoreSupport,
)
from tenure._async.store import AsyncAttempt, AsyncStore, extend_by_kind
from tenure._types import Busy, Grant, Holder, Kind, LeaseSpec, LockInfo, Renewal

__all__ = ["AsyncLegacyStore", "legacy_store"]


def offered(backend_class: type[AsyncBackend]) -> frozenset[str]:
    """The primitives a wide backend implements, by the interfaces it subclasses."""
    found = {"lock"}
    if issubclass(backend_class, AsyncLeaseValueSupport):
        found.add("election")
    if issubclass(backend_class, AsyncSemaphoreSupport):
        found.add("semaphore")
    if issubclass(backend_class, AsyncQueueSupport):
        found.update(p for p in ("rwlock", "fair") if p not in backend_class.refusals)
    return frozenset(found)


@functools.cache
def legacy_store(backend_class: type[AsyncBackend]) -> type[AsyncLegacyStore]:
    """The narrow store class over ``backend_class``, its declarations copied as data."""
    return type(
        f"AsyncLegacy{backend_class.__name__}",
        (AsyncLegacyStore,),
        {
            "schemes": backend_class.schemes,
            "capabilities": backend_class.capabilities,
            "offers": offered(backend_class),
            "refusals": backend_class.refusals,
            "max_backoff": backend_class.max_backoff,
            "local": backend_class.local,
            "notifies": backend_class.notifies,
            "wide": backend_class,
        },
    )


class AsyncLegacyStore(AsyncStore):
    """``AsyncStore`` over one wide backend instance (``backend``)."""

    driver_errors = ()  # a wide backend translates its own driver's errors
    wide: type[AsyncBackend]

    def __init__(self, backend: AsyncBackend) -> None:
        self.backend = backend

    @classmethod
    def from_url(cls, url: str, **options: Any) -> AsyncStore:
        return cls(cls.wide.from_url(url, **options))

    def attempt(
        self, name: str, spec: LeaseSpec, token: str, ttl: float, holder: Holder
    ) -> AsyncAttempt:
        return AsyncLegacyAttempt(self, name, spec, token=token, ttl=ttl, holder=holder)

    async def acquire(
        self, name: str, spec: LeaseSpec, token: str, ttl: float, holder: Holder
    ) -> Grant | Busy:
        return await self.acquire_waited(name, spec, token, ttl, holder, waited=None)

    async def acquire_waited(
        self, name: str, spec: LeaseSpec, token: str, ttl: float, holder: Holder, *,
        waited: Busy | None,
    ) -> Grant | Busy:
        backend = self.backend
        if spec.kind is Kind.SEMAPHORE:
            return await cast(AsyncSemaphoreSupport, backend).acquire_permit(
                name, token, ttl, holder, spec.limit, waited=waited
            )
        if spec.kind is Kind.RWLOCK:
            assert spec.mode is not None and spec.queue_ttl is not None
            return await cast(AsyncQueueSupport, backend).acquire_queued(
                name, token, ttl, holder, mode=spec.mode, queue_ttl=spec.queue_ttl,
                waited=waited,
            )
        if spec.value is not None:
            return await cast(AsyncLeaseValueSupport, backend).acquire_with_value(
                name, token, ttl, holder, value=spec.value, waited=waited
            )
        return await backend.acquire(name, token, ttl, holder, waited)

    async def release(self, kind: Kind, name: str, token: str) -> bool:
        if kind is Kind.SEMAPHORE:
            return await cast(AsyncSemaphoreSupport, self.backend).release_permit(name, token)
        if kind is Kind.RWLOCK:
            return await cast(AsyncQueueSupport, self.backend).release_queued(name, token)
        return await self.backend.release(name, token)

    async def extend_many(self, renewals: Sequence[Renewal]) -> list[bool]:
        return await extend_by_kind(renewals, self._extend_kind)

    async def _extend_kind(self, kind: Kind, renewals: Sequence[Renewal]) -> list[bool]:
        if kind is Kind.SEMAPHORE:
            return await cast(AsyncSemaphoreSupport, self.backend).extend_permits(renewals)
        if kind is Kind.RWLOCK:
            return await cast(AsyncQueueSupport, self.backend).extend_queued(renewals)
        return await self.backend.extend_many(renewals)

    async def owned(self, kind: Kind, name: str, token: str) -> bool:
        if kind is Kind.SEMAPHORE:
            return await cast(AsyncSemaphoreSupport, self.backend).permit_owned(name, token)
        if kind is Kind.RWLOCK:
            return await cast(AsyncQueueSupport, self.backend).queued_owned(name, token)
        return await self.backend.owned(name, token)

    async def inspect(self, kind: Kind, name: str) -> LockInfo | None:
        if kind is Kind.SEMAPHORE:
            return await cast(AsyncSemaphoreSupport, self.backend).inspect_semaphore(name)
        if kind is Kind.RWLOCK:
            return await cast(AsyncQueueSupport, self.backend).inspect_queue(name)
        return await self.backend.inspect(name)

    async def list_records(self, kind: Kind, prefix: str) -> list[LockInfo]:
        if kind is Kind.SEMAPHORE:
            return await cast(AsyncSemaphoreSupport, self.backend).list_semaphores(prefix)
        if kind is Kind.RWLOCK:
            return await cast(AsyncQueueSupport, self.backend).list_queues(prefix)
        return await self.backend.list_locks(prefix)

    async def break_leases(self, kind: Kind, name: str) -> bool:
        if kind is Kind.SEMAPHORE:
            return await cast(AsyncSemaphoreSupport, self.backend).break_semaphore(name)
        if kind is Kind.RWLOCK:
            return await cast(AsyncQueueSupport, self.backend).break_queue(name)
        return await self.backend.break_lock(name)

    async def set_value(self, name: str, token: str, value: str) -> bool:
        return await cast(AsyncLeaseValueSupport, self.backend).set_value(name, token, value)

    @property
    def setup_seconds(self) -> float:
        return self.backend.setup_seconds

    def unanswered(self, seconds: float) -> BaseException:
        return self.backend.unanswered(seconds)

    @property
    def lease_horizon(self) -> float | None:
        return self.backend.lease_horizon

    def lease_doubt(self, kind: Kind, name: str, token: str) -> str | None:
        return self.backend.lease_doubt(str(kind), name, token)

    def add_doubt_listener(self, listener: Callable[[], object]) -> None:
        self.backend.add_doubt_listener(listener)

    def renewal_store(self) -> AsyncStore:
        renewals = self.backend.renewal_backend()
        return self if renewals is self.backend else type(self)(renewals)

    async def aclose(self) -> None:
        await self.backend.aclose()

    def describe(self) -> str:
        return self.backend.describe()


class AsyncLegacyAttempt(AsyncAttempt):
    """The wide interface's waiting state, kept here between tries: the last refusal (whose
    ``waiting`` a backend reads again in its next ``acquire(..., waited=...)``)."""

    store: AsyncLegacyStore

    def __init__(
        self, store: AsyncLegacyStore, name: str, spec: LeaseSpec, *, token: str, ttl: float,
        holder: Holder,
    ) -> None:
        super().__init__(store, name, spec, token=token, ttl=ttl, holder=holder)
        self.waited: Busy | None = None
        """The refusal this attempt waited on (or got together with its wait)."""
        self.last: Busy | None = None

    @property
    def combines_try_and_wait(self) -> bool:  # type: ignore[override]
        # A lock's plain lease only: the wide interface's combined step stores no value.
        return (self.store.backend.combines_try_and_wait and self.spec.kind is Kind.LOCK
                and self.spec.value is None)

    async def try_once(self) -> Grant | Busy:
        outcome = await self.store.acquire_waited(
            self.name, self.spec, self.token, self.ttl, self.holder, waited=self.waited
        )
        if isinstance(outcome, Busy):
            self.last = outcome
        return outcome

    async def try_or_wait(self, wait: float) -> Grant | Busy | None:
        outcome = await self.store.backend.acquire_or_wait(
            self.name, self.token, self.ttl, self.holder, wait
        )
        if isinstance(outcome, Busy):
            self.waited = self.last = outcome
        return outcome

    async def wait(self, timeout: float, busy: Busy) -> None:
        self.waited = busy
        backend = self.store.backend
        if self.spec.kind is Kind.SEMAPHORE:
            await cast(AsyncSemaphoreSupport, backend).wait_for_permit(self.name, timeout, busy)
        elif self.spec.kind is Kind.RWLOCK:
            assert self.spec.queue_ttl is not None
            await cast(AsyncQueueSupport, backend).wait_for_turn(
                self.name, min(timeout, self.spec.queue_ttl / 3), busy
            )
        else:
            await backend.wait_for_release(self.name, timeout, busy)

    @property
    def holds_place(self) -> bool:
        return self.waited is not None or self.spec.queues or (
            self.store.local and self.last is not None and self.last.waiting is not None
        )

    async def leave(self) -> None:
        if self.spec.queues:
            await self.store.release(self.spec.kind, self.name, self.token)
            return
        busy = self.last or self.waited or Busy(None)
        await self.store.backend.abandon_wait(self.name, busy)
