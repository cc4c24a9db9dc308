"""The model a history is checked against: a fenced lease store for one name.

A state is the set of live leases of the name (at most ``limit``: 1 for a lock, the number
of permits for a semaphore) and the last fence granted. Each call of the history moves the
state as the table in ``tenure.verify.history`` says, or is impossible in it:

- **At most ``limit`` live leases.** A grant needs a free place; a refusal needs none.
- **Expiry is nondeterministic, and allowed only once the ttl may have run out.** A lease
  granted (or extended) by a call invoked at ``t`` with ``ttl`` may end by expiry from
  ``t + ttl * (1 - rate) - resolution`` on the clients' clock (``ClockAllowance``): the
  service started the lease no earlier than ``t`` and its clock may run ``rate`` faster than
  the clients'. It never has to expire: the model checks safety, not liveness. A lease
  only expires when a call needs it gone (a grant, a "not held" answer), and the call must
  have completed after that moment; so must every call placed after it
  (``State.not_before``): the calls of a linearization take effect in its order, and this
  one took effect after the expiry. Expiring a lease only when a call needs it never
  allows less: an earlier expiry would bind more calls.
- **Fences strictly increase per name** (a lock): a grant's fence is above every fence
  granted before it. Semaphore permits granted together may get theirs in any order
  (etcd, ZooKeeper), so for a semaphore a fence need only differ from the live ones'.
- **"Not held" answers only where the lease may have ended:** a refused release or extend,
  an ``owned()`` False, a ``locked()`` False all need the lease ended (released, expired, or
  never granted).
- **A refusal proves little.** Stores that queue waiters (etcd, ZooKeeper, SQLite) refuse a
  newcomer while a waiter is queued ahead even when nobody holds the name (a lock "never
  barges past waiters"), and a waiter that gives up may be the holder for a moment before
  its place is gone (ZooKeeper's node at the head of the queue holds the lock whether or
  not its client still waits). So a refused acquire is checked like an unanswered one: it
  may have held the name for a moment, and needs no holder. What it loses is availability
  checking (a store that refuses everything passes); ``strict_refusals=True`` restores
  "a refusal needs the name held" for stores that never queue. So does a semaphore's
  ``locked()`` answering True (limit above 1): a queued semaphore's (every one on a store
  offering "weighted") is True while anybody waits, free units or not.
- **Unknown outcomes may or may not have taken effect.** An unanswered acquire leaves a
  lease that may be live (so it can explain "held" answers) and may end at any moment
  (the client's clean-up releases what it may have been granted); its fence is unknown. An
  unanswered release or extend leaves both possibilities.

A step answers the states that can follow (none: the call is impossible here) and, when
there are none, why. Read-write locks (modes) and elections (a lock whose fence is the term)
fit the same state: a lease gains a mode, ``_room`` a mode rule, like
``tenure.backends._ordered_queue`` (``tenure.verify.primitives`` holds those models; this
module's ``_room`` is the limit rule).
"""

from __future__ import annotations

import dataclasses
import math
from typing import NamedTuple

from tenure.verify.history import Operation

__all__ = ["ClockAllowance", "Lease", "LeaseModel", "State"]


@dataclasses.dataclass(frozen=True, slots=True)
class ClockAllowance:
    """How much faster than the clients' clock the service's may run out a lease.

    ``rate`` 0.01 lets a 10 s lease end after 9.9 s of the clients' time; ``resolution``
    covers the service's clock granularity (milliseconds for Redis ``PX``). Real clocks
    drift by parts per million; the allowance is wide so that a report is a real violation,
    not a clock being a little fast. A server whose clock jumps forward is outside it: the
    checker then reports the early expiry, which is what a client protected by the lease
    would suffer."""

    rate: float = 0.01
    resolution: float = 0.002

    def earliest_end(self, invoked: float, ttl: float) -> float:
        """The earliest client time a lease set by a call invoked at ``invoked`` may end."""
        return invoked + ttl * (1 - self.rate) - self.resolution


class Lease(NamedTuple):
    lease: str
    """The acquisition's name in the history."""
    ends_after: float
    """The earliest client time it may have expired (``ClockAllowance.earliest_end``)."""
    fence: int | None
    """Its fence; None when its grant went unanswered."""
    set_by: int
    """The index (in its part of the history) of the call that granted or last extended it."""
    mode: str | None = None
    """A read-write lock's lease: "read" or "write"; None for the other primitives."""


class State(NamedTuple):
    leases: tuple[Lease, ...]
    """Live leases, sorted (so equal states compare and hash equal)."""
    last_fence: int | None
    last_write: int | None = None
    """A read-write lock's highest write fence: a read granted later must be above it."""
    not_before: float | None = None
    """The earliest moment the next call placed can take effect: the earliest end of a lease
    whose expiry a call placed before it needed (that call took effect after the expiry,
    and the next one takes effect after that call). None when it binds no call left: it is
    dropped once a call invoked after it is placed, since every call placed later completes
    after that call's invocation (the search keeps real-time order), which keeps states
    equal for the search's cache."""
    not_before_lease: str | None = None
    """The lease whose expiry set ``not_before`` (for the reports)."""


