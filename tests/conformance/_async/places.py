"""Waiting for places in a queued primitive's queue (a read-write or fair lock's, a queued
semaphore's), as ``inspect`` counts them: the conformance modules' one wait on it."""

from __future__ import annotations

import time

import tenure
from tests.conformance import async_helpers as helpers

__all__ = ["queued", "until_queued"]


async def queued(locks: tenure.AsyncLocks, name: str, kind: str) -> int:
    """The live places in the queue of ``name``, read as the ``kind`` it is inspected as."""
    info = await locks.inspect(name, kind=kind)
    return 0 if info is None else info.queued


async def until_queued(locks: tenure.AsyncLocks, name: str, kind: str, count: int) -> None:
    """Wait until ``count`` places are in the queue of ``name`` (at most 10 s)."""
    deadline = time.monotonic() + 10
    while await queued(locks, name, kind) < count:
        assert time.monotonic() < deadline, f"{count} waiters never queued"
        await helpers.sleep(0.01)
