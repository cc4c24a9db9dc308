"""A lock's waiter on etcd found at the head of the queue (by a wait that saw every key ahead
deleted, or by a read; never a write) takes the lock before the transaction that moves its
key onto its holder lease is answered
(``_async/attempt.py``, "Granted at the head"). The move finding the key gone is reported
(``on_lost``, ``check()``, ``release()``); a release before the answer waits for it; fences
never go back; a waiter that gave up ahead of us does not make us the head."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

import tenure
from tenure._types import Busy, Grant, Kind
from tenure.backends.etcd._keys import b64, name_prefix, prefix_end
from tenure.backends.etcd._sync.store import EtcdBackend
from tests.integration.etcd_support import HOLDER, LOCK, released_during_wait, token

pytestmark = pytest.mark.etcd

TTL = 30.0


def _queued_behind(etcd_store: EtcdBackend, name: str, holder: str) -> tuple[Any, Busy]:
    """A waiter's attempt queued behind ``holder``'s grant, watching it."""
    attempt = etcd_store.attempt(name, LOCK, token(), TTL, HOLDER)
    busy = attempt.try_once()
    assert isinstance(busy, Busy)
    attempt.wait(0.01, busy)  # joins the queue
    return attempt, busy


def test_a_waiter_at_the_head_is_granted_at_once_and_its_move_follows(
    etcd_store: EtcdBackend, name: str
) -> None:
    holder = token()
    assert isinstance(etcd_store.acquire(name, LOCK, holder, TTL, HOLDER), Grant)
    attempt, busy = _queued_behind(etcd_store, name, holder)
    released_during_wait(etcd_store, attempt, busy, holder, name)
    sent: list[Any] = []
    post = etcd_store.gateway.post

    def recording(path: str, body: Any, **options: Any) -> Any:
        sent.append((path, body))
        return post(path, body, **options)

    etcd_store.gateway.post = recording  # type: ignore[method-assign]
    try:
        granted = attempt.try_once()
        assert isinstance(granted, Grant)
        held = etcd_store.granted(Kind.LOCK, name, attempt.token)
        assert held is not None and held.granting is not None
        assert held.granting.wait(10) and held.granting.get() is None
    finally:
        etcd_store.gateway.post = post  # type: ignore[method-assign]
    # Its wait saw the key ahead go: the step that granted it sent only the move.
    assert [path for path, _ in sent] == ["/v3/kv/txn"], sent
    assert "compare" in sent[0][1]
    info = etcd_store.inspect(Kind.LOCK, name)
    assert info is not None and info.holder == HOLDER and info.fence == granted.fence
    assert etcd_store.release(Kind.LOCK, name, attempt.token)


def test_a_waiter_that_gave_up_ahead_does_not_make_us_the_head(
    etcd_store: EtcdBackend, name: str
) -> None:
    holder = token()
    assert isinstance(etcd_store.acquire(name, LOCK, holder, TTL, HOLDER), Grant)
    ahead, _ = _queued_behind(etcd_store, name, holder)
    behind, busy = _queued_behind(etcd_store, name, holder)  # watches ``ahead``'s key
    ahead.leave()  # gives up: its key goes, the holder's stays
    behind.wait(30, busy)  # woken by that deletion
    assert isinstance(behind.try_once(), Busy)
    assert etcd_store.granted(Kind.LOCK, name, behind.token) is None
    assert etcd_store.release(Kind.LOCK, name, holder)
    behind.wait(30, busy)
    assert isinstance(behind.try_once(), Grant)
    assert etcd_store.release(Kind.LOCK, name, behind.token)


def test_fences_never_go_back_across_grants_at_the_head(etcd_url: str, name: str) -> None:
    """A holder granted by a read after we queued (its move landing after our place was
    written), then us, then a slot reused: each fence above the last, and ``inspect`` shows
    each holder's once its move landed."""
    with tenure.connect(etcd_url) as a, tenure.connect(etcd_url) as b, \
            tenure.connect(etcd_url) as c:
        first = a.lock(name, ttl=TTL)
        second = b.lock(name, ttl=TTL)
        third = c.lock(name, ttl=TTL)
        assert first.acquire()
        fences = [first.fence]
        results: dict[str, bool] = {}
        threads = [threading.Thread(target=lambda lock=lock, key=key: results.__setitem__(
            key, lock.acquire(timeout=60))) for key, lock in (("b", second), ("c", third))]
        threads[0].start()
        _wait_for_keys(a, name, 2)
        threads[1].start()
        _wait_for_keys(a, name, 3)
        first.release()
        threads[0].join(60)
        assert results["b"]
        fences.append(second.fence)
        second.release()  # waits for its move, then deletes
        info = a.inspect(name)
        threads[1].join(60)
        assert results["c"]
        fences.append(third.fence)
        # c was granted at the head the moment b's key went, and its move may have landed
        # before that inspect (ci1: it had): b's fence or c's, then c's once its move lands.
        assert info is not None and info.fence in fences[-2:], (info, fences)
        _until_shown(a, name, fences[-1])
        thread = threading.Thread(target=lambda: results.__setitem__("b2", second.acquire(
            timeout=60)))
        thread.start()  # b's slot reused, behind c
        _wait_for_keys(a, name, 2)
        third.release()
        thread.join(60)
        assert results["b2"]
        fences.append(second.fence)
        second.release()
        info = a.inspect(name)
        assert info is not None and info.fence == fences[-1]
        assert fences == sorted(fences) and len(set(fences)) == len(fences), fences


