"""A RESTART checkpoint's wait grows with the WAL it finds, so a reader that lost its core
for a while no longer makes every restart give up (the WAL once passed twice its size limit
on a loaded machine), and a store's checkpoints come no further apart when another store
started the WAL over. Real SQLite files, a real reader holding a snapshot."""

from __future__ import annotations

import os
import pathlib
import sqlite3
import threading

import pytest

from tenure.backends.sqlite._connection import (
    RESTART_FRAMES,
    RESTART_WAIT_MOST_MS,
    RESTART_WAIT_MS,
    _Cadence,
    restart_wait_ms,
)

pytestmark = pytest.mark.sqlite

WAL_HEADER, FRAME_HEADER = 32, 24
"""Bytes of the WAL file's header and of each frame's (SQLite's file format)."""


def test_the_restart_wait_doubles_per_thousand_frames_up_to_its_most() -> None:
    waits = [restart_wait_ms(frames * RESTART_FRAMES) for frames in range(1, 9)]
    assert waits == [RESTART_WAIT_MS << n for n in range(6)] + [RESTART_WAIT_MOST_MS] * 2
    assert restart_wait_ms(10**9) == RESTART_WAIT_MOST_MS


def wal_of(path: pathlib.Path, frames: int) -> sqlite3.Connection:
    """A connection to a WAL database whose WAL holds about ``frames`` pages."""
    # timeout=0, as tenure's own connections: a checkpoint's waits are its own.
    connection = sqlite3.connect(path, timeout=0, isolation_level=None, check_same_thread=False)
    connection.execute("PRAGMA journal_mode = WAL")
    connection.execute("PRAGMA wal_autocheckpoint = 0")
    connection.execute("CREATE TABLE IF NOT EXISTS filler (data BLOB)")
    connection.execute("BEGIN")
    for _ in range(frames):
        connection.execute("INSERT INTO filler VALUES (randomblob(3500))")
    connection.execute("COMMIT")
    return connection


def frames_in(connection: sqlite3.Connection) -> int:
    ((_, frames, _),) = connection.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
    return int(frames)


def checkpoint_beside_a_reader(path: pathlib.Path, frames: int, reader_holds: float) -> int:
    """Checkpoint a WAL of ``frames`` while a reader keeps an old snapshot for
    ``reader_holds`` seconds; the frames the WAL holds after one more write (a checkpoint
    that copied every frame lets that write start the WAL over: one frame; else it grows)."""
    writer = wal_of(path, frames)
    reader = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    try:
        reader.execute("BEGIN")
        reader.execute("SELECT COUNT(*) FROM filler").fetchall()  # its snapshot: all frames
        writer.execute("INSERT INTO filler VALUES (1)")  # the snapshot is now an old one
        # Copy what the snapshot allows first (on a busy disk, seconds): the checkpoint's own
        # copy then has nothing to do, and the reader's hold counts from its restart.
        frames_in(writer)
        ending = threading.Timer(reader_holds, lambda: reader.execute("COMMIT"))
        ending.start()
        _Cadence(f"{path}-wal").checkpoint(writer, writes=1)
        ending.join()
        writer.execute("INSERT INTO filler VALUES (2)")
        return frames_in(writer)
    finally:
        reader.close()
        writer.close()


def test_a_large_wal_restarts_past_a_reader_that_a_short_wait_would_not_outlast(
    tmp_path: pathlib.Path,
) -> None:
    # 8,000 frames: a wait of 1 s outlasts a reader holding its snapshot for 0.2 s by enough
    # for a loaded machine (the wait that grew by 20 ms per 1,000 frames was 160 ms here).
    assert restart_wait_ms(8 * RESTART_FRAMES) == RESTART_WAIT_MOST_MS == 1000
    assert checkpoint_beside_a_reader(tmp_path / "large.db", 8 * RESTART_FRAMES, 0.2) == 1


def test_a_small_wal_does_not_wait_long_for_a_reader(tmp_path: pathlib.Path) -> None:
    # 1,000 frames: the 20 ms wait gives up on a reader holding its snapshot for 0.5 s, and
    # the WAL keeps its frames until a later checkpoint.
    assert checkpoint_beside_a_reader(tmp_path / "small.db", RESTART_FRAMES, 0.5) > RESTART_FRAMES


def write(connection: sqlite3.Connection, frames: int) -> None:
    for _ in range(frames):
        connection.execute("INSERT INTO filler VALUES (randomblob(3500))")


def test_a_store_alone_on_its_file_checkpoints_at_its_share(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "alone.db"
    connection = wal_of(path, 10)
    cadence = _Cadence(f"{path}-wal")
    first = cadence.interval
    cadence.checkpoint(connection, writes=10)  # learns the WAL's restart count
    write(connection, 200)  # (the WAL starts over at the first: the checkpoint copied it all)
    frames = (os.path.getsize(f"{path}-wal") - WAL_HEADER) // (4096 + FRAME_HEADER)
    # No one else wrote: this store's share is all of CHECKPOINT_EVERY, give or take a quarter.
    assert cadence.checkpoint(connection, writes=frames) >= 750 > first


def test_a_wal_another_store_started_over_does_not_space_out_checkpoints(
    tmp_path: pathlib.Path,
) -> None:
    path = tmp_path / "shared.db"
    mine, theirs = wal_of(path, 10), wal_of(path, 0)
    cadence = _Cadence(f"{path}-wal")
    cadence.checkpoint(mine, writes=10)
    before = cadence.interval
    write(theirs, RESTART_FRAMES + 500)
    _Cadence(f"{path}-wal").checkpoint(theirs, writes=RESTART_FRAMES + 500)  # starts it over
    write(mine, 20)
    # The WAL holds only the 20 frames written since the restart: read as the whole gain,
    # they made this store its only writer (1,000 writes to the next checkpoint). The other
    # store wrote 75 times as much, so the interval may not grow.
    assert cadence.checkpoint(mine, writes=20) <= before
