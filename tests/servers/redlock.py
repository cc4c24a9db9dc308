"""Independent ``redis-server`` nodes for the Redlock backend: three per session (the
conformance suite's ``redlock://``), and five of a test's own to stop, plus three behind TCP
proxies (``safety.proxy``) to cut off, for the fault tests.

Each node is a plain redis-server from ``tests.servers.redis.start_redis`` (its own temp
dir, a free loopback port, a real PING probe, no persistence unless asked for).
"""

from __future__ import annotations

import contextlib
import dataclasses
import pathlib
import shutil
import tempfile
from collections.abc import Iterator

import pytest
from safety.proxy import Proxy

from tests.servers.redis import RedisServer, start_redis

__all__ = [
    "RedlockNodes",
    "redlock_five",
    "redlock_nodes",
    "redlock_proxied",
    "redlock_url",
    "start_redlock_nodes",
]


@dataclasses.dataclass
class RedlockNodes:
    """Several independent redis-servers, and optionally a proxy in front of each."""

    servers: list[RedisServer]
    proxies: list[Proxy] = dataclasses.field(default_factory=list)

    @property
    def url(self) -> str:
        """Through the proxies when there are some, else straight to the servers."""
        ports = [proxy.port for proxy in self.proxies] or [s.port for s in self.servers]
        return "redlock://" + ",".join(f"127.0.0.1:{port}" for port in ports)

    @property
    def direct_url(self) -> str:
        return "redlock://" + ",".join(f"127.0.0.1:{s.port}" for s in self.servers)

    def stop(self) -> None:
        for proxy in self.proxies:
            proxy.stop()
        for server in self.servers:
            server.stop()


def start_redlock_nodes(
    workdir: pathlib.Path, count: int, *, proxied: bool = False, persistence: bool = False,
    env: dict[str, str] | None = None, env_nodes: int | None = None,
) -> RedlockNodes:
    """``env`` is added to the environment of the first ``env_nodes`` nodes (all: None)."""
    nodes = RedlockNodes([])
    try:
        for index in range(count):
            node_dir = workdir / f"node{index}"
            node_dir.mkdir()
            nodes.servers.append(
                start_redis(node_dir, unix_socket=False, persistence=persistence,
                            name=f"redlock{index}",
                            env=env if env_nodes is None or index < env_nodes else None)
            )
            if proxied:
                nodes.proxies.append(Proxy(("127.0.0.1", nodes.servers[-1].port)).start())
        return nodes
    except BaseException:
        nodes.stop()
        raise


@contextlib.contextmanager
def _nodes(count: int, *, proxied: bool = False) -> Iterator[RedlockNodes]:
    workdir = pathlib.Path(tempfile.mkdtemp(prefix="tenure-redlock-"))
    try:
        nodes = start_redlock_nodes(workdir, count, proxied=proxied)
        try:
            yield nodes
        finally:
            nodes.stop()
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


@pytest.fixture(scope="session")
def redlock_nodes() -> Iterator[RedlockNodes]:
    with _nodes(3) as nodes:
        yield nodes


@pytest.fixture(scope="session")
def redlock_url(redlock_nodes: RedlockNodes) -> str:
    """Three independent nodes for the session (shared: tests use unique lock names), with
    node timeouts of 1 s instead of Redlock's default 0.2 s. The tests on this URL are about
    semantics, and on a loaded 2-core CI machine two loopback nodes once answered an acquire
    later than 0.2 s (a BackendError: 1 of 3 nodes answered). The default timeouts, and
    what a slow or dead node costs, are tested by test_redlock_faults on nodes of its own,
    and the safety scenarios (tests/safety/conftest.py) use the defaults on these nodes."""
    return f"{redlock_nodes.url}?socket_timeout=1&socket_connect_timeout=1"


@pytest.fixture
def redlock_five() -> Iterator[RedlockNodes]:
    """Five nodes of this test's own, to stop."""
    with _nodes(5) as nodes:
        yield nodes


@pytest.fixture
def redlock_proxied() -> Iterator[RedlockNodes]:
    """Three nodes of this test's own, each reached through its own TCP proxy."""
    with _nodes(3, proxied=True) as nodes:
        yield nodes
