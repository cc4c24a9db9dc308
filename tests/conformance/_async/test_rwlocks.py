"""Read-write locks: readers share a name, a writer excludes everybody, a waiting writer holds
back the readers that arrive after it, and every read and write lease is a lease of its own
(token, server-clock expiry, fence, watchdog, loss signalled). Runs on every backend that
implements queued leases; ``tests/unit/test_capabilities.py`` checks the others refuse them."""

from __future__ import annotations

import os
import time

import pytest

import tenure
from tenure._async.rwlock import queued_spec
from tenure._types import Grant, Holder
from tests.conformance import async_helpers as helpers
from tests.conformance._async.places import queued, until_queued
from tests.conformance._async.release_races import extend_racing_release
from tests.timing import RENEWED_FOR, renewed_ttl, scaled, short_lease

PRIMITIVE = "rwlock"



@pytest.mark.smoke
async def test_readers_share_and_a_writer_excludes_them(backend_url: str, name: str) -> None:
    async with tenure.connect_async(backend_url) as locks:
        assert locks.supports("rwlock") is True
        rw = locks.rwlock(name, ttl=10)
        readers = [rw.read() for _ in range(3)]
        for reader in readers:
            assert await reader.acquire(blocking=False)
            assert reader.fence is not None
        writer = rw.write()
        assert await writer.locked() is True
        assert await readers[0].locked() is False  # another reader would get in
        assert await writer.acquire(blocking=False) is False
        for reader in readers:
            await reader.release()
        assert await writer.acquire(blocking=False)
        assert await rw.read().acquire(blocking=False) is False
        assert await rw.write().acquire(blocking=False) is False
        assert await readers[0].locked() is True
        await writer.release()
        assert await writer.locked() is False


async def test_a_waiting_writer_holds_back_new_readers(backend_url: str, name: str) -> None:
    async with tenure.connect_async(backend_url) as locks:
        rw = locks.rwlock(name, ttl=10)
        first = rw.read()
        assert await first.acquire(blocking=False)
        writer = rw.write()
        order: list[str] = []

        async def write() -> None:
            assert await writer.acquire(timeout=10)
            order.append("writer")
            await writer.release()

        async def then_read() -> None:
            await until_queued(locks, name, "rwlock", 1)
            late = rw.read()
            # The writer waits for the first reader; a reader arriving now waits for it.
            assert await late.acquire(blocking=False) is False
            assert await late.acquire(timeout=0.2) is False
            assert await queued(locks, name, "rwlock") == 1  # the late reader left no place behind
            order.append("released first reader")
            await first.release()
            assert await late.acquire(timeout=10)
            order.append("late reader")
            await late.release()

        await helpers.gather(write, then_read)
        assert order == ["released first reader", "writer", "late reader"]


async def test_readers_that_arrived_before_a_writer_go_first(
    backend_url: str, name: str
) -> None:
    async with tenure.connect_async(backend_url) as locks:
        rw = locks.rwlock(name, ttl=10)
        holder = rw.write()
        assert await holder.acquire(blocking=False)
        order: list[str] = []

        async def reader() -> None:
            handle = rw.read()
            assert await handle.acquire(timeout=10)
            order.append("reader")
            await helpers.sleep(0.1)
            await handle.release()

        async def writer() -> None:
            await until_queued(locks, name, "rwlock", 1)
            handle = rw.write()
            assert await handle.acquire(timeout=10)
            order.append("writer")
            await handle.release()

        async def release() -> None:
            await until_queued(locks, name, "rwlock", 2)
            await holder.release()

        await helpers.gather(reader, writer, release)
        assert order == ["reader", "writer"]


@pytest.mark.smoke
async def test_fences_increase_across_reads_and_writes(backend_url: str, name: str) -> None:
    async with tenure.connect_async(backend_url) as locks:
        rw = locks.rwlock(name, ttl=10)
        seen: list[int] = []
        for _ in range(2):
            readers = [rw.read(), rw.read()]
            for reader in readers:
                assert await reader.acquire(blocking=False)
                assert reader.fence is not None
                seen.append(reader.fence)
            for reader in readers:
                await reader.release()
            writer = rw.write()
            assert await writer.acquire(blocking=False)
            assert writer.fence is not None
            assert writer.fence > max(seen)  # a write's fence exceeds every earlier fence
            seen.append(writer.fence)
            await writer.release()
        assert seen == sorted(set(seen)), seen
        info = await locks.inspect(name, kind="rwlock")
        assert info is not None and info.kind == "rwlock"
        assert info.fence == seen[-1] and not info.held and info.queued == 0


