"""Every error tenure raises, under one root.

    TenureError
    ├── LockError                  carries the lock's ``name``
    │   ├── LockTimeout            not acquired within the timeout (context manager, decorator);
    │   │                          also a TimeoutError, so ``except TimeoutError`` catches it
    │   ├── LockLost               the lease is gone: expired, broken, or taken by another owner
    │   └── NotOwned               this handle (or this thread / task) does not hold the lock
    ├── BackendError               the server is unreachable or failing; the driver's error is
    │                              the ``__cause__`` (a TimeoutError when the caller's deadline
    │                              ended the wait before the driver did)
    ├── ConfigurationError         bad URL, unknown option, missing optional dependency
    ├── InvalidArgument            also a ValueError: empty name, ttl <= 0, negative timeout...
    └── InvalidArgumentType        also a TypeError: a name that is not a str, a ttl that is a str

Driver errors are translated at the backend boundary with ``raise BackendError(...) from exc``;
no driver exception reaches a caller untranslated. A store that finds a failure itself (a
closed client, a missing privilege) raises ``StoreFault``, which never reaches a caller
either: the store base translates it as it does a driver's error.
"""

from __future__ import annotations

__all__ = [
    "BackendError",
    "ConfigurationError",
    "InvalidArgument",
    "InvalidArgumentType",
    "LockError",
    "LockLost",
    "LockTimeout",
    "NotOwned",
    "StoreFault",
    "TenureError",
    "limit_mismatch",
]


class TenureError(Exception):
    """The root of every error tenure raises."""


class LockError(TenureError):
    """An error about one lock; ``name`` says which."""

    def __init__(self, name: str, message: str) -> None:
        super().__init__(f"{message} (lock {name!r})")
        self.name = name


class LockTimeout(LockError, TimeoutError):
    """The lock was not acquired within ``timeout`` seconds.

    Also the builtin ``TimeoutError`` (as filelock's ``Timeout`` is), so code written
    ``except TimeoutError`` catches it; ``except tenure.TenureError`` does too.
    """

    def __init__(self, name: str, timeout: float | None) -> None:
        super().__init__(name, f"not acquired within {timeout} s")
        self.timeout = timeout


class LockLost(LockError):
    """The lease is gone: it expired, was broken by an operator, or another owner holds it now.

    Whatever the critical section did after the loss was not protected by the lock; only a
    fence check by the protected resource can reject such writes.
    """


class NotOwned(LockError):
    """Release, extend or check on a lock this handle (or this owner) does not hold."""


class BackendError(TenureError):
    """The lock server is unreachable, timed out, or answered with an error.

    The driver's own exception is chained as ``__cause__``; when the caller's deadline ended
    the wait before the driver gave up, the driver's last error if the backend knows it,
    else a TimeoutError saying that no answer came. There is always a cause.
    """


class StoreFault(Exception):
    """A failure a store finds itself rather than hears from its driver (its client closed,
    a privilege missing, a key another name's record holds). Not a ``TenureError``: the
    store base (``tenure._async.store``) raises it from a verb or an attempt step as the one
    ``BackendError`` form, naming the backend, the action and the lock, its text the
    cause."""


class ConfigurationError(TenureError):
    """A bad URL, an unknown or bad option, or a missing optional dependency."""


class InvalidArgument(TenureError, ValueError):
    """An argument has the right type but a bad value (empty name, ttl <= 0, ...)."""


class InvalidArgumentType(TenureError, TypeError):
    """An argument has the wrong type (a name that is not a str, ...)."""


def limit_mismatch(name: str, stored: int, requested: int) -> ConfigurationError:
    """The error a semaphore acquire raises when live permits were taken with another limit."""
    return ConfigurationError(
        f"semaphore {name!r} has live permits taken with limit={stored}; this handle asks for "
        f"limit={requested} (every holder of a name must use one limit; a new limit applies "
        "once no permit is live)"
    )
