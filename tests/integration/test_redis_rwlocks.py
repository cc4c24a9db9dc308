"""Redis read-write and fair locks where the conformance suite cannot look: a release wakes
exactly the waiters whose turn it made (and no other), a blocked waiter is woken by a release
in another client (not by its timer), every key of a name in one Cluster slot, idle records
collected while fences still never go back, cancelled waiters leaving nothing behind."""

from __future__ import annotations

import asyncio
import os
import secrets
import threading
import time
from typing import Any

import pytest
import redis
from redis.crc import key_slot

import tenure
from tenure._sync.store import Store
from tenure._types import Busy, Grant, Holder, Kind, LeaseSpec, Mode
from tenure.backends.redis._rwlocks import QueueKeys, queue_keys
from tests.integration.waking import until, wake_bound
from tests.servers.redis import RedisCluster

HOSTILE = ["{", "}", "{}", "{a}", "a{b}c", "}{", "sp ace", "new\nline", "ünï ✓", "é" * 500]
HOLDER = Holder("test", os.getpid(), "main")


def store(locks: tenure.Locks) -> Store:
    backend = locks.backend
    assert isinstance(backend, Store)
    return backend


def take(
    locks: tenure.Locks, name: str, token: str, mode: str, queue_ttl: float = 30.0
) -> Grant | Busy:
    spec = LeaseSpec(Kind.RWLOCK, mode=Mode(mode), queue_ttl=queue_ttl)
    return store(locks).acquire(name, spec, token, 30.0, HOLDER)


def woken(client: Any, keys: QueueKeys, tokens: list[str]) -> list[str]:
    """The tokens whose wake list holds an item, emptying them."""
    found = [token for token in tokens if client.lpop(keys.wake(token)) is not None]
    return found


def blocked(ports: list[int], client_name: str) -> bool:
    """Whether a connection named ``client_name`` is blocked (BLPOP) on any of the nodes:
    other tests' waiters on the same servers (a parallel worker's) do not count."""
    for port in ports:
        client = redis.Redis(port=port)
        try:
            if any(entry.get("name") == client_name and "b" in entry.get("flags", "")
                   for entry in client.client_list()):
                return True
        finally:
            client.close()
    return False


def fair_wake_latency(url: str, ports: list[int], name: str) -> float:
    """Seconds from a fair lock's release in one client to a waiter's acquire returning in
    another, the waiter blocked on the server (BLPOP) when the release comes."""
    client_name = f"waiter-{secrets.token_hex(6)}"
    with tenure.connect(url) as holders, tenure.connect(url, client_name=client_name) as waiters:
        holder = holders.lock(name, fair=True, ttl=30)
        assert holder.acquire(blocking=False)
        entered: list[float] = []

        def wait() -> None:
            other = waiters.lock(name, fair=True, ttl=30)
            assert other.acquire(timeout=10)
            entered.append(time.monotonic())
            other.release()

        thread = threading.Thread(target=wait)
        thread.start()
        until(lambda: blocked(ports, client_name), "the waiter blocked on its wake list")
        released = time.monotonic()
        holder.release()
        thread.join(10)
        assert entered, "the waiter never got the lock"
        return entered[0] - released


async def cancelled_waiters_leave_nothing(url: str, name: str) -> None:
    """Acquires cancelled at varied points (before, during and after a round trip, blocked on
    their wake list) leave no lease and no place; a waiter cancelled while blocked leaves
    the queue at once, so the next in line is woken by the release."""
    async with tenure.connect_async(url) as locks:
        holder = locks.lock(name, fair=True, ttl=30)
        assert await holder.acquire()
        for attempt in range(12):
            side = locks.lock(name, fair=True, ttl=30) if attempt % 2 else (
                locks.rwlock(name, ttl=30).read())
            task = asyncio.create_task(side.acquire(timeout=10))
            await asyncio.sleep(attempt * 0.002)
            task.cancel()
            try:
                took = await task
            except asyncio.CancelledError:
                took = False
            assert not took
            info = await locks.inspect(name, kind="rwlock")
            assert info is not None and info.queued == 0 and len(info.leases) == 1, info
        # Cancelled while blocked: first in line, then gone; the one behind it is next.
        first = asyncio.create_task(locks.lock(name, fair=True, ttl=30).acquire(timeout=10))
        while (info := await locks.inspect(name, kind="rwlock")) is None or info.queued < 1:
            await asyncio.sleep(0.005)
        second_lock = locks.lock(name, fair=True, ttl=30)
        second = asyncio.create_task(second_lock.acquire(timeout=10))
        while (info := await locks.inspect(name, kind="rwlock")) is None or info.queued < 2:
            await asyncio.sleep(0.005)
        await asyncio.sleep(0.1)  # both blocked on their wake lists
        first.cancel()
        with pytest.raises(asyncio.CancelledError):
            await first
        info = await locks.inspect(name, kind="rwlock")
        assert info is not None and info.queued == 1
        released = time.monotonic()
        await holder.release()
        assert await second
        # Woken by the release, not by a timer (a lost wake-up would cost 0.05 s or more).
        assert time.monotonic() - released < wake_bound()
        await second_lock.release()