async def test_a_try_leaves_no_place_in_the_queue(backend_url: str, name: str) -> None:
    async with tenure.connect_async(backend_url) as locks:
        rw = locks.rwlock(name, ttl=10)
        writer = rw.write()
        assert await writer.acquire(blocking=False)
        for handle in (rw.read(), rw.write()):
            assert await handle.acquire(blocking=False) is False
            assert await queued(locks, name, "rwlock") == 0
            with pytest.raises(tenure.LockTimeout):
                async with rw.read(blocking=False):
                    pass
            assert await queued(locks, name, "rwlock") == 0
        await writer.release()
        # Nothing left behind holds the next writer back.
        assert await rw.write().acquire(blocking=False)


async def test_a_timed_out_waiter_leaves_no_place(backend_url: str, name: str) -> None:
    async with tenure.connect_async(backend_url) as locks:
        rw = locks.rwlock(name, ttl=10)
        reader = rw.read()
        assert await reader.acquire(blocking=False)
        writer = rw.write()
        started = time.monotonic()
        assert await writer.acquire(timeout=0.3) is False
        assert time.monotonic() - started >= 0.3
        assert writer.fence is None
        assert await queued(locks, name, "rwlock") == 0
        # No writer waits any more: a new reader gets in at once.
        assert await rw.read().acquire(blocking=False)
        await reader.release()


async def test_an_expired_holder_is_reclaimed(backend_url: str, name: str) -> None:
    async with tenure.connect_async(backend_url) as locks:
        rw = locks.rwlock(name)
        crashed = rw.write(ttl=0.3)
        assert await crashed.acquire(blocking=False)
        reader = rw.read(ttl=10)
        started = time.monotonic()
        assert await reader.acquire(timeout=scaled(5))
        assert time.monotonic() - started < scaled(3)
        assert reader.fence is not None and crashed.fence is not None
        assert reader.fence > crashed.fence
        with pytest.raises(tenure.LockLost):
            await crashed.release()
        await reader.release()


async def test_a_dead_waiters_place_lapses(backend_url: str, name: str) -> None:
    async with tenure.connect_async(backend_url) as locks:
        rw = locks.rwlock(name, ttl=10)
        holder = rw.read()
        assert await holder.acquire(blocking=False)
        # A writer that queues once and is never heard of again (SIGKILLed while waiting).
        queue_ttl = short_lease()  # lasts past the calls below it must hold back, loaded
        dead = await locks.store.acquire(
            name, queued_spec("write", queue_ttl=queue_ttl), "dead" * 8, 10.0,
            Holder("gone", os.getpid(), "dead"),
        )
        assert not isinstance(dead, Grant)
        assert await queued(locks, name, "rwlock") == 1
        # Its place holds back new readers while it lasts...
        assert await rw.read().acquire(blocking=False) is False
        await holder.release()
        writer = rw.write()
        assert await writer.acquire(blocking=False) is False  # ...and writers behind it
        # ...and no longer than its queue lease.
        started = time.monotonic()
        assert await writer.acquire(timeout=queue_ttl + scaled(5))
        assert time.monotonic() - started < queue_ttl + scaled(1.5)
        assert await queued(locks, name, "rwlock") == 0
        await writer.release()


@pytest.mark.smoke
async def test_release_and_extend_need_the_lease(backend_url: str, name: str) -> None:
    async with tenure.connect_async(backend_url) as locks:
        rw = locks.rwlock(name, ttl=10)
        for handle in (rw.read(), rw.write()):
            with pytest.raises(tenure.NotOwned) as raised:
                await handle.release()
            assert raised.value.name == name
            with pytest.raises(tenure.NotOwned):
                await handle.extend()
            assert await handle.acquire()
            await handle.release()
            with pytest.raises(tenure.NotOwned):
                await handle.release()


