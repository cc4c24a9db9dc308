"""etcd: what a lock's steps send, counted by the gateway (``Gateway.requests``), and the
rules that keep them that few safe (the docstrings of ``tenure.backends.etcd._async``'s
``backend``, ``first_try``, ``attempt`` and ``pool``):

- an uncontended acquire + release on a warm backend is two requests (the grant's
  transaction, which also records the fence, and the release's delete), as etcd's own lock
  service's lock + unlock;
- a queued waiter whose wait saw the last key ahead of it deleted takes the lock at once,
  the move of its key onto its holder lease sent without waiting for it; after a quiet
  wait it reads first (a read, where a refused transaction with writes is a Raft write);
- a spare lease is written on only while it still lasts the whole ttl: one released longer
  ago than its margin is kept alive first;
- the name's last fence, recorded by the granting transactions in two forms (the fence key's
  mod revision, or a value), never goes back;
- a semaphore's uncontended cycle is two requests too: a permit's fence is recorded by its
  release, never below a later permit's, and ``inspect`` / ``ls`` show a live permit's
  fence from its key meanwhile;
- a lock's key is this client's slot under the name (``_slots``), the same one acquisition
  after another; its release is a delete by name, as its grant put the fence key on the
  ``gc_after`` lease (written again by a release past that lease's margin), which also keeps
  a holder's fence for ``inspect`` when it never released;
- a waiter watching a reused key name is not fooled by the key written again behind it.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

import tenure
from tenure._types import Busy, Grant, Kind, LeaseSpec
from tenure.backends.etcd._keys import b64, prefix_end, unb64
from tenure.backends.etcd._statements import fence_at
from tenure.backends.etcd._sync.pool import lease_seconds
from tenure.backends.etcd._sync.store import EtcdBackend
from tests.integration.etcd_support import HOLDER, LOCK, released_during_wait, token

pytestmark = pytest.mark.etcd


def test_a_warm_uncontended_cycle_is_two_requests(etcd_url: str, name: str) -> None:
    with tenure.connect(etcd_url) as locks:
        lock = locks.lock(name, ttl=10)
        gateway = locks.backend.gateway  # type: ignore[attr-defined]
        lock.acquire()
        lock.release()  # the first cycle grants the lease that the next ones reuse
        before = gateway.requests
        for _ in range(3):
            lock.acquire()
            lock.release()
        assert gateway.requests - before == 3 * 2


def test_a_waiter_whose_turn_came_takes_the_lock_with_one_unawaited_write(
    etcd_store: EtcdBackend, name: str
) -> None:
    holder, waiter = token(), token()
    assert isinstance(etcd_store.acquire(name, LOCK, holder, 10, HOLDER), Grant)
    attempt = etcd_store.attempt(name, LOCK, waiter, 10, HOLDER)
    busy = attempt.try_once()
    assert isinstance(busy, Busy)
    attempt.wait(0.01, busy)  # joins the queue
    released_during_wait(etcd_store, attempt, busy, holder, name)  # wakes at the deletion
    before = etcd_store.gateway.requests
    assert isinstance(attempt.try_once(), Grant)
    held = etcd_store.granted(Kind.LOCK, name, waiter)
    assert held is not None and held.granting is not None and held.granting.wait(10)
    # Its wait saw the last key ahead go: nothing but the move (granted at the head).
    assert etcd_store.gateway.requests - before == 1
    info = etcd_store.inspect(Kind.LOCK, name)
    assert info is not None and info.holder == HOLDER


def test_a_quiet_wait_is_followed_by_a_read_not_by_a_refused_write(
    etcd_store: EtcdBackend, name: str
) -> None:
    holder, waiter = token(), token()
    assert isinstance(etcd_store.acquire(name, LOCK, holder, 10, HOLDER), Grant)
    attempt = etcd_store.attempt(name, LOCK, waiter, 10, HOLDER)
    busy = attempt.try_once()
    assert isinstance(busy, Busy)
    attempt.wait(0.05, busy)  # nothing happens ahead: a quiet timeout
    sent: list[Any] = []
    post = etcd_store.gateway.post

    def recording(path: str, body: Any, **options: Any) -> Any:
        sent.append(body)
        return post(path, body, **options)

    etcd_store.gateway.post = recording  # type: ignore[method-assign]
    assert isinstance(attempt.try_once(), Busy)
    etcd_store.gateway.post = post  # type: ignore[method-assign]
    # A transaction with writes is a Raft entry even when its compare fails; reads are not.
    (body,) = sent
    assert all(set(op) == {"request_range"} for op in body["success"]), body
    assert etcd_store.release(Kind.LOCK, name, holder)
    attempt.wait(30, busy)
    assert isinstance(attempt.try_once(), Grant)


def test_a_spare_lease_released_too_long_ago_is_kept_alive_before_it_is_written_on(
    etcd_store: EtcdBackend, name: str
) -> None:
    ttl = 2.0
    margin = lease_seconds(ttl) - ttl  # how long a spare still lasts the whole ttl
    granted = time.monotonic()  # the lease's clock starts after this, on the server
    assert isinstance(etcd_store.acquire(name, LOCK, token(), ttl, HOLDER), Grant)
    first = next(iter(etcd_store._held.values())).lease.id
    etcd_store.release(Kind.LOCK, name, next(iter(etcd_store._held))[2])
    time.sleep(margin + 0.1)  # the spare now lasts less than ttl
    second = token()
    started = time.monotonic()
    assert isinstance(etcd_store.acquire(name, LOCK, second, ttl, HOLDER), Grant)
    held = etcd_store._held["lock", name, second]
    if time.monotonic() - granted < lease_seconds(ttl):
        # The spare was alive when the acquire kept it alive: it must be the one reused.
        # (On a machine so loaded that this test lost its core for seconds, the spare could
        # lapse first, and a new lease is then right; the ttl check below holds either way.)
        assert held.lease.id == first
    left = etcd_store.pool.time_to_live(held.lease.id)  # whole seconds, rounded down
    # The server must give the holder at least ttl from the start of its acquire; an
    # unrefreshed spare would have a second less than that.
    assert left >= ttl - (time.monotonic() - started)


def record_fence(etcd_store: EtcdBackend, name: str, fence: int) -> None:
    """``fence`` recorded as the lock name's last (on no lease), unless a later one is."""
    etcd_store.gateway.post("/v3/kv/txn", {"success": [
        fence_at(etcd_store.fence_key("lock", name), fence, None),
    ]})


