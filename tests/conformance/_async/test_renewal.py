"""The watchdog: renewal keeps a short lease alive; loss is signalled, never hidden."""

from __future__ import annotations

import pytest

import tenure
from tests.conformance import async_helpers as helpers
from tests.conformance._async.release_races import extend_racing_release
from tests.timing import RENEWED_FOR, renewed_ttl, scaled


async def test_renewal_keeps_short_lease(backend_url: str, name: str) -> None:
    async with tenure.connect_async(backend_url) as locks:
        lost: list[object] = []
        ttl = renewed_ttl()
        lock = locks.lock(name, ttl=ttl, renew=True, on_lost=lost.append)
        assert await lock.acquire()
        fence = lock.fence
        await helpers.sleep(RENEWED_FOR * ttl)
        assert await lock.owned()
        assert not lock.lost.is_set() and lost == []
        lock.check()
        assert lock.fence == fence
        assert await locks.lock(name, ttl=10).acquire(blocking=False) is False
        await lock.release()
        await helpers.sleep(ttl)
        assert lost == []


async def test_break_behind_holders_back_fires_on_lost_once(backend_url: str, name: str) -> None:
    async with tenure.connect_async(backend_url) as locks:
        lost: list[object] = []
        # Scaled: the break must find the lease still held (ci12, under a load of 14: a
        # 0.6 s MySQL lease ran out before it, its renewals answered too late).
        ttl = scaled(0.6)
        lock = locks.lock(name, ttl=ttl, renew=True, on_lost=lost.append)
        assert await lock.acquire()
        assert await locks.break_lock(name)
        # The next renewal (ttl/3) finds the lease gone; a generous margin for slow servers.
        assert await helpers.wait_event(lock.lost, 5 * ttl / 3)
        await helpers.sleep(ttl)
        assert lost == [lock]
        with pytest.raises(tenure.LockLost):
            lock.check()
        with pytest.raises(tenure.LockLost):
            await lock.release()
        assert lost == [lock]


async def test_max_renewals_lets_the_lease_run_out_and_says_so(
    backend_url: str, name: str
) -> None:
    async with tenure.connect_async(backend_url) as locks:
        lost: list[object] = []
        ttl = scaled(0.45)
        lock = locks.lock(name, ttl=ttl, renew=True, max_renewals=2, on_lost=lost.append)
        assert await lock.acquire()
        await helpers.sleep(ttl * 10 / 9)
        assert await lock.owned()  # renewed past the first ttl
        # 2 renewals at ttl/3 each, then a full ttl: lost about 5/3 ttl after acquire.
        assert await helpers.wait_event(lock.lost, 4 * ttl)
        assert lost == [lock]
        assert not await lock.owned()
        other = locks.lock(name, ttl=10)
        assert await other.acquire(timeout=scaled(1.0) + locks.capabilities.lease_overrun)
        with pytest.raises(tenure.LockLost):
            await lock.release()
        await other.release()
        assert lost == [lock]


async def test_on_lost_without_renewal_fires_at_expiry(backend_url: str, name: str) -> None:
    async with tenure.connect_async(backend_url) as locks:
        lost: list[object] = []
        lock = locks.lock(name, ttl=0.3, on_lost=lost.append)
        assert await lock.acquire()
        assert await helpers.wait_event(lock.lost, 2.0)
        assert lost == [lock]


async def test_released_lock_stops_renewing(backend_url: str, name: str) -> None:
    # The renewed lease has ``renewed_ttl``: a 0.3 s one was lost before its release on a
    # loaded run (ci33, Redis Cluster: its renewal came after the lease's end), and the
    # release then raised LockLost. The other's lease is half as long, so a renewer that
    # went on after the release would come (at a third of its ttl) before that lease ends.
    ttl = renewed_ttl()
    async with tenure.connect_async(backend_url) as locks:
        lock = locks.lock(name, ttl=ttl, renew=True)
        assert await lock.acquire()
        await lock.release()
        other = locks.lock(name, ttl=ttl / 2)
        assert await other.acquire(blocking=False)
        await helpers.sleep(5 / 6 * ttl + locks.capabilities.lease_overrun)
        # Had the first handle kept renewing, it would have been refused; the other's lease
        # simply ran out.
        assert not await other.owned()
        assert not lock.lost.is_set()


async def test_an_extend_racing_the_release_is_neither_a_loss_nor_a_resurrection(
    backend_url: str, name: str
) -> None:
    await extend_racing_release(backend_url, lambda locks: locks.lock(name, ttl=30))


async def test_renewals_go_on_while_the_holder_is_busy(backend_url: str, name: str) -> None:
    """Issue 23's reproduction: the holder's thread (under asyncio, its event loop) is kept
    busy for three ttls without a pause. The watchdog renews regardless: another client
    trying meanwhile is refused every time, and afterwards the lease is still ours. The ttl
    is a second stretched by the load (``renewed_ttl``): a renewal is due a third in, and
    on a loaded machine its thread may wait longer than that for a core (ciB: a fixed 1 s
    lease was lost on MySQL and Redis Cluster at a load of 10)."""
    ttl = renewed_ttl()
    with tenure.connect(backend_url) as others:

        def contend() -> bool:
            other = others.lock(name, ttl=10)
            taken = other.acquire(blocking=False)
            if taken:
                other.release()
            return taken

        async with tenure.connect_async(backend_url) as locks:
            lost: list[object] = []
            lock = locks.lock(name, ttl=ttl, renew=True, on_lost=lost.append)
            assert await lock.acquire()
            answers = helpers.hog_the_holder(3 * ttl, contend, every=ttl / 4)
            assert answers and not any(answers), answers
            assert not lock.lost.is_set() and lost == []
            lock.check()
            await lock.release()
            assert lost == []
