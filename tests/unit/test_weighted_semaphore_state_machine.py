"""A hypothesis state machine over weighted FIFO permits on the memory store, with a fake
clock: handles of weights 1 to 3 arrive, wait in their places, retry, give up, release, and
let leases and places lapse. Checked at every step: the live permits' units never exceed the
limit; every try is granted exactly when the rule says (units of live permits + weights of
the live places ahead + its weight <= limit, an attempt without a place standing behind
every one), so a later arrival is never granted while one ahead of it does not fit (grants
in arrival order, nobody starved by lighter late comers); and the store's view (units,
waiters in arrival order with their weights) agrees with the model."""

from __future__ import annotations

import dataclasses
import itertools

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from tenure._async.rwlock import QUEUE_TTL
from tenure._types import Busy, Grant, Holder, Kind, LeaseSpec
from tenure.backends.memory._server import MemoryServer
from tests.unit.test_state_machine import FakeClock

LIMIT = 4
TTL = 10.0
WEIGHTS = (1, 2, 3, 1, 3, 2)
NAME = "pool"
HOLDER = Holder("host", 1, "main")


@dataclasses.dataclass
class Handle:
    weight: int
    token: str | None = None
    """The current attempt's token (None: idle)."""
    lease_until: float | None = None
    """When its permit ends (None: holds none)."""
    place: int | None = None
    """Its place's arrival number while it waits (None: no place)."""
    place_until: float = 0.0


class WeightedFifoMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.clock = FakeClock()
        self.server = MemoryServer(self.clock)
        self.handles = [Handle(weight) for weight in WEIGHTS]
        self.tokens = (f"t{n}" for n in itertools.count())
        self.arrivals = itertools.count(1)
        self.grants: list[int] = []
        self.owed: set[int] = set()
        """Waiters a later arrival was granted ahead of (while both were placed)."""
        self.tried = False

    # ---- the model --------------------------------------------------------------------

    def _spec(self, handle: Handle) -> LeaseSpec:
        return LeaseSpec(Kind.SEMAPHORE, limit=LIMIT, weight=handle.weight, queue_ttl=QUEUE_TTL)

    def _holding(self, handle: Handle) -> bool:
        return handle.lease_until is not None and self.clock.now < handle.lease_until

    def _placed(self, handle: Handle) -> bool:
        return handle.place is not None and self.clock.now < handle.place_until

    def _units(self) -> int:
        return sum(h.weight for h in self.handles if self._holding(h))

    def _ahead(self, handle: Handle) -> list[Handle]:
        """The live places ahead of ``handle``'s (every live place, if it has none)."""
        mine = handle.place if self._placed(handle) else None
        return sorted(
            (h for h in self.handles
             if h is not handle and self._placed(h)
             and (mine is None or (h.place or 0) < mine)),
            key=lambda h: h.place or 0,
        )

    def _fits(self, handle: Handle) -> bool:
        return (self._units() + sum(h.weight for h in self._ahead(handle)) + handle.weight
                <= LIMIT)

    def _try(self, i: int) -> bool:
        """One try of handle ``i``'s attempt; checks the answer against the rule."""
        handle = self.handles[i]
        assert handle.token is not None
        expected = self._fits(handle)
        owed = self._placed(handle) and i in self.owed
        answer = self.server.acquire(NAME, self._spec(handle), handle.token, TTL, HOLDER,
                                     gc_after=None)
        self.tried = True
        if owed:
            # A later arrival was granted while this one waited ahead of it: this one fits
            # as well, so its next try is granted (nobody is passed over).
            assert isinstance(answer, Grant), "a later arrival was served first"
        if expected:
            assert isinstance(answer, Grant), f"refused though it fits: {answer}"
            # Everybody still waiting ahead of this one is owed a grant at its next try.
            self.owed |= {self.handles.index(h) for h in self._ahead(handle)}
            self.owed.discard(i)
            handle.lease_until = self.clock.now + TTL
            handle.place = None
            self.grants.append(i)
        else:
            assert isinstance(answer, Busy), "granted though it does not fit"
            if not self._placed(handle):  # a new place at the tail
                handle.place = next(self.arrivals)
            handle.place_until = self.clock.now + QUEUE_TTL
        return expected

    def _idle(self, i: int) -> bool:
        handle = self.handles[i]
        return not self._holding(handle) and not self._placed(handle)

    # ---- the rules --------------------------------------------------------------------

    @rule(i=st.integers(0, len(WEIGHTS) - 1))
    def arrive(self, i: int) -> None:
        """A blocking acquire's first try: granted, or it keeps a place."""
        if not self._idle(i):
            return
        handle = self.handles[i]
        # (A permit that ran out is gone: this is a new acquisition, with a new token.)
        handle.token, handle.place, handle.lease_until = next(self.tokens), None, None
        self.owed.discard(i)
        self._try(i)

    @rule(i=st.integers(0, len(WEIGHTS) - 1))
    def try_without_waiting(self, i: int) -> None:
        """A non-blocking acquire: one try; refused, it leaves its place at once."""
        if not self._idle(i):
            return
        handle = self.handles[i]
        handle.token, handle.place, handle.lease_until = next(self.tokens), None, None
        self.owed.discard(i)
        if not self._try(i):
            self.server.release(Kind.SEMAPHORE, NAME, handle.token, gc_after=None)
            handle.place = None

    @precondition(lambda self: any(self._placed(h) for h in self.handles))
    @rule(data=st.data())
    def retry(self, data: st.DataObject) -> None:
        """A waiter's next try (after a wake-up or its back-off): refreshes its place."""
        waiting = [i for i, h in enumerate(self.handles) if self._placed(h)]
        self._try(data.draw(st.sampled_from(waiting)))

    @precondition(lambda self: any(self._placed(h) for h in self.handles))
    @rule(data=st.data())
    def give_up(self, data: st.DataObject) -> None:
        waiting = [i for i, h in enumerate(self.handles) if self._placed(h)]
        i = data.draw(st.sampled_from(waiting))
        handle = self.handles[i]
        assert handle.token is not None
        assert self.server.release(Kind.SEMAPHORE, NAME, handle.token, gc_after=None) is False
        handle.place, handle.token = None, None
        self.owed.discard(i)

    @precondition(lambda self: any(self._holding(h) for h in self.handles))
    @rule(data=st.data())
    def release(self, data: st.DataObject) -> None:
        holding = [i for i, h in enumerate(self.handles) if self._holding(h)]
        handle = self.handles[data.draw(st.sampled_from(holding))]
        assert handle.token is not None
        assert self.server.release(Kind.SEMAPHORE, NAME, handle.token, gc_after=None) is True
        handle.lease_until, handle.token = None, None

    @rule(seconds=st.sampled_from([0.5, 1.0, 2.9, 3.0, 10.0]))
    def advance(self, seconds: float) -> None:
        """Time passes: unrenewed permits end after TTL (a dead holder's units come back),
        unrefreshed places after QUEUE_TTL (a dead waiter stops holding others back)."""
        self.clock.now += seconds
        # A waiter whose place lapsed joins again at the tail: it is owed nothing.
        self.owed = {i for i in self.owed if self._placed(self.handles[i])}

    # ---- the invariants -----------------------------------------------------------------

    @invariant()
    def never_over_the_limit(self) -> None:
        assert self._units() <= LIMIT

    @invariant()
    def the_store_agrees(self) -> None:
        info = self.server.inspect(Kind.SEMAPHORE, NAME)
        if info is None:
            assert not self.tried
            return
        assert info.units == self._units() <= LIMIT
        placed = sorted((h for h in self.handles if self._placed(h)), key=lambda h: h.place or 0)
        assert [w.weight for w in info.waiters] == [h.weight for h in placed]
        assert info.queued == len(placed)


WeightedFifoMachine.TestCase.settings = settings(
    max_examples=200, stateful_step_count=50, deadline=None
)
TestWeightedFifoMachine = WeightedFifoMachine.TestCase
