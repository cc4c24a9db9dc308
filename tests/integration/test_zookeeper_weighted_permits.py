"""ZooKeeper's weighted permits, where its nodes show: a permit's node written by an older
tenure (no ``weight`` in its record) takes one unit, and a permit's try that gives up at once
removes its node, which stayed as its place, by its path (one delete, no second list of the
queue). The rule itself is checked on every backend offering "weighted" by
``tests/conformance/*/test_weighted_permits.py``."""

from __future__ import annotations

import json
import time

import tenure
from tenure._types import Kind
from tenure.backends.zookeeper._sync.store import ZooKeeperBackend
from tests.integration.test_zookeeper_requests import Requests


def backend_of(locks: tenure.Locks) -> ZooKeeperBackend:
    backend = locks.backend
    assert isinstance(backend, ZooKeeperBackend)
    return backend


def test_a_permit_written_without_a_weight_takes_one_unit(
    zookeeper_url: str, name: str
) -> None:
    with tenure.connect(zookeeper_url) as locks:
        backend = backend_of(locks)
        parent = backend._parent(Kind.SEMAPHORE, name)
        # As an older tenure writes a permit's node: no weight in its record.
        old = json.dumps({"host": "older", "pid": 1, "thread": "main", "since": time.time(),
                          "limit": 3, "ttl_ms": 60_000}).encode()
        client = backend.session.client()
        path = client.create(f"{parent}/t-older-", old, ephemeral=True, sequence=True,
                             makepath=True)
        info = locks.inspect(name, kind="semaphore")
        assert info is not None and info.limit == 3 and info.units == 1
        assert [(lease.holder.host, lease.weight) for lease in info.leases] == [("older", 1)]
        heavy = locks.semaphore(name, limit=3, weight=2, ttl=10)
        assert heavy.acquire(blocking=False)  # 1 + 2 units of 3
        assert locks.semaphore(name, limit=3, ttl=10).acquire(blocking=False) is False
        info = locks.inspect(name, kind="semaphore")
        assert info is not None and info.units == 3
        assert sorted(lease.weight for lease in info.leases) == [1, 2]
        client.delete(path)
        heavy.release()


def test_a_permit_that_gives_up_at_once_deletes_its_node_by_path(
    zookeeper_url: str, name: str
) -> None:
    with tenure.connect(zookeeper_url) as locks, tenure.connect(zookeeper_url) as other:
        holder = locks.semaphore(name, limit=2, weight=2, ttl=300)
        assert holder.acquire(blocking=False)
        client = backend_of(locks).session.client()
        parent = backend_of(locks)._parent(Kind.SEMAPHORE, name)
        held = client.get_children(parent)
        requests = Requests(other)
        refused = other.semaphore(name, limit=2, ttl=300)
        sent = requests.during(lambda: refused.acquire(blocking=False))
        assert sent.counts["get_children"] == 1, sent  # the first try's, none to leave
        # Its node's delete goes in one multi with a check of the permit ahead that refused
        # it (``_async/refusal.py``): nothing is left to delete when it gives up.
        assert sent.counts["multi"] == 1 and sent.counts["delete"] == 0, sent
        assert client.get_children(parent) == held
        # A timed-out wait leaves too: its node, queued meanwhile, is gone.
        assert refused.acquire(timeout=0.3) is False
        assert client.get_children(parent) == held
        holder.release()
