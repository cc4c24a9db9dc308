"""The Redis backend for asyncio: ``redis://``, ``rediss://``, ``unix://``, ``redis+cluster://``
and ``redis+sentinel://`` over redis-py (its hiredis parser when installed).

Every operation is one Lua script from ``_scripts`` (whose contracts say what each does), sent
with EVALSHA and re-sent with EVAL when the server has lost its script cache (a restart); a
wait's announcement always goes as EVAL (see ``AsyncDirect.wait``).

Connections: on one master (redis, rediss, unix, sentinel) commands go straight to redis-py
connections taken from a free list, one at a time per caller: redis-py's own command layer
costs several times the network round trip on a fast link, and the lock's hot path is two
round trips. Blocking waits (BLPOP) take a connection of their own from the same list, so a
waiter never blocks another caller's command; at most ``wait_connections`` waits block at
once, further waiters fall back to timed back-off. On a Cluster, redis-py's cluster client
routes each script to the node owning the lock's hash tag.

Errors: every redis-py error becomes ``BackendError`` with the driver's error as its cause.
Connections open at first use; redis-py's own retries are off unless ``retries`` is given,
and socket timeouts are set (3 s by default), so a dead or stopped server is an error within
seconds, never a hang.
"""

from __future__ import annotations

import collections
import dataclasses
import os
import threading
import time
from collections.abc import Callable, Sequence
from types import TracebackType
from typing import Any, Protocol, cast

from redis.asyncio import ConnectionPool, RedisCluster, Sentinel
from redis.asyncio.cluster import ClusterNode
from redis.asyncio.connection import Connection, SSLConnection, UnixDomainSocketConnection
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.crc import key_slot
from redis.exceptions import (
    ChildDeadlockedError,
    NoScriptError,
    RedisClusterException,
    RedisError,
    ResponseError,
)
from redis.exceptions import (
    ConnectionError as RedisConnectionError,
)

from tenure._async.backend import AsyncBackend
from tenure._async.capabilities import AsyncSemaphoreSupport
from tenure._concurrency import async_io as io
from tenure._errors import BackendError, limit_mismatch
from tenure._types import Busy, Capabilities, Grant, Holder, LockInfo, Renewal
from tenure.backends.redis._cancellation import (
    async_cancel_requests,
    async_raise_lost_cancellation,
)
from tenure.backends.redis._config import RedisSettings, parse
from tenure.backends.redis._scripts import (
    ACQUIRE,
    ANNOUNCE,
    BREAK,
    EXTEND,
    INSPECT,
    LEAVE,
    RELEASE,
    LockKeys,
    Script,
    decode_info,
    lock_keys,
    meta_pattern,
    milliseconds,
)
from tenure.backends.redis._semaphores import (
    ACQUIRE_PERMIT,
    BREAK_SEMAPHORE,
    EXTEND_PERMITS,
    INSPECT_SEMAPHORE,
    PERMIT_OWNED,
    RELEASE_PERMIT,
    decode_semaphore,
    semaphore_keys,
    semaphore_pattern,
)

__all__ = ["BACKEND", "AsyncRedisBackend"]

DRIVER_ERRORS = (RedisError, RedisClusterException, ChildDeadlockedError, OSError)
CLUSTER_PERMIT_POLL = 0.02
"""On a Redis Cluster, the longest pause between two tries of a waiting permit acquire."""
SHORTEST_WAIT = 0.0005
"""Shorter pauses just sleep: Redis's blocking timeouts count whole milliseconds (a pause is
rounded to at least 1 ms; 0 would mean forever)."""
SCAN_COUNT = 500
BLOCKING_TIMER = 0.2
"""Seconds a blocking command may outlast its timeout: Redis ends timed-out ones on its timer
(every 1/hz s, 0.1 s by default). A wait plus this must stay within the socket timeout."""
GRANT_SLACK = 0.02
"""Seconds added to the lease a waiter's pipelined acquire takes: the lock logic measures
the lease from its own next call, a moment after the server granted it; the extra keeps the
server's lease the longer of the two (checked, see ``_Waiter``)."""

ScriptCall = tuple[Script, Sequence[str], Sequence[Any]]

