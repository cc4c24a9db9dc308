"""From a URL to a client: the backend module the URL's scheme names, its store, checked to
be one, and the client over it. Written for asyncio; ``scripts/unasync.py`` generates the
threads flavour (``connect``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from tenure._async.client import DEFAULT_TTL, AsyncLocks
from tenure._async.store import AsyncStore
from tenure._errors import ConfigurationError
from tenure._urls import load_backend_module, resolve_url, scrub_error, url_secrets

__all__ = ["connect_async", "store_class"]


def connect_async(
    url: str | None = None,
    *,
    default_ttl: float = DEFAULT_TTL,
    clock: Callable[[], float] = time.monotonic,
    **options: Any,
) -> AsyncLocks:
    """A client for the backend named by ``url``.

    ``url`` defaults to ``$TENURE_URL``, else the per-user SQLite file (see the docs for its
    path). ``options`` go to the backend (each backend documents its own); an unknown one
    raises ConfigurationError. ``clock`` is the client's monotonic clock, injectable for tests.
    """
    resolved = resolve_url(url)
    module = load_backend_module(resolved, "_async")
    try:
        store = store_class(module.BACKEND).from_url(resolved, **options)
    except Exception as exc:
        # Whatever a backend's parsing quoted from its driver or parser, no secret of the
        # URL or the options is printed (a libpq message quotes a password as written).
        scrub_error(exc, url_secrets(resolved, options))
        raise
    return AsyncLocks(store, default_ttl=default_ttl, clock=clock)


def store_class(backend: object) -> type[AsyncStore]:
    """A backend module's ``BACKEND``, checked to be a store (a third-party module that
    names something else fails here, saying so, not at its first acquire)."""
    if isinstance(backend, type) and issubclass(backend, AsyncStore):
        return backend
    raise ConfigurationError(f"not a tenure store: {backend!r} (a backend module's BACKEND "
                             "must subclass tenure's AsyncStore / Store)")
