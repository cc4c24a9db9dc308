"""Fair (FIFO) locks: waiters are granted in arrival order; a waiter that gives up leaves the
queue at once and one that dies stops blocking it within its place's lease. A fair lock is
the write side of the read-write lock of the same name. Runs on every backend that offers
fair locks; ``tests/unit/test_capabilities.py`` checks the others refuse them."""

from __future__ import annotations

import os
import time
from collections.abc import Awaitable, Callable

import pytest

import tenure
from tenure._async.rwlock import queued_spec
from tenure._types import Grant, Holder
from tests.conformance import async_helpers as helpers
from tests.conformance._async.places import queued, until_queued
from tests.conformance._async.release_races import extend_racing_release
from tests.timing import RENEWED_FOR, renewed_ttl, scaled, short_lease

PRIMITIVE = "fair"



@pytest.mark.smoke
async def test_fair_lock_round_trip(backend_url: str, name: str) -> None:
    async with tenure.connect_async(backend_url) as locks:
        assert locks.supports("fair") is True
        lock = locks.lock(name, ttl=10, fair=True)
        assert isinstance(lock, tenure.AsyncLock)
        assert await lock.acquire() is True
        assert isinstance(lock.fence, int) and lock.fence >= 1
        assert await lock.owned() and await lock.locked()
        assert await locks.lock(name, ttl=10, fair=True).acquire(blocking=False) is False
        await lock.release()
        assert await lock.owned() is False and await lock.locked() is False
        info = await locks.inspect(name, kind="rwlock")
        assert info is not None and info.queued == 0 and not info.held


async def test_grants_follow_arrival_order(backend_url: str, name: str) -> None:
    async with tenure.connect_async(backend_url) as locks:
        first = locks.lock(name, ttl=10, fair=True)
        assert await first.acquire()
        waiters = 5
        order: list[int] = []

        def waiter(number: int) -> Callable[[], Awaitable[None]]:
            async def wait() -> None:
                # Arrive only after the ones before: arrival order is 0, 1, 2...
                await until_queued(locks, name, "rwlock", number)
                lock = locks.lock(name, ttl=10, fair=True)
                assert await lock.acquire(timeout=30)
                order.append(number)
                await helpers.sleep(0.02)
                await lock.release()

            return wait

        async def open_the_door() -> None:
            await until_queued(locks, name, "rwlock", waiters)
            await first.release()

        # Started in reverse: only the queue, not the start order, makes the grant order.
        await helpers.gather(open_the_door, *[waiter(n) for n in reversed(range(waiters))])
        assert order == list(range(waiters))
        assert await queued(locks, name, "rwlock") == 0


async def test_a_late_comer_waits_behind_the_queue(backend_url: str, name: str) -> None:
    async with tenure.connect_async(backend_url) as locks:
        holder = locks.lock(name, ttl=10, fair=True)
        assert await holder.acquire()
        waiting = locks.lock(name, ttl=10, fair=True)

        async def wait() -> bool:
            took = await waiting.acquire(timeout=10)
            await helpers.sleep(0.2)
            await waiting.release()
            return took

        async def barge() -> bool:
            await until_queued(locks, name, "rwlock", 1)
            await holder.release()
            # Free, but somebody waits: a newcomer does not overtake it.
            return await locks.lock(name, ttl=10, fair=True).acquire(blocking=False)

        assert await helpers.gather(wait, barge) == [True, False]


async def test_a_try_and_a_timeout_leave_no_place(backend_url: str, name: str) -> None:
    async with tenure.connect_async(backend_url) as locks:
        holder = locks.lock(name, ttl=10, fair=True)
        assert await holder.acquire()
        other = locks.lock(name, ttl=10, fair=True)
        assert await other.acquire(blocking=False) is False
        assert await queued(locks, name, "rwlock") == 0
        assert await other.acquire(timeout=0.2) is False
        assert await queued(locks, name, "rwlock") == 0
        with pytest.raises(tenure.LockTimeout):
            async with locks.lock(name, ttl=10, fair=True, timeout=0.1):
                pass
        assert await queued(locks, name, "rwlock") == 0
        await holder.release()
        assert await other.acquire(blocking=False)
        await other.release()


