"""etcd's weighted FIFO permits, in its own terms (``tenure.backends.etcd._records.fits`` and
``_async/first_try``): a refused permit's key, written at its arrival, stays as its place
(marked queued, on a queue lease, its creation revision kept) and counts its weight against
every later arrival; giving up a try is one more delete, no lookup; a key written without a
weight (every tenure before weights) reads as one unit.
"""

from __future__ import annotations

import base64
import json

import pytest

import tenure
from tenure._types import Busy, Grant, Kind, LeaseSpec
from tenure.backends.etcd._keys import Record, b64, name_prefix, prefix_end
from tenure.backends.etcd._records import fits
from tenure.backends.etcd._statements import kvs, oldest
from tenure.backends.etcd._sync.store import EtcdBackend
from tests.integration.etcd_support import HOLDER, token

pytestmark = pytest.mark.etcd


def permits(limit: int, weight: int = 1) -> LeaseSpec:
    """A weighted FIFO permit's spec, as the semaphore handle makes it on etcd."""
    return LeaseSpec(Kind.SEMAPHORE, limit=limit, weight=weight, queue_ttl=3.0)


def keys_of(etcd_store: EtcdBackend, name: str) -> list[tuple[str, Record, int, str]]:
    """(token, record, creation revision, lease) of each key of the semaphore ``name``."""
    prefix = name_prefix(etcd_store.settings.namespace, "semaphore", name)
    found = kvs(etcd_store.gateway.post("/v3/kv/range", oldest(prefix, None)["request_range"]))
    return [(base64.b64decode(kv["key"]).decode()[len(prefix):],
             Record.decode(kv.get("value", "")), int(kv["create_revision"]),
             str(kv.get("lease", "0"))) for kv in found]


def test_the_rule_counts_every_key_ahead() -> None:
    assert fits(4, [2, 3, 1]) == [True, False, False]  # nobody passes the heavy waiter
    assert fits(8, [3, 3, 2, 1]) == [True, True, True, False]
    assert fits(3, [1, 1, 1, 1]) == [True, True, True, False]  # weight 1: the limit oldest
    assert fits(4, []) == []


def test_a_refused_permit_keeps_the_place_of_its_first_write(
    etcd_store: EtcdBackend, name: str
) -> None:
    holder, heavy, light = token(), token(), token()
    assert isinstance(etcd_store.acquire(name, permits(4, 2), holder, 10, HOLDER), Grant)
    attempt = etcd_store.attempt(name, permits(4, 3), heavy, 10, HOLDER)
    assert isinstance(attempt.try_once(), Busy)
    place = attempt.place
    assert place is not None and place.revision and place.lease is not None
    (_, record, created, lease) = next(k for k in keys_of(etcd_store, name) if k[0] == heavy)
    # The key written by the try is the place: same creation revision, queued, on the
    # queue lease (not the holder lease kept ready for the grant).
    assert (record.queued, record.weight, created) == (True, 3, place.revision)
    assert lease == place.lease.id and place.holder_lease is not None
    # Two units are free, but the place ahead counts its three: a light arrival waits.
    late = etcd_store.attempt(name, permits(4), light, 10, HOLDER)
    assert isinstance(late.try_once(), Busy)
    late.leave()
    info = etcd_store.inspect(Kind.SEMAPHORE, name)
    assert info is not None and info.units == 2 and info.queued == 1
    assert [w.weight for w in info.waiters] == [3]
    assert etcd_store.release(Kind.SEMAPHORE, name, holder)
    granted = attempt.try_once()
    # Granted from its place: the fence is the creation revision of its first write.
    assert granted == Grant(created)
    (_, record, _, lease) = next(k for k in keys_of(etcd_store, name) if k[0] == heavy)
    assert not record.queued and record.weight == 3 and lease != place.lease
    assert etcd_store.release(Kind.SEMAPHORE, name, heavy)
    assert keys_of(etcd_store, name) == []


def test_a_refused_try_is_three_requests_and_leaves_no_key(etcd_url: str, name: str) -> None:
    with tenure.connect(etcd_url) as locks:
        gateway = locks.backend.gateway  # type: ignore[attr-defined]
        holder = locks.semaphore(name, limit=4, weight=2, ttl=10)
        assert holder.acquire(blocking=False)
        heavy = locks.semaphore(name, limit=4, weight=3, ttl=10)
        assert heavy.acquire(blocking=False) is False  # the first grants the leases reused
        before = gateway.requests
        for _ in range(3):
            assert heavy.acquire(blocking=False) is False
        # The try (write and rank), its key made a place, the place deleted.
        assert gateway.requests - before == 3 * 3
        info = locks.inspect(name, kind="semaphore")
        assert info is not None and info.queued == 0 and info.units == 2
        holder.release()
        info = locks.inspect(name, kind="semaphore")
        assert info is not None and info.units == 0 and info.queued == 0


def test_keys_without_a_weight_read_as_one_unit(etcd_store: EtcdBackend, name: str) -> None:
    # A permit's key as a tenure from before weights wrote it: no "weight" field.
    lease = etcd_store.pool.new(10)
    old = {"host": "old", "pid": 7, "thread": "t", "since": 1.0, "limit": 4, "ttl": 9.0}
    prefix = name_prefix(etcd_store.settings.namespace, "semaphore", name)
    etcd_store.gateway.post("/v3/kv/put", {
        "key": b64(prefix + token()), "value": b64(json.dumps(old)), "lease": lease.id,
    })
    try:
        info = etcd_store.inspect(Kind.SEMAPHORE, name)
        assert info is not None and info.units == 1
        assert [lease.weight for lease in info.leases] == [1]
        four = etcd_store.attempt(name, permits(4, 4), token(), 10, HOLDER)
        assert isinstance(four.try_once(), Busy)
        four.leave()  # a refused try's place goes with it
        three = token()
        assert isinstance(etcd_store.acquire(name, permits(4, 3), three, 10, HOLDER), Grant)
        info = etcd_store.inspect(Kind.SEMAPHORE, name)
        assert info is not None and info.units == 4
        assert etcd_store.release(Kind.SEMAPHORE, name, three)
    finally:
        etcd_store.pool.revoke(lease.id)
    assert kvs(etcd_store.gateway.post("/v3/kv/range", {
        "key": b64(prefix), "range_end": b64(prefix_end(prefix)), "count_only": True,
    })) == []
