"""The foundation's "done means" on the embedded SQLite default, with real processes."""

from __future__ import annotations

import itertools
import os
import pathlib
import sqlite3
import subprocess
import sys
import time

import pytest

import tenure
from tests.integration.processes import ROOT, finish, run_counter, sigkill_handover_seconds, worker

pytestmark = [pytest.mark.sqlite, pytest.mark.slow]


def test_eight_processes_lose_no_update(tmp_path: pathlib.Path, name: str) -> None:
    url = f"sqlite:///{tmp_path / 'locks.db'}"
    count, fences = run_counter(url, name, tmp_path, processes=8, rounds=500)
    assert count == 4000
    assert len(set(fences)) == 4000  # every acquisition had a fence of its own


def test_sigkilled_holder_is_replaced_within_ttl(tmp_path: pathlib.Path, name: str) -> None:
    ttl = 2.0
    elapsed = sigkill_handover_seconds(f"sqlite:///{tmp_path / 'locks.db'}", name, ttl)
    assert elapsed <= ttl + 1.0, elapsed


def test_fences_increase_across_releases_and_process_restarts(
    tmp_path: pathlib.Path, name: str
) -> None:
    url = f"sqlite:///{tmp_path / 'locks.db'}"
    seen: list[int] = []
    for _ in range(4):  # four processes one after another: 4 x 250 = 1000 acquisitions
        seen += [int(f) for f in finish(worker("fences", url, name, "250")).split()]
    assert len(seen) == 1000
    assert all(a < b for a, b in itertools.pairwise(seen))


def test_renewed_short_lease_survives_and_loss_behind_its_back_is_signalled(
    tmp_path: pathlib.Path, name: str
) -> None:
    path = tmp_path / "locks.db"
    with tenure.connect(f"sqlite:///{path}") as locks:
        lost_at: list[float] = []
        lock = locks.lock(name, ttl=1, renew=True, on_lost=lambda _: lost_at.append(
            time.monotonic()))
        assert lock.acquire()
        time.sleep(5)
        assert lock.owned()
        lock.check()
        with sqlite3.connect(path) as raw:
            raw.execute("DELETE FROM tenure_locks WHERE name = ?", (name,))
        removed = time.monotonic()
        assert lock.lost.wait(2)
        assert len(lost_at) == 1
        # One renewal interval is ttl/3; the loss is seen at the next renewal after removal.
        assert lost_at[0] - removed <= 1 / 3 + 0.1, lost_at[0] - removed
        with pytest.raises(tenure.LockLost):
            lock.release()


def test_default_database_is_per_user_not_per_directory(tmp_path: pathlib.Path) -> None:
    """Two processes started in different folders, no URL: they share the default file."""
    env = {"XDG_STATE_HOME": str(tmp_path / "state"), "TENURE_URL": ""}
    env_all = {**os.environ, **env, "PYTHONPATH": str(ROOT)}
    holder = subprocess.Popen(
        [sys.executable, "-c",
         "import tenure,time; l=tenure.connect().lock('shared-job', ttl=30); l.acquire();"
         "print('held', flush=True); time.sleep(30)"],
        cwd=tmp_path, env=env_all, stdout=subprocess.PIPE, text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        other_dir = tmp_path / "elsewhere"
        other_dir.mkdir()
        probe = subprocess.run(
            [sys.executable, "-c",
             "import tenure; print(tenure.connect().lock('shared-job').acquire(blocking=False))"],
            cwd=other_dir, env=env_all, capture_output=True, text=True, timeout=60, check=True,
        )
        assert probe.stdout.strip() == "False"
        assert (tmp_path / "state" / "tenure" / "locks.db").exists()
        assert oct((tmp_path / "state" / "tenure").stat().st_mode & 0o777) == "0o700"
    finally:
        holder.kill()
        holder.wait()
        if holder.stdout:
            holder.stdout.close()
