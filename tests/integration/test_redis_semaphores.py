"""Redis semaphores where the conformance suite cannot look: every key of a semaphore in one
Cluster slot, a waiter woken by a release in another client (not by its timer), a refused
limit that writes nothing, idle records collected while fences still never go back,
renewals of permits spread over the Cluster's masters, permits written by an older tenure
(without a weight) taking one unit, and a dead waiter's place lapsing with its keys."""

from __future__ import annotations

import json
import secrets
import threading
import time
from typing import Any

import pytest
import redis
from redis.crc import key_slot

import tenure
from tenure._types import Grant, Holder, Kind, LeaseSpec
from tenure.backends.redis._semaphores import SemaphoreKeys, semaphore_keys
from tests.integration.waking import until, wake_bound
from tests.servers.redis import RedisCluster

HOSTILE = ["{", "}", "{}", "{a}", "a{b}c", "}{", "sp ace", "new\nline", "ünï ✓", "é" * 500]


def snapshot(client: Any, keys: SemaphoreKeys) -> tuple[Any, ...]:
    """Everything stored for a semaphore except expiries (which only move forward)."""
    return (
        client.hgetall(keys.meta),
        client.zrange(keys.permits, 0, -1, withscores=True),
        client.hgetall(keys.holders),
    )


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


def wake_latency(url: str, ports: list[int], name: str) -> float:
    """Seconds from a release in one client to a waiter's acquire returning in another, the
    waiter blocked on the server (BLPOP) when the release comes."""
    client_name = f"waiter-{secrets.token_hex(6)}"
    with tenure.connect(url) as holders, tenure.connect(url, client_name=client_name) as waiters:
        permit = holders.semaphore(name, limit=1, ttl=30)
        assert permit.acquire(blocking=False)
        woken: list[float] = []

        def wait() -> None:
            other = waiters.semaphore(name, limit=1, ttl=30)
            assert other.acquire(timeout=10)
            woken.append(time.monotonic())
            other.release()

        thread = threading.Thread(target=wait)
        thread.start()
        until(lambda: blocked(ports, client_name), "the waiter blocked on its wake list")
        released = time.monotonic()
        permit.release()
        thread.join(10)
        assert woken, "the waiter never got the permit"
        return woken[0] - released


# ---- one master -----------------------------------------------------------------------------


@pytest.mark.redis
def test_a_release_in_another_client_wakes_a_blocked_waiter(redis_url: str, name: str) -> None:
    port = redis.Redis.from_url(redis_url).connection_pool.connection_kwargs["port"]
    # Left to its timer the waiter would wait 0.25 s at least (the upper half of max_backoff).
    assert wake_latency(redis_url, [port], name) < wake_bound()


@pytest.mark.redis
def test_a_refused_limit_writes_nothing(redis_url: str, name: str) -> None:
    client = redis.Redis.from_url(redis_url)
    keys = semaphore_keys("tenure", name)
    with tenure.connect(redis_url) as locks:
        held = locks.semaphore(name, limit=2, ttl=30)
        assert held.acquire(blocking=False)
        first = held.fence
        before = snapshot(client, keys)
        with pytest.raises(tenure.ConfigurationError, match=r"2.*3|3.*2"):
            locks.semaphore(name, limit=3, ttl=30).acquire(blocking=False)
        assert snapshot(client, keys) == before
        held.release()
        # None live: the new limit applies, and the fence still grows.
        other = locks.semaphore(name, limit=3, ttl=30)
        assert other.acquire(blocking=False)
        assert other.fence is not None and first is not None and other.fence > first
        info = locks.inspect(name, kind="semaphore")
        assert info is not None and info.limit == 3
        other.release()
    client.close()


@pytest.mark.redis
def test_idle_records_are_collected_and_fences_never_go_back(redis_url: str, name: str) -> None:
    client = redis.Redis.from_url(redis_url)
    keys = semaphore_keys("tenure", name)
    with tenure.connect(redis_url, gc_after=0.3) as locks:
        permit = locks.semaphore(name, limit=2, ttl=5)
        assert permit.acquire(blocking=False)
        first = permit.fence
        assert first is not None
        # Every key expires: the permits a second after the last permit, the record gc_after
        # after that.
        assert 0 < client.pttl(keys.permits) <= 6000
        assert 0 < client.pttl(keys.holders) <= 6000
        assert 5000 < client.pttl(keys.meta) <= 5300
        permit.release()
        assert not client.exists(keys.permits, keys.holders)
        assert 0 < client.pttl(keys.meta) <= 300
        until(lambda: not client.exists(keys.meta), "the idle record was collected", timeout=3)
        assert locks.inspect(name, kind="semaphore") is None
        again = locks.semaphore(name, limit=2, ttl=5)
        assert again.acquire(blocking=False)
        assert again.fence is not None and again.fence > first
        second = again.fence
        # Lost data (a restart without persistence): the next fence is still greater.
        client.delete(*keys)
        third = locks.semaphore(name, limit=2, ttl=5)
        assert third.acquire(blocking=False)
        assert third.fence is not None and third.fence > second
    with tenure.connect(redis_url, gc_after="none") as locks:
        kept = locks.semaphore(name, limit=2, ttl=5)
        assert kept.acquire(blocking=False)
        assert client.pttl(keys.meta) == -1  # kept forever
        kept.release()
    client.close()


