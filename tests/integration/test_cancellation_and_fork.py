"""Rules 5 and 8 on every backend: a cancelled or timed-out acquire leaves nothing behind; a
forked child holds none of its parent's locks."""

from __future__ import annotations

import asyncio
import os
import threading

import tenure
from tests.timing import scaled


async def test_cancelled_acquires_leave_no_lock_and_no_renewal(
    backend_url: str, name: str
) -> None:
    async with tenure.connect_async(backend_url) as locks:
        for attempt in range(20):
            lock = locks.lock(f"{name}:{attempt % 4}", ttl=0.5, renew=True)
            task = asyncio.create_task(lock.acquire())
            # Cancel at varied points: before, during, and after the server round trip.
            await asyncio.sleep(attempt * 0.0005)
            task.cancel()
            try:
                took = await task
            except asyncio.CancelledError:
                took = False
            if took:
                await lock.release()
        await asyncio.sleep(1.5)  # 3 x ttl
        for index in range(4):
            info = await locks.inspect(f"{name}:{index}")
            assert info is None or not info.held, info
        renewers = [t for t in asyncio.all_tasks() if t.get_name() == "tenure-renewer"]
        assert renewers == []


async def test_timed_out_waiters_leave_nothing(backend_url: str, name: str) -> None:
    async with tenure.connect_async(backend_url) as locks:
        holder = locks.lock(name, ttl=5)
        assert await holder.acquire()
        waiters = [locks.lock(name, ttl=5, renew=True) for _ in range(5)]
        results = await asyncio.gather(*(w.acquire(timeout=0.2) for w in waiters))
        assert results == [False] * 5
        await holder.release()
        info = await locks.inspect(name)
        assert info is not None and not info.held


def test_forked_child_holds_nothing(backend_url: str, name: str) -> None:
    ttl = scaled(1)  # renewed every ttl/3: at the load now, the renewer gets a core in time
    with tenure.connect(backend_url) as locks:
        lock = locks.lock(name, ttl=ttl, renew=True)
        assert lock.acquire()
        read_end, write_end = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: report, never return into pytest
            try:
                verdict = []
                verdict.append(lock.fence is None)
                try:
                    lock.release()
                    verdict.append(False)
                except tenure.NotOwned:
                    verdict.append(True)
                verdict.append(not any(t.name in ("tenure-renewer", "tenure-renewal-loop")
                                       for t in threading.enumerate()))
                if not backend_url.startswith("memory"):
                    verdict.append(not tenure.connect(backend_url).lock(name).acquire(
                        blocking=False))
                os.write(write_end, b"".join(b"1" if v else b"0" for v in verdict))
            finally:
                os._exit(0)
        os.close(write_end)
        os.waitpid(pid, 0)
        verdict = os.read(read_end, 16)
        os.close(read_end)
        assert verdict and set(verdict) == {ord("1")}, verdict
        # The parent's lease is untouched and still renewed past its ttl.
        threading.Event().wait(1.5 * ttl)
        assert lock.owned()
        lock.release()


async def test_forked_child_of_an_async_holder_holds_nothing(backend_url: str, name: str) -> None:
    """Under asyncio the renewals run on a thread of their own, with connections of their
    own: a child has neither, holds none of the parent's leases, and renews its own."""
    ttl = scaled(1)  # renewed every ttl/3: at the load now, the renewer gets a core in time
    async with tenure.connect_async(backend_url) as locks:
        lock = locks.lock(name, ttl=ttl, renew=True)
        assert await lock.acquire()
        read_end, write_end = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: report, never return into pytest
            try:
                verdict = [lock.fence is None]
                verdict.append(not any(t.name in ("tenure-renewer", "tenure-renewal-loop")
                                       for t in threading.enumerate()))

                async def child() -> None:
                    # A loop of its own (the parent's is not running here); for the memory
                    # backend the child's store is a fresh one.
                    async with tenure.connect_async(backend_url) as own:
                        if not backend_url.startswith("memory"):
                            verdict.append(not await own.lock(name).acquire(blocking=False))
                        mine = own.lock(f"{name}:child", ttl=ttl, renew=True)
                        verdict.append(await mine.acquire())
                        await asyncio.sleep(1.5 * ttl)  # renewed past its ttl, by the child
                        verdict.append(await mine.owned())
                        await mine.release()

                runner = threading.Thread(target=asyncio.run, args=(child(),))
                runner.start()
                runner.join()
                os.write(write_end, b"".join(b"1" if v else b"0" for v in verdict))
            finally:
                os._exit(0)
        os.close(write_end)
        await asyncio.to_thread(os.waitpid, pid, 0)
        verdict = os.read(read_end, 16)
        os.close(read_end)
        assert verdict and set(verdict) == {ord("1")}, verdict
        # The parent's lease is untouched and still renewed past its ttl.
        await asyncio.sleep(1.5 * ttl)
        assert await lock.owned()
        await lock.release()


async def test_a_local_stores_cancelled_acquire_is_undone_before_it_raises(
    backend_url: str, name: str
) -> None:
    """A local store's release cannot hang, so a cancelled acquire's undo ends before the
    cancellation reaches the caller: the caller's very next listing shows nothing held (it
    once ran in the background, and a listing right after found the grant)."""
    async with tenure.connect_async(backend_url) as locks:
        for attempt in range(40):
            lock = locks.lock(f"{name}:{attempt % 4}", ttl=30)
            task = asyncio.create_task(lock.acquire())
            await asyncio.sleep(attempt * 0.0002)
            task.cancel()
            try:
                if await task:
                    await lock.release()
            except asyncio.CancelledError:
                pass
            held = [info.name for info in await locks.list_locks(name) if info.held]
            assert held == [], f"attempt {attempt}: {held}"


test_a_local_stores_cancelled_acquire_is_undone_before_it_raises.backends = (  # type: ignore[attr-defined]
    "memory", "sqlite")
