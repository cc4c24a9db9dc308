"""Real ``redis-server`` processes for the tests: one per session (TCP and a unix socket), a
3-master Redis Cluster (``redis-cli --cluster create``, no replicas), a Sentinel set-up (a
primary, a replica and three ``redis-server --sentinel`` processes that fail over in a few
seconds), and dedicated servers a test may stop, pause, kill or restart.

Every server runs in its own temp dir on free loopback ports, without persistence
(``--save "" --appendonly no``) unless a test asks for it, and is probed with a real PING
(the cluster: ``CLUSTER INFO`` saying ``cluster_state:ok`` on every node; the Sentinel set-up:
every replica in sync and every sentinel knowing the primary, the replicas and the other
sentinels).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import pathlib
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Protocol, TypeVar

import pytest

from tests.servers._process import ManagedServer, ServerFailed, free_port, require_binary

__all__ = [
    "RedisCluster",
    "RedisSentinel",
    "RedisServer",
    "dedicated_redis",
    "redis_cluster",
    "redis_cluster_url",
    "redis_sentinel",
    "redis_server",
    "redis_unix_url",
    "redis_url",
    "start_redis",
    "start_redis_cluster",
    "start_redis_sentinel",
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
    # NOAUTH: a server started with requirepass answers, which is all readiness means.
    if not reply.startswith((b"+PONG", b"-NOAUTH")):
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


SENTINEL_SERVICE = "tenure-master"
"""The service name the sentinels monitor: a ``redis+sentinel://.../tenure-master`` URL."""

SENTINEL_DOWN_AFTER_MS = 1000
"""How long the primary must stay silent before a sentinel deems it down (the default, 30 s,
would make every failover test wait half a minute)."""

SENTINEL_FAILOVER_TIMEOUT_MS = 3000
"""A failover's time limit, and half the pause before the same sentinel tries again."""


def _redis_client(port: int, timeout: float = 1.0) -> Any:
    import redis

    return redis.Redis(host="127.0.0.1", port=port, socket_timeout=timeout,
                       socket_connect_timeout=timeout)


def _sentinel(client: Any, *args: str) -> Any:
    """A SENTINEL subcommand's raw reply, decoded: redis-py's helpers for these differ
    between its releases (6.x answers a bool unless asked for the reply, and some of its
    parsers then fail), and the tests run against several releases (scripts/floors)."""
    reply = client.execute_command("SENTINEL", *args)  # no parser for "SENTINEL" alone

    def text(value: Any) -> Any:
        if isinstance(value, bytes):
            return value.decode()
        if isinstance(value, list | tuple):
            return [text(item) for item in value]
        if isinstance(value, dict):
            return {text(key): text(item) for key, item in value.items()}
        return value

    return text(reply)


def _fields(reply: Any) -> dict[str, str]:
    """A SENTINEL MASTER / SLAVES entry as str -> str, from the flat list of RESP2 or the
    map some redis-py releases already made of it."""
    if isinstance(reply, dict):
        return {str(key): str(value) for key, value in reply.items()}
    return dict(zip(reply[::2], reply[1::2], strict=True))


def _replication(port: int) -> dict[str, Any]:
    client = _redis_client(port)
    try:
        info: dict[str, Any] = client.info("replication")
        return info
    finally:
        client.close()


