"""The MongoDB backend's weighted FIFO permits beyond the conformance suite: the documents it
writes (a permit's weight, a waiter's place), the arrival order a refreshed place keeps, a
retry keeping its fence, a lapsed place no longer holding anybody back, a refusal by another
limit taking no place, and permits an older tenure wrote (no weight) counting as one unit."""

from __future__ import annotations

import datetime
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pymongo
import pytest

import tenure
from tenure._types import Busy, Grant, Holder, Kind, LeaseSpec
from tenure.backends.mongodb._sync.store import MongoDBStore

pytestmark = pytest.mark.mongodb

HOLDER = Holder("host", 1, "thread")
QUEUE_TTL = 3.0


@pytest.fixture
def collection_name() -> str:
    return f"locks_{uuid.uuid4().hex}"


@pytest.fixture
def raw(mongodb_url: str) -> Iterator[pymongo.MongoClient[dict[str, Any]]]:
    client: pymongo.MongoClient[dict[str, Any]] = pymongo.MongoClient(mongodb_url)
    try:
        yield client
    finally:
        client.close()


@pytest.fixture
def locks(mongodb_url: str, collection_name: str) -> Iterator[tenure.Locks]:
    with tenure.connect(f"{mongodb_url}&collection={collection_name}") as client:
        yield client


def backend_of(locks: tenure.Locks) -> MongoDBStore:
    backend = locks.backend
    assert isinstance(backend, MongoDBStore)
    return backend


def spec(weight: int, limit: int = 4, queue_ttl: float | None = QUEUE_TTL) -> LeaseSpec:
    return LeaseSpec(Kind.SEMAPHORE, limit=limit, weight=weight, queue_ttl=queue_ttl)


def take(backend: MongoDBStore, name: str, token: str, weight: int, *, limit: int = 4,
         queue_ttl: float | None = QUEUE_TTL, ttl: float = 5.0) -> Grant | Busy:
    return backend.acquire(name, spec(weight, limit, queue_ttl), token, ttl, HOLDER)


def fence_of(outcome: Grant | Busy) -> int:
    assert isinstance(outcome, Grant), outcome
    return outcome.fence


def test_the_document_holds_weights_and_places_in_arrival_order(
    locks: tenure.Locks, collection_name: str, raw: pymongo.MongoClient[dict[str, Any]]
) -> None:
    backend = backend_of(locks)
    collection = raw["tenure"][f"{collection_name}.semaphores"]
    first = fence_of(take(backend, "s", "holder", 3))
    # Two waiters: each takes a place, in arrival order, with its weight.
    busy = take(backend, "s", "w1", 3)
    assert isinstance(busy, Busy) and busy.ttl_left is not None and 4.0 < busy.ttl_left <= 5.0
    assert isinstance(take(backend, "s", "w2", 1), Busy)  # it would fit, but w1 is ahead
    document = collection.find_one({"_id": "s"})
    assert document is not None
    assert set(document) == {"_id", "fence", "limit", "permits", "next_seq", "places",
                             "updated_at", "gc_at"}
    (permit,) = document["permits"]
    assert permit["weight"] == 3 and permit["fence"] == first == document["fence"]
    assert [(p["token"], p["weight"], p["seq"]) for p in document["places"]] == [
        ("w1", 3, 1), ("w2", 1, 2)]
    assert set(document["places"][0]) == {"token", "weight", "seq", "expires_at",
                                          "placed_at", "host", "pid", "thread"}
    # A refresh keeps the spot; a newcomer (no place yet) stands behind both.
    assert isinstance(take(backend, "s", "w1", 3), Busy)
    assert isinstance(take(backend, "s", "w3", 1), Busy)
    info = locks.inspect("s", kind="semaphore")
    assert info is not None and info.units == 3 and info.queued == 3
    assert [(w.weight, w.mode) for w in info.waiters] == [(3, None), (1, None), (1, None)]
    assert info.waiters[0].holder == HOLDER
    # The holder goes: w1 (the head) is served; w3 waits for w2 ahead of it (3 + 1 + 1 > 4),
    # w2 fits (3 + 1), and w3 gets its turn once w1 is gone.
    assert backend.release(Kind.SEMAPHORE, "s", "holder")
    second = fence_of(take(backend, "s", "w1", 3))
    assert isinstance(take(backend, "s", "w3", 1), Busy)
    third = fence_of(take(backend, "s", "w2", 1))
    assert isinstance(take(backend, "s", "w3", 1), Busy)
    assert backend.release(Kind.SEMAPHORE, "s", "w1")
    fourth = fence_of(take(backend, "s", "w3", 1))
    assert first < second < third < fourth
    document = collection.find_one({"_id": "s"})
    assert document is not None and document["places"] == []
    assert [(p["token"], p["weight"]) for p in document["permits"]] == [("w2", 1), ("w3", 1)]


