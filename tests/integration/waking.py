"""How long a blocked waiter takes to get a lock once its holder releases it."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import tenure

WAKE_BOUND = 0.08
"""A waiter's first wait blocks 0.25 to 0.5 s (the upper half of a notifying backend's
``max_backoff``). Released as soon as it is queued, a waiter the release wakes has the lock
within milliseconds; one left to its timer would wait about 0.25 s at least."""


def until(condition: Callable[[], bool], what: str, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"{what}: not within {timeout} s"
        time.sleep(0.002)


def wake_latency(
    locks: tenure.Locks,
    name: str,
    *,
    queued: Callable[[], bool],
    once_held: Callable[[], object] = lambda: None,
) -> float:
    """Hold ``name``, call ``once_held``, start a thread waiting for ``name``, release once
    ``queued()`` says the waiter is in the server's queue (a waiter that never announces
    itself fails here): the seconds from the release to the waiter's acquire returning."""
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
    until(queued, "the waiter announced itself")
    released = time.monotonic()
    holder.release()
    thread.join(10)
    assert woken, "the waiter never got the lock"
    return woken[0] - released
