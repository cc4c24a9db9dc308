"""redis-py's errors, named in one place for both flavours and every topology.

``DRIVER_ERRORS`` is the store's ``driver_errors``: the store base (``tenure._async.store``)
raises any of them from a verb or an attempt step as the one ``BackendError`` form, naming
the server (without its password), the action and the lock, with the driver's error as its
``__cause__``. Redlock uses the same table for each of its nodes.
A script's refusal of a name whose key another name's record holds is ``digest_collision``.
"""

from __future__ import annotations

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

from tenure._errors import StoreFault

__all__ = ["DRIVER_ERRORS", "MISCONFIGURED", "digest_collision", "misconfigured"]

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



def digest_collision(record: str, name: str, stored: object) -> StoreFault:
    """The failure of an acquire of ``name`` whose key (a digest of the name) holds the
    ``record`` ("lock", "semaphore", "read-write lock") of the name ``stored`` (the script's
    answer): the base raises it in the one BackendError form."""
    other = stored.decode("utf-8", "replace") if isinstance(stored, bytes) else str(stored)
    return StoreFault(
        f"the key of {record} {name!r} already belongs to {record} {other!r} (a SHA-256 "
        "digest collision); use another name"
    )
