"""Helpers to drive ``tests.integration.workers`` in real processes, for any backend."""

from __future__ import annotations

import os
import pathlib
import signal
import subprocess
import sys
import time

import tenure

ROOT = pathlib.Path(__file__).resolve().parents[2]


def worker(*args: str, cwd: pathlib.Path | None = None, env: dict[str, str] | None = None
           ) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.integration.workers", *args],
        cwd=cwd or ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def finish(process: subprocess.Popen[str], timeout: float = 120) -> str:
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
