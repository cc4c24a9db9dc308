"""The mutex: a name with at most one live lease. Its atomic steps are the backend's core
ones (``AsyncBackend.acquire`` / ``release`` / ``extend_many`` / ``owned``); everything else
is the shared lease logic of ``lease.py``. Written for asyncio; ``scripts/unasync.py``
generates the threads flavour.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from tenure._async.lease import DEFAULT, AsyncLease, AsyncLeaseKind, Hold
from tenure._errors import InvalidArgument
from tenure._types import Busy, Grant, Holder, Renewal

if TYPE_CHECKING:
    from tenure._async.backend import AsyncBackend
    from tenure._async.client import AsyncLocks

__all__ = ["DEFAULT", "AsyncLock", "AsyncMutexKind", "Hold"]


class AsyncMutexKind(AsyncLeaseKind):
    """A lock's leases: the backend's core steps, capacity one."""

    kind = "lock"

    def __init__(self, backend: AsyncBackend) -> None:
        self._backend = backend

    @property
    def backend(self) -> AsyncBackend:
        return self._backend

    async def acquire(
        self, name: str, token: str, ttl: float, holder: Holder, waited: Busy | None
    ) -> Grant | Busy:
        return await self._backend.acquire(name, token, ttl, holder, waited)

    @property
    def combines_try_and_wait(self) -> bool:
        return self._backend.combines_try_and_wait

    async def acquire_or_wait(
        self, name: str, token: str, ttl: float, holder: Holder, wait: float
    ) -> Grant | Busy | None:
        return await self._backend.acquire_or_wait(name, token, ttl, holder, wait)

    async def release(self, name: str, token: str) -> bool:
        return await self._backend.release(name, token)

    async def extend(self, name: str, token: str, ttl: float) -> bool:
        return await self._backend.extend(name, token, ttl)

    async def extend_many(self, renewals: Sequence[Renewal]) -> list[bool]:
        return await self._backend.extend_many(renewals)

    async def owned(self, name: str, token: str) -> bool:
        return await self._backend.owned(name, token)

    async def locked(self, name: str) -> bool:
        info = await self._backend.inspect(name)
        return info is not None and info.held

    async def wait(self, name: str, timeout: float, busy: Busy) -> None:
        await self._backend.wait_for_release(name, timeout, busy)

    def through(self, backend: AsyncBackend) -> AsyncLeaseKind:
        return AsyncMutexKind(backend)


class AsyncLock(AsyncLease):
    """A handle on one named lock. Creating it sends nothing; see ``AsyncLocks.lock``.

    ``kind`` picks the lock's leases: the plain mutex by default; a fair lock, or a side of
    a read-write lock, is the same handle over a queued kind (``tenure._async.rwlock``).
    """

    noun = "lock"

    def __init__(
        self,
        client: AsyncLocks,
        name: str,
        ttl: float,
        *,
        timeout: float | None,
        blocking: bool,
        renew: bool,
        max_renewals: int | None,
        on_lost: Callable[[AsyncLock], Any] | None,
        reentrant: bool,
        kind: AsyncLeaseKind | None = None,
    ) -> None:
        super().__init__(
            client,
            AsyncMutexKind(client.backend) if kind is None else kind,
            name,
            ttl,
            timeout=timeout,
            blocking=blocking,
            renew=renew,
            max_renewals=max_renewals,
            on_lost=on_lost,
            reentrant=reentrant,
        )
        if self.kind.noun is not None:
            self.noun = self.kind.noun

    def _acquire_while_held(self, held: Hold) -> None:
        if self.kind.shared:
            # A second shared lease would be granted at once and replace the first in this
            # handle's books, leaving the first to run out unseen.
            raise InvalidArgument(
                f"this handle already holds a {self.noun} of {self.name!r}: one handle is one "
                "lease; make another handle, or use reentrant=True to nest"
            )
