"""The MongoDB backend's read-write and fair locks beyond the conformance suite: the
documents and the collection it writes (made on first use only), the arrival order a
refreshed place keeps, the holders' time left, text that looks like an operator, batched
renewals, and the racing-upsert path the stand-in cannot produce on its own."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import pymongo
import pymongo.errors
import pytest

import tenure
from tenure._types import Busy, Grant, Holder, Kind, LeaseSpec, Mode, Renewal
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


def backend_of(locks: tenure.Locks) -> MongoDBStore:
    backend = locks.backend
    assert isinstance(backend, MongoDBStore)
    return backend


def grant(outcome: Grant | Busy) -> int:
    """The fence of a grant (fences increase with gaps: each is at least the server's clock)."""
    assert isinstance(outcome, Grant), outcome
    return outcome.fence


def acquire(backend: MongoDBStore, name: str, token: str, mode: str,
            ttl: float = 5.0, holder: Holder = HOLDER) -> Grant | Busy:
    spec = LeaseSpec(Kind.RWLOCK, mode=Mode(mode), queue_ttl=QUEUE_TTL)
    return backend.acquire(name, spec, token, ttl, holder)


def test_the_collection_is_made_on_first_use_with_its_index(
    mongodb_url: str, collection_name: str, raw: pymongo.MongoClient[dict[str, Any]]
) -> None:
    database = raw["tenure"]
    rwlocks = f"{collection_name}.rwlocks"
    with tenure.connect(f"{mongodb_url}&collection={collection_name}") as locks:
        with locks.lock("a", ttl=5):
            pass
        # A user of plain locks alone never creates (nor needs the right to create) it.
        assert rwlocks not in database.list_collection_names()
        writer = locks.rwlock("a", ttl=5).write()
        assert writer.acquire()
        index = database[rwlocks].index_information()["tenure_gc_at"]
        assert index["key"] == [("gc_at", 1)] and index["expireAfterSeconds"] == 0
        document = database[rwlocks].find_one({"_id": "a"})
        assert document is not None
        assert set(document) == {"_id", "fence", "next_seq", "leases", "places", "updated_at",
                                 "gc_at"}
        (lease,) = document["leases"]
        assert lease["mode"] == "write" and lease["fence"] == writer.fence == document["fence"]
        granted = writer.fence
        assert set(lease) == {"token", "mode", "expires_at", "fence", "acquired_at", "host",
                              "pid", "thread", "fair"}
        assert lease["fair"] is False  # a read-write lock's writer, not a fair lock
        assert document["gc_at"] > lease["expires_at"]
        writer.release()
        # Released: the document and its fence stay; the lock's own document is apart.
        document = database[rwlocks].find_one({"_id": "a"})
        assert document is not None and document["leases"] == []
        assert document["fence"] == granted
        # The plain lock's fence is its own, granted before the read-write lock's.
        assert database[collection_name].find_one({"_id": "a"})["fence"] < granted


def test_a_fair_locks_entries_say_so_and_entries_from_before_read_as_rwlock(
    mongodb_url: str, collection_name: str, raw: pymongo.MongoClient[dict[str, Any]]
) -> None:
    rwlocks = raw["tenure"][f"{collection_name}.rwlocks"]
    with tenure.connect(f"{mongodb_url}&collection={collection_name}") as locks:
        backend = backend_of(locks)
        fair = LeaseSpec(Kind.RWLOCK, mode=Mode.WRITE, queue_ttl=QUEUE_TTL, fair=True)
        assert isinstance(backend.acquire("f", fair, "holder", 5.0, HOLDER), Grant)
        assert isinstance(backend.acquire("f", fair, "waiter", 5.0, HOLDER), Busy)
        document = rwlocks.find_one({"_id": "f"})
        assert document is not None
        assert [entry["fair"] for entry in document["leases"] + document["places"]] == [True] * 2
        info = locks.inspect("f", kind="fair")
        assert info is not None and info.kind == "fair" and info.queued == 1
        # A tenure from before the field wrote none: its entries are a read-write lock's.
        rwlocks.update_one({"_id": "f"}, {"$unset": {"places.0.fair": ""}})
        info = locks.inspect("f", kind="fair")
        assert info is not None and info.kind == "rwlock"
        assert [lease.fair for lease in info.leases] == [True]


def test_clean_up_removes_only_long_unused_documents(
    mongodb_url: str, collection_name: str, raw: pymongo.MongoClient[dict[str, Any]]
) -> None:
    """gc_after counts from the end of the last lease or place, never from the grant."""
    collection = raw["tenure"][f"{collection_name}.rwlocks"]
    url = f"{mongodb_url}&collection={collection_name}&gc_after=0.5"
    with tenure.connect(url) as locks:
        held = locks.rwlock("held", ttl=3).read()
        assert held.acquire()
        for _ in range(2):
            with locks.lock("unused", ttl=5, fair=True):
                pass
        time.sleep(1.5)
        # (The stand-in deletes expired documents when next touched; MongoDB within ~60 s.)
        assert collection.find_one({"_id": "unused"}) is None
        assert collection.find_one({"_id": "held"}) is not None
        assert held.owned()
        held.release()


def test_a_refreshed_place_keeps_its_arrival_position(mongodb_url: str) -> None:
    name = f"order:{uuid.uuid4().hex}"
    with tenure.connect(mongodb_url) as locks:
        backend = backend_of(locks)
        holder = grant(acquire(backend, name, "holder", "write"))
        assert isinstance(acquire(backend, name, "first", "write"), Busy)
        assert isinstance(acquire(backend, name, "second", "write"), Busy)
        assert isinstance(acquire(backend, name, "first", "write"), Busy)  # a refresh
        # A reader arriving now waits behind the writers' places, whatever the holders.
        assert isinstance(acquire(backend, name, "reader", "read"), Busy)
        assert backend.release(Kind.RWLOCK, name, "holder")
        assert isinstance(acquire(backend, name, "second", "write"), Busy)
        first = grant(acquire(backend, name, "first", "write"))
        assert first > holder
        info = backend.inspect(Kind.RWLOCK, name)
        assert info is not None and info.queued == 2 and info.fence == first
        assert backend.release(Kind.RWLOCK, name, "first")
        assert isinstance(acquire(backend, name, "reader", "read"), Busy)
        second = grant(acquire(backend, name, "second", "write"))
        assert second > first
        # A retry of a granted token: the same fence, its lease restarted, no new place.
        assert acquire(backend, name, "second", "write") == Grant(second)
        assert backend.release(Kind.RWLOCK, name, "second")
        reader = grant(acquire(backend, name, "reader", "read"))
        assert grant(acquire(backend, name, "late reader", "read")) > reader > second
        # A place that gives up leaves: release_queued says no lease was held.
        assert isinstance(acquire(backend, name, "writer", "write"), Busy)
        assert backend.release(Kind.RWLOCK, name, "writer") is False
        info = backend.inspect(Kind.RWLOCK, name)
        assert info is not None and info.queued == 0 and len(info.leases) == 2


def test_busy_reports_the_soonest_holders_time_left(mongodb_url: str) -> None:
    name = f"busy:{uuid.uuid4().hex}"
    with tenure.connect(mongodb_url) as locks:
        backend = backend_of(locks)
        long = grant(acquire(backend, name, "long", "read", ttl=10.0))
        assert grant(acquire(backend, name, "short", "read", ttl=3.0)) > long
        busy = acquire(backend, name, "writer", "write")
        assert isinstance(busy, Busy) and busy.ttl_left is not None
        assert 2.0 < busy.ttl_left <= 3.0
        time.sleep(0.5)
        later = acquire(backend, name, "writer", "write")
        assert isinstance(later, Busy) and later.ttl_left is not None
        assert 1.5 < later.ttl_left <= busy.ttl_left - 0.4
        assert backend.break_leases(Kind.RWLOCK, name)
        # No holder: only the writer's place ahead holds a reader back.
        assert acquire(backend, name, "reader", "read") == Busy(None)


def test_text_is_stored_as_text(mongodb_url: str) -> None:
    """Token, holder and names reach the pipeline as values, never as field paths."""
    name = f"$text:{uuid.uuid4().hex}"
    holder = Holder("$host", 7, "$$NOW")
    with tenure.connect(mongodb_url) as locks:
        backend = backend_of(locks)
        first = grant(acquire(backend, name, "$token", "read", holder=holder))
        assert isinstance(acquire(backend, name, "$$ROOT", "write", holder=holder), Busy)
        info = backend.inspect(Kind.RWLOCK, name)
        assert info is not None and info.name == name and info.queued == 1
        assert [lease.holder for lease in info.leases] == [holder]
        assert backend.owned(Kind.RWLOCK, name, "$token")
        assert not backend.owned(Kind.RWLOCK, name, "$$ROOT")
        assert backend.release(Kind.RWLOCK, name, "$token")
        assert grant(acquire(backend, name, "$$ROOT", "write", holder=holder)) > first
        assert [info.name for info in backend.list_records(Kind.RWLOCK, name)] == [name]


def test_batched_renewals_say_which_were_refused(mongodb_url: str) -> None:
    prefix = f"batch:{uuid.uuid4().hex}:"
    with tenure.connect(mongodb_url) as locks:
        backend = backend_of(locks)
        names = [prefix + str(i) for i in range(3)]
        for name in names:
            grant(acquire(backend, name, "token-" + name, "read"))
        renewals = [Renewal(name, "token-" + name, 5.0, Kind.RWLOCK) for name in names]
        assert backend.extend_many(renewals) == [True, True, True]
        assert backend.break_leases(Kind.RWLOCK, names[1])
        wrong_token = Renewal(names[2], "not-the-token", 5.0, Kind.RWLOCK)
        assert backend.extend_many([*renewals, wrong_token]) == [True, False, True, False]
        assert backend.extend_many([]) == []


def test_a_racing_upserts_duplicate_key_error_is_tried_again(
    mongodb_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """mongoeco serialises writes and never races two upserts; real MongoDB can. The loser's
    document exists by then, so the same step once more updates it."""
    name = f"dup:{uuid.uuid4().hex}"
    with tenure.connect(mongodb_url) as locks:
        backend = backend_of(locks)
        collection = backend.connection.collection(Kind.RWLOCK)
        real = type(collection).find_one_and_update
        calls: list[object] = []

        def racing_once(self: object, *args: Any, **kwargs: Any) -> Any:
            calls.append(args[0])
            if len(calls) == 1:
                raise pymongo.errors.DuplicateKeyError("E11000 duplicate key error", 11000)
            return real(self, *args, **kwargs)  # type: ignore[arg-type]

        monkeypatch.setattr(type(collection), "find_one_and_update", racing_once)
        fence = grant(acquire(backend, name, "token", "write"))
        assert len(calls) == 2
        info = backend.inspect(Kind.RWLOCK, name)
        assert info is not None and info.fence == fence  # granted once, by the second try


def test_a_place_lists_its_waiter_and_an_older_tenures_place_an_unknown_one(
    mongodb_url: str, collection_name: str, raw: pymongo.MongoClient[dict[str, Any]]
) -> None:
    with tenure.connect(f"{mongodb_url}&collection={collection_name}") as locks:
        backend = backend_of(locks)
        grant(acquire(backend, "a", "holder", "write"))
        assert isinstance(acquire(backend, "a", "waiter", "read"), Busy)
        info = locks.inspect("a", kind="rwlock")
        assert info is not None
        (waiter,) = info.waiters
        assert (waiter.holder, waiter.mode) == (HOLDER, "read") and waiter.since is not None
        # An older tenure's place says only its token, mode, arrival and expiry.
        raw["tenure"][f"{collection_name}.rwlocks"].update_one(
            {"_id": "a"},
            {"$unset": {f"places.0.{field}": "" for field in ("host", "pid", "thread",
                                                            "placed_at")}},
        )
        info = locks.inspect("a", kind="rwlock")
        assert info is not None
        assert [(w.holder, w.since, w.mode) for w in info.waiters] == [(None, None, "read")]
