"""Read-write locks and fair (FIFO) locks: queued leases with modes.

A name holds readers (shared leases) or one writer (an exclusive lease), and a queue of
waiting places in arrival order. A reader is granted when no writer holds the name and no
writer waits ahead of it; a writer when nobody holds the name and nobody waits ahead of it.
So a waiting writer holds back every reader that arrives after it (writers never starve),
and the readers that arrived before it go first (readers never starve either).

A fair lock is the write side of the read-write lock of the same name: writers are granted
strictly in arrival order. ``locks.lock("k", fair=True)`` and ``locks.rwlock("k").write()``
exclude each other and share one fence counter; the plain ``locks.lock("k")`` is a different
record.

Every read or write lease is an ordinary lease of ``lease.py`` (token, server-clock expiry,
fence, watchdog, loss signalled); the atomic steps are the backend's ``AsyncQueueSupport``.
Written for asyncio; ``scripts/unasync.py`` generates the threads flavour.

What happens on failure:
- A waiter's place is a lease of its own (``QUEUE_TTL``), refreshed by each of its acquire
  attempts. A waiter that dies stops blocking the queue when its place lapses; one that gives
  up (a try that found the lock busy, a timeout, a cancellation, an error) leaves at once.
- A holder that dies frees the lock when its lease ends, as a lock's holder does.
- A reader that takes a second read lease on another handle while a writer waits queues
  behind that writer, which waits for the first read lease: a deadlock until the timeout.
  Nest reads on one handle with ``reentrant=True`` (counted in-process) instead.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypedDict, Unpack

from tenure._async.capabilities import READ, WRITE, AsyncQueueSupport
from tenure._async.lease import AsyncLeaseKind
from tenure._async.lock import AsyncLock
from tenure._errors import InvalidArgument
from tenure._types import Busy, Grant, Holder, LockInfo, Renewal

if TYPE_CHECKING:
    from tenure._async.backend import AsyncBackend
    from tenure._async.client import AsyncLocks

__all__ = ["QUEUE_TTL", "AsyncQueuedKind", "AsyncReadWriteLock", "LockOptions"]

QUEUE_TTL = 3.0
"""Seconds a waiter's place in a queue outlives its last acquire attempt. A waiter tries
again at least every ``QUEUE_TTL / 3``, so two attempts may be late or fail before its place
lapses; a waiter that died (SIGKILL, a lost host) without leaving stops blocking the queue
within this long. Shorter would cost live waiters on a loaded machine their turn; longer
would let a dead one hold everybody behind it for longer."""


class AsyncQueuedKind(AsyncLeaseKind):
    """One side of a read-write lock (``mode`` "read" or "write") or a fair lock (the write
    side, named so in messages): the backend's queued steps."""

    kind = "rwlock"
    queues = True

    def __init__(
        self,
        backend: AsyncBackend,
        queue: AsyncQueueSupport,
        mode: str,
        *,
        fair: bool = False,
        queue_ttl: float = QUEUE_TTL,
    ) -> None:
        if mode not in (READ, WRITE):
            raise InvalidArgument(f"a queued lease's mode is 'read' or 'write', not {mode!r}")
        self._backend = backend
        self._queue = queue
        self.mode = mode
        self.shared = mode == READ
        self.noun = "fair lock" if fair else f"{mode} lock"
        self.queue_ttl = queue_ttl
        """A waiter's place lease (seconds); tests shorten it."""

    @property
    def backend(self) -> AsyncBackend:
        return self._backend

    async def acquire(
        self, name: str, token: str, ttl: float, holder: Holder, waited: Busy | None
    ) -> Grant | Busy:
        return await self._queue.acquire_queued(
            name, token, ttl, holder, mode=self.mode, queue_ttl=self.queue_ttl, waited=waited
        )

    async def release(self, name: str, token: str) -> bool:
        return await self._queue.release_queued(name, token)

    async def extend(self, name: str, token: str, ttl: float) -> bool:
        (extended,) = await self._queue.extend_queued([Renewal(name, token, ttl, self.kind)])
        return extended

    async def extend_many(self, renewals: Sequence[Renewal]) -> list[bool]:
        return await self._queue.extend_queued(renewals)

    async def owned(self, name: str, token: str) -> bool:
        return await self._queue.queued_owned(name, token)

    async def locked(self, name: str) -> bool:
        """Whether a new lease of this mode would wait. Readers ask whether a writer holds or
        anybody waits: a place that lasts is (but for a moment) behind a writer."""
        info = await self._queue.inspect_queue(name)
        if info is None:
            return False
        if info.queued:
            return True
        if self.mode == WRITE:
            return info.held
        return any(lease.mode == WRITE for lease in info.leases)

    async def wait(self, name: str, timeout: float, busy: Busy) -> None:
        # The next attempt refreshes this waiter's place: it must come before the place
        # lapses, whatever the back-off wanted.
        await self._queue.wait_for_turn(name, min(timeout, self.queue_ttl / 3), busy)

    async def abandon(self, name: str, token: str, busy: Busy) -> None:
        await self._queue.release_queued(name, token)

    def through(self, backend: AsyncBackend) -> AsyncLeaseKind:
        assert isinstance(backend, AsyncQueueSupport)  # an instance of the same class
        kind = AsyncQueuedKind(backend, backend, self.mode, queue_ttl=self.queue_ttl)
        kind.noun = self.noun
        return kind


