"""A 3-node ZooKeeper ensemble on free loopback ports, in a temp dir, stopped by PID.

Debian's ``zookeeper`` (3.8) started as ``java -cp DIR:/usr/share/java/zookeeper.jar
org.apache.zookeeper.server.quorum.QuorumPeerMain DIR/zoo.cfg``, DIR holding the member's
``zoo.cfg`` and a ``log4j.properties``. ``tickTime=500`` keeps sessions and elections short
(an ensemble is up in about 1.4 s). Readiness is every member answering the ``srvr``
four-letter word with ``Mode: leader`` or ``Mode: follower`` (it serves only in a quorum),
never a sleep.
"""

from __future__ import annotations

import contextlib
import dataclasses
import pathlib
import shutil
import socket
import tempfile
import time
from collections.abc import Iterator

import pytest

from tests.servers._process import ManagedServer, ServerFailed, free_port, require_binary
from tests.servers._shared import shared_server

__all__ = ["SERVING_JVM", "TEST_JVM", "ZooKeeperEnsemble", "start_zookeeper_ensemble",
           "zookeeper_ensemble", "zookeeper_url"]

JAR = pathlib.Path("/usr/share/java/zookeeper.jar")
TICK_MS = 500
TEST_JVM = ("-Xms64m", "-Xmx256m", "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC",
            "-XX:CICompilerCount=1", "-XX:-UsePerfData")
"""The JVM of a test's ensemble, which lives seconds to minutes: compiled by the client
compiler alone (C2's optimisations never pay back in that time), one compiler thread, the
serial collector, no perf-data file. Against the JVM's defaults this cut an ensemble's CPU
to start by 28% and to serve 200 lock cycles by 38% (1.69 -> 1.22 s, 2.10 -> 1.31 s)."""
SERVING_JVM = ("-Xms64m", "-Xmx256m")
"""The JVM's defaults (heap aside), as a deployed ZooKeeper runs: for benchmarks."""
LOG4J = """\
log4j.rootLogger=WARN, CONSOLE
log4j.appender.CONSOLE=org.apache.log4j.ConsoleAppender
log4j.appender.CONSOLE.layout=org.apache.log4j.PatternLayout
log4j.appender.CONSOLE.layout.ConversionPattern=%d{ISO8601} %-5p [%t] %m%n
"""


def four_letter_word(port: int, word: bytes, timeout: float = 1.0) -> str:
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as connection:
        connection.sendall(word)
        chunks = []
        while chunk := connection.recv(4096):
            chunks.append(chunk)
    return b"".join(chunks).decode(errors="replace")


@dataclasses.dataclass
class ZooKeeperMember:
    myid: int
    client_port: int
    server: ManagedServer

    def mode(self) -> str | None:
        """"leader", "follower", or None when not serving."""
        try:
            answer = four_letter_word(self.client_port, b"srvr")
        except OSError:
            return None
        for line in answer.splitlines():
            if line.startswith("Mode:"):
                return line.split(":", 1)[1].strip()
        return None


@dataclasses.dataclass
class ZooKeeperEnsemble:
    members: list[ZooKeeperMember]

    @property
    def url(self) -> str:
        return "zookeeper://" + ",".join(f"127.0.0.1:{m.client_port}" for m in self.members)

    def leader(self) -> ZooKeeperMember:
        for member in self.members:
            if member.mode() == "leader":
                return member
        raise ServerFailed("no ZooKeeper member says it is the leader")

    def wait_serving(
        self, timeout: float = 60.0, members: list[ZooKeeperMember] | None = None
    ) -> None:
        deadline = time.monotonic() + timeout
        waiting = members or self.members
        while time.monotonic() < deadline:
            if all(m.mode() in ("leader", "follower") for m in waiting):
                return
            time.sleep(0.05)
        tails = "\n".join(m.server.tail(5) for m in waiting)
        raise ServerFailed(f"ZooKeeper ensemble not serving after {timeout} s:\n{tails}")

    def stop(self) -> None:
        for member in self.members:
            member.server.stop()


def start_zookeeper_ensemble(workdir: pathlib.Path, size: int = 3,
                             jvm: tuple[str, ...] = TEST_JVM) -> ZooKeeperEnsemble:
    java = require_binary("java")
    if not JAR.exists():
        raise ServerFailed(f"{JAR} not found: run scripts/install-servers (apt zookeeper)")
    ports: set[int] = set()
    while len(ports) < size * 3:
        ports.add(free_port())
    ordered = sorted(ports)
    triples = [ordered[i * 3:(i + 1) * 3] for i in range(size)]
    servers = "\n".join(
        f"server.{index + 1}=127.0.0.1:{quorum}:{election}"
        for index, (_, quorum, election) in enumerate(triples)
    )
    ensemble = ZooKeeperEnsemble([])
    try:
        for index, (client, _, _) in enumerate(triples):
            myid = index + 1
            home = workdir / f"zk{myid}"
            data = home / "data"
            data.mkdir(parents=True)
            (data / "myid").write_text(f"{myid}\n")
            (home / "log4j.properties").write_text(LOG4J)
            (home / "zoo.cfg").write_text(
                f"tickTime={TICK_MS}\ninitLimit=10\nsyncLimit=5\n"
                f"dataDir={data}\nclientPort={client}\nclientPortAddress=127.0.0.1\n"
                "4lw.commands.whitelist=srvr,ruok\nadmin.enableServer=false\n"
                "maxSessionTimeout=60000\n"
                f"{servers}\n"
            )
            argv = [
                java, *jvm, "-cp", f"{home}:{JAR}",
                "org.apache.zookeeper.server.quorum.QuorumPeerMain", str(home / "zoo.cfg"),
            ]
            # A member alone does not serve (no quorum): each one is "started" once it runs;
            # the ensemble's readiness is checked below, on every member.
            server = ManagedServer(f"zookeeper-{myid}", argv, home, ready=lambda: None)
            ensemble.members.append(ZooKeeperMember(myid, client, server.start()))
        ensemble.wait_serving()
        return ensemble
    except BaseException:
        ensemble.stop()
        raise


@contextlib.contextmanager
def running_zookeeper_ensemble(jvm: tuple[str, ...] = TEST_JVM) -> Iterator[ZooKeeperEnsemble]:
    workdir = pathlib.Path(tempfile.mkdtemp(prefix="tenure-zookeeper-"))
    try:
        ensemble = start_zookeeper_ensemble(workdir, jvm=jvm)
        try:
            yield ensemble
        finally:
            ensemble.stop()
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


@pytest.fixture(scope="session")
def zookeeper_ensemble() -> Iterator[ZooKeeperEnsemble]:
    """The run's 3-node ensemble, one for every pytest-xdist worker
    (tests/servers/_shared.py)."""
    with shared_server("zookeeper", start_zookeeper_ensemble) as ensemble:
        yield ensemble


@pytest.fixture(scope="session")
def zookeeper_url(zookeeper_ensemble: ZooKeeperEnsemble) -> str:
    """The run's 3-node ensemble (shared by every test and worker: tests use unique names)."""
    return zookeeper_ensemble.url


@pytest.fixture
def dedicated_zookeeper() -> Iterator[ZooKeeperEnsemble]:
    """A 3-node ensemble of this test's own, to stop members of."""
    with running_zookeeper_ensemble() as ensemble:
        yield ensemble
