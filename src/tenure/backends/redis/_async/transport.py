"""How commands reach Redis: one master (``AsyncDirect``) or a Redis Cluster
(``AsyncClustered``), built from the settings by ``open_transport``.

On one master (redis, rediss, unix, sentinel) commands go straight to redis-py connections
taken from a free list, one at a time per caller: redis-py's own command layer costs several
times the network round trip on a fast link, and the lock's hot path is two round trips.
Blocking waits (BLPOP) take a connection of their own from the same list, so a waiter never
blocks another caller's command. On a Cluster, redis-py's cluster client routes each script
to the node owning the lock's hash tag; a waiter's BLPOP (and a lock waiter's acquire
pipelined behind it) goes to that node on a connection of our own (see
``AsyncClustered.block``).

Scripts go as EVALSHA and are re-sent as EVAL when the server has lost its script cache (a
restart). Connections open at first use; redis-py's own retries are off unless ``retries`` is
given, and socket timeouts are always set, so a dead server is an error within seconds.
"""

from __future__ import annotations

from typing import Any, cast

from redis.asyncio import ConnectionPool, Sentinel
from redis.asyncio.connection import UnixDomainSocketConnection
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from tenure.backends.redis._async.cluster import AsyncClustered
from tenure.backends.redis._async.direct import (
    AsyncClosable,
    AsyncDirect,
    AsyncPool,
    ScriptArgs,
    ScriptCall,
    pool_for,
)
from tenure.backends.redis._config import RedisSettings

__all__ = [
    "AsyncClustered",
    "AsyncDirect",
    "AsyncTransport",
    "ScriptArgs",
    "ScriptCall",
    "open_transport",
]

AsyncTransport = AsyncDirect | AsyncClustered


def open_transport(settings: RedisSettings) -> AsyncTransport:
    """The transport for the settings' topology; nothing is connected yet."""
    retry = Retry(NoBackoff(), settings.retries)
    if settings.topology == "cluster":
        return AsyncClustered(settings, retry)
    if settings.topology == "sentinel":
        sentinel_kwargs = {
            "socket_timeout": settings.socket_timeout,
            "socket_connect_timeout": settings.socket_connect_timeout,
            "retry": Retry(NoBackoff(), settings.retries),
            **settings.sentinel_extra,
        }
        sentinel_type: Any = Sentinel  # untyped in redis-py
        sentinel = sentinel_type(
            list(settings.addresses), sentinel_kwargs=sentinel_kwargs, retry=retry,
            **settings.connection_kwargs(),
        )
        assert settings.service_name is not None
        master = sentinel.master_for(settings.service_name, db=settings.db)
        closables = [cast(AsyncClosable, master)] + [
            cast(AsyncClosable, client) for client in sentinel.sentinels
        ]
        return AsyncDirect(cast(AsyncPool, master.connection_pool), closables)
    if settings.unix_path is not None:
        kwargs = settings.connection_kwargs()
        kwargs.pop("ssl", None)
        return AsyncDirect(cast(AsyncPool, ConnectionPool(
            connection_class=UnixDomainSocketConnection,
            path=settings.unix_path,
            db=settings.db,
            retry=retry,
            **kwargs,
        )))
    (address,) = settings.addresses
    return AsyncDirect(pool_for(settings, retry, address))
