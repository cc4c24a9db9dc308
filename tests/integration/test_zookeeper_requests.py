"""How many requests tenure sends ZooKeeper for a cycle and a handoff (counted by operation
at each session's kazoo client), where the name's last fence is kept, and ``owned()`` while a
renewal of ours is still unanswered.

The counts are the backend's design (``_async/store.py``, "Requests"): an uncontended
acquire + release is three requests, as kazoo's Lock (create and list sent together, a
release multi that also keeps the fence on the name's node); a waiter woken by the delete
of the node just ahead takes the lock without listing the queue. Counts, not times: the
machine may be slow.
"""

from __future__ import annotations

import collections
import dataclasses
import threading
import time
import traceback
from collections.abc import Callable

import pytest

import tenure
from tenure.backends.zookeeper._nodes import encode_name
from tenure.backends.zookeeper._sync.store import ZooKeeperBackend

# Long enough that no renewal (a third of the ttl in) falls in a test: a renewal writes
# nodes, and the first also the name's fence, which would add requests to a count.
TTL = 300.0


class Requests:
    """The requests the given clients' ZooKeeper sessions send, by operation (a ``multi``
    counts once). Counted at each session's kazoo client rather than by ``_calls.SENT``,
    which counts the whole process: a previous test's client still at work in this worker
    (a renewal, a fence write) must not add to this test's counts. Each request's origin is
    kept, for the message of a count that fails."""

    OPERATIONS = ("create", "get", "set", "delete", "exists", "get_children")

    def __init__(self, *clients: tenure.Locks) -> None:
        self.sent: collections.Counter[str] = collections.Counter()
        self.origins: list[str] = []
        self._mutex = threading.Lock()  # kazoo's thread sends some of them
        for locks in clients:
            backend = locks.backend
            assert isinstance(backend, ZooKeeperBackend)
            client = backend.session.client()
            for operation in self.OPERATIONS:
                self._count(client, f"{operation}_async", operation)
            self._count(client, "transaction", "multi")

    def _count(self, client: object, method: str, operation: str) -> None:
        original = getattr(client, method)

        def counted(*args: object, **kwargs: object) -> object:
            with self._mutex:
                self.sent[operation] += 1
                self.origins.append(
                    f"{operation}:\n" + "".join(traceback.format_stack(limit=9)[:-1])
                )
            return original(*args, **kwargs)

        setattr(client, method, counted)

    def during(self, action: Callable[[], object]) -> Sent:
        with self._mutex:
            before, first = collections.Counter(self.sent), len(self.origins)
        action()
        with self._mutex:
            return Sent(collections.Counter(self.sent) - before, self.origins[first:])


@dataclasses.dataclass
class Sent:
    counts: collections.Counter[str]
    origins: list[str]

    def __str__(self) -> str:
        return f"{dict(self.counts)}, sent from:\n" + "\n".join(self.origins)


def test_an_uncontended_cycle_is_three_requests_and_its_release_one(
    zookeeper_url: str, name: str
) -> None:
    with tenure.connect(zookeeper_url) as locks:
        requests = Requests(locks)
        lock = locks.lock(name, ttl=TTL)
        assert lock.acquire()  # the first use makes the name's node
        lock.release()
        acquired = requests.during(lock.acquire)
        fence = lock.fence
        released = requests.during(lock.release)
        assert released.counts == {"multi": 1}, released
        assert acquired.counts == {"create": 1, "get_children": 1}, acquired
        info = locks.inspect(name)
        assert info is not None and not info.held and info.fence == fence


def test_a_first_try_fence_is_kept_once_renewed_or_broken(zookeeper_url: str, name: str) -> None:
    """A first try's fence reaches the name's node with its release, or its first renewal
    (its node may then end without a release: a session that ends), or a break."""
    with tenure.connect(zookeeper_url) as locks, tenure.connect(zookeeper_url) as other:
        backend = locks.backend
        assert isinstance(backend, ZooKeeperBackend)
        client = backend.session.client()
        renewed = locks.lock(name, ttl=TTL)
        assert renewed.acquire()
        renewed.extend()
        (held,) = [h for key, h in backend._held.items() if key[1] == name]
        assert held.fence_record is not None and held.fence_record.wait(60)
        client.delete(held.path)  # as the server does when the session ends
        info = locks.inspect(name)  # the same session: it sees its own writes
        assert info is not None and not info.held and info.fence == renewed.fence
        broken = locks.lock(f"{name}:broken", ttl=TTL)
        assert broken.acquire()
        assert other.break_lock(f"{name}:broken")
        info = other.inspect(f"{name}:broken")
        assert info is not None and not info.held and info.fence == broken.fence


