"""SQLite's queued, kernel-woken waiting, with real processes: a free lock goes to the
longest waiter (not back to its releaser), a waiter is woken by the release (few attempts,
no polling), and a waiter that died or stalls stops blocking the others within its place's
lease. Counts, not timings, except where the bound itself is the contract."""

from __future__ import annotations

import asyncio
import logging
import os
import pathlib
import re
import signal
import sqlite3
import subprocess
import sys
import time

import pytest

import tenure
from tenure.backends.sqlite._lock_sql import PLACE_TTL
from tests.integration.processes import ROOT

pytestmark = [pytest.mark.sqlite, pytest.mark.slow]

# A child that takes the lock (logging its attempts), says so, and releases on a line of input.
WAITER = """
import logging, sys, tenure
logging.basicConfig(level=logging.DEBUG, stream=sys.stderr, format="%(message)s")
logging.getLogger("tenure").setLevel(logging.DEBUG)
url, name = sys.argv[1], sys.argv[2]
with tenure.connect(url) as locks:
    lock = locks.lock(name, ttl=30)
    if not lock.acquire(timeout=60):
        sys.exit(3)
    print("held", lock.fence, flush=True)
    sys.stdin.readline()
    lock.release()
"""


def waiter(url: str, name: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", WAITER, url, name],
        cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )


def queued(path: pathlib.Path, name: str) -> list[tuple[str, str]]:
    """(token, doorbell address) of every place in ``name``'s queue, oldest first."""
    with sqlite3.connect(path) as raw:
        return raw.execute(
            "SELECT token, wake FROM tenure_waiters WHERE name = ? ORDER BY seq", (name,)
        ).fetchall()


def wait_until_queued(path: pathlib.Path, name: str, count: int) -> list[tuple[str, str]]:
    deadline = time.monotonic() + 60
    while len(places := queued(path, name)) < count:
        assert time.monotonic() < deadline, f"{count} waiter(s) never queued: {places}"
        time.sleep(0.01)
    return places


def attempts(stderr: str) -> int:
    found = re.search(r"acquired lock .* (\d+) attempt\(s\)", stderr)
    assert found, stderr
    return int(found.group(1))


def finish(child: subprocess.Popen[str]) -> str:
    assert child.stdin is not None
    child.stdin.write("\n")
    child.stdin.flush()
    _, err = child.communicate(timeout=60)
    assert child.returncode == 0, err
    return err


def test_releaser_does_not_take_the_lock_back_from_a_waiting_process(
    tmp_path: pathlib.Path, name: str
) -> None:
    """The releaser loops straight back (20 non-blocking tries per round): every try is
    refused while another process waits, and the next holder is always that process."""
    path = tmp_path / "locks.db"
    url = f"sqlite:///{path}"
    with tenure.connect(url) as locks:
        lock = locks.lock(name, ttl=30)
        assert lock.acquire(blocking=False)
        taken_back = 0
        for _ in range(4):
            child = waiter(url, name)
            wait_until_queued(path, name, 1)
            fence = lock.fence
            assert fence is not None
            lock.release()
            taken_back += sum(lock.acquire(blocking=False) for _ in range(20))
            assert child.stdout is not None
            line = child.stdout.readline().split()
            assert line[:1] == ["held"], line
            assert int(line[1]) > fence  # the waiter had the next grant (none was taken back)
            err = finish(child)
            assert attempts(err) <= 3  # its first try, then the try its ring caused
            assert lock.acquire(timeout=30)
            assert lock.fence is not None and lock.fence > int(line[1])
        lock.release()
        assert taken_back == 0
        assert queued(path, name) == []  # every try and every waiter left the queue


def test_a_waiter_is_woken_not_polling(tmp_path: pathlib.Path, name: str) -> None:
    """Blocked 2 s behind a holder, a waiter tries about once per back-off pause (0.125 to
    0.25 s, which only refreshes its place), not every few milliseconds."""
    path = tmp_path / "locks.db"
    url = f"sqlite:///{path}"
    with tenure.connect(url) as locks:
        lock = locks.lock(name, ttl=30)
        assert lock.acquire()
        child = waiter(url, name)
        wait_until_queued(path, name, 1)
        time.sleep(2)
        lock.release()
        assert child.stdout is not None
        assert child.stdout.readline().startswith("held")
        assert attempts(finish(child)) <= 2 / 0.125 + 3