# ---- one master -----------------------------------------------------------------------------


@pytest.mark.redis
def test_a_release_wakes_exactly_the_waiters_whose_turn_came(
    redis_url: str, name: str
) -> None:
    client = redis.Redis.from_url(redis_url)
    keys = queue_keys("tenure", name)
    tokens = [secrets.token_hex(8) for _ in range(6)]
    writer, first, second, next_writer, late, last_writer = tokens
    with tenure.connect(redis_url) as locks:
        assert isinstance(take(locks, name, writer, "write"), Grant)
        modes = {first: "read", second: "read", next_writer: "write", late: "read",
                 last_writer: "write"}
        for token, mode in modes.items():  # in this arrival order
            assert isinstance(take(locks, name, token, mode), Busy)
        assert woken(client, keys, tokens) == []  # queueing wakes nobody
        # The writer goes: the two readers ahead of the next writer, and nobody else.
        assert store(locks).release(Kind.RWLOCK, name, writer)
        assert woken(client, keys, tokens) == [first, second]
        assert isinstance(take(locks, name, first, "read"), Grant)
        assert isinstance(take(locks, name, second, "read"), Grant)
        assert isinstance(take(locks, name, late, "read"), Busy)  # behind the next writer
        # One reader of two goes: the writer still waits for the other.
        assert store(locks).release(Kind.RWLOCK, name, first)
        assert woken(client, keys, tokens) == []
        assert store(locks).release(Kind.RWLOCK, name, second)
        assert woken(client, keys, tokens) == [next_writer]
        assert isinstance(take(locks, name, next_writer, "write"), Grant)
        # The writer's release: the reader behind it, up to the last writer.
        assert store(locks).release(Kind.RWLOCK, name, next_writer)
        assert woken(client, keys, tokens) == [late]
        # A waiter leaving from the head of the queue makes the next one's turn.
        assert store(locks).release(Kind.RWLOCK, name, late) is False
        assert woken(client, keys, tokens) == [last_writer]
        assert isinstance(take(locks, name, last_writer, "write"), Grant)
        assert store(locks).release(Kind.RWLOCK, name, last_writer)
        info = locks.inspect(name, kind="rwlock")
        assert info is not None and not info.held and info.queued == 0
    client.close()


@pytest.mark.redis
def test_a_wake_list_keeps_one_item(redis_url: str, name: str) -> None:
    client = redis.Redis.from_url(redis_url)
    keys = queue_keys("tenure", name)
    reader, waiter = secrets.token_hex(8), secrets.token_hex(8)
    with tenure.connect(redis_url) as locks:
        assert isinstance(take(locks, name, reader, "read"), Grant)
        assert isinstance(take(locks, name, waiter, "write"), Busy)
        assert store(locks).release(Kind.RWLOCK, name, reader)
        # Two breaks more (each wakes whoever's turn it is) before the waiter looks: one
        # wake-up is left for it, not three.
        assert store(locks).break_leases(Kind.RWLOCK, name) is False
        assert store(locks).break_leases(Kind.RWLOCK, name) is False
        assert client.llen(keys.wake(waiter)) == 1
        assert 0 < client.pttl(keys.wake(waiter)) <= 5000
        assert store(locks).release(Kind.RWLOCK, name, waiter) is False
    client.close()


@pytest.mark.redis
def test_a_release_in_another_client_wakes_a_blocked_waiter(redis_url: str, name: str) -> None:
    port = redis.Redis.from_url(redis_url).connection_pool.connection_kwargs["port"]
    # Left to its timer the waiter would wait 0.05 s at least (its BLPOP's shortest).
    assert fair_wake_latency(redis_url, [port], name) < wake_bound()


@pytest.mark.redis
def test_idle_records_are_collected_and_fences_never_go_back(redis_url: str, name: str) -> None:
    client = redis.Redis.from_url(redis_url)
    keys = queue_keys("tenure", name)
    with tenure.connect(redis_url, gc_after=0.3) as locks:
        rw = locks.rwlock(name, ttl=5)
        reader = rw.read()
        assert reader.acquire(blocking=False)
        first = reader.fence
        assert first is not None
        # Every key expires: the leases a second after the last lease, the record gc_after
        # after that.
        assert 0 < client.pttl(keys.leases) <= 6000
        assert 0 < client.pttl(keys.expiries) <= 6000
        assert 5000 < client.pttl(keys.meta) <= 5300
        # A waiting writer's place: the queue keys a second after its place's end.
        assert isinstance(take(locks, name, "waiter", "write", queue_ttl=2.0), Busy)
        assert 2000 < client.pttl(keys.queue) <= 3000 and 2000 < client.pttl(keys.places) <= 3000
        assert store(locks).release(Kind.RWLOCK, name, "waiter") is False
        assert not client.exists(keys.queue, keys.writes, keys.places)
        reader.release()
        assert not client.exists(keys.leases, keys.expiries)
        assert 0 < client.pttl(keys.meta) <= 300
        until(lambda: not client.exists(keys.meta), "the idle record was collected", timeout=3)
        assert locks.inspect(name, kind="rwlock") is None
        writer = rw.write()
        assert writer.acquire(blocking=False)
        assert writer.fence is not None and writer.fence > first
        second = writer.fence
        writer.release()
        # Lost data (a restart without persistence): the next fence is still greater.
        client.delete(*keys[:6])
        again = rw.write()
        assert again.acquire(blocking=False)
        assert again.fence is not None and again.fence > second
        again.release()
    with tenure.connect(redis_url, gc_after="none") as locks:
        kept = locks.rwlock(name, ttl=5).read()
        assert kept.acquire(blocking=False)
        assert client.pttl(keys.meta) == -1  # kept forever
        kept.release()
    client.close()


