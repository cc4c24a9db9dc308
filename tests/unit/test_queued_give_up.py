"""A queued waiter that is cancelled or fails while waiting leaves the queue at once (not only
when its place lapses): the paths the conformance suite cannot reach through the public API
of both flavours (a cancellation is asyncio's; a failing wait needs a failing backend)."""

from __future__ import annotations

import asyncio
import time

import pytest

import tenure
from tenure._sync.store import Attempt
from tenure._types import Busy, Holder, LeaseSpec
from tenure.backends.memory._async import AsyncMemoryBackend
from tenure.backends.memory._server import MemoryServer
from tenure.backends.memory._sync import MemoryAttempt, MemoryBackend


async def _queued(locks: tenure.AsyncLocks, name: str) -> int:
    info = await locks.inspect(name, kind="rwlock")
    return 0 if info is None else info.queued


async def test_a_cancelled_waiter_leaves_the_queue() -> None:
    async with tenure.AsyncLocks(AsyncMemoryBackend(MemoryServer())) as locks:
        holder = locks.lock("k", ttl=30, fair=True)
        assert await holder.acquire()
        waiter = asyncio.create_task(locks.lock("k", ttl=30, fair=True).acquire(timeout=30))
        while await _queued(locks, "k") < 1:
            await asyncio.sleep(0.01)
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
        deadline = time.monotonic() + 1  # far below the 3 s place lease
        while await _queued(locks, "k"):
            assert time.monotonic() < deadline, "the cancelled waiter's place stayed"
            await asyncio.sleep(0.01)
        await holder.release()


class FailingWaitAttempt(MemoryAttempt):
    def wait(self, timeout: float, busy: Busy) -> None:
        raise tenure.BackendError("the connection broke while waiting")


class FailingWait(MemoryBackend):
    def attempt(
        self, name: str, spec: LeaseSpec, token: str, ttl: float, holder: Holder
    ) -> Attempt:
        return FailingWaitAttempt(self, name, spec, token=token, ttl=ttl, holder=holder)


def test_a_waiter_whose_wait_fails_leaves_the_queue() -> None:
    with tenure.Locks(FailingWait(MemoryServer())) as locks:
        rw = locks.rwlock("k", ttl=30)
        reader = rw.read()
        assert reader.acquire()
        with pytest.raises(tenure.BackendError):
            rw.write().acquire(timeout=30)
        deadline = time.monotonic() + 1
        while (info := locks.inspect("k", kind="rwlock")) is not None and info.queued:
            assert time.monotonic() < deadline, "the failed waiter's place stayed"
            time.sleep(0.01)
        assert rw.read().acquire(blocking=False)  # no writer holds new readers back
