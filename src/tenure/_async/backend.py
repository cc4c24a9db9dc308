"""The interface every backend implements: its atomic primitives and nothing more.

The lock logic above (waiting, re-entrancy, renewal, fencing bookkeeping, validation) lives
once in ``lock.py`` and ``renewer.py``. A backend only knows how to do each of the steps below
as ONE atomic server-side operation (a Lua script, one conditional SQL statement, one
``find_one_and_update``), judged by the server's clock, comparing the caller's random token on
the server. Names arrive validated (``tenure._validation.validate_name``); ttl in float seconds.

Every method translates its driver's errors into ``BackendError`` (``raise ... from exc``) and
returns within the backend's own operation timeout: a dead server is an error, never a hang.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar

from tenure._concurrency import async_io as io
from tenure._types import Busy, Capabilities, Grant, Holder, LockInfo, Renewal

__all__ = ["AsyncBackend"]


class AsyncBackend(abc.ABC):
    schemes: ClassVar[tuple[str, ...]]
    """The URL schemes this backend serves."""
    capabilities: ClassVar[Capabilities]
    refusals: ClassVar[Mapping[str, str]] = {}
    """Primitives this backend refuses, each with the reason (``{"semaphore": "..."}``). A
    primitive the backend neither implements (``tenure._async.capabilities``) nor refuses
    here is simply not built yet; either way the client raises ConfigurationError."""
    max_backoff: ClassVar[float] = 0.05
    """Longest pause between two acquire attempts when no notification arrives (seconds)."""
    local: ClassVar[bool] = False
    """The store is in this process or a file on this host (memory, SQLite): no network
    call that can hang, so an acquire's deadline needs no guard around each call."""
    notifies: ClassVar[bool] = False
    """``wait_for_release`` returns as soon as any process releases the lock (pub/sub, list
    wake-ups, LISTEN/NOTIFY). A waiter then waits ``max_backoff`` at once (bounded by the
    holder's lease and the caller's deadline) instead of polling up from 1 ms."""
    combines_try_and_wait: ClassVar[bool] = False
    """The backend implements ``acquire_or_wait``: a blocking acquire's first try goes
    through it. False: the lease logic does not ask (a call that answers None, per acquire,
    is a measurable share of an uncontended cycle)."""

    @property
    def setup_seconds(self) -> float:
        """Seconds this client has spent on connection set-ups its servers completed (see
        ``tenure._concurrency.setup_time``): an acquire's call that overruns its bound is
        given this much more while it grows. 0 for a backend that does not measure it."""
        return 0.0

    def unanswered(self, seconds: float) -> BaseException:
        """The ``__cause__`` of the BackendError the lock logic raises when its deadline
        guard, not the driver, ended a call that got no answer within ``seconds``: the
        driver's last error where the backend knows one (the MongoDB backend asks its
        topology), else a TimeoutError saying that no answer came. A BackendError always
        has a cause, whichever gave up first."""
        return TimeoutError(
            f"{self.describe()}: no answer within {seconds:.3f} s (the driver was still "
            "trying when the caller's deadline came)"
        )

    @classmethod
    @abc.abstractmethod
    def from_url(cls, url: str, **options: Any) -> AsyncBackend:
        """Build from a URL and ``connect()``'s keyword options.

        Raises ConfigurationError for a malformed URL or an unknown option. Connecting lazily
        is fine; a server that can't be reached raises BackendError at the first operation.
        """

    @abc.abstractmethod
    async def acquire(
        self, name: str, token: str, ttl: float, holder: Holder, waited: Busy | None = None
    ) -> Grant | Busy:
        """Take the lease if it is free, expired, or already held with this same ``token``.

        Free or expired: store token, expiry (server clock + ttl), holder and the server time,
        and increment the name's fence, all in one atomic step; return ``Grant(fence)``.
        Same token (a retry after a lost reply): reset the expiry, keep the fence, return it.
        Held by another token: change nothing; return ``Busy(ttl_left)``.

        ``waited`` is the Busy this same attempt got last, once it has waited on it: a
        backend that queues waiters finds its ``waiting`` state there.
        """

    @abc.abstractmethod
    async def release(self, name: str, token: str) -> bool:
        """Free the lease if ``token`` holds it and it has not expired; wake waiters.

        Returns False (and changes nothing another owner holds) when the lease is not ours
        any more. The fence is kept: it never goes back after a release.
        """

    @abc.abstractmethod
    async def extend(self, name: str, token: str, ttl: float) -> bool:
        """Reset the expiry to server now + ttl if ``token`` holds a live lease; else False."""

    async def extend_many(self, renewals: Sequence[Renewal]) -> list[bool]:
        """Extend several leases in one round trip where the backend can (pipelines, one
        transaction); the renewal scheduler batches through this. Same semantics as extend."""
        return [await self.extend(r.name, r.token, r.ttl) for r in renewals]

    @abc.abstractmethod
    async def owned(self, name: str, token: str) -> bool:
        """Whether ``token`` holds a live lease on ``name`` right now."""

    @abc.abstractmethod
    async def inspect(self, name: str) -> LockInfo | None:
        """What is known about ``name``; None if it was never acquired."""

    @abc.abstractmethod
    async def list_locks(self, prefix: str) -> list[LockInfo]:
        """Every known lock whose name starts with ``prefix``, sorted by name. Must not block
        the server (Redis: SCAN, never KEYS)."""

    @abc.abstractmethod
    async def break_lock(self, name: str) -> bool:
        """Operator's force-release of whoever holds ``name``; True if a live lease was freed.
        Keeps the fence and wakes waiters."""

    async def acquire_or_wait(
        self, name: str, token: str, ttl: float, holder: Holder, wait: float
    ) -> Grant | Busy | None:
        """The first try of a blocking acquire, for a backend that can make the try, the wait
        for a release (up to ``wait`` seconds) and the try after it one round trip: a Grant
        from either try, or a Busy whose ``waiting`` state carries the second try's answer,
        which the next ``acquire(..., waited=busy)`` hands over without asking the server.
        None (the default, and whenever the backend does not expect the try to be refused):
        the caller makes a plain ``acquire``, then waits on a refusal."""
        return None

    async def wait_for_release(self, name: str, timeout: float, busy: Busy | None = None) -> None:
        """Return when ``name`` may have been released, or after ``timeout`` seconds.
        ``busy`` is the answer the waiting attempt just got from ``acquire``.

        Backends with notifications (pub/sub, LISTEN/NOTIFY, in-process signals) return as
        soon as a release is announced; the default just sleeps. Spurious returns are fine:
        the caller tries to acquire again.
        """
        await io.sleep(timeout)

    async def abandon_wait(self, name: str, busy: Busy) -> None:  # noqa: B027 - optional hook
        """The attempt that got ``busy`` gave up without the lease (timed out, cancelled,
        failed, or a non-blocking try refused): leave whatever queue it joined, at once
        rather than when its place lapses. Called once per abandoned attempt that waited or
        whose Busy carries ``waiting`` state; a no-op by default."""

    # ---- what the store's connection says about leases, locally ---------------------------

    @property
    def lease_horizon(self) -> float | None:
        """Seconds a lease can be vouched for after the server last confirmed it (its grant
        or a renewal), whatever its ttl: on a store whose leases also die with a client
        session (ZooKeeper's ephemeral nodes), a share of the session timeout, since a session
        the server stopped hearing from ends that long after. The lease logic bounds ``check()`` and
        schedules renewals by ``min(ttl, lease_horizon)``. None: the ttl alone bounds it."""
        return None

    def lease_doubt(self, kind: str, name: str, token: str) -> str | None:
        """Why the lease ``token`` holds on ``name`` (a ``kind`` of ``"lock"`` or
        ``"semaphore"``) may already be gone although its ttl has not run out, or None.
        Local knowledge only, sends nothing, callable from any thread: a store whose leases
        live on a session answers once that session was suspended or ended after the grant.
        The lease logic then reports the lease lost (``check()``, ``owned()``, the renewals).
        """
        return None

    def add_doubt_listener(self, listener: Callable[[], object]) -> None:  # noqa: B027
        """Call ``listener`` (from any thread, without arguments) whenever ``lease_doubt``
        may have started answering for some lease, so that a renewal scheduler reports the
        loss at once rather than at its next renewal. A bound method is held weakly. A no-op
        by default: a backend without sessions never doubts."""

    def renewal_backend(self) -> AsyncBackend:
        """The backend through which the renewal scheduler renews this one's leases, from the
        renewal thread's event loop (asyncio only: ``tenure._async.renewer``). It must reach
        the same store, and renew a lease this backend granted. This backend itself (the
        default) when its calls bind nothing to the caller's event loop (a store called in
        worker threads, a driver with an I/O thread of its own) or when its leases live on
        its own session; otherwise a new instance with the same settings, whose connections
        the renewal loop opens and keeps, sharing whatever local state a renewal needs. The
        client closes it (on the renewal loop) when it is not this backend."""
        return self

    async def aclose(self) -> None:  # noqa: B027 - optional hook, a no-op by default
        """Close connections. The backend must not be used afterwards."""

    def describe(self) -> str:
        """The backend's URL without credentials, for messages and ``tenure`` output."""
        return type(self).__name__