def test_a_retry_keeps_its_fence_and_a_given_up_place_goes(locks: tenure.Locks) -> None:
    backend = backend_of(locks)
    fence = fence_of(take(backend, "r", "holder", 2, ttl=1.0))
    # A lost reply's retry with the same token: the same permit, the same fence, restarted.
    again = take(backend, "r", "holder", 2, ttl=5.0)
    assert again == Grant(fence)
    info = locks.inspect("r", kind="semaphore")
    assert info is not None
    (lease,) = info.leases
    assert lease.ttl_left > 4.0 and lease.weight == 2 and lease.fence == fence
    assert isinstance(take(backend, "r", "waiter", 3), Busy)
    info = locks.inspect("r", kind="semaphore")
    assert info is not None and info.queued == 1
    # Giving up is a release of the token: its place goes, no permit was live.
    assert backend.release(Kind.SEMAPHORE, "r", "waiter") is False
    info = locks.inspect("r", kind="semaphore")
    assert info is not None and info.queued == 0
    assert fence_of(take(backend, "r", "other", 2)) > fence


def test_a_lapsed_place_no_longer_holds_anybody_back(locks: tenure.Locks) -> None:
    backend = backend_of(locks)
    fence_of(take(backend, "l", "holder", 3))
    # A waiter that dies after its try: its place lapses queue_ttl later by the server's clock.
    assert isinstance(take(backend, "l", "dead", 2, queue_ttl=0.3), Busy)
    assert isinstance(take(backend, "l", "light", 1), Busy)  # one unit free, dead ahead
    deadline = time.monotonic() + 10
    while isinstance(outcome := take(backend, "l", "light", 1), Busy):
        assert time.monotonic() < deadline, "the lapsed place kept holding the queue"
        time.sleep(0.05)
    assert isinstance(outcome, Grant)
    info = locks.inspect("l", kind="semaphore")
    assert info is not None and info.units == 4 and info.waiters == ()


def test_a_refusal_by_another_limit_takes_no_place(locks: tenure.Locks) -> None:
    backend = backend_of(locks)
    fence_of(take(backend, "m", "holder", 1, limit=4))
    with pytest.raises(tenure.ConfigurationError, match="4"):
        take(backend, "m", "other", 1, limit=3)
    info = locks.inspect("m", kind="semaphore")
    assert info is not None and info.queued == 0 and info.units == 1


def test_permits_an_older_tenure_wrote_count_one_unit_each(
    locks: tenure.Locks, collection_name: str, raw: pymongo.MongoClient[dict[str, Any]]
) -> None:
    """An older tenure's permits carry no weight (and its document no places)."""
    backend = backend_of(locks)
    fence_of(take(backend, "o", "seed", 1))  # makes the collection and its index
    assert backend.release(Kind.SEMAPHORE, "o", "seed")
    collection = raw["tenure"][f"{collection_name}.semaphores"]
    now = datetime.datetime.now(datetime.UTC)
    old = [
        {"token": f"old{index}", "expires_at": now + datetime.timedelta(seconds=30),
         "fence": 10 + index, "acquired_at": now, "host": "old", "pid": 7, "thread": "t"}
        for index in range(2)
    ]
    collection.replace_one({"_id": "o"}, {"_id": "o", "fence": 11, "limit": 4, "permits": old})
    info = locks.inspect("o", kind="semaphore")
    assert info is not None and info.units == 2 and info.waiters == ()
    assert [lease.weight for lease in info.leases] == [1, 1]
    assert isinstance(take(backend, "o", "three", 3), Busy)  # 2 + 3 > 4
    assert isinstance(take(backend, "o", "two", 2), Busy)  # fits, but "three" waits ahead
    assert backend.release(Kind.SEMAPHORE, "o", "three") is False  # gives up
    assert fence_of(take(backend, "o", "two", 2)) > 11
    info = locks.inspect("o", kind="semaphore")
    assert info is not None and info.units == 4 and info.queued == 0
