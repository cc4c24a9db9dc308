"""A RESTART checkpoint's wait grows with the WAL it finds, so a reader that lost its core
for a while no longer makes every restart give up (the WAL once passed twice its size limit
on a loaded machine). Real SQLite files, a real reader holding a snapshot."""

from __future__ import annotations

import pathlib
import sqlite3
import threading

import pytest

from tenure.backends.sqlite._connection import (
    RESTART_FRAMES,
    RESTART_WAIT_MOST_MS,
    RESTART_WAIT_MS,
    _checkpoint,
    restart_wait_ms,
)

pytestmark = pytest.mark.sqlite


def test_the_restart_wait_doubles_per_thousand_frames_up_to_its_most() -> None:
    waits = [restart_wait_ms(frames * RESTART_FRAMES) for frames in range(1, 9)]
    assert waits == [RESTART_WAIT_MS << n for n in range(6)] + [RESTART_WAIT_MOST_MS] * 2
    assert restart_wait_ms(10**9) == RESTART_WAIT_MOST_MS


def wal_of(path: pathlib.Path, frames: int) -> sqlite3.Connection:
    """A connection to a WAL database whose WAL holds about ``frames`` pages."""
    connection = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
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
        _checkpoint(writer, writes=1)
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
