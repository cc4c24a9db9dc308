"""The MongoDB backend's own behaviour beyond the conformance suite: options, the documents
it writes, the clean-up index, batched renewals, and the paths the stand-in cannot produce
on its own (a racing upsert's duplicate-key error), in both flavours."""

from __future__ import annotations

import datetime
import itertools
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pymongo
import pymongo.errors
import pytest
from pymongo.read_concern import ReadConcern
from pymongo.write_concern import WriteConcern

import tenure
from tenure._types import Busy, Grant, Holder, Kind, LeaseSpec, Mode, Renewal
from tenure.backends.mongodb import _documents
from tenure.backends.mongodb._config import parse_settings
from tenure.backends.mongodb._sync.store import MongoDBStore

pytestmark = pytest.mark.mongodb

LOCK = LeaseSpec()
HOLDER = Holder("host", 1, "thread")


def with_collection(url: str, **options: str) -> str:
    query = "".join(f"&{key}={value}" for key, value in options.items())
    return f"{url}{query}"


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


# ---- options --------------------------------------------------------------------------------


def test_defaults() -> None:
    settings = parse_settings("mongodb://db.example:27017/", {})
    assert (settings.database, settings.collection) == ("tenure", "locks")
    assert settings.write_concern == WriteConcern(w="majority")
    assert settings.read_concern == ReadConcern("majority")
    assert settings.timeout == 5.0
    assert settings.gc_after == 600
    assert settings.client_options == {
        "appname": "tenure", "timeoutMS": 5000, "serverSelectionTimeoutMS": 5000,
        "connectTimeoutMS": 5000,
    }


def test_own_options_are_taken_out_of_the_url_and_keywords_win() -> None:
    url = ("mongodb://app:p%40ss@db1,db2:27018/appdb?replicaSet=rs0&collection=c"
           "&write_concern=2&read_concern=local&timeout=2.5&gc_after=none&tls=false")
    settings = parse_settings(url, {"collection": "from_keyword", "maxPoolSize": 7})
    assert settings.client_url == (
        "mongodb://app:p%40ss@db1,db2:27018/appdb?replicaSet=rs0&tls=false")
    assert (settings.database, settings.collection) == ("appdb", "from_keyword")
    assert settings.write_concern == WriteConcern(w=2)
    assert settings.read_concern == ReadConcern("local")
    assert settings.gc_after is None and settings.gc_after_ms is None
    assert settings.client_options["timeoutMS"] == 2500
    assert settings.client_options["maxPoolSize"] == 7
    assert parse_settings(url, {"database": "kw"}).database == "kw"


def test_the_urls_own_concerns_and_timeouts_are_respected() -> None:
    settings = parse_settings(
        "mongodb://h/?w=1&readConcernLevel=local&timeoutMS=100&appname=mine", {})
    assert settings.write_concern is None and settings.read_concern is None
    assert "timeoutMS" not in settings.client_options
    assert settings.client_options["serverSelectionTimeoutMS"] == 5000
    assert "appname" not in settings.client_options


def test_srv_urls_are_checked_without_dns() -> None:
    settings = parse_settings(
        "mongodb+srv://app:secret@cluster0.example.invalid/mydb?collection=x&retryWrites=true",
        {})
    assert (settings.database, settings.collection) == ("mydb", "x")
    assert settings.client_url.startswith("mongodb+srv://")


@pytest.mark.parametrize(
    ("url", "options"),
    [
        ("mongodb://h/?bogus=1", {}),
        ("mongodb://h/", {"bogus": 1}),
        ("mongodb://h/?write_concern=0", {}),
        ("mongodb://h/", {"write_concern": 0}),
        ("mongodb://h/", {"read_concern": "snapshot"}),
        ("mongodb://h/?timeout=soon", {}),
        ("mongodb://h/", {"timeout": -1}),
        ("mongodb://h/", {"gc_after": 0}),
        ("mongodb://h/", {"collection": ""}),
        ("mongodb://h/", {"tlsCAFile": "/no/such/file.pem"}),
        ("mongodb://", {}),
        ("mongodb://h:notaport/", {}),
        ("mongodb+srv://h1,h2/", {}),
    ],
)
def test_bad_options_are_configuration_errors(url: str, options: dict[str, object]) -> None:
    with pytest.raises(tenure.ConfigurationError):
        tenure.connect(url, **options)


