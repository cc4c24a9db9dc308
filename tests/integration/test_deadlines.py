"""An acquire's timeout is a deadline even when the server never answers (issue 13, 5).

A "hung" server here is a real listening socket that accepts every connection and never
writes a byte: what a paused, partitioned or wedged server looks like to a client, and what
drivers' own timeouts (seconds each, sometimes retried) let run long. ``acquire(timeout=T)``
must end by T + ``DEADLINE_SLACK``, closing the client must not wait on the dead server, and
``tenure run -w T`` must exit about as soon. The bounds below add generous slack for a loaded
test machine: they catch a deadline that is not kept (the drivers alone take 5 s or more
here), not a slow one.
"""

from __future__ import annotations

import asyncio
import contextlib
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
from tenure._async.lease import DEADLINE_SLACK

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
    assert closed <= 1.2 + MARGIN, closed  # CLOSE_LIMIT + CLEANUP_GRACE, not a driver's own


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
