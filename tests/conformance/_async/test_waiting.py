"""Blocking acquire: timeouts by the client's monotonic clock, hand-offs, mutual exclusion."""

from __future__ import annotations

import time

import tenure
from tests.conformance import async_helpers as helpers
from tests.timing import scaled


async def test_blocking_acquire_times_out(backend_url: str, name: str) -> None:
    async with tenure.connect_async(backend_url) as locks:
        holder = locks.lock(name, ttl=10)
        assert await holder.acquire()
        waiter = locks.lock(name, ttl=10)
        started = time.monotonic()
        assert await waiter.acquire(timeout=0.3) is False
        elapsed = time.monotonic() - started
        assert 0.3 <= elapsed < 2.0, elapsed
        assert started and await waiter.acquire(timeout=0) is False
        await holder.release()


async def test_waiter_gets_the_lock_when_released(backend_url: str, name: str) -> None:
    async with tenure.connect_async(backend_url) as locks:
        holder = locks.lock(name, ttl=10)
        assert await holder.acquire()
        fences: list[int | None] = []

        async def wait_for_it() -> float:
            waiter = locks.lock(name, ttl=10)
            assert await waiter.acquire(timeout=5)
            fences.append(waiter.fence)
            acquired = time.monotonic()
            await waiter.release()
            return acquired

        async def release_later() -> float:
            await helpers.sleep(0.3)
            released = time.monotonic()
            await holder.release()
            return released

        acquired, released = await helpers.gather(wait_for_it, release_later)
        assert acquired >= released
        assert fences[0] is not None and holder.fence is None


async def test_waiter_notices_expiry_without_release(backend_url: str, name: str) -> None:
    async with tenure.connect_async(backend_url) as locks:
        holder = locks.lock(name, ttl=0.4)
        assert await holder.acquire()
        waiter = locks.lock(name, ttl=10)
        started = time.monotonic()
        assert await waiter.acquire(timeout=5)
        # The holder's lease ends 0.4 s after it began; the waiter must not sleep far past it
        # (a second's slack on an idle machine, more on a loaded one).
        assert time.monotonic() - started < 0.4 + scaled(1.0) + locks.capabilities.lease_overrun
        await waiter.release()


async def test_mutual_exclusion_counter(backend_url: str, name: str) -> None:
    """Workers do a non-atomic read-sleep-write under the lock: no update may be lost, and
    no two workers may ever be inside at once."""
    async with tenure.connect_async(backend_url) as locks:
        state = {"counter": 0, "inside": 0, "overlaps": 0}
        rounds, workers = 10, 4
        fences: list[int] = []

        def make_worker() -> object:
            async def work() -> None:
                for _ in range(rounds):
                    async with locks.lock(name, ttl=10, timeout=30) as lock:
                        state["inside"] += 1
                        if state["inside"] > 1:
                            state["overlaps"] += 1
                        value = state["counter"]
                        await helpers.sleep(0.002)
                        state["counter"] = value + 1
                        assert lock.fence is not None
                        fences.append(lock.fence)
                        state["inside"] -= 1

            return work

        await helpers.gather(*(make_worker() for _ in range(workers)))  # type: ignore[arg-type]
        assert state["overlaps"] == 0
        assert state["counter"] == rounds * workers
        assert fences == sorted(set(fences))