@pytest.mark.parametrize(
    ("url", "options"),
    [
        ("mongodb://h/?gc_after=0", {}),
        ("mongodb://h/?gc_after=-5", {}),
        ("mongodb://h/?gc_after=soon", {}),
        ("mongodb://h/?gc_after=inf", {}),
        ("mongodb://h/", {"gc_after": True}),
        ("mongodb://h/", {"gc_after": "nan"}),
    ],
)
def test_bad_gc_after_is_a_configuration_error_naming_it(
    url: str, options: dict[str, object]
) -> None:
    with pytest.raises(tenure.ConfigurationError, match="gc_after"):
        tenure.connect(url, **options)


def test_passwords_are_never_shown() -> None:
    with tenure.connect("mongodb://app:s3cret@127.0.0.1:9/?directConnection=true",
                        timeout=0.3) as locks:
        assert "s3cret" not in repr(locks)
        with pytest.raises(tenure.BackendError) as caught:
            locks.inspect("x")
        assert "s3cret" not in str(caught.value)
    with pytest.raises(tenure.ConfigurationError) as bad:
        tenure.connect("mongodb://app:s3cret@h/?bogus=1")
    assert "s3cret" not in str(bad.value)


# ---- what is written -------------------------------------------------------------------------


def test_concerns_and_index_are_in_place_after_first_use(
    mongodb_url: str, collection_name: str, raw: pymongo.MongoClient[dict[str, Any]]
) -> None:
    with tenure.connect(with_collection(mongodb_url, collection=collection_name)) as locks:
        backend = locks.backend
        assert isinstance(backend, MongoDBStore)
        assert "tenure_gc_at" not in raw["tenure"][collection_name].index_information()
        lock = locks.lock("a", ttl=5)
        assert lock.acquire()
        granted = lock.fence
        collection = backend.connection.collection(Kind.LOCK)
        assert collection.write_concern.document == {"w": "majority"}
        assert collection.read_concern.level == "majority"
        index = raw["tenure"][collection_name].index_information()["tenure_gc_at"]
        assert index["key"] == [("gc_at", 1)] and index["expireAfterSeconds"] == 0
        document = raw["tenure"][collection_name].find_one({"_id": "a"})
        assert document is not None
        assert set(document) == {"_id", "fence", "token", "expires_at", "acquired_at", "host",
                                 "pid", "thread", "gc_at"}
        assert document["gc_at"] > document["expires_at"]
        lock.release()
        # Released: the document and its fence stay, the lease fields go.
        document = raw["tenure"][collection_name].find_one({"_id": "a"})
        assert document is not None and set(document) == {"_id", "fence", "gc_at"}
        assert document["fence"] == granted


def test_without_clean_up_there_is_no_index_and_no_date(
    mongodb_url: str, collection_name: str, raw: pymongo.MongoClient[dict[str, Any]]
) -> None:
    url = with_collection(mongodb_url, collection=collection_name, gc_after="none")
    with tenure.connect(url) as locks, locks.lock("a", ttl=5):
        pass
    assert "tenure_gc_at" not in raw["tenure"][collection_name].index_information()
    document = raw["tenure"][collection_name].find_one({"_id": "a"})
    assert document is not None and "gc_at" not in document


