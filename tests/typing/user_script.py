"""A user's script, checked by ``mypy --strict`` (pyproject.toml lists tests/typing in
[tool.mypy] files), never run: the public API must type-check as the docs use it."""

from __future__ import annotations

from typing import assert_type

import tenure


def serve(term: int) -> None:
    """What a leader hands its term to (a FenceGuard, a log line)."""


def lead(locks: tenure.Locks) -> None:
    leadership = locks.election("scheduler", ttl=10.0).campaign(value="host-a:8080")
    # A won leadership always has a term: no None to narrow away.
    assert_type(leadership.term, int)
    serve(leadership.term)
    leadership.resign()


async def lead_async(locks: tenure.AsyncLocks) -> None:
    leadership = await locks.election("scheduler", ttl=10.0).campaign(value="host-a:8080")
    assert_type(leadership.term, int)
    serve(leadership.term)
    await leadership.resign()


def as_builtin(exc: tenure.LockTimeout) -> TimeoutError:
    # tenure.LockTimeout is a TimeoutError, so ``except TimeoutError`` catches it.
    return exc
