"""Helpers to drive ``tests.integration.workers`` in real processes, for any backend."""

from __future__ import annotations

import os
import pathlib
import signal
import subprocess
import time
from collections.abc import Callable

import tenure
from tests.forked import Forked, popen

ROOT = pathlib.Path(__file__).resolve().parents[2]
Process = subprocess.Popen[str] | Forked
"""A worker: forked from the warm interpreter or, where that cannot stand in, exec'd."""


def worker(*args: str, cwd: pathlib.Path | None = None, env: dict[str, str] | None = None
           ) -> Process:
    """``python -m tests.integration.workers *args``, forked from a warm interpreter
    (``tests.forked``), its output and errors piped as text."""
    return popen("tests.integration.workers", args, cwd=cwd or ROOT,
                 env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})},
                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finish(process: Process, timeout: float = 120) -> str:
    out, err = process.communicate(timeout=timeout)
    assert process.returncode == 0, f"worker failed ({process.returncode}): {err}"
    return out


def run_counter(url: str, name: str, tmp: pathlib.Path, processes: int, rounds: int
                ) -> tuple[int, list[int]]:
    """``processes`` workers x ``rounds`` locked read-modify-writes of one file; returns the
    file's final count and every fence seen, in acquisition order."""
    counter = tmp / "counter.txt"
    counter.write_text("0")
    running = [worker("counter", url, name, str(counter), str(rounds)) for _ in range(processes)]
    fences = [int(f) for process in running for f in finish(process).split()]
    return int(counter.read_text()), sorted(fences)


def sigkill_handover_seconds(url: str, name: str, ttl: float) -> float:
    """Start a holder, SIGKILL it, and time how long until another process gets the lock."""
    holder = worker("hold", url, name, str(ttl))
    assert holder.stdout is not None
    line = holder.stdout.readline()
    assert line.startswith("acquired"), line + (holder.stderr.read() if holder.stderr else "")
    with tenure.connect(url) as locks:
        waiter = locks.lock(name, ttl=10)
        assert waiter.acquire(blocking=False) is False
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait(10)
        killed = time.monotonic()
        assert waiter.acquire(timeout=ttl + 5)
        elapsed = time.monotonic() - killed
        waiter.release()
    if holder.stdout:
        holder.stdout.close()
    if holder.stderr:
        holder.stderr.close()
    return elapsed


Permit = tuple[int, int, int]
"""One lease as a worker saw it: (entered ns, left ns, fence); the times are
``time.monotonic_ns()``, one clock for the whole host."""


def start_together(running: list[Process], start: Callable[[], None], *,
                   timeout: float) -> None:
    """Wait for every worker's "ready" (each connected), call ``start`` to set them going,
    and wait for each to finish within ``timeout``; kill what is left if not."""
    try:
        for process in running:
            assert process.stdout is not None
            line = process.stdout.readline()
            assert line.strip() == "ready", line + (process.stderr.read() if process.stderr
                                                    else "")
        start()
        for process in running:
            finish(process, timeout=timeout)
    finally:
        for process in running:
            if process.poll() is None:
                process.kill()
                process.communicate()


WeightedPermit = tuple[int, int, int, int, int]
"""(asked ns, entered ns, left ns, fence, weight) of one permit."""


def run_permits(url: str, name: str, tmp: pathlib.Path, *, weights: list[int], rounds: int,
                limit: int, hold: float) -> list[list[WeightedPermit]]:
    """A worker per weight x ``rounds`` permits of that weight of the semaphore ``name``
    (``limit``), each held ``hold`` seconds; every worker's permits.

    The first round is staged so that the permits reach the limit whatever the store's
    speed: the workers ask one at a time in the order of ``weights`` (each only once the one
    before holds a permit or waits in the queue, as ``inspect`` shows), and each holds its
    first permit until all of them have asked. So, the queue being first come first served,
    the first weights that fit are held at once; a test whose weights start with a run that
    adds up to ``limit`` reaches it by construction, not by the luck of the timing. The
    later rounds contend freely."""
    go = tmp / "go"
    turns = [tmp / f"turn-{index}" for index in range(len(weights))]
    outputs = [tmp / f"permits-{index}.txt" for index in range(len(weights))]
    running = [
        worker("permits", url, name, str(limit), str(weight), str(rounds), str(hold),
               str(turn), str(go), str(out))
        for weight, turn, out in zip(weights, turns, outputs, strict=True)
    ]

    def in_turn() -> None:
        with tenure.connect(url) as locks:
            for asked, turn in enumerate(turns, start=1):
                turn.touch()
                deadline = time.monotonic() + 120
                while True:
                    info = locks.inspect(name, kind="semaphore")
                    if info is not None and len(info.leases) + len(info.waiters) >= asked:
                        break
                    assert time.monotonic() < deadline, f"worker {asked} never asked"
                    time.sleep(0.002)
        go.touch()

    start_together(running, in_turn, timeout=900)
    return [
        [(int(asked), int(entered), int(left), int(fence), weight)
         for asked, entered, left, fence in (line.split() for line in out.read_text().splitlines())]
        for weight, out in zip(weights, outputs, strict=True)
    ]


def most_units_at_once(permits: list[WeightedPermit]) -> int:
    """The most units (weights added up) whose (entered, left) intervals overlap at any
    instant; as ``most_at_once``, never overstating the real use."""
    events = sorted([(entered, weight) for _, entered, _, _, weight in permits]
                    + [(left, -weight) for _, _, left, _, weight in permits])
    live = most = 0
    for _, change in events:  # at a tie, a departure (negative) sorts first
        live += change
        most = max(most, live)
    return most


def most_at_once(permits: list[Permit]) -> int:
    """The most permits whose (entered, left) intervals overlap at any instant. Each interval
    lies inside the permit's real tenure (stamped after acquire returned, before release was
    called), so this never overstates the real concurrency; a tie counts as no overlap."""
    events = sorted([(entered, 1) for entered, _, _ in permits]
                    + [(left, -1) for _, left, _ in permits])  # at a tie, -1 sorts first
    live = most = 0
    for _, change in events:
        live += change
        most = max(most, live)
    return most


def sigkill_permit_handover_seconds(url: str, name: str, ttl: float, limit: int) -> float:
    """Fill the ``limit`` permits of ``name``: one in a worker that renews its ``ttl`` lease,
    the others here. Check the worker's permit outlives its ttl, SIGKILL the worker, and time
    how long until a waiter here gets the permit it held."""
    holder = worker("hold-permit", url, name, str(limit), str(ttl))
    try:
        assert holder.stdout is not None
        line = holder.stdout.readline()
        assert line.startswith("acquired"), line + (holder.stderr.read() if holder.stderr
                                                    else "")
        with tenure.connect(url) as locks:
            mine = [locks.semaphore(name, limit=limit, ttl=60) for _ in range(limit - 1)]
            for permit in mine:
                assert permit.acquire(timeout=10)
            waiter = locks.semaphore(name, limit=limit, ttl=60)
            time.sleep(1.5 * ttl)
            # The worker's renewals kept its permit beyond its ttl: all of them are taken.
            assert waiter.acquire(blocking=False) is False
            killed = time.monotonic()
            os.kill(holder.pid, signal.SIGKILL)
            holder.wait(10)
            assert waiter.acquire(timeout=ttl + 10)
            elapsed = time.monotonic() - killed
            waiter.release()
            for permit in mine:
                permit.release()
    finally:
        if holder.poll() is None:
            holder.kill()
        holder.communicate()
    return elapsed