def test_the_last_fence_never_goes_back_whichever_form_records_it(
    etcd_store: EtcdBackend, name: str
) -> None:
    first, second, third = token(), token(), token()
    # Into an empty range: the fence key's mod revision.
    granted = etcd_store.acquire(name, LOCK, first, 10, HOLDER)
    assert isinstance(granted, Grant)
    attempt = etcd_store.attempt(name, LOCK, second, 10, HOLDER)
    busy = attempt.try_once()
    assert isinstance(busy, Busy)
    attempt.wait(0.01, busy)
    etcd_store.release(Kind.LOCK, name, first)
    info = etcd_store.inspect(Kind.LOCK, name)
    assert info is not None and info.fence == granted.fence
    record_fence(etcd_store, name, granted.fence - 1)  # a late, lower one: refused
    info = etcd_store.inspect(Kind.LOCK, name)
    assert info is not None and info.fence == granted.fence
    taken = attempt.try_once()  # from the queue: a value
    assert isinstance(taken, Grant) and taken.fence > granted.fence
    etcd_store.release(Kind.LOCK, name, second)
    info = etcd_store.inspect(Kind.LOCK, name)
    assert info is not None and info.fence == taken.fence
    record_fence(etcd_store, name, taken.fence - 1)  # below the value: refused
    info = etcd_store.inspect(Kind.LOCK, name)
    assert info is not None and info.fence == taken.fence
    again = etcd_store.acquire(name, LOCK, third, 10, HOLDER)  # into an empty range again
    assert isinstance(again, Grant) and again.fence > taken.fence
    etcd_store.release(Kind.LOCK, name, third)
    info = etcd_store.inspect(Kind.LOCK, name)
    assert info is not None and info.fence == again.fence


def test_a_warm_uncontended_semaphore_cycle_is_two_requests(etcd_url: str, name: str) -> None:
    with tenure.connect(etcd_url) as locks:
        permit = locks.semaphore(name, limit=3, ttl=10)
        gateway = locks.backend.gateway  # type: ignore[attr-defined]
        permit.acquire()
        permit.release()  # the first cycle grants the lease that the next ones reuse
        before = gateway.requests
        fences = []
        for _ in range(3):
            permit.acquire()
            fences.append(permit.fence)
            permit.release()
        assert gateway.requests - before == 3 * 2
        info = locks.inspect(name, kind="semaphore")
        assert info is not None and info.fence == fences[-1]


