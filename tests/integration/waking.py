"""How long a blocked waiter takes to get a lock once its holder releases it."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import tenure

WAKE_BOUND = 0.08
"""A waiter's first wait blocks 0.25 to 0.5 s (the upper half of a notifying backend's
``max_backoff``). Released 0.1 s into it, a waiter the release wakes has the lock within
milliseconds; one left to its timer would wait 0.15 s more at least."""


def wake_latency(
    locks: tenure.Locks, name: str, *, once_held: Callable[[], object] = lambda: None
) -> float:
    """Hold ``name``, call ``once_held``, start a thread waiting for ``name``, release 0.1 s
    later: the seconds from the release to the waiter's acquire returning."""
    holder = locks.lock(name, ttl=30)
    assert holder.acquire()
    once_held()
    woken: list[float] = []

    def wait() -> None:
        lock = locks.lock(name, ttl=30)
        assert lock.acquire(timeout=10)
        woken.append(time.monotonic())
        lock.release()

    thread = threading.Thread(target=wait)
    thread.start()
    time.sleep(0.1)
    released = time.monotonic()
    holder.release()
    thread.join(10)
    assert woken, "the waiter never got the lock"
    return woken[0] - released
