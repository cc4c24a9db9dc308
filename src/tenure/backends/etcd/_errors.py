"""etcd's failures, as the store's base (``tenure._async.store``) translates them: every
verb and attempt step that raises one of ``DRIVER_ERRORS`` leaves as the one BackendError
form (the URL, the action, the lock), with the error below as its cause."""

from __future__ import annotations

import httpx

__all__ = ["DRIVER_ERRORS", "EtcdError", "NotFound"]


class EtcdError(Exception):
    """The cluster failed a request: no member answered within the deadline, TLS or a login
    was refused, or a member answered an error (its gRPC code and message)."""


class NotFound(EtcdError):
    """etcd answered "not found" (gRPC code 5), e.g. a lease that expired or was revoked.
    The steps expect it where it means "gone"; anywhere else it is a failure."""


DRIVER_ERRORS: tuple[type[BaseException], ...] = (EtcdError, httpx.HTTPError, OSError)
"""What the gateway raises (its own errors; httpx's and the socket's never leave it, but a
bug that let one through still reads as the store's failure)."""