pack_command: Callable[[tuple[Any, ...]], bytes] | None
try:  # hiredis packs a command several times faster than redis-py's Python wrapper around it
    from hiredis import pack_command
except ImportError:  # pragma: no cover - hiredis is optional
    pack_command = None


# ---- what we call on redis-py objects (typed here: some of redis-py's are not) -------------


class AsyncWire(Protocol):
    """One redis-py connection, used directly."""

    def pack_command(self, *args: Any) -> Any: ...
    async def send_packed_command(self, command: Any, check_health: bool = True) -> None: ...
    async def read_response(self) -> Any: ...
    def pack_commands(self, commands: Any) -> Any: ...
    async def disconnect(self, nowait: bool = False) -> None: ...
    async def can_read(self) -> bool: ...
    @property
    def is_connected(self) -> bool: ...


class AsyncPool(Protocol):
    async def get_connection(self) -> Any: ...
    async def disconnect(self) -> None: ...


class AsyncClusterClient(Protocol):
    async def execute_command(self, *args: Any, **options: Any) -> Any: ...
    def get_primaries(self) -> list[Any]: ...
    async def aclose(self) -> None: ...


class AsyncClosable(Protocol):
    async def aclose(self) -> None: ...


# ---- transports: one master, or a Cluster ---------------------------------------------------


class AsyncDirect:
    """Commands straight on redis-py connections of one pool (one master)."""

    def __init__(self, pool: AsyncPool, closables: Sequence[AsyncClosable] = ()) -> None:
        self._pool = pool
        self._closables = closables
        self._idle: collections.deque[AsyncWire] = collections.deque()
        self._pid = os.getpid()
        self._closed = False

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
            return wire
        cancels = async_cancel_requests()
        wire = cast(AsyncWire, await self._pool.get_connection())
        try:
            async_raise_lost_cancellation(cancels)  # lost in the handshake's sends
        except BaseException:
            self._idle.append(wire)  # connected and idle: fine for the next caller
            raise
        return wire

    async def _check(self, wire: AsyncWire) -> None:
        """Disconnect an idle connection the server has closed (a restart, an idle timeout),
        as redis-py's pool does on checkout: it then reconnects before sending, instead of
        failing the command. Costs one non-blocking read (about 2 us)."""
        if not wire.is_connected:
            return  # it connects when it sends (checking it would connect it here)
        try:
            stale = await wire.can_read()
        except DRIVER_ERRORS:
            stale = True
        if stale:
            await wire.disconnect(nowait=True)

    async def _give(self, wire: AsyncWire, clean: bool) -> None:
        """Back to the free list. A connection left with replies unread (an exception between
        the send and the last read) is disconnected first: it reconnects on its next use."""
        if not clean or self._closed:
            await wire.disconnect(nowait=True)
        if not self._closed:
            self._idle.append(wire)

    async def _send(self, wire: AsyncWire, packed: Any) -> None:
        cancels = async_cancel_requests()
        await wire.send_packed_command(packed)
        async_raise_lost_cancellation(cancels)  # see _cancellation

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
        self, announce: Sequence[Any], wake_key: str, seconds: float, acquire: Sequence[Any]
    ) -> tuple[Any, Any]:
        """ANNOUNCE, BLPOP the wake list, then ACQUIRE, in one round trip: the server runs
        the acquire the moment the wait ends, in the same turn as the release that woke it.
        Returns the replies of ANNOUNCE and ACQUIRE (None for the acquire if the server had
        lost its script: the lock logic's next acquire loads it again).

        ANNOUNCE goes as EVAL with its source, not EVALSHA: if a server without it cached (a
        fresh or restarted one) refused it, the BLPOP behind it would block the whole wait
        unannounced, woken by no release. EVAL costs the server a SHA1 of 1.5 KB, and the
        wait's own latency nothing: it is sent before the waiting starts."""
        results = await self.pipeline([
            ("EVAL", ANNOUNCE.source, 5, *announce),
            ("BLPOP", wake_key, f"{seconds:.3f}"),
            ("EVALSHA", ACQUIRE.sha, 6, *acquire),
        ])
        if isinstance(results[2], NoScriptError):
            results[2] = None
        for result in results:
            if isinstance(result, ResponseError):
                raise result
        return results[0], results[2]

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


