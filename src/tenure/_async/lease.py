"""One lease model for every primitive: acquire, release, extend, fencing, re-entrancy and loss,
written once. A lock holds one lease per name, a semaphore permit is one of ``limit`` leases:
both are an ``AsyncLease`` whose ``LeaseSpec`` (data: the kind and its parameters) it hands
to the store's verbs (``tenure._async.store``); waiting between tries is the store's
attempt's business.
Written for asyncio; ``scripts/unasync.py`` generates the threads flavour.

What happens on failure, up front:
- A lease is a promise with an expiry. If the holder stalls longer than the lease (a GC pause,
  SIGSTOP, a swapped-out VM), another owner may get it while the first still runs. The holder
  learns this (``lost`` is set, ``on_lost`` runs, ``check()`` and ``release()`` raise
  ``LockLost``) but cannot be stopped mid-instruction; only a fence check by the protected
  resource rejects its late writes. See ``tenure.FenceGuard``.
- A failed or cancelled acquire undoes itself: it releases whatever the server may have
  granted under its token, and starts no renewal. If the server is unreachable for that undo,
  the lease's TTL removes it.
"""

from __future__ import annotations

import enum
import functools
import logging
from collections.abc import Callable
from types import TracebackType
from typing import TYPE_CHECKING, Any, Self

from tenure import _forks, _observe, _tokens
from tenure._async.hold import Hold, would_wait
from tenure._async.renewer import renewer_for
from tenure._backoff import Backoff
from tenure._concurrency import async_io as io
from tenure._errors import (
    BackendError,
    InvalidArgument,
    InvalidArgumentType,
    LockLost,
    LockTimeout,
    NotOwned,
)
from tenure._types import Busy, Grant, LeaseSpec, Renewal
from tenure._validation import validate_timeout, validate_ttl

if TYPE_CHECKING:
    from tenure._async.client import AsyncLocks
    from tenure._async.store import AsyncAttempt, AsyncStore

__all__ = ["DEFAULT", "AsyncLease", "Hold", "would_wait"]

logger = logging.getLogger("tenure")


class _Default(enum.Enum):
    TIMEOUT = "the handle's own timeout"


DEFAULT = _Default.TIMEOUT
"""acquire()'s timeout when not given: the ``timeout`` the handle was created with."""

DEADLINE_SLACK = 0.5
"""Seconds an ``acquire(timeout=T)`` may overrun T while a server call is under way: a
server that accepts connections but never answers (hung, partitioned, paused) costs at most
T + this, whatever the driver's own timeouts. Connection set-up that the server completed
during the call (a first contact, a reconnect) is added to the bound (see
``tenure._concurrency.setup_time``): a healthy but slow server's busy lock is a timeout,
not a BackendError."""


