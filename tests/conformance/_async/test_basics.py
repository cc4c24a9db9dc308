"""Acquire, release, extend, fences and ownership: the contract every backend keeps."""

from __future__ import annotations

import math

import pytest

import tenure
from tests.conformance import async_helpers as helpers
from tests.timing import renewed_ttl


@pytest.mark.smoke
async def test_acquire_release_round_trip(backend_url: str, name: str) -> None:
    async with tenure.connect_async(backend_url) as locks:
        lock = locks.lock(name, ttl=10)
        assert lock.fence is None
        assert await lock.acquire() is True
        assert isinstance(lock.fence, int) and lock.fence >= 1
        assert await lock.owned() is True
        assert await lock.locked() is True
        await lock.release()
        assert lock.fence is None
        assert await lock.owned() is False
        assert await lock.locked() is False


@pytest.mark.smoke
async def test_second_handle_is_refused_while_held(backend_url: str, name: str) -> None:
    async with tenure.connect_async(backend_url) as locks:
        first = locks.lock(name, ttl=10)
        second = locks.lock(name, ttl=10)
        assert await first.acquire(blocking=False)
        assert await second.acquire(blocking=False) is False
        assert second.fence is None
        assert await second.owned() is False
        await first.release()
        assert await second.acquire(blocking=False)
        await second.release()


async def test_two_clients_exclude_each_other(backend_url: str, name: str) -> None:
    async with tenure.connect_async(backend_url) as one, tenure.connect_async(backend_url) as two:
        assert await one.lock(name, ttl=10).acquire(blocking=False)
        assert await two.lock(name, ttl=10).acquire(blocking=False) is False


@pytest.mark.smoke
async def test_fences_strictly_increase_and_survive_release(backend_url: str, name: str) -> None:
    async with tenure.connect_async(backend_url) as locks:
        seen = []
        for _ in range(25):
            lock = locks.lock(name, ttl=10)
            assert await lock.acquire(blocking=False)
            assert lock.fence is not None
            seen.append(lock.fence)
            await lock.release()
        assert seen == sorted(set(seen)), seen
        info = await locks.inspect(name)
        assert info is not None and info.fence == seen[-1] and not info.held


async def test_fences_are_per_name(backend_url: str, name: str) -> None:
    async with tenure.connect_async(backend_url) as locks:
        a = locks.lock(name + ":a", ttl=10)
        b = locks.lock(name + ":b", ttl=10)
        for _ in range(3):
            assert await a.acquire(blocking=False)
            await a.release()
        assert await b.acquire(blocking=False)
        if locks.capabilities.fences_count_per_name:
            assert b.fence == 1
        else:  # a store-wide revision: later than a's, and b's own from then on
            assert b.fence is not None and b.fence >= 1
            first = b.fence
            await b.release()
            assert await b.acquire(blocking=False)
            assert b.fence is not None and b.fence > first
        await b.release()


async def test_release_without_holding_is_not_owned(backend_url: str, name: str) -> None:
    async with tenure.connect_async(backend_url) as locks:
        lock = locks.lock(name, ttl=10)
        with pytest.raises(tenure.NotOwned) as raised:
            await lock.release()
        assert raised.value.name == name
        assert await lock.acquire()
        await lock.release()
        with pytest.raises(tenure.NotOwned):
            await lock.release()
        with pytest.raises(tenure.NotOwned):
            await lock.extend()
        with pytest.raises(tenure.NotOwned):
            lock.check()


@pytest.mark.smoke
async def test_expired_lease_is_taken_over_and_loser_is_told(backend_url: str, name: str) -> None:
    async with tenure.connect_async(backend_url) as locks:
        first = locks.lock(name, ttl=0.3)
        second = locks.lock(name, ttl=10)
        assert await first.acquire()
        first_fence = first.fence
        await helpers.sleep(0.5 + locks.capabilities.lease_overrun)
        with pytest.raises(tenure.LockLost):
            first.check()
        assert first.lost.is_set()
        assert await second.acquire(blocking=False)
        assert second.fence is not None and first_fence is not None
        assert second.fence > first_fence
        with pytest.raises(tenure.LockLost):
            await first.release()
        assert await second.owned()
        await second.release()


async def test_expired_lease_release_raises_lock_lost(backend_url: str, name: str) -> None:
    async with tenure.connect_async(backend_url) as locks:
        lock = locks.lock(name, ttl=0.3)
        assert await lock.acquire()
        await helpers.sleep(0.5 + locks.capabilities.lease_overrun)
        assert await lock.owned() is False
        with pytest.raises(tenure.LockLost):
            await lock.release()


@pytest.mark.smoke
async def test_extend_keeps_the_lease(backend_url: str, name: str) -> None:
    async with tenure.connect_async(backend_url) as locks:
        # The lease must last 1.2 ttls with no renewal after the long extend: a store whose
        # leases also end with a session (ZooKeeper) vouches for that long at most.
        ttl = min(renewed_ttl(), (locks.store.lease_horizon or math.inf) / 2)
        lock = locks.lock(name, ttl=ttl)
        assert await lock.acquire()
        fence = lock.fence
        for _ in range(3):  # past the first ttl, each extend a third of it after the last
            await helpers.sleep(ttl / 3)
            await lock.extend()
        longer = 10 * ttl
        await lock.extend(longer)
        await helpers.sleep(1.2 * ttl)
        assert await lock.owned()
        assert lock.fence == fence
        lock.check()
        info = await locks.inspect(name)
        assert info is not None and info.ttl_left is not None
        assert 0.6 * longer < info.ttl_left <= longer
        await lock.release()


