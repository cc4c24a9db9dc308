"""How long a blocked waiter takes to get a lock once its holder releases it."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Awaitable, Callable

import pytest

import tenure
from tenure.backends.redis._async.base import AsyncRedisBase
from tenure.backends.redis._sync.base import RedisBase
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
    timer. That cap leaves little room: a woken waiter's process waits for a core like any
    other, and asyncio waiters on a loaded run took 0.157 s (ci29), 0.357 s (ci33) and
    0.317 s (ci36, where the load read after it allowed 0.16 s); on an idle machine they
    take about 1 ms. A test that can push the timer out (``slow_timer``) asserts
    ``SLOW_TIMER_FLOOR`` instead."""
    return min(scaled(WAKE_BOUND), TIMER_FLOOR)


SLOW_TIMER = 2.8
"""The Redis stores' ``max_backoff`` under ``slow_timer``: a lock waiter left to its timer
first pauses 1.4 to 2.8 s (its blocking wait as long: ``slow_timer_url``'s socket timeout
allows it), ten times the default."""

SLOW_TIMER_FLOOR = 1.0
"""How soon a woken waiter must have the lock under ``slow_timer``, whatever the load: below
the timer's shortest first pause (1.4 s) by more than the test takes to see the waiter
queued and release it, and above every delay a loaded run has put between a release and
its woken waiter running (0.357 s at most, in ci33). Not scaled: a bound read off the load
after the fact was too short for the load during the wait (ci36)."""


@pytest.fixture
def slow_timer(monkeypatch: pytest.MonkeyPatch) -> None:
    """Redis waiters pause ``SLOW_TIMER`` (stores created in the test; pass the url through
    ``slow_timer_url``): a latency under ``SLOW_TIMER_FLOOR`` is then a wake-up."""
    for store in (RedisBase, AsyncRedisBase):
        monkeypatch.setattr(store, "max_backoff", SLOW_TIMER)


def slow_timer_url(url: str) -> str:
    """``url`` with a socket timeout that lets a wait block for ``SLOW_TIMER`` (a wait lasts
    at most half the socket timeout less Redis's blocking timer, 0.2 s)."""
    return url + ("&" if "?" in url else "?") + f"socket_timeout={2 * SLOW_TIMER + 0.4:g}"


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
