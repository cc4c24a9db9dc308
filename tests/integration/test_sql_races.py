"""Exactly one winner when many threads (or tasks) race for a lock, and exactly ``limit``
when they race for a semaphore's permits, on real MariaDB and PostgreSQL: the server
decides, never the client. On PostgreSQL a semaphore's racers mostly lose the one-statement
grant's fence check and decide again under the name's row lock, so both paths are raced."""

from __future__ import annotations

import asyncio
import itertools
import threading
import uuid
from collections.abc import Callable
from typing import Any

import pytest

import tenure
from tenure._types import Grant
from tests.integration.sql_support import SQL_BACKENDS, url_fixture

pytestmark = pytest.mark.slow

THREADS = 32


@pytest.fixture(params=SQL_BACKENDS)
def sql_url(request: pytest.FixtureRequest) -> str:
    return url_fixture(request)


def race(
    locks: tenure.Locks,
    names: list[str],
    *,
    release: bool,
    make: Callable[[str], Any] | None = None,
    fences: list[list[int]] | None = None,
) -> list[int]:
    """THREADS threads race, round after round, for ``names[round]`` (a lock, or what
    ``make`` returns for the name); each round starts when all threads are at the barrier.
    Returns the number of winners of each round; ``fences``, if given, gets the winners'
    fences of each round."""
    if fences is not None:
        fences[:] = [[] for _ in names]
    winners = [0] * len(names)
    counted = threading.Lock()
    barrier = threading.Barrier(THREADS)
    failures: list[BaseException] = []

    def racer() -> None:
        try:
            for round_, name in enumerate(names):
                lock = locks.lock(name, ttl=60) if make is None else make(name)
                barrier.wait(timeout=60)
                won = lock.acquire(blocking=False)
                if won:
                    with counted:
                        winners[round_] += 1
                        if fences is not None:
                            fences[round_].append(lock.fence)
                barrier.wait(timeout=60)  # every attempt of this round is in before release
                if won and release:
                    lock.release()
        except BaseException as exc:
            failures.append(exc)
            barrier.abort()

    threads = [threading.Thread(target=racer) for _ in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(240)
    assert not failures, failures[0]
    return winners


def test_32_threads_race_for_1000_fresh_locks(sql_url: str) -> None:
    """The insert path: every round's name is new, so all 32 race to create its row."""
    base = uuid.uuid4().hex
    names = [f"race:{base}:{round_}" for round_ in range(1000)]
    won: list[list[int]] = []
    with tenure.connect(sql_url, pool_size=THREADS) as locks:
        winners = race(locks, names, release=False, fences=won)
        assert winners == [1] * len(names)
        stored = {info.name: info.fence for info in locks.list_locks(f"race:{base}:")}
        counting = locks.capabilities.fences_count_per_name
    # Every row holds its one winner's fence: no loser bumped it (a counting backend's
    # first fence is 1).
    assert stored == {name: fence for name, (fence,) in zip(names, won, strict=True)}
    if counting:
        assert set(stored.values()) == {1}


def test_32_threads_race_for_one_released_lock(sql_url: str) -> None:
    """The update path: one row, freed by the last winner, taken again by exactly one."""
    name = f"race:{uuid.uuid4().hex}"
    rounds = 300
    won: list[list[int]] = []
    with tenure.connect(sql_url, pool_size=THREADS) as locks:
        winners = race(locks, [name] * rounds, release=True, fences=won)
        assert winners == [1] * rounds
        info = locks.inspect(name)
        counting = locks.capabilities.fences_count_per_name
    # Every grant took a greater fence, and losers took none: the row keeps the last one's.
    fences = [fence for (fence,) in won]
    assert all(a < b for a, b in itertools.pairwise(fences)), fences
    assert info is not None and info.fence == fences[-1] and not info.held
    if counting:
        assert info.fence == rounds


def test_32_tasks_race_under_asyncio(sql_url: str) -> None:
    base = uuid.uuid4().hex
    rounds = 300

    async def main() -> list[int]:
        winners = []
        async with tenure.connect_async(sql_url, pool_size=THREADS) as locks:
            for round_ in range(rounds):
                handles = [locks.lock(f"race:{base}:{round_}", ttl=60) for _ in range(THREADS)]
                results = await asyncio.gather(*(h.acquire(blocking=False) for h in handles))
                winners.append(sum(results))
        return winners

    assert asyncio.run(main()) == [1] * rounds


def test_32_threads_race_for_300_fresh_semaphores(sql_url: str) -> None:
    """Every round's semaphore is new: exactly LIMIT of the 32 get a permit, fences 1..LIMIT."""
    limit = 3
    base = uuid.uuid4().hex
    names = [f"race:{base}:{round_}" for round_ in range(300)]
    with tenure.connect(sql_url, pool_size=THREADS) as locks:
        winners = race(locks, names, release=False,
                       make=lambda name: locks.semaphore(name, limit=limit, ttl=60))
        assert winners == [limit] * len(names)
        infos = [info for info in locks.list_locks(f"race:{base}:") if info.kind == "semaphore"]
    assert len(infos) == len(names)
    for info in infos:  # every grant its own fence, the record holding the greatest
        fences = sorted(lease.fence for lease in info.leases)
        assert len(set(fences)) == limit and info.fence == fences[-1], (info, fences)
        if locks.capabilities.fences_count_per_name:
            assert fences == [1, 2, 3]


def test_32_threads_race_for_one_semaphore_released(sql_url: str) -> None:
    """One semaphore whose LIMIT permits are released after every round: each round exactly
    LIMIT of the 32 get one, and every grant took its own fence."""
    limit = 3
    rounds = 200
    name = f"race:{uuid.uuid4().hex}"
    won: list[list[int]] = []
    with tenure.connect(sql_url, pool_size=THREADS) as locks:
        winners = race(locks, [name] * rounds, release=True,
                       make=lambda name: locks.semaphore(name, limit=limit, ttl=60),
                       fences=won)
        assert winners == [limit] * rounds
        info = locks.inspect(name, kind="semaphore")
        counting = locks.capabilities.fences_count_per_name
    # Each round's fences all above the previous round's, all distinct; the record keeps
    # the greatest.
    for earlier, later in itertools.pairwise(won):
        assert max(earlier) < min(later) and len(set(later)) == limit, (earlier, later)
    assert info is not None and info.fence == max(won[-1]) and not info.leases
    if counting:
        assert info.fence == limit * rounds


def test_a_retried_permit_acquire_finds_its_own_permit(sql_url: str) -> None:
    """A retry with the same token (its first reply lost) gets its own permit back, fence
    and all, even when a permit granted before it was freed meanwhile (on MySQL: a free slot
    ahead of its own); and a lowered-then-restored limit never reuses a fence."""
    name = f"retry:{uuid.uuid4().hex}"
    holder = tenure.Holder("host", 1, "thread")
    with tenure.connect(sql_url) as locks:
        backend: Any = locks.backend
        first = backend.acquire_permit(name, "a" * 32, 30.0, holder, 3)
        second = backend.acquire_permit(name, "b" * 32, 30.0, holder, 3)
        assert isinstance(first, Grant) and isinstance(second, Grant)
        assert backend.release_permit(name, "a" * 32)
        again = backend.acquire_permit(name, "b" * 32, 30.0, holder, 3)
        assert again == second
        info = locks.inspect(name, kind="semaphore")
        assert info is not None and [lease.fence for lease in info.leases] == [second.fence]
        assert backend.release_permit(name, "b" * 32)
        lowered = backend.acquire_permit(name, "c" * 32, 30.0, holder, 1)
        assert isinstance(lowered, Grant) and lowered.fence > second.fence
        assert backend.release_permit(name, "c" * 32)
        restored = backend.acquire_permit(name, "d" * 32, 30.0, holder, 3)
        assert isinstance(restored, Grant) and restored.fence > lowered.fence