class LockOptions(TypedDict, total=False):
    """The options of one side of a read-write lock, as ``AsyncLocks.lock`` takes them."""

    ttl: float | None
    timeout: float | None
    blocking: bool
    renew: bool
    max_renewals: int | None
    on_lost: Callable[[AsyncLock], Any] | None
    reentrant: bool


class AsyncReadWriteLock:
    """A read-write lock ``name``: ``read()`` and ``write()`` return lock handles (acquire,
    release, extend, owned, locked, fence, lost, check, ``async with``, the watchdog) on a
    shared or an exclusive lease. Creating it sends nothing; see ``AsyncLocks.rwlock``."""

    def __init__(
        self,
        client: AsyncLocks,
        name: str,
        options: LockOptions,
        make: Callable[[str, str, LockOptions], AsyncLock],
    ) -> None:
        self._client = client
        self.name = name
        self._options = options
        self._make = make
        """Makes (and validates) one side's handle: the client's, which checks the options
        exactly as ``lock()`` does."""
        self._reentrant: dict[str, AsyncLock] = {}

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r}>"

    def read(self, **overrides: Unpack[LockOptions]) -> AsyncLock:
        """A handle on a shared (read) lease: many readers hold the name at once, never
        together with a writer, and a reader that arrives while a writer waits goes after
        that writer. ``overrides``: any of the ``rwlock`` options, for this handle."""
        return self._side(READ, overrides)

    def write(self, **overrides: Unpack[LockOptions]) -> AsyncLock:
        """A handle on an exclusive (write) lease: granted when nobody holds the name and
        nobody waits ahead of it; its fence is greater than every earlier read or write
        fence of the name. The same lease as ``locks.lock(name, fair=True)``."""
        return self._side(WRITE, overrides)

    async def inspect(self) -> LockInfo | None:
        """The readers or writer (each with its ``mode``), the queue length and the last
        fence: ``AsyncLocks.inspect(name, kind="rwlock")``."""
        return await self._client.inspect(self.name, kind="rwlock")

    def _side(self, mode: str, overrides: LockOptions) -> AsyncLock:
        options: LockOptions = {**self._options, **overrides}
        if overrides or not options.get("reentrant", False):
            return self._make(self.name, mode, options)
        # Re-entrancy counts per handle: the rwlock's own options give one handle per side,
        # so that ``async with rw.read():`` nests in one task.
        handle = self._reentrant.get(mode)
        if handle is None:
            handle = self._reentrant.setdefault(mode, self._make(self.name, mode, options))
        return handle
