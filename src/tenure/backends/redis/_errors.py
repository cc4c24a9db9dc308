"""redis-py's errors, translated in one place for both flavours and every topology.

Every driver error raised inside a ``Translated`` block becomes ``BackendError`` naming the
server (without its password), the action and the lock, with the driver's error as its
``__cause__``. Redlock uses the same table for each of its nodes.
"""

from __future__ import annotations

from types import TracebackType

from redis.exceptions import (
    AuthenticationError,
    AuthenticationWrongNumberOfArgsError,
    ChildDeadlockedError,
    NoPermissionError,
    ReadOnlyError,
    RedisClusterException,
    RedisError,
    ResponseError,
)

from tenure._errors import BackendError

__all__ = ["DRIVER_ERRORS", "MISCONFIGURED", "Translated", "misconfigured"]

DRIVER_ERRORS = (RedisError, RedisClusterException, ChildDeadlockedError, OSError)
MISCONFIGURED = (
    AuthenticationError,  # WRONGPASS, NOAUTH, invalid password
    AuthenticationWrongNumberOfArgsError,  # a password given to a server that has none
    NoPermissionError,  # NOPERM: the ACL user may not run the scripts
    ReadOnlyError,  # READONLY: a replica, where a master was meant
)
"""Driver errors that say the server answered and refuses us, as it will every time: a
configuration error, never "the server is down" (Redlock must not count such a node as one
that did not answer, and go on without its fault tolerance)."""


def misconfigured(error: BaseException) -> bool:
    """Whether ``error`` says the server refuses us (``MISCONFIGURED``). Before redis-py 8
    nothing is sent on connect, and a server that wants a password answers the first
    command, when it is longer than a few bytes (an EVALSHA), with ``Protocol error:
    unauthenticated multibulk length``, a plain ResponseError, and closes the connection."""
    return isinstance(error, MISCONFIGURED) or (
        isinstance(error, ResponseError) and "unauthenticated" in str(error)
    )


class Translated:
    """Turns driver errors raised in its ``with`` block into BackendError (a plain class: it
    runs twice per lock cycle, and a generator-based context manager costs more)."""

    __slots__ = ("action", "display", "name")

    def __init__(self, display: str, action: str, name: str | None) -> None:
        self.display = display
        self.action = action
        self.name = name

    def __enter__(self) -> None:
        return None

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if exc is not None and isinstance(exc, DRIVER_ERRORS):
            about = f" of {self.name!r}" if self.name is not None else ""
            detail = str(exc) or type(exc).__name__
            raise BackendError(
                f"Redis {self.display}: {self.action}{about} failed: {detail}"
            ) from exc