class AsyncClustered:
    """Commands through redis-py's cluster client, which routes by each key's slot."""

    def __init__(self, settings: RedisSettings, retry: Retry) -> None:
        self._settings = settings
        self._retry = retry
        self._client: AsyncClusterClient | None = None
        self._mutex = threading.Lock()
        self._closed = False

    def _cluster(self) -> AsyncClusterClient:
        # Built at first use: building the threads flavour's client already connects.
        with self._mutex:
            if self._closed:
                raise RedisConnectionError("the tenure client is closed")
            if self._client is None:
                node_type: Any = ClusterNode  # redis-py's threads flavour is untyped here
                nodes = [node_type(host, port) for host, port in self._settings.addresses]
                self._client = cast(
                    AsyncClusterClient,
                    RedisCluster(
                        startup_nodes=nodes,
                        retry=self._retry,
                        **self._settings.connection_kwargs(),
                    ),
                )
            return self._client

    async def execute(self, *args: Any) -> Any:
        cancels = async_cancel_requests()
        result = await self._cluster().execute_command(*args)
        async_raise_lost_cancellation(cancels)  # see _cancellation
        return result

    async def script(self, script: Script, keys: Sequence[str], args: Sequence[Any]) -> Any:
        try:
            return await self.execute("EVALSHA", script.sha, len(keys), *keys, *args)
        except NoScriptError:
            return await self.execute("EVAL", script.source, len(keys), *keys, *args)

    async def scripts(self, calls: Sequence[ScriptCall]) -> list[Any]:
        return [await self.script(script, keys, args) for script, keys, args in calls]

    async def wait(
        self, announce: Sequence[Any], wake_key: str, seconds: float, acquire: Sequence[Any]
    ) -> tuple[Any, Any]:
        announced = await self.script(ANNOUNCE, announce[:5], announce[5:])
        await self.execute("BLPOP", wake_key, f"{seconds:.3f}")
        return announced, await self.script(ACQUIRE, acquire[:6], acquire[6:])

    def slot(self, key: str) -> int:
        return key_slot(key.encode())

    async def scan(self, pattern: str) -> list[list[bytes]]:
        client = self._cluster()
        await client.execute_command("PING")  # the first command loads the slot map
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
        if client is not None:
            await client.aclose()


AsyncTransport = AsyncDirect | AsyncClustered


def _transport(settings: RedisSettings) -> AsyncTransport:
    retry = Retry(NoBackoff(), settings.retries)
    kwargs = settings.connection_kwargs()
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
            list(settings.addresses), sentinel_kwargs=sentinel_kwargs, retry=retry, **kwargs
        )
        assert settings.service_name is not None
        master = sentinel.master_for(settings.service_name, db=settings.db)
        closables = [cast(AsyncClosable, master)] + [
            cast(AsyncClosable, client) for client in sentinel.sentinels
        ]
        return AsyncDirect(cast(AsyncPool, master.connection_pool), closables)
    tls = kwargs.pop("ssl", False)
    if settings.unix_path is not None:
        pool = ConnectionPool(
            connection_class=UnixDomainSocketConnection,
            path=settings.unix_path,
            db=settings.db,
            retry=retry,
            **kwargs,
        )
    else:
        ((host, port),) = settings.addresses
        pool = ConnectionPool(
            connection_class=SSLConnection if tls else Connection,
            host=host,
            port=port,
            db=settings.db,
            retry=retry,
            **kwargs,
        )
    return AsyncDirect(cast(AsyncPool, pool))


# ---- the backend ----------------------------------------------------------------------------


class _Translated:
    """Turns driver errors raised in its ``with`` block into BackendError (a plain class: it
    runs twice per lock cycle, and a generator-based context manager costs more)."""

    __slots__ = ("action", "display", "name")

    def __init__(self, display: str, action: str, name: str | None) -> None:
        self.display = display
        self.action = action
        self.name = name

    def __enter__(self) -> None:
        return None

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if exc is not None and isinstance(exc, DRIVER_ERRORS):
            about = f" of {self.name!r}" if self.name is not None else ""
            detail = str(exc) or type(exc).__name__
            raise BackendError(
                f"Redis {self.display}: {self.action}{about} failed: {detail}"
            ) from exc


