"""The Redis backend on a real 3-master Redis Cluster: hash tags keep every script in one slot,
locks spread over the masters, listing scans every master, renewals batch per slot, and a
lost script cache on one node is reloaded."""

from __future__ import annotations

import secrets
import time

import pytest
import redis
from redis.crc import key_slot

import tenure
from tenure.backends.redis._scripts import lock_keys
from tests.integration.waking import (
    SLOW_TIMER_FLOOR,
    asyncio_wake_latency,
    slow_timer,  # noqa: F401 (a fixture)
    slow_timer_url,
    wake_latency,
)
from tests.servers.redis import RedisCluster

pytestmark = pytest.mark.redis_cluster

HOSTILE = ["{", "}", "{}", "{a}", "a{b}c", "}{", "sp ace", "new\nline", "ünï ✓", "é" * 500]


def node_ports(cluster: RedisCluster, names: list[str]) -> set[int]:
    """The ports of the masters owning each name's keys, from the cluster's own slot map."""
    client = redis.Redis(port=cluster.nodes[0].port)
    slots = client.cluster("SLOTS")
    client.close()
    owners = set()
    for name in names:
        slot = key_slot(lock_keys("tenure", name).meta.encode())
        for start, end, master, *_ in slots:
            if start <= slot <= end:
                owners.add(int(master[1]))
    return owners


def test_all_keys_of_a_lock_share_a_slot_and_locks_spread(
    redis_cluster: RedisCluster, redis_cluster_url: str
) -> None:
    prefix = f"spread:{secrets.token_hex(4)}:"
    names = [f"{prefix}{index}" for index in range(30)] + [prefix + name for name in HOSTILE]
    for name in names:
        keys = lock_keys("tenure", name)
        slots = {key_slot(k.encode()) for k in keys}
        assert len(slots) == 1, name
    assert len(node_ports(redis_cluster, names)) == 3  # every master holds some
    with tenure.connect(redis_cluster_url) as locks:
        held = [locks.lock(name, ttl=30) for name in names]
        for lock in held:
            assert lock.acquire(blocking=False), lock.name
        for name in names:
            assert locks.lock(name).acquire(blocking=False) is False
        # Listing scans every master, and finds exactly these names (raw names kept).
        listed = locks.list_locks(prefix)
        assert [info.name for info in listed] == sorted(names)
        assert all(info.held for info in listed)
        fences = {lock.name: lock.fence for lock in held}
        assert [info.fence for info in listed] == [fences[info.name] for info in listed]
        for lock in held:
            lock.release()
        assert not any(info.held for info in locks.list_locks(prefix))


def test_renewals_batch_across_slots(redis_cluster_url: str) -> None:
    prefix = f"renew:{secrets.token_hex(4)}:"
    with tenure.connect(redis_cluster_url) as locks:
        batches: list[int] = []
        extend_many = locks.backend.extend_many

        def counting(renewals):  # type: ignore[no-untyped-def]
            batches.append(len(renewals))
            return extend_many(renewals)

        locks.backend.extend_many = counting  # type: ignore[method-assign]
        held = [locks.lock(f"{prefix}{index}", ttl=0.6, renew=True) for index in range(12)]
        for lock in held:
            assert lock.acquire(blocking=False)
        time.sleep(1.5)  # past two lease lengths: only renewals keep them
        for lock in held:
            lock.check()
            assert lock.owned()
        for lock in held:
            lock.release()
    assert max(batches) > 1  # leases due together went out in one call


@pytest.mark.usefixtures("slow_timer")
@pytest.mark.parametrize("flavour", ["threads", "asyncio"])
def test_waiter_is_woken_on_the_owning_node(
    redis_cluster: RedisCluster, redis_cluster_url: str, flavour: str
) -> None:
    name = f"wake:{flavour}:{secrets.token_hex(8)}"
    (port,) = node_ports(redis_cluster, [name])
    owner = redis.Redis(port=port)

    def queued() -> bool:
        return int(owner.info("clients")["blocked_clients"]) > 0

    url = slow_timer_url(redis_cluster_url)
    if flavour == "asyncio":
        latency = asyncio_wake_latency(url, name, queued=queued)
    else:
        with tenure.connect(url) as locks:
            latency = wake_latency(locks, name, queued=queued)
    owner.close()
    assert latency < SLOW_TIMER_FLOOR, latency


def test_script_cache_lost_on_every_node(
    redis_cluster: RedisCluster, redis_cluster_url: str
) -> None:
    prefix = f"flush:{secrets.token_hex(4)}:"
    with tenure.connect(redis_cluster_url) as locks:
        first = [locks.lock(f"{prefix}{index}", ttl=30) for index in range(6)]
        for lock in first:
            assert lock.acquire(blocking=False)
        for node in redis_cluster.nodes:
            client = redis.Redis(port=node.port)
            client.script_flush()
            client.close()
        for lock in first:
            lock.release()
            assert lock.acquire(blocking=False)
            lock.extend()
            lock.release()
        assert len(locks.list_locks(prefix)) == 6
