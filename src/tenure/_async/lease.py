"""One lease model for every primitive: acquire, release, extend, fencing, re-entrancy and loss,
written once. A lock holds one lease per name, a semaphore permit is one of ``limit`` leases:
both are an ``AsyncLease`` whose ``LeaseSpec`` (data: the kind and its parameters) it hands
to the store's verbs (``tenure._async.store``). One acquire call's tries, waits and undo are
``acquisition.py``'s; waiting between tries is the store's attempt's business.
Written for asyncio; ``scripts/unasync.py`` generates the threads flavour.

What happens on failure, up front:
- A lease is a promise with an expiry. If the holder stalls longer than the lease (a GC pause,
  SIGSTOP, a swapped-out VM), another owner may get it while the first still runs. The holder
  learns this (``lost`` is set, ``on_lost`` runs, ``check()`` and ``release()`` raise
  ``LockLost``) but cannot be stopped mid-instruction; only a fence check by the protected
  resource rejects its late writes. See ``tenure.FenceGuard``.
- A failed or cancelled acquire undoes itself (``acquisition.py``): it releases whatever the
  server may have granted under its token, and starts no renewal. If the server is
  unreachable for that undo, the lease's TTL removes it.
"""

from __future__ import annotations

import enum
import math
from types import TracebackType
from typing import TYPE_CHECKING, Self

from tenure import _forks, _observe, _tokens
from tenure._async.acquisition import AsyncAcquisition
from tenure._async.hold import Hold, would_wait
from tenure._async.renewer import renewer_for
from tenure._concurrency import async_io as io
from tenure._errors import (
    InvalidArgument,
    InvalidArgumentType,
    LockLost,
    LockTimeout,
    NotOwned,
)
from tenure._lease_options import LeaseOptions
from tenure._types import LeaseSpec, Renewal
from tenure._validation import validate_timeout, validate_ttl

if TYPE_CHECKING:
    from tenure._async.client import AsyncLocks
    from tenure._async.store import AsyncStore

__all__ = ["DEFAULT", "AsyncLease", "Hold", "would_wait"]

class _Default(enum.Enum):
    TIMEOUT = "the handle's own timeout"


DEFAULT = _Default.TIMEOUT
"""acquire()'s timeout when not given: the ``timeout`` the handle was created with."""


class AsyncLease:
    """A handle on one lease of a named primitive. Creating it sends nothing."""

    noun = "lease"
    """How messages name what this handle holds ("lock", "permit")."""

    def __init__(
        self, client: AsyncLocks, spec: LeaseSpec, name: str, options: LeaseOptions
    ) -> None:
        self.spec = spec
        self.store: AsyncStore = client.store
        self.client = client
        self.clock = client.clock
        self.name = name
        self.ttl = options.ttl
        self.timeout = options.timeout
        self.blocking = options.blocking
        self.renew = options.renew
        self.max_renewals = options.max_renewals
        self.on_lost = options.on_lost
        self.reentrant = options.reentrant
        self.hold_at_least = options.hold_at_least
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

        if self.renew and self._renewing_store is None:
            # A new client's renewal connections (asyncio) start opening now, beside this
            # acquire, rather than when the first renewal is already due.
            self.renewing_store  # noqa: B018
        store = self.store
        process = _tokens.current
        token = process.token()
        holder = process.holder(io.current_owner_name())
        with _observe.acquire_span(self) as span:
            began = self.clock()
            # (Not under a deadline: a remote store's try then goes through a bound.)
            quick_tried = store.quick_tries and (wait is None or store.local)
            if quick_tried:
                # Most acquires are granted at their first try: it goes out before the
                # attempt and the rest of the acquisition exist, and they are made only
                # when it is not granted.
                try:
                    # Interrupted, the call still ends before the undo starts (io.complete).
                    grant = await io.complete(
                        store.quick_try(self.name, self.spec, token, self.ttl, holder)
                    )
                except BaseException:
                    failed = AsyncAcquisition(self, wait, token, holder, began, quick_tried=False)
                    await failed.undo_failed_try(began)
                    raise
                if grant is not None:
                    now = self.clock()
                    self._begin(owner, token, grant.fence, began - grant.age)
                    _observe.acquired(self, grant.fence, now - began, 1, span)
                    return True
            acquisition = AsyncAcquisition(self, wait, token, holder, began,
                                           quick_tried=quick_tried)
            granted = await acquisition.run(blocking)
            if granted is None:
                return False
            self._begin(owner, granted.token, granted.fence, granted.began)
            _observe.acquired(self, granted.fence, granted.waited, granted.tries, span)
            return True

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
        """Give the lease up. Inside a ``hold_at_least`` window the handle lets go at once
        but the server keeps the lease until the window ends (``_release_in_window``).

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
        if self.hold_at_least:
            released = await self._release_in_window(hold)
        else:
            released = await self.store.release(self.spec.kind, self.name, hold.token)
        _observe.released(self, hold.fence, self.clock() - hold.granted_at)
        if not released:
            self.mark_lost(hold, "the lease had expired or been taken before release")
            raise LockLost(self.name, hold.reason)

    async def _release_in_window(self, hold: Hold) -> bool:
        """Release ``hold``, leaving the name held until ``hold_at_least`` after its grant.

        The window is measured from when the grant's answer arrived here (``granted_at``),
        which is after the server granted it, and sent as a duration: the server keeps the
        lease at least ``hold_at_least`` past its own grant whatever the hosts' clocks say.
        A renewal still out is waited for first: landing after the shortened lease, it
        would restart the whole ttl. Past the window, a plain release frees the name."""
        if hold.renewer is not None:
            await hold.renewer.quiet(hold, max(0.0, hold.lease_deadline - self.clock()))
        left = hold.granted_at + self.hold_at_least - self.clock()
        if left <= 0:
            return await self.store.release(self.spec.kind, self.name, hold.token)
        # Whole milliseconds, rounded up: the unit most stores count in, never short.
        window = math.ceil(left * 1000) / 1000
        return await self.store.release_after(self.spec.kind, self.name, hold.token, window)

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
