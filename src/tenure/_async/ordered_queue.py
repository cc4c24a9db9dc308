"""The shape shared by stores where every holder and waiter of a name is an ordered entry of
its own (etcd's keys ordered by creation revision, ZooKeeper's sequential nodes): a lock is
the case ``limit = 1`` of the same queue a semaphore uses, so each public step of a lock and of
a semaphore is one queue step with the primitive's kind (``"lock"``, ``"semaphore"``), which
keeps their entries apart. A backend of this shape writes the queue steps once; the mapping
below is the only place the two primitives differ. Written for asyncio; ``scripts/unasync.py``
generates the threads flavour.
"""

from __future__ import annotations

import abc
from collections.abc import Sequence

from tenure._async.backend import AsyncBackend
from tenure._async.capabilities import AsyncSemaphoreSupport
from tenure._types import Busy, Grant, Holder, LockInfo, Renewal

__all__ = ["AsyncOrderedQueueBackend"]


class AsyncOrderedQueueBackend(AsyncBackend, AsyncSemaphoreSupport):
    """Locks and semaphores over one ordered queue of entries per (kind, name)."""

    # ---- the queue steps a backend of this shape implements --------------------------------

    @abc.abstractmethod
    async def _acquire(
        self,
        kind: str,
        name: str,
        token: str,
        ttl: float,
        holder: Holder,
        *,
        limit: int,
        waited: Busy | None,
        value: str | None = None,
    ) -> Grant | Busy:
        """Granted when this token's entry is among the ``limit`` oldest live ones."""

    @abc.abstractmethod
    async def _release(self, kind: str, name: str, token: str) -> bool: ...

    @abc.abstractmethod
    async def _extend_many(self, kind: str, renewals: Sequence[Renewal]) -> list[bool]: ...

    @abc.abstractmethod
    async def _owned(self, kind: str, name: str, token: str) -> bool: ...

    @abc.abstractmethod
    async def _inspect(self, kind: str, name: str) -> LockInfo | None: ...

    @abc.abstractmethod
    async def _list(self, kind: str, prefix: str) -> list[LockInfo]: ...

    @abc.abstractmethod
    async def _break(self, kind: str, name: str) -> bool: ...

    @abc.abstractmethod
    async def _wait(self, kind: str, name: str, busy: Busy | None, timeout: float) -> None: ...

    # ---- the lock: the queue with limit 1 ------------------------------------------------

    async def acquire(
        self, name: str, token: str, ttl: float, holder: Holder, waited: Busy | None = None
    ) -> Grant | Busy:
        return await self._acquire("lock", name, token, ttl, holder, limit=1, waited=waited)

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
        """``AsyncLeaseValueSupport.acquire_with_value`` for the backends that offer it."""
        return await self._acquire(
            "lock", name, token, ttl, holder, limit=1, waited=waited, value=value
        )

    async def release(self, name: str, token: str) -> bool:
        return await self._release("lock", name, token)

    async def extend(self, name: str, token: str, ttl: float) -> bool:
        (extended,) = await self._extend_many("lock", [Renewal(name, token, ttl)])
        return extended

    async def extend_many(self, renewals: Sequence[Renewal]) -> list[bool]:
        return await self._extend_many("lock", renewals)

    async def owned(self, name: str, token: str) -> bool:
        return await self._owned("lock", name, token)

    async def inspect(self, name: str) -> LockInfo | None:
        return await self._inspect("lock", name)

    async def list_locks(self, prefix: str) -> list[LockInfo]:
        return await self._list("lock", prefix)

    async def break_lock(self, name: str) -> bool:
        return await self._break("lock", name)

    async def wait_for_release(self, name: str, timeout: float, busy: Busy | None = None) -> None:
        await self._wait("lock", name, busy, timeout)

    # ---- the semaphore: the same queue with limit N ------------------------------------

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
        return await self._acquire(
            "semaphore", name, token, ttl, holder, limit=limit, waited=waited
        )

    async def release_permit(self, name: str, token: str) -> bool:
        return await self._release("semaphore", name, token)

    async def extend_permits(self, renewals: Sequence[Renewal]) -> list[bool]:
        return await self._extend_many("semaphore", renewals)

    async def permit_owned(self, name: str, token: str) -> bool:
        return await self._owned("semaphore", name, token)

    async def inspect_semaphore(self, name: str) -> LockInfo | None:
        return await self._inspect("semaphore", name)

    async def list_semaphores(self, prefix: str) -> list[LockInfo]:
        return await self._list("semaphore", prefix)

    async def break_semaphore(self, name: str) -> bool:
        return await self._break("semaphore", name)

    async def wait_for_permit(self, name: str, timeout: float, busy: Busy | None = None) -> None:
        await self._wait("semaphore", name, busy, timeout)