def test_a_permits_fence_is_recorded_at_its_release_and_never_goes_back(
    etcd_store: EtcdBackend, name: str
) -> None:
    spec = LeaseSpec(kind=Kind.SEMAPHORE, limit=2)
    older, newer = token(), token()
    first = etcd_store.acquire(name, spec, older, 10, HOLDER)
    second = etcd_store.acquire(name, spec, newer, 10, HOLDER)
    assert isinstance(first, Grant) and isinstance(second, Grant)
    assert second.fence > first.fence
    # Held, nothing released yet: the live permits' keys show the last fence, in inspect
    # and in the listing alike.
    info = etcd_store.inspect(Kind.SEMAPHORE, name)
    assert info is not None and info.fence == second.fence
    (listed,) = [i for i in etcd_store.list_records(Kind.SEMAPHORE, name) if i.name == name]
    assert listed.fence == second.fence and len(listed.leases) == 2
    assert etcd_store.release(Kind.SEMAPHORE, name, newer)
    assert etcd_store.release(Kind.SEMAPHORE, name, older)  # lower: the newer one's stays
    info = etcd_store.inspect(Kind.SEMAPHORE, name)
    assert info is not None and info.fence == second.fence and not info.leases
    (listed,) = [i for i in etcd_store.list_records(Kind.SEMAPHORE, name) if i.name == name]
    assert listed.fence == second.fence


def _holder_key(etcd_store: EtcdBackend, name: str, token: str) -> str:
    return etcd_store._held["lock", name, token].key


def test_one_handle_after_another_writes_the_same_key_and_two_at_once_two(
    etcd_store: EtcdBackend, name: str
) -> None:
    # etcd's key index keeps every deleted key until a compaction, and the first try's range
    # compare walks them: a name's keys are reused, not one more per acquisition.
    first, second, other = token(), token(), token()
    assert isinstance(etcd_store.acquire(name, LOCK, first, 10, HOLDER), Grant)
    key = _holder_key(etcd_store, name, first)
    assert etcd_store.release(Kind.LOCK, name, first)
    assert isinstance(etcd_store.acquire(name, LOCK, second, 10, HOLDER), Grant)
    assert _holder_key(etcd_store, name, second) == key
    attempt = etcd_store.attempt(name, LOCK, other, 10, HOLDER)
    busy = attempt.try_once()
    assert isinstance(busy, Busy)
    attempt.wait(0.01, busy)  # queued behind the holder: a key of its own
    prefix = key.rpartition("/")[0] + "/"
    answer = etcd_store.gateway.post("/v3/kv/range", {
        "key": b64(prefix), "range_end": b64(prefix_end(prefix)), "keys_only": True,
    })
    assert sorted(unb64(kv["key"]).decode() for kv in answer["kvs"]) == sorted(
        [key, etcd_store.slots.get("lock", name, other).key])  # type: ignore[union-attr]
    assert etcd_store.release(Kind.LOCK, name, second)
    attempt.wait(30, busy)
    assert isinstance(attempt.try_once(), Grant)
    assert etcd_store.release(Kind.LOCK, name, other)


def recorded(etcd_store: EtcdBackend) -> tuple[list[tuple[str, Any]], Any]:
    """The requests ``etcd_store`` posts from now on (path, body), and how to stop recording."""
    sent: list[tuple[str, Any]] = []
    post = etcd_store.gateway.post

    def recording(path: str, body: Any, **options: Any) -> Any:
        sent.append((path, body))
        return post(path, body, **options)

    etcd_store.gateway.post = recording  # type: ignore[method-assign]

    def stop() -> None:
        etcd_store.gateway.post = post  # type: ignore[method-assign]

    return sent, stop


