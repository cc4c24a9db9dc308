"""Cancellations that Python 3.11 loses inside asyncio drivers, found and raised again.

``asyncio.wait_for`` on Python 3.11 returns the awaited result and drops the caller's
cancellation when both happen in the same event-loop turn (python/cpython#86296, fixed in
3.12). A driver that sends its commands through ``wait_for`` (redis-py's asyncio connections
do whenever a socket timeout is set, and tenure always sets one) lets a task cancelled while a
command goes out carry on as if nothing happened: an ``asyncio.timeout`` around ``acquire``
would never fire. Around such a call, count the task's pending cancel requests first
(``async_cancel_requests``) and raise one that arrived and did not surface
(``async_raise_lost_cancellation``).

The threads flavour's names (what ``scripts/unasync.py`` turns the ``async_`` names into) do
nothing, so code written once for asyncio calls them unchanged.
"""

from __future__ import annotations

import asyncio

__all__ = [
    "async_cancel_requests",
    "async_raise_lost_cancellation",
    "cancel_requests",
    "raise_lost_cancellation",
]


def async_cancel_requests() -> int:
    task = asyncio.current_task()
    return 0 if task is None else task.cancelling()


def async_raise_lost_cancellation(before: int) -> None:
    """Raise CancelledError if the task was cancelled since ``before`` was counted and the
    cancellation did not arrive as an exception."""
    if async_cancel_requests() > before:
        raise asyncio.CancelledError


def cancel_requests() -> int:
    return 0


def raise_lost_cancellation(before: int) -> None:
    return None
