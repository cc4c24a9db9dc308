"""MongoDB "done means" with real processes, against the mongoeco stand-in: no lost update
under a non-atomic counter, a SIGKILLed holder replaced within ttl + 1 s, and the scheduler
recipe of docs/backends/mongodb.md run as written."""

from __future__ import annotations

import os
import pathlib
import queue
import re
import signal
import subprocess
import sys
import threading
import time
import uuid

import pytest

from tests.integration.processes import ROOT, run_counter, sigkill_handover_seconds

pytestmark = [pytest.mark.mongodb, pytest.mark.slow]

RECIPE_DOC = ROOT / "docs" / "backends" / "mongodb.md"


def test_four_processes_lose_no_update(mongodb_url: str, tmp_path: pathlib.Path) -> None:
    name = f"counter:{uuid.uuid4().hex}"
    count, fences = run_counter(mongodb_url, name, tmp_path, processes=4, rounds=100)
    assert count == 400
    # (run_counter sorts them) Every grant has its own fence: none was issued twice.
    assert len(set(fences)) == len(fences) == 400


def test_sigkilled_holder_is_replaced_within_ttl(mongodb_url: str) -> None:
    ttl = 2.0
    elapsed = sigkill_handover_seconds(mongodb_url, f"killed:{uuid.uuid4().hex}", ttl)
    assert elapsed <= ttl + 1.0, elapsed


# ---- the scheduler recipe ---------------------------------------------------------------------


def recipe_source() -> str:
    """The recipe's code block, exactly as the docs print it."""
    text = RECIPE_DOC.read_text()
    found = re.search(r"```python\n(# scheduler\.py:.*?)```", text, re.DOTALL)
    assert found, f"no scheduler.py block in {RECIPE_DOC}"
    return found.group(1)


class Runner:
    """One recipe process; its output lines arrive on a queue with their arrival time."""

    def __init__(self, script: pathlib.Path, env: dict[str, str]) -> None:
        self.process = subprocess.Popen(
            [sys.executable, str(script)], env=env, cwd=ROOT, text=True,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )
        self.runs: queue.Queue[tuple[float, int]] = queue.Queue()
        self.seen: list[tuple[float, int]] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            found = re.search(r"fence (\d+)", line)
            if found:
                self.runs.put((time.monotonic(), int(found.group(1))))

    def drain(self) -> list[tuple[float, int]]:
        while True:
            try:
                self.seen.append(self.runs.get_nowait())
            except queue.Empty:
                return self.seen

    def first_run_after(self, moment: float, timeout: float) -> tuple[float, int] | None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for seen in self.drain():
                if seen[0] >= moment:
                    return seen
            time.sleep(0.01)
        return None

    def stop(self) -> str:
        if self.process.poll() is None:
            self.process.terminate()
        try:
            _, err = self.process.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            _, err = self.process.communicate()
        return err


def test_scheduler_recipe_runs_on_one_process_and_fails_over(
    mongodb_url: str, tmp_path: pathlib.Path
) -> None:
    script = tmp_path / "scheduler.py"
    script.write_text(recipe_source())
    ttl, period = 2.0, 0.2
    collection = f"scheduler_{uuid.uuid4().hex}"  # a fresh lock for this test
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT / "src"),
        "TENURE_URL": f"{mongodb_url}&collection={collection}",
        "TTL": str(ttl),
        "PERIOD": str(period),
    }
    first, second = Runner(script, env), Runner(script, env)
    try:
        # One of the two becomes the runner; the other only waits.
        deadline = time.monotonic() + 20
        while not (first.drain() or second.drain()):
            assert time.monotonic() < deadline, first.stop() + second.stop()
            time.sleep(0.02)
        time.sleep(5 * period)
        runner, standby = (first, second) if first.drain() else (second, first)
        assert len(runner.drain()) >= 3
        assert standby.drain() == []

        # Kill the runner: the standby takes over within the lease, with a larger fence.
        os.kill(runner.process.pid, signal.SIGKILL)
        runner.process.wait(10)
        killed = time.monotonic()
        last_fence = runner.drain()[-1][1]
        takeover = standby.first_run_after(killed, timeout=ttl + 5)
        assert takeover is not None, standby.stop()
        assert takeover[0] - killed <= ttl + 1.0, takeover[0] - killed
        assert takeover[1] > last_fence
        time.sleep(5 * period)
        assert len(standby.drain()) >= 3

        # A polite stop (SIGTERM) releases at once.
        assert standby.stop() == ""
        assert standby.process.returncode == 0
    finally:
        first.stop()
        second.stop()
