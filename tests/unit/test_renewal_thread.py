"""Under asyncio the watchdog renews on a thread of its own (issue 23), and what it learns
reaches the holder on the holder's event loop: ``lost`` is set and ``on_lost`` runs there,
thread-safely, never on the renewal thread."""

from __future__ import annotations

import asyncio
import dataclasses
import threading
import time
import uuid
from typing import Any

import pytest

import tenure
from tenure._concurrency import renewal_loop
from tests.timing import scaled


def _memory_url() -> str:
    return f"memory://renewal-thread-{uuid.uuid4().hex}"


async def test_a_loss_found_on_the_renewal_thread_reaches_the_holders_loop() -> None:
    loop = asyncio.get_running_loop()
    seen: list[tuple[int, asyncio.AbstractEventLoop]] = []
    awaited: list[asyncio.AbstractEventLoop] = []

    def on_lost(lock: Any) -> Any:
        seen.append((threading.get_ident(), asyncio.get_running_loop()))

        async def later() -> None:  # a coroutine it returns runs on the holder's loop too
            awaited.append(asyncio.get_running_loop())

        return later()

    async with tenure.connect_async(_memory_url()) as locks:
        lock = locks.lock("k", ttl=0.3, renew=True, on_lost=on_lost)
        assert await lock.acquire()
        assert await locks.break_lock("k")
        # A set() from another thread would not wake this wait: it is woken on this loop.
        await asyncio.wait_for(lock.lost.wait(), 10)
        for _ in range(100):
            if awaited:
                break
            await asyncio.sleep(0.01)
    assert seen == [(threading.get_ident(), loop)]
    assert awaited == [loop]


async def test_a_loss_found_while_the_loop_is_blocked_waits_for_the_loop() -> None:
    ttl = 0.3
    async with tenure.connect_async(_memory_url()) as locks:
        lost: list[object] = []
        lock = locks.lock("k", ttl=ttl, renew=True, on_lost=lost.append)
        assert await lock.acquire()
        assert await locks.break_lock("k")
        time.sleep(5 * ttl)  # blocks the loop: renewals (and their refusal) go on regardless
        # Whatever the renewal thread found, it is handed to this loop, not applied from
        # that thread: nothing changed while the loop had no turn.
        assert not lock.lost.is_set() and lost == []
        await asyncio.wait_for(lock.lost.wait(), 10)
        assert lost == [lock]


async def test_renewals_run_on_the_renewal_thread_and_stop_with_the_release() -> None:
    async with tenure.connect_async(_memory_url()) as locks:
        lock = locks.lock("k", ttl=0.3, renew=True)
        assert await lock.acquire()
        assert any(thread.name == "tenure-renewal-loop" for thread in threading.enumerate())
        assert threading.current_thread().name != "tenure-renewal-loop"
        time.sleep(0.6)  # two renewals while the loop is blocked
        lock.check()
        await lock.release()
        assert await locks.lock("k", ttl=10).acquire(blocking=False)


def test_each_event_loop_renews_on_the_one_renewal_thread() -> None:
    url = _memory_url()

    async def hold(name: str) -> None:
        async with tenure.connect_async(url) as locks:
            lock = locks.lock(name, ttl=0.3, renew=True)
            assert await lock.acquire()
            time.sleep(0.6)
            lock.check()
            await lock.release()

    asyncio.run(hold("first"))
    first = renewal_loop.renewal_thread()
    assert first is not None
    asyncio.run(hold("second"))  # a new loop: the scheduler of the process serves it too
    assert renewal_loop.renewal_thread() is first and first.is_alive()


def test_a_lease_left_held_when_its_loop_ended_is_renewed_no_more() -> None:
    """Nobody can release it or hear of its loss once its loop is gone: it runs out on its
    own, as it did when the scheduler was one of that loop's tasks."""
    url = _memory_url()

    async def leave_held() -> Any:
        locks = tenure.connect_async(url)
        lock = locks.lock("k", ttl=0.3, renew=True)
        assert await lock.acquire()
        return lock  # never released

    kept = asyncio.run(leave_held())
    with tenure.connect(url) as locks:
        assert locks.lock("k", ttl=10).acquire(timeout=10)
    assert kept.fence is not None


async def test_renewals_go_on_while_pure_python_work_holds_the_gil() -> None:
    """CPU-bound Python code holds the GIL: the renewal thread still gets it (the interpreter
    hands it over every switch interval), so the lease is renewed and nobody else gets it."""
    url = _memory_url()
    ttl = 0.5
    async with tenure.connect_async(url) as locks:
        lock = locks.lock("k", ttl=ttl, renew=True)
        assert await lock.acquire()
        other = locks.lock("k", ttl=10)
        end = time.monotonic() + 4 * ttl
        while time.monotonic() < end:
            sum(range(1000))
        lock.check()
        assert not await other.acquire(blocking=False)
        await lock.release()


async def test_check_on_a_blocked_loop_sees_a_loss_the_renewal_thread_found() -> None:
    # The loss is sent to the holder's loop, which is blocked: check() itself must take it
    # (before, it passed until the lease's own deadline, a ttl after the loss was known).
    ttl = scaled(1.5)
    async with tenure.connect_async(_memory_url()) as locks:
        lock = locks.lock("k", ttl=ttl, renew=True)
        assert await lock.acquire()
        started = time.monotonic()
        assert await locks.break_lock("k")  # the next renewal (about ttl/3 in) is refused
        told = None
        while time.monotonic() - started < 0.9 * ttl:  # the loop never gets a turn
            try:
                lock.check()
            except tenure.LockLost:
                told = time.monotonic() - started
                break
            time.sleep(0.01)
        assert told is not None, "check() passed on a lease the renewal thread knew lost"


async def test_a_release_first_on_a_blocked_loop_still_reports_the_loss(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Renewals reach the store but their answers are lost: the renewal thread gives the
    # lease up at its deadline and sends the loss to the blocked loop; the release that runs
    # first (the store still has the lease) must not pass over it.
    from tenure.backends.memory._async import AsyncMemoryBackend

    applied = AsyncMemoryBackend.extend_many

    async def answer_lost(self: AsyncMemoryBackend, renewals: Any) -> Any:
        # Applied for far longer than asked, so the store surely still has the lease when
        # the release below comes, however loaded the machine.
        await applied(self, [dataclasses.replace(r, ttl=r.ttl * 20) for r in renewals])
        raise tenure.BackendError("the renewal's answer was lost")

    monkeypatch.setattr(AsyncMemoryBackend, "extend_many", answer_lost)
    lost: list[object] = []
    async with tenure.connect_async(_memory_url()) as locks:
        lock = locks.lock("k", ttl=0.6, renew=True, on_lost=lost.append)
        assert await lock.acquire()
        time.sleep(scaled(1.0))  # past the lease's deadline, the loop blocked throughout
        with pytest.raises(tenure.LockLost):
            await lock.release()
        assert lock.lost.is_set() and lost == [lock]
