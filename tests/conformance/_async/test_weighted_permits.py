"""Weighted permits: a permit takes ``weight`` of its semaphore's ``limit`` units, the live
permits' units never exceed the limit, and waiters are served in arrival order, so a heavy
waiter at the head holds back lighter ones behind it and is never starved. Runs on every
backend that offers "weighted"; the others' clear refusal of a weight above 1 is checked in
``test_semaphores`` (on each of them) and ``tests/unit/test_capabilities.py``."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable

import pytest

import tenure
from tests.conformance import async_helpers as helpers
from tests.conformance._async.places import queued, until_queued
from tests.timing import short_lease

PRIMITIVE = "weighted"



@pytest.mark.smoke
async def test_a_weighted_permit_takes_its_units(backend_url: str, name: str) -> None:
    async with tenure.connect_async(backend_url) as locks:
        assert locks.supports("weighted") is True
        heavy = locks.semaphore(name, limit=4, weight=3, ttl=10)
        assert heavy.weight == 3 and "weight=3" in repr(heavy)
        assert await heavy.acquire(blocking=False)
        assert isinstance(heavy.fence, int)
        # One unit is left: a weight of 2 does not fit, a weight of 1 does.
        assert await locks.semaphore(name, limit=4, weight=2, ttl=10).acquire(
            blocking=False) is False
        assert await locks.semaphore(name, limit=4, weight=2, ttl=10).locked() is True
        light = locks.semaphore(name, limit=4, ttl=10)
        assert await light.locked() is False
        assert await light.acquire(blocking=False)
        assert await light.locked() is True  # no unit left
        await heavy.release()
        other = locks.semaphore(name, limit=4, weight=3, ttl=10)
        assert await other.acquire(blocking=False)
        for permit in (light, other):
            await permit.release()
        info = await locks.inspect(name, kind="semaphore")
        assert info is not None and info.units == 0 and not info.held and info.queued == 0


async def test_bad_weights_are_refused_naming_the_weight(backend_url: str, name: str) -> None:
    async with tenure.connect_async(backend_url) as locks:
        for bad in (0, -1, 5):
            with pytest.raises(tenure.InvalidArgument, match=f"not {bad}"):
                locks.semaphore(name, limit=4, weight=bad)
        with pytest.raises(ValueError, match="weight"):
            locks.semaphore(name, limit=1, weight=2)
        for wrong in (1.5, "2", True, None):
            with pytest.raises(tenure.InvalidArgumentType, match="weight"):
                locks.semaphore(name, limit=4, weight=wrong)  # type: ignore[arg-type]


async def test_units_in_use_never_exceed_the_limit(backend_url: str, name: str) -> None:
    async with tenure.connect_async(backend_url) as locks:
        limit = 5
        inside = 0
        most = 0

        def worker(weight: int) -> Callable[[], Awaitable[int]]:
            async def work() -> int:
                nonlocal inside, most
                done = 0
                for _ in range(3):
                    async with locks.semaphore(name, limit=limit, weight=weight, ttl=10,
                                               timeout=60):
                        inside += weight
                        most = max(most, inside)
                        assert inside <= limit
                        await helpers.sleep(0.02)
                        inside -= weight
                        done += 1
                return done

            return work

        weights = [1, 2, 3, 1, 2, 3]
        assert await helpers.gather(*[worker(w) for w in weights]) == [3] * len(weights)
        assert 3 <= most <= limit


async def test_grants_follow_arrival_order(backend_url: str, name: str) -> None:
    async with tenure.connect_async(backend_url) as locks:
        full = locks.semaphore(name, limit=4, weight=4, ttl=10)
        assert await full.acquire()
        # Each pair of neighbours is more than the limit: one at a time, in arrival order.
        weights = [3, 2, 3, 4, 1, 4]
        order: list[int] = []

        def waiter(number: int) -> Callable[[], Awaitable[None]]:
            async def wait() -> None:
                await until_queued(locks, name, "semaphore", number)  # arrive after the ones before
                permit = locks.semaphore(name, limit=4, weight=weights[number], ttl=10)
                assert await permit.acquire(timeout=30)
                order.append(number)
                await helpers.sleep(0.02)
                await permit.release()

            return wait

        async def open_the_door() -> None:
            await until_queued(locks, name, "semaphore", len(weights))
            info = await locks.inspect(name, kind="semaphore")
            assert info is not None
            assert [waiter.weight for waiter in info.waiters] == weights
            await full.release()

        # Started in reverse: only the queue, not the start order, makes the grant order.
        await helpers.gather(open_the_door, *[waiter(n) for n in reversed(range(len(weights)))])
        assert order == list(range(len(weights)))
        assert await queued(locks, name, "semaphore") == 0


async def test_a_heavy_waiter_at_the_head_is_not_starved(backend_url: str, name: str) -> None:
    async with tenure.connect_async(backend_url) as locks:
        holders = [locks.semaphore(name, limit=4, ttl=10) for _ in range(2)]
        for permit in holders:
            assert await permit.acquire(blocking=False)
        heavy = locks.semaphore(name, limit=4, weight=4, ttl=10)
        events: list[str] = []

        async def wait_heavy() -> None:
            assert await heavy.acquire(timeout=30)
            events.append("heavy")
            await helpers.sleep(0.1)
            events.append("heavy released")
            await heavy.release()

        async def light_stream() -> None:
            await until_queued(locks, name, "semaphore", 1)
            # Two units are free, but the heavy waiter is ahead: every light newcomer waits.
            for _ in range(5):
                late = locks.semaphore(name, limit=4, ttl=10)
                assert await late.acquire(blocking=False) is False
                assert await late.locked() is True
            late = locks.semaphore(name, limit=4, ttl=10)

            async def wait_light() -> None:
                assert await late.acquire(timeout=30)
                events.append("light")
                await late.release()

            async def free_the_holders() -> None:
                await until_queued(locks, name, "semaphore", 2)
                for permit in holders:
                    await helpers.sleep(0.05)
                    await permit.release()

            await helpers.gather(wait_light, free_the_holders)

        await helpers.gather(wait_heavy, light_stream)
        assert events == ["heavy", "heavy released", "light"]


async def test_a_waiter_that_gives_up_leaves_the_queue(backend_url: str, name: str) -> None:
    async with tenure.connect_async(backend_url) as locks:
        holder = locks.semaphore(name, limit=4, weight=2, ttl=10)
        assert await holder.acquire(blocking=False)
        heavy = locks.semaphore(name, limit=4, weight=3, ttl=10)
        assert await heavy.acquire(blocking=False) is False
        assert await queued(locks, name, "semaphore") == 0  # a try takes no place
        assert await heavy.acquire(timeout=0.3) is False
        assert await queued(locks, name, "semaphore") == 0  # a timed-out wait left its place
        light = locks.semaphore(name, limit=4, weight=2, ttl=10)
        assert await light.acquire(blocking=False)  # nobody ahead any more: it fits
        for permit in (holder, light):
            await permit.release()


async def test_a_dead_holders_units_come_back_after_its_ttl(
    backend_url: str, name: str
) -> None:
    async with tenure.connect_async(backend_url) as locks:
        ttl = short_lease()
        crashed = locks.semaphore(name, limit=4, weight=3, ttl=ttl)
        before_grant = time.monotonic()
        assert await crashed.acquire(blocking=False)  # never renewed nor released
        waiter = locks.semaphore(name, limit=4, weight=2, ttl=10)
        assert await waiter.acquire(blocking=False) is False
        assert await waiter.acquire(timeout=10)
        # Not before the dead holder's lease ran out: granted after the request was sent,
        # it ends ttl later (less a clock tick).
        assert time.monotonic() - before_grant >= ttl - 0.01
        assert waiter.fence is not None and crashed.fence is not None
        assert waiter.fence > crashed.fence
        info = await locks.inspect(name, kind="semaphore")
        assert info is not None and info.units == 2
        with pytest.raises(tenure.LockLost):
            await crashed.release()
        await waiter.release()


async def test_inspect_shows_units_in_use_and_waiters_with_weights(
    backend_url: str, name: str
) -> None:
    async with tenure.connect_async(backend_url) as locks:
        two = locks.semaphore(name, limit=4, weight=2, ttl=10)
        one = locks.semaphore(name, limit=4, ttl=10)
        assert await two.acquire(blocking=False) and await one.acquire(blocking=False)
        info = await locks.inspect(name, kind="semaphore")
        assert info is not None and info.kind == "semaphore" and info.limit == 4
        assert info.units == 3
        assert sorted(lease.weight for lease in info.leases) == [1, 2]
        waiting = locks.semaphore(name, limit=4, weight=3, ttl=10)

        async def wait() -> None:
            assert await waiting.acquire(timeout=30)
            await waiting.release()

        async def look() -> None:
            await until_queued(locks, name, "semaphore", 1)
            info = await locks.inspect(name, kind="semaphore")
            assert info is not None and info.queued == 1
            (waiter,) = info.waiters
            assert waiter.weight == 3 and waiter.mode is None
            assert waiter.holder is not None and waiter.holder.pid > 0
            assert waiter.since is not None
            (listed,) = [i for i in await locks.list_locks(name) if i.kind == "semaphore"]
            assert listed.units == 3 and [w.weight for w in listed.waiters] == [3]
            await two.release()
            await one.release()

        await helpers.gather(wait, look)
        info = await locks.inspect(name, kind="semaphore")
        assert info is not None and info.units == 0 and info.waiters == ()
