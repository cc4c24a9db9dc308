"""One acquire call's tries on Redis, and what it keeps between them.

A lock's wait BLPOPs the lock's wake list with the attempt's next ACQUIRE pipelined behind
it, and keeps that ACQUIRE's reply (``outcome``) for the next ``try_once`` to hand over
without another round trip. That ACQUIRE takes a lease of exactly the ttl, from the moment
the server grants it, which is after the wait was sent (``outcome_sent_at``): the Grant
handed over carries its age since that send, and the lease logic counts the lease from then
(early, never late). On a name this client found held lately (``CONTENDED_FOR``) the first
try goes with the wait in one round trip (``try_or_wait``); both of its ACQUIREs store the
spec's value, so an election's campaign is granted with its value whichever one grants.

A queued waiter (read-write or fair lock, a semaphore's permit with a place: every permit's
on this store, which offers "weighted") blocks on a wake list of its own; a semaphore's
waiter without a place on the semaphore's shared wake list. Every blocking wait lasts at
most ``max_backoff`` and half the socket timeout, and takes a slot of ``wait_connections``
(``_waiting.WaitBudget``); a wait without one, or too short for Redis's millisecond
timeouts, is a timed pause.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from tenure._async.store import AsyncAttempt
from tenure._concurrency import async_io as io
from tenure._types import Busy, Grant, Kind
from tenure.backends.redis._waiting import BLOCKING_TIMER, SHORTEST_WAIT

if TYPE_CHECKING:
    from tenure.backends.redis._async.store import AsyncRedisBackend

__all__ = ["AsyncRedisAttempt"]


class AsyncRedisAttempt(AsyncAttempt):
    """The tries of one acquire call on a Redis store."""

    store: AsyncRedisBackend
    combines_try_and_wait = True
    """A lock's first try may wait too (``try_or_wait``; other kinds answer None there)."""

    waited = False
    """A lock attempt has waited: its ACQUIREs follow a BLPOP (ACQUIRE's ARGV[7]), and giving
    up must LEAVE (its last pipelined ACQUIRE may have been granted unseen)."""
    outcome: Any = None
    """ACQUIRE's reply from the end of the last wait, not yet handed to the lease logic."""
    outcome_sent_at = 0.0
    """When (``time.monotonic()``) the wait that brought ``outcome`` was sent."""
    tried = False
    """A try was made. A wait before any (an election's observer) must take nothing: no
    ACQUIRE behind it, no wake-up a waiter needs off the list; it sleeps."""

    async def try_once(self) -> Grant | Busy:
        self.tried = True
        spec, store = self.spec, self.store
        if spec.kind is not Kind.LOCK:
            return await store.acquire(self.name, spec, self.token, self.ttl, self.holder)
        if self.outcome is not None:
            reply, self.outcome = self.outcome, None
            kept = self._kept(reply)
            if kept is not None:
                return kept
        return await store._acquire_lock(
            self.name, self.token, self.ttl, self.holder, spec.value, self.waited
        )

    def _kept(self, reply: Any) -> Grant | Busy | None:
        """The outcome of the ACQUIRE pipelined behind the last wait; None: try again (the
        name's digest belongs to another name: the plain try says so)."""
        if reply[0] == 0:
            left = int(reply[1])
            return Busy(None if left < 0 else left / 1000)
        if reply[0] == 1:
            # Granted at some moment after the wait was sent: the lease counts from then.
            return Grant(int(reply[1]), age=max(0.0, time.monotonic() - self.outcome_sent_at))
        return None

    async def try_or_wait(self, wait: float) -> Grant | Busy | None:
        """Try, wait and try again in one round trip, for a lock attempt on a name this
        client found held within ``CONTENDED_FOR``: under contention that try is refused,
        and its request of its own was one of the three a contended acquisition sent (try,
        wait, release). Elsewhere None: a plain try (a grant then costs no extra commands)."""
        store = self.store
        self.tried = True
        wait = min(wait, store._waits.longest)
        if (
            # A wait shorter than Redis's blocking timer may end up to BLOCKING_TIMER late,
            # and this call is an acquire: late, it would be a BackendError for a caller
            # whose deadline is near (a campaign with timeout 0.05 s on a loaded Cluster
            # got one). Such a caller tries plainly; a late wait() is only a wake-up.
            wait < BLOCKING_TIMER
            or self.spec.kind is not Kind.LOCK or not store._contended.recently(self.name)
            or not store._waits.take(wait)
        ):
            return None
        try:
            sent_at = time.monotonic()
            first, then = await store._try_then_wait(
                self.name, self.token, self.ttl, self.holder, self.spec.value, wait
            )
        except BaseException:
            # As a cancelled wait: a lease either ACQUIRE may have taken, and a wake-up the
            # BLPOP may have taken, go back.
            await io.run_cleanup(store._leave, self.name, self.token)
            raise
        finally:
            store._waits.give()
        self.waited = True
        if first is None:
            return None  # the server lost its scripts (or a slot moved): a plain try
        outcome = store._lock_outcome(first, self.name)
        if isinstance(outcome, Busy):
            self.outcome_sent_at = sent_at
            self.outcome = then
        # A grant from the first try: the BLPOP took the item it pushed to the attempt's own
        # list, and the second try, the same token's, kept the lease and its fence.
        return outcome

    async def wait(self, timeout: float, busy: Busy) -> None:
        store, kind = self.store, self.spec.kind
        if not self.tried:
            await io.sleep(timeout)
            return
        seconds = min(timeout, store._waits.longest)
        if self.spec.queues:
            # Redis ends a timed-out BLPOP only on its timer (up to BLOCKING_TIMER late): it
            # asks that much less, so that the wait never outlasts ``timeout`` (which the
            # place's refresh, the next try, must come within).
            timeout = self.before_place_lapses(timeout)
            seconds = min(timeout, store._waits.longest) - BLOCKING_TIMER
            if seconds < SHORTEST_WAIT:
                await io.sleep(timeout)
                return
        if not store._waits.take(seconds):
            await io.sleep(timeout)
            return
        try:
            if kind is Kind.LOCK:
                await self._wait_then_acquire(seconds)
            elif kind is Kind.SEMAPHORE and self.spec.queues:
                await store._wait_for_permit_turn(self.name, self.token, seconds)
            elif kind is Kind.SEMAPHORE:
                await store._wait_for_permit(self.name, seconds)
            else:
                await store._wait_for_turn(self.name, self.token, seconds)
        finally:
            store._waits.give()

    async def _wait_then_acquire(self, seconds: float) -> None:
        """Block on the lock's wake list until a release pushes to it and this waiter is the
        one blocked longest, or for ``seconds``, then try to acquire in the same round trip
        (its reply kept for the next ``try_once``)."""
        store = self.store
        self.outcome = None
        self.waited = True
        try:
            sent_at = time.monotonic()
            reply = await store._wait_then_acquire(
                self.name, self.token, self.ttl, self.holder, self.spec.value, seconds
            )
        except BaseException:
            # Cancelled or failed mid-wait: the BLPOP may have taken a wake-up, and the
            # pipelined acquire the lock. Give both back.
            await io.run_cleanup(store._leave, self.name, self.token)
            raise
        self.outcome_sent_at = sent_at
        self.outcome = reply

    @property
    def holds_place(self) -> bool:
        return self.spec.queues or self.waited

    async def leave(self) -> None:
        """A queued kind leaves its place; a lock attempt that waited LEAVEs: the ACQUIRE
        pipelined behind its last BLPOP may have been granted, its reply never to be picked
        up. LEAVE gives such a lease back (and wakes the next waiter), and keeps a wait still
        in flight from taking one."""
        if self.spec.queues:
            await self.store.release(self.spec.kind, self.name, self.token)
        elif self.waited:
            await self.store._leave(self.name, self.token)
