"""A 3-node etcd cluster on free loopback ports, in a temp dir, stopped by PID; and single
members over TLS (a throwaway CA made with openssl) or with auth enabled.

Each member is Debian's ``etcd`` (``etcd-server``, 3.4) with short Raft timers
(``--heartbeat-interval 50 --election-timeout 500``): a cluster is up in about 1.3 s and a
stopped leader is replaced in about half a second. Readiness is every member's ``/health``
answering ``"health":"true"`` (which needs a quorum and a leader), never a sleep.
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import json
import pathlib
import shutil
import ssl
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from typing import Any

import pytest

from tenure.backends.etcd._sync.store import EtcdBackend
from tests.servers._process import ManagedServer, ServerFailed, free_port, require_binary
from tests.servers._shared import shared_server

__all__ = [
    "AUTH_TOKEN_TTL", "AUTH_USER", "EtcdCluster", "EtcdServer", "GatewayRefused", "TlsFiles",
    "enable_auth", "etcd_auth", "etcd_client_cert_auth", "etcd_cluster", "etcd_tls",
    "etcd_tls_files", "etcd_url", "running_etcd_member", "start_etcd_cluster",
]


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
    """The run's 3-node cluster, one for every pytest-xdist worker (tests/servers/_shared.py)."""
    with shared_server("etcd", start_etcd_cluster) as cluster:
        yield cluster


@pytest.fixture(scope="session")
def etcd_url(etcd_cluster: EtcdCluster) -> str:
    """The run's 3-node cluster (shared by every test and worker: tests use unique names)."""
    return etcd_cluster.url


@pytest.fixture
def etcd_store(etcd_url: str) -> Iterator[EtcdBackend]:
    """A store (the sync store line, no client around it) on the run's cluster, closed
    after the test."""
    backend = EtcdBackend.from_url(etcd_url)
    try:
        yield backend
    finally:
        backend.close()


@pytest.fixture
def dedicated_etcd() -> Iterator[EtcdCluster]:
    """A 3-node cluster of this test's own, to stop members of."""
    with running_etcd_cluster() as cluster:
        yield cluster


# ---- one member with TLS and/or auth (tests/integration/test_etcd_tls_auth.py) -------------
#
# A single member, not three: TLS and auth are between a client and the member it talks to
# (every member gets the same TLS context and token from the same code), and failover over
# the members is exercised by the 3-node clusters above. One member starts in a fraction of
# a second and costs a third of the CPU on a shared 2-core machine.


@dataclasses.dataclass(frozen=True)
class TlsFiles:
    """A throwaway CA, a server certificate for 127.0.0.1 signed by it (serverAuth and
    clientAuth: etcd's own JSON gateway dials the member with it, and a member with
    ``--client-cert-auth`` checks that), and a client certificate signed by it. Made with the
    openssl command line in the fixture's temp dir, removed with it: never committed."""

    ca: pathlib.Path
    server_cert: pathlib.Path
    server_key: pathlib.Path
    client_cert: pathlib.Path
    client_key: pathlib.Path


def _openssl(directory: pathlib.Path, *argv: str) -> None:
    binary = require_binary("openssl", "/usr/bin/openssl")
    done = subprocess.run([binary, *argv], cwd=directory, capture_output=True, check=False)
    if done.returncode != 0:
        raise ServerFailed(f"openssl {argv[0]} failed: {done.stderr.decode(errors='replace')}")


def make_tls_files(directory: pathlib.Path) -> TlsFiles:
    directory.mkdir(parents=True, exist_ok=True)
    curve = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")
    _openssl(directory, "req", "-x509", *curve, "-keyout", "ca.key", "-out", "ca.pem",
             "-days", "2", "-subj", "/CN=tenure test CA",
             "-addext", "basicConstraints=critical,CA:TRUE",
             "-addext", "keyUsage=critical,keyCertSign,cRLSign")
    for name, usage, alt in (
        ("server", "serverAuth,clientAuth", "IP:127.0.0.1,DNS:localhost"),
        ("client", "clientAuth", "DNS:tenure-client"),
    ):
        (directory / f"{name}.ext").write_text(
            f"basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\n"
            f"extendedKeyUsage={usage}\nsubjectAltName={alt}\n"
        )
        _openssl(directory, "req", "-new", *curve, "-keyout", f"{name}.key",
                 "-out", f"{name}.csr", "-subj", f"/CN=tenure-{name}")
        _openssl(directory, "x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem",
                 "-CAkey", "ca.key", "-CAcreateserial", "-days", "2",
                 "-extfile", f"{name}.ext", "-out", f"{name}.pem")
    return TlsFiles(
        ca=directory / "ca.pem",
        server_cert=directory / "server.pem", server_key=directory / "server.key",
        client_cert=directory / "client.pem", client_key=directory / "client.key",
    )


class GatewayRefused(Exception):
    """An error status from ``EtcdServer.call``."""

    def __init__(self, status: int, text: str) -> None:
        super().__init__(f"HTTP {status}: {text}")
        self.status = status
        self.text = text


