"""A lock handed from one process to the next on ZooKeeper without a write by the waiter
(``_async/attempt.py``, "Granted from the queue"): the waiter's node, queued, carries the ttl
it asked for and counts as the holder's once no node is left ahead of it. Its queue ttl
running out must then not free the name; a place whose queue ttl ran out before its turn
must never be granted as it is.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

import tenure
from tenure.backends.zookeeper._leases import QUEUE_TTL
from tenure.backends.zookeeper._nodes import Record, encode_name
from tenure.backends.zookeeper._sync.attempt import ZooKeeperAttempt
from tenure.backends.zookeeper._sync.store import ZooKeeperBackend

TTL = 300.0
"""No renewal (a third of the ttl in) falls in a test: the waiter's node stays as it was
queued, unless a step under test writes it."""


def _nodes(locks: tenure.Locks, name: str) -> Iterator[tuple[str, Record, object]]:
    """The lock's nodes, oldest first: each one's name, record and stat."""
    backend = locks.backend
    assert isinstance(backend, ZooKeeperBackend)
    client: KazooClient = backend.session.client()
    parent = f"/{backend.settings.namespace}/lock/{encode_name(name)}"
    for node in sorted(client.get_children(parent), key=lambda n: int(n.rpartition("-")[2])):
        try:
            data, stat = client.get(f"{parent}/{node}")
        except NoNodeError:
            continue  # deleted since the list (a first try refused)
        yield node, Record.decode(data), stat


def _queued(locks: tenure.Locks, name: str) -> None:
    """Until the holder's node and a waiter's node, queued, are under the lock (not the
    waiter's first try's node, deleted once refused)."""
    deadline = time.monotonic() + 60
    while not [record for _, record, _ in list(_nodes(locks, name))[1:] if record.queued]:
        assert time.monotonic() < deadline, "the waiter never queued"
        time.sleep(0.02)


def test_a_waiter_granted_from_the_queue_holds_past_its_queue_ttl(
    zookeeper_url: str, name: str
) -> None:
    """Granted with its node as it is (still marked queued, its queue ttl in it), the
    waiter holds the lock by the ttl it asked for: past the queue ttl, a contender is
    refused, ``inspect`` shows the waiter holding with its fence, and the release leaves
    that fence on the name."""
    with (
        tenure.connect(zookeeper_url) as holding,
        tenure.connect(zookeeper_url) as waiting,
        tenure.connect(zookeeper_url) as other,
    ):
        holder, waiter = holding.lock(name, ttl=TTL), waiting.lock(name, ttl=TTL)
        assert holder.acquire()
        granted = threading.Event()

        def wait_for_it() -> None:
            if waiter.acquire(timeout=60):
                granted.set()

        thread = threading.Thread(target=wait_for_it)
        thread.start()
        try:
            _queued(holding, name)
            holder.release()
            assert granted.wait(60)
            ((_, record, stat),) = _nodes(other, name)
            assert record.queued and record.asks_ms == TTL * 1000  # granted as it is
            assert waiter.fence == stat.czxid  # type: ignore[attr-defined]
            # Past its queue ttl by the server's clock: the node is not written meanwhile.
            time.sleep(QUEUE_TTL * 1.5)
            assert not other.lock(name, ttl=TTL).acquire(blocking=False)
            info = other.inspect(name)
            assert info is not None and info.held and info.fence == waiter.fence
            assert info.holder == record.holder
            assert waiter.owned()
            ((_, record, _),) = _nodes(other, name)
            assert record.queued  # nothing above wrote it
        finally:
            thread.join(60)
        fence = waiter.fence
        waiter.release()
        info = other.inspect(name)
        assert info is not None and not info.held and info.fence == fence


def test_a_place_whose_queue_ttl_ran_out_before_its_turn_is_not_granted(
    zookeeper_url: str, name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The waiter stalls once the holder has released, writing nothing (a paused process),
    for longer than its queue ttl: its place lapsed before it took its turn, so it must not
    take the lock with that node; it joins again at the back and is granted a new one."""
    with tenure.connect(zookeeper_url) as holding, tenure.connect(zookeeper_url) as waiting:
        holder, waiter = holding.lock(name, ttl=TTL), waiting.lock(name, ttl=TTL)
        assert holder.acquire()
        released = threading.Event()
        stalled = threading.Event()
        wait_in_place = ZooKeeperAttempt.wait_in_place

        def stalling(self: ZooKeeperAttempt, place: object, timeout: float) -> None:
            wait_in_place(self, place, timeout)  # type: ignore[arg-type]
            if released.is_set() and not stalled.is_set():
                stalled.set()
                time.sleep(QUEUE_TTL * 1.5)

        monkeypatch.setattr(ZooKeeperAttempt, "wait_in_place", stalling)
        granted = threading.Event()

        def wait_for_it() -> None:
            if waiter.acquire(timeout=60):
                granted.set()

        thread = threading.Thread(target=wait_for_it)
        thread.start()
        try:
            _queued(holding, name)
            place = list(_nodes(holding, name))[1][2]  # the holder's node, then the waiter's
            released.set()
            holder.release()
            assert granted.wait(60)
        finally:
            thread.join(60)
        assert stalled.is_set()
        assert waiter.fence is not None and waiter.fence > place.czxid  # type: ignore[attr-defined]
        waiter.release()
