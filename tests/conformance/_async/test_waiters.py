"""Waiters listed: ``inspect`` of a read-write (or fair) lock lists the waiters holding a
place in its queue, in arrival order, each with who waits (host, pid, thread), since when
(the server's clock) and for which mode, read in the same atomic step as its leases; a
waiter leaves the list when it gives up or is granted. Runs on every backend that queues
(read-write and fair locks); semaphores do not queue, so their ``waiters`` stay empty."""

from __future__ import annotations

import datetime
import os
import secrets
import time

import tenure
from tenure._async.rwlock import queued_spec
from tenure._tokens import HOST
from tenure._types import Busy, Holder, Kind, WaiterInfo
from tests.conformance import async_helpers as helpers
from tests.timing import scaled

PRIMITIVE = "rwlock"


async def waiters(locks: tenure.AsyncLocks, name: str) -> tuple[WaiterInfo, ...]:
    info = await locks.inspect(name, kind="rwlock")
    if info is None:
        return ()
    assert info.queued == len(info.waiters)
    return info.waiters


async def until_waiting(
    locks: tenure.AsyncLocks, name: str, count: int, within: float = 10.0
) -> None:
    """Wait until exactly ``count`` waiters are listed (at most ``within`` seconds)."""
    deadline = time.monotonic() + within
    while len(await waiters(locks, name)) != count:
        assert time.monotonic() < deadline, f"never {count} waiters listed"
        await helpers.sleep(0.01)


async def test_waiters_are_listed_in_arrival_order(backend_url: str, name: str) -> None:
    async with tenure.connect_async(backend_url) as locks:
        holder = locks.lock(name, ttl=30, fair=True)
        assert await holder.acquire()
        before = datetime.datetime.now(datetime.UTC)
        people = [Holder(f"host-{n}", 1000 + n, f"worker-{n}") for n in range(3)]
        tokens = [secrets.token_hex(16) for _ in people]
        modes = ["write", "read", "write"]
        # One by one, each only once the previous one is listed: a known arrival order.
        for number, (person, token, mode) in enumerate(zip(people, tokens, modes, strict=True)):
            answer = await locks.store.acquire(
                name, queued_spec(mode, queue_ttl=30), token, 30.0, person
            )
            assert isinstance(answer, Busy)
            await until_waiting(locks, name, number + 1)
        listed = await waiters(locks, name)
        assert [waiter.holder for waiter in listed] == people
        assert [waiter.mode for waiter in listed] == modes
        stamps = [waiter.since for waiter in listed]
        assert all(stamp is not None and stamp.tzinfo is not None for stamp in stamps)
        assert stamps == sorted(stamps)  # type: ignore[type-var]
        # The server's clock, not ours: near our own, within a generous allowance.
        for stamp in stamps:
            assert stamp is not None and abs(stamp - before).total_seconds() < 60
        info = await locks.inspect(name, kind="rwlock")
        assert info is not None and info.queued == 3 and len(info.leases) == 1

        # The middle one gives up: it leaves the list, the others keep their order.
        await locks.store.release(Kind.RWLOCK, name, tokens[1])
        await until_waiting(locks, name, 2)
        assert [waiter.holder for waiter in await waiters(locks, name)] == [people[0], people[2]]

        # The others give up too (a grant from a place is an attempt's: the handle tests).
        for token in (tokens[0], tokens[2]):
            await locks.store.release(Kind.RWLOCK, name, token)
        info = await locks.inspect(name, kind="rwlock")
        assert info is not None and info.waiters == () and len(info.leases) == 1
        await holder.release()
        assert await waiters(locks, name) == ()


async def until_shown(
    locks: tenure.AsyncLocks, name: str, leases: list[str], waiting: list[str]
) -> None:
    """Wait until the name's leases and waiters have these modes, in order (at most 10 s)."""
    deadline = time.monotonic() + 10
    while True:
        info = await locks.inspect(name, kind="rwlock")
        assert info is not None
        if ([lease.mode for lease in info.leases] == leases
                and [waiter.mode for waiter in info.waiters] == waiting):
            return
        assert time.monotonic() < deadline, f"never {leases} holding, {waiting} waiting"
        await helpers.sleep(0.01)


async def test_waiting_handles_are_listed_until_granted(backend_url: str, name: str) -> None:
    async with tenure.connect_async(backend_url) as locks:
        rw = locks.rwlock(name, ttl=30)
        writer = rw.write()
        assert await writer.acquire()
        reader = rw.read()
        fair = locks.lock(name, ttl=30, fair=True)

        async def read() -> bool:
            took = await reader.acquire(timeout=30)
            await until_shown(locks, name, ["read"], ["write"])  # granted: left the list
            await reader.release()
            return took

        async def write_fairly() -> bool:
            await until_waiting(locks, name, 1)  # behind the reader
            took = await fair.acquire(timeout=30)
            await until_shown(locks, name, ["write"], [])  # granted: left the list
            await fair.release()
            return took

        async def watch() -> None:
            await until_shown(locks, name, ["write"], ["read", "write"])
            listed = await waiters(locks, name)
            assert [waiter.mode for waiter in listed] == ["read", "write"]
            for waiter in listed:
                assert waiter.holder is not None
                assert (waiter.holder.host, waiter.holder.pid) == (HOST, os.getpid())
            await writer.release()  # the reader is granted, then (once it is done) the writer

        assert await helpers.gather(read, write_fairly, watch) == [True, True, None]
        assert await waiters(locks, name) == ()


async def test_a_waiter_that_times_out_leaves_the_list(backend_url: str, name: str) -> None:
    async with tenure.connect_async(backend_url) as locks:
        holder = locks.lock(name, ttl=30, fair=True)
        assert await holder.acquire()

        patience = scaled(2.0)

        async def give_up() -> bool:
            return await locks.lock(name, ttl=30, fair=True).acquire(timeout=patience)

        async def watch() -> None:
            await until_waiting(locks, name, 1)  # listed while it waits
            await until_waiting(locks, name, 0, within=patience + 10)  # gone once it gave up

        assert await helpers.gather(give_up, watch) == [False, None]
        await holder.release()


async def test_semaphores_list_no_waiters(backend_url: str, name: str) -> None:
    async with tenure.connect_async(backend_url) as locks:
        if not locks.supports("semaphore"):
            return
        permit = locks.semaphore(name, limit=1, ttl=30)
        assert await permit.acquire()
        info = await locks.inspect(name, kind="semaphore")
        assert info is not None and info.waiters == () and info.queued == 0
        await permit.release()
