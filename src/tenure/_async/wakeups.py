"""Waiting for an in-process release notice (see ``tenure._waiters``)."""

from __future__ import annotations

from tenure._concurrency import async_io as io
from tenure._waiters import Waiters

__all__ = ["wait_for_notice"]


async def wait_for_notice(waiters: Waiters, name: str, timeout: float) -> None:
    """Return at the next release of ``name`` in this process, or after ``timeout``."""
    signal = io.Signal()
    with waiters.waiting(name, signal):
        await signal.wait(timeout)
