"""An acquire's timeout is a deadline even when the server never answers (issue 13, 5).

A "hung" server here is a real listening socket that accepts every connection and never
writes a byte: what a paused, partitioned or wedged server looks like to a client, and what
drivers' own timeouts (seconds each, sometimes retried) let run long. ``acquire(timeout=T)``
must end by T + ``DEADLINE_SLACK``, closing the client must not wait on the dead server, and
``tenure run -w T`` must exit about as soon. The bounds below add generous slack for a loaded
test machine: they catch a deadline that is not kept (the drivers alone take 5 s or more
here), not a slow one. A refused port (nothing listens) must end as soon, and the undo that
cannot reach it either must say so in one INFO line, its traceback at DEBUG only.

The other side of the bound: a healthy server that is slow at first contact is not a hung
one. Connection set-up the server completed is credited to the call (a proxy here delays a
real redis-server's handshake and first reply), so a busy lock is a timeout, not an error.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import pathlib
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator

import pytest

import tenure
from tenure._async.acquisition import DEADLINE_SLACK
from tenure._async.client import CLEANUP_GRACE
from tenure.backends.zookeeper._async.session import STOP_LIMIT

TIMEOUT = 1.0
MARGIN = 1.5
"""Seconds of scheduling slack on a loaded machine, beyond T + DEADLINE_SLACK."""

URLS = {
    "redis": "redis://127.0.0.1:{0}/0",
    "redis_cluster": "redis+cluster://127.0.0.1:{0}",
    "redlock": "redlock://127.0.0.1:{0},127.0.0.1:{1},127.0.0.1:{2}",
    "mongodb": "mongodb://127.0.0.1:{0}/?directConnection=true",
    "mysql": "mysql://u@127.0.0.1:{0}/db",
    "postgresql": "postgresql://u@127.0.0.1:{0}/db",
    "etcd": "etcd://127.0.0.1:{0},127.0.0.1:{1}",
    "zookeeper": "zookeeper://127.0.0.1:{0}",
}


CLOSE_MARGIN = 0.6
"""Seconds of scheduling slack for closing: below what closing took before (2 s)."""


def close_limit(backend: str) -> float:
    """How long closing may wait: the grace for pending undo steps, and on ZooKeeper kazoo's
    bounded stop (which waits out a connect attempt to the dead server)."""
    return CLEANUP_GRACE + (STOP_LIMIT if backend == "zookeeper" else 0.0)


@pytest.fixture
def refused_port() -> int:
    """A loopback port nobody listens on (bound, then closed): connections are refused."""
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port: int = closed.getsockname()[1]
    return port


@pytest.fixture
def hung_ports() -> Iterator[list[int]]:
    """Three listening sockets that accept and never answer."""
    listeners = []
    accepted: list[socket.socket] = []
    for _ in range(3):
        listener = socket.socket()
        listener.bind(("127.0.0.1", 0))
        listener.listen(64)
        listeners.append(listener)

    def accept(listener: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while True:
                accepted.append(listener.accept()[0])

    for listener in listeners:
        threading.Thread(target=accept, args=(listener,), daemon=True).start()
    yield [listener.getsockname()[1] for listener in listeners]
    for connection in [*listeners, *accepted]:
        connection.close()


@pytest.mark.parametrize("backend", sorted(URLS))
def test_acquire_against_a_hung_server_ends_by_its_deadline(
    backend: str, hung_ports: list[int]
) -> None:
    url = URLS[backend].format(*hung_ports)
    locks = tenure.connect(url)
    began = time.monotonic()
    with pytest.raises(tenure.BackendError, match=r"no answer|failed|cannot"):
        locks.lock("deadline", ttl=5).acquire(timeout=TIMEOUT)
    took = time.monotonic() - began
    closing = time.monotonic()
    locks.close()
    closed = time.monotonic() - closing
    assert took <= TIMEOUT + DEADLINE_SLACK + MARGIN, took
    # CLEANUP_GRACE (and kazoo's bounded stop), not a driver's own timeout: closing took
    # 2 s on Redis before (and 1.5 s on a Cluster, waiting out its hung first contact).
    assert closed <= close_limit(backend) + CLOSE_MARGIN, closed


REFUSED_TIMEOUT = 0.5


@pytest.mark.parametrize("backend", ["redis", "mongodb", "mysql", "postgresql", "etcd"])
def test_acquire_against_a_refused_port_ends_by_its_deadline_and_logs_one_line(
    backend: str, refused_port: int, caplog: pytest.LogCaptureFixture
) -> None:
    # Nothing listens: a refused MongoDB took about 5 s (pymongo's server selection) for
    # acquire(timeout=0.5), and a failed undo on close() logged its traceback at INFO.
    url = URLS[backend].format(refused_port, refused_port, refused_port)
    caplog.set_level(logging.DEBUG, logger="tenure")
    ttl = 1.0
    locks = tenure.connect(url)
    began = time.monotonic()
    with pytest.raises(tenure.BackendError):
        locks.lock("deadline", ttl=ttl).acquire(timeout=REFUSED_TIMEOUT)
    took = time.monotonic() - began
    closing = time.monotonic()
    locks.close()
    closed = time.monotonic() - closing
    assert took <= REFUSED_TIMEOUT + DEADLINE_SLACK + MARGIN, took
    assert closed <= close_limit(backend) + CLOSE_MARGIN, closed

    def ours(record: logging.LogRecord) -> bool:
        # Undo threads of earlier tests (other ports) may still log meanwhile.
        return record.name.startswith("tenure") and f":{refused_port}" in record.getMessage()

    def told() -> list[logging.LogRecord]:
        return [r for r in caplog.records if ours(r) and r.levelno >= logging.INFO]

    # The undo of the failed acquire cannot reach the server either: it retries in the
    # background until the lease it might have left has expired, then gives up with one
    # INFO line, without a traceback (that is at DEBUG, for whoever asks).
    def traced() -> list[logging.LogRecord]:
        return [r for r in caplog.records if r.name.startswith("tenure") and r.exc_info]

    # The INFO line and the DEBUG traceback after it come from the undo's thread, which a
    # loaded machine may pause between the two: wait for both, not for a fixed while.
    waited_until = time.monotonic() + ttl + MARGIN + 2
    while not (told() and traced()) and time.monotonic() < waited_until:
        time.sleep(0.05)
    time.sleep(0.2)  # nothing more is logged after it
    assert [(r.levelno, r.exc_info) for r in told()] == [(logging.INFO, None)], [
        (r.levelname, r.getMessage(), r.exc_info) for r in told()
    ]
    assert "clean-up failed" in told()[0].getMessage()
    assert traced() and all(r.levelno == logging.DEBUG for r in traced()), traced()


@pytest.mark.parametrize("backend", ["redis", "postgresql", "etcd"])
async def test_async_acquire_against_a_hung_server_ends_by_its_deadline(
    backend: str, hung_ports: list[int]
) -> None:
    url = URLS[backend].format(*hung_ports)
    async with tenure.connect_async(url) as locks:
        began = time.monotonic()
        with pytest.raises(tenure.BackendError):
            await locks.lock("deadline", ttl=5).acquire(timeout=TIMEOUT)
        assert time.monotonic() - began <= TIMEOUT + DEADLINE_SLACK + MARGIN
    await asyncio.sleep(0)


def test_tenure_run_against_a_hung_server_exits_within_its_wait(hung_ports: list[int]) -> None:
    tenure_command = pathlib.Path(sys.executable).parent / "tenure"
    env = {k: v for k, v in os.environ.items() if not k.startswith("TENURE_")}
    # What starting the command and failing at once costs on this machine now (a refused
    # port: the same imports and error path), so that the bound is about the wait alone.
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        refused = closed.getsockname()[1]
    began = time.monotonic()
    subprocess.run([tenure_command, "run", "job", "-w", str(TIMEOUT), "--url",
                    URLS["redis"].format(refused), "--", "true"],
                   env=env, check=False, capture_output=True, timeout=60)
    startup = time.monotonic() - began
    began = time.monotonic()
    result = subprocess.run(
        [tenure_command, "run", "job", "-w", str(TIMEOUT), "--url",
         URLS["redis"].format(*hung_ports), "--", "true"],
        env=env, check=False, capture_output=True, text=True, timeout=60,
    )
    took = time.monotonic() - began
    assert result.returncode == 69, result.stderr  # EX_UNAVAILABLE: the server failed
    assert "no answer to acquire" in result.stderr
    assert "Traceback" not in result.stderr
    assert took <= startup + TIMEOUT + DEADLINE_SLACK + 1.2 + MARGIN, (took, startup)


SLOW_REPLIES = (1.0, 0.8)
"""Seconds the slow proxy holds, on each new connection, the handshake's replies (redis-py's
CLIENT SETINFO pair) and then the first script's reply. Each is within TIMEOUT +
DEADLINE_SLACK; together they are not."""


@pytest.fixture
def slow_setup_port(redis_url: str) -> Iterator[int]:
    """A proxy to the session's redis-server that delays, on each new connection, the
    replies of the connection's set-up and of its first script (SLOW_REPLIES), then passes
    everything at once: a healthy server reached slowly at first contact."""
    upstream = ("127.0.0.1", int(redis_url.rsplit(":", 1)[1].split("/", maxsplit=1)[0]))
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    sockets: list[socket.socket] = [listener]

    def link(client: socket.socket, server: socket.socket) -> None:
        handshake, script = SLOW_REPLIES
        began = time.monotonic()
        scripts = threading.Event()

        def requests() -> None:
            with contextlib.suppress(OSError):
                while data := client.recv(65536):
                    if b"EVAL" in data:
                        scripts.set()
                    server.sendall(data)

        threading.Thread(target=requests, daemon=True).start()
        delayed_script = False
        with contextlib.suppress(OSError):
            while data := server.recv(65536):
                # Every reply before the first script is the set-up's: held until
                # `handshake` seconds after the connection was made.
                if not scripts.is_set():
                    time.sleep(max(0.0, began + handshake - time.monotonic()))
                elif not delayed_script:
                    delayed_script = True
                    time.sleep(script)
                client.sendall(data)

    def accept() -> None:
        with contextlib.suppress(OSError):
            while True:
                client, _ = listener.accept()
                server = socket.create_connection(upstream)
                sockets.extend([client, server])
                threading.Thread(target=link, args=(client, server), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    yield listener.getsockname()[1]
    for each in sockets:
        each.close()


@pytest.mark.redis
def test_a_slow_first_contact_with_a_healthy_server_is_not_a_backend_error(
    redis_url: str, slow_setup_port: int, name: str
) -> None:
    # The connection's set-up (its handshake) and the first acquire's round trip together
    # take longer than TIMEOUT + DEADLINE_SLACK, but the server answered the set-up: that
    # time is credited to the call, so a busy lock is a plain timeout (False) once the
    # server said busy, not a BackendError at T + slack.
    assert max(SLOW_REPLIES) < TIMEOUT + DEADLINE_SLACK < sum(SLOW_REPLIES)
    holder = tenure.connect(redis_url)
    slow = tenure.connect(f"redis://127.0.0.1:{slow_setup_port}/0")
    try:
        with holder.lock(name, ttl=30):
            began = time.monotonic()
            assert slow.lock(name, ttl=5).acquire(timeout=TIMEOUT) is False
            took = time.monotonic() - began
        assert took >= sum(SLOW_REPLIES), took  # the server's answer was waited for
        # Connected now: the next acquire is bounded as usual, and the free lock is taken.
        lock = slow.lock(name, ttl=5)
        assert lock.acquire(timeout=TIMEOUT) is True
        lock.release()
    finally:
        slow.close()
        holder.close()


@pytest.mark.redis
async def test_async_slow_first_contact_with_a_healthy_server_is_not_a_backend_error(
    redis_url: str, slow_setup_port: int, name: str
) -> None:
    async with tenure.connect_async(redis_url) as holder, tenure.connect_async(
        f"redis://127.0.0.1:{slow_setup_port}/0"
    ) as slow, holder.lock(name, ttl=30):
        assert await slow.lock(name, ttl=5).acquire(timeout=TIMEOUT) is False
