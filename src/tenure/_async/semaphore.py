"""The counting semaphore: a name with up to ``limit`` live leases (permits), each with its
own token, server-clock expiry, holder and fence. A handle stands for ONE permit; the shared
lease logic (waiting, renewal, loss, fences) is ``lease.py``'s, the atomic steps are the
backend's ``AsyncSemaphoreSupport``. Written for asyncio; ``scripts/unasync.py`` generates
the threads flavour.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from tenure._async.capabilities import AsyncSemaphoreSupport
from tenure._async.lease import AsyncLease, AsyncLeaseKind, Hold
from tenure._errors import InvalidArgument
from tenure._types import Busy, Grant, Holder, Renewal

if TYPE_CHECKING:
    from tenure._async.backend import AsyncBackend
    from tenure._async.client import AsyncLocks

__all__ = ["AsyncPermitKind", "AsyncSemaphore"]


class AsyncPermitKind(AsyncLeaseKind):
    """A semaphore's leases: the backend's permit steps, capacity ``limit``."""

    kind = "semaphore"

    def __init__(self, backend: AsyncBackend, permits: AsyncSemaphoreSupport, limit: int) -> None:
        self._backend = backend
        self._permits = permits
        self.limit = limit

    @property
    def backend(self) -> AsyncBackend:
        return self._backend

    async def acquire(
        self, name: str, token: str, ttl: float, holder: Holder, waited: Busy | None
    ) -> Grant | Busy:
        return await self._permits.acquire_permit(
            name, token, ttl, holder, self.limit, waited=waited
        )

    async def release(self, name: str, token: str) -> bool:
        return await self._permits.release_permit(name, token)

    async def extend(self, name: str, token: str, ttl: float) -> bool:
        (extended,) = await self._permits.extend_permits([Renewal(name, token, ttl, self.kind)])
        return extended

    async def extend_many(self, renewals: Sequence[Renewal]) -> list[bool]:
        return await self._permits.extend_permits(renewals)

    async def owned(self, name: str, token: str) -> bool:
        return await self._permits.permit_owned(name, token)

    async def locked(self, name: str) -> bool:
        info = await self._permits.inspect_semaphore(name)
        if info is None or not info.leases:
            return False
        return len(info.leases) >= (info.limit or self.limit)

    async def wait(self, name: str, timeout: float, busy: Busy) -> None:
        await self._permits.wait_for_permit(name, timeout, busy)

    def through(self, backend: AsyncBackend) -> AsyncLeaseKind:
        assert isinstance(backend, AsyncSemaphoreSupport)  # an instance of the same class
        return AsyncPermitKind(backend, backend, self.limit)


class AsyncSemaphore(AsyncLease):
    """A handle on ONE permit of the semaphore ``name`` (at most ``limit`` live permits per
    name). Creating it sends nothing; see ``AsyncLocks.semaphore``. For several permits in
    one process, make several handles."""

    noun = "permit"

    def __init__(
        self,
        client: AsyncLocks,
        permits: AsyncSemaphoreSupport,
        name: str,
        limit: int,
        ttl: float,
        *,
        timeout: float | None,
        blocking: bool,
        renew: bool,
        max_renewals: int | None,
        on_lost: Callable[[AsyncSemaphore], Any] | None,
    ) -> None:
        super().__init__(
            client,
            AsyncPermitKind(client.backend, permits, limit),
            name,
            ttl,
            timeout=timeout,
            blocking=blocking,
            renew=renew,
            max_renewals=max_renewals,
            on_lost=on_lost,
            reentrant=False,
        )
        self.limit = limit

    def __repr__(self) -> str:
        return super().__repr__()[:-1] + f" limit={self.limit}>"

    def _acquire_while_held(self, held: Hold) -> None:
        raise InvalidArgument(
            f"this handle already holds a permit of {self.name!r}: one handle is one permit, "
            "make another handle for another permit"
        )
