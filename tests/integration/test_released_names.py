"""What a released name leaves behind (DESIGN rules 4 and 10): by default its record goes
minutes after its release, not days (``gc_after``, 10 minutes), and a name whose record went
still gets a fence above every earlier one (the server's clock floors each fence: Redis and
the SQL stores; each node's clock where the name has no record, Redlock; the store's global
revision or zxid, etcd and ZooKeeper). Runs on every backend."""

from __future__ import annotations

import base64
import time
from typing import Any

import httpx
import pytest
import redis

import tenure
from tenure._options import DEFAULT_GC_AFTER
from tenure.backends.redis._rwlocks import queue_keys
from tenure.backends.redis._scripts import lock_keys
from tenure.backends.redis._semaphores import semaphore_keys
from tests.conftest import offers
from tests.timing import scaled

COLLECTED = ("memory", "sqlite", "redis", "redis_cluster", "mongodb", "mysql", "postgresql",
             "redlock", "etcd", "zookeeper")
GC_AFTER = 0.5


def _handle(locks: tenure.Locks, kind: str, name: str) -> Any:
    """A handle of ``kind`` on ``name``: a lease of a second, stretched by the load (a MySQL
    acquire and release once took longer than a second at a load of 60)."""
    ttl = scaled(1)
    if kind == "semaphore":
        return locks.semaphore(name, limit=2, ttl=ttl)
    if kind == "rwlock":
        return locks.rwlock(name, ttl=ttl).write()
    return locks.lock(name, ttl=ttl)


def _until_gone(locks: tenure.Locks, name: str, kind: str) -> None:
    deadline = time.monotonic() + 60  # MongoDB's TTL monitor runs once a minute
    while locks.inspect(name, kind=kind) is not None:
        assert time.monotonic() < deadline, f"the released {kind} {name!r} was never collected"
        # A grant and a release of the same kind: the SQL stores sweep a kind's table then.
        with _handle(locks, kind, f"{name}:tick"):
            pass
        time.sleep(0.1)


def test_a_released_name_is_collected_and_its_fences_still_rise(
    backend_url: str, backend_name: str, name: str
) -> None:
    with tenure.connect(backend_url, gc_after=GC_AFTER) as locks:
        for kind in ("lock", "semaphore", "rwlock"):
            if not offers(backend_name, kind):
                continue
            first = _handle(locks, kind, name)
            assert first.acquire(blocking=False)
            fence = first.fence
            first.release()
            info = locks.inspect(name, kind=kind)  # kept for gc_after: the last fence shows
            assert info is not None and info.fence == fence and not info.held
            _until_gone(locks, name, kind)
            again = _handle(locks, kind, name)
            assert again.acquire(blocking=False)
            assert again.fence is not None and fence is not None and again.fence > fence, kind
            again.release()


test_a_released_name_is_collected_and_its_fences_still_rise.backends = (  # type: ignore[attr-defined]
    COLLECTED
)


def test_the_default_keeps_a_released_name_for_minutes() -> None:
    assert 60 <= DEFAULT_GC_AFTER <= 15 * 60


@pytest.mark.redis
def test_a_released_redis_name_expires_gc_after_past_its_lease_by_default(
    redis_url: str, name: str
) -> None:
    client = redis.Redis.from_url(redis_url)
    with tenure.connect(redis_url) as locks:
        for make, key in (
            (lambda: locks.lock(name, ttl=5), lock_keys("tenure", name).meta),
            (lambda: locks.semaphore(name, limit=2, ttl=5), semaphore_keys("tenure", name).meta),
            (lambda: locks.rwlock(name, ttl=5).write(), queue_keys("tenure", name).meta),
        ):
            lock = make()
            assert lock.acquire(blocking=False)
            lock.release()
            left_ms = client.pttl(key)
            assert 0 < left_ms <= 5000 + 15 * 60 * 1000, (key, left_ms)  # minutes, not days
    client.close()


@pytest.mark.redlock
def test_a_released_redlock_name_expires_gc_after_past_its_lease_on_every_node(
    redlock_url: str, name: str
) -> None:
    # Each node keeps the name's record (its counter) as the single-node backend does:
    # gc_after (10 minutes by default) past the lease's end, not for ever.
    location = redlock_url.partition("://")[2].partition("?")[0].partition("/")[0]
    nodes = [redis.Redis.from_url(f"redis://{host}") for host in location.split(",")]
    key = lock_keys("tenure", name).meta
    with tenure.connect(redlock_url) as locks:
        lock = locks.lock(name, ttl=5)
        assert lock.acquire(blocking=False)
        lock.release()
    for node in nodes:
        left_ms = node.pttl(key)
        assert 0 < left_ms <= 5000 + 15 * 60 * 1000, (key, left_ms)  # minutes, not for ever
    with tenure.connect(redlock_url, gc_after="none") as locks:
        lock = locks.lock(name, ttl=5)
        assert lock.acquire(blocking=False)
        lock.release()
    assert [node.pttl(key) for node in nodes] == [-1] * len(nodes)  # none: kept for ever
    for node in nodes:
        node.close()


@pytest.mark.etcd
def test_a_released_etcd_name_keeps_its_fence_key_gc_after_on_a_lease(
    etcd_url: str, name: str
) -> None:
    # A lock's grant puts the name's fence key (its last fence, for inspect) on a lease of
    # gc_after (10 minutes by default, plus at most a tenth of it: the lease is shared for
    # that long), so that its release only deletes the holder key and the key still lasts
    # gc_after past it; with gc_after=none it stays on no lease.
    endpoint = "http://" + etcd_url.partition("://")[2].split(",")[0]
    key = base64.b64encode(f"tenure/lock.fence/{name}/".encode()).decode()

    def lease_left() -> float | None:
        found = httpx.post(f"{endpoint}/v3/kv/range", json={"key": key}).json().get("kvs", [])
        assert found, "the released name's fence key is gone at once"
        lease = found[0].get("lease", "0")
        if lease == "0":
            return None
        answer = httpx.post(f"{endpoint}/v3/lease/timetolive", json={"ID": lease}).json()
        return float(answer["TTL"])

    with tenure.connect(etcd_url) as locks:
        lock = locks.lock(name, ttl=5)
        assert lock.acquire(blocking=False)
        left = lease_left()
        # While held too: not the holder's lease, whose end would take it along.
        assert left is not None and DEFAULT_GC_AFTER - 5 <= left <= DEFAULT_GC_AFTER * 1.1 + 1
        lock.release()
        left = lease_left()
        assert left is not None and DEFAULT_GC_AFTER - 5 <= left <= DEFAULT_GC_AFTER * 1.1 + 1
    with tenure.connect(etcd_url, gc_after="none") as locks:
        lock = locks.lock(name, ttl=5)
        assert lock.acquire(blocking=False)
        lock.release()
        assert lease_left() is None  # kept for ever


@pytest.mark.zookeeper
def test_a_released_zookeeper_name_stays_until_gc_after(zookeeper_url: str, name: str) -> None:
    # A pass of the clean-up that runs before the name was idle for gc_after leaves it.
    with tenure.connect(zookeeper_url, gc_after=30) as locks:  # a pass every 3 s
        lock = locks.lock(name, ttl=5)
        assert lock.acquire(blocking=False)
        fence = lock.fence
        lock.release()
        deadline = time.monotonic() + 3 + 4 * 1.5  # a pass due after 3 s, then every 3 s
        while time.monotonic() < deadline:
            with locks.lock(f"{name}:tick", ttl=1):
                pass
            time.sleep(0.2)
        info = locks.inspect(name)
        assert info is not None and info.fence == fence and not info.held
