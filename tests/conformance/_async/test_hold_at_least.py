"""``hold_at_least`` (ShedLock's lockAtLeastFor): a release inside the window ends the
holder's ownership at once but leaves the name held on the server, same holder and fence,
until the window ends; a release after it frees the name at once. Plain and fair locks.

Timing: a refusal is asserted only where the window surely still runs. The server's window
ends no sooner than ``hold_at_least`` after its grant, which came after the moment the
acquire was sent: a contender granted (or an ``inspect`` finding it free) before that moment
plus the window is a failure; later, either answer is allowed, and the machine's load only
makes the test check less, never fail."""

from __future__ import annotations

import math
import os
import time

import pytest

import tenure
from tests.conformance import async_helpers as helpers
from tests.timing import renewed_ttl, scaled

SHAPES = [pytest.param(False, id="plain"), pytest.param(True, id="fair")]

WINDOW = 1.0
"""The window, seconds on an idle machine (``scaled``): long enough that the refusal inside
it is checked there (a new client's connection and a try take well under it on every store),
and no longer, as each test waits it out. Load cannot fail a test (module text), only make it
check less."""


def record_kind(fair: bool) -> str:
    return "rwlock" if fair else "lock"


def refused(locks: tenure.AsyncLocks, name: str, fair: bool) -> bool:
    """A backend without fair locks (Redlock) refuses a fair one with a window as it refuses
    any fair lock, saying why: True, and that refusal is the test there."""
    if not fair or locks.supports("fair"):
        return False
    with pytest.raises(tenure.ConfigurationError, match="fair"):
        locks.lock(name, ttl=30, hold_at_least=1.0, fair=True)
    return True


async def free_by(lock: tenure.AsyncLock, window_ends: float, deadline: float) -> bool:
    """Try ``lock`` until acquired or ``deadline`` (monotonic), from just before
    ``window_ends``: the name is held until then, and tries sooner only cost the server
    work (20 a second through a window stretched to 24 s on a loaded machine)."""
    await helpers.sleep(max(0.0, window_ends - time.monotonic() - 0.1))
    while not await lock.acquire(blocking=False):
        if time.monotonic() >= deadline:
            return False
        await helpers.sleep(0.05)
    return True


@pytest.mark.parametrize("fair", SHAPES)
async def test_release_inside_the_window_keeps_the_name_held(
    backend_url: str, name: str, fair: bool
) -> None:
    window = scaled(WINDOW)
    async with tenure.connect_async(backend_url) as locks:
        if refused(locks, name, fair):
            return
        lost: list[object] = []
        lock = locks.lock(name, ttl=30, hold_at_least=window, fair=fair, on_lost=lost.append)
        sent = time.monotonic()
        assert await lock.acquire(blocking=False)
        fence = lock.fence
        assert fence is not None
        await lock.release()

        # The holder's ownership ended at once.
        assert lock.fence is None
        assert await lock.owned() is False
        with pytest.raises(tenure.NotOwned):
            await lock.release()

        # The name did not: another handle is refused, inspect shows the same lease.
        other = locks.lock(name, ttl=30, fair=fair)
        if await other.acquire(blocking=False):
            assert time.monotonic() - sent >= window, "granted inside the window"
            await other.release()
        else:
            info = await locks.inspect(name, kind=record_kind(fair))
            assert info is not None
            if info.held:
                assert [lease.fence for lease in info.leases] == [fence]
                assert info.fence == fence
                assert info.leases[0].holder.pid == os.getpid()
                # etcd's leases are whole seconds, rounded up
                assert 0 < info.leases[0].ttl_left <= window + 1.5
            else:
                assert time.monotonic() - sent >= window, "shown free inside the window"
            assert await other.owned() is False

            # Once the window is over, the name is free; the next fence is higher.
            assert await free_by(other, sent + window, time.monotonic() + window + scaled(10))
            assert other.fence is not None and other.fence > fence
            await other.release()
        assert lost == [] and not lock.lost.is_set()


