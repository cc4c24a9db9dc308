"""The watchdog: one renewal scheduler per process, on a thread of its own.

It renews every watched lease at about ttl/3, batching the leases due together per backend
into one ``extend_many`` round trip. "Together" is a window, not an instant: leases taken a
few milliseconds apart would otherwise each cost their own round trip for as long as they
are held, so a renewal due within ``COALESCE_FRACTION`` of its ttl joins a batch going out
to its backend now, a little early, and from then on travels with it (``_batch``).

Loss is an event, never hidden:
- the server refuses a renewal (the lease expired or was taken): lost at once;
- renewals fail with errors (server down, connection cut): retried until the lease's last
  known expiry, then lost, with the last error as the cause;
- ``max_renewals`` reached: renewals stop, and the lease is reported lost when it runs out;
- ``renew=False`` with an ``on_lost`` callback: reported when the lease runs out;
- the backend doubts the lease (``AsyncStore.lease_doubt``: the session it lives on was
  suspended or ended): lost at once. The backend wakes the scheduler when that happens
  (``add_doubt_listener``), so the report does not wait for the next renewal.
Leases are renewed at about a third of ``Hold.trusted_for``: the ttl, or the backend's
session timeout when that is shorter (``AsyncBackend.lease_horizon``).
Every error is caught and attached to the hold it concerns; the scheduler itself never dies
of one.

Under asyncio the scheduler does not run on the holders' event loops: CPU-bound code that
blocks a loop for longer than a lease would otherwise lose the lease silently (nothing
renews it, nothing notices until the loop gets a turn). It runs on the renewal thread, an
event loop of its own (``async_io.start_renewals``), and renews through the client's
renewal backend (``AsyncLocks.renewal_store``): connections bound to that loop, or the
holder's own backend where its calls bind nothing to a loop or its leases live on its
session. Every loss it finds is handed to the holder's loop (``_report``): ``lost`` (an
``asyncio.Event``) is set and ``on_lost`` runs there, never on the renewal thread. From the
moment it is found the hold is no longer renewed; a release that comes first wins, as a
release does before a renewal's answer.
"""

from __future__ import annotations

import functools
import logging
import math
import weakref
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from tenure import _observe
from tenure._concurrency import async_io as io
from tenure._errors import BackendError

if TYPE_CHECKING:
    from tenure._async.lease import Hold
    from tenure._async.store import AsyncStore

__all__ = ["AsyncRenewer", "renewer_for"]

logger = logging.getLogger("tenure.renewer")

RENEW_FRACTION = 1 / 3
"""Renew when this fraction of the lease has passed: two more tries fit before it runs out."""

COALESCE_FRACTION = 1 / 12
"""How early a renewal may go to share a round trip: at worst at ttl/4 instead of ttl/3."""


def _renews(hold: Hold) -> bool:
    limit = hold.lease.max_renewals
    return hold.lease.renew and (limit is None or hold.renewals < limit)


def _may_go_early(hold: Hold) -> bool:
    """Only an uncapped renewal goes early. A lease no longer renewed is judged at its end,
    never before; and one with ``max_renewals`` keeps its own schedule, so that its cap buys
    exactly ttl + max_renewals * ttl/3."""
    return hold.lease.renew and hold.lease.max_renewals is None


def _renewed_through(hold: Hold) -> int:
    """Which backend renews ``hold`` (the renewal backend: see the module docstring)."""
    return id(hold.lease.renewing_store)


def _batch(holds: Iterable[Hold], now: float) -> list[Hold]:
    """The holds to service at ``now``: those due, and the renewals of the same backends
    due within ``COALESCE_FRACTION`` of their ttl, which then share the round trip that a
    due renewal opens. Nothing goes early on its own, nor to a backend nobody renews on."""
    due = [hold for hold in holds if hold.next_due <= now]
    opened = {_renewed_through(hold) for hold in due if _renews(hold)}
    if not opened:
        return due
    early = [
        hold
        for hold in holds
        if hold.next_due > now
        and _may_go_early(hold)
        and _renewed_through(hold) in opened
        and hold.next_due <= now + hold.trusted_for * COALESCE_FRACTION
    ]
    return due + early


def _setup_seconds(store: AsyncStore) -> float:
    return store.setup_seconds


def _due_after(hold: Hold, started: float) -> float:
    """When to look at ``hold`` next: its next renewal, else the end of its lease."""
    if _renews(hold):
        return started + hold.trusted_for * RENEW_FRACTION
    return hold.lease_deadline