def test_clean_up_removes_only_long_unused_documents(
    mongodb_url: str, collection_name: str, raw: pymongo.MongoClient[dict[str, Any]]
) -> None:
    """gc_after counts from the end of the lease or the release, never from the grant; a
    removed document's name starts again above every fence it issued (the server's clock)."""
    url = with_collection(mongodb_url, collection=collection_name, gc_after="0.5")
    collection = raw["tenure"][collection_name]
    with tenure.connect(url) as locks:
        held = locks.lock("held", ttl=3)
        assert held.acquire()
        for _ in range(2):
            with locks.lock("unused", ttl=5) as unused:
                last = unused.fence
        time.sleep(1.5)
        # (The stand-in deletes expired documents when next touched; MongoDB within ~60 s.)
        assert collection.find_one({"_id": "unused"}) is None
        assert collection.find_one({"_id": "held"}) is not None
        assert held.owned()
        with locks.lock("unused", ttl=5) as again:
            assert again.fence is not None and last is not None and again.fence > last
        held.release()


PRIMITIVES = ("lock", "semaphore", "rwlock")


def _handle(locks: tenure.Locks, primitive: str, name: str) -> Any:
    if primitive == "lock":
        return locks.lock(name, ttl=5)
    if primitive == "semaphore":
        return locks.semaphore(name, limit=2, ttl=5)
    return locks.rwlock(name, ttl=5).write()


def _documents_of(collection_name: str, primitive: str) -> str:
    return collection_name if primitive == "lock" else f"{collection_name}.{primitive}s"


@pytest.mark.parametrize("primitive", PRIMITIVES)
def test_a_lost_document_does_not_restart_fences(
    mongodb_url: str, collection_name: str, raw: pymongo.MongoClient[dict[str, Any]],
    primitive: str,
) -> None:
    """A grant's fence is at least the server's clock in microseconds ($$NOW of the same
    write), so a name whose document is gone (deleted by hand here; lost with the server's
    data, or cleaned up) starts again above every fence it issued, never at 1."""
    collection = raw["tenure"][_documents_of(collection_name, primitive)]
    with tenure.connect(with_collection(mongodb_url, collection=collection_name)) as locks:
        handle = _handle(locks, primitive, "a")
        before = time.time()
        fences = []
        for _ in range(3):
            assert handle.acquire(blocking=False)
            fences.append(handle.fence)
            handle.release()
        assert fences == sorted(set(fences))
        # The floor is the server's clock (here the same host's, within a few seconds).
        assert abs(fences[0] / 1e6 - before) < 5
        document = collection.find_one({"_id": "a"})
        assert document is not None and document["fence"] == fences[-1]
        assert collection.delete_one({"_id": "a"}).deleted_count == 1
        assert handle.acquire(blocking=False)
        assert handle.fence > fences[-1]
        handle.release()


def test_a_lock_grants_fence_is_floored_by_the_same_writes_clock(
    mongodb_url: str, collection_name: str, raw: pymongo.MongoClient[dict[str, Any]]
) -> None:
    """The floor is $$NOW of the granting write itself: the fence is at least acquired_at
    (that write's $$NOW) in microseconds, and a burst within one millisecond still counts up."""
    collection = raw["tenure"][collection_name]
    with tenure.connect(with_collection(mongodb_url, collection=collection_name)) as locks:
        backend = locks.backend
        assert isinstance(backend, MongoDBStore)
        fences = []
        for index in range(20):
            fence = backend.acquire("a", LOCK, f"t{index}", 5.0, HOLDER)
            assert isinstance(fence, Grant)
            document = collection.find_one({"_id": "a"})
            assert document is not None
            acquired = document["acquired_at"].replace(tzinfo=datetime.UTC)
            assert fence.fence >= int(acquired.timestamp() * 1000) * 1000
            fences.append(fence.fence)
            assert backend.release(Kind.LOCK, "a", f"t{index}")
        assert all(later > earlier for earlier, later in itertools.pairwise(fences))


