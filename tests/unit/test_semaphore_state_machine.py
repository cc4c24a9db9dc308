"""A hypothesis state machine over semaphore acquire / release / extend / expire / break, on
the memory backend with a fake clock: never more than ``limit`` live permits, fences strictly
increasing across permits, expired permits reclaimed, a non-owner's release refused, and the
server's view always agreeing with a simple model."""

from __future__ import annotations

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

import tenure
from tenure._sync.client import Locks
from tenure.backends.memory._server import MemoryServer
from tenure.backends.memory._sync import MemoryBackend
from tests.unit.test_state_machine import FakeClock

HANDLES = 5
LIMIT = 2
TTL = 10.0


class SemaphoreMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.clock = FakeClock()
        self.locks = Locks(MemoryBackend(MemoryServer(self.clock)), clock=self.clock)
        self.handles = [self.locks.semaphore("s", limit=LIMIT, ttl=TTL) for _ in range(HANDLES)]
        # The model: each handle's permit expiry on the server (absent: none), and which
        # handles believe they hold one.
        self.expires: dict[int, float] = {}
        self.believes = [False] * HANDLES
        self.last_fence = 0

    def _live(self) -> set[int]:
        return {i for i, until in self.expires.items() if self.clock.now < until}

    @rule(i=st.integers(0, HANDLES - 1))
    def acquire(self, i: int) -> None:
        handle = self.handles[i]
        if self.believes[i]:
            try:
                handle.acquire(blocking=False)
            except tenure.InvalidArgument:
                return
            raise AssertionError("one handle took a second permit")
        took = handle.acquire(blocking=False)
        if len(self._live()) < LIMIT:
            assert took, "a free permit must be granted"
            fence = handle.fence
            assert fence is not None and fence > self.last_fence
            self.last_fence = fence
            self.expires[i] = self.clock.now + TTL
            self.believes[i] = True
        else:
            assert not took, f"a permit beyond the limit was granted: live {self._live()}"

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
        live = i in self._live()
        self.expires.pop(i, None)
        if live:
            handle.release()
            return
        try:
            handle.release()
        except tenure.LockLost:
            return
        raise AssertionError("release of an expired permit did not raise LockLost")

    @rule(i=st.integers(0, HANDLES - 1), ttl=st.sampled_from([1.0, 5.0, TTL]))
    def extend(self, i: int, ttl: float) -> None:
        handle = self.handles[i]
        if not self.believes[i]:
            try:
                handle.extend(ttl)
            except tenure.NotOwned:
                return
            raise AssertionError("a non-owner's extend was accepted")
        if i in self._live():
            handle.extend(ttl)
            self.expires[i] = self.clock.now + ttl
            return
        try:
            handle.extend(ttl)
        except tenure.LockLost:
            return
        raise AssertionError("extend of an expired permit did not raise LockLost")

    @rule(seconds=st.sampled_from([0.5, 3.0, 9.99, 10.0, 25.0]))
    def advance(self, seconds: float) -> None:
        self.clock.now += seconds

    @rule()
    def break_semaphore(self) -> None:
        broke = self.locks.break_lock("s", kind="semaphore")
        assert broke == bool(self._live())
        self.expires.clear()

    @invariant()
    def never_more_than_limit(self) -> None:
        owners = {i for i, handle in enumerate(self.handles) if handle.owned()}
        assert len(owners) <= LIMIT, owners
        assert owners == self._live()

    @invariant()
    def server_view_matches(self) -> None:
        info = self.locks.inspect("s", kind="semaphore")
        if info is None:
            assert self.last_fence == 0
            return
        assert info.fence == self.last_fence
        assert len(info.leases) == len(self._live())
        assert all(0 < lease.ttl_left <= TTL for lease in info.leases)
        fences = [lease.fence for lease in info.leases]
        assert fences == sorted(fences)


SemaphoreMachine.TestCase.settings = settings(
    max_examples=150, stateful_step_count=40, deadline=None
)
TestSemaphoreMachine = SemaphoreMachine.TestCase