INITIAL = State((), None)


class LeaseModel:
    """The fenced lease of one name. ``limit``: 1 for a lock, the permits of a semaphore."""

    def __init__(self, limit: int = 1, allowance: ClockAllowance | None = None, *,
                 strict_refusals: bool = False) -> None:
        self.limit = limit
        self.allowance = allowance or ClockAllowance()
        self.strict_refusals = strict_refusals
        """False: a refused acquire may come while the name is free, and may have held it
        for a moment (``_acquire``); True: a refusal needs the name held."""

    def initial(self) -> State:
        return INITIAL

    def step(self, state: State, index: int, op: Operation) -> tuple[list[State], str]:
        """The states that can follow ``state`` once ``op`` (the ``index``-th call of the
        part) takes effect, or ``([], why it cannot)``."""
        bound = state.not_before
        if bound is not None and bound > op.latest:
            return [], (f"completed at {self._at(op.latest)}, before {self._at(bound)}: a call "
                        f"placed before it needed lease {state.not_before_lease} expired, "
                        f"which it could not have been before then")
        handler = getattr(self, f"_{op.kind}")
        following: list[State]
        following, why = handler(state, index, op)
        return [self._bound(state, after, op) for after in following], why

    def _bound(self, before: State, after: State, op: Operation) -> State:
        """``after`` (a state following ``before`` once ``op`` took effect) with
        ``not_before`` raised to the earliest end of each lease ``op`` needed expired, and
        dropped when ``op``'s invocation already bounds every call placed after it."""
        bound, lease = before.not_before, before.not_before_lease
        if after.leases is not before.leases:
            names = {live.lease for live in after.leases}
            own = op.lease if op.kind == "release" and op.outcome != "fail" else None
            for gone in before.leases:
                # A lease gone otherwise than by its own release expired.
                if gone.lease not in names and gone.lease != own and (
                        bound is None or gone.ends_after > bound):
                    bound, lease = gone.ends_after, gone.lease
        if bound is not None and bound <= op.invoked:
            bound = lease = None
        if bound == after.not_before and lease == after.not_before_lease:
            return after
        return after._replace(not_before=bound, not_before_lease=lease)

    # ---- helpers -----------------------------------------------------------------------

    @staticmethod
    def _find(state: State, lease: str | None) -> Lease | None:
        for live in state.leases:
            if live.lease == lease:
                return live
        return None

    @staticmethod
    def _with(state: State, leases: list[Lease] | tuple[Lease, ...],
              last_fence: int | None = None) -> State:
        fence = state.last_fence if last_fence is None else last_fence
        return State(tuple(sorted(leases)), fence, state.last_write, state.not_before,
                     state.not_before_lease)

    def _without(self, state: State, gone: Lease) -> State:
        return self._with(state, [live for live in state.leases if live is not gone])

    def _expired(self, state: State, gone: Lease) -> State:
        """``state`` once ``gone`` ran out (``step`` binds the calls placed after it to
        ``gone.ends_after``: ``State.not_before``)."""
        return self._without(state, gone)

    def _expirable(self, state: State, op: Operation) -> list[Lease]:
        return [live for live in state.leases if live.ends_after <= op.latest]

    # ---- the rules a primitive may change (``tenure.verify.primitives``) -----------------

    def _full(self, state: State, op: Operation) -> bool:
        """Whether ``op``'s lease would be refused now, before any expiry."""
        return len(state.leases) >= self.limit

    def _room(self, state: State, op: Operation) -> list[State]:
        """States with room for ``op``'s lease by ``op``'s time (the limit rule): as is, or
        with one lease that may have run out by then expired."""
        if len(state.leases) < self.limit:
            return [state]
        return [self._expired(state, live) for live in self._expirable(state, op)]

    def _why_full(self, state: State, op: Operation) -> str:
        """Why ``_room`` found none: the leases in the way, none of which may have ended."""
        return "; ".join(self._why_live(live, op) for live in state.leases)

    def _why_not_full(self, state: State, op: Operation) -> str:
        return "free" if not state.leases else f"only {len(state.leases)} of {self.limit} held"

    def _fence_refused(self, room: State, op: Operation) -> str:
        """Why ``op``'s fence cannot be granted in ``room`` ("": it can): a lock's is above
        every fence before it; a semaphore's differs from the live permits' (permits granted
        together may get theirs in any order)."""
        assert op.fence is not None
        if self.limit == 1:
            if room.last_fence is not None and op.fence <= room.last_fence:
                return (f"granted fence {op.fence}, not above fence {room.last_fence} "
                        "granted before it")
            return ""
        if any(live.fence == op.fence for live in room.leases):
            return f"granted fence {op.fence}, which a live permit holds"
        return ""

    def _granted(self, room: State, lease: Lease) -> State:
        """``room`` with ``lease`` (of a known fence) granted."""
        assert lease.fence is not None
        last = lease.fence if room.last_fence is None else max(lease.fence, room.last_fence)
        return self._with(room, [*room.leases, lease], last)

    @staticmethod
    def _at(time: float) -> str:
        return "never" if math.isinf(time) else f"{time:.3f} s"

    def _why_live(self, live: Lease, op: Operation) -> str:
        mode = "" if live.mode is None else f"{live.mode} "
        return (f"{mode}lease {live.lease} (fence "
                f"{live.fence if live.fence is not None else '?'}) could not have expired "
                f"before {self._at(live.ends_after)} and the call completed at "
                f"{self._at(op.latest)}")

    # ---- the calls ---------------------------------------------------------------------

    def _acquire(self, state: State, index: int, op: Operation) -> tuple[list[State], str]:
        if op.outcome == "fail" and (self.strict_refusals or self._full(state, op)):
            if self._full(state, op):
                return [state], ""
            return [], "refused while " + self._why_not_full(state, op)
        assert op.ttl is not None and op.lease is not None
        if self._find(state, op.lease) is not None:
            return [], f"lease {op.lease} was granted twice"
        rooms = self._room(state, op)
        if op.outcome != "ok":
            # May have been granted (and then released by the client's clean-up at any
            # moment): a lease that may end at once, fence unknown. It explains "held"
            # answers and blocks nothing, so it covers "not granted" too, unless a lease had
            # to end to make room for it: then "not granted" keeps that lease (which an
            # election's leader() or an rwlock's inspect may name later).
            ghost = Lease(op.lease, op.invoked, None, index, op.mode)
            granted = [self._with(room, [*room.leases, ghost]) for room in rooms]
            return (granted if granted and not self._full(state, op) else [state, *granted]), ""
        assert op.fence is not None
        if not rooms:
            what = "granted" if op.mode is None else f"{op.mode} granted"
            return [], f"{what} while held: " + self._why_full(state, op)
        lease = Lease(op.lease, self.allowance.earliest_end(op.invoked, op.ttl), op.fence,
                      index, op.mode)
        following = []
        why = ""
        for room in rooms:
            refused = self._fence_refused(room, op)
            if refused:
                why = refused
            else:
                following.append(self._granted(room, lease))
        return following, ("" if following else why)

    def _ended(self, state: State, op: Operation, what: str) -> tuple[list[State], str]:
        """``op`` answered that its lease is not live: it ended before, or may end now."""
        live = self._find(state, op.lease)
        if live is None:
            return [state], ""
        if live.ends_after <= op.latest:
            return [self._expired(state, live)], ""
        return [], f"{what} while {self._why_live(live, op)}"

    def _release(self, state: State, index: int, op: Operation) -> tuple[list[State], str]:
        live = self._find(state, op.lease)
        if op.outcome == "fail":
            return self._ended(state, op, "release answered not ours")
        if live is None:
            if op.outcome == "unknown":
                return [state], ""
            return [], f"released lease {op.lease}, which was not live (ended or never granted)"
        released = self._without(state, live)
        return ([state, released] if op.outcome == "unknown" else [released]), ""

    def _extend(self, state: State, index: int, op: Operation) -> tuple[list[State], str]:
        live = self._find(state, op.lease)
        if op.outcome == "fail":
            return self._ended(state, op, "extend answered not ours")
        if live is None:
            if op.outcome == "unknown":
                return [state], ""
            return [], f"extended lease {op.lease}, which was not live (ended or never granted)"
        assert op.ttl is not None
        renewed = live._replace(ends_after=self.allowance.earliest_end(op.invoked, op.ttl),
                                set_by=index)
        extended = self._with(state, [renewed if lease is live else lease
                                      for lease in state.leases])
        return ([state, extended] if op.outcome == "unknown" else [extended]), ""

    def _owned(self, state: State, index: int, op: Operation) -> tuple[list[State], str]:
        if op.held:
            if self._find(state, op.lease) is not None:
                return [state], ""
            return [], f"owned() said lease {op.lease} is live, but it was not"
        return self._ended(state, op, "owned() answered False")

    def _locked(self, state: State, index: int, op: Operation) -> tuple[list[State], str]:
        side = "" if op.mode is None else f" ({op.mode} side)"  # a read-write lock's handle
        if op.held and op.kind == "locked" and self.limit > 1 and not self.strict_refusals:
            # A queued semaphore's (every one on a store offering "weighted") locked() is
            # True while anybody waits, free units or not: proves little, as a refusal.
            return [state], ""
        if op.held:
            if self._full(state, op):
                return [state], ""
            return [], f"answered held{side} while {self._why_not_full(state, op)}"
        rooms = self._room(state, op)
        if rooms:
            return rooms, ""
        return [], f"answered not held{side} while " + self._why_full(state, op)

    def _inspect(self, state: State, index: int, op: Operation) -> tuple[list[State], str]:
        if not op.held or self.limit > 1 or op.fence is None:
            return self._locked(state, index, op)
        if not state.leases:
            return [], f"inspect read holder with fence {op.fence} while free"
        live = state.leases[0]
        if live.fence is None or live.fence == op.fence:
            return [state], ""
        return [], (f"inspect read holder with fence {op.fence}, but the live lease "
                    f"{live.lease} has fence {live.fence}")