@dataclasses.dataclass
class EtcdServer:
    """One etcd member: ``https`` when started with TLS files."""

    port: int
    server: ManagedServer
    tls: TlsFiles | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def call(self, path: str, body: dict[str, object], token: str | None = None) -> Any:
        """POST to the member's gateway as a trusted admin (CA and client certificate):
        the JSON answer, or GatewayRefused for an error status."""
        scheme = "https" if self.tls else "http"
        request = urllib.request.Request(
            f"{scheme}://{self.address}{path}", data=json.dumps(body).encode(), method="POST",
            headers={"Authorization": token} if token else {},
        )
        try:
            with urllib.request.urlopen(request, timeout=2.0, context=self._context()) as reply:
                return json.loads(reply.read())
        except urllib.error.HTTPError as exc:
            with exc:  # its socket, closed now (an unclosed one fails a later test)
                raise GatewayRefused(exc.code, exc.read().decode(errors="replace")) from None

    def _context(self) -> ssl.SSLContext | None:
        if self.tls is None:
            return None
        context = ssl.create_default_context(cafile=str(self.tls.ca))
        context.load_cert_chain(str(self.tls.client_cert), str(self.tls.client_key))
        return context

    def ready(self) -> None:
        scheme = "https" if self.tls else "http"
        with urllib.request.urlopen(
            f"{scheme}://{self.address}/health", timeout=1.0, context=self._context()
        ) as reply:
            if json.loads(reply.read()).get("health") != "true":
                raise ServerFailed("etcd not healthy yet")

    def stop(self) -> None:
        self.server.stop()


def start_etcd_member(
    workdir: pathlib.Path,
    *,
    tls: TlsFiles | None = None,
    client_cert_auth: bool = False,
    options: Sequence[str] = (),
) -> EtcdServer:
    """One member alone (its own quorum), ready once its ``/health`` says so."""
    binary = require_binary("etcd", "/usr/bin/etcd")
    port, peer = free_port(), free_port()
    while peer == port:
        peer = free_port()
    scheme = "https" if tls else "http"
    argv = [
        binary, "--name", "solo", "--data-dir", str(workdir / "solo"),
        "--listen-client-urls", f"{scheme}://127.0.0.1:{port}",
        "--advertise-client-urls", f"{scheme}://127.0.0.1:{port}",
        "--listen-peer-urls", f"http://127.0.0.1:{peer}",
        "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}",
        "--initial-cluster", f"solo=http://127.0.0.1:{peer}",
        "--initial-cluster-token", f"tenure-{workdir.name}",
        "--heartbeat-interval", "50", "--election-timeout", "500",
        "--logger", "zap", "--log-level", "warn", *options,
    ]
    if tls is not None:
        argv += ["--cert-file", str(tls.server_cert), "--key-file", str(tls.server_key)]
        if client_cert_auth:
            argv += ["--client-cert-auth", "--trusted-ca-file", str(tls.ca)]
    member = EtcdServer(port, ManagedServer("etcd-solo", argv, workdir, ready=lambda: None), tls)
    member.server.ready = member.ready
    member.server.start()
    return member


AUTH_ROOT = ("root", "root-secret")
AUTH_USER = ("app", "app secret/:@")
"""A user with read and write permission on ``tenure/`` only (what tenure needs); its
password has the characters a URL must percent-encode."""


def enable_auth(member: EtcdServer) -> None:
    """Through the gateway's auth API, as ``etcdctl user add / role grant / auth enable``
    would: root (etcd requires it before ``auth enable``) and ``AUTH_USER`` with a role
    reading and writing the keys under ``tenure/``."""
    root, root_password = AUTH_ROOT
    user, password = AUTH_USER
    prefix = base64.b64encode(b"tenure/").decode()
    prefix_end = base64.b64encode(b"tenure0").decode()
    for path, body in (
        ("/v3/auth/user/add", {"name": root, "password": root_password}),
        ("/v3/auth/role/add", {"name": "root"}),
        ("/v3/auth/user/grant", {"user": root, "role": "root"}),
        ("/v3/auth/role/add", {"name": "tenure"}),
        ("/v3/auth/role/grant", {"name": "tenure", "perm": {
            "permType": "READWRITE", "key": prefix, "range_end": prefix_end}}),
        ("/v3/auth/user/add", {"name": user, "password": password}),
        ("/v3/auth/user/grant", {"user": user, "role": "tenure"}),
        ("/v3/auth/enable", {}),
    ):
        member.call(path, body)


@contextlib.contextmanager
def running_etcd_member(**how: Any) -> Iterator[EtcdServer]:
    workdir = pathlib.Path(tempfile.mkdtemp(prefix="tenure-etcd-solo-"))
    try:
        member = start_etcd_member(workdir, **how)
        try:
            yield member
        finally:
            member.stop()
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


@pytest.fixture(scope="session")
def etcd_tls_files() -> Iterator[TlsFiles]:
    directory = pathlib.Path(tempfile.mkdtemp(prefix="tenure-etcd-tls-"))
    try:
        yield make_tls_files(directory)
    finally:
        shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture(scope="session")
def etcd_tls(etcd_tls_files: TlsFiles) -> Iterator[EtcdServer]:
    """A member over TLS (``etcds://``), its certificate signed by the throwaway CA."""
    with running_etcd_member(tls=etcd_tls_files) as member:
        yield member


@pytest.fixture(scope="session")
def etcd_client_cert_auth(etcd_tls_files: TlsFiles) -> Iterator[EtcdServer]:
    """A member over TLS that requires a client certificate signed by the throwaway CA."""
    with running_etcd_member(tls=etcd_tls_files, client_cert_auth=True) as member:
        yield member


AUTH_TOKEN_TTL = 2
"""Seconds an unused auth token lives on the ``etcd_auth`` member (etcd's default: 300)."""


@pytest.fixture(scope="session")
def etcd_auth() -> Iterator[EtcdServer]:
    """A plain member with auth enabled (``AUTH_USER``) and tokens that end after
    ``AUTH_TOKEN_TTL`` seconds unused."""
    with running_etcd_member(options=["--auth-token-ttl", str(AUTH_TOKEN_TTL)]) as member:
        enable_auth(member)
        yield member
