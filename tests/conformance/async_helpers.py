"""The asyncio side of the conformance suite's concurrency edge (see sync_helpers)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from tests.conformance.sync_helpers import hog_the_holder

__all__ = ["gather", "hog_the_holder", "sleep", "wait_event"]


async def gather(*functions: Callable[[], Awaitable[Any]]) -> list[Any]:
    """Run each function concurrently (one task each); return their results in order."""
    return list(await asyncio.gather(*(function() for function in functions)))


async def sleep(seconds: float) -> None:
    await asyncio.sleep(seconds)


def wait_event(event: asyncio.Event, timeout: float) -> Awaitable[bool]:
    async def waiting() -> bool:
        try:
            await asyncio.wait_for(event.wait(), timeout)
        except TimeoutError:
            return False
        return True

    return waiting()
