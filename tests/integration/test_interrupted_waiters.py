"""A waiter that is interrupted (asyncio cancellation, Ctrl-C) leaves the queue before
``acquire`` raises, as docs/api.md says, on every backend that queues fair locks: the caller's
next look at the queue (``inspect().queued``) no longer counts it. Before, the place was
left by a background clean-up, and an inspect right after the exception found it in about
half the runs on Redis."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import textwrap
import time

import pytest

import tenure
from tenure._async.rwlock import QUEUE_TTL
from tests.backends import NAMES
from tests.timing import scaled

PRIMITIVE = "fair"

# Waits for the fair lock NAME in its main thread; on Ctrl-C (SIGINT) prints the queue
# length it sees right after acquire raised, and the seconds until the queue was empty.
CHILD = textwrap.dedent("""
    import sys
    import time
    import tenure
    url, name = sys.argv[1], sys.argv[2]

    def queued(locks):
        info = locks.inspect(name, kind="rwlock")
        return 0 if info is None else info.queued

    with tenure.connect(url) as locks:
        lock = locks.lock(name, ttl=30, fair=True)
        print("waiting", flush=True)
        try:
            lock.acquire(timeout=60)
            print("acquired", flush=True)
        except KeyboardInterrupt:
            raised = time.monotonic()
            at_once = queued(locks)
            while queued(locks) and time.monotonic() - raised < 30:
                time.sleep(0.02)
            print("queued", at_once, time.monotonic() - raised, flush=True)
""")


async def _queued(locks: tenure.AsyncLocks, name: str) -> int:
    info = await locks.inspect(name, kind="rwlock")
    return 0 if info is None else info.queued


async def _until_queued(locks: tenure.AsyncLocks, name: str, count: int) -> None:
    deadline = time.monotonic() + 10
    while await _queued(locks, name) < count:
        assert time.monotonic() < deadline, f"{count} waiters never queued"
        await asyncio.sleep(0.01)


async def test_a_cancelled_waiter_has_left_when_acquire_raises(
    backend_url: str, name: str
) -> None:
    async with tenure.connect_async(backend_url) as locks:
        holder = locks.lock(name, ttl=30, fair=True)
        assert await holder.acquire()
        for round_ in range(6):
            waiter = asyncio.create_task(
                locks.lock(name, ttl=30, fair=True).acquire(timeout=60)
            )
            await _until_queued(locks, name, 1)
            await asyncio.sleep(0.02 * (round_ % 3))  # in its wait, or between two
            waiter.cancel()
            with pytest.raises(asyncio.CancelledError):
                await waiter
            assert await _queued(locks, name) == 0, f"round {round_}: the place stayed"
        await holder.release()


def test_a_waiter_stopped_by_ctrl_c_has_left_when_acquire_raises(
    backend_url: str, name: str
) -> None:
    with tenure.connect(backend_url) as locks:
        holder = locks.lock(name, ttl=60, fair=True)
        assert holder.acquire()
        late = []
        for round_ in range(6):
            with subprocess.Popen(
                [sys.executable, "-c", CHILD, backend_url, name],
                stdout=subprocess.PIPE, text=True,
            ) as child:
                try:
                    assert child.stdout is not None
                    assert child.stdout.readline().strip() == "waiting"
                    deadline = time.monotonic() + 20
                    while (info := locks.inspect(name, kind="rwlock")) is None or (
                        info.queued < 1
                    ):
                        assert time.monotonic() < deadline, "the child never queued"
                        time.sleep(0.01)
                    time.sleep(0.02 * (round_ % 3))  # in its wait, or between two
                    child.send_signal(signal.SIGINT)
                    said = child.stdout.read().strip()
                    assert child.wait(timeout=30) == 0
                finally:
                    if child.poll() is None:
                        child.kill()
            at_once, gone_after = said.removeprefix("queued ").split()
            # As acquire raises, the place is gone in all rounds but (at most) one: a Ctrl-C
            # that lands between two steps of an attempt, where no handler runs yet, can
            # rarely leave it that moment longer (before the fix it stayed in about half the
            # rounds). Then its clean-up runs in the background, and at worst the place
            # lapses with its queue lease: never later than that.
            bound = QUEUE_TTL + locks.capabilities.lease_overrun + scaled(1.0)
            assert float(gone_after) <= bound, f"round {round_}: {said!r} (bound {bound} s)"
            if at_once != "0":
                late.append(round_)
        assert len(late) <= 1, f"the place outlived acquire in rounds {late}"
        holder.release()


# A child process cannot reach a memory:// store (one per process): not generated there.
test_a_waiter_stopped_by_ctrl_c_has_left_when_acquire_raises.backends = [  # type: ignore[attr-defined]
    backend for backend in NAMES if backend != "memory"
]