class AsyncRenewer:
    def __init__(self, clock: Callable[[], float]) -> None:
        self._clock = clock
        self._holds: set[Hold] = set()
        self._reporting: dict[Hold, tuple[str, BaseException | None, bool]] = {}
        """Holds found lost, no longer renewed, whose loss (reason, error, expected) is on
        its way to the holder (``_report``); ``pending_loss`` lets the holder take it first."""
        self._out: dict[Hold, list[io.Signal]] = {}
        """Holds whose renewal is out (sent, not answered), each with the signals of those
        waiting for that answer (``quiet``)."""
        self._mutex = io.ThreadMutex()
        self._running = False
        self._wake: io.Signal | None = None
        self._sleeping_until = -math.inf
        """When the running loop wakes on its own (-inf while it is not asleep: it looks at
        every hold before it sleeps again). A new hold due before then must wake it; any
        other is picked up then, without a wake-up (a cross-thread wake per acquire is a
        measurable share of a fast backend's cycle)."""
        self._listening: weakref.WeakSet[object] = weakref.WeakSet()
        """The backends this scheduler asked to be woken by when they doubt a lease."""

    def watch(self, hold: Hold) -> None:
        backend = hold.lease.store
        with self._mutex:
            listen = backend not in self._listening
            self._listening.add(backend)
        if listen:
            backend.add_doubt_listener(self.doubts_arrived)
        with self._mutex:
            hold.next_due = _due_after(hold, hold.lease_deadline - hold.trusted_for)
            self._holds.add(hold)
            start = not self._running
            if start:
                self._running = True
                self._sleeping_until = -math.inf
                self._wake = io.renewal_signal()
            wake = self._wake if hold.next_due < self._sleeping_until else None
        if start:
            io.start_renewals(self._run, name="tenure-renewer")
        elif wake is not None:
            wake.set()

    def unwatch(self, hold: Hold) -> None:
        with self._mutex:
            self._holds.discard(hold)
            self._reporting.pop(hold, None)  # its holder took it (pending_loss), or released
            # No wake needed: the loop skips holds it no longer has, and exits when empty.

    async def quiet(self, hold: Hold, timeout: float) -> None:
        """Return once no renewal of ``hold`` is out, or after ``timeout`` seconds. After
        ``unwatch`` no new one starts, so a step that must come after every renewal at the
        server (a release leaving a short lease: ``AsyncLease._release_in_window``) waits
        here for the one that may be on its way. A renewal is bounded by the lease's end."""
        with self._mutex:
            waiting = self._out.get(hold)
            if waiting is None:
                return
            signal = io.Signal()
            waiting.append(signal)
        await signal.wait(timeout)

    def _report(
        self, hold: Hold, reason: str, error: BaseException | None = None,
        *, expected: bool = False,
    ) -> None:
        """``hold`` is lost: stop renewing it now, and have its holder's side record the
        loss (``Hold.mark_lost``) where its holder runs (under asyncio, on its event loop)."""
        with self._mutex:
            if hold not in self._holds:  # released (or reported) meanwhile
                return
            self._holds.discard(hold)
            self._reporting[hold] = (reason, error, expected)
        io.deliver(hold.home, self._reported, hold, reason, error, expected)

    def pending_loss(self, hold: Hold) -> tuple[str, BaseException | None, bool] | None:
        """The loss of ``hold`` found and sent to its holder but not delivered yet (under
        asyncio its loop has not had a turn since: CPU-bound code, or a release or check
        that runs first): the holder records it itself, so that a busy loop neither hides
        the loss from check() nor lets a release that lands first pass it over."""
        with self._mutex:
            return self._reporting.get(hold)

    def _reported(
        self, hold: Hold, reason: str, error: BaseException | None, expected: bool
    ) -> None:
        with self._mutex:
            if self._reporting.pop(hold, None) is None:  # taken, or released, meanwhile
                return
        hold.mark_lost(reason, error, expected=expected)

    def doubts_arrived(self) -> None:
        """A backend may doubt some of our leases now (called from any thread): look at
        once, rather than at the next renewal due."""
        wake = self._wake
        if wake is not None:
            wake.set()

    def reschedule(self, hold: Hold, started: float) -> None:
        """The caller extended ``hold`` itself at ``started``: the next renewal moves."""
        with self._mutex:
            if hold in self._holds:
                hold.next_due = _due_after(hold, started)

    async def _run(self) -> None:
        while True:
            with self._mutex:
                if not self._holds or self._wake is None:
                    self._running = False
                    return
                wake = self._wake
                wake.clear()
                self._sleeping_until = -math.inf
                doubted = [
                    (hold, why) for hold in self._holds if not hold.lost and (why := hold.doubt())
                ]
                now = self._clock()
                next_due = min(hold.next_due for hold in self._holds)
                due = _batch(self._holds, now) if next_due <= now else []
                if not due and not doubted:
                    self._sleeping_until = next_due
            if doubted:
                for hold, why in doubted:
                    self._report(hold, why)
                continue
            if not due:
                await wake.wait(next_due - now)
                continue
            try:
                await self._service(due)
            except Exception as exc:  # a bug here must not end every lease's renewals
                logger.exception("tenure: renewal scheduler error")
                for hold in due:
                    self._report(hold, "renewal scheduler error", exc)

    async def _service(self, due: list[Hold]) -> None:
        by_kind: dict[tuple[int, str], tuple[AsyncStore, list[Hold]]] = {}
        for hold in due:
            if io.gone(hold.home):
                # Its holder's event loop has ended: nobody can release the lease or hear
                # of its loss any more. Renewed no longer, it runs out on its own (as it did
                # when the scheduler was one of that loop's tasks).
                self.unwatch(hold)
                continue
            if not _renews(hold):
                why = (
                    f"the lease ran out after max_renewals={hold.lease.max_renewals}"
                    if hold.lease.renew
                    else f"{hold.ran_out()}, renew=False"
                )
                self._report(hold, why, expected=True)
                continue
            # One round trip per backend and primitive: their records are kept apart.
            store = hold.lease.renewing_store
            key = (id(store), hold.lease.spec.kind)
            by_kind.setdefault(key, (store, []))[1].append(hold)
        for store, holds in by_kind.values():
            await self._renew_batch(store, holds)

    async def _renew_batch(self, store: AsyncStore, holds: list[Hold]) -> None:
        with self._mutex:
            # Marked out (``quiet``) from here until answered; one released meanwhile is
            # not renewed at all.
            holds = [hold for hold in holds if hold in self._holds]
            for hold in holds:
                self._out[hold] = []
        if not holds:
            return
        started = self._clock()
        batch = [hold.renewal for hold in holds]
        # A renewal answered after the first of these leases ran out cannot save it, and
        # waiting for it would report that loss late (a network that drops packets silently
        # leaves a request unanswered until the driver's own timeout, which may be longer).
        # A local store's calls cannot hang: they run unbounded, in this thread.
        limit = None if store.local else max(
            0.0, min(hold.lease_deadline for hold in holds) - started
        )
        try:
            try:
                # A connection set-up the server completed meanwhile is not the lease's
                # problem: the bound grows by it, as an acquire's does.
                try:
                    results = await io.bounded(
                        functools.partial(store.extend_many, batch), limit,
                        credit=functools.partial(_setup_seconds, store),
                    )
                finally:
                    self._answered(holds)
            except io.DeadlineExceeded as late:
                raise BackendError(
                    f"{store.describe()}: a renewal got no answer within {limit:.3f} s, "
                    f"by the lease's end"
                ) from store.unanswered(late.seconds)
        except Exception as exc:
            _observe.renewal_batch(holds[0].lease, 0, 0, len(holds))
            for hold in holds:
                self._after_error(hold, exc)
            return
        _observe.renewal_batch(
            holds[0].lease, sum(map(bool, results)), len(results) - sum(map(bool, results)), 0
        )
        for hold, renewed in zip(holds, results, strict=True):
            with self._mutex:
                if hold not in self._holds:  # released or lost while the batch was out
                    continue
            if renewed:
                hold.renewals += 1
                hold.lease_deadline = started + hold.trusted_for
                hold.error = None
                hold.failed_renewals = 0
                with self._mutex:
                    hold.next_due = _due_after(hold, started)
            else:
                self._report(hold, "renewal refused: the server no longer has this lease")

    def _answered(self, holds: list[Hold]) -> None:
        """The renewal of ``holds`` is no longer out: wake whoever waits (``quiet``), before
        any loss is reported (an ``on_lost`` run on this thread may release one of them)."""
        with self._mutex:
            waiting = [signal for hold in holds for signal in self._out.pop(hold, ())]
        for signal in waiting:
            signal.set()

    def _after_error(self, hold: Hold, error: Exception) -> None:
        now = self._clock()
        first = hold.error  # the first failure since the last renewal, if this is not it
        hold.failed_renewals += 1
        if now >= hold.lease_deadline:
            # The first failure tells why; the last is often only the lease's end arriving.
            tries = f"{hold.failed_renewals} tries"
            why = f"{error}" if first is None or str(first) == str(error) else (
                f"{error}; the first try: {first}"
            )
            self._report(hold, f"renewals failed until the lease ran out ({tries}): {why}", error)
            return
        if first is None:
            hold.error = error
        # Retry soon, but not in a tight loop, and once more right at the lease's end.
        with self._mutex:
            hold.next_due = min(
                now + max(hold.trusted_for / 10, 0.005), hold.lease_deadline
            )


_renewers: weakref.WeakKeyDictionary[object, dict[Callable[[], float], AsyncRenewer]] = (
    weakref.WeakKeyDictionary()
)


def renewer_for(clock: Callable[[], float]) -> AsyncRenewer:
    """The scheduler of this process for ``clock`` (under asyncio too: it runs on the
    renewal thread, whatever loop the holders run)."""
    per_scope = _renewers.setdefault(io.renewal_scope(), {})
    renewer = per_scope.get(clock)
    if renewer is None:
        renewer = per_scope.setdefault(clock, AsyncRenewer(clock))
    return renewer