async def test_a_read_handle_is_one_lease(backend_url: str, name: str) -> None:
    async with tenure.connect_async(backend_url) as locks:
        reader = locks.rwlock(name, ttl=10).read()
        assert await reader.acquire()
        with pytest.raises(tenure.InvalidArgument):
            await reader.acquire(blocking=False)
        info = await locks.inspect(name, kind="rwlock")
        assert info is not None and len(info.leases) == 1
        await reader.release()


async def test_reentrant_reads_nest_while_a_writer_waits(backend_url: str, name: str) -> None:
    async with tenure.connect_async(backend_url) as locks:
        rw = locks.rwlock(name, ttl=10, reentrant=True)
        waiting = locks.rwlock(name, ttl=10).write()

        async def nest() -> bool:
            async with rw.read() as outer:
                await until_queued(locks, name, "rwlock", 1)
                # One handle per side: the nested read counts in-process, never queues
                # behind the waiting writer (which waits for the outer read).
                async with rw.read() as inner:
                    return inner is outer and inner.fence == outer.fence

        async def write() -> bool:
            while not await waiting.locked():  # until the outer read is held
                await helpers.sleep(0.01)
            took = await waiting.acquire(timeout=10)
            await waiting.release()
            return took

        assert await helpers.gather(nest, write) == [True, True]


async def test_extend_restarts_the_lease(backend_url: str, name: str) -> None:
    async with tenure.connect_async(backend_url) as locks:
        rw = locks.rwlock(name, ttl=0.5)
        reader = rw.read()
        assert await reader.acquire()
        await reader.extend(10)
        await helpers.sleep(0.8)
        assert await reader.owned()
        assert await rw.write().acquire(blocking=False) is False
        await reader.release()


async def test_renewal_keeps_short_leases(backend_url: str, name: str) -> None:
    async with tenure.connect_async(backend_url) as locks:
        lost: list[object] = []
        ttl = renewed_ttl()
        rw = locks.rwlock(name, ttl=ttl, renew=True, on_lost=lost.append)
        readers = [rw.read(), rw.read()]
        for reader in readers:
            assert await reader.acquire()
        fences = [reader.fence for reader in readers]
        await helpers.sleep(RENEWED_FOR * ttl)
        for reader in readers:
            assert await reader.owned()
            reader.check()
        assert [reader.fence for reader in readers] == fences and lost == []
        assert await rw.write().acquire(blocking=False) is False
        for reader in readers:
            await reader.release()
        writer = rw.write()
        assert await writer.acquire()
        await helpers.sleep(RENEWED_FOR * ttl)
        assert await writer.owned() and lost == []
        await writer.release()


async def test_context_managers_and_lock_timeout(backend_url: str, name: str) -> None:
    async with tenure.connect_async(backend_url) as locks:
        rw = locks.rwlock(name, ttl=10, timeout=1)
        async with rw.read() as reader, rw.read() as other:
            assert reader.fence is not None and other.fence is not None
            with pytest.raises(tenure.LockTimeout) as raised:
                async with rw.write(timeout=0.2):
                    pass
            assert raised.value.name == name
        assert reader.fence is None
        async with rw.write() as writer:
            assert writer.fence is not None
        assert await queued(locks, name, "rwlock") == 0


async def test_no_writer_ever_overlaps_anyone(backend_url: str, name: str) -> None:
    async with tenure.connect_async(backend_url) as locks:
        readers_inside = 0
        writers_inside = 0
        most_readers = 0
        overlaps = 0
        # Long enough, at the load now, that a reader polling in is let in beside another
        # (a loaded MongoDB run once saw no two readers share with 0.03 s).
        reader_hold = scaled(0.05)

        async def reader() -> int:
            nonlocal readers_inside, most_readers, overlaps
            for _ in range(4):
                async with locks.rwlock(name, ttl=10, timeout=30).read():
                    readers_inside += 1
                    most_readers = max(most_readers, readers_inside)
                    overlaps += writers_inside
                    await helpers.sleep(reader_hold)
                    readers_inside -= 1
            return 4

        async def writer() -> int:
            nonlocal writers_inside, overlaps
            for _ in range(3):
                async with locks.rwlock(name, ttl=10, timeout=30).write():
                    writers_inside += 1
                    overlaps += readers_inside + writers_inside - 1
                    await helpers.sleep(0.01)
                    writers_inside -= 1
            return 3

        counts = await helpers.gather(reader, reader, reader, writer, writer)
        assert counts == [4, 4, 4, 3, 3]
        assert overlaps == 0
        assert most_readers >= 2  # readers did share
        assert await queued(locks, name, "rwlock") == 0


