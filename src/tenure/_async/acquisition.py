"""One acquire call's choreography past its first chance: its tries, the waits between them,
and the undo of a failed or cancelled try. ``AsyncLease.acquire`` first asks the store's
``quick_try``; only an acquire that was not granted there makes an ``AsyncAcquisition`` (and
so an attempt), which tries until the grant, and the lease books what it wins. Written for
asyncio; ``scripts/unasync.py`` generates the threads flavour.

What happens on failure: a failed or cancelled acquire undoes itself. It releases whatever
the server may have granted under its token (waiting first for a call it gave up on, which
may still land), and leaves the queue it joined; if the server is unreachable for that undo,
the lease's TTL removes it.
"""

from __future__ import annotations

import functools
import logging
from typing import TYPE_CHECKING, Any, NamedTuple

from tenure import _observe
from tenure._backoff import Backoff
from tenure._concurrency import async_io as io
from tenure._errors import BackendError
from tenure._types import Busy, Grant, Holder

if TYPE_CHECKING:
    from tenure._async.lease import AsyncLease
    from tenure._async.store import AsyncAttempt

__all__ = ["DEADLINE_SLACK", "AsyncAcquisition", "Granted"]

logger = logging.getLogger("tenure")

DEADLINE_SLACK = 0.5
"""Seconds an ``acquire(timeout=T)`` may overrun T while a server call is under way: a
server that accepts connections but never answers (hung, partitioned, paused) costs at most
T + this, whatever the driver's own timeouts. Connection set-up that the server completed
during the call (a first contact, a reconnect) is added to the bound (see
``tenure._concurrency.setup_time``): a healthy but slow server's busy lock is a timeout,
not a BackendError."""


class Granted(NamedTuple):
    """What a won acquisition hands the lease to book."""

    token: str
    fence: int
    began: float
    """When the lease began by the local clock: the winning try's start, less the grant's
    age (how long the server had it already)."""
    waited: float
    """Seconds from the first try to the grant."""
    tries: int


