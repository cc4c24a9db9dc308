"""SQLite's WAL stays bounded under steady contention from several processes.

SQLite starts its WAL over only after a checkpoint that copied every frame; with several
processes writing all the time a PASSIVE checkpoint never does, and the WAL used to grow for
as long as the contention lasted (about 5 frames of 4 KiB per contended acquisition). The
bound is counted in acquisitions, not seconds: the same work grows the WAL as much on a slow
machine as on a fast one."""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import pathlib
import threading

import pytest

import tenure
from tenure.backends.sqlite._connection import WAL_SIZE_LIMIT

pytestmark = [pytest.mark.sqlite, pytest.mark.slow]

PROCESSES = 6
ACQUISITIONS = 1_000
"""Per process. Without restarts the WAL reached about 90 MB with these figures."""


def contend(url: str, start: multiprocessing.synchronize.Event) -> None:
    with tenure.connect(url) as locks:
        lock = locks.lock("wal:bound", ttl=30)
        start.wait()
        for _ in range(ACQUISITIONS):
            lock.acquire()
            lock.release()


def test_wal_stays_bounded_under_contention(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "locks.db"
    url = f"sqlite:///{path}"
    wal = pathlib.Path(f"{path}-wal")
    with tenure.connect(url) as keeper:  # the file stays open: its WAL is never removed
        keeper.lock("wal:keeper").locked()
        context = multiprocessing.get_context("spawn")
        start = context.Event()
        workers = [context.Process(target=contend, args=(url, start)) for _ in range(PROCESSES)]
        for worker in workers:
            worker.start()
        largest = 0
        done = threading.Event()

        def watch() -> None:
            nonlocal largest
            while not done.wait(0.005):
                with contextlib.suppress(FileNotFoundError):
                    largest = max(largest, os.stat(wal).st_size)

        watcher = threading.Thread(target=watch)
        watcher.start()
        start.set()
        try:
            for worker in workers:
                worker.join(timeout=300)
        finally:
            done.set()
            watcher.join()
        assert [worker.exitcode for worker in workers] == [0] * PROCESSES
        # Checkpoints every ~1000 frames of the file, whoever wrote them; the high-water mark
        # comes from before the stores' first checkpoints.
        assert largest < 2 * WAL_SIZE_LIMIT, f"the WAL grew to {largest / 2**20:.1f} MiB"
