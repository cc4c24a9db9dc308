"""``memory://`` for asyncio: the in-process store, one atomic step per call under its mutex."""

from __future__ import annotations

import urllib.parse
from collections.abc import Sequence
from typing import Any

from tenure._async.backend import AsyncBackend
from tenure._async.capabilities import (
    AsyncLeaseValueSupport,
    AsyncQueueSupport,
    AsyncSemaphoreSupport,
)
from tenure._async.wakeups import wait_for_notice
from tenure._errors import ConfigurationError
from tenure._types import Busy, Capabilities, Grant, Holder, LockInfo, Renewal
from tenure._waiters import permit_key, queue_key
from tenure.backends.memory import SCHEMES
from tenure.backends.memory._store import MemoryStore, store_named

__all__ = ["BACKEND", "AsyncMemoryBackend"]


class AsyncMemoryBackend(
    AsyncBackend, AsyncSemaphoreSupport, AsyncLeaseValueSupport, AsyncQueueSupport
):
    schemes = SCHEMES
    local = True
    capabilities = Capabilities(
        fencing="strictly increasing per name, within this process",
        fences_survive_restart=False,
        leases_survive_restart=False,
        wakeups="in-process",
        multi_host=False,
        fault_tolerant=False,
    )

    def __init__(self, store: MemoryStore, store_name: str = "") -> None:
        self.store = store
        self._store_name = store_name

    @classmethod
    def from_url(cls, url: str, **options: Any) -> AsyncMemoryBackend:
        if options:
            raise ConfigurationError(f"memory:// takes no options, got {sorted(options)}")
        parts = urllib.parse.urlsplit(url)
        if parts.path not in ("", "/") or parts.query:
            raise ConfigurationError(
                f"memory:// URLs name a store only: memory://NAME, not {url!r}"
            )
        return cls(store_named(parts.netloc), parts.netloc)

    def describe(self) -> str:
        return f"memory://{self._store_name}"

    async def acquire(
        self, name: str, token: str, ttl: float, holder: Holder, waited: Busy | None = None
    ) -> Grant | Busy:
        return self.store.acquire(name, token, ttl, holder)

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
        return self.store.acquire(name, token, ttl, holder, value)

    async def set_value(self, name: str, token: str, value: str) -> bool:
        return self.store.set_value(name, token, value)

    async def release(self, name: str, token: str) -> bool:
        return self.store.release(name, token)

    async def extend(self, name: str, token: str, ttl: float) -> bool:
        return self.store.extend(name, token, ttl)

    async def owned(self, name: str, token: str) -> bool:
        return self.store.owned(name, token)

    async def inspect(self, name: str) -> LockInfo | None:
        return self.store.inspect(name)

    async def list_locks(self, prefix: str) -> list[LockInfo]:
        return self.store.list_locks(prefix)

    async def break_lock(self, name: str) -> bool:
        return self.store.break_lock(name)

    async def wait_for_release(
        self, name: str, timeout: float, busy: Busy | None = None
    ) -> None:
        await wait_for_notice(self.store.waiters, name, timeout)

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
        return self.store.acquire_permit(name, token, ttl, holder, limit)

    async def release_permit(self, name: str, token: str) -> bool:
        return self.store.release_permit(name, token)

    async def extend_permits(self, renewals: Sequence[Renewal]) -> list[bool]:
        return [self.store.extend_permit(r.name, r.token, r.ttl) for r in renewals]

    async def permit_owned(self, name: str, token: str) -> bool:
        return self.store.permit_owned(name, token)

    async def inspect_semaphore(self, name: str) -> LockInfo | None:
        return self.store.inspect_semaphore(name)

    async def list_semaphores(self, prefix: str) -> list[LockInfo]:
        return self.store.list_semaphores(prefix)

    async def break_semaphore(self, name: str) -> bool:
        return self.store.break_semaphore(name)

    async def wait_for_permit(
        self, name: str, timeout: float, busy: Busy | None = None
    ) -> None:
        await wait_for_notice(self.store.waiters, permit_key(name), timeout)

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
        return self.store.acquire_queued(
            name, token, ttl, holder, mode=mode, queue_ttl=queue_ttl
        )

    async def release_queued(self, name: str, token: str) -> bool:
        return self.store.release_queued(name, token)

    async def extend_queued(self, renewals: Sequence[Renewal]) -> list[bool]:
        return [self.store.extend_queued(r.name, r.token, r.ttl) for r in renewals]

    async def queued_owned(self, name: str, token: str) -> bool:
        return self.store.queued_owned(name, token)

    async def inspect_queue(self, name: str) -> LockInfo | None:
        return self.store.inspect_queue(name)

    async def list_queues(self, prefix: str) -> list[LockInfo]:
        return self.store.list_queues(prefix)

    async def break_queue(self, name: str) -> bool:
        return self.store.break_queue(name)

    async def wait_for_turn(self, name: str, timeout: float, busy: Busy | None = None) -> None:
        await wait_for_notice(self.store.waiters, queue_key(name), timeout)


BACKEND = AsyncMemoryBackend