def test_a_semaphore_document_is_cleaned_up_only_when_unused(
    mongodb_url: str, collection_name: str, raw: pymongo.MongoClient[dict[str, Any]]
) -> None:
    """A document with a live permit is kept whatever gc_after; an unused one goes, and its
    name's next fence is still larger."""
    url = with_collection(mongodb_url, collection=collection_name, gc_after="0.3")
    collection = raw["tenure"][f"{collection_name}.semaphores"]
    with tenure.connect(url) as locks:
        held = locks.semaphore("held", limit=2, ttl=3)
        assert held.acquire()
        unused = locks.semaphore("unused", limit=2, ttl=5)
        for _ in range(2):
            assert unused.acquire()
            last = unused.fence
            unused.release()
        time.sleep(1.5)
        # (The stand-in deletes expired documents when next touched; MongoDB within ~60 s.)
        assert collection.find_one({"_id": "unused"}) is None
        assert collection.find_one({"_id": "held"}) is not None
        assert held.owned()
        assert unused.acquire()
        assert unused.fence is not None and last is not None and unused.fence > last
        unused.release()
        held.release()
    kept = with_collection(mongodb_url, collection=collection_name, gc_after="none")
    with tenure.connect(kept) as locks:
        semaphore = locks.semaphore("kept", limit=1, ttl=5)
        assert semaphore.acquire()
        semaphore.release()
    document = collection.find_one({"_id": "kept"})
    assert document is not None and "gc_at" not in document


def test_a_refused_acquire_writes_nothing(
    mongodb_url: str, collection_name: str, raw: pymongo.MongoClient[dict[str, Any]]
) -> None:
    with tenure.connect(with_collection(mongodb_url, collection=collection_name)) as locks:
        assert locks.lock("a", ttl=30).acquire()
    collection = raw["tenure"].get_collection(collection_name)
    before = collection.find_one({"_id": "a"})
    update = _documents.acquire_update("other-token", 30_000, HOLDER, 1000)
    result = collection.update_one(_documents.name_filter("a"), update)
    assert (result.matched_count, result.modified_count) == (1, 0)
    assert collection.find_one({"_id": "a"}) == before


