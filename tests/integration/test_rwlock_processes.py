"""Read-write and fair locks across real processes, on every backend that offers them and
that processes share (memory:// lives in one process, so it is left out):

- 8 processes, 4 readers + 4 writers looping on one read-write lock, first queued behind a
  write lease readers first: no writer ever overlaps anybody (from the enter/exit
  timestamps), the readers at the head of the queue hold together, every write's fence exceeds
  every earlier fence; the longest writer wait is reported.
- 8 processes queue on a fair lock one after another: they are granted in their order of
  arrival (each waiter's enqueue timestamp); the longest wait and the spread are reported.
- A waiter SIGKILLed while queued delays the one behind it by at most its queue lease + 1 s.

A backend joins by offering "rwlock" in its store (``offers()`` in tests/conftest.py, for
the primitive each test is marked ``@on(...)`` with, and ``--backends``): nothing to add
here. Timestamps are
``time.monotonic_ns()``, one clock for the whole host. ``TENURE_RWLOCK_ROUNDS`` sets the
leases each reader and writer takes (default 10).
"""

from __future__ import annotations

import os
import pathlib
import signal
import subprocess
import time
from collections.abc import Callable
from typing import TypeVar

import pytest

import tenure
from tenure._sync.rwlock import QUEUE_TTL
from tests.backends import row
from tests.conftest import offers, selected_backends
from tests.integration.processes import finish, most_at_once, worker

pytestmark = pytest.mark.slow

READERS = WRITERS = 4
ROUNDS = int(os.environ.get("TENURE_RWLOCK_ROUNDS", "10"))
READ_HOLD = 0.3
"""Seconds a reader holds its lease: long beside a grant and a waiter's back-off (at most
50 ms on backends without notifications across processes) even on a loaded machine, where
a slow store (the MongoDB stand-in) took one grant after another with 0.1 s and readers
never met, so that readers overlap."""
WRITE_HOLD = 0.005
FAIR_WAITERS = 8

Lease = tuple[int, int, int, int]
"""One lease as a ``queued`` worker wrote it: (asked ns, entered ns, left ns, fence)."""


Test = TypeVar("Test", bound=Callable[..., None])


def on(primitive: str) -> Callable[[Test], Test]:
    """The primitive a test needs ("rwlock" or "fair"): it runs on the backends offering it."""

    def mark(test: Test) -> Test:
        test.primitive = primitive  # type: ignore[attr-defined]
        return test

    return mark


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    # The backend table and --backends, like backend_url, without memory:// (one process).
    if "shared_url" in metafunc.fixturenames:
        primitive = metafunc.function.primitive  # type: ignore[attr-defined]
        params = [
            row(backend).param()
            for backend in selected_backends(metafunc.config)
            if backend != "memory" and offers(backend, primitive)
        ]
        metafunc.parametrize("shared_url", params, indirect=True)


@pytest.fixture
def shared_url(request: pytest.FixtureRequest) -> str:
    """The URL of a ready backend that several processes share."""
    url: str = request.getfixturevalue(row(request.param).fixture)
    return url


def read_leases(out: pathlib.Path) -> list[Lease]:
    text = out.read_text() if out.exists() else ""
    leases = []
    for line in text.splitlines():
        asked, entered, left, fence = map(int, line.split())
        leases.append((asked, entered, left, fence))
    return leases


def start_workers(url: str, name: str, tmp: pathlib.Path, sides: list[str], rounds: int,
                  holds: list[float], starts: list[pathlib.Path]
                  ) -> tuple[list[subprocess.Popen[str]], list[pathlib.Path]]:
    """One ``queued`` worker per side, each connected (its "ready" read) before returning."""
    outputs = [tmp / f"leases-{index}.txt" for index in range(len(sides))]
    running = [
        worker("queued", url, name, side, str(rounds), str(hold), str(start), str(out))
        for side, hold, start, out in zip(sides, holds, starts, outputs, strict=True)
    ]
    for process in running:
        assert process.stdout is not None
        line = process.stdout.readline()
        assert line.strip() == "ready", line + (process.stderr.read() if process.stderr
                                                else "")
    return running, outputs


def stop(running: list[subprocess.Popen[str]]) -> None:
    for process in running:
        if process.poll() is None:
            process.kill()
        process.communicate()


def queued(locks: tenure.Locks, name: str) -> int:
    info = locks.inspect(name, kind="rwlock")
    return 0 if info is None else info.queued


def until_queued(locks: tenure.Locks, name: str, count: int) -> None:
    deadline = time.monotonic() + 30  # a bound on a hang, not a timing assertion
    while queued(locks, name) < count:
        assert time.monotonic() < deadline, f"{count} waiters never queued"
        time.sleep(0.01)