@pytest.mark.redis
def test_a_permit_an_older_tenure_wrote_takes_one_unit(redis_url: str, name: str) -> None:
    client = redis.Redis.from_url(redis_url)
    keys = semaphore_keys("tenure", name)
    seconds, micros = client.time()
    now_ms = seconds * 1000 + micros // 1000
    # The record an older tenure writes: no weight in the holder's record, no weights hash.
    client.hset(keys.meta, mapping={"name": name, "fence": 5, "limit": 4})
    client.zadd(keys.permits, {"old" * 8: now_ms + 30_000})
    client.hset(keys.holders, "old" * 8, json.dumps(["5", "elsewhere", 7, "main", now_ms]))
    with tenure.connect(redis_url) as locks:
        info = locks.inspect(name, kind="semaphore")
        assert info is not None and [lease.weight for lease in info.leases] == [1]
        assert info.units == 1
        heavy = locks.semaphore(name, limit=4, weight=3, ttl=10)
        assert heavy.acquire(blocking=False)  # 1 + 3 units fit the limit of 4
        assert heavy.fence is not None and heavy.fence > 5
        assert locks.semaphore(name, limit=4, ttl=10).acquire(blocking=False) is False
        info = locks.inspect(name, kind="semaphore")
        assert info is not None and sorted(lease.weight for lease in info.leases) == [1, 3]
        assert info.units == 4 and info.queued == 0
        heavy.release()
    client.close()


@pytest.mark.redis
def test_a_dead_waiters_place_lapses_with_its_keys(redis_url: str, name: str) -> None:
    client = redis.Redis.from_url(redis_url)
    keys = semaphore_keys("tenure", name)
    place_ttl = 1.0
    with tenure.connect(redis_url) as locks:
        holder = locks.semaphore(name, limit=4, weight=2, ttl=30)
        assert holder.acquire(blocking=False)
        # A waiter that queues once and is never heard of again (SIGKILLed while waiting).
        placed = time.monotonic()
        dead = locks.store.acquire(
            name, LeaseSpec(Kind.SEMAPHORE, limit=4, weight=3, queue_ttl=place_ttl),
            "dead" * 8, 10.0, Holder("gone", 1, "dead"),
        )
        assert not isinstance(dead, Grant)
        info = locks.inspect(name, kind="semaphore")
        assert info is not None and [waiter.weight for waiter in info.waiters] == [3]
        # Each key of the queue lives a second past the place's end, no longer.
        for key in (keys.queue, keys.places, keys.waiters):
            assert 0 < client.pttl(key) <= place_ttl * 1000 + 1000
        # Its place holds back a permit that fits beside the holder...
        light = locks.semaphore(name, limit=4, weight=2, ttl=30)
        refused = light.acquire(blocking=False) is False
        if time.monotonic() - placed < place_ttl:  # (a loaded machine may take longer)
            assert refused
        # ...and no longer than its place's ttl: then the light permit is granted.
        assert light.acquire(timeout=10)
        assert time.monotonic() - placed >= place_ttl - 0.01
        info = locks.inspect(name, kind="semaphore")
        assert info is not None and info.units == 4 and info.waiters == ()
        for permit in (holder, light):
            permit.release()
    client.close()


@pytest.mark.redis
def test_gc_after_is_validated() -> None:
    with pytest.raises(tenure.ConfigurationError, match="gc_after"):
        tenure.connect("redis://127.0.0.1:1/0?gc_after=-1")


# ---- Redis Cluster --------------------------------------------------------------------------


@pytest.mark.redis_cluster
def test_every_key_of_a_semaphore_shares_one_slot(
    redis_cluster: RedisCluster, redis_cluster_url: str
) -> None:
    prefix = f"sem-slots:{secrets.token_hex(4)}:"
    names = [f"{prefix}{index}" for index in range(20)] + [prefix + name for name in HOSTILE]
    for name in names:
        keys = semaphore_keys("tenure", name)
        assert len({key_slot(key.encode()) for key in (*keys, keys.wake_of("t" * 32))}) == 1
        assert not keys.meta.startswith("tenure:{")  # apart from the lock keys of the name
    with tenure.connect(redis_cluster_url) as locks:
        permits = [locks.semaphore(name, limit=1, ttl=30) for name in names]
        for permit in permits:
            assert permit.acquire(blocking=False), permit.name
        # A second permit queues (a place, its waiter) and leaves: in the same slot too.
        for permit in permits:
            assert locks.semaphore(permit.name, limit=1, ttl=30).acquire(timeout=0.01) is False
        listed = locks.list_locks(prefix)
        assert sorted(info.name for info in listed if info.kind == "semaphore") == sorted(names)
        for permit in permits:
            permit.release()


@pytest.mark.redis_cluster
def test_renewals_of_permits_on_every_master(
    redis_cluster: RedisCluster, redis_cluster_url: str
) -> None:
    prefix = f"sem-renew:{secrets.token_hex(4)}:"
    names = [f"{prefix}{index}" for index in range(12)]
    slots = {key_slot(semaphore_keys("tenure", name).meta.encode()) for name in names}
    assert len(slots) > 1
    with tenure.connect(redis_cluster_url) as locks:
        permits = [locks.semaphore(name, limit=2, ttl=0.6, renew=True) for name in names]
        for permit in permits:
            assert permit.acquire(blocking=False)
        time.sleep(1.5)  # several renewals, each batch split by slot
        for permit in permits:
            permit.check()
            assert permit.owned()
            permit.release()


@pytest.mark.redis_cluster
def test_a_cluster_waiter_is_woken_not_polling(
    redis_cluster: RedisCluster, redis_cluster_url: str, name: str
) -> None:
    ports = [node.port for node in redis_cluster.nodes]
    assert wake_latency(redis_cluster_url, ports, name) < wake_bound()
