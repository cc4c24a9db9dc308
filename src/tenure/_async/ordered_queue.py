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

from tenure._async.store import AsyncAttempt, AsyncStore, extend_by_kind
from tenure._types import Busy, Grant, Holder, Kind, LeaseSpec, Renewal

__all__ = ["AsyncOrderedQueueStore"]


class AsyncOrderedQueueStore(AsyncStore):
    """Locks, semaphores and read-write (and fair) locks over one ordered queue of entries per
    (kind, name)."""

    offers = frozenset({"lock", "semaphore", "election", "rwlock", "fair"})
    driver_errors = ()  # the steps translate their own driver's errors

    def attempt(
        self, name: str, spec: LeaseSpec, token: str, ttl: float, holder: Holder
    ) -> AsyncAttempt:
        return AsyncOrderedQueueAttempt(self, name, spec, token=token, ttl=ttl, holder=holder)

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
    async def _extend_many(self, kind: str, renewals: Sequence[Renewal]) -> list[bool]: ...

    @abc.abstractmethod
    async def _wait(self, kind: str, name: str, busy: Busy | None, timeout: float) -> None: ...

    async def _abandon(self, name: str, busy: Busy) -> None:
        """A lock or semaphore attempt that waited gives up: drop what its wait kept."""

    # ---- the verbs, once for every kind -----------------------------------------------

    async def acquire(
        self, name: str, spec: LeaseSpec, token: str, ttl: float, holder: Holder
    ) -> Grant | Busy:
        return await self._acquire_spec(name, spec, token, ttl, holder, waited=None)

    async def _acquire_spec(
        self, name: str, spec: LeaseSpec, token: str, ttl: float, holder: Holder, *,
        waited: Busy | None,
    ) -> Grant | Busy:
        return await self._acquire(
            str(spec.kind), name, token, ttl, holder, limit=spec.limit, waited=waited,
            value=spec.value, mode=None if spec.mode is None else str(spec.mode),
            queue_ttl=spec.queue_ttl,
        )

    async def extend_many(self, renewals: Sequence[Renewal]) -> list[bool]:
        return await extend_by_kind(renewals, self._extend_kind)

    async def _extend_kind(self, kind: Kind, renewals: Sequence[Renewal]) -> list[bool]:
        return await self._extend_many(str(kind), renewals)


class AsyncOrderedQueueAttempt(AsyncAttempt):
    """An attempt whose entry in the queue (``Busy.waiting``) travels from one try to the
    wait and the next try."""

    store: AsyncOrderedQueueStore

    def __init__(
        self, store: AsyncOrderedQueueStore, name: str, spec: LeaseSpec, *, token: str,
        ttl: float, holder: Holder,
    ) -> None:
        super().__init__(store, name, spec, token=token, ttl=ttl, holder=holder)
        self.waited: Busy | None = None
        self.last: Busy | None = None

    async def try_once(self) -> Grant | Busy:
        outcome = await self.store._acquire_spec(
            self.name, self.spec, self.token, self.ttl, self.holder, waited=self.waited
        )
        if isinstance(outcome, Busy):
            self.last = outcome
        return outcome

    async def wait(self, timeout: float, busy: Busy) -> None:
        self.waited = busy
        if self.spec.queues and self.spec.queue_ttl is not None:
            timeout = min(timeout, self.spec.queue_ttl / 3)
        await self.store._wait(str(self.spec.kind), self.name, busy, timeout)

    @property
    def holds_place(self) -> bool:
        return self.spec.queues or self.waited is not None

    async def leave(self) -> None:
        if self.spec.queues:
            await self.store.release(self.spec.kind, self.name, self.token)
            return
        await self.store._abandon(self.name, self.last or self.waited or Busy(None))
