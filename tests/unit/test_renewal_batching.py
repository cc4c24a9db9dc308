"""The watchdog's batching window: renewals due within a short window of each other share one
``extend_many`` round trip, and stay together afterwards; a lease that is not renewed is
never judged lost before its end because a batch went out early."""

from __future__ import annotations

import time
from collections.abc import Sequence

import tenure
from tenure._sync.renewer import COALESCE_FRACTION, RENEW_FRACTION
from tenure._types import Renewal
from tenure.backends.memory._store import MemoryStore
from tenure.backends.memory._sync import MemoryBackend


class Counting(MemoryBackend):
    def __init__(self, store: MemoryStore) -> None:
        super().__init__(store)
        self.batches: list[int] = []

    def extend_many(self, renewals: Sequence[Renewal]) -> list[bool]:
        self.batches.append(len(renewals))
        return super().extend_many(renewals)


def test_leases_taken_a_few_milliseconds_apart_renew_in_one_round_trip() -> None:
    ttl = 0.6
    gap = ttl * COALESCE_FRACTION / 8  # all four fall inside one window
    backend = Counting(MemoryStore())
    with tenure.Locks(backend) as locks:
        held = [locks.lock(f"batch:{index}", ttl=ttl, renew=True) for index in range(4)]
        for lock in held:
            assert lock.acquire(blocking=False)
            time.sleep(gap)
        time.sleep(ttl * 2)  # several renewal rounds
        for lock in held:
            lock.check()
            lock.release()
    assert len(backend.batches) >= 4
    assert set(backend.batches) == {4}, backend.batches


def test_a_lease_that_is_not_renewed_is_not_lost_early_by_a_batch() -> None:
    backend = Counting(MemoryStore())
    ttl = 1.2
    with tenure.Locks(backend) as locks:
        renewed = locks.lock("window:renewed", ttl=ttl, renew=True)
        lost_at: list[float] = []
        # Its lease ends just after the other's first renewal, inside the window that batch
        # would open for it (a window is a fraction of each lease's own ttl):
        # expiring_ttl = first_renewal + expiring_ttl * COALESCE_FRACTION / 2.
        first_renewal = ttl * RENEW_FRACTION
        expiring_ttl = first_renewal / (1 - COALESCE_FRACTION / 2)
        expiring = locks.lock(
            "window:expiring",
            ttl=expiring_ttl,
            renew=False,
            on_lost=lambda _lock: lost_at.append(time.monotonic()),
        )
        assert renewed.acquire(blocking=False)
        acquired = time.monotonic()
        assert expiring.acquire(blocking=False)
        deadline = time.monotonic() + 2
        while not lost_at and time.monotonic() < deadline:
            time.sleep(0.005)
        assert lost_at, "on_lost never fired"
        assert lost_at[0] - acquired >= expiring_ttl
        renewed.release()
