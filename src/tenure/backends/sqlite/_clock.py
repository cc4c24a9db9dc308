"""SQLite's clock in SQL, shared by the lock and the semaphore statements, and the same clock
in microseconds for the fence floor."""

import sqlite3
import time

__all__ = ["CLOCK_US", "NOW", "clock_us", "register_clock"]

NOW = "((julianday('now') - 2440587.5) * 86400.0)"
"""Unix seconds by SQLite's clock (the host's); one value throughout a statement."""


def clock_us() -> int:
    """The host's clock in whole microseconds since the epoch: the floor of a grant's fence.

    It is the clock ``NOW`` reads (both are the host's real-time clock), but ``NOW`` ticks in
    milliseconds (SQLite's unix VFS rounds its time to them), and a fence floor must move
    between two grants microseconds apart: after a record was removed, the first grant must
    land above every fence handed out before. Callers read it holding the file's write lock
    (after ``BEGIN IMMEDIATE`` returned, or inside a statement through ``CLOCK_US``), so the
    grants of all processes read it in the order they are made."""
    return time.time_ns() // 1000


CLOCK_US = "tenure_clock_us()"
"""``clock_us`` called by SQLite inside a statement (``register_clock``): a statement that is
its own transaction reads it holding the write lock, which a value bound before the statement
started would not be."""


def register_clock(connection: sqlite3.Connection) -> None:
    """Make ``CLOCK_US`` callable on ``connection`` (not deterministic: read at every call)."""
    connection.create_function("tenure_clock_us", 0, clock_us)
