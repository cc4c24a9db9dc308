"""The watchdog's batching window: renewals due within a short window of each other share one
``extend_many`` round trip, and stay together afterwards; a lease that is not renewed is
never judged lost before its end because a batch went out early; a capped lease keeps its
schedule; nothing is pulled early towards another backend, or by nothing due."""

from __future__ import annotations

import time
from collections.abc import Sequence
from types import SimpleNamespace
from typing import Any

import tenure
from tenure._sync.renewer import COALESCE_FRACTION, RENEW_FRACTION, _batch
from tenure._types import Renewal
from tenure.backends.memory._server import MemoryServer
from tenure.backends.memory._sync import MemoryBackend
from tests.timing import scaled


class Counting(MemoryBackend):
    def __init__(self, store: MemoryServer) -> None:
        super().__init__(store)
        self.batches: list[int] = []

    def extend_many(self, renewals: Sequence[Renewal]) -> list[bool]:
        self.batches.append(len(renewals))
        return super().extend_many(renewals)


def test_leases_taken_a_few_milliseconds_apart_renew_in_one_round_trip() -> None:
    # Stretched by the load: on a loaded machine four acquires 6 ms apart took longer than
    # the window (ttl / 12) that lets their renewals share a round trip.
    ttl = scaled(0.6)
    gap = ttl * COALESCE_FRACTION / 8  # all four fall inside one window
    backend = Counting(MemoryServer())
    with tenure.Locks(backend) as locks:
        held = [locks.lock(f"batch:{index}", ttl=ttl, renew=True) for index in range(4)]
        for lock in held:
            assert lock.acquire(blocking=False)
            time.sleep(gap)
        time.sleep(ttl * 2)  # several renewal rounds
        batches = list(backend.batches)  # before releasing: a batch may leave meanwhile
        for lock in held:
            lock.check()
            lock.release()
    assert len(batches) >= 4
    assert set(batches) == {4}, batches


def test_a_lease_that_is_not_renewed_is_not_lost_early_by_a_batch() -> None:
    backend = Counting(MemoryServer())
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


def _hold(backend: object, next_due: float, *, renew: bool = True,
          max_renewals: int | None = None, renewals: int = 0, ttl: float = 1.2) -> Any:
    lease = SimpleNamespace(
        renew=renew, max_renewals=max_renewals, store=backend,
        renewing_store=backend,  # batched by the store renewing it
    )
    # A backend without sessions: a grant vouches for the whole ttl (``Hold.trusted_for``).
    return SimpleNamespace(
        lease=lease, next_due=next_due, ttl=ttl, trusted_for=ttl, renewals=renewals
    )


def test_batch_pulls_only_uncapped_renewals_of_a_backend_something_is_due_on() -> None:
    one, other = object(), object()
    window = 1.2 * COALESCE_FRACTION
    due = _hold(one, 10.0)
    soon = _hold(one, 10.0 + window / 2)
    later = _hold(one, 10.0 + window * 2)
    capped = _hold(one, 10.0 + window / 2, max_renewals=5)
    ending = _hold(one, 10.0 + window / 2, renew=False)  # judged at its lease's end
    elsewhere = _hold(other, 10.0 + window / 2)
    holds = [due, soon, later, capped, ending, elsewhere]
    assert _batch(holds, 10.0) == [due, soon]
    # Nothing is pulled by nothing due, nor by a lease ending without a renewal.
    assert _batch(holds, 9.0) == []
    ended = _hold(one, 10.0, renew=False)
    assert _batch([ended, soon], 10.0) == [ended]
    # A capped renewal that is due goes, and opens the window for the others.
    capped_due = _hold(one, 10.0, max_renewals=5, renewals=1)
    assert _batch([capped_due, soon], 10.0) == [capped_due, soon]
    # Its cap reached, a due hold is a lease ending: it opens no window.
    spent = _hold(one, 10.0, max_renewals=2, renewals=2)
    assert _batch([spent, soon], 10.0) == [spent]
