"""Commands on a Redis Cluster (``AsyncClustered``): redis-py's cluster client routes each
script to the node owning the lock's hash tag; a waiter's BLPOP (and a lock waiter's acquire
pipelined behind it) goes to that node on a connection of our own (see
``AsyncClustered.block``).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any, cast

from redis.asyncio import RedisCluster
from redis.asyncio.cluster import ClusterNode
from redis.asyncio.retry import Retry
from redis.crc import key_slot
from redis.exceptions import (
    ConnectionError as RedisConnectionError,
)
from redis.exceptions import NoScriptError, ResponseError

from tenure._concurrency.cancellation import (
    async_cancel_requests,
    async_raise_lost_cancellation,
)
from tenure._concurrency.setup_time import SetupTime
from tenure.backends.redis._async.direct import (
    SCAN_COUNT,
    AsyncClusterClient,
    AsyncDirect,
    ScriptArgs,
    ScriptCall,
    pool_for,
)
from tenure.backends.redis._config import RedisSettings
from tenure.backends.redis._scripts import Script

__all__ = ["AsyncClustered"]


class AsyncClustered:
    """Commands through redis-py's cluster client, which routes by each key's slot."""

    def __init__(self, settings: RedisSettings, retry: Retry) -> None:
        self._settings = settings
        self._retry = retry
        self._client: AsyncClusterClient | None = None
        self._blocking: dict[tuple[str, int], AsyncDirect] = {}
        self._mapped = False
        self._mutex = threading.Lock()
        self._closed = False
        self.setup = SetupTime()
        """The first contact (slot map, a connection to each master) when it completed, and
        the set-ups of the blocking connections: see SetupTime."""

    def _cluster(self) -> AsyncClusterClient:
        # Built at first use: building the threads flavour's client already connects. Not
        # under the mutex: closing takes it, and must not wait for a hung first contact.
        with self._mutex:
            if self._closed:
                raise RedisConnectionError("the tenure client is closed")
            if self._client is not None:
                return self._client
        node_type: Any = ClusterNode  # redis-py's threads flavour is untyped here
        nodes = [node_type(host, port) for host, port in self._settings.addresses]
        with self.setup.measure():
            built = cast(
                AsyncClusterClient,
                RedisCluster(
                    startup_nodes=nodes,
                    retry=self._retry,
                    **self._settings.connection_kwargs(),
                ),
            )
        with self._mutex:
            if self._closed:
                # Closed meanwhile: the client is dropped (its sockets close with it).
                raise RedisConnectionError("the tenure client is closed")
            if self._client is None:
                self._client = built
            # Another caller's first contact won the race: this one is dropped likewise.
            return self._client

    async def _ready(self) -> AsyncClusterClient:
        """The cluster client, past its first contact: the slot map read, then a connection
        made to each master (a PING), each step measured on its own, so that a slow but
        answering cluster earns its time step by step (see SetupTime)."""
        client = self._cluster()
        if not self._mapped:
            with self.setup.measure():
                await client.execute_command("PING")  # the first command loads the slot map
            for node in client.get_primaries():
                with self.setup.measure():
                    await client.execute_command("PING", target_nodes=node)
            self._mapped = True
        return client

    async def execute(self, *args: Any) -> Any:
        cancels = async_cancel_requests()
        client = await self._ready()
        result = await client.execute_command(*args)
        async_raise_lost_cancellation(cancels)  # see tenure._concurrency.cancellation
        return result

    async def script(self, script: Script, keys: Sequence[str], args: Sequence[Any]) -> Any:
        try:
            return await self.execute("EVALSHA", script.sha, len(keys), *keys, *args)
        except NoScriptError:
            return await self.execute("EVAL", script.source, len(keys), *keys, *args)

    async def scripts(self, calls: Sequence[ScriptCall]) -> list[Any]:
        return [await self.script(script, keys, args) for script, keys, args in calls]

    async def wait(
        self, wake_key: str, seconds: float, keys: Sequence[str], args: Sequence[Any]
    ) -> Any:
        """As ``AsyncDirect.wait``, on the master owning the lock's slot through a connection
        of our own (see ``block``). A slot that moved meanwhile answers MOVED: the wait ends
        with no outcome (a spurious wake-up), and the lock logic's next acquire, through the
        cluster client, refreshes the slot map."""
        direct = await self._direct_for(wake_key)
        try:
            return await direct.wait(wake_key, seconds, keys, args)
        except ResponseError as exc:
            if not str(exc).startswith(("MOVED", "ASK", "TRYAGAIN", "CLUSTERDOWN")):
                raise
            return None

    async def try_then_wait(
        self, wake_keys: Sequence[str], seconds: float, first: ScriptArgs, then: ScriptArgs
    ) -> tuple[Any, Any]:
        """As ``AsyncDirect.try_then_wait``, on the master owning the lock's slot (see
        ``wait``); a slot that moved meanwhile: neither ACQUIRE ran, (None, None)."""
        direct = await self._direct_for(wake_keys[0])
        try:
            return await direct.try_then_wait(wake_keys, seconds, first, then)
        except ResponseError as exc:
            if not str(exc).startswith(("MOVED", "ASK", "TRYAGAIN", "CLUSTERDOWN")):
                raise
            return None, None

    async def _direct_for(self, key: str) -> AsyncDirect:
        """Our own connections to the master owning ``key``'s slot."""
        client = await self._ready()
        node = client.get_node_from_key(key)
        address = (str(node.host), int(node.port))
        direct = self._blocking.get(address)
        if direct is None:
            direct = self._blocking.setdefault(address, AsyncDirect(pool_for(
                self._settings, self._retry, address
            ), setup=self.setup))
        return direct

    async def block(self, key: str, seconds: float) -> None:
        """BLPOP ``key`` on the master owning its slot, on a connection of our own to that
        node (a free list per node, as on one master): redis-py's cluster client drops
        connections under many concurrent BLPOPs of one slot. A slot that moved meanwhile
        answers MOVED: that ends the wait early (a spurious wake-up, never a lost one), and
        the cluster client's next command refreshes the slot map."""
        direct = await self._direct_for(key)
        try:
            await direct.block(key, seconds)
        except ResponseError as exc:
            if not str(exc).startswith(("MOVED", "ASK", "TRYAGAIN", "CLUSTERDOWN")):
                raise

    def slot(self, key: str) -> int:
        return key_slot(key.encode())

    async def scan(self, pattern: str) -> list[list[bytes]]:
        client = await self._ready()
        pages: list[list[bytes]] = []
        for node in client.get_primaries():
            cursor: Any = 0
            while True:
                cursor, keys = await client.execute_command(
                    "SCAN", cursor, "MATCH", pattern, "COUNT", SCAN_COUNT, "TYPE", "hash",
                    target_nodes=node,
                )
                if isinstance(cursor, dict):  # redis-py keys a cluster's cursors by node
                    (cursor,) = cursor.values()
                pages.append(list(keys))
                if int(cursor) == 0:
                    break
        return pages

    async def aclose(self) -> None:
        with self._mutex:
            self._closed = True
            client, self._client = self._client, None
            blocking, self._blocking = list(self._blocking.values()), {}
        for direct in blocking:
            await direct.aclose()
        if client is not None:
            await client.aclose()
