"""The WIDE blocking shell, kept only for MySQL/MariaDB while that wing moves to the narrow
one (``blocking_store``): backends whose atomic steps are blocking calls on a store object.
Temporary, like ``legacy_store``: it goes once MySQL is an ``AsyncBlockingShell``.

The store does the work, each step one short statement in its own transaction; this shell
runs every call through ``io.run_blocking`` (a worker thread under asyncio, the caller's own
thread otherwise) and waits for releases announced in this process. A backend of this kind
only adds its URL parsing and its declared traits.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Generic, Protocol, TypeVar

from tenure._async.backend import AsyncBackend
from tenure._async.capabilities import AsyncQueueSupport, AsyncSemaphoreSupport
from tenure._async.wakeups import wait_for_notice
from tenure._concurrency import async_io as io
from tenure._types import Busy, Grant, Holder, LockInfo, Renewal
from tenure._waiters import Waiters, permit_key, queue_key

__all__ = [
    "AsyncBlockingQueueBackend",
    "AsyncBlockingSemaphoreBackend",
    "AsyncBlockingStoreBackend",
    "BlockingQueueStore",
    "BlockingSemaphoreStore",
    "BlockingStore",
]


class BlockingStore(Protocol):
    """The backend's atomic steps as blocking calls (see ``AsyncBackend`` for each one's
    contract), and the in-process waiters its releases notify."""

    waiters: Waiters

    def acquire(self, name: str, token: str, ttl: float, holder: Holder) -> Grant | Busy: ...
    def release(self, name: str, token: str) -> bool: ...
    def extend(self, name: str, token: str, ttl: float) -> bool: ...
    def extend_many(self, renewals: Sequence[Renewal]) -> list[bool]: ...
    def owned(self, name: str, token: str) -> bool: ...
    def inspect(self, name: str) -> LockInfo | None: ...
    def list_locks(self, prefix: str) -> list[LockInfo]: ...
    def break_lock(self, name: str) -> bool: ...
    def close(self) -> None: ...


class BlockingSemaphoreStore(BlockingStore, Protocol):
    """A store that also keeps semaphores (see ``AsyncSemaphoreSupport`` for each step's
    contract); its releases notify ``permit_key(name)``."""

    def acquire_permit(
        self, name: str, token: str, ttl: float, holder: Holder, limit: int
    ) -> Grant | Busy: ...
    def release_permit(self, name: str, token: str) -> bool: ...
    def extend_permits(self, renewals: Sequence[Renewal]) -> list[bool]: ...
    def permit_owned(self, name: str, token: str) -> bool: ...
    def inspect_semaphore(self, name: str) -> LockInfo | None: ...
    def list_semaphores(self, prefix: str) -> list[LockInfo]: ...
    def break_semaphore(self, name: str) -> bool: ...


class BlockingQueueStore(BlockingSemaphoreStore, Protocol):
    """A store that also keeps read-write and fair locks (see ``AsyncQueueSupport`` for each
    step's contract); its releases, breaks and dropped places notify ``queue_key(name)``."""

    def acquire_queued(
        self, name: str, token: str, ttl: float, holder: Holder, *, mode: str, queue_ttl: float
    ) -> Grant | Busy: ...
    def release_queued(self, name: str, token: str) -> bool: ...
    def extend_queued(self, renewals: Sequence[Renewal]) -> list[bool]: ...
    def queued_owned(self, name: str, token: str) -> bool: ...
    def inspect_queue(self, name: str) -> LockInfo | None: ...
    def list_queues(self, prefix: str) -> list[LockInfo]: ...
    def break_queue(self, name: str) -> bool: ...


StoreT = TypeVar("StoreT", bound=BlockingStore)
SemaphoreStoreT = TypeVar("SemaphoreStoreT", bound=BlockingSemaphoreStore)
QueueStoreT = TypeVar("QueueStoreT", bound=BlockingQueueStore)


class AsyncBlockingStoreBackend(AsyncBackend, Generic[StoreT]):
    def __init__(self, store: StoreT) -> None:
        self.store = store

    async def acquire(
        self, name: str, token: str, ttl: float, holder: Holder, waited: Busy | None = None
    ) -> Grant | Busy:
        return await io.run_blocking(self.store.acquire, name, token, ttl, holder)

    async def release(self, name: str, token: str) -> bool:
        return await io.run_blocking(self.store.release, name, token)

    async def extend(self, name: str, token: str, ttl: float) -> bool:
        return await io.run_blocking(self.store.extend, name, token, ttl)

    async def extend_many(self, renewals: Sequence[Renewal]) -> list[bool]:
        return await io.run_blocking(self.store.extend_many, renewals)

    async def owned(self, name: str, token: str) -> bool:
        return await io.run_blocking(self.store.owned, name, token)

    async def inspect(self, name: str) -> LockInfo | None:
        return await io.run_blocking(self.store.inspect, name)

    async def list_locks(self, prefix: str) -> list[LockInfo]:
        return await io.run_blocking(self.store.list_locks, prefix)

    async def break_lock(self, name: str) -> bool:
        return await io.run_blocking(self.store.break_lock, name)

    async def wait_for_release(
        self, name: str, timeout: float, busy: Busy | None = None
    ) -> None:
        await wait_for_notice(self.store.waiters, name, timeout)

    async def aclose(self) -> None:
        self.store.close()


class AsyncBlockingSemaphoreBackend(
    AsyncBlockingStoreBackend[SemaphoreStoreT], AsyncSemaphoreSupport
):
    """The shell for a store that keeps semaphores too."""

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
        return await io.run_blocking(self.store.acquire_permit, name, token, ttl, holder, limit)

    async def release_permit(self, name: str, token: str) -> bool:
        return await io.run_blocking(self.store.release_permit, name, token)

    async def extend_permits(self, renewals: Sequence[Renewal]) -> list[bool]:
        return await io.run_blocking(self.store.extend_permits, renewals)

    async def permit_owned(self, name: str, token: str) -> bool:
        return await io.run_blocking(self.store.permit_owned, name, token)

    async def inspect_semaphore(self, name: str) -> LockInfo | None:
        return await io.run_blocking(self.store.inspect_semaphore, name)

    async def list_semaphores(self, prefix: str) -> list[LockInfo]:
        return await io.run_blocking(self.store.list_semaphores, prefix)

    async def break_semaphore(self, name: str) -> bool:
        return await io.run_blocking(self.store.break_semaphore, name)

    async def wait_for_permit(
        self, name: str, timeout: float, busy: Busy | None = None
    ) -> None:
        await wait_for_notice(self.store.waiters, permit_key(name), timeout)


class AsyncBlockingQueueBackend(AsyncBlockingSemaphoreBackend[QueueStoreT], AsyncQueueSupport):
    """The shell for a store that keeps semaphores and read-write (and fair) locks."""

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
        return await io.run_blocking(
            self.store.acquire_queued, name, token, ttl, holder, mode=mode, queue_ttl=queue_ttl
        )

    async def release_queued(self, name: str, token: str) -> bool:
        return await io.run_blocking(self.store.release_queued, name, token)

    async def extend_queued(self, renewals: Sequence[Renewal]) -> list[bool]:
        return await io.run_blocking(self.store.extend_queued, renewals)

    async def queued_owned(self, name: str, token: str) -> bool:
        return await io.run_blocking(self.store.queued_owned, name, token)

    async def inspect_queue(self, name: str) -> LockInfo | None:
        return await io.run_blocking(self.store.inspect_queue, name)

    async def list_queues(self, prefix: str) -> list[LockInfo]:
        return await io.run_blocking(self.store.list_queues, prefix)

    async def break_queue(self, name: str) -> bool:
        return await io.run_blocking(self.store.break_queue, name)

    async def wait_for_turn(self, name: str, timeout: float, busy: Busy | None = None) -> None:
        await wait_for_notice(self.store.waiters, queue_key(name), timeout)
