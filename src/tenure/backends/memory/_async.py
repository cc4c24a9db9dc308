"""``memory://`` for asyncio: the in-process store, one atomic step per call under its mutex.

One option, in the URL query or as a ``connect()`` keyword: ``gc_after``, seconds (default 30
days) a name's record is kept after its last lease, waiting place or release ended;
``none`` keeps records forever. See docs/backends/memory.md.
"""

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
from tenure._options import DEFAULT_GC_AFTER, gc_after_option
from tenure._types import Busy, Capabilities, Grant, Holder, LockInfo, Renewal
from tenure._urls import redact
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
        fencing="strictly increasing per name, and never going back: each is at least this "
        "host's wall clock in microseconds, so also in a new process and after clean-up "
        "removed a name idle for gc_after (10 minutes by default)",
        # The "server" is the process: a new one starts empty, yet above every fence an
        # earlier one issued, by the clock floor (unless the host's clock is set back).
        fences_survive_restart=True,
        fences_count_per_name=False,
        leases_survive_restart=False,
        wakeups="in-process",
        multi_host=False,
        fault_tolerant=False,
    )

    def __init__(
        self,
        store: MemoryStore,
        store_name: str = "",
        gc_after: float | None = DEFAULT_GC_AFTER,
    ) -> None:
        self.store = store
        self._store_name = store_name
        self.gc_after = gc_after
        """Seconds a record outlives its last use (None: forever). A store shared by
        connections with different values keeps each record by the last writer's."""

    @classmethod
    def from_url(cls, url: str, **options: Any) -> AsyncMemoryBackend:
        parts = urllib.parse.urlsplit(url)
        if parts.path not in ("", "/"):
            raise ConfigurationError(
                f"memory:// URLs name a store only: memory://NAME[?gc_after=S], not {redact(url)!r}"
            )
        try:
            query = urllib.parse.parse_qsl(
                parts.query, keep_blank_values=True, strict_parsing=bool(parts.query)
            )
        except ValueError:
            raise ConfigurationError(f"memory:// URL query is malformed: {redact(url)!r}") from None
        settings: dict[str, Any] = dict(query)
        settings.update(options)
        unknown = sorted(set(settings) - {"gc_after"})
        if unknown:
            raise ConfigurationError(f"memory:// takes only gc_after, got {unknown}")
        gc_after = gc_after_option("memory", settings.get("gc_after", DEFAULT_GC_AFTER))
        return cls(store_named(parts.netloc), parts.netloc, gc_after)

    def describe(self) -> str:
        return f"memory://{self._store_name}"

    async def acquire(
        self, name: str, token: str, ttl: float, holder: Holder, waited: Busy | None = None
    ) -> Grant | Busy:
        return self.store.acquire(name, token, ttl, holder, gc_after=self.gc_after)

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
        return self.store.acquire(name, token, ttl, holder, value, gc_after=self.gc_after)

    async def set_value(self, name: str, token: str, value: str) -> bool:
        return self.store.set_value(name, token, value)

    async def release(self, name: str, token: str) -> bool:
        return self.store.release(name, token, gc_after=self.gc_after)

    async def extend(self, name: str, token: str, ttl: float) -> bool:
        return self.store.extend(name, token, ttl, gc_after=self.gc_after)

    async def owned(self, name: str, token: str) -> bool:
        return self.store.owned(name, token)

    async def inspect(self, name: str) -> LockInfo | None:
        return self.store.inspect(name)

    async def list_locks(self, prefix: str) -> list[LockInfo]:
        return self.store.list_locks(prefix)

    async def break_lock(self, name: str) -> bool:
        return self.store.break_lock(name, gc_after=self.gc_after)

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
        return self.store.acquire_permit(
            name, token, ttl, holder, limit, gc_after=self.gc_after
        )

    async def release_permit(self, name: str, token: str) -> bool:
        return self.store.release_permit(name, token, gc_after=self.gc_after)

    async def extend_permits(self, renewals: Sequence[Renewal]) -> list[bool]:
        return [
            self.store.extend_permit(r.name, r.token, r.ttl, gc_after=self.gc_after)
            for r in renewals
        ]

    async def permit_owned(self, name: str, token: str) -> bool:
        return self.store.permit_owned(name, token)

    async def inspect_semaphore(self, name: str) -> LockInfo | None:
        return self.store.inspect_semaphore(name)

    async def list_semaphores(self, prefix: str) -> list[LockInfo]:
        return self.store.list_semaphores(prefix)

    async def break_semaphore(self, name: str) -> bool:
        return self.store.break_semaphore(name, gc_after=self.gc_after)

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
            name, token, ttl, holder, mode=mode, queue_ttl=queue_ttl, gc_after=self.gc_after
        )

    async def release_queued(self, name: str, token: str) -> bool:
        return self.store.release_queued(name, token, gc_after=self.gc_after)

    async def extend_queued(self, renewals: Sequence[Renewal]) -> list[bool]:
        return [
            self.store.extend_queued(r.name, r.token, r.ttl, gc_after=self.gc_after)
            for r in renewals
        ]

    async def queued_owned(self, name: str, token: str) -> bool:
        return self.store.queued_owned(name, token)

    async def inspect_queue(self, name: str) -> LockInfo | None:
        return self.store.inspect_queue(name)

    async def list_queues(self, prefix: str) -> list[LockInfo]:
        return self.store.list_queues(prefix)

    async def break_queue(self, name: str) -> bool:
        return self.store.break_queue(name, gc_after=self.gc_after)

    async def wait_for_turn(self, name: str, timeout: float, busy: Busy | None = None) -> None:
        await wait_for_notice(self.store.waiters, queue_key(name), timeout)


BACKEND = AsyncMemoryBackend