@on("rwlock")
def test_four_readers_and_four_writers_never_overlap_a_writer(
    shared_url: str, tmp_path: pathlib.Path, name: str
) -> None:
    sides = ["read"] * READERS + ["write"] * WRITERS
    holds = [READ_HOLD] * READERS + [WRITE_HOLD] * WRITERS
    readers_start, writers_start = tmp_path / "start-readers", tmp_path / "start-writers"
    with tenure.connect(shared_url) as locks:
        # The first grant is known: all readers queue behind the test's write lease, the
        # writers behind them, so the readers hold together once it is released. Started
        # at once, a fair queue can settle into reader, writer, reader, ... where readers
        # never meet (ZooKeeper did, once, in CI), which proves nothing about the lock.
        holder = locks.rwlock(name, ttl=60).write()
        assert holder.acquire(timeout=10)
        running, outputs = start_workers(shared_url, name, tmp_path, sides, ROUNDS, holds,
                                         [readers_start] * READERS + [writers_start] * WRITERS)
        try:
            readers_start.touch()
            until_queued(locks, name, READERS)
            writers_start.touch()
            until_queued(locks, name, READERS + WRITERS)
            holder.release()
            for process in running:
                finish(process, timeout=600)
        finally:
            stop(running)
            if holder.fence is not None and holder.owned():
                holder.release()
    seen = [read_leases(out) for out in outputs]
    assert [len(leases) for leases in seen] == [ROUNDS] * len(sides)
    reads = [lease for leases in seen[:READERS] for lease in leases]
    writes = [lease for leases in seen[READERS:] for lease in leases]

    reads_only = [(entered, left, fence) for _, entered, left, fence in reads]
    longest_write_wait = max(entered - asked for asked, entered, _, _ in writes) / 1e9
    longest_read_wait = max(entered - asked for asked, entered, _, _ in reads) / 1e9
    print(f"\n{shared_url.partition(':')[0]}: {len(writes)} writes, {len(reads)} reads, "
          f"most readers at once {most_at_once(reads_only)}, longest writer wait "
          f"{longest_write_wait:.3f} s, longest reader wait {longest_read_wait:.3f} s")

    overlaps = 0
    everyone = [(lease, "read") for lease in reads] + [(lease, "write") for lease in writes]
    for write in writes:
        for other, _ in everyone:
            if other is write:
                continue
            if other[1] < write[2] and write[1] < other[2]:  # the intervals meet
                overlaps += 1
    assert overlaps == 0, f"{overlaps} overlaps of a writer with another holder"
    most_readers = most_at_once(reads_only)
    assert most_readers >= 2, "readers never held the lock together"

    fences = [lease[3] for lease, _ in everyone]
    assert len(set(fences)) == len(fences), "a fence was granted twice"
    # In the order holders entered, every write's fence exceeds every fence before it.
    in_order = sorted(everyone, key=lambda item: item[0][1])
    highest = 0
    for (_, _, _, fence), side in in_order:
        if side == "write":
            assert fence > highest, "a write's fence is not above an earlier fence"
        highest = max(highest, fence)

    # A bound on starvation, far above any healthy run (each wait is a few holds).
    assert longest_write_wait < 60
    with tenure.connect(shared_url) as locks:
        info = locks.inspect(name, kind="rwlock")
        assert info is not None and not info.held and info.queued == 0
        assert info.fence == max(fences)


@on("fair")
def test_fair_lock_grants_follow_the_order_of_arrival(
    shared_url: str, tmp_path: pathlib.Path, name: str
) -> None:
    starts = [tmp_path / f"start-{index}" for index in range(FAIR_WAITERS)]
    with tenure.connect(shared_url) as locks:
        holder = locks.lock(name, ttl=60, fair=True)
        assert holder.acquire(timeout=10)
        running, outputs = start_workers(shared_url, name, tmp_path,
                                         ["fair"] * FAIR_WAITERS, 1,
                                         [WRITE_HOLD] * FAIR_WAITERS, starts)
        try:
            # One at a time: each waiter starts once the one before holds its place.
            for index, start in enumerate(starts):
                start.touch()
                until_queued(locks, name, index + 1)
            holder.release()
            for process in running:
                finish(process, timeout=600)
        finally:
            stop(running)
            if holder.fence is not None and holder.owned():
                holder.release()
    grants = [read_leases(out)[0] for out in outputs]
    by_arrival = sorted(range(FAIR_WAITERS), key=lambda index: grants[index][0])
    by_grant = sorted(range(FAIR_WAITERS), key=lambda index: grants[index][3])
    assert by_grant == by_arrival, f"granted {by_grant}, arrived {by_arrival}"
    entered = sorted(lease[1] for lease in grants)
    assert entered == [grants[index][1] for index in by_grant]
    waits = [(lease[1] - lease[0]) / 1e9 for lease in grants]
    print(f"\n{shared_url.partition(':')[0]}: {FAIR_WAITERS} fair waiters granted in arrival "
          f"order; longest wait {max(waits):.3f} s, spread {max(waits) - min(waits):.3f} s")


@on("fair")
def test_a_sigkilled_waiter_delays_the_queue_by_at_most_its_place_lease(
    shared_url: str, tmp_path: pathlib.Path, name: str
) -> None:
    starts = [tmp_path / "start-victim", tmp_path / "start-next"]
    with tenure.connect(shared_url) as locks:
        holder = locks.lock(name, ttl=60, fair=True)
        assert holder.acquire(timeout=10)
        running, outputs = start_workers(shared_url, name, tmp_path, ["fair", "fair"], 1,
                                         [WRITE_HOLD, WRITE_HOLD], starts)
        victim, _ = running
        try:
            starts[0].touch()
            until_queued(locks, name, 1)
            starts[1].touch()
            until_queued(locks, name, 2)
            killed = time.monotonic_ns()
            os.kill(victim.pid, signal.SIGKILL)
            victim.wait(10)
            holder.release()
            finish(running[1], timeout=60)
        finally:
            stop(running)
    assert read_leases(outputs[0]) == []  # the victim was never granted
    ((_, entered, _, _),) = read_leases(outputs[1])
    delay = (entered - killed) / 1e9
    print(f"\n{shared_url.partition(':')[0]}: the waiter behind a SIGKILLed one was granted "
          f"{delay:.3f} s after the kill (its place lease: {QUEUE_TTL} s)")
    assert delay <= QUEUE_TTL + 1.0, delay
    with tenure.connect(shared_url) as locks:
        assert queued(locks, name) == 0
