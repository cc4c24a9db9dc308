"""Optional capabilities a backend declares by implementing them (the way ``limits`` declares
``MovingWindowSupport``): a primitive beyond the mutex is an interface of its own, checked by
the client before use, never an abstract method every backend must grow at once.

A backend that cannot offer a primitive safely does not implement it and says why in
``refusals`` (``AsyncBackend.refusals``); using it then raises ConfigurationError with that
reason.

Semaphores: a name holds a SET of leases (permits), each with its own random token,
server-clock expiry, holder and fence. A grant is decided on the server in ONE atomic step
against the live permits of the name: expired permits are dropped, the caller's token (a
retried acquire) is found, the stored limit is compared, and the permit is added with the
next fence, all together. Semaphore records are kept apart from lock records: a semaphore and
a lock of the same name are different things.

Queued leases with modes (read-write locks and fair locks): a name holds a set of holder
leases, each "read" (shared) or "write" (exclusive), and a FIFO queue of waiting places. A
waiter's place is itself a short lease (``queue_ttl``), refreshed by each of its acquire
attempts, so a waiter that dies or gives up leaves the queue within it. A fair lock is the
write side of the read-write lock of the same name (one record, kind "rwlock").
"""

from __future__ import annotations

import abc
from collections.abc import Sequence

from tenure._concurrency import async_io as io
from tenure._types import Busy, Grant, Holder, LockInfo, Renewal

__all__ = ["AsyncLeaseValueSupport", "AsyncQueueSupport", "AsyncSemaphoreSupport"]

READ = "read"
WRITE = "write"
MODES = (READ, WRITE)
"""A queued lease's modes: readers share a name, a writer excludes everybody."""


class AsyncSemaphoreSupport(abc.ABC):
    """Counting semaphores with per-permit leases (``AsyncLocks.semaphore``)."""

    @abc.abstractmethod
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
        """Take one of ``limit`` permits of ``name``, in one atomic step.

        Drops expired permits first. A live permit with this ``token`` (a retry after a lost
        reply): reset its expiry, keep its fence, return it. Fewer than ``limit`` live
        permits: add one (token, server clock + ttl, holder, the name's next fence) and
        store ``limit`` beside the permits; return ``Grant(fence)``. Otherwise change
        nothing and return ``Busy(ttl_left)`` with the soonest-ending permit's lease.

        While permits are live the stored limit rules: a different ``limit`` raises
        ConfigurationError naming both (``tenure._errors.limit_mismatch``). Once none is
        live, the new limit applies. Fences strictly increase per name and never go back.
        """

    @abc.abstractmethod
    async def release_permit(self, name: str, token: str) -> bool:
        """Remove the live permit of ``token``; False if it had expired or was taken. Wakes
        waiters. The fence counter is kept."""

    @abc.abstractmethod
    async def extend_permits(self, renewals: Sequence[Renewal]) -> list[bool]:
        """Reset each live permit's expiry to server now + its ttl, in as few round trips as
        the backend can; False for a permit that is no longer live."""

    @abc.abstractmethod
    async def permit_owned(self, name: str, token: str) -> bool:
        """Whether ``token`` holds a live permit of ``name`` right now."""

    @abc.abstractmethod
    async def inspect_semaphore(self, name: str) -> LockInfo | None:
        """The semaphore's fence, stored limit and live permits (``kind="semaphore"``);
        None if it was never acquired."""

    @abc.abstractmethod
    async def list_semaphores(self, prefix: str) -> list[LockInfo]:
        """Every known semaphore whose name starts with ``prefix``, sorted by name."""

    @abc.abstractmethod
    async def break_semaphore(self, name: str) -> bool:
        """Operator's force-release of every live permit of ``name``; True if any was live.
        Keeps the fence and wakes waiters."""

    async def wait_for_permit(
        self, name: str, timeout: float, busy: Busy | None = None
    ) -> None:
        """Return when a permit of ``name`` may have been freed, or after ``timeout``
        seconds. Spurious returns are fine; the default sleeps."""
        await io.sleep(timeout)


