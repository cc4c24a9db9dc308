"""Driver calls that run to completion even when their asyncio caller is cancelled.

Why: when an acquire is cancelled, the lock logic undoes it with a release under the same
token. If the cancellation cut the ``find_one_and_update`` off after its request was sent,
the server may still apply it *after* the undo has run on another connection, leaving a lock
nobody will release before its TTL. Letting the call finish first (as ``run_blocking`` does
for thread-backed backends) orders the undo after it. It also keeps PyMongo's connections out
of its cancelled-mid-I/O paths.

``async_complete`` is written in the asyncio flavour; ``scripts/unasync.py`` turns the call into
``complete(...)``, which receives the already computed result in the threads flavour.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable
from typing import TypeVar

__all__ = ["async_complete", "complete"]

T = TypeVar("T")


async def async_complete(operation: Awaitable[T]) -> T:
    """Await ``operation``; if the caller is cancelled meanwhile, wait for it to finish (its
    result or error is dropped) and then let the cancellation through."""
    task = asyncio.ensure_future(operation)
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        while not task.done():
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.shield(task)
        if not task.cancelled():
            task.exception()  # retrieved, so asyncio does not log it as unhandled
        raise


def complete(result: T) -> T:
    """The threads flavour: the call already ran to completion."""
    return result
