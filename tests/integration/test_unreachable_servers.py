"""An acquire against a server that is not there raises BackendError with a ``__cause__``,
on every networked backend, whichever ends the wait: the driver (its own error is the cause)
or the lock logic's deadline guard, when the caller's timeout comes first (the driver's last
error, or a TimeoutError saying that no answer came). The API promises the cause; ZooKeeper
and MongoDB once gave none. Nothing listens on the ports used: no server is started."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable

import pytest

import tenure
from tests.servers._process import free_port

URLS: dict[str, Callable[[int], str]] = {
    "redis": lambda port: f"redis://127.0.0.1:{port}/0",
    "redlock": lambda port: f"redlock://127.0.0.1:{port},127.0.0.1:{port + 1},127.0.0.1:{port + 2}",
    "mongodb": lambda port: f"mongodb://127.0.0.1:{port}/db?directConnection=true",
    "mysql": lambda port: f"mysql://root@127.0.0.1:{port}/db",
    "postgresql": lambda port: f"postgresql://postgres@127.0.0.1:{port}/db",
    "etcd": lambda port: f"etcd://127.0.0.1:{port}",
    "zookeeper": lambda port: f"zookeeper://127.0.0.1:{port}",
}

TIMEOUT_OPTION = ("mongodb", "zookeeper", "etcd", "mysql", "postgresql")


def closed(backend: str) -> str:
    return URLS[backend](free_port())


def check(error: tenure.BackendError) -> None:
    assert error.__cause__ is not None, error
    assert "127.0.0.1" in str(error), error


@pytest.mark.parametrize("backend", sorted(URLS))
def test_the_deadline_guard_ends_the_wait(backend: str) -> None:
    # A 1 s caller's timeout: shorter than each driver's own (5 s or more by default).
    with tenure.connect(closed(backend)) as locks, pytest.raises(tenure.BackendError) as raised:
        locks.lock("unreachable:guard", ttl=5).acquire(timeout=1)
    check(raised.value)


@pytest.mark.parametrize("backend", sorted(URLS))
def test_the_driver_ends_the_wait(backend: str) -> None:
    # tenure's timeout option (0.5 s) bounds the driver's calls; the caller waits longer.
    options = {"timeout": 0.5} if backend in TIMEOUT_OPTION else {}
    with tenure.connect(closed(backend), **options) as locks, pytest.raises(
        tenure.BackendError
    ) as raised:
        locks.lock("unreachable:driver", ttl=5).acquire(timeout=10)
    check(raised.value)


@pytest.mark.parametrize("backend", ["mongodb", "zookeeper"])
def test_asyncio_too(backend: str) -> None:
    async def attempt() -> None:
        async with tenure.connect_async(closed(backend)) as locks:
            await locks.lock("unreachable:async", ttl=5).acquire(timeout=1)

    with pytest.raises(tenure.BackendError) as raised:
        asyncio.run(attempt())
    check(raised.value)


URLS_WITH_CLUSTER = {**URLS, "redis_cluster": lambda port: f"redis+cluster://127.0.0.1:{port}"}


@pytest.mark.parametrize("backend", sorted(URLS_WITH_CLUSTER))
def test_the_error_names_the_backend_the_action_and_the_lock(backend: str) -> None:
    """Every backend's driver errors leave through ``tenure._async.store.failure``: one way
    of reading, whichever backend, "<backend URL>: acquire of '<lock>' failed: <cause>"."""
    url = URLS_WITH_CLUSTER[backend](free_port())
    options = {"timeout": 0.5} if backend in TIMEOUT_OPTION else {}
    with tenure.connect(url, **options) as locks, pytest.raises(tenure.BackendError) as raised:
        locks.lock("unreachable:named", ttl=5).acquire(timeout=10)
    message = str(raised.value)
    scheme = url.split("://")[0]
    # The URL as given, a user name included (only a password is redacted).
    assert re.match(rf"{re.escape(scheme)}://([^@/]+@)?127\.0\.0\.1:", message), message
    assert ": acquire of 'unreachable:named' failed: " in message, message
    assert raised.value.__cause__ is not None