def test_a_racing_upserts_duplicate_key_error_means_busy(
    mongodb_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """mongoeco serialises writes and never races two upserts; real MongoDB can."""

    def racing_upsert(*args: object, **kwargs: object) -> None:
        raise pymongo.errors.DuplicateKeyError("E11000 duplicate key error", 11000)

    with tenure.connect(mongodb_url) as locks:
        backend = locks.backend
        assert isinstance(backend, MongoDBStore)
        collection = backend.connection.collection(Kind.LOCK)
        monkeypatch.setattr(type(collection), "find_one_and_update", racing_upsert)
        assert backend.acquire(f"dup:{uuid.uuid4().hex}", LOCK, "t", 5.0, HOLDER) == Busy(None)
        lock = locks.lock(f"dup:{uuid.uuid4().hex}", ttl=5)
        assert lock.acquire(timeout=0.1) is False


def test_busy_reports_the_holders_time_left(mongodb_url: str) -> None:
    name = f"busy:{uuid.uuid4().hex}"
    with tenure.connect(mongodb_url) as locks:
        backend = locks.backend
        first = backend.acquire(name, LOCK, "holder", 3.0, HOLDER)
        assert isinstance(first, Grant)
        busy = backend.acquire(name, LOCK, "waiter", 3.0, HOLDER)
        assert isinstance(busy, Busy) and busy.ttl_left is not None
        assert 2.0 < busy.ttl_left <= 3.0
        time.sleep(0.5)
        later = backend.acquire(name, LOCK, "waiter", 3.0, HOLDER)
        assert isinstance(later, Busy) and later.ttl_left is not None
        assert 1.5 < later.ttl_left <= busy.ttl_left - 0.4
        # Same token again (a retried acquire): the same fence, a fresh lease.
        assert backend.acquire(name, LOCK, "holder", 3.0, HOLDER) == first
        assert backend.release(Kind.LOCK, name, "holder")
        second = backend.acquire(name, LOCK, "waiter", 3.0, HOLDER)
        assert isinstance(second, Grant) and second.fence > first.fence


def test_batched_renewals_say_which_were_refused(mongodb_url: str) -> None:
    prefix = f"batch:{uuid.uuid4().hex}:"
    with tenure.connect(mongodb_url) as locks:
        backend = locks.backend
        names = [prefix + str(i) for i in range(3)]
        for name in names:
            assert isinstance(backend.acquire(name, LOCK, "token-" + name, 5.0, HOLDER), Grant)
        renewals = [Renewal(name, "token-" + name, 5.0) for name in names]
        assert backend.extend_many(renewals) == [True, True, True]
        assert backend.break_leases(Kind.LOCK, names[1])
        wrong_token = Renewal(names[2], "not-the-token", 5.0)
        assert backend.extend_many([*renewals, wrong_token]) == [True, False, True, False]
        assert backend.extend_many([]) == []


def test_one_batch_of_renewals_may_mix_kinds(mongodb_url: str) -> None:
    """Each renewal names its kind: every kind's records are renewed in their own collection,
    and the answers come back in the order asked."""
    name = f"mixed:{uuid.uuid4().hex}"
    semaphore = LeaseSpec(Kind.SEMAPHORE, limit=2)
    reader = LeaseSpec(Kind.RWLOCK, mode=Mode.READ, queue_ttl=3.0)
    with tenure.connect(mongodb_url) as locks:
        backend = locks.backend
        for spec in (LOCK, semaphore, reader):
            assert isinstance(backend.acquire(name, spec, "t", 5.0, HOLDER), Grant)
        renewals = [Renewal(name, "t", 5.0, kind)
                    for kind in (Kind.RWLOCK, Kind.LOCK, Kind.SEMAPHORE)]
        assert backend.extend_many(renewals) == [True, True, True]
        assert backend.release(Kind.SEMAPHORE, name, "t")
        assert backend.extend_many([*renewals, Renewal(name, "u", 5.0, Kind.LOCK)]) == [
            True, True, False, False]


async def test_async_flavour(mongodb_url: str) -> None:
    prefix = f"async:{uuid.uuid4().hex}:"
    async with tenure.connect_async(mongodb_url) as locks:
        backend = locks.backend
        first = await backend.acquire(prefix + "a", LOCK, "t1", 5.0, HOLDER)
        assert isinstance(first, Grant)
        busy = await backend.acquire(prefix + "a", LOCK, "t2", 5.0, HOLDER)
        assert isinstance(busy, Busy) and busy.ttl_left is not None and busy.ttl_left > 4
        assert isinstance(await backend.acquire(prefix + "b", LOCK, "t3", 5.0, HOLDER), Grant)
        renewals = [Renewal(prefix + "a", "t1", 5.0), Renewal(prefix + "b", "t9", 5.0)]
        assert await backend.extend_many(renewals) == [True, False]
        assert await backend.owned(Kind.LOCK, prefix + "a", "t1")
        assert not await backend.owned(Kind.LOCK, prefix + "a", "t2")
        listed = await backend.list_records(Kind.LOCK, prefix)
        assert [info.name for info in listed] == [prefix + "a", prefix + "b"]
        assert all(info.holder == HOLDER for info in listed)
        assert await backend.break_leases(Kind.LOCK, prefix + "b")
        assert not await backend.release(Kind.LOCK, prefix + "b", "t3")
        assert await backend.release(Kind.LOCK, prefix + "a", "t1")
        info = await backend.inspect(Kind.LOCK, prefix + "a")
        assert info is not None and info.fence == first.fence and not info.held
        assert await backend.inspect(Kind.LOCK, prefix + "never") is None


def test_prefix_listing_is_exact(mongodb_url: str) -> None:
    """A range on _id, so regex and operator characters in a prefix are plain text."""
    base = f"prefix:{uuid.uuid4().hex}:"
    names = [base + suffix for suffix in ("a", "a.b", "a*", "a\U0010ffff", "b", ".*", "$x")]
    with tenure.connect(mongodb_url) as locks:
        backend = locks.backend
        for name in names:
            assert isinstance(backend.acquire(name, LOCK, "t", 5.0, HOLDER), Grant)
        assert [i.name for i in locks.list_locks(base)] == sorted(names)
        assert [i.name for i in locks.list_locks(base + "a")] == sorted(
            n for n in names if n.startswith(base + "a"))
        assert [i.name for i in locks.list_locks(base + ".*")] == [base + ".*"]
        assert [i.name for i in locks.list_locks(base + "a\U0010ffff")] == [base + "a\U0010ffff"]
        assert base + "a" in [i.name for i in locks.list_locks("")]
        with pytest.raises(tenure.InvalidArgumentType):
            locks.list_locks(b"prefix")  # type: ignore[arg-type]


# ---- election values ---------------------------------------------------------------------
#
# A tenure from before election values wrote lock documents without "value"/"value_token",
# and still acquires with the same pipeline and releases by removing only its own fields.
OLD_GRANTED_FIELDS = ("token", "expires_at", "acquired_at", "host", "pid", "thread")


def _old_release(collection: Any, name: str, token: str) -> None:
    result = collection.update_one(
        _documents.held_by(name, token), [{"$unset": list(OLD_GRANTED_FIELDS)}]
    )
    assert result.matched_count == 1


def _old_acquire(collection: Any, name: str, token: str, ttl_ms: int) -> None:
    update = _documents.acquire_update(token, ttl_ms, HOLDER, None)
    document = collection.find_one_and_update(
        _documents.name_filter(name), update, upsert=True,
        return_document=pymongo.ReturnDocument.AFTER,
    )
    assert document is not None and document["token"] == token


def test_a_collection_from_before_values_gains_them_in_place(
    mongodb_url: str, collection_name: str, raw: pymongo.MongoClient[dict[str, Any]]
) -> None:
    """Documents without the value fields (held live, or lapsed) read as "no value", and the
    next grant writes the value into the same document, continuing its fence."""
    collection = raw["tenure"][collection_name]
    now = datetime.datetime.now(datetime.UTC)
    old = {"fence": 7, "acquired_at": now, "host": "old-host", "pid": 9, "thread": "main"}
    collection.insert_one({"_id": "held", "token": "old", **old,
                           "expires_at": now + datetime.timedelta(seconds=1)})
    collection.insert_one({"_id": "lapsed", "token": "old", **old,
                           "expires_at": now - datetime.timedelta(seconds=1)})
    with tenure.connect(with_collection(mongodb_url, collection=collection_name)) as locks:
        held = locks.election("held", ttl=5)
        leader = held.leader()
        assert leader is not None and leader.value is None and leader.term == 7
        assert leader.holder == Holder("old-host", 9, "main")
        assert locks.election("lapsed", ttl=5).leader() is None
        for name in ("held", "lapsed"):
            # "held" waits out the old holder's lease, by the server's clock.
            leadership = locks.election(name, ttl=5).campaign(value=f"v-{name}", timeout=5)
            assert leadership.term > 7
            leader = locks.election(name, ttl=5).leader()
            assert leader is not None
            assert (leader.value, leader.term) == (f"v-{name}", leadership.term)
            document = collection.find_one({"_id": name})
            assert document is not None and document["value"] == f"v-{name}"
            leadership.resign()
            document = collection.find_one({"_id": name})
            assert document is not None and "value" not in document
            assert "value_token" not in document


def test_an_old_client_never_makes_a_stale_value_look_current(
    mongodb_url: str, collection_name: str, raw: pymongo.MongoClient[dict[str, Any]]
) -> None:
    """An old client neither writes nor removes the value: the leader's value stays in the
    document after the old client's release, its grant or a lapse, and is never shown with
    anybody else's lease, because it is tagged with the token that wrote it."""
    collection = raw["tenure"][collection_name]
    with tenure.connect(with_collection(mongodb_url, collection=collection_name)) as locks:
        backend = locks.backend
        assert isinstance(backend, MongoDBStore)
        # The leader's document, released by an old client (say, `tenure` of before).
        assert isinstance(backend.acquire("a", LeaseSpec(value="A"), "leader", 5.0, HOLDER), Grant)
        _old_release(collection, "a", "leader")
        assert collection.find_one({"_id": "a"})["value"] == "A"  # type: ignore[index]
        assert locks.election("a", ttl=5).leader() is None
        _old_acquire(collection, "a", "old", 5000)
        leader = locks.election("a", ttl=5).leader()
        assert leader is not None and leader.value is None
        info = locks.inspect("a")
        assert info is not None and info.value is None and info.holder == HOLDER
        # The former leader's token holds nothing now: its set_value changes nothing.
        assert backend.set_value("a", "leader", "stale") is False
        _old_release(collection, "a", "old")
        # The leader's lease lapses (no release at all); an old client's grant follows.
        assert isinstance(backend.acquire("a", LeaseSpec(value="B"), "next", 0.2, HOLDER), Grant)
        time.sleep(0.5)
        _old_acquire(collection, "a", "old2", 5000)
        document = collection.find_one({"_id": "a"})
        assert document is not None and (document["value"], document["value_token"]) == (
            "B", "next")
        leader = locks.election("a", ttl=5).leader()
        assert leader is not None and leader.value is None


def test_a_retry_keeps_the_value_and_set_value_needs_the_live_lease(
    mongodb_url: str, collection_name: str, raw: pymongo.MongoClient[dict[str, Any]]
) -> None:
    with tenure.connect(with_collection(mongodb_url, collection=collection_name)) as locks:
        backend = locks.backend
        assert isinstance(backend, MongoDBStore)
        first = backend.acquire("a", LeaseSpec(value="first"), "t", 5.0, HOLDER)
        assert isinstance(first, Grant)
        assert backend.set_value("a", "t", "proclaimed")
        # A retried campaign (its reply lost) keeps what was proclaimed since, and the fence.
        assert backend.acquire("a", LeaseSpec(value="first"), "t", 5.0, HOLDER) == first
        assert backend.inspect(Kind.LOCK, "a").value == "proclaimed"  # type: ignore[union-attr]
        # Busy: the other candidate's value is not written.
        assert isinstance(backend.acquire("a", LeaseSpec(value="u"), "u", 5.0, HOLDER), Busy)
        assert backend.set_value("a", "u", "u") is False
        assert backend.inspect(Kind.LOCK, "a").value == "proclaimed"  # type: ignore[union-attr]
        # A plain acquire's holder may set a value (tagged with its own token).
        assert isinstance(backend.acquire("b", LOCK, "p", 5.0, HOLDER), Grant)
        assert backend.inspect(Kind.LOCK, "b").value is None  # type: ignore[union-attr]
        assert backend.set_value("b", "p", "set")
        assert backend.inspect(Kind.LOCK, "b").value == "set"  # type: ignore[union-attr]
        # Lapsed: set_value changes nothing.
        assert isinstance(backend.acquire("c", LeaseSpec(value="c"), "t", 0.2, HOLDER), Grant)
        time.sleep(0.5)
        assert backend.set_value("c", "t", "late") is False
        document = raw["tenure"][collection_name].find_one({"_id": "c"})
        assert document is not None and document["value"] == "c"


@pytest.mark.parametrize("value", ["$where", "$$NOW", "{\"$gt\": 1}", "a.b", ""])
def test_election_values_are_data(mongodb_url: str, collection_name: str, value: str) -> None:
    """Stored by the acquire pipeline ($literal) and by set_value (a classic $set) as text."""
    with tenure.connect(with_collection(mongodb_url, collection=collection_name)) as locks:
        election = locks.election("e", ttl=5)
        leadership = election.campaign(value=value, timeout=5)
        assert election.leader().value == value  # type: ignore[union-attr]
        leadership.proclaim(value + "!")
        assert election.leader().value == value + "!"  # type: ignore[union-attr]
        leadership.resign()
