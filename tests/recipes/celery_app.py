"""A Celery task that runs once at a time everywhere (docs/recipes/celery.md)."""

from __future__ import annotations

import os
import pathlib
from typing import Any

from celery import Celery
from celery.signals import worker_process_init, worker_process_shutdown

import tenure

app = Celery("recipes", broker=os.environ.get("CELERY_BROKER_URL", "redis://localhost:6379/0"))
# Where the task writes its enter/exit/skip records; the recipe test reads them.
RECORDS = pathlib.Path(os.environ.get("RECIPE_RECORDS", "report-records.log"))

# Opened in each pool process after the fork, never in the parent: each worker process gets
# its own connections (tenure also tells a forked child it holds none of its parent's locks).
locks: tenure.Locks | None = None


@worker_process_init.connect
def open_locks(**_: Any) -> None:
    global locks
    locks = tenure.connect()  # $TENURE_URL, else the per-user SQLite file


@worker_process_shutdown.connect
def close_locks(**_: Any) -> None:
    if locks is not None:
        locks.close()


def record(line: str) -> None:
    # One O_APPEND write per line: the file's order is the order things happened.
    with RECORDS.open("a") as records:
        records.write(f"{line} {os.getpid()}\n")


@app.task
def rebuild_report(run_id: int) -> str:
    assert locks is not None, "the worker process opens the client"
    lock = locks.lock("report:rebuild", ttl=60, renew=True)
    if not lock.acquire(blocking=False):
        record(f"skip {run_id}")  # report it: a skipped run must not pass silently
        return "skipped"
    try:
        record(f"enter {run_id}")
        # the work: rebuild the report; lock.fence guards its writes
        record(f"exit {run_id}")
    finally:
        lock.release()
    return "ran"
