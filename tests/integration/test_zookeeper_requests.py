"""How many requests tenure sends ZooKeeper for a cycle and a handoff (counted by operation
at each session's kazoo client), where the name's last fence is kept, and ``owned()`` while a
renewal of ours is still unanswered.

The counts are the backend's design (``_async/store.py``, "Requests"): an uncontended
acquire + release is three requests, as kazoo's Lock (create and list sent together, a
release multi that also keeps the fence on the name's node); a blocking first try keeps its
refused node as its place; a waiter woken by the delete of the node just ahead takes the
lock with one multi it does not wait for, without listing the queue. Counts, not times: the
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
from tenure.backends.zookeeper._nodes import Record, encode_name, sequence_of
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


def test_a_blocking_first_try_keeps_its_node_as_the_waiters_place(
    zookeeper_url: str, name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Refused, a blocking lock's first try does not delete its node to make another at the
    back: its wait rewrites it as queued and watches the node ahead in one round trip."""
    with tenure.connect(zookeeper_url) as holding, tenure.connect(zookeeper_url) as waiting:
        backend = waiting.backend
        assert isinstance(backend, ZooKeeperBackend)
        monkeypatch.setattr(backend, "max_backoff", 3600.0)
        holder, waiter = holding.lock(name, ttl=TTL), waiting.lock(name, ttl=TTL)
        assert holder.acquire()
        requests = Requests(waiting)
        thread = threading.Thread(target=waiter.acquire)
        thread.start()
        try:
            _wait_until_queued(holding, name)
            # The create and the list (with a read of the name's node, which this process
            # never wrote: for the fence), the read of the node ahead that ranks it, then
            # the rewrite and the watch (a read).
            assert requests.sent == {"create": 1, "get_children": 1, "get": 3, "set": 1}, (
                Sent(requests.sent, requests.origins)
            )
            info = holding.inspect(name)
            assert info is not None and info.fence == holder.fence
        finally:
            holder.release()
            thread.join(60)
        waiter.release()


def test_a_woken_waiter_takes_the_lock_without_waiting_for_a_request(
    zookeeper_url: str, name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The waiter's node is first once the holder's goes: granted by its watch alone, it
    sends one multi (its node the holder's, the fence on the name's node) without waiting
    for its answer; inspect names it the holder either way."""
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
        thread.start()
        try:
            _wait_until_queued(holding, name)
            fence = holder.fence

            def hand_over() -> None:
                holder.release()
                granted.wait(60)

            handoff = requests.during(hand_over)
            assert granted.is_set()
            info = holding.inspect(name)
            assert info is not None and info.held and info.fence == waiter.fence
            # The release's multi, and the grant's.
            assert handoff.counts == {"multi": 2}, handoff
            assert waiter.fence is not None and fence is not None and waiter.fence > fence
            granted_fence = waiter.fence
        finally:
            thread.join(60)
            if granted.is_set():
                waiter.release()
        info = holding.inspect(name)
        assert info is not None and not info.held and info.fence == granted_fence


def test_a_waiter_that_saw_the_node_ahead_granted_takes_the_lock_without_listing(
    zookeeper_url: str, name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The second waiter's ranking, made while the first holder held, named two nodes ahead,
    and it watches the nearer, the first waiter's. That node's grant rewrites it as the
    holder's, and the second waiter sets its watch again by a read that shows it: nothing
    is ahead of a granted node, so once it goes, the second waiter is first without listing
    the queue."""
    with (
        tenure.connect(zookeeper_url) as holding,
        tenure.connect(zookeeper_url) as first,
        tenure.connect(zookeeper_url) as second,
    ):
        for locks in (first, second):
            monkeypatch.setattr(locks.backend, "max_backoff", 3600.0)
        requests = Requests(holding, first, second)
        seconds = Requests(second)
        holder = holding.lock(name, ttl=TTL)
        one, two = first.lock(name, ttl=TTL), second.lock(name, ttl=TTL)
        assert holder.acquire()
        granted = {id(one): threading.Event(), id(two): threading.Event()}

        def wait_for(lock: tenure.Lock) -> None:
            if lock.acquire():
                granted[id(lock)].set()

        threads = [threading.Thread(target=wait_for, args=(lock,)) for lock in (one, two)]
        threads[0].start()
        _wait_until_queued(holding, name)
        threads[1].start()
        _wait_until_queued(holding, name, nodes=3)
        try:
            reads = seconds.sent["get"]
            holder.release()
            assert granted[id(one)].wait(60)
            fence = one.fence
            deadline = time.monotonic() + 60
            while seconds.sent["get"] == reads:  # the read that sets the watch again
                assert time.monotonic() < deadline, "the second waiter never watched again"
                time.sleep(0.02)
            time.sleep(0.2)  # its answer read (the release below waits for the grant's)

            def hand_over() -> None:
                one.release()
                granted[id(two)].wait(60)

            handoff = requests.during(hand_over)
            assert granted[id(two)].is_set()
            assert handoff.counts == {"multi": 2}, handoff
            assert two.fence is not None and fence is not None and two.fence > fence
        finally:
            for thread in threads:
                thread.join(60)
            if granted[id(two)].is_set():
                two.release()


def _wait_until_queued(locks: tenure.Locks, name: str, *, nodes: int = 2) -> None:
    """Until ``nodes`` nodes (the holder's, the waiters') are under the lock's and the
    newest is written as a waiter's place: its waiter sends the watch on the node ahead
    with that write (a kept first try's node) or before it ends its wait, so that none of
    its queueing falls in a count that follows."""
    backend = locks.backend
    assert isinstance(backend, ZooKeeperBackend)
    client = backend.session.client()
    parent = f"/{backend.settings.namespace}/lock/{encode_name(name)}"
    deadline = time.monotonic() + 60
    while True:
        children = sorted(client.get_children(parent), key=sequence_of)
        if len(children) >= nodes:
            data, _ = client.get(f"{parent}/{children[-1]}")
            if Record.decode(data).queued:
                return
        assert time.monotonic() < deadline, "the waiter never queued"
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
