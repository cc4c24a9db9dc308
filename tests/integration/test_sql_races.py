"""Exactly one winner when many threads (or tasks) race for a lock, and exactly ``limit``
when they race for a semaphore's permits, on real MariaDB and PostgreSQL: the server
decides, never the client. On PostgreSQL a semaphore's racers mostly lose the one-statement
grant's fence check and decide again under the name's row lock, so both paths are raced."""

from __future__ import annotations

import asyncio
import itertools
import logging
import threading
import uuid
from collections.abc import Callable
from typing import Any

import pytest

import tenure
from tenure._types import Grant, Kind, LeaseSpec
from tests.integration.sql_support import SQL_BACKENDS, raw, url_fixture

pytestmark = pytest.mark.slow

THREADS = 32
TTL = 3600
"""Every lease of a race outlasts the whole race: the fresh-name races keep their winners'
leases to the end and then list them, and a loaded run took over 60 s for the 300 rounds,
so the earliest rounds' permits had expired and read as never granted."""


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
    fences of each round, sorted."""
    winners = [0] * len(names)
    won_fences: list[list[int]] = [[] for _ in names]
    counted = threading.Lock()
    barrier = threading.Barrier(THREADS)
    failures: list[BaseException] = []

    def racer() -> None:
        try:
            for round_, name in enumerate(names):
                lock = locks.lock(name, ttl=TTL) if make is None else make(name)
                barrier.wait(timeout=60)
                won = lock.acquire(blocking=False)
                if won:
                    with counted:
                        winners[round_] += 1
                        won_fences[round_].append(lock.fence)
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
    if fences is not None:
        fences.extend(sorted(round_fences) for round_fences in won_fences)
    return winners


def explain(url: str, names: list[str], fences: list[list[int]]) -> str:
    """What a failed semaphore race leaves to read: for each wrong round (at most five), the
    fences its winners were told and the semaphore's rows as the server holds them."""
    lines = [f"{len(names)} round(s) granted another number of permits than the limit"]
    for name, won in list(zip(names, fences, strict=True))[:5]:
        lines.append(f"{name}: winners' fences {won}")
        if url.startswith("postgres"):
            rows = raw(url, "SELECT * FROM tenure_locks_permits WHERE name = %s ORDER BY fence",
                       (name,))
        else:
            rows = raw(url, "SELECT slot, fence, permits, token, expires_at, acquired_at, "
                            "host, pid, thread, weight FROM `tenure_locks_slots` "
                            "WHERE name = %s ORDER BY slot", (name.encode(),))
        lines.extend(f"    {row}" for row in rows)
    return "\n".join(lines)


def test_32_threads_race_for_1000_fresh_locks(sql_url: str) -> None:
    """The insert path: every round's name is new, so all 32 race to create its row."""
    base = uuid.uuid4().hex
    names = [f"race:{base}:{round_}" for round_ in range(1000)]
    with tenure.connect(sql_url, pool_size=THREADS) as locks:
        fences: list[list[int]] = []
        winners = race(locks, names, release=False, fences=fences)
        assert winners == [1] * len(names)
        stored = {info.name: info.fence for info in locks.list_locks(f"race:{base}:")}
    # One grant per name: its row holds the fence its one winner got.
    assert stored == {name: won[0] for name, won in zip(names, fences, strict=True)}


def test_32_threads_race_for_one_released_lock(sql_url: str) -> None:
    """The update path: one row, freed by the last winner, taken again by exactly one."""
    name = f"race:{uuid.uuid4().hex}"
    rounds = 300
    with tenure.connect(sql_url, pool_size=THREADS) as locks:
        fences: list[list[int]] = []
        winners = race(locks, [name] * rounds, release=True, fences=fences)
        assert winners == [1] * rounds
        info = locks.inspect(name)
    # Every round's grant took a fence above the last, and the row holds the last.
    order = [won[0] for won in fences]
    assert all(later > earlier for earlier, later in itertools.pairwise(order))
    assert info is not None and info.fence == order[-1] and not info.held


def test_32_tasks_race_under_asyncio(sql_url: str) -> None:
    base = uuid.uuid4().hex
    rounds = 300

    async def main() -> list[int]:
        winners = []
        async with tenure.connect_async(sql_url, pool_size=THREADS) as locks:
            for round_ in range(rounds):
                handles = [locks.lock(f"race:{base}:{round_}", ttl=TTL) for _ in range(THREADS)]
                results = await asyncio.gather(*(h.acquire(blocking=False) for h in handles))
                winners.append(sum(results))
        return winners

    assert asyncio.run(main()) == [1] * rounds