async def test_inspect_and_list_show_modes_and_the_queue(backend_url: str, name: str) -> None:
    async with tenure.connect_async(backend_url) as locks:
        rw = locks.rwlock(name, ttl=10)
        readers = [rw.read(), rw.read()]
        for reader in readers:
            assert await reader.acquire()
        writer = rw.write()

        async def wait() -> bool:
            return await writer.acquire(timeout=10)

        async def look() -> None:
            await until_queued(locks, name, "rwlock", 1)
            info = await rw.inspect()
            assert info is not None
            assert info.kind == "rwlock" and info.held and info.queued == 1
            assert [lease.mode for lease in info.leases] == ["read", "read"]
            assert sorted(lease.fence for lease in info.leases) == sorted(
                r.fence for r in readers
            )
            for lease in info.leases:
                assert 0 < lease.ttl_left <= 10
                assert lease.acquired_at is not None and lease.acquired_at.tzinfo is not None
                assert lease.holder.pid == os.getpid()
            listed = [i for i in await locks.list_locks(name) if i.kind == "rwlock"]
            assert [i.name for i in listed] == [name]
            assert len(listed[0].leases) == 2 and listed[0].queued == 1
            for reader in readers:
                await reader.release()

        took, _ = await helpers.gather(wait, look)
        assert took
        info = await locks.inspect(name, kind="rwlock")
        assert info is not None
        assert [lease.mode for lease in info.leases] == ["write"] and info.queued == 0
        await writer.release()


async def test_break_frees_every_holder(backend_url: str, name: str) -> None:
    async with tenure.connect_async(backend_url) as locks:
        lost: list[object] = []
        ttl = scaled(0.6)
        rw = locks.rwlock(name, ttl=ttl, renew=True, on_lost=lost.append)
        readers = [rw.read(), rw.read()]
        for reader in readers:
            assert await reader.acquire()
        assert await locks.break_lock(name, kind="rwlock")
        for reader in readers:
            assert await helpers.wait_event(reader.lost, 10 / 3 * ttl)
            with pytest.raises(tenure.LockLost):
                reader.check()
        assert sorted(map(id, lost)) == sorted(map(id, readers))
        assert await locks.break_lock(name, kind="rwlock") is False
        writer = rw.write()
        assert await writer.acquire(blocking=False)
        assert writer.fence is not None
        assert writer.fence > max(r.fence or 0 for r in readers)
        await writer.release()


async def test_a_rwlock_and_a_lock_of_one_name_are_apart(backend_url: str, name: str) -> None:
    async with tenure.connect_async(backend_url) as locks:
        lock = locks.lock(name, ttl=10)
        writer = locks.rwlock(name, ttl=10).write()
        assert await lock.acquire(blocking=False)
        assert await writer.acquire(blocking=False)
        lock_info = await locks.inspect(name)
        rw_info = await locks.inspect(name, kind="rwlock")
        assert lock_info is not None and lock_info.kind == "lock"
        assert rw_info is not None and rw_info.kind == "rwlock"
        await lock.release()
        await writer.release()


async def test_an_extend_racing_a_release_is_neither_a_loss_nor_a_resurrection(
    backend_url: str, name: str
) -> None:
    # A read lease left behind would refuse the writer that follows.
    await extend_racing_release(backend_url, lambda locks: locks.rwlock(name, ttl=30).read(),
                                lambda locks: locks.rwlock(name, ttl=30).write())
    await extend_racing_release(backend_url, lambda locks: locks.rwlock(name, ttl=30).write())
