"""A dead, killed or frozen MongoDB server: BackendError within the caller's timeout, the
driver's error as its cause, and a renewed lease reported lost. Each test runs its own
mongoeco server (or none), never the shared one."""

from __future__ import annotations

import asyncio
import pathlib
import re
import threading
import time
import uuid
from collections.abc import Iterator

import pymongo.errors
import pytest

import tenure
from tests.servers._process import free_port
from tests.servers.mongodb import MongoecoServer

pytestmark = pytest.mark.mongodb

SLACK = 0.75  # scheduling on a shared machine


def dead_url() -> str:
    return f"mongodb://127.0.0.1:{free_port()}/?directConnection=true"


def test_nothing_listening_fails_within_the_timeout() -> None:
    with tenure.connect(dead_url(), timeout=1.0) as locks:
        lock = locks.lock("dead:nothing", ttl=5)
        started = time.monotonic()
        with pytest.raises(tenure.BackendError) as caught:
            lock.acquire(timeout=3)
        elapsed = time.monotonic() - started
        assert elapsed < 1.0 + SLACK, elapsed
        assert isinstance(caught.value.__cause__, pymongo.errors.PyMongoError)
        assert "127.0.0.1" in str(caught.value)
        with pytest.raises(tenure.NotOwned):  # the failed acquire left nothing held
            lock.release()
        for operation in (lambda: locks.inspect("x"), locks.list_locks,
                          lambda: locks.break_lock("x"), lock.locked):
            started = time.monotonic()
            with pytest.raises(tenure.BackendError):
                operation()
            assert time.monotonic() - started < 1.0 + SLACK


@pytest.mark.slow
def test_default_timeout_fails_a_dead_server_within_five_seconds() -> None:
    with tenure.connect(dead_url()) as locks:
        started = time.monotonic()
        with pytest.raises(tenure.BackendError):
            locks.lock("dead:default", ttl=5).acquire(timeout=10)
        elapsed = time.monotonic() - started
        assert elapsed < 5.0 + SLACK, elapsed


@pytest.mark.parametrize(
    "query", ["serverSelectionTimeoutMS=500", "serverSelectionTimeoutMS=500&socketTimeoutMS=2000"]
)
def test_the_url_server_selection_timeout_is_honoured(query: str) -> None:
    # PyMongo ignores serverSelectionTimeoutMS once timeoutMS (tenure's default operation
    # bound) is set: a URL that asks for 500 ms must get it, not tenure's 5 s.
    url = f"{dead_url()}&{query}"
    with tenure.connect(url) as locks, pytest.raises(tenure.BackendError) as caught:
        locks.lock("dead:selection", ttl=5).acquire(timeout=30)
    cause = caught.value.__cause__
    # The driver, not the caller's 30 s deadline, ended the wait, after the URL's 500 ms (its
    # own report of the timeout it applied; no clock is read here).
    assert isinstance(cause, pymongo.errors.ServerSelectionTimeoutError), repr(cause)
    applied = re.search(r"Timeout: ([0-9.]+)s", str(cause))
    assert applied is not None and float(applied.group(1)) <= 0.5, str(cause)


def test_an_unreachable_server_error_is_short_and_keeps_the_driver_error() -> None:
    with tenure.connect(dead_url(), timeout=0.5) as locks, pytest.raises(
        tenure.BackendError
    ) as caught:
        locks.lock("dead:short", ttl=5).acquire(timeout=30)
    message = str(caught.value)
    # One readable line in the one form every backend's failures take (backend, action,
    # lock): the server and what went wrong, not PyMongo's topology dump...
    assert message.startswith("mongodb://127.0.0.1:"), message
    assert ": acquire of 'dead:short' failed: " in message, message
    assert "Topology Description" not in message and len(message) < 300, message
    assert "127.0.0.1" in message and "refused" in message.lower(), message
    # ...which stays available, whole, on the driver's error.
    assert isinstance(caught.value.__cause__, pymongo.errors.ServerSelectionTimeoutError)
    assert "Topology Description" in str(caught.value.__cause__)


async def test_async_nothing_listening_fails_within_the_timeout() -> None:
    async with tenure.connect_async(dead_url(), timeout=1.0) as locks:
        started = time.monotonic()
        with pytest.raises(tenure.BackendError) as caught:
            await locks.lock("dead:async", ttl=5).acquire(timeout=3)
        assert time.monotonic() - started < 1.0 + SLACK
        assert isinstance(caught.value.__cause__, pymongo.errors.PyMongoError)
        assert [t for t in asyncio.all_tasks() if t.get_name() == "tenure-renewer"] == []


@pytest.fixture
def own_server(tmp_path: pathlib.Path) -> Iterator[MongoecoServer]:
    server = MongoecoServer(tmp_path / "mongoeco")
    server.start()
    try:
        yield server
    finally:
        server.stop()


def test_killed_server_fails_within_the_timeout_and_the_holder_learns_its_loss(
    own_server: MongoecoServer,
) -> None:
    ttl, timeout = 1.5, 0.5
    lost = threading.Event()
    with tenure.connect(own_server.url, timeout=timeout) as locks:
        holder = locks.lock("killed:held", ttl=ttl, renew=True, on_lost=lambda _: lost.set())
        assert holder.acquire(timeout=2)
        own_server.kill()
        killed = time.monotonic()

        started = time.monotonic()
        with pytest.raises(tenure.BackendError):
            locks.lock("killed:other", ttl=5).acquire(timeout=3)
        assert time.monotonic() - started < timeout + SLACK

        # Renewals fail, are retried until the lease's end, then the loss is reported.
        assert lost.wait(ttl + timeout + 2)
        assert time.monotonic() - killed <= ttl + timeout + 1
        assert holder.lost.is_set()
        with pytest.raises(tenure.LockLost) as caught:
            holder.check()
        assert isinstance(caught.value.__cause__, tenure.BackendError)
        with pytest.raises((tenure.LockLost, tenure.BackendError)):
            holder.release()


def test_frozen_server_fails_within_the_timeout(own_server: MongoecoServer) -> None:
    """SIGSTOP: connections stay open but nothing answers; only a deadline helps."""
    timeout = 0.75
    with tenure.connect(own_server.url, timeout=timeout) as locks:
        name = f"frozen:{uuid.uuid4().hex}"
        lock = locks.lock(name, ttl=30)
        assert lock.acquire(timeout=2)  # the connection pool is warm
        own_server.pause()
        try:
            for operation in (lambda: locks.lock(name + ":b").acquire(timeout=5),
                              lock.owned, lambda: locks.inspect(name)):
                started = time.monotonic()
                with pytest.raises(tenure.BackendError):
                    operation()
                assert time.monotonic() - started < timeout + SLACK
        finally:
            own_server.resume()
        # Thawed: the server answers again and the lease it kept is still ours.
        assert lock.owned()
        lock.release()
