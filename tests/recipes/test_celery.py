"""The Celery recipe: a real prefork worker (2 processes) on a real redis-server broker."""

from __future__ import annotations

import os
import pathlib
import signal
import subprocess
import sys
import time

import pytest
import redis

import tenure
from tests.servers.redis import RedisServer

ROOT = pathlib.Path(__file__).parents[2]


def wait_for_records(records: pathlib.Path, count: int, worker: subprocess.Popen[str]) -> list[str]:
    # A deadline against a stuck worker, not a speed assertion.
    deadline = time.monotonic() + 45
    while time.monotonic() < deadline:
        assert worker.poll() is None, "the worker exited"
        lines = records.read_text().splitlines() if records.exists() else []
        if sum(1 for line in lines if line.split()[0] in ("exit", "skip")) >= count:
            return lines
        time.sleep(0.05)
    raise AssertionError(f"the worker did not finish {count} tasks")


def test_task_never_overlaps_and_reports_skipped_runs(
    tmp_path: pathlib.Path, redis_server: RedisServer, monkeypatch: pytest.MonkeyPatch,
    recipe_url: str,
) -> None:
    # The broker's own database on the session's redis-server, apart from lock tests.
    broker_url = redis_server.url.rsplit("/", 1)[0] + "/15"
    with redis.Redis.from_url(broker_url) as broker:
        broker.flushdb()
    url = recipe_url
    records = tmp_path / "records.log"
    environment = {
        **os.environ,
        "TENURE_URL": url,
        "CELERY_BROKER_URL": broker_url,
        "RECIPE_RECORDS": str(records),
        "PYTHONPATH": str(ROOT),
    }
    monkeypatch.setenv("CELERY_BROKER_URL", broker_url)
    from tests.recipes import celery_app

    worker = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "tests.recipes.celery_app", "worker",
         "--pool", "prefork", "--concurrency", "2", "--without-mingle", "--without-gossip",
         "--without-heartbeat", "--loglevel", "WARNING"],
        cwd=tmp_path, env=environment, text=True,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        # While another holder has the lock, every run is skipped and says so.
        holder = tenure.connect(url)
        try:
            with holder.lock("report:rebuild", ttl=60):
                for run_id in range(4):
                    celery_app.rebuild_report.delay(run_id)
                held = wait_for_records(records, 4, worker)
        finally:
            holder.close()
        assert sorted(line.split()[:2] for line in held) == [["skip", str(i)] for i in range(4)]
        # Then 20 runs fired at once on 2 processes: each runs or is skipped, never overlapping.
        for run_id in range(4, 24):
            celery_app.rebuild_report.delay(run_id)
        lines = wait_for_records(records, 24, worker)[len(held):]
    finally:
        os.kill(worker.pid, signal.SIGTERM)
        worker.wait(timeout=30)
    inside: int | None = None
    ran = skipped = 0
    for line in lines:
        event, run_id, _pid = line.split()
        if event == "enter":
            assert inside is None, f"run {run_id} entered while run {inside} was inside"
            inside = int(run_id)
        elif event == "exit":
            assert inside == int(run_id)
            inside = None
            ran += 1
        else:
            skipped += 1
    assert inside is None
    assert ran + skipped == 20 and ran >= 1