@pytest.mark.redis
async def test_cancelled_waiters_leave_nothing(redis_url: str, name: str) -> None:
    await cancelled_waiters_leave_nothing(redis_url, name)


# ---- Redis Cluster --------------------------------------------------------------------------


@pytest.mark.redis_cluster
def test_every_key_of_a_rwlock_shares_one_slot(
    redis_cluster: RedisCluster, redis_cluster_url: str
) -> None:
    prefix = f"rw-slots:{secrets.token_hex(4)}:"
    names = [f"{prefix}{index}" for index in range(20)] + [prefix + name for name in HOSTILE]
    for name in names:
        keys = queue_keys("tenure", name)
        assert len({key_slot(key.encode()) for key in (*keys, keys.wake("t"))}) == 1, name
        assert not keys.meta.startswith(("tenure:{", "tenure:sem:"))  # apart from the others
    with tenure.connect(redis_cluster_url) as locks:
        writers = [locks.rwlock(name, ttl=30).write() for name in names]
        for writer in writers:
            assert writer.acquire(blocking=False), writer.name
        listed = locks.list_locks(prefix)
        assert sorted(info.name for info in listed if info.kind == "rwlock") == sorted(names)
        for writer in writers:
            writer.release()


@pytest.mark.redis_cluster
def test_renewals_of_leases_on_every_master(
    redis_cluster: RedisCluster, redis_cluster_url: str
) -> None:
    prefix = f"rw-renew:{secrets.token_hex(4)}:"
    names = [f"{prefix}{index}" for index in range(12)]
    slots = {key_slot(queue_keys("tenure", name).meta.encode()) for name in names}
    assert len(slots) > 1
    with tenure.connect(redis_cluster_url) as locks:
        readers = [locks.rwlock(name, ttl=0.6, renew=True).read() for name in names]
        for reader in readers:
            assert reader.acquire(blocking=False)
        time.sleep(1.5)  # several renewals, each batch split by slot
        for reader in readers:
            reader.check()
            assert reader.owned()
            reader.release()


@pytest.mark.redis_cluster
def test_a_cluster_waiter_is_woken_not_polling(
    redis_cluster: RedisCluster, redis_cluster_url: str, name: str
) -> None:
    ports = [node.port for node in redis_cluster.nodes]
    assert fair_wake_latency(redis_cluster_url, ports, name) < wake_bound()


@pytest.mark.redis_cluster
async def test_cancelled_cluster_waiters_leave_nothing(
    redis_cluster: RedisCluster, redis_cluster_url: str, name: str
) -> None:
    await cancelled_waiters_leave_nothing(redis_cluster_url, name)


@pytest.mark.redis
def test_a_places_waiter_is_kept_beside_it_and_an_older_place_lists_an_unknown_one(
    redis_url: str, name: str
) -> None:
    client = redis.Redis.from_url(redis_url)
    keys = queue_keys("tenure", name)
    waiters_key = keys.meta + ":waiters"
    holder, first, second = (secrets.token_hex(8) for _ in range(3))
    with tenure.connect(redis_url) as locks:
        assert isinstance(take(locks, name, holder, "write"), Grant)
        assert isinstance(take(locks, name, first, "write"), Busy)
        assert isinstance(take(locks, name, second, "read"), Busy)
        # It lives as long as the places it describes.
        assert client.pttl(waiters_key) > 0
        # An older tenure's place has no record: listed, its waiter unknown.
        client.hdel(waiters_key, first)
        info = locks.inspect(name, kind="rwlock")
        assert info is not None
        assert [(w.holder, w.mode) for w in info.waiters] == [(None, None), (HOLDER, "read")]
        assert store(locks).release(Kind.RWLOCK, name, second) is False
        assert client.hkeys(waiters_key) == []
        assert store(locks).release(Kind.RWLOCK, name, first) is False
        assert store(locks).release(Kind.RWLOCK, name, holder) is True
    client.close()
