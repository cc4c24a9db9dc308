"""SQLite's clock in SQL, shared by the lock and the semaphore statements, and the same clock
in microseconds for the fence floor."""

import time

__all__ = ["NOW", "clock_us"]

NOW = "((julianday('now') - 2440587.5) * 86400.0)"
"""Unix seconds by SQLite's clock (the host's); one value throughout a statement."""


def clock_us() -> int:
    """The host's clock in whole microseconds since the epoch: the floor of a grant's fence.

    It is the clock ``NOW`` reads (both are the host's real-time clock), but ``NOW`` ticks in
    milliseconds (SQLite's unix VFS rounds its time to them), and a fence floor must move
    between two grants microseconds apart: after a record was removed, the first grant must
    land above every fence handed out before. Callers read it after ``BEGIN IMMEDIATE``
    returned, holding the file's write lock, so the grants of all processes read it in the
    order they are made."""
    return time.time_ns() // 1000