@dataclasses.dataclass(eq=False)
class _Waiter:
    """The state of one acquire attempt that found ``name`` busy, carried in its Busy answers:
    the lock logic hands that Busy to ``wait_for_release`` next, then to ``acquire`` again
    with the same token.

    The wait pipelines that next acquire behind its BLPOP and keeps the reply in ``outcome``
    for the lock logic's call to pick up without another round trip. A grant kept that way is
    handed over only if provably conservative: the lock logic counts the lease from its own
    call, a moment after the server granted it, so the server's lease (taken GRANT_SLACK
    longer) must not end before the lock logic's. The grant happened no earlier, on the
    client's clock, than ``sent_at`` plus the server time between the announce and the grant;
    if more than GRANT_SLACK has passed since then, ``acquire`` asks again with the same token
    instead (which restarts the lease from that request, keeping the fence).
    """

    backend: object
    """The backend that answered Busy (a Busy handed to another one is not its state)."""
    name: str
    token: str
    ttl: float
    holder: Holder
    arrival: Any = None
    """Its first place in the queue (server microseconds), once it has waited."""
    outcome: Any = None
    """ACQUIRE's reply from the end of the last wait, not yet handed to the lock logic."""
    sent_at: float = 0.0
    announced_us: int = 0


def _waiter_of(backend: object, busy: Busy | None, name: str) -> _Waiter | None:
    """The waiting state of this attempt, from the Busy this backend answered it last."""
    waiter = None if busy is None else busy.waiting
    if isinstance(waiter, _Waiter) and waiter.backend is backend and waiter.name == name:
        return waiter
    return None


