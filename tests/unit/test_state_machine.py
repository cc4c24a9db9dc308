"""A hypothesis state machine over acquire / release / extend / expire / break, on the memory
backend with a fake clock: never two holders, fences strictly increasing, a non-owner's
release refused, and the client's view always agreeing with a simple model."""

from __future__ import annotations

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

import tenure
from tenure._sync.client import Locks
from tenure.backends.memory._server import MemoryServer
from tenure.backends.memory._sync import MemoryBackend

HANDLES = 3
TTL = 10.0


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class LockMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.clock = FakeClock()
        self.locks = Locks(MemoryBackend(MemoryServer(self.clock)), clock=self.clock)
        self.handles = [self.locks.lock("k", ttl=TTL) for _ in range(HANDLES)]
        # The model: who holds a live lease, until when; which handles think they hold one.
        self.holder: int | None = None
        self.expires = 0.0
        self.believes = [False] * HANDLES
        self.last_fence = 0

    def _live_holder(self) -> int | None:
        if self.holder is not None and self.clock.now < self.expires:
            return self.holder
        return None

    @rule(i=st.integers(0, HANDLES - 1))
    def acquire(self, i: int) -> None:
        took = self.handles[i].acquire(blocking=False)
        if self._live_holder() is None:
            assert took, "a free lock must be granted"
            fence = self.handles[i].fence
            assert fence is not None and fence > self.last_fence
            self.last_fence = fence
            self.holder, self.expires, self.believes[i] = i, self.clock.now + TTL, True
        else:
            assert not took, "a held lock was granted twice"

    @rule(i=st.integers(0, HANDLES - 1))
    def release(self, i: int) -> None:
        handle = self.handles[i]
        if not self.believes[i]:
            try:
                handle.release()
            except tenure.NotOwned:
                return
            raise AssertionError("a non-owner's release was accepted")
        self.believes[i] = False
        if self._live_holder() == i:
            handle.release()
            self.holder = None
        else:
            try:
                handle.release()
            except tenure.LockLost:
                return
            raise AssertionError("release of an expired lease did not raise LockLost")

    @rule(i=st.integers(0, HANDLES - 1), ttl=st.sampled_from([1.0, 5.0, TTL]))
    def extend(self, i: int, ttl: float) -> None:
        handle = self.handles[i]
        if not self.believes[i]:
            try:
                handle.extend(ttl)
            except tenure.NotOwned:
                return
            raise AssertionError("a non-owner's extend was accepted")
        if self._live_holder() == i:
            handle.extend(ttl)
            self.expires = self.clock.now + ttl
        else:
            try:
                handle.extend(ttl)
            except tenure.LockLost:
                return
            raise AssertionError("extend of an expired lease did not raise LockLost")

    @rule(seconds=st.sampled_from([0.5, 3.0, 9.99, 10.0, 25.0]))
    def advance(self, seconds: float) -> None:
        self.clock.now += seconds

    @rule()
    def break_lock(self) -> None:
        broke = self.locks.break_lock("k")
        assert broke == (self._live_holder() is not None)
        self.holder = None

    @invariant()
    def at_most_one_owner(self) -> None:
        owners = [i for i, handle in enumerate(self.handles) if handle.owned()]
        assert len(owners) <= 1, owners
        assert owners == ([] if self._live_holder() is None else [self._live_holder()])

    @invariant()
    def server_view_matches(self) -> None:
        info = self.locks.inspect("k")
        live = self._live_holder() is not None
        assert (info is not None and info.held) == live
        if info is not None:
            assert info.fence == self.last_fence


LockMachine.TestCase.settings = settings(max_examples=150, stateful_step_count=40,
                                         deadline=None)
TestLockMachine = LockMachine.TestCase
