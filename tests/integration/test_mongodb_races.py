"""MongoDB "done means": exclusion under a thread race, strictly increasing fences, and names
that look like query operators staying plain data. Against the mongoeco stand-in."""

from __future__ import annotations

import itertools
import os
import threading
import uuid

import pymongo
import pytest

import tenure
from tenure._types import Grant, Kind, LeaseSpec
from tests.integration.processes import finish, worker

pytestmark = pytest.mark.mongodb

THREADS = 32
# The issue asks for 1,000 rounds; mongoeco serves a few hundred writes a second, so they take
# a minute or two. They run as PARTS tests of ROUNDS / PARTS rounds each, which pytest-xdist
# spreads over its workers (each with its own server): the same rounds, a quarter of the
# suite's longest test. TENURE_MONGODB_RACE_ROUNDS shortens them for a quick local run.
ROUNDS = int(os.environ.get("TENURE_MONGODB_RACE_ROUNDS", "1000"))
PARTS = 4


@pytest.mark.slow
@pytest.mark.parametrize("part", range(PARTS))
def test_32_threads_race_for_a_fresh_lock_exactly_one_wins_each_round(
    mongodb_url: str, part: int
) -> None:
    """Each round: a never-used name, 32 threads released together by a barrier, each with
    its own handle trying once. Exactly one may win; it releases before the next round."""
    run = uuid.uuid4().hex
    # A collection of its own: mongoeco's writes slow down with every document of theirs
    # (tests.servers.mongodb.mongodb_collection_url), and each round leaves one behind.
    url = f"{mongodb_url}&collection=race{run[:16]}"
    rounds = ROUNDS // PARTS + (part < ROUNDS % PARTS)
    winners_per_round = [0] * rounds
    fences = [0] * rounds
    errors: list[BaseException] = []
    start = threading.Barrier(THREADS)
    end = threading.Barrier(THREADS)
    mutex = threading.Lock()

    with tenure.connect(url, maxPoolSize=THREADS) as locks:

        def racer() -> None:
            try:
                for round_number in range(rounds):
                    lock = locks.lock(f"race:{run}:{round_number}", ttl=30)
                    start.wait()
                    won = lock.acquire(blocking=False)
                    if won:
                        with mutex:
                            winners_per_round[round_number] += 1
                            fences[round_number] = lock.fence or 0
                    end.wait()  # everyone has tried before the winner lets go
                    if won:
                        lock.release()
            except BaseException as exc:
                errors.append(exc)
                start.abort()
                end.abort()

        threads = [threading.Thread(target=racer, name=f"racer-{i}") for i in range(THREADS)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

    assert not errors, errors[0]
    assert winners_per_round == [1] * rounds
    # One grant per fresh name: each name's document holds the winner's fence, no other.
    with tenure.connect(url) as locks:
        recorded = [locks.inspect(f"race:{run}:{number}") for number in range(rounds)]
    assert [info.fence if info else None for info in recorded] == fences


def test_fences_strictly_increase_over_1000_acquisitions(mongodb_collection_url: str) -> None:
    """Four processes one after another, 250 acquire/release cycles each."""
    name = f"fences:{uuid.uuid4().hex}"
    seen: list[int] = []
    for _ in range(4):
        seen += [int(f) for f in
                 finish(worker("fences", mongodb_collection_url, name, "250")).split()]
    assert len(seen) == 1000
    assert all(later > earlier for earlier, later in itertools.pairwise(seen))


OPERATOR_LOOKING_NAMES = [
    "$where",
    '{"$ne": 1}',
    "$gt",
    "$expr",
    "$$NOW",
    "$fence",
    "a.b.$[]",
    "{'$where': 'sleep(1000) || true'}",
    "^.*$",
    " ",
]


def test_operator_looking_names_are_plain_strings(mongodb_url: str) -> None:
    prefix = f"ops:{uuid.uuid4().hex}:"
    with tenure.connect(mongodb_url) as locks:
        other = locks.lock(prefix + "other", ttl=30)
        assert other.acquire(blocking=False)
        held = []
        for text in OPERATOR_LOOKING_NAMES:
            # As a whole name, and after a prefix: each is its own lock, untouched by others.
            for name in (text, prefix + text):
                lock = locks.lock(name, ttl=30)
                assert lock.acquire(blocking=False), name
                assert lock.fence is not None
                held.append(lock)
                assert not locks.lock(name, ttl=30).acquire(blocking=False), name
                info = locks.inspect(name)
                assert info is not None and info.name == name and info.held
        assert other.owned()
        listed = [info.name for info in locks.list_locks(prefix)]
        assert listed == sorted([prefix + "other", *(prefix + t for t in OPERATOR_LOOKING_NAMES)])
        for lock in held:
            lock.release()
        other.release()

    # In the database each name is exactly one document, its _id the name's text.
    client: pymongo.MongoClient[dict[str, object]] = pymongo.MongoClient(mongodb_url)
    try:
        collection = client["tenure"]["locks"]
        for text in OPERATOR_LOOKING_NAMES:
            documents = list(collection.find({"_id": {"$eq": prefix + text}}))
            assert [d["_id"] for d in documents] == [prefix + text]
        assert collection.count_documents({"_id": {"$regex": f"^{prefix}"}}) == len(
            OPERATOR_LOOKING_NAMES) + 1
    finally:
        client.close()


@pytest.mark.parametrize(
    "bad_name", [{"$ne": 1}, {"$where": "1"}, ["$where"], 1, None, b"$where"]
)
def test_names_that_are_not_strings_are_rejected(mongodb_url: str, bad_name: object) -> None:
    with tenure.connect(mongodb_url) as locks:
        with pytest.raises(tenure.InvalidArgumentType):
            locks.lock(bad_name)  # type: ignore[arg-type]
        # The backend checks too, for callers that reach it directly.
        holder = tenure.Holder("host", 1, "thread")
        with pytest.raises(tenure.InvalidArgumentType):
            locks.backend.acquire(bad_name, LeaseSpec(), "token", 1.0, holder)  # type: ignore[arg-type]
        with pytest.raises(tenure.InvalidArgumentType):
            locks.backend.inspect(Kind.LOCK, bad_name)  # type: ignore[arg-type]


def test_holder_text_is_stored_as_text(mongodb_url: str) -> None:
    """Host, thread and token reach the pipeline as values, never as field paths."""
    name = f"holder:{uuid.uuid4().hex}"
    with tenure.connect(mongodb_url) as locks:
        holder = tenure.Holder("$host", 7, "$$NOW")
        first = locks.backend.acquire(name, LeaseSpec(), "$token", 5.0, holder)
        assert isinstance(first, Grant)
        info = locks.inspect(name)
        assert info is not None and info.holder == holder
        assert locks.backend.owned(Kind.LOCK, name, "$token")
        assert locks.backend.acquire(name, LeaseSpec(), "$token", 5.0, holder) == first  # a retry
        assert locks.backend.release(Kind.LOCK, name, "$token")
        info = locks.inspect(name)
        assert info is not None and info.fence == first.fence and not info.held
