"""reentrant=True: the same thread / task nests, another owner waits."""

from __future__ import annotations

import pytest

import tenure
from tests.conformance import async_helpers as helpers


async def test_same_owner_nests(backend_url: str, name: str) -> None:
    async with tenure.connect_async(backend_url) as locks:
        lock = locks.lock(name, ttl=10, reentrant=True)
        assert await lock.acquire()
        fence = lock.fence
        assert await lock.acquire(blocking=False)
        async with lock:
            assert lock.fence == fence
        await lock.release()
        assert await lock.owned()
        await lock.release()
        assert not await lock.locked()
        with pytest.raises(tenure.NotOwned):
            await lock.release()


async def test_other_owner_is_excluded(backend_url: str, name: str) -> None:
    async with tenure.connect_async(backend_url) as locks:
        lock = locks.lock(name, ttl=10, reentrant=True)
        assert await lock.acquire()

        async def other_owner() -> tuple[bool, int | None]:
            # Same handle, different thread / task: not the owner.
            took = await lock.acquire(blocking=False)
            fence = lock.fence
            try:
                await lock.release()
            except tenure.NotOwned:
                return took, fence
            return True, fence

        took, fence = (await helpers.gather(other_owner))[0]
        assert took is False and fence is None
        assert await lock.owned()
        await lock.release()


async def test_non_reentrant_handle_does_not_nest(backend_url: str, name: str) -> None:
    async with tenure.connect_async(backend_url) as locks:
        lock = locks.lock(name, ttl=10)
        assert await lock.acquire()
        assert await lock.acquire(blocking=False) is False
        assert await lock.owned()
        await lock.release()
