"""Commands on one Redis server (``AsyncDirect``): straight on redis-py connections taken
from a free list, one at a time per caller. redis-py's own command layer costs several times
the network round trip on a fast link, and the lock's hot path is two round trips. Blocking
waits (BLPOP) take a connection of their own from the same list, so a waiter never blocks
another caller's command. Scripts go as EVALSHA and are re-sent as EVAL when the server has
lost its script cache (a restart).
"""

from __future__ import annotations

import collections
import os
from collections.abc import Callable, Sequence
from typing import Any, Protocol, cast

from redis.asyncio import ConnectionPool
from redis.asyncio.connection import Connection, SSLConnection
from redis.asyncio.retry import Retry
from redis.exceptions import (
    ConnectionError as RedisConnectionError,
)
from redis.exceptions import NoScriptError, ResponseError

from tenure._concurrency.cancellation import (
    async_cancel_requests,
    async_raise_lost_cancellation,
)
from tenure._concurrency.setup_time import SetupTime
from tenure.backends.redis._config import RedisSettings
from tenure.backends.redis._errors import DRIVER_ERRORS
from tenure.backends.redis._scripts import ACQUIRE, Script

__all__ = ["SCAN_COUNT", "AsyncClosable", "AsyncClusterClient", "AsyncDirect", "AsyncPool",
           "ScriptArgs", "ScriptCall", "pool_for"]

SCAN_COUNT = 500

ScriptCall = tuple[Script, Sequence[str], Sequence[Any]]
ScriptArgs = tuple[Sequence[str], Sequence[Any]]
"""An ACQUIRE's keys and arguments."""

pack_command: Callable[[tuple[Any, ...]], bytes] | None
try:  # hiredis packs a command several times faster than redis-py's Python wrapper around it
    from hiredis import pack_command
except ImportError:  # pragma: no cover - hiredis is optional
    pack_command = None


# ---- what we call on redis-py objects (typed here: some of redis-py's are not) -------------

# Two connection methods were renamed or added in redis-py 8; the 5.x-7.x line (which kombu
# 5.6 and older, Celery's Redis transport, require) has them under their old names: the
# asyncio connection's can_read is can_read_destructive (same check: data waiting, or the
# server closed it), and the threads' connection has no is_connected (its socket is what it
# means). Resolved once here; tests/integration/test_redis_driver_lines.py runs them.
CAN_READ = "can_read" if hasattr(Connection, "can_read") else "can_read_destructive"
HAS_IS_CONNECTED = hasattr(Connection, "is_connected")


# disconnect(nowait) is passed by position: the threads' connection before redis-py 7 takes
# only ``*args`` (and has nothing to wait for), the asyncio one takes ``nowait`` first.


def is_connected(wire: AsyncWire) -> bool:
    if HAS_IS_CONNECTED:
        return wire.is_connected
    return getattr(wire, "_sock", None) is not None


class AsyncWire(Protocol):
    """One redis-py connection, used directly."""

    def pack_command(self, *args: Any) -> Any: ...
    async def send_packed_command(self, command: Any, check_health: bool = True) -> None: ...
    async def read_response(self) -> Any: ...
    def pack_commands(self, commands: Any) -> Any: ...
    async def disconnect(self, nowait: bool = False) -> None: ...
    async def can_read(self) -> bool: ...
    async def connect(self) -> None: ...
    @property
    def is_connected(self) -> bool: ...


class AsyncPool(Protocol):
    async def get_connection(self) -> Any: ...
    async def disconnect(self) -> None: ...


class AsyncClusterClient(Protocol):
    async def execute_command(self, *args: Any, **options: Any) -> Any: ...
    def get_primaries(self) -> list[Any]: ...
    def get_node_from_key(self, key: str, replica: bool = False) -> Any: ...
    async def aclose(self) -> None: ...


class AsyncClosable(Protocol):
    async def aclose(self) -> None: ...