def _until_shown(client: Any, name: str, fence: int) -> None:
    """Until ``inspect`` shows the holder's ``fence`` (its move has landed)."""
    deadline = time.monotonic() + 30
    while (info := client.inspect(name)) is None or info.fence != fence:
        assert time.monotonic() < deadline, (info, fence)
        time.sleep(0.02)


def _wait_for_keys(client: Any, name: str, count: int) -> None:
    """Until the lock ``name`` has ``count`` keys (holder and places)."""
    backend = client.backend
    prefix = name_prefix(backend.settings.namespace, Kind.LOCK, name)
    deadline = time.monotonic() + 30
    while len(backend.gateway.post("/v3/kv/range", {
        "key": b64(prefix), "range_end": b64(prefix_end(prefix)), "keys_only": True,
    }).get("kvs", [])) < count:
        assert time.monotonic() < deadline, "the waiter never queued"
        time.sleep(0.02)


def _grant_lost(etcd_url: str, name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The waiter's key is deleted just before its move is sent (as a break, or its queue
    lease lapsing, would): the grant must be reported lost."""
    with tenure.connect(etcd_url) as holding, tenure.connect(etcd_url) as waiting:
        backend = waiting.backend
        assert isinstance(backend, EtcdBackend)
        original = backend.move_soon

        def move_soon(lock_name: str, held: Any, *args: Any) -> None:
            holding.backend.gateway.post(  # type: ignore[attr-defined]
                "/v3/kv/deleterange", {"key": b64(held.key)})
            original(lock_name, held, *args)

        monkeypatch.setattr(backend, "move_soon", move_soon)
        holder = holding.lock(name, ttl=TTL)
        lost = threading.Event()
        waiter = waiting.lock(name, ttl=TTL, renew=True, on_lost=lambda _: lost.set())
        assert holder.acquire()
        acquired: list[bool] = []
        thread = threading.Thread(target=lambda: acquired.append(waiter.acquire(timeout=60)))
        thread.start()
        _wait_for_keys(holding, name, 2)
        holder.release()
        thread.join(60)
        assert acquired == [True]
        assert lost.wait(5), "the lost grant was not reported (the renewal is 10 s away)"
        with pytest.raises(tenure.LockLost):
            waiter.check()
        with pytest.raises(tenure.LockLost):
            waiter.release()
        assert holder.acquire(timeout=5)  # nothing of the lost grant is left in the way
        holder.release()


def test_a_grant_whose_key_went_before_its_move_is_lost(
    etcd_url: str, name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    _grant_lost(etcd_url, name, monkeypatch)


def test_a_release_before_the_move_is_answered_waits_for_it(
    etcd_store: EtcdBackend, name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    holder = token()
    assert isinstance(etcd_store.acquire(name, LOCK, holder, TTL, HOLDER), Grant)
    attempt, busy = _queued_behind(etcd_store, name, holder)
    assert etcd_store.release(Kind.LOCK, name, holder)
    attempt.wait(30, busy)
    on_lease = etcd_store.pool.on_lease

    def slow(*args: Any, **options: Any) -> Any:
        time.sleep(0.5)  # the move's answer comes late
        return on_lease(*args, **options)

    monkeypatch.setattr(etcd_store.pool, "on_lease", slow)
    granted = attempt.try_once()
    assert isinstance(granted, Grant)
    held = etcd_store.granted(Kind.LOCK, name, attempt.token)
    assert held is not None and held.granting is not None and not held.granting.ready()
    assert etcd_store.lease_doubt(Kind.LOCK, name, attempt.token) is None
    assert etcd_store.release(Kind.LOCK, name, attempt.token)
    assert held.granting.ready()
    # The move (which recorded the fence) landed before the delete: the key is gone and
    # the name's last fence is this grant's.
    info = etcd_store.inspect(Kind.LOCK, name)
    assert info is not None and not info.held and info.fence == granted.fence