def test_32_threads_race_for_300_fresh_semaphores(sql_url: str) -> None:
    """Every round's semaphore is new: exactly LIMIT of the 32 get a permit, each its own
    fence, and the record holds the last of them."""
    limit = 3
    base = uuid.uuid4().hex
    names = [f"race:{base}:{round_}" for round_ in range(300)]
    with tenure.connect(sql_url, pool_size=THREADS) as locks:
        fences: list[list[int]] = []
        winners = race(locks, names, release=False, fences=fences,
                       make=lambda name: locks.semaphore(name, limit=limit, ttl=TTL))
        wrong = [round_ for round_, won in enumerate(winners) if won != limit]
        assert not wrong, explain(sql_url, [names[round_] for round_ in wrong],
                                  [fences[round_] for round_ in wrong])
        infos = {info.name: info for info in locks.list_locks(f"race:{base}:")
                 if info.kind == "semaphore"}
    assert len(infos) == len(names)
    for name, won in zip(names, fences, strict=True):
        assert len(set(won)) == limit
        assert sorted(lease.fence for lease in infos[name].leases) == won
        assert infos[name].fence == won[-1]


def test_32_threads_race_for_one_semaphore_released(
    sql_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """One semaphore whose LIMIT permits are released after every round: each round exactly
    LIMIT of the 32 get one, and every grant took its own fence."""
    # A refused try of a queued semaphore takes a place and leaves it before answering; a
    # leave that fails is logged at INFO (the place then lapses in its queue lease): kept,
    # for a failure to show it.
    caplog.set_level(logging.INFO, "tenure")
    limit = 3
    rounds = 200
    name = f"race:{uuid.uuid4().hex}"
    with tenure.connect(sql_url, pool_size=THREADS) as locks:
        fences: list[list[int]] = []
        winners = race(locks, [name] * rounds, release=True, fences=fences,
                       make=lambda name: locks.semaphore(name, limit=limit, ttl=TTL))
        # CI once (ci26, MariaDB, a loaded run) saw round 0 grant 3 and every later round
        # none: what the name's rows (record, permits, places) hold then is the evidence.
        wrong = [round_ for round_, won in enumerate(winners) if won != limit]
        assert not wrong, (
            f"rounds {wrong[:10]} of {rounds} granted {[winners[r] for r in wrong[:10]]}; "
            + explain(sql_url, [name], [fences[wrong[0]]])
        )
        info = locks.inspect(name, kind="semaphore")
    # Every grant took its own fence, above every fence of the rounds before.
    order = [fence for won in fences for fence in won]
    assert all(later > earlier for earlier, later in itertools.pairwise(order))
    assert info is not None and info.fence == order[-1] and not info.leases


def test_a_retried_permit_acquire_finds_its_own_permit(sql_url: str) -> None:
    """A retry with the same token (its first reply lost) gets its own permit back, fence
    and all, even when a permit granted before it was freed meanwhile (on MySQL: a free slot
    ahead of its own); and a lowered-then-restored limit never reuses a fence."""
    name = f"retry:{uuid.uuid4().hex}"
    holder = tenure.Holder("host", 1, "thread")
    with tenure.connect(sql_url) as locks:
        store = locks.store
        first = store.acquire(name, LeaseSpec(Kind.SEMAPHORE, limit=3), "a" * 32, 30.0, holder)
        second = store.acquire(name, LeaseSpec(Kind.SEMAPHORE, limit=3), "b" * 32, 30.0, holder)
        assert isinstance(first, Grant) and isinstance(second, Grant)
        assert store.release(Kind.SEMAPHORE, name, "a" * 32)
        again = store.acquire(name, LeaseSpec(Kind.SEMAPHORE, limit=3), "b" * 32, 30.0, holder)
        assert again == second
        info = locks.inspect(name, kind="semaphore")
        assert info is not None and [lease.fence for lease in info.leases] == [second.fence]
        assert store.release(Kind.SEMAPHORE, name, "b" * 32)
        lowered = store.acquire(name, LeaseSpec(Kind.SEMAPHORE, limit=1), "c" * 32, 30.0, holder)
        assert isinstance(lowered, Grant) and lowered.fence > second.fence
        assert store.release(Kind.SEMAPHORE, name, "c" * 32)
        restored = store.acquire(name, LeaseSpec(Kind.SEMAPHORE, limit=3), "d" * 32, 30.0, holder)
        assert isinstance(restored, Grant) and restored.fence > lowered.fence
