"""The lease logic's side of stores whose leases live on a client session (ZooKeeper's
ephemeral nodes), on the memory backend given a session of its own: a grant vouches for at
most ``lease_horizon`` seconds whatever the ttl (``check()`` fails after it, renewals are
paced by it), and once the backend doubts a lease (``lease_doubt``) every holder is told:
``check()`` and ``owned()`` consult it, and a doubt listener wakes the renewal scheduler so
that ``on_lost`` runs at once rather than at the next renewal."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence

import pytest

import tenure
from tenure._types import Renewal
from tenure.backends.memory._server import MemoryServer
from tenure.backends.memory._sync import MemoryBackend


class SessionBound(MemoryBackend):
    """A memory store whose leases also depend on a (pretend) session: a test interrupts it
    by setting ``interrupted``, and the backend then doubts every lease, as ZooKeeper's does
    after SUSPENDED."""

    local = False  # as a networked store: renewals go through the bounded path

    def __init__(self, horizon: float | None) -> None:
        super().__init__(MemoryServer(time.monotonic))
        self.horizon = horizon
        self.interrupted = ""
        self.listeners: list[Callable[[], object]] = []
        self.renewals = 0

    @property
    def lease_horizon(self) -> float | None:
        return self.horizon

    def lease_doubt(self, kind: str, name: str, token: str) -> str | None:
        return self.interrupted or None

    def add_doubt_listener(self, listener: Callable[[], object]) -> None:
        self.listeners.append(listener)

    def interrupt(self, why: str) -> None:
        self.interrupted = why
        for listener in self.listeners:
            listener()

    def extend_many(self, renewals: Sequence[Renewal]) -> list[bool]:
        self.renewals += len(renewals)
        return super().extend_many(renewals)


def test_check_fails_after_the_horizon_though_the_ttl_runs_on() -> None:
    backend = SessionBound(horizon=0.3)
    with tenure.Locks(backend) as locks:
        lock = locks.lock("bound", ttl=30, renew=False)
        assert lock.acquire(blocking=False)
        lock.check()
        time.sleep(0.4)
        with pytest.raises(tenure.LockLost, match="vouched"):
            lock.check()


def test_renewals_are_paced_by_the_horizon_and_keep_the_lease() -> None:
    backend = SessionBound(horizon=0.3)
    with tenure.Locks(backend) as locks:
        lock = locks.lock("paced", ttl=30, renew=True)
        assert lock.acquire(blocking=False)
        time.sleep(1.0)
        lock.check()  # renewed every 0.1 s: never past its 0.3 s bound
        # At ttl/3 there would be none in the first 10 s.
        assert backend.renewals >= 4, backend.renewals
        lock.release()


def test_a_doubt_tells_every_holder_at_once() -> None:
    backend = SessionBound(horizon=None)
    told = threading.Event()
    with tenure.Locks(backend) as locks:
        renewed = locks.lock("doubted", ttl=30, renew=True, on_lost=lambda _l: told.set())
        unrenewed = locks.lock("doubted:unrenewed", ttl=30, renew=False)
        assert renewed.acquire(blocking=False) and unrenewed.acquire(blocking=False)
        renewed.check()
        unrenewed.check()
        backend.interrupt("the session was suspended")
        # The next renewal is 10 s away: only the listener's wake-up can be this quick.
        assert told.wait(5), "on_lost not called after the backend doubted the lease"
        assert renewed.lost.is_set()
        with pytest.raises(tenure.LockLost, match="suspended"):
            renewed.check()
        with pytest.raises(tenure.LockLost, match="suspended"):
            unrenewed.check()
        with pytest.raises(tenure.LockLost):
            renewed.release()
        with pytest.raises(tenure.LockLost):
            unrenewed.release()


def test_owned_consults_the_doubt_before_the_server() -> None:
    backend = SessionBound(horizon=None)
    with tenure.Locks(backend) as locks:
        lock = locks.lock("asked", ttl=30, renew=False)
        assert lock.acquire(blocking=False)
        assert lock.owned()
        backend.interrupted = "the session was lost"
        assert lock.owned() is False  # the store still has it; the session's word wins
        assert lock.lost.is_set()
