"""The lock logic's side of the waiting contract: the Busy a backend answered travels, as
that same object, to the wait that follows and to the next acquire of the same attempt; a
new attempt starts afresh. Checked in both flavours, and under asyncio across the task the
lock logic runs each acquire in."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import tenure
from tenure._types import Busy, Grant, Holder
from tenure.backends.memory._async import AsyncMemoryBackend
from tenure.backends.memory._store import MemoryStore
from tenure.backends.memory._sync import MemoryBackend


class _Recorder:
    def __init__(self) -> None:
        self.calls: list[tuple[str, str, Any]] = []  # (step, token, the Busy handed over)
        self.answers: list[Busy] = []

    def answered(self, token: str, outcome: Grant | Busy) -> Grant | Busy:
        if isinstance(outcome, Busy):
            outcome = Busy(outcome.ttl_left, waiting=object())  # state private to the attempt
            self.answers.append(outcome)
        self.calls.append(("answer", token, outcome))
        return outcome


class AsyncRecording(AsyncMemoryBackend):
    recorder = _Recorder()

    async def acquire(
        self, name: str, token: str, ttl: float, holder: Holder, waited: Busy | None = None
    ) -> Grant | Busy:
        self.recorder.calls.append(("acquire", token, waited))
        return self.recorder.answered(token, await super().acquire(name, token, ttl, holder))

    async def wait_for_release(self, name: str, timeout: float, busy: Busy | None = None) -> None:
        self.recorder.calls.append(("wait", "", busy))
        await super().wait_for_release(name, min(timeout, 0.01), busy)


class Recording(MemoryBackend):
    recorder = _Recorder()

    def acquire(
        self, name: str, token: str, ttl: float, holder: Holder, waited: Busy | None = None
    ) -> Grant | Busy:
        self.recorder.calls.append(("acquire", token, waited))
        return self.recorder.answered(token, super().acquire(name, token, ttl, holder))

    def wait_for_release(self, name: str, timeout: float, busy: Busy | None = None) -> None:
        self.recorder.calls.append(("wait", "", busy))
        super().wait_for_release(name, min(timeout, 0.01), busy)


def _check(recorder: _Recorder) -> None:
    calls = recorder.calls
    waiter_token = next(token for step, token, _ in calls if step == "acquire"
                        and any(s == "answer" and t == token and isinstance(o, Busy)
                                for s, t, o in calls))
    steps = [(step, handed) for step, token, handed in calls if token in (waiter_token, "")]
    # acquire(None) -> Busy b1 -> wait(b1) -> acquire(b1) -> Busy b2 -> wait(b2) -> ... -> Grant
    assert steps[0] == ("acquire", None)
    last_busy = None
    for step, handed in steps[1:]:
        if step == "answer":
            last_busy = handed if isinstance(handed, Busy) else None
        else:
            assert handed is last_busy, (step, handed, last_busy)
    assert len(recorder.answers) >= 2  # it waited more than once
    assert isinstance(steps[-1][1], Grant)
    # The next attempt of the same handle starts without any earlier attempt's state.
    later = [handed for step, token, handed in calls if step == "acquire"
             and token not in (waiter_token,)]
    assert later[-1] is None


def test_sync_attempt_hands_each_busy_to_its_wait_and_next_acquire() -> None:
    recorder = Recording.recorder = _Recorder()
    with tenure.Locks(Recording(MemoryStore())) as locks:
        holder = locks.lock("contract", ttl=30)
        assert holder.acquire()
        got: list[bool] = []
        waiter = locks.lock("contract", ttl=30)
        thread = threading.Thread(target=lambda: got.append(waiter.acquire(timeout=5)))
        thread.start()
        while len(recorder.answers) < 3:
            threading.Event().wait(0.005)
        holder.release()
        thread.join(5)
        assert got == [True]
        waiter.release()
        assert waiter.acquire(blocking=False)
        waiter.release()
    _check(recorder)


def test_asyncio_attempt_hands_each_busy_to_its_wait_and_next_acquire() -> None:
    recorder = AsyncRecording.recorder = _Recorder()

    async def main() -> None:
        async with tenure.AsyncLocks(AsyncRecording(MemoryStore())) as locks:
            holder = locks.lock("contract", ttl=30)
            assert await holder.acquire()
            waiter = locks.lock("contract", ttl=30)
            task = asyncio.create_task(waiter.acquire(timeout=5))
            while len(recorder.answers) < 3:
                await asyncio.sleep(0.005)
            await holder.release()
            assert await task
            await waiter.release()
            assert await waiter.acquire(blocking=False)
            await waiter.release()

    asyncio.run(main())
    _check(recorder)
