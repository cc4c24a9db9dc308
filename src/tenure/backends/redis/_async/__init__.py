"""The Redis backend for asyncio: ``redis://``, ``rediss://``, ``unix://``, ``redis+cluster://``
and ``redis+sentinel://`` over redis-py (its hiredis parser when installed). Written once
here; ``scripts/unasync.py`` generates ``_sync`` from it, module by module.

``transport``: how commands reach one master or a Cluster; ``base``: the state every step
shares; ``locks``: the mutex's steps and waits; ``semaphores``: the permit steps and waits;
``backend``: the class that joins them. Flavour-free code sits beside this package: the key
layouts and Lua scripts (``_scripts``, ``_semaphores``), the URL forms (``_config``), the
error table (``_errors``) and the waiting budget and state (``_waiting``).
"""

from tenure.backends.redis._async.backend import AsyncRedisBackend
from tenure.backends.redis._async.transport import (
    AsyncClustered,
    AsyncDirect,
    AsyncTransport,
    open_transport,
)
from tenure.backends.redis._errors import DRIVER_ERRORS

__all__ = [
    "BACKEND",
    "DRIVER_ERRORS",
    "AsyncClustered",
    "AsyncDirect",
    "AsyncRedisBackend",
    "AsyncTransport",
    "open_transport",
]

_transport = open_transport
"""The name Redlock imports (``tenure.backends.redlock``)."""

BACKEND = AsyncRedisBackend
"""Redis: one master (plain, TLS, unix socket, or found through Sentinel) or a Redis Cluster.
Leases are keys with PEXPIRE; fences a counter kept beside them; waiters woken by releases."""
