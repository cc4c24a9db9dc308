"""The Redis backend for asyncio: ``redis://``, ``rediss://``, ``unix://``, ``redis+cluster://``
and ``redis+sentinel://`` over redis-py (its hiredis parser when installed). Written once
here; ``scripts/unasync.py`` generates ``_sync`` from it, module by module.

The connection modules, the only code that touches the driver: ``direct`` (one master),
``cluster`` (a Cluster) and ``transport`` (the one to use, from the settings). The store:
``base`` (the state every step shares), ``locks``, ``semaphores`` and ``rwlocks`` (each
kind's steps) and ``backend`` (the verbs, dispatching on the kind); ``attempt``: one acquire
call's tries and waits. Flavour-free code sits beside this package: the key layouts and Lua
scripts (``_scripts``, ``_semaphores``, ``_rwlocks``), the URL forms (``_config``), the
driver-error table (``_errors``) and the waiting budget (``_waiting``).
"""

from tenure.backends.redis._async.store import AsyncRedisBackend
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
