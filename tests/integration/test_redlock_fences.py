"""What a Redlock fence promises (docs/backends/redlock.md, "Fencing"), on real nodes:
the largest counter of the granting majority, floored on that majority, so every later
grant gets a greater fence even when the nodes' counters have drifted apart; and the case
it does not cover (a majority that lost its data), shown rather than hidden."""

from __future__ import annotations

import pathlib

import pytest
import redis

import tenure
from tenure.backends.redis._scripts import lock_keys
from tests.integration.processes import run_counter
from tests.servers.redis import RedisServer
from tests.servers.redlock import RedlockNodes

pytestmark = pytest.mark.redlock


def counter(server: RedisServer, name: str) -> int:
    client = redis.Redis(port=server.port)
    try:
        return int(client.hget(lock_keys("tenure", name).meta, "fence") or 0)
    finally:
        client.close()


def bump(server: RedisServer, name: str, by: int) -> None:
    """What failed attempts that reached only this node leave behind."""
    client = redis.Redis(port=server.port)
    try:
        client.hincrby(lock_keys("tenure", name).meta, "fence", by)
    finally:
        client.close()


def acquire_fence(locks: tenure.Locks, name: str) -> int:
    lock = locks.lock(name, ttl=5)
    assert lock.acquire(timeout=2)
    fence = lock.fence
    lock.release()
    assert fence is not None
    return fence


def test_fence_is_the_majority_maximum_and_floors_the_others(
    redlock_five: RedlockNodes,
) -> None:
    servers = redlock_five.servers
    with tenure.connect(redlock_five.url) as locks:
        # A new name's counters start at each node's clock (microseconds): the largest of
        # them is the fence, and floors the others.
        first = acquire_fence(locks, "drift")
        assert [counter(s, "drift") for s in servers] == [first] * 5
        bump(servers[3], "drift", 40)  # node 3 now at first + 40, the others at first
        assert acquire_fence(locks, "drift") == first + 41
        assert [counter(s, "drift") for s in servers] == [first + 41] * 5
        assert acquire_fence(locks, "drift") == first + 42


def test_fences_increase_across_changing_majorities(redlock_five: RedlockNodes) -> None:
    """Each grant's majority differs (two nodes held by someone else, a different two each
    time, their counters pushed on by those holders) and the counters differ: the fence
    still increases, because any two majorities share a node whose counter was floored."""
    servers = redlock_five.servers
    bump(servers[0], "rotating", 10)
    bump(servers[1], "rotating", 3)
    singles = [tenure.connect(server.url) for server in servers]
    seen: list[int] = []
    try:
        with tenure.connect(redlock_five.url) as locks:
            for busy in [(0, 1), (2, 3), (3, 4), (0, 4), (1, 2), (0, 2)]:
                others = [singles[index].lock("rotating", ttl=30) for index in busy]
                assert all(lock.acquire(blocking=False) for lock in others)
                seen.append(acquire_fence(locks, "rotating"))
                for lock in others:
                    lock.release()
    finally:
        for client in singles:
            client.close()
    assert seen == sorted(set(seen)), seen


def test_a_majority_that_lost_its_data_still_issues_greater_fences(
    redlock_five: RedlockNodes,
) -> None:
    """Restarted without persistence, three of five nodes forget their counters; a majority
    made of just those three starts them again from their clocks (a name without a record
    does: gc_after removes records too), above every fence of the name so far. Before
    records could expire, the counters started from 1 again, and fences went back."""
    servers = redlock_five.servers
    with tenure.connect(redlock_five.url) as locks:
        for _ in range(5):
            before = acquire_fence(locks, "amnesia")
        for index in (0, 1, 2):
            servers[index].restart()  # no persistence: every key is gone
        for index in (3, 4):
            servers[index].stop()
        after = acquire_fence(locks, "amnesia")
    assert after > before > 5  # the first fence was a node's clock in microseconds


def test_processes_never_lose_an_update_and_fences_never_repeat(
    redlock_url: str, tmp_path: pathlib.Path
) -> None:
    total, fences = run_counter(redlock_url, "redlock:counter", tmp_path, processes=4, rounds=25)
    assert total == 100
    assert len(fences) == 100 and len(set(fences)) == 100
