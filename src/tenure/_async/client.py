"""The client: ``connect_async(url)`` returns one (``tenure._async.connect``); it makes lock
handles, the ``locked`` decorator, and the operator's views (inspect, list, break)."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from types import TracebackType
from typing import Any, ParamSpec, TypeVar

from tenure import _observe
from tenure._async.decorator import locking_each_call
from tenure._async.election import AsyncElection
from tenure._async.lock import AsyncLock
from tenure._async.renewal_connections import AsyncRenewalConnections
from tenure._async.rwlock import AsyncReadWriteLock, LockOptions, queued_spec
from tenure._async.semaphore import AsyncSemaphore
from tenure._async.store import PRIMITIVES, AsyncStore
from tenure._concurrency import async_io as io
from tenure._errors import ConfigurationError, InvalidArgument, InvalidArgumentType
from tenure._lease_options import LeaseOptions
from tenure._types import Capabilities, Kind, LeaseSpec, LockInfo, Mode
from tenure._validation import (
    validate_callback,
    validate_hold_at_least,
    validate_limit,
    validate_max_renewals,
    validate_name,
    validate_timeout,
    validate_ttl,
    validate_weight,
)

__all__ = ["DEFAULT_TTL", "KINDS", "AsyncLocks"]

P = ParamSpec("P")
R = TypeVar("R")

DEFAULT_TTL = 30.0
KINDS = ("lock", "semaphore", "rwlock", "fair")
"""The primitives whose records ``inspect`` / ``list_locks`` / ``break_lock`` read (a fair
lock's record is its name's "rwlock" one: it is that read-write lock's write side; the
record's ``kind`` says "fair" while only fair locks hold or wait in it)."""
NOUNS = {
    "semaphore": "semaphores",
    "election": "elections",
    "rwlock": "read-write locks",
    "fair": "fair locks",
    "weighted": "weighted permits (a semaphore permit of weight above 1)",
}
"""How a refusal names each primitive beyond the mutex."""
UNBUILT = {
    "weighted": "its semaphores grant permits of weight 1 only, without a queue (weighted "
    "FIFO permits are not implemented for this backend yet; see the semaphores section of "
    "docs/api.md)",
}
"""Why a refusal says a store lacks ``primitive`` when its store gives no reason of its own
(``refusals``): it is simply not built there yet."""
CLEANUP_GRACE = 0.2
"""How long closing a client waits for pending undo steps (seconds): enough for a release on
a server that answers; one that does not is not waited for (the lease's TTL ends it), so a
failed ``tenure run`` against a down server exits at once."""


class AsyncLocks:
    """Makes lock handles on one backend. Thread-safe; close it when done (or use ``async
    with``)."""

    def __init__(
        self,
        store: AsyncStore,
        *,
        default_ttl: float = DEFAULT_TTL,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not isinstance(store, AsyncStore):
            raise InvalidArgumentType(f"not a tenure backend: {type(store).__name__}")
        self.store = store
        self.default_ttl = validate_ttl(default_ttl, "default_ttl")
        if not callable(clock):
            raise ConfigurationError("clock must be a callable returning seconds")
        self.clock = clock
        self._renewals = AsyncRenewalConnections(store)
        _observe.prepare()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.store.describe()}>"

    @property
    def backend(self) -> AsyncStore:
        """The store (its earlier name; tools and tests reach its settings through it)."""
        return self.store

    @property
    def capabilities(self) -> Capabilities:
        return self.store.capabilities

    def lock(
        self,
        name: str,
        ttl: float | None = None,
        *,
        timeout: float | None = None,
        blocking: bool = True,
        renew: bool = False,
        max_renewals: int | None = None,
        on_lost: Callable[[AsyncLock], Any] | None = None,
        reentrant: bool = False,
        fair: bool = False,
        hold_at_least: float | None = None,
    ) -> AsyncLock:
        """A handle on the lock ``name``; nothing is sent until acquire.

        - ``ttl``: the lease in seconds (default: the client's ``default_ttl``, 30 s). A holder
          that stops renewing loses the lock after this long.
        - ``timeout``: how long ``acquire()`` and ``async with`` wait (None: forever).
        - ``blocking=False``: ``async with`` tries once and raises LockTimeout if held.
        - ``renew=True``: the watchdog renews the lease at about ttl/3 until release, at most
          ``max_renewals`` times (None: no cap). ``on_lost(lock)`` runs once if the lease is
          lost (refused, unreachable until expiry, or out of renewals).
        - ``reentrant=True``: the same thread / asyncio task may acquire again; each acquire
          needs its release. Counted in-process; the server sees one lease.
        - ``fair=True``: waiters are granted in arrival order, across processes and hosts.
          Each waiter holds a place in a server-side queue, refreshed while it waits; one
          that dies leaves the queue within ``QUEUE_TTL`` (3 s), one that gives up at once.
          A fair lock is the write side of the read-write lock ``name`` (``rwlock(name)``):
          the two exclude each other and share fences; the plain lock ``name`` is another
          record. Raises ConfigurationError on a backend without fair locks, saying why.
        - ``hold_at_least``: seconds the name stays held after the grant even when released
          sooner (ShedLock's lockAtLeastFor: a job fired by several nodes whose clocks differ
          runs once per window). ``release()`` still ends this handle's ownership at once
          (``owned()`` False, renewals stop, a second release raises NotOwned); the server
          keeps the lease, same holder and fence, until at least ``hold_at_least`` after it
          granted it, then it expires; a release after that frees it at once. Measured from
          when the grant's answer arrived, as a duration, so no clocks are compared. It may
          exceed ``ttl``: the window is what a release leaves, and a holder that dies
          without releasing still loses the name when its lease runs out. None or 0: none.
        """
        if not isinstance(fair, bool):
            raise InvalidArgumentType(f"fair must be a bool, not {type(fair).__name__}")
        spec, noun = LeaseSpec(), None
        if fair:
            self._offered("fair")
            spec, noun = queued_spec(Mode.WRITE, fair=True), "fair lock"
        return self._lock(
            name,
            {
                "ttl": ttl,
                "timeout": timeout,
                "blocking": blocking,
                "renew": renew,
                "max_renewals": max_renewals,
                "on_lost": on_lost,
                "reentrant": reentrant,
            },
            spec,
            noun,
            validate_hold_at_least(hold_at_least),
        )

    def rwlock(
        self,
        name: str,
        ttl: float | None = None,
        *,
        timeout: float | None = None,
        blocking: bool = True,
        renew: bool = False,
        max_renewals: int | None = None,
        on_lost: Callable[[AsyncLock], Any] | None = None,
        reentrant: bool = False,
    ) -> AsyncReadWriteLock:
        """The read-write lock ``name``: ``read()`` and ``write()`` return lock handles (the
        options here are their defaults; each call may override any). Nothing is sent until
        acquire.

        Readers share the name; a writer excludes readers and writers. Waiters queue in
        arrival order on the server: a waiting writer holds back readers that arrive after
        it (writers never starve), readers that arrived before it go first. Every read and
        write lease gets a fence; a write's fence is greater than every earlier fence of the
        name. Each waiter's place is a short lease refreshed while it waits: one that dies
        leaves the queue within ``QUEUE_TTL`` (3 s), one that gives up at once.

        Raises ConfigurationError on a backend without read-write locks, saying why.
        """
        self._offered("rwlock")
        options: LockOptions = {
            "ttl": ttl,
            "timeout": timeout,
            "blocking": blocking,
            "renew": renew,
            "max_renewals": max_renewals,
            "on_lost": on_lost,
            "reentrant": reentrant,
        }
        name = validate_name(name)
        # Checked now, as lock() checks them, not at the first read() or write().
        self._lock(name, options, LeaseSpec(), None)

        def side(name: str, mode: Mode, options: LockOptions) -> AsyncLock:
            return self._lock(name, options, queued_spec(mode), f"{mode} lock")

        return AsyncReadWriteLock(self, name, options, side)

    def _lock(
        self, name: str, options: LockOptions, spec: LeaseSpec, noun: str | None,
        hold_at_least: float = 0.0,
    ) -> AsyncLock:
        """A lock handle over ``spec`` (named ``noun``), its options validated
        (``hold_at_least``: already)."""
        renew = options.get("renew", False)
        reentrant = options.get("reentrant", False)
        if not isinstance(renew, bool) or not isinstance(reentrant, bool):
            raise InvalidArgumentType("renew and reentrant must be bools")
        renew, blocking, limit = self._checked_flags(
            renew, options.get("blocking", True), options.get("max_renewals")
        )
        name = validate_name(name)
        settings = LeaseOptions(
            ttl=self._ttl(options.get("ttl")),
            timeout=validate_timeout(options.get("timeout")),
            blocking=blocking,
            renew=renew,
            max_renewals=limit,
            on_lost=validate_callback(options.get("on_lost"), "on_lost"),
            reentrant=reentrant,
            hold_at_least=hold_at_least,
        )
        return AsyncLock(self, name, settings, spec=spec, noun=noun)

    def semaphore(
        self,
        name: str,
        limit: int,
        ttl: float | None = None,
        *,
        timeout: float | None = None,
        blocking: bool = True,
        renew: bool = False,
        max_renewals: int | None = None,
        on_lost: Callable[[AsyncSemaphore], Any] | None = None,
        weight: int = 1,
    ) -> AsyncSemaphore:
        """A handle on ONE permit of the counting semaphore ``name``: at most ``limit``
        units are taken at once, across every process using the backend; a permit takes
        ``weight`` of them (default 1: at most ``limit`` permits). Nothing is sent until
        acquire.

        Each permit is a lease of its own (token, server-clock expiry, fence strictly
        increasing per name), with the options of ``lock()``: a holder that stops renewing
        loses its permit after ``ttl`` and the permit is free again. Every holder of a name
        must use the same ``limit``: an acquire with another limit while permits are live
        raises ConfigurationError naming both; once none is live, a new limit applies.

        Weighted permits (``weight`` from 1 to ``limit``; another raises InvalidArgument, a
        ValueError, or for a non-int InvalidArgumentType): a permit is granted while the
        units of the live permits plus this weight stay within ``limit``, and waiters are
        served in arrival order. A waiter at the head of the queue holds back the waiters
        behind it, however light, until its weight fits: a heavy permit is never starved by
        a stream of light ones. Each waiter keeps a place in a server-side queue, refreshed
        while it waits (one that dies leaves it within ``QUEUE_TTL``, 3 s; one that gives up
        at once); a newcomer stands behind every live waiter. Where the backend offers
        "weighted" (``supports("weighted")``) every permit, of weight 1 too, queues so; a
        backend without it grants weight-1 permits as before and refuses a weight above 1
        with ConfigurationError naming the backend.

        Raises ConfigurationError on a backend without semaphores, saying why.
        """
        self._offered("semaphore")
        renew, blocking, max_renewals = self._checked_flags(renew, blocking, max_renewals)
        name, limit = validate_name(name), validate_limit(limit)
        weight = validate_weight(weight, limit)
        if weight > 1:
            self._offered("weighted")
        settings = LeaseOptions(
            ttl=self._ttl(ttl),
            timeout=validate_timeout(timeout),
            blocking=blocking,
            renew=renew,
            max_renewals=max_renewals,
            on_lost=validate_callback(on_lost, "on_lost"),
        )
        return AsyncSemaphore(
            self, name, limit, settings, weight=weight, queued="weighted" in self.store.offers
        )

    def election(self, name: str, ttl: float | None = None) -> AsyncElection:
        """A handle on the leader election ``name``; nothing is sent until campaign.

        The leader is the holder of a lock lease on ``name`` (renewed while it leads; ``ttl``
        seconds after its process dies, another campaign wins), its term is that lease's
        fence and its value is stored in the same lease record.

        Raises ConfigurationError on a backend without lease values, saying why.
        """
        self._offered("election")
        name = validate_name(name)
        return AsyncElection(self, name, self._ttl(ttl))

    def supports(self, primitive: str) -> bool:
        """Whether this backend offers ``primitive`` ("lock", "semaphore", "election",
        "rwlock", "fair"; "weighted": semaphore permits of weight above 1, queued in arrival
        order)."""
        if primitive not in PRIMITIVES:
            raise InvalidArgument(
                f"unknown primitive {primitive!r}; tenure knows {list(PRIMITIVES)}"
            )
        return primitive in self.store.offers

    def _offered(self, primitive: str) -> None:
        """Raise ConfigurationError, saying why, unless the store offers ``primitive``."""
        if primitive not in self.store.offers:
            reason = self.store.refusals.get(
                primitive, UNBUILT.get(primitive, "it is not implemented for this backend")
            )
            raise ConfigurationError(
                f"{self.store.describe()} has no "
                f"{NOUNS.get(primitive, primitive + 's')}: {reason}"
            )

    def _recorded(self, kind: object) -> Kind:
        """``kind`` as a record kind this store keeps (a fair lock's is its "rwlock")."""
        if kind not in KINDS:
            raise InvalidArgument(f"unknown primitive {kind!r}; tenure knows {list(KINDS)}")
        recorded = Kind.RWLOCK if kind == "fair" else Kind(str(kind))
        if recorded not in self._kinds_recorded():
            self._offered(str(recorded))
        return recorded

    def _kinds_recorded(self) -> list[Kind]:
        offers = self.store.offers
        return [Kind.LOCK] + [Kind.SEMAPHORE] * ("semaphore" in offers) + [Kind.RWLOCK] * (
            "rwlock" in offers or "fair" in offers
        )

    def _ttl(self, ttl: object) -> float:
        """A handle's lease in seconds: ``ttl``, checked, or the client's ``default_ttl``."""
        return self.default_ttl if ttl is None else validate_ttl(ttl)

    @staticmethod
    def _checked_flags(
        renew: object, blocking: object, max_renewals: object
    ) -> tuple[bool, bool, int | None]:
        """``renew``, ``blocking`` and ``max_renewals``, checked (a cap needs renewal)."""
        if not isinstance(renew, bool):
            raise InvalidArgumentType(f"renew must be a bool, not {type(renew).__name__}")
        if not isinstance(blocking, bool):
            raise InvalidArgumentType(f"blocking must be a bool, not {type(blocking).__name__}")
        limit = validate_max_renewals(max_renewals)
        if limit is not None and not renew:
            raise InvalidArgument("max_renewals needs renew=True")
        return renew, blocking, limit

    def locked(
        self, name_template: str, ttl: float | None = None, **lock_options: Any
    ) -> Callable[[Callable[P, Awaitable[R]]], Callable[P, Awaitable[R]]]:
        """Decorate a function so each call runs under the lock named by ``name_template``,
        formatted with the call's arguments by name: ``"stock:{stock_id}"``.

        Options are those of ``lock()``; a call that can't get the lock within ``timeout``
        raises LockTimeout and does not run the function.
        """
        decorate = locking_each_call(
            name_template, lambda name: self.lock(name, ttl, **lock_options)
        )
        # Validate the options once, at decoration time, not at the first call.
        self.lock("template-check", ttl, **lock_options)
        return decorate

    async def inspect(self, name: str, kind: str = "lock") -> LockInfo | None:
        """Who holds the ``kind`` primitive ``name`` (host, pid, thread, since, fence, ttl
        left; a semaphore's limit and every permit; a read-write or fair lock's readers or
        writer, each with its mode, and its queue length); None if unknown. ``kind="fair"``
        reads the same record as ``"rwlock"`` (a fair lock is that queue's write side); the
        answer's ``kind`` is "fair" while only fair locks hold or wait in it."""
        name = validate_name(name)
        return await self.store.inspect(self._recorded(kind), name)

    async def list_locks(self, prefix: str = "") -> list[LockInfo]:
        """Every known lock, semaphore and read-write (or fair) lock whose name starts with
        ``prefix``, held or not, by name (``LockInfo.kind`` tells them apart)."""
        if not isinstance(prefix, str):
            raise InvalidArgumentType(f"prefix must be a str, not {type(prefix).__name__}")
        found = []
        for kind in self._kinds_recorded():
            found += await self.store.list_records(kind, prefix)
        return sorted(found, key=lambda info: (info.name, info.kind))

    async def break_lock(self, name: str, kind: str = "lock") -> bool:
        """Force-release the ``kind`` primitive ``name`` whoever holds it (operators only;
        every permit of a semaphore, every reader or the writer of a read-write or fair lock,
        whose queue stays): holders find out at their next renewal, release or check. True if
        a live lease was broken."""
        name = validate_name(name)
        return await self.store.break_leases(self._recorded(kind), name)

    def renewal_store(self, name: str) -> AsyncStore:
        """The store the renewal scheduler renews through (for a lease of ``name``): under
        asyncio ``store.renewal_store()``, made once per client and process, the store
        itself in the threads flavour (``tenure._async.renewal_connections``)."""
        return self._renewals.store_for(name)

    async def aclose(self) -> None:
        # Undo steps of failed acquires still need the connections: let them finish first.
        await io.drain_cleanups(CLEANUP_GRACE)
        await self.store.aclose()
        await self._renewals.aclose()

    async def __aenter__(self) -> AsyncLocks:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.aclose()
