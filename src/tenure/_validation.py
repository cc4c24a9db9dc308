"""Argument checks shared by every entry point, so every backend rejects the same things."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from tenure._errors import InvalidArgument, InvalidArgumentType

__all__ = [
    "MAX_LIMIT",
    "MAX_NAME_BYTES",
    "MAX_TTL",
    "MIN_TTL",
    "validate_callback",
    "validate_hold_at_least",
    "validate_limit",
    "validate_max_renewals",
    "validate_name",
    "validate_timeout",
    "validate_ttl",
]

MAX_NAME_BYTES = 1024
"""Longest lock name, in UTF-8 bytes: every backend stores this many (MySQL keys included)."""
MIN_TTL = 0.01
"""Shortest lease, in seconds: Redis counts milliseconds, and a shorter lease can't be renewed."""
MAX_TTL = 365 * 24 * 3600.0


def validate_name(name: object) -> str:
    """Return ``name`` if it is a usable lock name, else raise naming the problem.

    A name is data, never code: backends pass it as a parameter, so any text is safe; the
    limits here exist so that every backend can store every accepted name as one lock.
    """
    if not isinstance(name, str):
        raise InvalidArgumentType(f"lock name must be a str, not {type(name).__name__}")
    if not name:
        raise InvalidArgument("lock name must not be empty")
    if "\x00" in name:
        # PostgreSQL text and C-string APIs cannot carry NUL; refusing it everywhere keeps
        # every backend's set of names the same.
        raise InvalidArgument("lock name must not contain NUL characters")
    try:
        size = len(name.encode("utf-8"))
    except UnicodeEncodeError as exc:
        raise InvalidArgument(f"lock name is not valid Unicode text: {exc.reason}") from None
    if size > MAX_NAME_BYTES:
        raise InvalidArgument(
            f"lock name is {size} bytes in UTF-8; the limit is {MAX_NAME_BYTES}"
        )
    return name


def _seconds(value: object, what: str) -> float:
    # bool is an int subclass, but ttl=True is always a mistake.
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidArgumentType(f"{what} must be a number of seconds, not {type(value).__name__}")
    seconds = float(value)
    if not math.isfinite(seconds):
        raise InvalidArgument(f"{what} must be finite, not {value!r}")
    return seconds


def validate_ttl(ttl: object, what: str = "ttl") -> float:
    seconds = _seconds(ttl, what)
    if seconds <= 0:
        raise InvalidArgument(f"{what} must be > 0 seconds, not {ttl!r}")
    if seconds < MIN_TTL:
        raise InvalidArgument(f"{what} must be at least {MIN_TTL} s, not {ttl!r}")
    if seconds > MAX_TTL:
        raise InvalidArgument(f"{what} must be at most {MAX_TTL:.0f} s (a year), not {ttl!r}")
    return seconds


def validate_hold_at_least(hold_at_least: object) -> float:
    """Seconds a lock stays held after its grant even when released sooner (0: none; None
    means 0): a finite number >= 0, at most ``MAX_TTL``. It may exceed the ttl: the window
    is what a release leaves behind, the ttl still ends a lease never released
    (``AsyncLocks.lock``)."""
    if hold_at_least is None:
        return 0.0
    seconds = _seconds(hold_at_least, "hold_at_least")
    if seconds < 0:
        raise InvalidArgument(
            f"hold_at_least must be >= 0 seconds (0 or None: no window), not {hold_at_least!r}"
        )
    if seconds > MAX_TTL:
        raise InvalidArgument(
            f"hold_at_least must be at most {MAX_TTL:.0f} s (a year), not {hold_at_least!r}"
        )
    return seconds


def validate_timeout(timeout: object) -> float | None:
    """None means wait forever; otherwise a finite number of seconds >= 0."""
    if timeout is None:
        return None
    seconds = _seconds(timeout, "timeout")
    if seconds < 0:
        raise InvalidArgument(f"timeout must be >= 0 seconds or None, not {timeout!r}")
    return seconds


def validate_max_renewals(max_renewals: object) -> int | None:
    if max_renewals is None:
        return None
    if isinstance(max_renewals, bool) or not isinstance(max_renewals, int):
        raise InvalidArgumentType(
            f"max_renewals must be an int or None, not {type(max_renewals).__name__}"
        )
    if max_renewals < 0:
        raise InvalidArgument(f"max_renewals must be >= 0, not {max_renewals}")
    return max_renewals


def validate_callback(callback: object, what: str) -> Callable[..., Any] | None:
    if callback is not None and not callable(callback):
        raise InvalidArgumentType(f"{what} must be callable or None, not {type(callback).__name__}")
    return callback


MAX_LIMIT = 2**31 - 1
"""A semaphore's largest limit: what every backend's integer column holds."""


def validate_weight(weight: object, limit: int) -> int:
    """A semaphore permit's weight: an int from 1 to the semaphore's ``limit``."""
    if isinstance(weight, bool) or not isinstance(weight, int):
        raise InvalidArgumentType(f"weight must be an int, not {type(weight).__name__}")
    if not 1 <= weight <= limit:
        raise InvalidArgument(
            f"weight must be between 1 and the limit ({limit}), not {weight}: a permit takes "
            "that many of the semaphore's units"
        )
    return weight


def validate_limit(limit: object) -> int:
    """A semaphore's limit: an int from 1 to ``MAX_LIMIT``."""
    if isinstance(limit, bool) or not isinstance(limit, int):
        raise InvalidArgumentType(f"limit must be an int, not {type(limit).__name__}")
    if not 1 <= limit <= MAX_LIMIT:
        raise InvalidArgument(f"limit must be between 1 and {MAX_LIMIT}, not {limit}")
    return limit