class AsyncRedisBackend(AsyncBackend, AsyncSemaphoreSupport):
    """Options (URL query or keyword): ``socket_timeout``, ``socket_connect_timeout`` (seconds,
    default 3), ``retries`` (redis-py connection retries, default 0), ``namespace`` (key
    prefix, default ``tenure``), ``db``, ``max_connections``, ``wait_connections`` (default
    64), ``handoff_window`` (seconds a release reserves the lock for the longest waiter,
    default 0.05; 0 turns fair handoff off), ``client_name``, ``health_check_interval``;
    keyword only: ``username``, ``password``, ``sentinel_username``, ``sentinel_password``,
    ``ssl_*`` (TLS files, ``ssl_cert_reqs``, ``ssl_check_hostname``, ``ssl_min_version``...)."""

    schemes = ("redis", "rediss", "unix", "redis+cluster", "redis+sentinel")
    capabilities = Capabilities(
        fencing="strictly increasing per name, kept across releases; across a server restart "
        "only with AOF persistence (appendonly yes, appendfsync always)",
        fences_survive_restart=False,
        leases_survive_restart=False,
        wakeups="notification",
        multi_host=True,
        fault_tolerant=False,
    )
    max_backoff = 0.5
    notifies = True
    """Releases wake waiters, so a waiter's timed pause only bounds how long an expiry without
    a release (a crashed holder) or a lost wake-up goes unnoticed."""

    def __init__(self, settings: RedisSettings) -> None:
        self.settings = settings
        self._namespace = settings.namespace
        self._window_ms = round(settings.handoff_window * 1000)
        # Below SHORTEST_WAIT (a socket timeout under 0.2 s) waiters back off by timer only.
        self._longest_wait = min(self.max_backoff, (settings.socket_timeout - BLOCKING_TIMER) / 2)
        self._wait_slots = threading.BoundedSemaphore(max(1, settings.wait_connections))
        self._waits_allowed = settings.wait_connections > 0
        self._transport = _transport(settings)

    @classmethod
    def from_url(cls, url: str, **options: Any) -> AsyncRedisBackend:
        return cls(parse(url, options))

    def describe(self) -> str:
        return self.settings.display

    def _translated(self, action: str, name: str | None = None) -> _Translated:
        return _Translated(self.settings.display, action, name)

    # ---- the atomic steps ------------------------------------------------------------------

    async def acquire(
        self, name: str, token: str, ttl: float, holder: Holder, waited: Busy | None = None
    ) -> Grant | Busy:
        waiter = _waiter_of(self, waited, name)
        if waiter is not None and (waiter.token != token or waiter.ttl != ttl):
            waiter = None
        if waiter is not None and waiter.outcome is not None:
            reply, waiter.outcome = waiter.outcome, None
            outcome = self._kept_outcome(waiter, reply)
            if outcome is not None:
                return outcome
        keys = lock_keys(self._namespace, name)
        with self._translated("acquire", name):
            reply = await self._transport.script(
                ACQUIRE,
                (keys.meta, keys.lease, keys.next, keys.queue, keys.lapse, keys.wake(token)),
                (token, milliseconds(ttl), name, holder.host, holder.pid, holder.thread,
                 "0" if waiter is None or waiter.arrival is None else "1"),
            )
        return self._outcome(reply, waiter, name, token=token, ttl=ttl, holder=holder)

    def _kept_outcome(self, waiter: _Waiter, reply: Any) -> Grant | Busy | None:
        """The outcome of the acquire pipelined behind the last wait, if still usable."""
        if reply[0] == 0:
            left = int(reply[1])
            return Busy(None if left < 0 else left / 1000, waiter)
        if reply[0] == 1:
            waited_on_server = (int(reply[2]) - waiter.announced_us) / 1_000_000
            since_grant = time.monotonic() - waiter.sent_at - waited_on_server
            if waited_on_server >= 0 and since_grant <= GRANT_SLACK:
                return Grant(int(reply[1]))
        return None  # too old to vouch for: acquire again with the same token

    def _outcome(
        self, reply: Any, waiter: _Waiter | None, name: str, *, token: str, ttl: float,
        holder: Holder,
    ) -> Grant | Busy:
        status, value = reply[0], reply[1]
        if status == 1:
            return Grant(int(value))
        if status == 0:
            left = int(value)
            return Busy(
                None if left < 0 else left / 1000,
                waiter or _Waiter(self, name, token, ttl, holder),
            )
        stored = value.decode("utf-8", "replace") if isinstance(value, bytes) else value
        raise BackendError(
            f"Redis {self.settings.display}: the key of lock {name!r} already belongs to "
            f"lock {stored!r} (a SHA-256 digest collision); use another name"
        )

    async def release(self, name: str, token: str) -> bool:
        keys = lock_keys(self._namespace, name)
        with self._translated("release", name):
            released = await self._transport.script(
                RELEASE,
                (keys.lease, keys.next, keys.queue, keys.lapse),
                (token, keys.wake_prefix, self._window_ms),
            )
        return bool(released == 1)

    async def extend(self, name: str, token: str, ttl: float) -> bool:
        keys = lock_keys(self._namespace, name)
        with self._translated("extend", name):
            (extended,) = await self._transport.script(
                EXTEND, (keys.lease,), (token, milliseconds(ttl))
            )
        return bool(extended == 1)

    async def extend_many(self, renewals: Sequence[Renewal]) -> list[bool]:
        # One script per slot (on one master: one script for all), in one round trip there.
        groups: dict[int, list[int]] = {}
        leases = [lock_keys(self._namespace, r.name).lease for r in renewals]
        for index, lease in enumerate(leases):
            groups.setdefault(self._transport.slot(lease), []).append(index)
        calls = []
        for indexes in groups.values():
            arguments: list[Any] = []
            for index in indexes:
                arguments += [renewals[index].token, milliseconds(renewals[index].ttl)]
            calls.append((EXTEND, [leases[index] for index in indexes], arguments))
        with self._translated("renew"):
            replies = await self._transport.scripts(calls)
        results = [False] * len(renewals)
        for indexes, reply in zip(groups.values(), replies, strict=True):
            for index, extended in zip(indexes, reply, strict=True):
                results[index] = extended == 1
        return results

    async def owned(self, name: str, token: str) -> bool:
        keys = lock_keys(self._namespace, name)
        with self._translated("check ownership", name):
            holder = await self._transport.execute("HGET", keys.lease, "token")
        return bool(holder == token.encode())

    async def inspect(self, name: str) -> LockInfo | None:
        keys = lock_keys(self._namespace, name)
        with self._translated("inspect", name):
            reply = await self._transport.script(INSPECT, (keys.meta, keys.lease), ())
        return decode_info(reply)

    async def list_locks(self, prefix: str) -> list[LockInfo]:
        found: list[LockInfo] = []
        with self._translated("list locks"):
            for page in await self._transport.scan(meta_pattern(self._namespace)):
                metas = [key.decode() if isinstance(key, bytes) else key for key in page]
                replies = await self._transport.scripts(
                    [(INSPECT, (meta, f"{meta}:lease"), ()) for meta in metas]
                )
                for reply in replies:
                    info = decode_info(reply)
                    if info is not None and info.name.startswith(prefix):
                        found.append(info)
        return sorted(found, key=lambda info: info.name)

    async def break_lock(self, name: str) -> bool:
        keys = lock_keys(self._namespace, name)
        with self._translated("break", name):
            broken = await self._transport.script(
                BREAK,
                (keys.lease, keys.next, keys.queue, keys.lapse),
                (keys.wake_prefix, self._window_ms),
            )
        return bool(broken == 1)

    # ---- waiting ---------------------------------------------------------------------------

    async def wait_for_release(
        self, name: str, timeout: float, busy: Busy | None = None
    ) -> None:
        """Block on this waiter's wake list until a release pops it from the queue, or for
        ``timeout`` (at most half the socket timeout: the read must not time out first), then
        try to acquire in the same round trip (see ``_Waiter``)."""
        waiter = _waiter_of(self, busy, name)
        seconds = min(timeout, self._longest_wait)
        if (
            waiter is None
            or seconds < SHORTEST_WAIT
            or not self._waits_allowed
            or not self._wait_slots.acquire(blocking=False)
        ):
            await io.sleep(timeout)
            return
        keys = lock_keys(self._namespace, name)
        token = waiter.token
        wait_ms = milliseconds(seconds)
        wake = keys.wake(token)
        lock_keys_ = (keys.lease, keys.next, keys.queue, keys.lapse)
        announce = (*lock_keys_, wake, token, wait_ms, waiter.arrival or "")
        acquire = (
            keys.meta, *lock_keys_, wake,
            token, milliseconds(waiter.ttl + GRANT_SLACK), name, waiter.holder.host,
            waiter.holder.pid, waiter.holder.thread, "1",
        )
        waiter.outcome = None
        try:
            waiter.sent_at = time.monotonic()
            with self._translated("wait", name):
                announced, acquired = await self._transport.wait(
                    announce, wake, wait_ms / 1000, acquire
                )
        except BaseException:
            # Cancelled or failed mid-wait: the pipelined acquire may have taken the lock,
            # or a release may have reserved it for us. Give both, and our place, back.
            await io.run_cleanup(self._leave, keys, token)
            raise
        finally:
            self._wait_slots.release()
        waiter.arrival = announced[0]
        waiter.announced_us = int(announced[1])
        waiter.outcome = acquired

    async def _leave(self, keys: LockKeys, token: str) -> None:
        with self._translated("leave the queue"):
            await self._transport.script(
                LEAVE,
                (keys.lease, keys.next, keys.queue, keys.lapse, keys.wake(token)),
                (token, keys.wake_prefix, self._window_ms),
            )

    # ---- semaphores (scripts and key layout in ``_semaphores``) -------------------------

    async def acquire_permit(
        self,
        name: str,
        token: str,
        ttl: float,
        holder: Holder,
        limit: int,
        *,
        waited: Busy | None = None,
    ) -> Grant | Busy:
        keys = semaphore_keys(self._namespace, name)
        with self._translated("acquire a permit", name):
            status, value = await self._transport.script(
                ACQUIRE_PERMIT,
                (keys.meta, keys.permits, keys.holders),
                (name, token, milliseconds(ttl), limit, holder.host, holder.pid,
                 holder.thread),
            )
        if status == 1:
            return Grant(int(value))
        if status == 0:
            return Busy(max(int(value), 0) / 1000)
        if status == 2:
            raise limit_mismatch(name, int(value), limit)
        raise BackendError(
            f"Redis {self.settings.display}: the key of semaphore {name!r} already belongs "
            f"to semaphore {_text(value)!r} (a SHA-256 digest collision); use another name"
        )

    async def release_permit(self, name: str, token: str) -> bool:
        keys = semaphore_keys(self._namespace, name)
        with self._translated("release a permit", name):
            released = await self._transport.script(
                RELEASE_PERMIT, (keys.permits, keys.holders, keys.wake), (token,)
            )
        return bool(released == 1)

    async def extend_permits(self, renewals: Sequence[Renewal]) -> list[bool]:
        # One script per slot (on one master: one script for all), in one round trip there.
        groups: dict[int, list[int]] = {}
        keys = [semaphore_keys(self._namespace, r.name) for r in renewals]
        for index, permit_keys in enumerate(keys):
            groups.setdefault(self._transport.slot(permit_keys.permits), []).append(index)
        calls = []
        for indexes in groups.values():
            key_list: list[str] = []
            arguments: list[Any] = []
            for index in indexes:
                key_list += [keys[index].permits, keys[index].holders]
                arguments += [renewals[index].token, milliseconds(renewals[index].ttl)]
            calls.append((EXTEND_PERMITS, key_list, arguments))
        with self._translated("renew permits"):
            replies = await self._transport.scripts(calls)
        results = [False] * len(renewals)
        for indexes, reply in zip(groups.values(), replies, strict=True):
            for index, extended in zip(indexes, reply, strict=True):
                results[index] = extended == 1
        return results

    async def permit_owned(self, name: str, token: str) -> bool:
        keys = semaphore_keys(self._namespace, name)
        with self._translated("check a permit", name):
            owned = await self._transport.script(PERMIT_OWNED, (keys.permits,), (token,))
        return bool(owned == 1)

    async def inspect_semaphore(self, name: str) -> LockInfo | None:
        keys = semaphore_keys(self._namespace, name)
        with self._translated("inspect semaphore", name):
            reply = await self._transport.script(
                INSPECT_SEMAPHORE, (keys.meta, keys.permits, keys.holders), ()
            )
        return decode_semaphore(reply)

    async def list_semaphores(self, prefix: str) -> list[LockInfo]:
        found: list[LockInfo] = []
        with self._translated("list semaphores"):
            for page in await self._transport.scan(semaphore_pattern(self._namespace)):
                metas = [key.decode() if isinstance(key, bytes) else key for key in page]
                replies = await self._transport.scripts([
                    (INSPECT_SEMAPHORE, (meta, f"{meta}:permits", f"{meta}:holders"), ())
                    for meta in metas
                ])
                for reply in replies:
                    info = decode_semaphore(reply)
                    if info is not None and info.name.startswith(prefix):
                        found.append(info)
        return sorted(found, key=lambda info: info.name)

    async def break_semaphore(self, name: str) -> bool:
        keys = semaphore_keys(self._namespace, name)
        with self._translated("break semaphore", name):
            broken = await self._transport.script(
                BREAK_SEMAPHORE, (keys.permits, keys.holders, keys.wake), ()
            )
        return bool(int(broken) > 0)

    async def wait_for_permit(
        self, name: str, timeout: float, busy: Busy | None = None
    ) -> None:
        """Block on the semaphore's wake list, which each release pushes one item to (so a
        release wakes one waiter), for at most ``timeout`` (and half the socket timeout);
        without a free wait connection, a timed pause."""
        seconds = min(timeout, self._longest_wait)
        if isinstance(self._transport, AsyncClustered):
            # redis-py's cluster client drops connections under concurrent BLPOPs of one
            # slot (seen in the conformance suite): on a Cluster, permit waiters poll, at
            # most CLUSTER_PERMIT_POLL apart.
            await io.sleep(min(timeout, CLUSTER_PERMIT_POLL))
            return
        if (
            seconds < SHORTEST_WAIT
            or not self._waits_allowed
            or not self._wait_slots.acquire(blocking=False)
        ):
            await io.sleep(timeout)
            return
        keys = semaphore_keys(self._namespace, name)
        try:
            with self._translated("wait for a permit", name):
                await self._transport.execute(
                    "BLPOP", keys.wake, f"{milliseconds(seconds) / 1000:.3f}"
                )
        finally:
            self._wait_slots.release()

    async def aclose(self) -> None:
        with self._translated("close"):
            await self._transport.aclose()


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


BACKEND = AsyncRedisBackend
"""Redis: one master (plain, TLS, unix socket, or found through Sentinel) or a Redis Cluster.
Leases are keys with PEXPIRE; fences a counter kept beside them; waiters woken by releases."""
