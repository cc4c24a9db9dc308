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
"""

from __future__ import annotations

import abc
from collections.abc import Sequence

from tenure._concurrency import async_io as io
from tenure._types import Busy, Grant, Holder, LockInfo, Renewal

__all__ = ["AsyncLeaseValueSupport", "AsyncSemaphoreSupport"]


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
