"""kazoo's exceptions that mean the store failed: every store verb and attempt step raises
them as the one ``BackendError`` form (``tenure._async.store.failure``), this exception as
its cause. The node answers a step decides on (no such node, bad version, node exists, not
empty: ``_async/session.DECIDING``) are kazoo exceptions too, caught by the steps that expect
them; one that reaches a verb's edge is a failure like any other."""

from __future__ import annotations

from kazoo.exceptions import KazooException
from kazoo.handlers.threading import KazooTimeoutError

__all__ = ["DRIVER_ERRORS"]

DRIVER_ERRORS: tuple[type[BaseException], ...] = (KazooException, KazooTimeoutError, OSError)
"""kazoo's errors (its connect timeout is not a ``KazooException``), and ``OSError``: a socket
error, a ``TimeoutError`` when no reply came within the ``timeout`` option
(``_async/session.py``), a ``ConnectionError`` when the session was interrupted while a
grant was being made."""
