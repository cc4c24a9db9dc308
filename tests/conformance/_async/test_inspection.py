"""What operators see: inspect, list_locks, the locked decorator."""

from __future__ import annotations

import os
import socket

import pytest

import tenure
from tests.timing import scaled


async def test_inspect_shows_the_holder(backend_url: str, name: str) -> None:
    async with tenure.connect_async(backend_url) as locks:
        assert await locks.inspect(name) is None
        lock = locks.lock(name, ttl=20)
        assert await lock.acquire()
        info = await locks.inspect(name)
        assert info is not None and info.held
        assert info.name == name and info.fence == lock.fence
        assert info.holder is not None
        assert info.holder.host == socket.gethostname()
        assert info.holder.pid == os.getpid()
        assert info.holder.thread
        assert info.acquired_at is not None and info.acquired_at.tzinfo is not None
        assert info.ttl_left is not None and 15 < info.ttl_left <= 20
        # Every kind lists its leases: a lock's one lease is its holder's.
        [lease] = info.leases
        assert (lease.holder, lease.acquired_at, lease.fence) == (
            info.holder, info.acquired_at, lock.fence,
        )
        fence = lock.fence
        await lock.release()
        # The record outlives the lease: the fence must never go back.
        info = await locks.inspect(name)
        assert info is not None and not info.held and info.fence == fence
        assert info.holder is None and info.ttl_left is None and info.leases == ()


async def test_list_locks_by_prefix(backend_url: str, name: str) -> None:
    async with tenure.connect_async(backend_url) as locks:
        names = [f"{name}:b", f"{name}:a", f"{name}%:c", f"{name}_d"]
        handles = [locks.lock(n, ttl=20) for n in names]
        for handle in handles:
            assert await handle.acquire()
        listed = await locks.list_locks(f"{name}:")
        assert [info.name for info in listed] == [f"{name}:a", f"{name}:b"]
        assert all(info.held for info in listed)
        everything = {info.name for info in await locks.list_locks(name)}
        assert set(names) <= everything
        # % and _ are not wildcards.
        assert [i.name for i in await locks.list_locks(f"{name}%")] == [f"{name}%:c"]
        for handle in handles:
            await handle.release()


async def test_locked_decorator_formats_the_name(backend_url: str, name: str) -> None:
    async with tenure.connect_async(backend_url) as locks:
        seen: list[int | None] = []
        # The first contact first, with no deadline: a fresh client's set-up (a Redis
        # Cluster's slot map, command table and a connection to each master) is several
        # steps, one of which a loaded machine can stretch past 0.2 s + the deadline's slack.
        # The timeout below bounds the waits this test means: its lock calls. It is the
        # load's (``scaled``): an acquire's call is bounded by its timeout + 0.5 s, and a
        # fixed 0.2 s let a loaded run's single Redis round trip end in a BackendError (ci13).
        assert await locks.inspect(f"{name}:stock:7") is None

        @locks.locked(name + ":stock:{stock_id}", ttl=10, timeout=scaled(0.2))
        async def deduct(stock_id: int, amount: int = 1) -> int:
            info = await locks.inspect(f"{name}:stock:{stock_id}")
            seen.append(None if info is None else info.fence)
            return amount

        assert await deduct(7) == 1
        assert await deduct(stock_id=7, amount=3) == 3
        if locks.capabilities.fences_count_per_name:
            assert seen == [1, 2]
        else:
            assert len(seen) == 2 and seen[0] is not None and seen[1] is not None
            assert seen[0] < seen[1]
        blocker = locks.lock(f"{name}:stock:7", ttl=10)
        assert await blocker.acquire()
        with pytest.raises(tenure.LockTimeout):
            await deduct(7)
        assert await deduct(8) == 1
        await blocker.release()


async def test_locked_decorator_checks_the_template(backend_url: str, name: str) -> None:
    async with tenure.connect_async(backend_url) as locks:
        with pytest.raises(tenure.InvalidArgument):

            @locks.locked(name + ":{missing}")
            async def nothing(present: int) -> None: ...

        with pytest.raises(tenure.InvalidArgument):
            locks.locked(name, ttl=-1)