class AsyncDirect:
    """Commands straight on redis-py connections of one pool (one master)."""

    def __init__(
        self, pool: AsyncPool, closables: Sequence[AsyncClosable] = (),
        setup: SetupTime | None = None,
    ) -> None:
        self._pool = pool
        self._closables = closables
        self._idle: collections.deque[AsyncWire] = collections.deque()
        self._pid = os.getpid()
        self._closed = False
        self.setup = SetupTime() if setup is None else setup
        """New connections' set-ups (socket, handshake) the server completed: see SetupTime.
        Reconnects of idle connections (see _reconnect) are counted too."""

    async def _take(self) -> AsyncWire:
        if self._closed:
            # A background undo may still run after close(): it must not open a connection.
            raise RedisConnectionError("the tenure client is closed")
        if self._pid != os.getpid():
            # A forked child must not touch its parent's sockets: forget them, unclosed.
            self._idle = collections.deque()
            self._pid = os.getpid()
        try:
            wire = self._idle.pop()
        except IndexError:
            pass
        else:
            await self._check(wire)
            if not is_connected(wire):
                await self._reconnect(wire)
            return wire
        cancels = async_cancel_requests()
        with self.setup.measure():  # the pool connects a new connection (and handshakes)
            wire = cast(AsyncWire, await self._pool.get_connection())
        try:
            async_raise_lost_cancellation(cancels)  # lost in the handshake's sends
        except BaseException:
            self._idle.append(wire)  # connected and idle: fine for the next caller
            raise
        return wire

    async def _reconnect(self, wire: AsyncWire) -> None:
        """Connect a disconnected idle connection with its own ``connect()``, before the
        send would. redis-py's send reconnects through ``connect_check_health``, which a
        Sentinel-managed connection does not override: it would dial the address it had
        before a failover (the killed master, or the demoted one now refusing writes) for as
        long as it lives, instead of asking the sentinels for the current master (redis-py
        issue #3874). Its ``connect()`` asks them first."""
        cancels = async_cancel_requests()
        try:
            with self.setup.measure():
                await wire.connect()
        except BaseException:
            # Cut short, it may hold a socket without its handshake: it starts over next time.
            await wire.disconnect(True)
            self._idle.append(wire)
            raise
        try:
            async_raise_lost_cancellation(cancels)  # lost in the handshake's sends
        except BaseException:
            self._idle.append(wire)  # connected and idle: fine for the next caller
            raise

    async def _check(self, wire: AsyncWire) -> None:
        """Disconnect an idle connection the server has closed (a restart, an idle timeout),
        as redis-py's pool does on checkout: it then reconnects before sending, instead of
        failing the command. Costs one non-blocking read (about 2 us)."""
        if not is_connected(wire):
            return  # _take connects it
        try:
            stale = await getattr(wire, CAN_READ)()
        except DRIVER_ERRORS:
            stale = True
        if stale:
            await wire.disconnect(True)

    async def _give(self, wire: AsyncWire, clean: bool) -> None:
        """Back to the free list. A connection left with replies unread (an exception between
        the send and the last read) is disconnected first: it reconnects on its next use."""
        if not clean or self._closed:
            await wire.disconnect(True)
        if not self._closed:
            self._idle.append(wire)

    async def _send(self, wire: AsyncWire, packed: Any) -> None:
        cancels = async_cancel_requests()
        await wire.send_packed_command(packed)
        async_raise_lost_cancellation(cancels)  # see tenure._concurrency.cancellation

    async def execute(self, *args: Any) -> Any:
        wire = await self._take()
        clean = False
        try:
            await self._send(
                wire, wire.pack_command(*args) if pack_command is None else [pack_command(args)]
            )
            try:
                result = await wire.read_response()
            except ResponseError:  # an error reply, read in full
                clean = True
                raise
            clean = True
            return result
        finally:
            await self._give(wire, clean)

    async def script(self, script: Script, keys: Sequence[str], args: Sequence[Any]) -> Any:
        try:
            return await self.execute("EVALSHA", script.sha, len(keys), *keys, *args)
        except NoScriptError:
            return await self.execute("EVAL", script.source, len(keys), *keys, *args)

    async def pipeline(self, commands: Sequence[tuple[Any, ...]]) -> list[Any]:
        """Send all, then read every reply: one round trip. A failed command's error is its
        result; a connection failure raises."""
        wire = await self._take()
        clean = False
        try:
            if pack_command is None:
                await self._send(wire, wire.pack_commands(commands))
            else:
                await self._send(wire, [b"".join(pack_command(c) for c in commands)])
            results: list[Any] = []
            for _ in commands:
                try:
                    results.append(await wire.read_response())
                except ResponseError as exc:
                    results.append(exc)
            clean = True
            return results
        finally:
            await self._give(wire, clean)

    async def scripts(self, calls: Sequence[ScriptCall]) -> list[Any]:
        commands = [("EVALSHA", s.sha, len(keys), *keys, *args) for s, keys, args in calls]
        results = await self.pipeline(commands)
        for index, result in enumerate(results):
            if isinstance(result, NoScriptError):
                script, keys, args = calls[index]
                results[index] = await self.script(script, keys, args)
            elif isinstance(result, ResponseError):
                raise result
        return results

    async def wait(
        self, wake_key: str, seconds: float, keys: Sequence[str], args: Sequence[Any]
    ) -> Any:
        """BLPOP the wake list, then ACQUIRE, in one round trip: the server runs the acquire
        the moment the wait ends, in the same turn as the release that woke it. Returns the
        acquire's reply, or None if the server had lost its script (the lock logic's next
        acquire loads it again)."""
        results = await self.pipeline([
            ("BLPOP", wake_key, f"{seconds:.3f}"),
            ("EVALSHA", ACQUIRE.sha, len(keys), *keys, *args),
        ])
        if isinstance(results[1], NoScriptError):
            results[1] = None
        for result in results:
            if isinstance(result, ResponseError):
                raise result
        return results[1]

    async def try_then_wait(
        self, wake_keys: Sequence[str], seconds: float, first: ScriptArgs, then: ScriptArgs
    ) -> tuple[Any, Any]:
        """ACQUIRE (``first``), BLPOP the wake lists, ACQUIRE again (``then``), in one round
        trip: an attempt that expects to be refused waits at once, without a round trip of
        its own for the refusal (a grant of the first ACQUIRE pushes the attempt's own wake
        list, so that the BLPOP returns at once). Returns both ACQUIRE replies, None for one
        the server could not run for want of its script (the lock logic's next acquire
        loads it again)."""
        results = await self.pipeline([
            ("EVALSHA", ACQUIRE.sha, len(first[0]), *first[0], *first[1]),
            ("BLPOP", *wake_keys, f"{seconds:.3f}"),
            ("EVALSHA", ACQUIRE.sha, len(then[0]), *then[0], *then[1]),
        ])
        for index in (0, 2):
            if isinstance(results[index], NoScriptError):
                results[index] = None
        for result in results:
            if isinstance(result, ResponseError):
                raise result
        return results[0], results[2]

    async def block(self, key: str, seconds: float) -> None:
        """BLPOP ``key`` for at most ``seconds`` (whole milliseconds, at least one)."""
        await self.execute("BLPOP", key, f"{seconds:.3f}")

    def slot(self, key: str) -> int:
        return 0

    async def scan(self, pattern: str) -> list[list[bytes]]:
        pages: list[list[bytes]] = []
        cursor: Any = 0
        while True:
            cursor, keys = await self.execute(
                "SCAN", cursor, "MATCH", pattern, "COUNT", SCAN_COUNT, "TYPE", "hash"
            )
            pages.append(list(keys))
            if int(cursor) == 0:
                return pages

    async def aclose(self) -> None:
        self._closed = True
        self._idle = collections.deque()
        await self._pool.disconnect()
        for closable in self._closables:
            await closable.aclose()


def pool_for(settings: RedisSettings, retry: Retry, address: tuple[str, int]) -> AsyncPool:
    """A connection pool to one server at ``address`` (TLS when the settings say so)."""
    kwargs = settings.connection_kwargs()
    tls = kwargs.pop("ssl", False)
    host, port = address
    return cast(AsyncPool, ConnectionPool(
        connection_class=SSLConnection if tls else Connection,
        host=host,
        port=port,
        db=settings.db,
        retry=retry,
        **kwargs,
    ))
