"""Read-write and fair locks on the consensus stores: a waiter whose place in the queue lapsed
(it stalled past its queue lease: a paused process, a swapped-out VM) is passed by the waiters
behind it and is never granted on that old place afterwards, beside the one that passed it.

The stall is made by driving a store's attempt (``AsyncStore.attempt``) step by step and not
calling it for a while, which is what a paused process does. On ZooKeeper a place's expiry
is judged by the contenders (its ``mtime`` against the server time of their own writes), so a
stalled waiter finds its node still there when nobody looked at it meanwhile; its next write
must notice that the node had lapsed (``tenure.backends.zookeeper._async.attempt``, "A place
that lapsed stays lapsed"). On etcd the place's lease ends on the server and takes the key
with it. The multi-process tests of read-write and fair locks are parametrized over every
backend offering them, these stores included (tests/integration/test_rwlock_processes.py).
"""

from __future__ import annotations

import os
import secrets
import time

import pytest

import tenure
from tenure._sync.store import Attempt, Store
from tenure._types import Busy, Grant, Holder, Kind, LeaseSpec, Mode

SERVERS = {"etcd": "etcd_url", "zookeeper": "zookeeper_url"}

pytestmark = pytest.mark.parametrize(
    "server",
    [pytest.param(marker, marks=getattr(pytest.mark, marker)) for marker in SERVERS],
)

PLACE_TTL = 0.5
"""The stalled waiter's queue lease (etcd rounds it up to 1 s)."""
LAPSED = 2.0
"""Seconds after which its place has surely lapsed on either store (etcd: 1 s lease plus its
0.5 s expiry sweep)."""


class Stalled:
    """A writer driven step by step through the store's attempt, so that it can stop in the
    middle."""

    def __init__(self, store: Store, name: str) -> None:
        self.store = store
        self.name = name
        self.token = secrets.token_hex(16)
        spec = LeaseSpec(Kind.RWLOCK, mode=Mode.WRITE, queue_ttl=PLACE_TTL)
        holder = Holder("stalled", os.getpid(), "stalled")
        self.steps: Attempt = store.attempt(name, spec, self.token, 30.0, holder)
        self.busy = Busy(None)

    def attempt(self) -> Grant | Busy:
        outcome = self.steps.try_once()
        if isinstance(outcome, Busy):
            self.busy = outcome
        return outcome

    def wait(self) -> None:
        self.steps.wait(PLACE_TTL / 3, self.busy)

    def queue(self) -> None:
        """Take a place and wait once, as an acquire does, then stop before the next try."""
        assert isinstance(self.attempt(), Busy)
        self.wait()

    def until_granted(self) -> Grant:
        deadline = time.monotonic() + 15  # a bound on a hang, not a timing assertion
        while time.monotonic() < deadline:
            self.wait()
            outcome = self.attempt()
            if isinstance(outcome, Grant):
                return outcome
        raise AssertionError("the stalled writer was never granted")


def _store(locks: tenure.Locks) -> Store:
    assert isinstance(locks.backend, Store)
    return locks.backend


def test_a_stalled_waiter_is_passed_and_never_granted_beside_who_passed_it(
    server: str, name: str, request: pytest.FixtureRequest
) -> None:
    url = request.getfixturevalue(SERVERS[server])
    with tenure.connect(url) as locks:
        holder = locks.rwlock(name, ttl=30).write()
        assert holder.acquire(blocking=False)
        stalled = Stalled(_store(locks), name)
        stalled.queue()  # queued, then it stops
        holder.release()
        # Its place holds the next writer back only until it lapses.
        passing = locks.rwlock(name, ttl=30).write()
        assert passing.acquire(timeout=10)
        passed_with = passing.fence
        assert passed_with is not None
        # It resumes while the one that passed it holds: it waits, behind it.
        for _ in range(3):
            stalled.wait()
            assert isinstance(stalled.attempt(), Busy)
        reader = locks.rwlock(name, ttl=30).read()
        assert reader.acquire(blocking=False) is False  # a writer holds, another waits
        passing.release()
        granted = stalled.until_granted()
        assert granted.fence > passed_with
        info = locks.inspect(name, kind="rwlock")
        assert info is not None and [lease.mode for lease in info.leases] == ["write"]
        assert [lease.fence for lease in info.leases] == [granted.fence]
        assert _store(locks).release(Kind.RWLOCK, name, stalled.token) is True


def test_a_lapsed_place_is_not_granted_even_with_nobody_ahead(
    server: str, name: str, request: pytest.FixtureRequest
) -> None:
    url = request.getfixturevalue(SERVERS[server])
    with tenure.connect(url) as locks:
        holder = locks.rwlock(name, ttl=30).write()
        assert holder.acquire(blocking=False)
        held_with = holder.fence
        assert held_with is not None
        stalled = Stalled(_store(locks), name)
        stalled.queue()
        holder.release()
        time.sleep(LAPSED)  # the stall: nobody else looks at the queue meanwhile
        # A contender may have judged the place expired and gone ahead: the waiter cannot
        # know, so it never takes the lease on that place. It joins again, at the back.
        assert isinstance(stalled.attempt(), Busy)
        granted = stalled.until_granted()
        assert granted.fence > held_with
        info = locks.inspect(name, kind="rwlock")
        assert info is not None and info.queued == 0 and len(info.leases) == 1
        assert _store(locks).release(Kind.RWLOCK, name, stalled.token) is True
