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
fence, watchdog, loss signalled); the store's kind RWLOCK, with the mode in the spec.
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

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypedDict, Unpack

from tenure._async.lock import AsyncLock
from tenure._errors import InvalidArgument
from tenure._types import Kind, LeaseSpec, LockInfo, Mode

if TYPE_CHECKING:
    from tenure._async.client import AsyncLocks

__all__ = ["QUEUE_TTL", "AsyncReadWriteLock", "LockOptions", "queued_spec"]

QUEUE_TTL = 3.0
"""Seconds a waiter's place in a queue outlives its last acquire attempt. A waiter tries
again at least every ``QUEUE_TTL / 3``, so two attempts may be late or fail before its place
lapses; a waiter that died (SIGKILL, a lost host) without leaving stops blocking the queue
within this long. Shorter would cost live waiters on a loaded machine their turn; longer
would let a dead one hold everybody behind it for longer."""


def queued_spec(mode: object, queue_ttl: float = QUEUE_TTL, *, fair: bool = False) -> LeaseSpec:
    """The spec of one side of a read-write lock (a fair lock, ``fair=True``: the write side,
    marked as a fair lock's for the operator's views)."""
    if mode not in (Mode.READ, Mode.WRITE):
        raise InvalidArgument(f"a queued lease's mode is 'read' or 'write', not {mode!r}")
    if fair and mode != Mode.WRITE:
        raise InvalidArgument("a fair lock is the write side of its name's queue")
    return LeaseSpec(Kind.RWLOCK, mode=Mode(str(mode)), queue_ttl=queue_ttl, fair=fair)


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
        make: Callable[[str, Mode, LockOptions], AsyncLock],
    ) -> None:
        self._client = client
        self.name = name
        self._options = options
        self._make = make
        """Makes (and validates) one side's handle: the client's, which checks the options
        exactly as ``lock()`` does."""
        self._reentrant: dict[Mode, AsyncLock] = {}

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r}>"

    def read(self, **overrides: Unpack[LockOptions]) -> AsyncLock:
        """A handle on a shared (read) lease: many readers hold the name at once, never
        together with a writer, and a reader that arrives while a writer waits goes after
        that writer. ``overrides``: any of the ``rwlock`` options, for this handle."""
        return self._side(Mode.READ, overrides)

    def write(self, **overrides: Unpack[LockOptions]) -> AsyncLock:
        """A handle on an exclusive (write) lease: granted when nobody holds the name and
        nobody waits ahead of it; its fence is greater than every earlier read or write
        fence of the name. The same lease as ``locks.lock(name, fair=True)``."""
        return self._side(Mode.WRITE, overrides)

    async def inspect(self) -> LockInfo | None:
        """The readers or writer (each with its ``mode``), the queue length and the last
        fence: ``AsyncLocks.inspect(name, kind="rwlock")``."""
        return await self._client.inspect(self.name, kind="rwlock")

    def _side(self, mode: Mode, overrides: LockOptions) -> AsyncLock:
        options: LockOptions = {**self._options, **overrides}
        if overrides or not options.get("reentrant", False):
            return self._make(self.name, mode, options)
        # Re-entrancy counts per handle: the rwlock's own options give one handle per side,
        # so that ``async with rw.read():`` nests in one task.
        handle = self._reentrant.get(mode)
        if handle is None:
            handle = self._reentrant.setdefault(mode, self._make(self.name, mode, options))
        return handle
