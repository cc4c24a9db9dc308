"""The lease logic's side of the attempt contract: an acquire granted by the store's quick
try makes no attempt; one that is not makes one attempt and drives only it (tries, and
between two refused tries a wait handed the refusal just received) until the grant; a new
acquire call makes a new attempt. Checked in both flavours, and under asyncio across the
task the lease logic runs each try in."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import tenure
from tenure._async.store import AsyncAttempt
from tenure._sync.store import Attempt
from tenure._types import Busy, Grant, Holder, LeaseSpec
from tenure.backends.memory._async import AsyncMemoryAttempt, AsyncMemoryBackend
from tenure.backends.memory._server import MemoryServer
from tenure.backends.memory._sync import MemoryAttempt, MemoryBackend


class _Recorder:
    def __init__(self) -> None:
        self.calls: list[tuple[str, object, Any]] = []  # (step, attempt, outcome or Busy)
        self.answers: list[Busy] = []

    def answered(self, attempt: object, outcome: Grant | Busy) -> Grant | Busy:
        if isinstance(outcome, Busy):
            self.answers.append(outcome)
        self.calls.append(("answer", attempt, outcome))
        return outcome


class AsyncRecordingAttempt(AsyncMemoryAttempt):
    async def try_once(self) -> Grant | Busy:
        return AsyncRecording.recorder.answered(self, await super().try_once())

    async def wait(self, timeout: float, busy: Busy) -> None:
        AsyncRecording.recorder.calls.append(("wait", self, busy))
        await super().wait(min(timeout, 0.01), busy)


class AsyncRecording(AsyncMemoryBackend):
    recorder = _Recorder()

    def attempt(
        self, name: str, spec: LeaseSpec, token: str, ttl: float, holder: Holder
    ) -> AsyncAttempt:
        return AsyncRecordingAttempt(self, name, spec, token=token, ttl=ttl, holder=holder)


class RecordingAttempt(MemoryAttempt):
    def try_once(self) -> Grant | Busy:
        return Recording.recorder.answered(self, super().try_once())

    def wait(self, timeout: float, busy: Busy) -> None:
        Recording.recorder.calls.append(("wait", self, busy))
        super().wait(min(timeout, 0.01), busy)


class Recording(MemoryBackend):
    recorder = _Recorder()

    def attempt(
        self, name: str, spec: LeaseSpec, token: str, ttl: float, holder: Holder
    ) -> Attempt:
        return RecordingAttempt(self, name, spec, token=token, ttl=ttl, holder=holder)


def _check(recorder: _Recorder) -> None:
    calls = recorder.calls
    waiter = next(attempt for step, attempt, outcome in calls
                  if step == "answer" and isinstance(outcome, Busy))
    # The holder's acquire, granted by the quick try, made no attempt: the waiter's is first.
    assert calls[0][1] is waiter
    steps = [(step, handed) for step, attempt, handed in calls if attempt is waiter]
    # try -> Busy b1 -> wait(b1) -> try -> Busy b2 -> wait(b2) -> ... -> try -> Grant
    assert steps[0][0] == "answer"
    last_busy = None
    for step, handed in steps:
        if step == "answer":
            assert last_busy is None, "two tries without a wait between them"
            last_busy = handed if isinstance(handed, Busy) else None
        else:
            assert handed is last_busy, (step, handed, last_busy)
            last_busy = None
    assert len(recorder.answers) >= 2  # it waited more than once
    assert isinstance(steps[-1][1], Grant)
    # The next acquire of the same handle, refused at its quick try, makes an attempt of its
    # own (and the holder's second acquire, granted there, none).
    last = max(index for index, (_, attempt, _) in enumerate(calls) if attempt is waiter)
    after = calls[last + 1:]
    assert [(step, type(outcome)) for step, _, outcome in after] == [("answer", Busy)]
    assert after[0][1] is not waiter


def test_sync_acquire_drives_one_attempt_handing_each_refusal_to_its_wait() -> None:
    recorder = Recording.recorder = _Recorder()
    with tenure.Locks(Recording(MemoryServer())) as locks:
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
        assert holder.acquire(blocking=False)
        assert not waiter.acquire(blocking=False)
        holder.release()
    _check(recorder)


def test_asyncio_acquire_drives_one_attempt_handing_each_refusal_to_its_wait() -> None:
    recorder = AsyncRecording.recorder = _Recorder()

    async def main() -> None:
        async with tenure.AsyncLocks(AsyncRecording(MemoryServer())) as locks:
            holder = locks.lock("contract", ttl=30)
            assert await holder.acquire()
            waiter = locks.lock("contract", ttl=30)
            task = asyncio.create_task(waiter.acquire(timeout=5))
            while len(recorder.answers) < 3:
                await asyncio.sleep(0.005)
            await holder.release()
            assert await task
            await waiter.release()
            assert await holder.acquire(blocking=False)
            assert not await waiter.acquire(blocking=False)
            await holder.release()

    asyncio.run(main())
    _check(recorder)
