"""Redlock against five real redis-server nodes: a minority down is tolerated, a majority
down fails cleanly, a quorum refusing is a timeout, a failed attempt leaves nothing behind."""

from __future__ import annotations

import asyncio
import time

import pytest
import redis

import tenure
from tenure._errors import BackendError
from tenure.backends.redis._scripts import lock_keys
from tests.servers.redis import RedisServer
from tests.servers.redlock import RedlockNodes

pytestmark = pytest.mark.redlock


def lease_on(server: RedisServer, name: str) -> bytes | None:
    client = redis.Redis(port=server.port)
    try:
        token: bytes | None = client.hget(lock_keys("tenure", name).lease, "token")
        return token
    finally:
        client.close()


def test_two_of_five_nodes_stopped_the_lock_still_works(redlock_five: RedlockNodes) -> None:
    redlock_five.servers[0].stop()
    redlock_five.servers[3].stop()
    with tenure.connect(redlock_five.url) as locks:
        lock = locks.lock("minority-down", ttl=1.0, renew=True)
        assert lock.acquire(timeout=2)
        first = lock.fence
        assert first is not None
        assert locks.lock("minority-down", ttl=5).acquire(timeout=0.3) is False
        time.sleep(1.5)  # several renewals through the three live nodes
        assert lock.owned() and not lock.lost.is_set()
        lock.extend(2.0)
        info = locks.inspect("minority-down")
        assert info is not None and info.held and info.fence == first
        lock.release()
        other = locks.lock("minority-down", ttl=5)
        assert other.acquire(timeout=1)
        assert other.fence is not None and other.fence > first
        other.release()


async def test_two_of_five_nodes_stopped_asyncio(redlock_five: RedlockNodes) -> None:
    redlock_five.servers[1].stop()
    redlock_five.servers[4].stop()
    async with tenure.connect_async(redlock_five.url) as locks:
        lock = locks.lock("minority-down-async", ttl=5, timeout=2)
        async with lock:
            assert await lock.owned()
            assert await locks.lock("minority-down-async", ttl=5).acquire(blocking=False) is False


@pytest.mark.parametrize("flavour", ["threads", "asyncio"])
def test_three_of_five_nodes_stopped_acquire_fails_cleanly(
    redlock_five: RedlockNodes, flavour: str
) -> None:
    """A majority unreachable is a BackendError (the lock can't be judged), raised at once
    rather than after the caller's timeout, and nothing is left on the live nodes."""
    for index in (0, 2, 4):
        redlock_five.servers[index].stop()
    timeout = 3.0
    started = time.monotonic()
    if flavour == "threads":
        with tenure.connect(redlock_five.url) as locks, pytest.raises(BackendError) as caught:
            locks.lock("majority-down", ttl=5).acquire(timeout=timeout)
    else:
        async def attempt() -> None:
            async with tenure.connect_async(redlock_five.url) as locks:
                await locks.lock("majority-down", ttl=5).acquire(timeout=timeout)

        with pytest.raises(BackendError) as caught:
            asyncio.run(attempt())
    assert time.monotonic() - started < timeout
    assert "2 of 5 nodes answered" in str(caught.value)
    assert isinstance(caught.value.__cause__, redis.ConnectionError)
    for index in (1, 3):
        assert lease_on(redlock_five.servers[index], "majority-down") is None


def test_a_refusing_quorum_is_a_timeout_not_an_error(redlock_five: RedlockNodes) -> None:
    with tenure.connect(redlock_five.url) as locks:
        holder = locks.lock("refused", ttl=10)
        assert holder.acquire(timeout=1)
        waiter = locks.lock("refused", ttl=10)
        assert waiter.acquire(timeout=0.3) is False
        with pytest.raises(tenure.LockTimeout), locks.lock("refused", ttl=10, timeout=0.2):
            pass
        holder.release()


def test_a_minority_held_elsewhere_does_not_block_a_majority(
    redlock_five: RedlockNodes,
) -> None:
    """Single-node locks on two nodes (another client's partial state): three free nodes
    still grant. On three nodes: refused, and the attempt leaves no lease on the others."""
    servers = redlock_five.servers
    singles = [tenure.connect(server.url) for server in servers]
    try:
        taken = [singles[i].lock("partial", ttl=30) for i in (0, 1)]
        assert all(lock.acquire(blocking=False) for lock in taken)
        with tenure.connect(redlock_five.url) as locks:
            lock = locks.lock("partial", ttl=5)
            assert lock.acquire(blocking=False)
            lock.release()
            third = singles[2].lock("partial", ttl=30)
            assert third.acquire(blocking=False)
            assert locks.lock("partial", ttl=5).acquire(timeout=0.3) is False
        for server in servers[3:]:
            assert lease_on(server, "partial") is None
        for held in [*taken, third]:
            held.release()
    finally:
        for client in singles:
            client.close()


def test_busy_answers_bound_the_back_off_by_the_majority_lease(
    redlock_five: RedlockNodes,
) -> None:
    """The waiter gets the lock soon after the majority holder's lease ends (no release):
    its back-off is bounded by that lease, not by a fixed sleep."""
    with tenure.connect(redlock_five.url) as locks:
        holder = locks.lock("expiring", ttl=0.5)
        assert holder.acquire(timeout=1)
        waiter = locks.lock("expiring", ttl=5)
        assert waiter.acquire(timeout=5)
        assert waiter.fence is not None and holder.fence is not None
        assert waiter.fence > holder.fence
        waiter.release()
