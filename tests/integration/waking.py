"""How long a blocked waiter takes to get a lock once its holder releases it."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Awaitable, Callable

import tenure
from tests.timing import scaled

WAKE_BOUND = 0.08
"""A waiter's first wait blocks 0.25 to 0.5 s (the upper half of a notifying backend's
``max_backoff``). Released as soon as it is queued, a waiter the release wakes has the lock
within milliseconds on an idle machine; one left to its timer would wait about 0.25 s at
least."""

TIMER_FLOOR = 0.2
"""Below the shortest first wait (0.25 s) by the time the test may take to see the waiter
queued and release: a latency under it is a wake-up, whatever the load."""


def wake_bound() -> float:
    """How soon a woken waiter must have the lock: ``WAKE_BOUND`` stretched by the load now
    (``tests.timing``), never past ``TIMER_FLOOR``, so that it still tells a wake-up from a
    timer. A fixed 0.08 s failed an asyncio waiter at 0.157 s in a run beside a benchmark
    (ci29); one at 0.357 s (ci33) is past the cap, where the timer, not the release, may
    have woken it: a case for the product, not for a looser bound."""
    return min(scaled(WAKE_BOUND), TIMER_FLOOR)


def until(condition: Callable[[], bool], what: str, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"{what}: not within {timeout} s"
        time.sleep(0.002)


async def until_async(condition: Callable[[], Awaitable[bool]], what: str,
                      timeout: float = 10.0) -> None:
    """``until`` inside an event loop: it yields while it waits, so that the loop's own
    background work (a cancelled acquire's undo) can run, which a blocking sleep would
    stall."""
    deadline = time.monotonic() + timeout
    while not await condition():
        assert time.monotonic() < deadline, f"{what}: not within {timeout} s"
        await asyncio.sleep(0.02)


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


def asyncio_wake_latency(url: str, name: str, *, queued: Callable[[], bool]) -> float:
    """``wake_latency`` for asyncio: holder and waiter are tasks of one event loop (the lock
    logic runs each acquire in a task of its own, whose context never reaches the caller)."""

    async def main() -> float:
        async with tenure.connect_async(url) as locks:
            holder = locks.lock(name, ttl=30)
            assert await holder.acquire()
            woken: list[float] = []

            async def wait() -> None:
                lock = locks.lock(name, ttl=30)
                assert await lock.acquire(timeout=10)
                woken.append(time.monotonic())
                await lock.release()

            task = asyncio.create_task(wait())
            deadline = time.monotonic() + 5
            while not queued():  # a quick blocking read: the waiter announced itself
                assert not task.done() and time.monotonic() < deadline, "never queued"
                await asyncio.sleep(0.002)
            released = time.monotonic()
            await holder.release()
            await task
            return woken[0] - released

    return asyncio.run(main())
