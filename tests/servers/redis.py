"""Real ``redis-server`` processes for the tests: one per session (TCP and a unix socket), a
3-master Redis Cluster (``redis-cli --cluster create``, no replicas), and dedicated servers a
test may stop, pause, kill or restart.

Every server runs in its own temp dir on free loopback ports, without persistence
(``--save "" --appendonly no``) unless a test asks for it, and is probed with a real PING
(the cluster: ``CLUSTER INFO`` saying ``cluster_state:ok`` on every node).
"""

from __future__ import annotations

import contextlib
import dataclasses
import pathlib
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Protocol, TypeVar

import pytest

from tests.servers._process import ManagedServer, ServerFailed, free_port, require_binary

__all__ = [
    "RedisCluster",
    "RedisServer",
    "dedicated_redis",
    "redis_cluster",
    "redis_cluster_url",
    "redis_server",
    "redis_unix_url",
    "redis_url",
    "start_redis",
    "start_redis_cluster",
]


def _ask(port: int, command: bytes, *, timeout: float = 1.0) -> bytes:
    """Send one inline command; return its reply's payload (a status line or a bulk string:
    enough for PING and CLUSTER INFO)."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as connection:
        connection.sendall(command + b"\r\n")
        reply = b""
        while True:
            chunk = connection.recv(65536)
            if not chunk:
                raise ServerFailed(f"redis on port {port} closed the connection")
            reply += chunk
            header, crlf, body = reply.partition(b"\r\n")
            if not crlf:
                continue
            if not header.startswith(b"$"):
                return header
            if len(body) >= int(header[1:]) + 2:
                return body[: int(header[1:])]


def _ping(port: int) -> None:
    reply = _ask(port, b"PING")
    if not reply.startswith(b"+PONG"):
        raise ServerFailed(f"redis on port {port} answered {reply[:80]!r} to PING")


@dataclasses.dataclass
class RedisServer:
    """One redis-server: its URLs, and the process to stop, pause, kill or restart."""

    process: ManagedServer
    port: int
    workdir: pathlib.Path
    unix_socket: pathlib.Path | None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    @property
    def unix_url(self) -> str:
        if self.unix_socket is None:
            raise ServerFailed("this redis-server has no unix socket")
        return f"unix://{self.unix_socket}?db=0"

    def stop(self) -> None:
        self.process.stop()

    def pause(self) -> None:
        self.process.pause()

    def resume(self) -> None:
        self.process.resume()

    def kill(self) -> None:
        self.process.kill()

    def restart(self) -> None:
        """Stop and start on the same port; without persistence every key is gone."""
        self.process.restart()


def start_redis(
    workdir: pathlib.Path,
    *,
    port: int | None = None,
    unix_socket: bool = True,
    persistence: bool = False,
    extra_args: Sequence[str] = (),
    name: str = "redis",
    env: dict[str, str] | None = None,
) -> RedisServer:
    """Start a redis-server in ``workdir`` on a free loopback port (or ``port``), with ``env``
    added to its environment."""
    binary = require_binary("redis-server")
    port = port or free_port()
    socket_path = workdir / "redis.sock" if unix_socket else None
    argv = [
        binary,
        "--port", str(port),
        "--bind", "127.0.0.1",
        "--dir", str(workdir),
        "--daemonize", "no",
        "--logfile", "",
        "--maxclients", "1000",
    ]
    if persistence:
        argv += ["--appendonly", "yes", "--appendfsync", "always", "--save", ""]
    else:
        argv += ["--save", "", "--appendonly", "no"]
    if socket_path is not None:
        argv += ["--unixsocket", str(socket_path), "--unixsocketperm", "700"]
    argv += list(extra_args)
    process = ManagedServer(f"{name}-{port}", argv, workdir, lambda: _ping(port), env=env)
    process.start()
    return RedisServer(process, port, workdir, socket_path)


@dataclasses.dataclass
class RedisCluster:
    """Three masters, no replicas, every slot assigned."""

    nodes: list[RedisServer]

    @property
    def url(self) -> str:
        return "redis+cluster://" + ",".join(f"127.0.0.1:{node.port}" for node in self.nodes)

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()


def _free_pair(taken: set[int]) -> tuple[int, int]:
    """A client port and a cluster-bus port, both free now and not already given out."""
    ports: list[int] = []
    while len(ports) < 2:
        port = free_port()
        if port not in taken and port not in ports:
            ports.append(port)
    taken.update(ports)
    return ports[0], ports[1]


def start_redis_cluster(workdir: pathlib.Path, masters: int = 3,
                        env: dict[str, str] | None = None) -> RedisCluster:
    cli = require_binary("redis-cli")
    nodes: list[RedisServer] = []
    taken: set[int] = set()
    try:
        for index in range(masters):
            node_dir = workdir / f"node{index}"
            node_dir.mkdir()
            port, bus_port = _free_pair(taken)
            nodes.append(
                start_redis(
                    node_dir,
                    port=port,
                    unix_socket=False,
                    name=f"redis-cluster{index}",
                    env=env,
                    extra_args=[
                        "--cluster-enabled", "yes",
                        "--cluster-config-file", str(node_dir / "nodes.conf"),
                        "--cluster-port", str(bus_port),
                        "--cluster-node-timeout", "5000",
                    ],
                )
            )
        addresses = [f"127.0.0.1:{node.port}" for node in nodes]
        result = subprocess.run(
            [cli, "--cluster", "create", *addresses, "--cluster-replicas", "0", "--cluster-yes"],
            capture_output=True, text=True, timeout=60, check=False,
        )
        if result.returncode != 0:
            raise ServerFailed(f"redis-cli --cluster create failed: {result.stdout[-2000:]}"
                               f"{result.stderr[-2000:]}")
        deadline = time.monotonic() + 30
        while True:
            states = [_ask(node.port, b"CLUSTER INFO") for node in nodes]
            if all(b"cluster_state:ok" in state for state in states):
                break
            if time.monotonic() > deadline:
                raise ServerFailed(f"Redis Cluster not ok after 30 s: {states[0][:300]!r}")
            time.sleep(0.05)
        return RedisCluster(nodes)
    except BaseException:
        for node in nodes:
            node.stop()
        raise


@contextlib.contextmanager
def _workdir(prefix: str) -> Iterator[pathlib.Path]:
    path = pathlib.Path(tempfile.mkdtemp(prefix=prefix))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


class _Stoppable(Protocol):
    def stop(self) -> None: ...


StoppableT = TypeVar("StoppableT", bound=_Stoppable)


@contextlib.contextmanager
def _running(prefix: str, start: Callable[[pathlib.Path], StoppableT]) -> Iterator[StoppableT]:
    """A server (or cluster) started in a fresh temp dir, stopped and removed afterwards."""
    with _workdir(prefix) as workdir:
        server = start(workdir)
        try:
            yield server
        finally:
            server.stop()


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    with _running("tenure-redis-", start_redis) as server:
        yield server


@pytest.fixture(scope="session")
def redis_url(redis_server: RedisServer) -> str:
    """The session's redis-server (shared: tests use unique lock names)."""
    return redis_server.url


@pytest.fixture(scope="session")
def redis_unix_url(redis_server: RedisServer) -> str:
    """The same server through its unix socket."""
    return redis_server.unix_url


@pytest.fixture(scope="session")
def redis_cluster() -> Iterator[RedisCluster]:
    with _running("tenure-redis-cluster-", start_redis_cluster) as cluster:
        yield cluster


@pytest.fixture(scope="session")
def redis_cluster_url(redis_cluster: RedisCluster) -> str:
    return redis_cluster.url


@pytest.fixture
def dedicated_redis() -> Iterator[RedisServer]:
    """A server of this test's own, to stop, pause, kill or restart (a short temp dir: unix
    socket paths are limited to about 100 bytes)."""
    with _running("tenure-redis-", start_redis) as server:
        yield server