class AsyncAcquisition:
    """The tries of one ``acquire`` of ``lease`` under ``token``, up to ``wait`` seconds (None:
    forever) from ``began``, the moment before its first chance (the store's ``quick_try``,
    answered None: ``quick_tried``)."""

    def __init__(
        self, lease: AsyncLease, wait: float | None, token: str, holder: Holder,
        began: float, *, quick_tried: bool,
    ) -> None:
        self.lease = lease
        self.store = lease.store
        self.clock = lease.clock
        self.wait = wait
        self.token = token
        self.attempt: AsyncAttempt = self.store.attempt(
            lease.name, lease.spec, token, lease.ttl, holder
        )
        if quick_tried:
            self.attempt.quick_tried = True
        self.began = began
        self.deadline = None if wait is None else began + wait

    async def run(self, blocking: bool) -> Granted | None:
        """Try (and, if ``blocking``, wait and try again) until granted, None once the wait is
        over. Raises BackendError if the server fails or does not answer in time, and
        whatever interrupts it (a cancellation, Ctrl-C); the attempt is undone first."""
        lease, store, attempt, deadline = self.lease, self.store, self.attempt, self.deadline
        backoff: Backoff | None = None  # made at the first refusal: most acquires get none
        # The first try may wait too: _try_or_wait.
        eager = blocking and attempt.combines_try_and_wait
        first_try = self.began
        tries = 0
        while True:
            started = self.clock()
            tries += 1
            try:
                limit = self._call_limit(started)
                combined = None
                if eager:
                    eager = False
                    combined = await self._try_or_wait(started, limit)
                if combined is not None:
                    outcome = combined
                elif limit is None:  # no partial, no extra frame: the common case
                    outcome = await io.complete(attempt.try_once())
                else:
                    # Interrupted (Ctrl-C), the call still ends before the undo and the
                    # queue leave below start: they must not overtake it.
                    outcome = await io.bounded(
                        attempt.try_once, limit, credit=self._setup_seconds,
                        finish_if_interrupted=True,
                    )
            except io.DeadlineExceeded as late:
                await io.run_cleanup(self._undo, started + lease.ttl, late.pending)
                if attempt.holds_place:
                    await io.run_cleanup(attempt.leave)
                raise BackendError(
                    f"{store.describe()}: no answer to acquire of {lease.name!r} within "
                    f"the caller's timeout ({self.wait} s) + {DEADLINE_SLACK} s"
                ) from store.unanswered(late.seconds)
            except BaseException:
                await self.undo_failed_try(started)
                raise
            now = self.clock()
            if isinstance(outcome, Grant):
                return Granted(self.token, outcome.fence, started - outcome.age,
                               now - first_try, tries)
            _observe.contended(lease)
            if combined is not None:
                continue  # it waited already: the next try hands over the answer after it
            if not blocking or (deadline is not None and now >= deadline):
                _observe.busy(lease, now - first_try, tries)
                # A store may queue a refused attempt at once (SQLite's locks, every
                # queued kind): a try that gives up leaves the queue as one that waited
                # does. Where the attempt holds nothing, no clean-up runs at all.
                if attempt.holds_place:
                    await self._give_up()
                return None
            if backoff is None:
                backoff = Backoff(
                    maximum=store.max_backoff,
                    initial=store.max_backoff if store.notifies else 0.001,
                )
            pause = backoff.next_pause(outcome.ttl_left)
            if deadline is not None:
                pause = min(pause, deadline - now)
            try:
                await io.bounded(functools.partial(attempt.wait, pause, outcome),
                                 self._call_limit(self.clock()))
            except io.DeadlineExceeded:
                pass  # a wait that overran is a spurious wake-up: the next try decides
            except BaseException:
                await self._give_up()
                raise

    async def undo_failed_try(self, started: float) -> None:
        """A try begun at ``started`` failed (an error, a cancellation, Ctrl-C): the grant
        may have landed before the failure reached us, so undo it, and leave the queue we
        joined. A queued kind may hold a place from this very call, so it leaves before the
        failure is raised on."""
        if self.attempt.holds_place:
            await self._give_up()
        # A local store's release cannot hang: undone before the exception leaves, the
        # caller's next step (a listing) never sees the grant.
        cleanup = io.cleanup_now if self.store.local else io.run_cleanup
        await cleanup(self._undo, started + self.lease.ttl, None)

    async def _try_or_wait(self, started: float, limit: float | None) -> Grant | Busy | None:
        """The first try of a blocking acquire, made together with the wait after a refusal
        where the store's attempt offers it (``AsyncAttempt.try_or_wait``); None: make a
        plain try. The wait lasts what the first pause after a refusal would
        (``max_backoff``, the notifying stores' first pause), within the caller's deadline."""
        wait = self.store.max_backoff
        if self.deadline is not None:
            wait = min(wait, self.deadline - started)
        if wait <= 0:
            return None
        if limit is None:
            return await io.complete(self.attempt.try_or_wait(wait))
        return await io.bounded(
            functools.partial(self.attempt.try_or_wait, wait), limit, credit=self._setup_seconds
        )

    async def _give_up(self) -> None:
        """Leave whatever queue the attempt joined. A queued kind (and a local store's
        queue) leaves before ``acquire`` answers False or raises (a timeout, an error, a
        cancellation, Ctrl-C), so neither the caller's next step nor another waiter still
        finds its place; if the server fails that step, the place lapses within its queue
        lease. Other attempts leave in the background (their wait state is a courtesy)."""
        if not self.attempt.leaves_at_once:
            await io.run_cleanup(self.attempt.leave)
            return
        try:
            await io.bounded(self.attempt.leave, self._call_limit(self.clock()))
        except Exception as exc:
            logger.info("tenure: leaving the queue of %r failed (%s: %s); the place lapses "
                        "within its queue lease", self.lease.name, type(exc).__name__, exc)

    def _setup_seconds(self) -> float:
        return self.store.setup_seconds

    def _call_limit(self, now: float) -> float | None:
        """How long one server call of the acquire may take: to the caller's deadline plus
        ``DEADLINE_SLACK`` (None: unbounded, or a local store, whose calls cannot hang)."""
        if self.deadline is None or self.store.local:
            return None
        return max(0.0, self.deadline - now) + DEADLINE_SLACK

    async def _undo(self, lease_end: float, pending: Any) -> None:
        """Release whatever a failed try may have been granted under the token, retrying
        while the server can't be reached and such a lease could still be alive. ``pending``:
        the acquire call given up on, still running; the release waits for it first (up to
        the lease's end), so that it cannot overtake the grant it undoes."""
        if pending is not None:
            await io.settle(pending, lease_end - self.clock())
        pause = 0.05
        while True:
            try:
                await self.store.release(self.lease.spec.kind, self.lease.name, self.token)
                return
            except Exception:
                if self.clock() + pause >= lease_end:
                    raise
            await io.sleep(pause)
            pause = min(pause * 2, 1.0)