@pytest.mark.parametrize("fair", SHAPES)
async def test_the_window_outlives_the_holders_client(
    backend_url: str, name: str, fair: bool
) -> None:
    # A cron job exits right after its release: its connections (a ZooKeeper session and
    # its ephemeral nodes, an etcd client's leases) end, and the name must stay held.
    window = scaled(WINDOW)
    async with tenure.connect_async(backend_url) as locks:
        if refused(locks, name, fair):
            return
        lock = locks.lock(name, ttl=30, hold_at_least=window, fair=fair)
        sent = time.monotonic()
        assert await lock.acquire(blocking=False)
        fence = lock.fence
        await lock.release()
    async with tenure.connect_async(backend_url) as locks:
        other = locks.lock(name, ttl=30, fair=fair)
        if await other.acquire(blocking=False):
            assert time.monotonic() - sent >= window, "granted inside the window"
        else:
            info = await locks.inspect(name, kind=record_kind(fair))
            assert info is not None
            if info.held:
                assert [lease.fence for lease in info.leases] == [fence]
            else:
                assert time.monotonic() - sent >= window, "shown free inside the window"
            assert await free_by(other, sent + window, time.monotonic() + window + scaled(10))
        assert other.fence is not None and fence is not None and other.fence > fence
        await other.release()


@pytest.mark.parametrize("fair", SHAPES)
async def test_release_after_the_window_frees_the_name_at_once(
    backend_url: str, name: str, fair: bool
) -> None:
    window = 0.2
    async with tenure.connect_async(backend_url) as locks:
        if refused(locks, name, fair):
            return
        lock = locks.lock(name, ttl=30, hold_at_least=window, fair=fair)
        assert await lock.acquire(blocking=False)
        fence = lock.fence
        assert fence is not None
        await helpers.sleep(window + 0.05)  # the window counts from the grant's answer
        await lock.release()
        other = locks.lock(name, ttl=30, fair=fair)
        assert await other.acquire(blocking=False)
        assert other.fence is not None and other.fence > fence
        await other.release()


async def test_zero_or_none_releases_at_once(backend_url: str, name: str) -> None:
    async with tenure.connect_async(backend_url) as locks:
        for hold_at_least in (0, None, 0.0):
            lock = locks.lock(name, ttl=30, hold_at_least=hold_at_least)
            assert await lock.acquire(blocking=False)
            await lock.release()
            assert await locks.lock(name, ttl=30).locked() is False


async def test_reentrant_outermost_release_starts_the_window(
    backend_url: str, name: str
) -> None:
    window = scaled(WINDOW)
    async with tenure.connect_async(backend_url) as locks:
        lock = locks.lock(name, ttl=30, hold_at_least=window, reentrant=True)
        sent = time.monotonic()
        assert await lock.acquire(blocking=False)
        assert await lock.acquire(blocking=False)
        fence = lock.fence
        await lock.release()  # the inner one: still ours
        assert await lock.owned() is True and lock.fence == fence
        await lock.release()
        assert await lock.owned() is False
        with pytest.raises(tenure.NotOwned):
            await lock.release()
        other = locks.lock(name, ttl=30)
        if await other.acquire(blocking=False):
            assert time.monotonic() - sent >= window, "granted inside the window"
            await other.release()


async def test_renewed_lock_released_inside_the_window(backend_url: str, name: str) -> None:
    # Renewals stop at the release, and none still out restarts the whole ttl after it:
    # the name is free once the window is over, long before the ttl would have run out.
    ttl = renewed_ttl()
    window = ttl * 1.5
    async with tenure.connect_async(backend_url) as locks:
        lost: list[object] = []
        lock = locks.lock(
            name, ttl=ttl, renew=True, hold_at_least=window, on_lost=lost.append
        )
        sent = time.monotonic()
        assert await lock.acquire(blocking=False)
        fence = lock.fence
        assert fence is not None
        await helpers.sleep(ttl / 2)  # a renewal or so in
        await lock.release()
        assert await lock.owned() is False
        other = locks.lock(name, ttl=30)
        assert await free_by(other, sent + window, time.monotonic() + window + scaled(10))
        assert other.fence is not None and other.fence > fence
        await other.release()
        await helpers.sleep(ttl / 3)  # when a renewal would have been due
        assert lost == [] and not lock.lost.is_set()


@pytest.mark.parametrize(
    ("value", "error", "words"),
    [
        (-1, tenure.InvalidArgument, ">= 0"),
        (math.nan, tenure.InvalidArgument, "finite"),
        (math.inf, tenure.InvalidArgument, "finite"),
        ("300", TypeError, "number of seconds"),
        (True, TypeError, "number of seconds"),
    ],
)
async def test_bad_hold_at_least_is_refused(
    backend_url: str, name: str, value: object, error: type[Exception], words: str
) -> None:
    async with tenure.connect_async(backend_url) as locks:
        with pytest.raises(error, match="hold_at_least") as raised:
            locks.lock(name, ttl=30, hold_at_least=value)  # type: ignore[arg-type]
        assert isinstance(raised.value, tenure.TenureError)
        assert words in str(raised.value)