class AsyncLease:
    """A handle on one lease of a named primitive. Creating it sends nothing."""

    noun = "lease"
    """How messages name what this handle holds ("lock", "permit")."""

    def __init__(
        self,
        client: AsyncLocks,
        spec: LeaseSpec,
        name: str,
        ttl: float,
        *,
        timeout: float | None,
        blocking: bool,
        renew: bool,
        max_renewals: int | None,
        on_lost: Callable[[Any], Any] | None,
        reentrant: bool,
    ) -> None:
        self.spec = spec
        self.store: AsyncStore = client.store
        self.client = client
        self.clock = client.clock
        self.name = name
        self.ttl = ttl
        self.timeout = timeout
        self.blocking = blocking
        self.renew = renew
        self.max_renewals = max_renewals
        self.on_lost = on_lost
        self.reentrant = reentrant
        self.lost = io.Event()
        """Set when the current acquisition's lease is gone. Cleared by the next acquire."""
        self._holds: dict[object, Hold] = {}
        self._mutex = io.Mutex()
        self._fork_tracked = False
        """Registered with ``_forks`` (in this process): its holds are forgotten in a child."""
        self.labels: _observe.Labels | None = None
        """Metric and span attributes, made at the first event (``tenure._observe``)."""
        self._renewing_store: AsyncStore | None = None

    @property
    def renewing_store(self) -> AsyncStore:
        """The store the renewal scheduler renews this handle's leases through (the
        client's renewal store: ``AsyncLocks.renewal_store``)."""
        renewing = self._renewing_store
        if renewing is None:
            renewing = self._renewing_store = self.client.renewal_store(self.name)
        return renewing

    def __repr__(self) -> str:
        hold = self._holds.get(self._owner())
        state = f"held fence={hold.fence}" if hold and not hold.lost else "not held"
        return f"<{type(self).__name__} {self.name!r} ttl={self.ttl} {state}>"

    # ---- acquiring ---------------------------------------------------------------------

    async def acquire(
        self, blocking: bool = True, timeout: float | _Default | None = DEFAULT
    ) -> bool:
        """Take the lease; True if taken.

        ``blocking=False`` tries once. Otherwise waits up to ``timeout`` seconds (None: forever;
        not given: the handle's own ``timeout``), woken by releases where the backend announces
        them, else retrying with jittered back-off bounded by the holders' remaining leases.

        Raises BackendError if the server fails; the attempt is then undone.
        """
        if not isinstance(blocking, bool):
            raise InvalidArgumentType(f"blocking must be a bool, not {type(blocking).__name__}")
        if timeout is DEFAULT:
            wait = self.timeout
        else:
            if not blocking and timeout is not None:
                raise InvalidArgument("a non-blocking acquire takes no timeout")
            wait = validate_timeout(timeout)

        owner = self._owner()
        held = self._holds.get(owner)
        if held is not None:
            if self.reentrant:
                if held.lost:
                    raise LockLost(self.name, f"re-entry refused: {held.reason}") from held.error
                held.count += 1
                return True
            self._acquire_while_held(held)

        store = self.store
        if self.renew and self._renewing_store is None:
            # A new client's renewal connections (asyncio) start opening now, beside this
            # acquire, rather than when the first renewal is already due.
            self.renewing_store  # noqa: B018
        process = _tokens.current
        token = process.token()
        holder = process.holder(io.current_owner_name())
        attempt = store.attempt(self.name, self.spec, token, self.ttl, holder)
        deadline = None if wait is None else self.clock() + wait
        backoff: Backoff | None = None  # made at the first refusal: most acquires get none
        # The first try may wait too: _try_or_wait.
        eager = blocking and attempt.combines_try_and_wait
        first_try = self.clock()
        attempts = 0
        with _observe.acquire_span(self) as span:
            while True:
                started = self.clock()
                attempts += 1
                try:
                    limit = self._call_limit(deadline, started)
                    combined = None
                    if eager:
                        eager = False
                        combined = await self._try_or_wait(attempt, deadline, started, limit)
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
                    await io.run_cleanup(self._undo, token, started + self.ttl, late.pending)
                    if attempt.holds_place:
                        await io.run_cleanup(attempt.leave)
                    raise BackendError(
                        f"{store.describe()}: no answer to acquire of {self.name!r} within "
                        f"the caller's timeout ({wait} s) + {DEADLINE_SLACK} s"
                    ) from store.unanswered(late.seconds)
                except BaseException:
                    # The grant may have landed before the failure (an error, a cancellation,
                    # Ctrl-C) reached us: undo it, and leave the queue we joined. A queued
                    # kind may hold a place from this very call, so it leaves before raising.
                    if attempt.holds_place:
                        await self._give_up(attempt, deadline)
                    # A local store's release cannot hang: undone before the exception
                    # leaves, the caller's next step (a listing) never sees the grant.
                    cleanup = io.cleanup_now if store.local else io.run_cleanup
                    await cleanup(self._undo, token, started + self.ttl, None)
                    raise
                now = self.clock()
                if isinstance(outcome, Grant):
                    self._begin(owner, token, outcome.fence, started - outcome.age)
                    _observe.acquired(self, outcome.fence, now - first_try, attempts, span)
                    return True
                _observe.contended(self)
                if combined is not None:
                    continue  # it waited already: the next try hands over the answer after it
                if not blocking or (deadline is not None and now >= deadline):
                    _observe.busy(self, now - first_try, attempts)
                    # A store may queue a refused attempt at once (SQLite's locks, every
                    # queued kind): a try that gives up leaves the queue as one that waited
                    # does. Where the attempt holds nothing, no clean-up runs at all.
                    if attempt.holds_place:
                        await self._give_up(attempt, deadline)
                    return False
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
                                     self._call_limit(deadline, self.clock()))
                except io.DeadlineExceeded:
                    pass  # a wait that overran is a spurious wake-up: the next try decides
                except BaseException:
                    await self._give_up(attempt, deadline)
                    raise

    async def _try_or_wait(
        self, attempt: AsyncAttempt, deadline: float | None, started: float,
        limit: float | None,
    ) -> Grant | Busy | None:
        """The first try of a blocking acquire, made together with the wait after a refusal
        where the store's attempt offers it (``AsyncAttempt.try_or_wait``); None: make a
        plain try. The wait lasts what the first pause after a refusal would
        (``max_backoff``, the notifying stores' first pause), within the caller's deadline."""
        wait = self.store.max_backoff
        if deadline is not None:
            wait = min(wait, deadline - started)
        if wait <= 0:
            return None
        if limit is None:
            return await io.complete(attempt.try_or_wait(wait))
        return await io.bounded(
            functools.partial(attempt.try_or_wait, wait), limit, credit=self._setup_seconds
        )

    async def _give_up(self, attempt: AsyncAttempt, deadline: float | None) -> None:
        """Leave whatever queue ``attempt`` joined. A queued kind (and a local store's
        queue) leaves before ``acquire`` answers False or raises (a timeout, an error, a
        cancellation, Ctrl-C), so neither the caller's next step nor another waiter still
        finds its place; if the server fails that step, the place lapses within its queue
        lease. Other attempts leave in the background (their wait state is a courtesy)."""
        if not attempt.leaves_at_once:
            await io.run_cleanup(attempt.leave)
            return
        try:
            await io.bounded(attempt.leave, self._call_limit(deadline, self.clock()))
        except Exception as exc:
            logger.info("tenure: leaving the queue of %r failed (%s: %s); the place lapses "
                        "within its queue lease", self.name, type(exc).__name__, exc)

    def _acquire_while_held(self, held: Hold) -> None:
        """A non-reentrant handle asked again while it holds: a lock waits (like
        ``threading.Lock``); a subclass may refuse instead."""

    def _begin(self, owner: object, token: str, fence: int, started: float) -> None:
        hold = Hold(self, token, fence, self.ttl, lease_deadline=started, granted_at=self.clock())
        hold.lease_deadline = started + hold.trusted_for
        with self._mutex:
            replaced = self._holds.get(owner)
            self._holds[owner] = hold
        if replaced is not None:
            # Only possible when the old lease had expired (the server granted a new one).
            self.mark_lost(replaced, "replaced by a new acquisition after it expired")
        if self.lost.is_set():  # clear() takes the event's lock: only when needed
            self.lost.clear()
        if self.renew or self.on_lost is not None:
            if self.renew:  # a watch for on_lost alone never renews: no second connection
                self.renewing_store  # noqa: B018 - made here, not on the renewal thread
            hold.home = io.home()
            hold.renewer = renewer_for(self.clock)
            hold.renewer.watch(hold)
        if not self._fork_tracked:  # once per handle (and process): the set add is not free
            # Registered before flagged: a fork between the two then finds the handle in the
            # child's registry (twice tracked is harmless; flagged untracked would not be).
            _forks.track(self)
            self._fork_tracked = True

    # ---- releasing, extending ----------------------------------------------------------

    async def release(self) -> None:
        """Give the lease up.

        Raises NotOwned if this handle (this thread / task, when re-entrant) holds nothing,
        LockLost if the lease was gone before the release reached the server, BackendError
        if the server failed (the lease then runs out on its own).
        """
        owner = self._owner()
        hold = self._hold_for(owner, "release")
        if hold.count > 1:
            hold.count -= 1
            return
        self._take_pending_loss(hold)
        with self._mutex:
            self._holds.pop(owner, None)
        if hold.renewer is not None:
            hold.renewer.unwatch(hold)
        if hold.lost:
            # Known lost: the answer is LockLost whatever the server says. The release is
            # still sent, in case a renewal error hid a lease the server kept.
            await io.run_cleanup(self.store.release, self.spec.kind, self.name, hold.token)
            raise LockLost(self.name, f"released after loss: {hold.reason}") from hold.error
        released = await self.store.release(self.spec.kind, self.name, hold.token)
        _observe.released(self, hold.fence, self.clock() - hold.granted_at)
        if not released:
            self.mark_lost(hold, "the lease had expired or been taken before release")
            raise LockLost(self.name, hold.reason)

    async def extend(self, ttl: float | None = None) -> None:
        """Restart the lease: ``ttl`` seconds (default: the handle's ttl) from now, by the
        server's clock. Later renewals keep the new ttl.

        Raises NotOwned if not held (also when released while the extend was out), LockLost
        if the lease is already gone.
        """
        owner = self._owner()
        hold = self._hold_for(owner, "extend")
        new_ttl = self.ttl if ttl is None else validate_ttl(ttl)
        self._take_pending_loss(hold)
        if not hold.lost and (doubt := hold.doubt()) is not None:
            self.mark_lost(hold, doubt)
        if hold.lost:
            raise LockLost(self.name, hold.reason) from hold.error
        started = self.clock()
        renewal = Renewal(self.name, hold.token, new_ttl, self.spec.kind)
        if (await self.store.extend_many([renewal]))[0]:
            hold.ttl = new_ttl
            hold.lease_deadline = started + hold.trusted_for
            if hold.renewer is not None:
                hold.renewer.reschedule(hold, started)
            return
        if self._released_meanwhile(owner, hold):
            raise NotOwned(self.name, f"cannot extend: the {self.noun} was released meanwhile")
        self.mark_lost(hold, "the lease had expired or been taken before extend")
        raise LockLost(self.name, hold.reason)

    # ---- asking ------------------------------------------------------------------------

    @property
    def fence(self) -> int | None:
        """This acquisition's fencing token (None when not held by this handle / owner)."""
        hold = self._holds.get(self._owner())
        return None if hold is None else hold.fence

    async def owned(self) -> bool:
        """Whether this handle (this owner, when re-entrant) holds a live lease: asks the
        server. A False answer for a lease we believed held marks it lost."""
        owner = self._owner()
        hold = self._holds.get(owner)
        if hold is not None:
            self._take_pending_loss(hold)
        if hold is None or hold.lost:
            return False
        if (doubt := hold.doubt()) is not None:
            self.mark_lost(hold, doubt)
            return False
        if await self.store.owned(self.spec.kind, self.name, hold.token):
            return True
        if self._released_meanwhile(owner, hold):
            return False
        self.mark_lost(hold, "the server no longer has this lease")
        return False

    async def locked(self) -> bool:
        """Whether a new acquisition would be refused right now: asks the server."""
        return would_wait(self.spec, await self.store.inspect(self.spec.kind, self.name))

    def check(self) -> None:
        """Raise LockLost if the lease is gone (local knowledge only, sends nothing).

        Call it before each irreversible step of a long critical section. The lease counts
        as gone once it was reported lost, once its last known expiry (measured from before
        the request that set it, and bounded by the backend's session timeout where leases
        live on a session) has passed without a renewal, or once the backend knows the
        connection the lease lives on was interrupted (``AsyncStore.lease_doubt``).
        """
        hold = self._hold_for(self._owner(), "check")
        self._take_pending_loss(hold)
        if not hold.lost and (doubt := hold.doubt()) is not None:
            self.mark_lost(hold, doubt)
        if not hold.lost and self.clock() >= hold.lease_deadline:
            self.mark_lost(hold, hold.ran_out(), expected=not self.renew)
        if hold.lost:
            raise LockLost(self.name, hold.reason) from hold.error

    def _take_pending_loss(self, hold: Hold) -> None:
        """Record a loss the renewal scheduler found and sent here but that has not arrived
        (the holder's loop was busy): check(), owned() and release() must not miss it."""
        if hold.renewer is not None and not hold.lost:
            found = hold.renewer.pending_loss(hold)
            if found is not None:
                reason, error, expected = found
                self.mark_lost(hold, reason, error, expected=expected)

    def mark_lost(
        self,
        hold: Hold,
        reason: str,
        error: BaseException | None = None,
        *,
        expected: bool = False,
    ) -> None:
        """Record the loss of ``hold`` once: set ``lost``, stop renewing, call ``on_lost``
        exactly once. Called by this handle and by the renewal scheduler. ``expected``: the
        lease's own budget ended it (logged as INFO, not WARNING)."""
        with self._mutex:
            if hold.lost:
                return
            hold.lost = True
            hold.reason = reason
            hold.error = error
        if hold.renewer is not None:
            hold.renewer.unwatch(hold)
        _observe.lost(self, hold.fence, reason, expected)
        self.lost.set()
        if self.on_lost is not None:
            io.invoke_callback(self.on_lost, self)

    # ---- context manager ---------------------------------------------------------------

    async def __aenter__(self) -> Self:
        if not await self.acquire(self.blocking):
            raise LockTimeout(self.name, self.timeout if self.blocking else 0.0)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.release()

    # ---- internals ---------------------------------------------------------------------

    def _setup_seconds(self) -> float:
        return self.store.setup_seconds

    def _call_limit(self, deadline: float | None, now: float) -> float | None:
        """How long one server call of an acquire may take: to the caller's deadline plus
        ``DEADLINE_SLACK`` (None: unbounded, or a local store, whose calls cannot hang)."""
        if deadline is None or self.store.local:
            return None
        return max(0.0, deadline - now) + DEADLINE_SLACK

    async def _undo(self, token: str, lease_end: float, pending: Any) -> None:
        """Release whatever a failed acquire may have been granted under ``token``, retrying
        while the server can't be reached and such a lease could still be alive. ``pending``:
        the acquire call given up on, still running; the release waits for it first (up to
        the lease's end), so that it cannot overtake the grant it undoes."""
        if pending is not None:
            await io.settle(pending, lease_end - self.clock())
        pause = 0.05
        while True:
            try:
                await self.store.release(self.spec.kind, self.name, token)
                return
            except Exception:
                if self.clock() + pause >= lease_end:
                    raise
            await io.sleep(pause)
            pause = min(pause * 2, 1.0)

    def _owner(self) -> object:
        # A non-reentrant handle behaves like threading.Lock: the handle is the owner, so any
        # thread may release it. A re-entrant one counts per thread / asyncio task.
        return io.current_owner() if self.reentrant else self

    def _released_meanwhile(self, owner: object, hold: Hold) -> bool:
        """Whether ``owner`` released ``hold`` (from another task or thread) while a call
        about it was out: the server's "not held" is then that release, not a loss. A hold
        known lost is not (one replaced by a new grant was marked lost then)."""
        with self._mutex:
            return not hold.lost and self._holds.get(owner) is not hold

    def _hold_for(self, owner: object, action: str) -> Hold:
        hold = self._holds.get(owner)
        if hold is None:
            who = "this thread / task" if self.reentrant else "this handle"
            raise NotOwned(self.name, f"cannot {action}: {who} does not hold the {self.noun}")
        return hold

    def _forget_after_fork(self) -> None:
        self._holds = {}
        self._mutex = io.Mutex()
        self._renewing_store = None  # the parent's renewal connections are not the child's
        self._fork_tracked = False  # the child's registry starts empty
