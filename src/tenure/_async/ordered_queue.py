"""The shape shared by stores where every holder and waiter of a name is an ordered entry of
its own (etcd's keys ordered by creation revision, ZooKeeper's sequential nodes): a lock is
the case ``limit = 1`` of the same queue a semaphore uses, so each public step of a lock and of
a semaphore is one queue step with the primitive's kind (``"lock"``, ``"semaphore"``), which
keeps their entries apart. A backend of this shape writes the queue steps once; the mapping
below is the only place the primitives differ. Written for asyncio; ``scripts/unasync.py``
generates the threads flavour.

Read-write and fair locks (kind ``"rwlock"``) are the same queue with a mode per entry
("read" or "write", the kazoo ReadLock/WriteLock idea), in place of the limit rule:

- a **write** entry is granted when it is the oldest live entry of the name;
- a **read** entry is granted when no live *write* entry is older than it.

So a waiting writer holds back every reader that arrives after it, the readers that arrived
before it go first, and a fair lock (the write side alone) is granted in arrival order. A
waiter's entry is its place in the queue: a short lease of its own (``queue_ttl``), kept alive
by each of its waits, marked queued until the step that grants it. A write waiter watches the
entry just ahead of it; a read waiter the newest write entry ahead of it; every wait is
bounded and followed by a fresh ranking.

**Fences.** An entry's fence is its creation revision (etcd) or creation zxid (ZooKeeper):
the store's global counter at the write that created the entry, so a later entry always has a
higher fence. What that gives, and why:

1. *A write's fence exceeds every fence granted before it.* Take a write entry W granted at
   time t and any entry G granted before t. If G was created before W, its fence is lower.
   If G was created after W, then W's entry existed (alive, ahead of G) from G's creation to
   t, because an entry that lapses is never revived: its waiter joins again with a new entry
   and so a new, higher fence. When G was granted, W was a live entry older than G, and the
   rule refuses G (write or read) while an older live write entry exists. So that case
   cannot happen. (On ZooKeeper "live" is judged by the contender: a place judged lapsed may
   still be rewritten by its slow waiter; every write of a place therefore checks that its
   previous write was not older than its queue lease by the server's clock, and if it was,
   the waiter drops that entry and joins again, as a renewal that comes too late reports the
   lease lost. The backend's module says why the server's clock makes this sound.)
2. *A read's fence exceeds every write fence granted before it*, by the same argument with
   W a write granted before the read R: if W was created after R, R's entry was a live
   entry older than W when W was granted, which the write rule refuses.
3. Readers granted together (those that waited behind one writer, woken by its release) may
   be granted in any order among themselves, so two such readers' fences need not follow
   their grant order. They hold the name at the same time and exclude the same writers: a
   resource that rejects writes with a fence below the highest it has seen is not affected.
"""

from __future__ import annotations

import abc
from collections.abc import Sequence

from tenure._async.backend import AsyncBackend
from tenure._async.capabilities import AsyncQueueSupport, AsyncSemaphoreSupport
from tenure._types import Busy, Grant, Holder, LockInfo, Renewal

__all__ = ["AsyncOrderedQueueBackend"]


class AsyncOrderedQueueBackend(AsyncBackend, AsyncSemaphoreSupport, AsyncQueueSupport):
    """Locks, semaphores and read-write (and fair) locks over one ordered queue of entries per
    (kind, name)."""

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
        mode: str | None = None,
        queue_ttl: float | None = None,
    ) -> Grant | Busy:
        """Granted when this token's entry is among the ``limit`` oldest live ones; with a
        ``mode`` (kind "rwlock"), by the mode's rule instead (module docstring), and a
        refusal leaves the entry as a waiting place on a lease of ``queue_ttl`` seconds."""

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

    # ---- read-write and fair locks: the queue with a mode per entry ---------------------

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
        return await self._acquire(
            "rwlock", name, token, ttl, holder, limit=1, waited=waited, mode=mode,
            queue_ttl=queue_ttl,
        )

    async def release_queued(self, name: str, token: str) -> bool:
        return await self._release("rwlock", name, token)

    async def extend_queued(self, renewals: Sequence[Renewal]) -> list[bool]:
        return await self._extend_many("rwlock", renewals)

    async def queued_owned(self, name: str, token: str) -> bool:
        return await self._owned("rwlock", name, token)

    async def inspect_queue(self, name: str) -> LockInfo | None:
        return await self._inspect("rwlock", name)

    async def list_queues(self, prefix: str) -> list[LockInfo]:
        return await self._list("rwlock", prefix)

    async def break_queue(self, name: str) -> bool:
        return await self._break("rwlock", name)

    async def wait_for_turn(self, name: str, timeout: float, busy: Busy | None = None) -> None:
        await self._wait("rwlock", name, busy, timeout)