class AsyncLeaseValueSupport(abc.ABC):
    """An opaque value stored in a lock's lease record (``AsyncLocks.election``).

    The value is set in the same atomic step that grants the lease, replaced only by the
    token that holds the live lease, cleared whenever the lease ends (release, expiry, break),
    and returned by ``inspect`` as ``LockInfo.value`` together with holder and fence, so a
    reader never pairs one leader's value with another leader's fence.
    """

    @abc.abstractmethod
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
        """``AsyncBackend.acquire``, storing ``value`` with the lease when it is granted.
        A retry with the same token keeps the value already stored."""

    @abc.abstractmethod
    async def set_value(self, name: str, token: str, value: str) -> bool:
        """Replace the value if ``token`` holds a live lease on ``name``, in one atomic
        step; False (nothing changed) otherwise."""


class AsyncQueueSupport(abc.ABC):
    """Queued leases with modes: read-write locks (``AsyncLocks.rwlock``) and fair (FIFO)
    locks (``AsyncLocks.lock(fair=True)``, the write side of the read-write lock of the same
    name). Records of kind "rwlock", apart from locks and semaphores of the same name.

    A name's record: its holder leases (token -> mode, server-clock expiry, holder, fence,
    grant time), its waiting places in arrival order (token -> mode, arrival position,
    server-clock place expiry), and ONE fence counter shared by reads and writes (so a
    write's fence exceeds every earlier fence of the name), kept across releases.

    Every method is ONE atomic step on the server, judged by the server's clock.
    """

    @abc.abstractmethod
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
        """Take a ``mode`` lease ("read" or "write") of ``name`` in its turn, in one step.

        1. Drop expired holder leases and expired places.
        2. ``token`` holds a live lease (a retry after a lost reply): reset its expiry to
           server now + ``ttl``, keep its fence, return ``Grant(fence)``.
        3. The places "ahead" of ``token`` are those that arrived before its own place (all
           of them when it has no place yet). Grantable: mode "write" when no live holder
           at all and no place ahead; mode "read" when no live "write" holder and no "write"
           place ahead (readers wait only behind writers, so neither side starves: FIFO by
           phases).
        4. Grantable: remove the token's place, add its lease (mode, server now + ``ttl``,
           holder, the name's next fence); return ``Grant(fence)``.
        5. Otherwise: add a place for ``token`` at the tail (next arrival position), or
           refresh its place's expiry to server now + ``queue_ttl`` keeping its position;
           return ``Busy(ttl_left)``: the soonest-ending live holder's remaining lease
           (None when only places ahead block it).
        """

    @abc.abstractmethod
    async def release_queued(self, name: str, token: str) -> bool:
        """Remove ``token``'s holder lease (True if it was live) or its waiting place (False),
        and wake waiters. The fence counter is kept."""

    @abc.abstractmethod
    async def extend_queued(self, renewals: Sequence[Renewal]) -> list[bool]:
        """Reset each live holder lease's expiry to server now + its ttl, in as few round
        trips as the backend can; False for a lease that is no longer live (a place is never
        extended here: its owner refreshes it by acquiring)."""

    @abc.abstractmethod
    async def queued_owned(self, name: str, token: str) -> bool:
        """Whether ``token`` holds a live lease (read or write) of ``name`` right now."""

    @abc.abstractmethod
    async def inspect_queue(self, name: str) -> LockInfo | None:
        """The record of ``name``: ``kind="rwlock"``, the last fence issued, the live leases
        oldest first (each with its ``mode``), ``queued`` = live places; None if never used."""

    @abc.abstractmethod
    async def list_queues(self, prefix: str) -> list[LockInfo]:
        """Every known read-write (or fair) lock whose name starts with ``prefix``, by name."""

    @abc.abstractmethod
    async def break_queue(self, name: str) -> bool:
        """Operator's force-release of every live lease of ``name``; True if any was live.
        Keeps the queue and the fence, and wakes waiters."""

    async def wait_for_turn(self, name: str, timeout: float, busy: Busy | None = None) -> None:
        """Return when ``name``'s holders or queue may have changed, or after ``timeout``
        seconds. Spurious returns are fine; the default sleeps."""
        await io.sleep(timeout)
