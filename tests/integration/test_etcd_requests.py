"""etcd: what a lock's steps send, counted by the gateway (``Gateway.requests``), and the
rules that keep them that few safe (the docstrings of ``tenure.backends.etcd._async``'s
``backend``, ``first_try``, ``attempt`` and ``pool``):

- an uncontended acquire + release on a warm backend is two requests (the grant's
  transaction, which also records the fence, and the release's delete), as etcd's own lock
  service's lock + unlock;
- a queued waiter woken by the deletion ahead takes the lock in one request; after a quiet
  wait it reads first (a read, where a refused transaction with writes is a Raft write);
- a spare lease is written on only while it still lasts the whole ttl: one released longer
  ago than its margin is kept alive first;
- the name's last fence, recorded by the granting transactions in two forms (the fence key's
  mod revision, or a value), never goes back.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Iterator
from typing import Any

import pytest

import tenure
from tenure._types import Busy, Grant, Holder, Kind, LeaseSpec
from tenure.backends.etcd._keys import Record, name_prefix
from tenure.backends.etcd._statements import oldest
from tenure.backends.etcd._sync.pool import lease_seconds
from tenure.backends.etcd._sync.store import QUEUE_TTL, EtcdBackend

pytestmark = pytest.mark.etcd

HOLDER = Holder("host", 1, "thread")
LOCK = LeaseSpec()


@pytest.fixture
def backend(etcd_url: str) -> Iterator[EtcdBackend]:
    backend = EtcdBackend.from_url(etcd_url)
    try:
        yield backend
    finally:
        backend.close()


def token() -> str:
    return secrets.token_hex(16)


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


def test_a_waiter_whose_turn_came_takes_the_lock_in_one_request(
    backend: EtcdBackend, name: str
) -> None:
    holder, waiter = token(), token()
    assert isinstance(backend.acquire(name, LOCK, holder, 10, HOLDER), Grant)
    attempt = backend.attempt(name, LOCK, waiter, 10, HOLDER)
    busy = attempt.try_once()
    assert isinstance(busy, Busy)
    attempt.wait(0.01, busy)  # joins the queue, watches the holder's key
    assert backend.release(Kind.LOCK, name, holder)
    attempt.wait(30, busy)  # wakes at the deletion
    before = backend.gateway.requests
    assert isinstance(attempt.try_once(), Grant)
    assert backend.gateway.requests - before == 1
    info = backend.inspect(Kind.LOCK, name)
    assert info is not None and info.holder == HOLDER


def test_a_quiet_wait_is_followed_by_a_read_not_by_a_refused_write(
    backend: EtcdBackend, name: str
) -> None:
    holder, waiter = token(), token()
    assert isinstance(backend.acquire(name, LOCK, holder, 10, HOLDER), Grant)
    attempt = backend.attempt(name, LOCK, waiter, 10, HOLDER)
    busy = attempt.try_once()
    assert isinstance(busy, Busy)
    attempt.wait(0.05, busy)  # nothing happens ahead: a quiet timeout
    sent: list[Any] = []
    post = backend.gateway.post

    def recording(path: str, body: Any, **options: Any) -> Any:
        sent.append(body)
        return post(path, body, **options)

    backend.gateway.post = recording  # type: ignore[method-assign]
    assert isinstance(attempt.try_once(), Busy)
    backend.gateway.post = post  # type: ignore[method-assign]
    # A transaction with writes is a Raft entry even when its compare fails; reads are not.
    (body,) = sent
    assert all(set(op) == {"request_range"} for op in body["success"]), body
    assert backend.release(Kind.LOCK, name, holder)
    attempt.wait(30, busy)
    assert isinstance(attempt.try_once(), Grant)


def test_a_spare_lease_released_too_long_ago_is_kept_alive_before_it_is_written_on(
    backend: EtcdBackend, name: str
) -> None:
    ttl = 2.0
    margin = lease_seconds(ttl) - ttl  # how long a spare still lasts the whole ttl
    assert isinstance(backend.acquire(name, LOCK, token(), ttl, HOLDER), Grant)
    first = next(iter(backend._held.values())).lease.id
    backend.release(Kind.LOCK, name, next(iter(backend._held))[2])
    time.sleep(margin + 0.1)  # the spare now lasts less than ttl
    second = token()
    started = time.monotonic()
    assert isinstance(backend.acquire(name, LOCK, second, ttl, HOLDER), Grant)
    held = backend._held["lock", name, second]
    assert held.lease.id == first  # the spare, reused
    left = backend.pool.time_to_live(held.lease.id)  # whole seconds, rounded down
    # The server must give the holder at least ttl from the start of its acquire; an
    # unrefreshed spare would have a second less than that.
    assert left >= ttl - (time.monotonic() - started)


def test_the_last_fence_never_goes_back_whichever_form_records_it(
    backend: EtcdBackend, name: str
) -> None:
    first, second, third = token(), token(), token()
    # Into an empty range: the fence key's mod revision.
    granted = backend.acquire(name, LOCK, first, 10, HOLDER)
    assert isinstance(granted, Grant)
    attempt = backend.attempt(name, LOCK, second, 10, HOLDER)
    busy = attempt.try_once()
    assert isinstance(busy, Busy)
    attempt.wait(0.01, busy)
    backend.release(Kind.LOCK, name, first)
    info = backend.inspect(Kind.LOCK, name)
    assert info is not None and info.fence == granted.fence
    backend.record_fence("lock", name, granted.fence - 1)  # a late, lower one: refused
    info = backend.inspect(Kind.LOCK, name)
    assert info is not None and info.fence == granted.fence
    taken = attempt.try_once()  # from the queue: a value
    assert isinstance(taken, Grant) and taken.fence > granted.fence
    backend.release(Kind.LOCK, name, second)
    info = backend.inspect(Kind.LOCK, name)
    assert info is not None and info.fence == taken.fence
    backend.record_fence("lock", name, taken.fence - 1)  # below the value: refused
    info = backend.inspect(Kind.LOCK, name)
    assert info is not None and info.fence == taken.fence
    again = backend.acquire(name, LOCK, third, 10, HOLDER)  # into an empty range again
    assert isinstance(again, Grant) and again.fence > taken.fence
    backend.release(Kind.LOCK, name, third)
    info = backend.inspect(Kind.LOCK, name)
    assert info is not None and info.fence == again.fence


def _queue_lease_ready(backend: EtcdBackend) -> None:
    """A spare queue lease in the pool, as a process that waited before has one."""
    backend.pool.keep_spare(backend.pool.new(QUEUE_TTL))


def _txns(backend: EtcdBackend, sent: list[Any]) -> Any:
    post = backend.gateway.post

    def recording(path: str, body: Any, **options: Any) -> Any:
        if path == "/v3/kv/txn":
            sent.append(body)
        return post(path, body, **options)

    backend.gateway.post = recording  # type: ignore[method-assign]
    return post


def test_a_blocking_locks_refused_first_try_queues_in_the_same_request(
    backend: EtcdBackend, name: str
) -> None:
    holder, waiter = token(), token()
    assert isinstance(backend.acquire(name, LOCK, holder, 10, HOLDER), Grant)
    _queue_lease_ready(backend)
    attempt = backend.attempt(name, LOCK, waiter, 10, HOLDER)
    sent: list[Any] = []
    post = _txns(backend, sent)
    try:
        assert isinstance(attempt.try_or_wait(0.05), Busy)
    finally:
        backend.gateway.post = post  # type: ignore[method-assign]
    # The try wrote the waiter's key at the back of the queue: no join transaction after it.
    assert len(sent) == 1, sent
    keys = backend.gateway.post("/v3/kv/range", oldest(
        name_prefix("tenure", "lock", name), None)["request_range"])["kvs"]
    assert [Record.decode(kv["value"]).queued for kv in keys] == [False, True]
    assert backend.release(Kind.LOCK, name, holder)
    attempt.wait(30, Busy(None))
    assert isinstance(attempt.try_once(), Grant)
    info = backend.inspect(Kind.LOCK, name)
    assert info is not None and info.holder == HOLDER and info.fence == int(
        keys[1]["create_revision"])


@pytest.mark.parametrize("held", [False, True], ids=["free", "held"])
def test_a_resent_first_try_finds_what_its_lost_answer_did(
    backend: EtcdBackend, name: str, held: bool
) -> None:
    """The gateway resends a request whose answer was lost: the queued first try, sent
    twice, finds its own grant (it is not queued behind itself) or its own place."""
    holder = token()
    if held:
        assert isinstance(backend.acquire(name, LOCK, holder, 10, HOLDER), Grant)
    _queue_lease_ready(backend)
    post = backend.gateway.post

    def twice(path: str, body: Any, **options: Any) -> Any:
        if path == "/v3/kv/txn":
            post(path, body, **options)  # its answer lost
        return post(path, body, **options)

    backend.gateway.post = twice  # type: ignore[method-assign]
    waiter = token()
    attempt = backend.attempt(name, LOCK, waiter, 10, HOLDER)
    try:
        outcome = attempt.try_or_wait(0.01)
    finally:
        backend.gateway.post = post  # type: ignore[method-assign]
    if not held:
        assert isinstance(outcome, Grant)
        assert backend.owned(Kind.LOCK, name, waiter)
        info = backend.inspect(Kind.LOCK, name)
        assert info is not None and info.fence == outcome.fence
        return
    assert isinstance(outcome, Busy)
    assert backend.release(Kind.LOCK, name, holder)
    attempt.wait(30, Busy(None))
    granted = attempt.try_once()
    assert isinstance(granted, Grant) and backend.owned(Kind.LOCK, name, waiter)


def test_a_quiet_wait_lasts_a_third_of_the_queue_lease() -> None:
    # Each wait first keeps the queue lease alive: a place outlives two waits in a row
    # that overran, and a waiter sends a third fewer keep-alives than at 0.5 s.
    assert EtcdBackend.max_backoff == QUEUE_TTL / 3
