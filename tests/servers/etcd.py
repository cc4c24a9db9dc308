"""A 3-node etcd cluster on free loopback ports, in a temp dir, stopped by PID.

Each member is Debian's ``etcd`` (``etcd-server``, 3.4) with short Raft timers
(``--heartbeat-interval 50 --election-timeout 500``): a cluster is up in about 1.3 s and a
stopped leader is replaced in about half a second. Readiness is every member's ``/health``
answering ``"health":"true"`` (which needs a quorum and a leader), never a sleep.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import pathlib
import shutil
import tempfile
import time
import urllib.request
from collections.abc import Iterator

import pytest

from tests.servers._process import ManagedServer, ServerFailed, free_port, require_binary

__all__ = ["EtcdCluster", "etcd_cluster", "etcd_url", "start_etcd_cluster"]


def _get(port: int, path: str, body: dict[str, object] | None = None) -> dict[str, object]:
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}{path}",
        data=None if body is None else json.dumps(body).encode(),
        method="GET" if body is None else "POST",
    )
    with urllib.request.urlopen(request, timeout=1.0) as reply:
        answer: dict[str, object] = json.loads(reply.read())
        return answer


@dataclasses.dataclass
class EtcdMember:
    name: str
    client_port: int
    peer_port: int
    server: ManagedServer

    def healthy(self) -> bool:
        try:
            return _get(self.client_port, "/health").get("health") == "true"
        except (OSError, ValueError):
            return False

    def status(self) -> dict[str, object]:
        return _get(self.client_port, "/v3/maintenance/status", {})


@dataclasses.dataclass
class EtcdCluster:
    members: list[EtcdMember]

    @property
    def url(self) -> str:
        return "etcd://" + ",".join(f"127.0.0.1:{m.client_port}" for m in self.members)

    def leader(self) -> EtcdMember:
        """The member that is Raft leader now (asked of any running member)."""
        for member in self.members:
            with contextlib.suppress(OSError, ValueError):
                status = member.status()
                header = status.get("header")
                member_id = header.get("member_id") if isinstance(header, dict) else None
                if member_id is not None and status.get("leader") == member_id:
                    return member
        raise ServerFailed("no etcd member says it is the leader")

    def wait_healthy(self, timeout: float = 30.0, members: list[EtcdMember] | None = None) -> None:
        deadline = time.monotonic() + timeout
        waiting = members or self.members
        while time.monotonic() < deadline:
            if all(member.healthy() for member in waiting):
                return
            time.sleep(0.05)
        tails = "\n".join(m.server.tail(5) for m in waiting)
        raise ServerFailed(f"etcd cluster not healthy after {timeout} s:\n{tails}")

    def stop(self) -> None:
        for member in self.members:
            member.server.stop()


def start_etcd_cluster(workdir: pathlib.Path, size: int = 3) -> EtcdCluster:
    binary = require_binary("etcd", "/usr/bin/etcd")
    ports: set[int] = set()
    while len(ports) < size * 2:
        ports.add(free_port())
    pairs = list(zip(sorted(ports)[::2], sorted(ports)[1::2], strict=True))
    names = [f"m{index}" for index in range(size)]
    initial = ",".join(
        f"{name}=http://127.0.0.1:{peer}" for name, (_, peer) in zip(names, pairs, strict=True)
    )
    cluster = EtcdCluster([])
    try:
        for name, (client, peer) in zip(names, pairs, strict=True):
            data = workdir / name
            argv = [
                binary, "--name", name, "--data-dir", str(data),
                "--listen-client-urls", f"http://127.0.0.1:{client}",
                "--advertise-client-urls", f"http://127.0.0.1:{client}",
                "--listen-peer-urls", f"http://127.0.0.1:{peer}",
                "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}",
                "--initial-cluster", initial, "--initial-cluster-state", "new",
                "--initial-cluster-token", f"tenure-{workdir.name}",
                "--heartbeat-interval", "50", "--election-timeout", "500",
                "--logger", "zap", "--log-level", "warn",
            ]
            # A member alone is not healthy (no quorum): each one is "started" once it
            # runs; the cluster's readiness is checked below, on every member.
            server = ManagedServer(f"etcd-{name}", argv, workdir, ready=lambda: None)
            cluster.members.append(EtcdMember(name, client, peer, server.start()))
        cluster.wait_healthy()
        return cluster
    except BaseException:
        cluster.stop()
        raise


@contextlib.contextmanager
def running_etcd_cluster() -> Iterator[EtcdCluster]:
    workdir = pathlib.Path(tempfile.mkdtemp(prefix="tenure-etcd-"))
    try:
        cluster = start_etcd_cluster(workdir)
        try:
            yield cluster
        finally:
            cluster.stop()
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


@pytest.fixture(scope="session")
def etcd_cluster() -> Iterator[EtcdCluster]:
    with running_etcd_cluster() as cluster:
        yield cluster


@pytest.fixture(scope="session")
def etcd_url(etcd_cluster: EtcdCluster) -> str:
    """The session's 3-node cluster (shared: tests use unique names)."""
    return etcd_cluster.url


@pytest.fixture
def dedicated_etcd() -> Iterator[EtcdCluster]:
    """A 3-node cluster of this test's own, to stop members of."""
    with running_etcd_cluster() as cluster:
        yield cluster