async def test_a_dead_waiter_stops_blocking_within_its_queue_lease(
    backend_url: str, name: str
) -> None:
    async with tenure.connect_async(backend_url) as locks:
        holder = locks.lock(name, ttl=10, fair=True)
        assert await holder.acquire()
        queue_ttl = short_lease()  # lasts past the calls below it must hold back, loaded
        dead = await locks.store.acquire(
            name, queued_spec("write", queue_ttl=queue_ttl), "dead" * 8, 10.0,
            Holder("gone", os.getpid(), "dead"),
        )
        assert not isinstance(dead, Grant)
        await holder.release()
        late = locks.lock(name, ttl=10, fair=True)
        assert await late.acquire(blocking=False) is False  # the dead one is ahead
        started = time.monotonic()
        assert await late.acquire(timeout=queue_ttl + scaled(5))
        assert time.monotonic() - started < queue_ttl + scaled(1.5)
        assert await queued(locks, name, "rwlock") == 0
        await late.release()


async def test_an_expired_holder_is_reclaimed(backend_url: str, name: str) -> None:
    async with tenure.connect_async(backend_url) as locks:
        crashed = locks.lock(name, ttl=0.3, fair=True)
        assert await crashed.acquire()
        waiter = locks.lock(name, ttl=10, fair=True)
        started = time.monotonic()
        assert await waiter.acquire(timeout=scaled(5))
        assert time.monotonic() - started < scaled(3)
        assert waiter.fence is not None and crashed.fence is not None
        assert waiter.fence > crashed.fence
        with pytest.raises(tenure.LockLost):
            await crashed.release()
        await waiter.release()


async def test_release_needs_the_lease(backend_url: str, name: str) -> None:
    async with tenure.connect_async(backend_url) as locks:
        lock = locks.lock(name, ttl=10, fair=True)
        with pytest.raises(tenure.NotOwned) as raised:
            await lock.release()
        assert raised.value.name == name and "fair lock" in str(raised.value)
        with pytest.raises(tenure.NotOwned):
            await lock.extend()
        assert await lock.acquire()
        await lock.release()
        with pytest.raises(tenure.NotOwned):
            await lock.release()


async def test_renewal_and_reentrancy(backend_url: str, name: str) -> None:
    async with tenure.connect_async(backend_url) as locks:
        lost: list[object] = []
        ttl = renewed_ttl()
        lock = locks.lock(name, ttl=ttl, fair=True, renew=True, on_lost=lost.append,
                          reentrant=True)
        async with lock:
            fence = lock.fence
            async with lock:
                await helpers.sleep(RENEWED_FOR * ttl)
                assert await lock.owned()
                lock.check()
            assert lock.fence == fence and await lock.owned() and lost == []
        assert await lock.owned() is False


async def test_fair_lock_is_the_write_side_of_the_rwlock(backend_url: str, name: str) -> None:
    async with tenure.connect_async(backend_url) as locks:
        fair = locks.lock(name, ttl=10, fair=True)
        rw = locks.rwlock(name, ttl=10)
        plain = locks.lock(name, ttl=10)
        assert await fair.acquire(blocking=False)
        assert await rw.write().acquire(blocking=False) is False
        assert await rw.read().acquire(blocking=False) is False
        assert await plain.acquire(blocking=False)  # the plain lock is another record
        await plain.release()
        await fair.release()
        writer = rw.write()
        assert await writer.acquire(blocking=False)
        assert await fair.acquire(blocking=False) is False
        written = writer.fence
        assert written is not None and fair.fence is None
        await writer.release()
        assert await fair.acquire(blocking=False)
        assert fair.fence is not None and fair.fence > written  # one fence counter
        info = await locks.inspect(name, kind="rwlock")
        assert info is not None and [lease.mode for lease in info.leases] == ["write"]
        await fair.release()


