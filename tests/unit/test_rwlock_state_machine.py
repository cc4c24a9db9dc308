"""Hypothesis state machines over queued leases (read-write and fair locks) on the memory
backend with a fake clock.

Waiters are driven through the backend's ``acquire_queued`` with fixed tokens (a waiter's
attempt, its retry, its giving up, or its silence when it dies); handles are driven through
the public API. The store's every answer is checked against a small model, and the
invariants hold whatever the interleaving: never a writer together with anyone else, a
queued writer holds back later readers, fences strictly increase (a write's above every
earlier fence), grants in arrival order, expired leases and lapsed places reclaimed, a
non-owner's release refused."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

import tenure
from tenure._sync.client import Locks
from tenure._types import Busy, Grant, Holder, Kind, LeaseSpec, Mode, Renewal
from tenure.backends.memory._server import MemoryServer
from tenure.backends.memory._sync import MemoryBackend
from tests.unit.test_state_machine import FakeClock

NAME = "rw"
TTL = 10.0
QUEUE_TTL = 3.0
HOLDER = Holder("model", 1, "model")
TOKENS = [f"waiter-{i}" for i in range(4)]


@dataclasses.dataclass
class Lease:
    mode: str
    expires: float
    fence: int


@dataclasses.dataclass
class Place:
    mode: str
    arrival: int
    expires: float


class QueueModel:
    """What the server should hold: leases and places by key, one fence counter floored by
    ``floor`` (the store's fence floor, here the fake clock in microseconds)."""

    def __init__(self, floor: Callable[[], int]) -> None:
        self.floor = floor
        self.leases: dict[str, Lease] = {}
        self.places: dict[str, Place] = {}
        self.arrivals = 0
        self.fence = 0

    def drop(self, now: float) -> None:
        self.leases = {k: v for k, v in self.leases.items() if v.expires > now}
        self.places = {k: v for k, v in self.places.items() if v.expires > now}

    def ahead(self, key: str) -> list[Place]:
        mine = self.places.get(key)
        return [p for p in self.places.values() if mine is None or p.arrival < mine.arrival]

    def grantable(self, key: str, mode: str) -> bool:
        ahead = self.ahead(key)
        if mode == "write":
            return not self.leases and not ahead
        return all(lease.mode == "read" for lease in self.leases.values()) and all(
            place.mode == "read" for place in ahead
        )

    def attempt(self, key: str, mode: str, now: float, *, enqueue: bool) -> int | None:
        """The fence granted to ``key``, or None (then queued, if ``enqueue``)."""
        self.drop(now)
        if key in self.leases:
            self.leases[key].expires = now + TTL
            return self.leases[key].fence
        if self.grantable(key, mode):
            self.places.pop(key, None)
            self.fence = max(self.fence + 1, self.floor())
            self.leases[key] = Lease(mode, now + TTL, self.fence)
            return self.fence
        if enqueue:
            if key in self.places:
                self.places[key].expires = now + QUEUE_TTL
            else:
                self.arrivals += 1
                self.places[key] = Place(mode, self.arrivals, now + QUEUE_TTL)
        return None

    def release(self, key: str, now: float) -> bool:
        lease = self.leases.pop(key, None)
        self.places.pop(key, None)
        return lease is not None and lease.expires > now

    def live_places(self, now: float) -> int:
        return sum(1 for place in self.places.values() if place.expires > now)


class QueuedMachine(RuleBasedStateMachine):
    MODES: tuple[str, ...] = ("read", "write")

    def __init__(self) -> None:
        super().__init__()
        self.clock = FakeClock()
        # Fences floored by the fake clock in microseconds, as the store floors them by the
        # wall clock: the model then follows every fence exactly, floor and counter alike.
        self.backend = MemoryBackend(MemoryServer(self.clock, self._floor))
        self.locks = Locks(self.backend, clock=self.clock)
        self.model = QueueModel(self._floor)
        self.granted_fences: list[int] = []

    def _floor(self) -> int:
        return int(self.clock.now * 1_000_000)

    @property
    def now(self) -> float:
        return self.clock.now

    def _granted(self, key: str, mode: str, fence: int, *, retry: bool) -> None:
        if not retry:
            # A new grant: a fence above every earlier one, a write's above every earlier
            # read or write fence of the name.
            assert all(fence > earlier for earlier in self.granted_fences), (
                fence, self.granted_fences,
            )
            self.granted_fences.append(fence)

    @rule(
        waiter=st.sampled_from(TOKENS),
        mode=st.sampled_from(("read", "write")),
    )
    def waiter_attempts(self, waiter: str, mode: str) -> None:
        """A waiter's (first or next) attempt; a waiter that stops attempting has died."""
        mode = mode if mode in self.MODES else self.MODES[0]
        known = self.model.leases.get(waiter) or self.model.places.get(waiter)
        if known is not None and known.expires > self.now:
            mode = known.mode  # one waiter keeps its mode
        retry = waiter in self.model.leases and self.model.leases[waiter].expires > self.now
        expected = self.model.attempt(waiter, mode, self.now, enqueue=True)
        spec = LeaseSpec(Kind.RWLOCK, mode=Mode(mode), queue_ttl=QUEUE_TTL)
        outcome = self.backend.acquire(NAME, spec, waiter, TTL, HOLDER)
        if expected is None:
            assert isinstance(outcome, Busy), (waiter, mode, outcome)
        else:
            assert outcome == Grant(expected), (waiter, mode, outcome, expected)
            self._granted(waiter, mode, expected, retry=retry)

    @rule(waiter=st.sampled_from(TOKENS))
    def waiter_leaves(self, waiter: str) -> None:
        """A holder releases, or a waiter gives up (its place goes at once)."""
        expected = self.model.release(waiter, self.now)
        assert self.backend.release(Kind.RWLOCK, NAME, waiter) == expected

    @rule(waiter=st.sampled_from(TOKENS))
    def holder_renews(self, waiter: str) -> None:
        lease = self.model.leases.get(waiter)
        live = lease is not None and lease.expires > self.now
        if live:
            assert lease is not None
            lease.expires = self.now + TTL
        renewed = self.backend.extend_many([Renewal(NAME, waiter, TTL, Kind.RWLOCK)])
        assert renewed == [live]

    @rule(seconds=st.sampled_from([0.5, 1.0, 2.99, 3.0, 9.99, 10.0, 25.0]))
    def advance(self, seconds: float) -> None:
        self.clock.now += seconds

    @rule()
    def operator_breaks(self) -> None:
        self.model.drop(self.now)
        expected = bool(self.model.leases)
        self.model.leases.clear()
        assert self.locks.break_lock(NAME, kind="rwlock") == expected

    @invariant()
    def never_a_writer_with_anyone(self) -> None:
        info = self.locks.inspect(NAME, kind="rwlock")
        if info is None:
            return
        modes = [lease.mode for lease in info.leases]
        assert "write" not in modes or modes == ["write"], modes

    @invariant()
    def server_matches_the_model(self) -> None:
        info = self.locks.inspect(NAME, kind="rwlock")
        if info is None:
            assert self.model.fence == 0
            return
        self.model.drop(self.now)
        assert info.fence == self.model.fence
        assert sorted(lease.fence or 0 for lease in info.leases) == sorted(
            lease.fence for lease in self.model.leases.values()
        )
        assert all(0 < lease.ttl_left <= TTL for lease in info.leases)
        # Lapsed places are gone: a dead waiter blocks nobody past its queue lease.
        assert info.queued == self.model.live_places(self.now)


class ReadWriteMachine(QueuedMachine):
    """Both modes, plus handles through the public API (tries that leave no place)."""

    def __init__(self) -> None:
        super().__init__()
        rw = self.locks.rwlock(NAME, ttl=TTL)
        self.handles = [rw.read(), rw.read(), rw.write(), rw.write()]
        self.handle_modes = ["read", "read", "write", "write"]

    def _handle_key(self, index: int) -> str:
        return f"handle-{index}"

    @rule(index=st.integers(0, 3))
    def handle_tries(self, index: int) -> None:
        key = self._handle_key(index)
        handle, mode = self.handles[index], self.handle_modes[index]
        if handle.fence is not None:
            return  # held (maybe expired); a try on a held handle is tested elsewhere
        expected = self.model.attempt(key, mode, self.now, enqueue=False)
        took = handle.acquire(blocking=False)
        assert took == (expected is not None), (index, mode, expected)
        if expected is not None:
            assert handle.fence == expected
            self._granted(key, mode, expected, retry=False)

    @rule(index=st.integers(0, 3))
    def handle_releases(self, index: int) -> None:
        key = self._handle_key(index)
        handle = self.handles[index]
        if handle.fence is None:
            try:
                handle.release()
            except tenure.NotOwned:
                return
            raise AssertionError("a release by a handle holding nothing was accepted")
        live = self.model.release(key, self.now)
        if live:
            handle.release()
            return
        try:
            handle.release()
        except tenure.LockLost:
            return
        raise AssertionError("release of an expired or broken lease did not raise LockLost")

    @invariant()
    def a_queued_writer_holds_back_later_readers(self) -> None:
        # Whatever the live leases, a reader arriving now behind a live writer's place is
        # refused (and leaves no place: the try is a handle's).
        self.model.drop(self.now)
        if any(place.mode == "write" for place in self.model.places.values()):
            probe = self.locks.rwlock(NAME, ttl=TTL).read()
            assert probe.acquire(blocking=False) is False
            assert self.locks.inspect(NAME, kind="rwlock").queued == (  # type: ignore[union-attr]
                self.model.live_places(self.now)
            )


class FairQueueMachine(QueuedMachine):
    """Write mode only: a fair lock. Every grant goes to the earliest live place."""

    MODES = ("write",)

    def __init__(self) -> None:
        super().__init__()
        self.grant_order: list[int] = []
        """Arrival positions of the places granted, in grant order."""

    @rule(waiter=st.sampled_from(TOKENS))
    def waiter_in_line_attempts(self, waiter: str) -> None:
        self.model.drop(self.now)
        place = self.model.places.get(waiter)
        earliest = min((p.arrival for p in self.model.places.values()), default=None)
        self.waiter_attempts(waiter, "write")
        if place is not None and waiter in self.model.leases:
            # Granted from the queue: it was the first in line.
            assert place.arrival == earliest, (place.arrival, earliest)
            self.grant_order.append(place.arrival)
            assert self.grant_order == sorted(self.grant_order)

    @rule(waiter=st.sampled_from(TOKENS))
    def a_newcomer_never_overtakes(self, waiter: str) -> None:
        self.model.drop(self.now)
        if waiter in self.model.leases or waiter in self.model.places:
            return
        if self.model.places:
            probe = self.locks.lock(NAME, ttl=TTL, fair=True)
            assert probe.acquire(blocking=False) is False


settings_used = settings(max_examples=150, stateful_step_count=40, deadline=None)
ReadWriteMachine.TestCase.settings = settings_used
FairQueueMachine.TestCase.settings = settings_used
TestReadWriteMachine = ReadWriteMachine.TestCase
TestFairQueueMachine = FairQueueMachine.TestCase