@dataclasses.dataclass
class RedisSentinel:
    """A primary and its replicas watched by three sentinels. Roles move with failovers:
    ``primary()`` asks the sentinels which server it is now."""

    servers: list[RedisServer]
    sentinels: list[ManagedServer]
    sentinel_ports: list[int]
    workdir: pathlib.Path
    service: str = SENTINEL_SERVICE

    @property
    def url(self) -> str:
        sentinels = ",".join(f"127.0.0.1:{port}" for port in self.sentinel_ports)
        return f"redis+sentinel://{sentinels}/{self.service}/0"

    def master_ports(self) -> list[int | None]:
        """The primary's port as each sentinel names it (None: that sentinel did not answer)."""
        found: list[int | None] = []
        for port in self.sentinel_ports:
            client = _redis_client(port)
            try:
                address = _sentinel(client, "GET-MASTER-ADDR-BY-NAME", self.service)
                found.append(int(address[1]) if address else None)
            except Exception:
                found.append(None)
            finally:
                client.close()
        return found

    def primary(self) -> RedisServer:
        ports = {port for port in self.master_ports() if port is not None}
        if len(ports) != 1:
            raise ServerFailed(f"the sentinels disagree on the primary: {sorted(ports)}")
        (port,) = ports
        return next(server for server in self.servers if server.port == port)

    def _check_ready(self) -> None:
        """Raise ServerFailed unless every replica is in sync with the primary and every
        sentinel knows the primary, each replica (up, its link up) and the other sentinels:
        then a failover can start at once and has a replica to promote."""
        primary = self.primary()
        if _replication(primary.port).get("role") != "master":
            raise ServerFailed(f"the sentinels' primary {primary.port} is not a master")
        replicas = [server for server in self.servers if server is not primary]
        for replica in replicas:
            info = _replication(replica.port)
            if info.get("master_port") != primary.port or \
                    info.get("master_link_status") != "up":
                raise ServerFailed(f"replica {replica.port} not in sync: {info}")
        wanted = {replica.port for replica in replicas}
        for port in self.sentinel_ports:
            client = _redis_client(port)
            try:
                master = _fields(_sentinel(client, "MASTER", self.service))
                known = [_fields(entry) for entry in _sentinel(client, "SLAVES", self.service)]
            finally:
                client.close()
            if master["flags"] != "master" or int(master["port"]) != primary.port:
                raise ServerFailed(f"sentinel {port} sees the master as {master}")
            if int(master["num-other-sentinels"]) != len(self.sentinel_ports) - 1:
                raise ServerFailed(f"sentinel {port} knows {master['num-other-sentinels']} "
                                   "other sentinels")
            healthy = {int(replica["port"]) for replica in known
                       if replica["flags"] == "slave" and replica["master-link-status"] == "ok"}
            if not wanted <= healthy:
                raise ServerFailed(f"sentinel {port} sees the replicas as {known}")

    def wait_ready(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while True:
            try:
                self._check_ready()
                return
            except Exception as exc:  # not yet (a sentinel learns of replicas every 10 s)
                if time.monotonic() > deadline:
                    raise ServerFailed(f"the Sentinel set-up not ready after {timeout} s: "
                                       f"{exc}") from exc
            time.sleep(0.1)

    def kill_primary(self) -> RedisServer:
        """SIGKILL the current primary (no clean shutdown); the server killed."""
        primary = self.primary()
        primary.kill()
        return primary

    def wait_promoted(self, old: RedisServer, timeout: float = 30.0) -> RedisServer:
        """Wait until every sentinel names another server as the primary and that server
        says it is a master; the new primary."""
        deadline = time.monotonic() + timeout
        while True:
            ports = self.master_ports()
            if len(set(ports)) == 1 and ports[0] not in (None, old.port):
                promoted = next(s for s in self.servers if s.port == ports[0])
                with contextlib.suppress(Exception):
                    if _replication(promoted.port).get("role") == "master":
                        return promoted
            if time.monotonic() > deadline:
                raise ServerFailed(f"no failover within {timeout} s: the sentinels name {ports}")
            time.sleep(0.02)

    def rejoin(self, server: RedisServer, timeout: float = 60.0) -> None:
        """Start a killed server again, as a replica of the current primary (empty, without
        persistence: it copies the primary's data), and wait until the set-up is ready.

        It comes back with replica priority 0, which no sentinel ever promotes: a test that
        rejoins a server checks that clients reach the promoted primary and not the old
        address, and a second failover back to that address (a sentinel that missed the
        promoted primary's answers for a second on a loaded machine, ci23) would leave
        nothing for it to check."""
        primary = self.primary()
        process = server.process
        rejoined = ["--replicaof", "127.0.0.1", str(primary.port), "--replica-priority", "0"]
        base = process.argv
        for option, values in (("--replicaof", 2), ("--replica-priority", 1)):
            if option in base:
                at = base.index(option)
                base = base[:at] + base[at + 1 + values:]
        process.argv = base + rejoined
        process.start()
        self.wait_ready(timeout)

    def stop(self) -> None:
        for sentinel in self.sentinels:
            sentinel.stop()
        for server in self.servers:
            server.stop()


def start_redis_sentinel(workdir: pathlib.Path, replicas: int = 1, sentinels: int = 3,
                         env: dict[str, str] | None = None) -> RedisSentinel:
    """A primary, ``replicas`` replicas and ``sentinels`` sentinels (quorum: a majority),
    each in a directory of its own under ``workdir``; returns once ready (see
    ``RedisSentinel.wait_ready``)."""
    binary = require_binary("redis-server")
    servers: list[RedisServer] = []
    started: list[ManagedServer] = []
    ports: list[int] = []
    try:
        for index in range(replicas + 1):
            node_dir = workdir / f"redis{index}"
            node_dir.mkdir()
            extra = [] if index == 0 else ["--replicaof", "127.0.0.1", str(servers[0].port)]
            servers.append(start_redis(node_dir, unix_socket=False, extra_args=extra,
                                       name=f"redis-sentinel-node{index}", env=env))
        for index in range(sentinels):
            sentinel_dir = workdir / f"sentinel{index}"
            sentinel_dir.mkdir()
            port = free_port()
            config = sentinel_dir / "sentinel.conf"  # a sentinel rewrites its config file
            config.write_text(
                f"port {port}\nbind 127.0.0.1\ndir {sentinel_dir}\n"
                f"sentinel monitor {SENTINEL_SERVICE} 127.0.0.1 {servers[0].port} "
                f"{sentinels // 2 + 1}\n"
                f"sentinel down-after-milliseconds {SENTINEL_SERVICE} {SENTINEL_DOWN_AFTER_MS}\n"
                f"sentinel failover-timeout {SENTINEL_SERVICE} {SENTINEL_FAILOVER_TIMEOUT_MS}\n"
                f"sentinel parallel-syncs {SENTINEL_SERVICE} 1\n"
            )
            sentinel = ManagedServer(
                f"sentinel-{port}", [binary, str(config), "--sentinel"], sentinel_dir,
                functools.partial(_ping, port), env=env,
            )
            sentinel.start()
            started.append(sentinel)
            ports.append(port)
        setup = RedisSentinel(servers, started, ports, workdir)
        setup.wait_ready()
        return setup
    except BaseException:
        for sentinel in started:
            sentinel.stop()
        for server in servers:
            server.stop()
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


@pytest.fixture
def redis_sentinel() -> Iterator[RedisSentinel]:
    """A Sentinel set-up of this test's own (a primary, a replica, three sentinels), to fail
    over."""
    with _running("tenure-sentinel-", start_redis_sentinel) as setup:
        yield setup
