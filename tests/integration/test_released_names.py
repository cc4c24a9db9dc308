"""What a released name leaves behind (DESIGN rules 4 and 10): by default its record goes
minutes after its release, not days (``gc_after``, 10 minutes), and a name whose record went
still gets a fence above every earlier one (the server's clock floors each fence). Runs on
every backend with ``gc_after``; etcd and ZooKeeper keep a name's last fence with no
``gc_after`` (their fences are the store's global revision or zxid), Redlock keeps its
per-node counters for ever (its fences need them)."""

from __future__ import annotations

import time
from typing import Any

import pytest
import redis

import tenure
from tenure._options import DEFAULT_GC_AFTER
from tenure.backends.redis._rwlocks import queue_keys
from tenure.backends.redis._scripts import lock_keys
from tenure.backends.redis._semaphores import semaphore_keys

COLLECTED = ("memory", "sqlite", "redis", "redis_cluster", "mongodb", "mysql", "postgresql")
GC_AFTER = 0.5


def _handle(locks: tenure.Locks, kind: str, name: str) -> Any:
    """A handle of ``kind`` on ``name``."""
    if kind == "semaphore":
        return locks.semaphore(name, limit=2, ttl=1)
    if kind == "rwlock":
        return locks.rwlock(name, ttl=1).write()
    return locks.lock(name, ttl=1)


def _until_gone(locks: tenure.Locks, name: str, kind: str) -> None:
    deadline = time.monotonic() + 60  # MongoDB's TTL monitor runs once a minute
    while locks.inspect(name, kind=kind) is not None:
        assert time.monotonic() < deadline, f"the released {kind} {name!r} was never collected"
        # A grant and a release of the same kind: the SQL stores sweep a kind's table then.
        with _handle(locks, kind, f"{name}:tick"):
            pass
        time.sleep(0.1)


def test_a_released_name_is_collected_and_its_fences_still_rise(
    backend_url: str, name: str
) -> None:
    with tenure.connect(backend_url, gc_after=GC_AFTER) as locks:
        for kind in ("lock", "semaphore", "rwlock"):
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
