"""A Redlock node that refuses us (a wrong or missing password, an ACL without the scripting
commands) is a configuration error, refused with the node named: counting it as a node that is
down would let a team run without the fault tolerance it paid for, and nothing would say so.
Real redis-servers with requirepass."""

from __future__ import annotations

import pathlib
import re
import time
from collections.abc import Iterator

import pytest
import redis

import tenure
from tenure.backends.redis._scripts import lock_keys
from tests.servers.redis import RedisServer, start_redis

pytestmark = pytest.mark.redlock

PASSWORD = "right-pw-4c1"
WRONG = "wrong-pw-9d2"


@pytest.fixture
def guarded(tmp_path: pathlib.Path) -> Iterator[list[RedisServer]]:
    """Three nodes with requirepass; the third also has a user 'app' barred from scripts."""
    servers: list[RedisServer] = []
    try:
        for index in range(3):
            node_dir = tmp_path / f"node{index}"
            node_dir.mkdir()
            extra = ["--requirepass", PASSWORD]
            if index == 2:
                extra += ["--user", "app", "on", f">{PASSWORD}", "~*", "+@all", "-@scripting"]
            servers.append(start_redis(node_dir, unix_socket=False, name=f"redlock-auth{index}",
                                       extra_args=extra))
        yield servers
    finally:
        for server in servers:
            server.stop()


def node_url(server: RedisServer, userinfo: str) -> str:
    return f"{userinfo}@127.0.0.1:{server.port}"


def leases(servers: list[RedisServer], name: str) -> list[bytes | None]:
    found = []
    for server in servers:
        client = redis.Redis(port=server.port, password=PASSWORD)
        try:
            found.append(client.hget(lock_keys("tenure", name).lease, "token"))
        finally:
            client.close()
    return found


def refused(message: str, server: RedisServer) -> None:
    assert f"127.0.0.1:{server.port}" in message, message
    assert PASSWORD not in message and WRONG not in message, message


def test_the_right_password_everywhere_works(guarded: list[RedisServer], name: str) -> None:
    url = "redlock://" + ",".join(node_url(s, f":{PASSWORD}") for s in guarded)
    with tenure.connect(url) as locks, locks.lock(name, ttl=10, timeout=5) as lock:
        assert lock.fence is not None


@pytest.mark.parametrize("flavour", ["sync", "async"])
def test_a_wrong_password_is_refused_with_the_node_named(
    guarded: list[RedisServer], name: str, flavour: str
) -> None:
    url = "redlock://" + ",".join(
        node_url(s, f":{WRONG if i == 1 else PASSWORD}") for i, s in enumerate(guarded)
    )
    if flavour == "sync":
        with tenure.connect(url) as locks, pytest.raises(tenure.ConfigurationError) as raised:
            locks.lock(name, ttl=10).acquire(timeout=5)
    else:
        import asyncio

        async def attempt() -> None:
            async with tenure.connect_async(url) as locks:
                await locks.lock(name, ttl=10).acquire(timeout=5)

        with pytest.raises(tenure.ConfigurationError) as raised:
            asyncio.run(attempt())
    refused(str(raised.value), guarded[1])
    assert re.search("password|auth", str(raised.value), re.IGNORECASE)
    assert raised.value.__cause__ is not None
    # The two nodes that granted were released: a refused acquire leaves nothing behind.
    assert leases(guarded, name) == [None, None, None]


def test_a_missing_password_is_refused_with_the_node_named(
    guarded: list[RedisServer], name: str
) -> None:
    nodes = [
        {"url": f"redis://127.0.0.1:{s.port}", **({"password": PASSWORD} if i != 0 else {})}
        for i, s in enumerate(guarded)
    ]
    with tenure.connect("redlock://", nodes=nodes) as locks:
        with pytest.raises(tenure.ConfigurationError) as raised:
            locks.lock(name, ttl=10).acquire(timeout=5)
        refused(str(raised.value), guarded[0])
        # Every operation refuses, not only acquire.
        with pytest.raises(tenure.ConfigurationError):
            locks.inspect(name)
        with pytest.raises(tenure.ConfigurationError):
            locks.list_locks()


def test_a_user_without_script_permission_is_refused(
    guarded: list[RedisServer], name: str
) -> None:
    url = "redlock://" + ",".join(
        node_url(s, f"app:{PASSWORD}" if i == 2 else f":{PASSWORD}") for i, s in enumerate(guarded)
    )
    with tenure.connect(url) as locks, pytest.raises(tenure.ConfigurationError) as raised:
        locks.lock(name, ttl=10).acquire(timeout=5)
    refused(str(raised.value), guarded[2])
    assert leases(guarded, name) == [None, None, None]


def test_a_password_changed_under_a_held_lease_keeps_it_and_warns(
    guarded: list[RedisServer], name: str, caplog: pytest.LogCaptureFixture
) -> None:
    # Renewals keep a lease already granted: the node that now refuses us counts as one that
    # does not answer (the majority renews), and a WARNING names it.
    url = "redlock://" + ",".join(node_url(s, f":{PASSWORD}") for s in guarded)
    with tenure.connect(url) as locks:
        lock = locks.lock(name, ttl=1.0, renew=True)
        assert lock.acquire(timeout=5)
        admin = redis.Redis(port=guarded[0].port, password=PASSWORD)
        try:
            admin.config_set("requirepass", "rotated-pw-5e")
            admin.client_kill_filter(_type="normal", skipme=True)  # reconnect: re-authenticate
        finally:
            admin.close()
        deadline = time.monotonic() + 30
        while "refused renew" not in caplog.text and time.monotonic() < deadline:
            time.sleep(0.05)
        assert "refused renew" in caplog.text
        refused(caplog.text, guarded[0])
        time.sleep(1.5)  # longer than the ttl: only renewals keep it
        assert not lock.lost.is_set()
        lock.check()
        lock.release()