def test_a_woken_waiter_takes_the_lock_without_listing_the_queue(
    zookeeper_url: str, name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with tenure.connect(zookeeper_url) as holding, tenure.connect(zookeeper_url) as waiting:
        backend = waiting.backend
        assert isinstance(backend, ZooKeeperBackend)
        # Only the watch wakes the waiter: no timed re-check that lists the queue anyway.
        monkeypatch.setattr(backend, "max_backoff", 3600.0)
        requests = Requests(holding, waiting)
        holder, waiter = holding.lock(name, ttl=TTL), waiting.lock(name, ttl=TTL)
        # The name's node first: a first try that makes it does not learn its version, and
        # its release then reads it (one request more) before keeping its fence on it.
        assert holder.acquire()
        holder.release()
        assert holder.acquire()
        granted = threading.Event()

        def wait_for_it() -> None:
            if waiter.acquire():
                granted.set()

        thread = threading.Thread(target=wait_for_it)
        watches = requests.sent["exists"]
        thread.start()
        try:
            _wait_until_queued(holding, name, requests, watches)
            fence = holder.fence

            def hand_over() -> None:
                holder.release()
                granted.wait(60)

            handoff = requests.during(hand_over)
            assert granted.is_set()
            # The release (one multi); the waiter takes the lock with its node as it is,
            # and reads the name's node in the background (its release keeps the fence
            # there): no write, no list.
            assert handoff.counts == {"multi": 1, "get": 1}, handoff
            assert waiter.fence is not None and fence is not None and waiter.fence > fence
        finally:
            thread.join(60)
            if granted.is_set():
                waiter.release()


def test_a_waiter_woken_with_nothing_ahead_lists_once_and_writes_nothing(
    zookeeper_url: str, name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The second waiter's list of nodes ahead, made while the first holder held, named two
    nodes: woken by the delete of the nearer one, it lists the queue once, finds nothing
    ahead, and is granted with its node as it is (no rewrite to judge nodes ahead by: there
    are none)."""
    with (
        tenure.connect(zookeeper_url) as holding,
        tenure.connect(zookeeper_url) as first,
        tenure.connect(zookeeper_url) as second,
    ):
        for locks in (first, second):
            monkeypatch.setattr(locks.backend, "max_backoff", 3600.0)
        requests = Requests(holding, first, second)
        holder = holding.lock(name, ttl=TTL)
        one, two = first.lock(name, ttl=TTL), second.lock(name, ttl=TTL)
        assert holder.acquire()
        granted = {id(one): threading.Event(), id(two): threading.Event()}

        def wait_for(lock: tenure.Lock) -> None:
            if lock.acquire():
                granted[id(lock)].set()

        threads = [threading.Thread(target=wait_for, args=(lock,)) for lock in (one, two)]
        watches = requests.sent["exists"]
        threads[0].start()
        _wait_until_queued(holding, name, requests, watches)
        watches = requests.sent["exists"]
        threads[1].start()
        _wait_until_queued(holding, name, requests, watches, nodes=3)
        try:
            holder.release()
            assert granted[id(one)].wait(60)
            fence = one.fence
            backend = first.backend
            assert isinstance(backend, ZooKeeperBackend)
            (held,) = [h for key, h in backend._held.items() if key[1] == name]
            # Its fence, written in the background after its grant, is not counted.
            assert held.fence_record is None or held.fence_record.wait(60)

            def hand_over() -> None:
                one.release()
                granted[id(two)].wait(60)

            handoff = requests.during(hand_over)
            assert granted[id(two)].is_set()
            # The release's multi, the waiter's list and its read of the name's node.
            assert handoff.counts == {"multi": 1, "get_children": 1, "get": 1}, handoff
            assert two.fence is not None and fence is not None and two.fence > fence
        finally:
            for thread in threads:
                thread.join(60)
            if granted[id(two)].is_set():
                two.release()


def _wait_until_queued(
    locks: tenure.Locks, name: str, requests: Requests, watches: int, *, nodes: int = 2
) -> None:
    """Until ``nodes`` nodes (the holder's, the waiters') are under the lock's and the
    newest waiter has sent the watch on the node ahead of it (an ``exists``: the count of
    them passes ``watches``, read before that waiter started), so that none of its queueing
    falls in a count that follows."""
    backend = locks.backend
    assert isinstance(backend, ZooKeeperBackend)
    client = backend.session.client()
    parent = f"/{backend.settings.namespace}/lock/{encode_name(name)}"
    deadline = time.monotonic() + 60
    while len(client.get_children(parent)) < nodes or requests.sent["exists"] <= watches:
        assert time.monotonic() < deadline, "the waiter never queued and watched"
        time.sleep(0.02)


def test_owned_while_a_renewal_of_ours_is_unanswered(zookeeper_url: str, name: str) -> None:
    """The node at a newer version than the holder last knew is a write of its own whose
    answer it has not read yet (only the holder writes its node): still owned."""
    with tenure.connect(zookeeper_url) as locks:
        lock = locks.lock(name, ttl=TTL)
        assert lock.acquire()
        backend = locks.backend
        assert isinstance(backend, ZooKeeperBackend)
        (held,) = [h for key, h in backend._held.items() if key[1] == name]
        client = backend.session.client()
        # The renewal's write, landed on the server, its answer not yet read.
        client.set(held.path, held.record.encode(), version=held.version)
        assert lock.owned()
        lock.release()