async def test_inspect_shows_a_fair_lock_as_fair(backend_url: str, name: str) -> None:
    """The queue a fair lock shares with the read-write lock of its name is shown as what
    the user made: "fair" while every lease and waiter in it is a fair lock's, "rwlock" as
    soon as one is a read-write lock's (the grant rules are the same either way)."""
    async with tenure.connect_async(backend_url) as locks:
        holder = locks.lock(name, ttl=10, fair=True)
        assert await holder.acquire()
        waiters = [locks.lock(name, ttl=10, fair=True) for _ in range(3)]
        seen: list[tenure.LockInfo | None] = []

        def wait(lock: tenure.AsyncLock) -> Callable[[], Awaitable[None]]:
            async def take() -> None:
                assert await lock.acquire(timeout=30)
                await lock.release()

            return take

        async def look_then_release() -> None:
            await until_queued(locks, name, "rwlock", 3)
            seen.append(await locks.inspect(name, kind="rwlock"))
            seen.append(await locks.inspect(name, kind="fair"))
            await holder.release()

        await helpers.gather(look_then_release, *[wait(lock) for lock in waiters])
        for info in seen:
            assert info is not None and info.kind == "fair" and info.queued == 3
            assert [(lease.mode, lease.fair) for lease in info.leases] == [("write", True)]
            # The same one read lists the fair locks' waiters, each waiting to write.
            assert [waiter.mode for waiter in info.waiters] == ["write"] * 3
        assert [info.kind for info in await locks.list_locks(name)] == ["rwlock"]  # free

        writer = locks.rwlock(name, ttl=10).write()
        assert await writer.acquire()
        info = await locks.inspect(name, kind="fair")
        assert info is not None and info.kind == "rwlock"
        assert [(lease.mode, lease.fair) for lease in info.leases] == [("write", False)]
        await writer.release()


async def kind_while_waiting(
    locks: tenure.AsyncLocks, name: str, holder: tenure.AsyncLock, waiter: tenure.AsyncLock
) -> str:
    """``inspect``'s kind of ``name`` while ``holder`` holds it and ``waiter`` waits."""
    assert await holder.acquire()
    kinds: list[str] = []

    async def take() -> None:
        assert await waiter.acquire(timeout=30)
        await waiter.release()

    async def look_then_release() -> None:
        await until_queued(locks, name, "rwlock", 1)
        info = await locks.inspect(name, kind="rwlock")
        assert info is not None and info.held
        kinds.append(info.kind)
        await holder.release()

    await helpers.gather(look_then_release, take)
    return kinds[0]


async def test_a_fair_lock_and_a_read_write_lock_in_one_queue_show_as_rwlock(
    backend_url: str, name: str
) -> None:
    async with tenure.connect_async(backend_url) as locks:
        rw = locks.rwlock(name, ttl=10)

        def fair() -> tenure.AsyncLock:
            return locks.lock(name, ttl=10, fair=True)

        assert await kind_while_waiting(locks, name, fair(), rw.write()) == "rwlock"
        assert await kind_while_waiting(locks, name, rw.write(), fair()) == "rwlock"
        assert await kind_while_waiting(locks, name, fair(), rw.read()) == "rwlock"
        assert await kind_while_waiting(locks, name, fair(), fair()) == "fair"
        info = await locks.inspect(name, kind="rwlock")
        assert info is not None and not info.held and info.queued == 0


async def test_mutual_exclusion_under_contention(backend_url: str, name: str) -> None:
    async with tenure.connect_async(backend_url) as locks:
        inside = 0
        most = 0

        async def worker() -> int:
            nonlocal inside, most
            for _ in range(4):
                async with locks.lock(name, ttl=10, fair=True, timeout=30):
                    inside += 1
                    most = max(most, inside)
                    await helpers.sleep(0.01)
                    inside -= 1
            return 4

        assert await helpers.gather(*[worker for _ in range(4)]) == [4] * 4
        assert most == 1
        assert await queued(locks, name, "rwlock") == 0


async def test_break_frees_the_holder_and_keeps_the_queue(backend_url: str, name: str) -> None:
    async with tenure.connect_async(backend_url) as locks:
        lost: list[object] = []
        holder = locks.lock(name, ttl=0.6, fair=True, renew=True, on_lost=lost.append)
        assert await holder.acquire()
        waiter = locks.lock(name, ttl=10, fair=True)

        async def wait() -> bool:
            took = await waiter.acquire(timeout=10)
            await waiter.release()
            return took

        async def break_it() -> None:
            await until_queued(locks, name, "rwlock", 1)
            assert await locks.break_lock(name, kind="rwlock")
            assert await helpers.wait_event(holder.lost, 2.0)

        took, _ = await helpers.gather(wait, break_it)
        assert took and lost == [holder]
        with pytest.raises(tenure.LockLost):
            holder.check()


async def test_an_extend_racing_the_release_is_neither_a_loss_nor_a_resurrection(
    backend_url: str, name: str
) -> None:
    await extend_racing_release(backend_url,
                                lambda locks: locks.lock(name, ttl=30, fair=True))
