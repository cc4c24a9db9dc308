"""The servers a full-profile run needs, started with the test suite's own start functions
(``tests/servers/<backend>.py``): temp directories, free loopback ports, real readiness
probes, stopped by PID at the end. SQLite and memory need none.

``Servers.target(backend)`` is the backend's shared server for the run; ``restartable``
starts one of its own for the restart scenario, which must not disturb the others;
``failover`` a replicated set-up of its own (Redis: a primary, a replica and three
sentinels) for the failover scenario.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import importlib
import importlib.metadata
import json
import pathlib
import shutil
import sqlite3
import tempfile
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from typing import Any

from tests.backends import row

from safety.clock import WallClock
from safety.control import ROOT, ClockJump, ClockSetup, Target

__all__ = [
    "CLOCK_VARIANTS",
    "NotReady",
    "Servers",
    "clock_variants",
    "landed",
    "restart_variants",
    "server_version",
]


class NotReady(RuntimeError):
    """The backend (or the harness's way to start its server) does not exist yet."""


def landed(backend: str) -> str | None:
    """None if tenure ships the backend; else why it can't be run."""
    try:
        package = row(backend).package
    except LookupError as exc:  # no row, or no registered package serves its scheme
        return str(exc.args[0])
    # A backend's sync flavour is a module or, once split, a package of modules.
    base = ROOT / "src" / "tenure" / "backends" / package
    if not (base / "_sync.py").exists() and not (base / "_sync" / "__init__.py").exists():
        return f"tenure.backends.{package} is not written yet"
    return None


class Servers:
    """Starts servers on demand and stops every one of them on ``close()``."""

    def __init__(self, workdir: pathlib.Path) -> None:
        self.workdir = workdir
        self._stack = contextlib.ExitStack()
        self._shared: dict[str, Target] = {}
        self._templates: dict[str, pathlib.Path] = {}

    def close(self) -> None:
        self._stack.close()

    def __enter__(self) -> Servers:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def target(self, backend: str) -> Target:
        """The backend's server for this run (started on first use)."""
        if backend not in self._shared:
            self._shared[backend] = self._stack.enter_context(self._start(backend, False))
        return self._shared[backend]

    @contextlib.contextmanager
    def restartable(self, backend: str, variant: str = "") -> Iterator[Target]:
        """A server of its own, which the restart scenario may stop and start."""
        with self._start(backend, True, variant) as target:
            yield target

    @contextlib.contextmanager
    def failover(self, backend: str) -> Iterator[Target]:
        """A set-up of its own whose primary scenario 13 kills and whose replica it lets the
        watchers promote: Redis with three sentinels, reached through redis+sentinel://."""
        reason = landed(backend)
        if reason is not None:
            raise NotReady(reason)
        if backend != "redis":
            raise NotReady(f"the harness has no failover set-up for {backend}")
        with redis_sentinel(self._directory(backend)) as target:
            yield target

    @contextlib.contextmanager
    def clocked(self, backend: str, variant: str,
                shared: Target | None = None) -> Iterator[Target]:
        """The backend with a wall clock scenario 10 can move: its servers' (started for the
        purpose, with the clock's preload library), its clients' (the worker processes, on
        ``shared`` or the run's server), or for SQLite the host's, which is every
        process's."""
        setup = CLOCK_VARIANTS[backend][variant]
        clock = WallClock()
        try:
            if setup.moves_workers:
                # The workers' clock: the clients', or SQLite's, which each process reads.
                target = (shared or self.target(backend)) if backend != "sqlite" else Target(
                    backend, f"sqlite:///{_fresh(self._directory(backend), 'clock-')}/locks.db")
                yield dataclasses.replace(target, variant=variant, worker_env=clock.env(),
                                          clock=ClockJump(clock, setup))
                return
            with self._start(backend, False, env=clock.env(), moved=setup.nodes) as target:
                held_everywhere = (functools.partial(lease_on_every_node, target)
                                   if backend == "redlock" and not setup.ends_leases else None)
                yield dataclasses.replace(
                    target, variant=variant,
                    clock=ClockJump(clock, setup, lambda: server_clocks(target, setup.nodes),
                                    held_everywhere))
        finally:
            clock.close()

    def _directory(self, backend: str) -> pathlib.Path:
        path = self.workdir / "servers" / backend
        path.mkdir(parents=True, exist_ok=True)
        return path

    def _template(self, backend: str, module: Any) -> pathlib.Path:
        if backend not in self._templates:
            template: pathlib.Path = module._template()
            self._templates[backend] = template
            self._stack.callback(shutil.rmtree, template, ignore_errors=True)
        return self._templates[backend]

    @contextlib.contextmanager
    def _start(self, backend: str, restartable: bool, variant: str = "", *,
               env: dict[str, str] | None = None, moved: int = 0) -> Iterator[Target]:
        """``env``: added to the servers' environment (for Redlock, to the first ``moved``
        nodes' only). The backend is a row of tests/backends.py (the only list of them):
        here is only how each one's servers start for the scenarios; a row without a case
        here is NotReady."""
        reason = landed(backend)
        if reason is not None:
            raise NotReady(reason)
        if backend == "memory":
            yield Target(backend, "memory://")
        elif backend == "sqlite":
            yield Target(backend, f"sqlite:///{self._directory(backend) / 'locks.db'}")
        elif backend in ("mysql", "postgresql"):
            module = importlib.import_module(row(backend).servers)
            with module._server(self._template(backend, module), env) as server:
                yield Target(backend, server.url, server)
        elif backend == "mongodb":
            with mongoeco(self._directory(backend), durable=restartable, env=env) as target:
                yield target
        elif backend == "redis":
            with redis_server(self._directory(backend), variant, env) as target:
                yield target
        elif backend == "redis_cluster":
            with redis_cluster(self._directory(backend), env) as target:
                yield target
        elif backend == "redlock":
            with redlock_nodes(self._directory(backend), variant, env, moved) as target:
                yield target
        elif backend in ("etcd", "zookeeper"):
            with ensemble(backend, self._directory(backend)) as target:
                yield target
        else:
            raise NotReady(f"the harness cannot start a {backend} server yet (no start "
                           "function in tests/servers/ that it knows)")


@contextlib.contextmanager
def mongoeco(workdir: pathlib.Path, *, durable: bool,
             env: dict[str, str] | None = None) -> Iterator[Target]:
    """The MongoDB stand-in. ``durable``: on its SQLite storage engine, which keeps data
    across a restart as a real mongod does; its default in-memory engine would forget every
    lock and fence, which would measure the stand-in rather than tenure."""
    from tests.servers.mongodb import MongoecoServer

    engine = "sqlite" if durable else "memory"
    server = MongoecoServer(workdir / ("durable" if durable else "memory"), engine=engine,
                            env=env)
    server.start()
    try:
        yield Target("mongodb", server.url, server)
    finally:
        server.stop()


REDLOCK_NODES = 3

RESTART_VARIANTS = {
    "redis": ["no persistence", "AOF, appendfsync always"],
    "redlock": [
        f"1 of {REDLOCK_NODES} nodes restarted, no persistence",
        f"2 of {REDLOCK_NODES} nodes restarted, no persistence",
        f"2 of {REDLOCK_NODES} nodes restarted, AOF, appendfsync always",
    ],
}
"""Server configurations the restart scenario runs on, where the promise depends on them."""


def restart_variants(backend: str) -> list[str]:
    return RESTART_VARIANTS.get(backend, [""])


def _fresh(parent: pathlib.Path, prefix: str) -> pathlib.Path:
    return pathlib.Path(tempfile.mkdtemp(prefix=prefix, dir=parent))


@contextlib.contextmanager
def redis_server(workdir: pathlib.Path, variant: str,
                 env: dict[str, str] | None = None) -> Iterator[Target]:
    from tests.servers.redis import start_redis

    persistence = variant.startswith("AOF")
    server = start_redis(_fresh(workdir, "server-"), unix_socket=False,
                         persistence=persistence, env=env)
    try:
        yield Target("redis", server.url, server, variant,
                     durable=True if persistence else None)
    finally:
        server.stop()


class _Sentinel:
    """Fail a Sentinel set-up over: kill its primary, wait for the promotion, bring the killed
    server back as a replica of the new primary (empty: it copies the new primary's data)."""

    def __init__(self, setup: Any) -> None:
        self.setup = setup
        self._killed: Any = None

    def kill_primary(self) -> str:
        self._killed = self.setup.kill_primary()
        return f"127.0.0.1:{self._killed.port}"

    def wait_promoted(self) -> str:
        promoted = self.setup.wait_promoted(self._killed)
        return f"127.0.0.1:{promoted.port}"

    def rejoin(self) -> None:
        if self._killed is not None:
            self.setup.rejoin(self._killed)
            self._killed = None

    def restart(self) -> None:
        """A whole failover: the restart of a set-up whose primary moves."""
        self.kill_primary()
        self.wait_promoted()
        self.rejoin()


@contextlib.contextmanager
def redis_sentinel(workdir: pathlib.Path) -> Iterator[Target]:
    """A primary, one replica and three sentinels (tests/servers/redis.py), without
    persistence, failing over within a few seconds of the primary's death."""
    from tests.servers.redis import start_redis_sentinel

    setup = start_redis_sentinel(_fresh(workdir, "sentinel-"))
    try:
        yield Target("redis", setup.url, _Sentinel(setup),
                     "1 primary, 1 replica, 3 sentinels, no persistence")
    finally:
        setup.stop()


class _WholeCluster:
    """Restart every node of a cluster, then wait until the cluster says it is ok."""

    def __init__(self, cluster: Any) -> None:
        self.cluster = cluster

    def restart(self) -> None:
        from tests.servers.redis import _ask

        for node in self.cluster.nodes:
            node.restart()
        deadline = time.monotonic() + 60
        while not all(b"cluster_state:ok" in _ask(node.port, b"CLUSTER INFO")
                      for node in self.cluster.nodes):
            if time.monotonic() > deadline:
                raise RuntimeError("the Redis Cluster did not come back within 60 s")
            time.sleep(0.05)


@contextlib.contextmanager
def redis_cluster(workdir: pathlib.Path, env: dict[str, str] | None = None
                  ) -> Iterator[Target]:
    from tests.servers.redis import start_redis_cluster

    cluster = start_redis_cluster(_fresh(workdir, "cluster-"), env=env)
    try:
        yield Target("redis_cluster", cluster.url, _WholeCluster(cluster),
                     "every node restarted, no persistence")
    finally:
        cluster.stop()


class _SomeNodes:
    """Restart the first ``count`` of Redlock's nodes, one after the other."""

    def __init__(self, servers: list[Any], count: int) -> None:
        self.servers = servers
        self.count = count

    def restart(self) -> None:
        for server in self.servers[: self.count]:
            server.restart()


@contextlib.contextmanager
def redlock_nodes(workdir: pathlib.Path, variant: str = "", env: dict[str, str] | None = None,
                  env_nodes: int = 0) -> Iterator[Target]:
    """Independent redis-servers (no replication between them), as Redlock wants. A restart
    variant names how many restart: a minority keeps every lease on the others; a majority
    without persistence forgets them. ``env`` goes to the first ``env_nodes`` nodes."""
    from tests.servers.redlock import start_redlock_nodes

    persistence = "AOF" in variant
    nodes = start_redlock_nodes(_fresh(workdir, "nodes-"), REDLOCK_NODES,
                                persistence=persistence, env=env, env_nodes=env_nodes)
    restarted = int(variant.split(maxsplit=1)[0]) if variant else 0
    majority = restarted > REDLOCK_NODES // 2
    try:
        yield Target(
            "redlock", nodes.url, _SomeNodes(nodes.servers, restarted) if restarted else None,
            variant or f"{REDLOCK_NODES} nodes",
            durable=True if persistence else None,
            leases_wiped=None if not variant else (majority and not persistence),
        )
    finally:
        nodes.stop()


class _Ensemble:
    """A replicated store's nodes (etcd members, ZooKeeper servers): restart all of them in
    place (scenario 5), or stop one chosen by its role and start it again (scenario 11)."""

    def __init__(self, backend: str, nodes: Any) -> None:
        self.backend = backend
        self.nodes = nodes
        self._stopped: Any = None

    @property
    def _members(self) -> list[Any]:
        members: list[Any] = self.nodes.members
        return members

    def _wait(self, members: list[Any] | None = None) -> None:
        if self.backend == "etcd":
            self.nodes.wait_healthy(60.0, members)
        else:
            self.nodes.wait_serving(60.0, members)

    def restart(self) -> None:
        # All at once, as a power cut would: a node restarted alone would rejoin a live quorum.
        for member in self._members:
            member.server.stop()
        for member in self._members:
            member.server.start()
        self._wait()

    def stop_node(self, role: str) -> str:
        """Stop the leader (``role="leader"``) or a follower with SIGKILL; its name."""
        leader = self.nodes.leader()
        member = leader if role == "leader" else next(m for m in self._members if m is not leader)
        member.server.kill()
        self._stopped = member
        return str(member.server.name)

    def start_stopped(self) -> None:
        if self._stopped is not None:
            self._stopped.server.start()
            self._stopped = None
        self._wait()


@contextlib.contextmanager
def ensemble(backend: str, workdir: pathlib.Path) -> Iterator[Target]:
    """A 3-node etcd cluster or ZooKeeper ensemble, started by the test suite's functions."""
    if backend == "etcd":
        from tests.servers.etcd import start_etcd_cluster as start
    else:
        from tests.servers.zookeeper import start_zookeeper_ensemble as start
    nodes = start(_fresh(workdir, "nodes-"))
    try:
        yield Target(backend, nodes.url, _Ensemble(backend, nodes),
                     f"{len(nodes.members)} nodes, every node restarted")
    finally:
        nodes.stop()


# ---- clocks (scenario 10) ---------------------------------------------------------------------

CLIENTS = ClockSetup("the clients (every worker process)", False, moves_workers=True)


def _server_clock(whose: str) -> dict[str, ClockSetup]:
    return {whose: ClockSetup(whose, True), "clients' clocks": CLIENTS}


CLOCK_VARIANTS: dict[str, dict[str, ClockSetup]] = {
    "sqlite": {"host clock": ClockSetup("the host (SQLite's clock is every process's)", True,
                                        moves_workers=True)},
    "redis": _server_clock("server clock"),
    "redis_cluster": _server_clock("every node's clock"),
    "redlock": {
        f"1 of {REDLOCK_NODES} nodes' clocks": ClockSetup(
            f"1 of {REDLOCK_NODES} nodes", False, nodes=1),
        f"2 of {REDLOCK_NODES} nodes' clocks": ClockSetup(
            f"2 of {REDLOCK_NODES} nodes", True, nodes=2),
        "clients' clocks": CLIENTS,
    },
    "mongodb": _server_clock("server clock"),
    "mysql": _server_clock("server clock"),
    "postgresql": _server_clock("server clock"),
}
"""Whose clock scenario 10 jumps, per backend, and what it may break: a lease ends early
only where its expiry is judged by the moved clock (for Redlock, on a majority of nodes)."""


def clock_variants(backend: str) -> list[str]:
    return list(CLOCK_VARIANTS.get(backend, {}))


def server_clocks(target: Target, moved: int = 0) -> list[float]:
    """What the moved servers' wall clocks read now, Unix seconds (Redlock: its first
    ``moved`` nodes; a Cluster: every node)."""
    if target.backend in ("redis", "redis_cluster", "redlock"):
        ports = _redis_ports(target)
        return [_redis_time(port) for port in (ports[:moved] if moved else ports)]
    if target.backend == "postgresql":
        import psycopg

        with psycopg.connect(target.url, connect_timeout=5) as postgres:
            row = postgres.execute("SELECT extract(epoch FROM clock_timestamp())").fetchone()
        return [float(row[0])] if row else []
    if target.backend == "mysql":
        return [float(_mysql_value(target.url, "SELECT UNIX_TIMESTAMP(NOW(6))"))]
    if target.backend == "mongodb":
        import pymongo
        from bson.codec_options import CodecOptions

        client: pymongo.MongoClient[dict[str, Any]] = pymongo.MongoClient(
            target.url, serverSelectionTimeoutMS=5000, tz_aware=True
        )
        try:
            # command() decodes with its own codec options, not the client's: without
            # tz_aware here localTime comes back naive and .timestamp() would read it as
            # local time (off by the machine's UTC offset whenever TZ is not UTC).
            hello = client.admin.command("hello", codec_options=CodecOptions(tz_aware=True))
            return [hello["localTime"].timestamp()]
        finally:
            client.close()
    raise ValueError(f"no way to read {target.backend}'s server clock")


def lease_on_every_node(target: Target, name: str) -> bool:
    """Whether every Redlock node of ``target`` holds one and the same lease on ``name`` (the
    nodes' own servers, read directly)."""
    import redis

    from tenure.backends.redis._scripts import lock_keys

    lease = lock_keys("tenure", name).lease
    tokens = set()
    for port in _redis_ports(target):
        connection = redis.Redis(port=port, socket_timeout=5)
        try:
            tokens.add(connection.hget(lease, "token"))
        finally:
            connection.close()
    return len(tokens) == 1 and None not in tokens


def _redis_ports(target: Target) -> list[int]:
    return [int(address.rpartition(":")[2])
            for address in urllib.parse.urlsplit(target.url).netloc.split(",")]


def _redis_time(port: int) -> float:
    import redis

    connection = redis.Redis(port=port, socket_timeout=5)
    try:
        seconds, microseconds = connection.time()
    finally:
        connection.close()
    return float(seconds) + microseconds / 1e6


# ---- versions ----------------------------------------------------------------------------------


def driver_versions() -> dict[str, str]:
    found = {}
    for distribution in ("redis", "hiredis", "pymongo", "psycopg", "psycopg-binary", "PyMySQL",
                         "httpx", "kazoo", "hypothesis"):
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            found[distribution] = importlib.metadata.version(distribution)
    return found


def server_version(target: Target) -> str:
    """What the running server says it is (best effort: an error says why not)."""
    try:
        return _server_version(target)
    except Exception as exc:
        return f"unknown ({type(exc).__name__}: {exc})"


def _server_version(target: Target) -> str:
    url = target.url
    if target.backend == "memory":
        return "in-process"
    if target.backend == "sqlite":
        return f"SQLite {sqlite3.sqlite_version}"
    if target.backend in ("redis", "redis_cluster", "redlock"):
        import redis

        first = urllib.parse.urlsplit(url).netloc.split("@")[-1].split(",")[0]
        host, _, port = first.rpartition(":")
        connection = redis.Redis(host=host or "127.0.0.1", port=int(port), socket_timeout=5)
        try:
            info = connection.info("server")
        finally:
            connection.close()
        return f"Redis {info['redis_version']}"
    if target.backend == "mysql":
        return f"MariaDB/MySQL {_mysql_value(url, 'SELECT VERSION()')}"
    if target.backend == "postgresql":
        import psycopg

        with psycopg.connect(url, connect_timeout=5) as postgres:
            row = postgres.execute("SHOW server_version").fetchone()
        return f"PostgreSQL {row[0] if row else '?'}"
    if target.backend == "mongodb":
        import pymongo

        client: pymongo.MongoClient[dict[str, Any]] = pymongo.MongoClient(
            url, serverSelectionTimeoutMS=5000
        )
        try:
            answer = client.admin.command("buildInfo")
        finally:
            client.close()
        return f"MongoDB wire protocol {answer.get('version', '?')} ({_mongoeco_version()})"
    if target.backend == "etcd":
        first = urllib.parse.urlsplit(url).netloc.split("@")[-1].split(",")[0]
        with urllib.request.urlopen(f"http://{first}/version", timeout=5) as reply:
            answer = json.loads(reply.read())
        return f"etcd {answer.get('etcdserver', '?')}"
    if target.backend == "zookeeper":
        from tests.servers.zookeeper import four_letter_word

        first = urllib.parse.urlsplit(url).netloc.split("@")[-1].split(",")[0]
        banner = four_letter_word(int(first.rpartition(":")[2]), b"srvr", timeout=5.0)
        version = banner.splitlines()[0].partition(":")[2].strip()
        return f"ZooKeeper {version.split('-')[0] or '?'}"
    return "unknown"


def _mysql_value(url: str, query: str) -> Any:
    """The first column of ``query``'s first row, on a connection of its own."""
    import pymysql  # type: ignore[import-untyped]

    parts = urllib.parse.urlsplit(url)
    database = pymysql.connect(
        host=parts.hostname, port=parts.port or 3306,
        user=urllib.parse.unquote(parts.username or ""),
        password=urllib.parse.unquote(parts.password or ""),
        database=parts.path.lstrip("/"), connect_timeout=5,
    )
    try:
        with database.cursor() as cursor:
            cursor.execute(query)
            row = cursor.fetchone()
    finally:
        database.close()
    if not row:
        raise RuntimeError(f"MariaDB answered no row to {query!r}")
    return row[0]


def _mongoeco_version() -> str:
    site = ROOT / ".venv-mongoeco" / "lib"
    for metadata in sorted(site.glob("python*/site-packages/mongoeco-*.dist-info/METADATA")):
        for line in metadata.read_text(errors="replace").splitlines():
            if line.startswith("Version:"):
                return f"mongoeco {line.split(':', 1)[1].strip()} stand-in"
    return "mongoeco stand-in"