async def test_extend_after_loss_raises(backend_url: str, name: str) -> None:
    async with tenure.connect_async(backend_url) as locks:
        lock = locks.lock(name, ttl=0.3)
        assert await lock.acquire()
        await helpers.sleep(0.5 + locks.capabilities.lease_overrun)
        with pytest.raises(tenure.LockLost):
            await lock.extend()


async def test_context_manager_and_timeout(backend_url: str, name: str) -> None:
    async with tenure.connect_async(backend_url) as locks:
        async with locks.lock(name, ttl=10) as held:
            assert held.fence is not None
            with pytest.raises(tenure.LockTimeout) as raised:
                async with locks.lock(name, ttl=10, timeout=0.2):
                    pass
            assert raised.value.name == name
            with pytest.raises(tenure.LockTimeout):
                async with locks.lock(name, ttl=10, blocking=False):
                    pass
        assert not await locks.lock(name).locked()


async def test_break_lock_is_noticed_by_holder(backend_url: str, name: str) -> None:
    async with tenure.connect_async(backend_url) as locks:
        lock = locks.lock(name, ttl=10)
        assert await lock.acquire()
        assert await locks.break_lock(name) is True
        assert await locks.break_lock(name) is False
        assert await lock.owned() is False
        assert lock.lost.is_set()
        with pytest.raises(tenure.LockLost):
            await lock.release()
        fresh = locks.lock(name, ttl=10)
        assert await fresh.acquire(blocking=False)
        await fresh.release()


async def test_names_are_data(backend_url: str, name: str) -> None:
    hostile = [
        "with space", "quote'\"`", "{hash}{tag}", "100%_like*?[x]", "new\nline\ttab",
        "ünïcødé ☃ 中文", "back\\slash;DROP TABLE x;--", "$where", "{\"$ne\": 1}",
        "x" * 1024, "é" * 512,
    ]
    async with tenure.connect_async(backend_url) as locks:
        held = []
        for suffix in hostile:
            # Cut at the 1024-byte limit (the 1 KB names), on a character boundary.
            lock_name = (name + suffix).encode()[:1024].decode(errors="ignore")
            lock = locks.lock(lock_name, ttl=10)
            assert await lock.acquire(blocking=False), repr(lock_name)
            held.append(lock)
        # Each name is one lock of its own: a prefix or look-alike is not the same lock.
        for lock in held:
            info = await locks.inspect(lock.name)
            assert info is not None and info.name == lock.name and info.held
            assert await locks.lock(lock.name, ttl=10).acquire(blocking=False) is False
        assert await locks.lock(name + "with", ttl=10).acquire(blocking=False)
        for lock in held:
            await lock.release()


@pytest.mark.parametrize(
    ("bad_name", "error"),
    [
        ("", tenure.InvalidArgument),
        ("x" * 1025, tenure.InvalidArgument),
        ("a\x00b", tenure.InvalidArgument),
        (b"bytes", tenure.InvalidArgumentType),
        (None, tenure.InvalidArgumentType),
        (42, tenure.InvalidArgumentType),
        ({"$ne": 1}, tenure.InvalidArgumentType),
    ],
)
async def test_bad_names_are_refused_before_the_server(
    backend_url: str, bad_name: object, error: type[Exception]
) -> None:
    async with tenure.connect_async(backend_url) as locks:
        with pytest.raises(error):
            locks.lock(bad_name)  # type: ignore[arg-type]
        with pytest.raises(error):
            await locks.inspect(bad_name)  # type: ignore[arg-type]
        with pytest.raises(error):
            await locks.break_lock(bad_name)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("options", "error"),
    [
        ({"ttl": 0}, tenure.InvalidArgument),
        ({"ttl": -1}, tenure.InvalidArgument),
        ({"ttl": float("nan")}, tenure.InvalidArgument),
        ({"ttl": "30"}, tenure.InvalidArgumentType),
        ({"ttl": True}, tenure.InvalidArgumentType),
        ({"timeout": -0.5}, tenure.InvalidArgument),
        ({"max_renewals": -1, "renew": True}, tenure.InvalidArgument),
        ({"max_renewals": 3}, tenure.InvalidArgument),
        ({"on_lost": "print"}, tenure.InvalidArgumentType),
        ({"renew": "yes"}, tenure.InvalidArgumentType),
    ],
)
async def test_bad_options_are_refused(
    backend_url: str, name: str, options: dict[str, object], error: type[Exception]
) -> None:
    async with tenure.connect_async(backend_url) as locks:
        with pytest.raises(error):
            locks.lock(name, **options)  # type: ignore[arg-type]
        lock = locks.lock(name, ttl=10)
        with pytest.raises(tenure.InvalidArgument):
            await lock.acquire(timeout=-1)
        with pytest.raises(tenure.InvalidArgument):
            await lock.acquire(blocking=False, timeout=1)
        assert not await lock.locked()
