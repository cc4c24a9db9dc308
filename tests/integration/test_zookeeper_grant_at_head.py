"""A lock's waiter granted at the head of the queue on ZooKeeper takes the lock before the
multi that makes its node the holder's is answered (``_async/attempt.py``, "Granted at the
head, written after"). When that multi finds the lease gone, the holder is told: ``lost``
and ``on_lost`` through the doubt listener, ``check()`` and ``release()`` raising LockLost."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from typing import Any

import pytest

import tenure
from tenure.backends.zookeeper._leases import QUEUE_TTL
from tenure.backends.zookeeper._nodes import Record, encode_name
from tenure.backends.zookeeper._sync.store import ZooKeeperBackend

TTL = 30.0


def _grant_at_head(
    zookeeper_url: str, name: str, monkeypatch: pytest.MonkeyPatch,
    before_the_multi: Any,
) -> None:
    """The waiter queued behind a holder is granted at the head; ``before_the_multi(path)``
    runs in the waiter's thread just before its grant's multi is sent. Then the lease must be
    reported lost, and the waiter's node gone."""
    with tenure.connect(zookeeper_url) as holding, tenure.connect(zookeeper_url) as waiting:
        backend = waiting.backend
        assert isinstance(backend, ZooKeeperBackend)
        session = backend.session
        original = session.commit_soon
        parent = f"/{backend.settings.namespace}/lock/{encode_name(name)}"

        def commit_soon(operations: Sequence[tuple[Any, ...]]) -> Any:
            first = operations[0]
            if first[0] == "set_data" and first[1].startswith(f"{parent}/"):
                before_the_multi(first[1])
            return original(operations)

        monkeypatch.setattr(session, "commit_soon", commit_soon)
        holder = holding.lock(name, ttl=TTL)
        lost = threading.Event()
        waiter = waiting.lock(name, ttl=TTL, renew=True, on_lost=lambda _: lost.set())
        assert holder.acquire()
        acquired: list[bool] = []
        thread = threading.Thread(target=lambda: acquired.append(waiter.acquire(timeout=60)))
        thread.start()
        client = holding.backend.session.client()  # type: ignore[attr-defined]
        deadline = time.monotonic() + 60
        while True:  # until the waiter's place is written
            children = client.get_children(parent)
            if len(children) == 2:
                data, _ = client.get(f"{parent}/{max(children, key=lambda n: n[-10:])}")
                if Record.decode(data).queued:
                    break
            assert time.monotonic() < deadline, "the waiter never queued"
            time.sleep(0.02)
        holder.release()
        thread.join(60)
        assert acquired == [True]
        assert lost.wait(5), "the lost grant was not reported (the renewal is 10 s away)"
        with pytest.raises(tenure.LockLost):
            waiter.check()
        with pytest.raises(tenure.LockLost):
            waiter.release()
        deadline = time.monotonic() + 10
        while client.get_children(parent):  # deleted without waiting for the answer
            assert time.monotonic() < deadline, "the lost grant's node stayed"
            time.sleep(0.02)
        info = holding.inspect(name)
        assert info is not None and not info.held


def test_a_grant_whose_node_went_first_is_lost(
    zookeeper_url: str, name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The node deleted before the multi lands (broken, or its session ended): the multi
    fails whole, and the lease is lost."""
    with tenure.connect(zookeeper_url) as breaking:
        client = breaking.backend.session.client()  # type: ignore[attr-defined]
        _grant_at_head(zookeeper_url, name, monkeypatch, client.delete)


def test_a_grant_whose_place_lapsed_first_is_lost(
    zookeeper_url: str, name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The multi lands after the place's ttl has run out by the server's clock (a contender
    may have passed it): written, it finds that lapse, the node goes, and the lease is lost;
    meanwhile ``check()`` already doubts it (the multi unanswered past the place's trust)."""
    _grant_at_head(zookeeper_url, name, monkeypatch,
                   lambda _: time.sleep(QUEUE_TTL + 1.0))