def test_a_release_deletes_the_key_by_name_unless_the_fence_key_must_be_written_again(
    etcd_store: EtcdBackend, name: str
) -> None:
    quick, long_held = token(), token()
    granted = etcd_store.acquire(name, LOCK, quick, 10, HOLDER)
    assert isinstance(granted, Grant)
    sent, stop = recorded(etcd_store)
    assert etcd_store.release(Kind.LOCK, name, quick)
    stop()
    assert [path for path, _ in sent] == ["/v3/kv/deleterange"]
    # The grant put the fence key on the gc_after lease: it lasts gc_after past the release.
    fence_key = b64(etcd_store.fence_key("lock", name))
    (kv,) = etcd_store.gateway.post("/v3/kv/range", {"key": fence_key})["kvs"]
    gc_after = etcd_store.settings.gc_after
    assert gc_after is not None
    assert etcd_store.pool.time_to_live(kv["lease"]) >= gc_after - 1
    assert etcd_store.inspect(Kind.LOCK, name).fence == granted.fence  # type: ignore[union-attr]
    # A hold past the lease's margin (white-box: the margin moved to the past): the release
    # writes the fence key again, onto a lease lasting gc_after from now.
    again = etcd_store.acquire(name, LOCK, long_held, 10, HOLDER)
    assert isinstance(again, Grant)
    etcd_store._held["lock", name, long_held].fence_kept_until = 0.0
    etcd_store._gc_lease = None  # the lease to write it on is a new one
    sent, stop = recorded(etcd_store)
    assert etcd_store.release(Kind.LOCK, name, long_held)
    stop()
    (body,) = [body for path, body in sent if path == "/v3/kv/txn"]
    assert body["compare"][0]["target"] == "CREATE"  # only the key granted goes
    (kv,) = etcd_store.gateway.post("/v3/kv/range", {"key": fence_key})["kvs"]
    assert etcd_store.pool.time_to_live(kv["lease"]) >= gc_after - 1
    assert etcd_store.inspect(Kind.LOCK, name).fence == again.fence  # type: ignore[union-attr]


def test_a_holder_that_never_released_leaves_its_fence_for_inspect(
    etcd_store: EtcdBackend, name: str
) -> None:
    granted = etcd_store.acquire(name, LOCK, token(), 1, HOLDER)
    assert isinstance(granted, Grant)
    held = next(iter(etcd_store._held.values()))
    etcd_store.pool.revoke(held.lease.id)  # as its lease's end would: the key goes
    info = etcd_store.inspect(Kind.LOCK, name)
    assert info is not None and info.holder is None and info.fence == granted.fence


def test_a_watch_on_a_reused_key_name_ends_when_the_key_watched_is_gone(
    etcd_store: EtcdBackend, name: str
) -> None:
    key = f"{etcd_store.settings.namespace}/test/{name}"
    first = etcd_store.gateway.post("/v3/kv/put", {"key": b64(key), "value": b64("a")})
    created = int(first["header"]["revision"])
    etcd_store.gateway.post("/v3/kv/deleterange", {"key": b64(key)})
    etcd_store.gateway.post("/v3/kv/put", {"key": b64(key), "value": b64("b")})  # written again
    started = time.monotonic()
    # Watched from before the deletion: the key of that name now is another one.
    assert etcd_store.gateway.watch_deletes(b64(key), None, created + 1, 5.0, created)
    assert time.monotonic() - started < 2.5
    etcd_store.gateway.post("/v3/kv/deleterange", {"key": b64(key)})


def test_a_request_that_races_close_opens_no_client_that_stays_open(etcd_url: str) -> None:
    """A request on another thread that finds the gateway open, then waits for its mutex
    while ``close`` empties the pool (the renewal store's first connection is made in the
    background, and a client may close at once), works on clients of its own and closes
    them: it once filled the emptied pool, which nothing closed afterwards (ci27: the
    sockets' ResourceWarning at a later collection failed another test of the worker)."""
    store = EtcdBackend.from_url(etcd_url)
    gateway = store.gateway
    answered: list[object] = []
    with gateway._mutex:  # what ``close`` holds while it empties the pool
        requester = threading.Thread(
            target=lambda: answered.append(gateway.post("/v3/kv/range", {"key": b64("x")}))
        )
        requester.start()
        time.sleep(0.1)  # it is waiting for the mutex now (where it was open, it was past it)
        gateway._closed = True  # ``close``'s own step, under that mutex
    requester.join(30)
    assert answered, "the request did not complete"
    assert gateway._clients == [], "a request after close filled the pool again"
    store.close()