@pytest.mark.parametrize("how", ["SIGKILL", "SIGSTOP"])
def test_a_dead_or_stalled_waiter_stops_blocking_the_next(
    tmp_path: pathlib.Path, name: str, how: str
) -> None:
    """The head waiter is killed (its doorbell refuses the ring: its place is dropped at
    once) or stopped (the ring is not answered: its place lapses): the next waiter gets the
    released lock within the place's lease + 1 s."""
    path = tmp_path / "locks.db"
    url = f"sqlite:///{path}"
    with tenure.connect(url) as locks:
        lock = locks.lock(name, ttl=30)
        assert lock.acquire()
        first = waiter(url, name)
        wait_until_queued(path, name, 1)
        second = waiter(url, name)
        wait_until_queued(path, name, 2)
        os.kill(first.pid, getattr(signal, how))
        try:
            released = time.monotonic()
            lock.release()
            assert second.stdout is not None
            assert second.stdout.readline().startswith("held")
            assert time.monotonic() - released <= PLACE_TTL + 1.0
            finish(second)
        finally:
            os.kill(first.pid, signal.SIGKILL)
            first.wait(10)
            first.communicate()


def test_failed_tries_and_timeouts_leave_no_place(tmp_path: pathlib.Path, name: str) -> None:
    path = tmp_path / "locks.db"
    with tenure.connect(f"sqlite:///{path}") as locks:
        holder, other = locks.lock(name, ttl=30), locks.lock(name, ttl=30)
        assert holder.acquire()
        assert other.acquire(blocking=False) is False
        assert queued(path, name) == []
        assert other.acquire(timeout=0.3) is False
        assert queued(path, name) == []
        holder.release()
        assert other.acquire(blocking=False)  # nobody left ahead of it
        other.release()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork() only")
def test_a_forked_child_waits_on_its_own_doorbell(tmp_path: pathlib.Path, name: str) -> None:
    path = tmp_path / "locks.db"
    with tenure.connect(f"sqlite:///{path}") as locks:
        holder = locks.lock(name, ttl=30)
        assert holder.acquire()
        # The parent waits once: its doorbell is bound before the fork.
        assert locks.lock(name, ttl=30).acquire(timeout=0.3) is False
        pid = os.fork()
        if pid == 0:  # the child: take the lock through the inherited client
            code = 1
            try:
                lock = locks.lock(name, ttl=30)
                if lock.acquire(timeout=30):
                    lock.release()
                    code = 0
            finally:
                os._exit(code)
        [(_, wake)] = wait_until_queued(path, name, 1)
        assert os.path.basename(wake).startswith(f"{pid}-")  # the child's own socket
        holder.release()
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0


def test_an_asyncio_waiter_is_rung_across_processes(
    tmp_path: pathlib.Path, name: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The ring reaches a task waiting in an event loop (through the doorbell's thread):
    the task gets the next grant after a couple of attempts, not after polling."""
    path = tmp_path / "locks.db"
    url = f"sqlite:///{path}"
    holder = waiter(url, name)
    assert holder.stdout is not None
    line = holder.stdout.readline().split()
    assert line[:1] == ["held"], line

    async def scenario() -> int | None:
        async with tenure.connect_async(url) as locks:
            lock = locks.lock(name, ttl=30)
            task = asyncio.create_task(lock.acquire(timeout=30))
            while not queued(path, name):
                await asyncio.sleep(0.01)
            await asyncio.sleep(1)  # a few pauses: refreshes, not polls
            finish(holder)  # the holder releases: the ring wakes the task
            assert await task
            fence = lock.fence
            await lock.release()
            return fence

    with caplog.at_level(logging.DEBUG, logger="tenure.lease"):
        fence = asyncio.run(scenario())
    assert fence is not None and fence > int(line[1])
    [record] = [r for r in caplog.records if r.getMessage().startswith("acquired")]
    assert attempts(record.getMessage()) <= 1 / 0.125 + 3
