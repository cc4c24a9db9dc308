"""Read-write locks and fair locks on Redis: each step one Lua script of ``_rwlocks`` (key
layout, grant rule, fences and every script's contract are there), renewals batched one
script per slot, and a waiter woken through a wake list of its own, which releases push to
when its turn may have come."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from tenure._async.capabilities import MODES, AsyncQueueSupport
from tenure._concurrency import async_io as io
from tenure._errors import BackendError, InvalidArgument
from tenure._types import Busy, Grant, Holder, LockInfo, Renewal
from tenure.backends.redis._async.base import AsyncRedisBase
from tenure.backends.redis._rwlocks import (
    ACQUIRE_QUEUED,
    BREAK_QUEUE,
    EXTEND_QUEUED,
    INSPECT_QUEUE,
    QUEUED_OWNED,
    RELEASE_QUEUED,
    decode_queue,
    is_queue_meta,
    keys_of_meta,
    queue_keys,
    queue_pattern,
)
from tenure.backends.redis._scripts import milliseconds
from tenure.backends.redis._waiting import BLOCKING_TIMER, SHORTEST_WAIT

__all__ = ["AsyncQueueSteps"]


@dataclasses.dataclass(frozen=True, eq=False)
class QueueWaiter:
    """Carried in a queued attempt's Busy answers: whose wake list its wait blocks on."""

    backend: object
    name: str
    token: str


class AsyncQueueSteps(AsyncRedisBase, AsyncQueueSupport):
    """Queued leases with modes: per name a hash of leases, sorted sets of lease ends, of
    places by arrival (all, and writers') and of place ends, and a wake list per waiter."""

    async def acquire_queued(
        self,
        name: str,
        token: str,
        ttl: float,
        holder: Holder,
        *,
        mode: str,
        queue_ttl: float,
        waited: Busy | None = None,
    ) -> Grant | Busy:
        if mode not in MODES:
            raise InvalidArgument(f"a queued lease's mode is 'read' or 'write', not {mode!r}")
        keys = queue_keys(self._namespace, name)
        with self._translated(f"acquire a {mode} lease", name):
            status, value = await self._transport.script(
                ACQUIRE_QUEUED,
                keys.all,
                (name, token, milliseconds(ttl), mode, milliseconds(queue_ttl), holder.host,
                 holder.pid, holder.thread, self._gc_after_ms),
            )
        if status == 1:
            return Grant(int(value))
        if status == 0:
            left = int(value)
            return Busy(None if left < 0 else left / 1000, QueueWaiter(self, name, token))
        stored = value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)
        raise BackendError(
            f"Redis {self.settings.display}: the key of read-write lock {name!r} already "
            f"belongs to read-write lock {stored!r} (a SHA-256 digest collision); use "
            "another name"
        )

    async def release_queued(self, name: str, token: str) -> bool:
        keys = queue_keys(self._namespace, name)
        with self._translated("release", name):
            released = await self._transport.script(
                RELEASE_QUEUED, keys.all, (token, self._gc_after_ms)
            )
        return bool(released == 1)

    async def extend_queued(self, renewals: Sequence[Renewal]) -> list[bool]:
        keys = [queue_keys(self._namespace, r.name) for r in renewals]
        return await self._renew_by_slot(EXTEND_QUEUED, renewals, [k.all for k in keys])

    async def queued_owned(self, name: str, token: str) -> bool:
        keys = queue_keys(self._namespace, name)
        with self._translated("check ownership", name):
            owned = await self._transport.script(QUEUED_OWNED, keys.all, (token,))
        return bool(owned == 1)

    async def inspect_queue(self, name: str) -> LockInfo | None:
        keys = queue_keys(self._namespace, name)
        with self._translated("inspect read-write lock", name):
            reply = await self._transport.script(INSPECT_QUEUE, keys.all, ())
        return decode_queue(reply)

    async def list_queues(self, prefix: str) -> list[LockInfo]:
        found: list[LockInfo] = []
        with self._translated("list read-write locks"):
            for page in await self._transport.scan(queue_pattern(self._namespace)):
                metas = [key.decode() if isinstance(key, bytes) else key for key in page]
                replies = await self._transport.scripts([
                    (INSPECT_QUEUE, keys_of_meta(meta).all, ()) for meta in metas
                    if is_queue_meta(meta)
                ])
                for reply in replies:
                    info = decode_queue(reply)
                    if info is not None and info.name.startswith(prefix):
                        found.append(info)
        return sorted(found, key=lambda info: info.name)

    async def break_queue(self, name: str) -> bool:
        keys = queue_keys(self._namespace, name)
        with self._translated("break read-write lock", name):
            broken = await self._transport.script(BREAK_QUEUE, keys.all, (self._gc_after_ms,))
        return bool(int(broken) > 0)

    async def wait_for_turn(self, name: str, timeout: float, busy: Busy | None = None) -> None:
        """Block on this waiter's own wake list, which a release (or a break, a waiter
        leaving, a lapse noticed) pushes to when its turn may have come, for at most
        ``timeout`` and half the socket timeout. Redis ends a timed-out BLPOP only on its
        timer (up to BLOCKING_TIMER late), so the BLPOP asks that much less and the wait never
        outlasts ``timeout``; a wait too short for that, or without a free wait connection,
        is a timed pause (a push meanwhile stays in the list for the next wait)."""
        waiter = None if busy is None else busy.waiting
        seconds = min(timeout, self._waits.longest) - BLOCKING_TIMER
        if (
            not isinstance(waiter, QueueWaiter) or waiter.backend is not self
            or waiter.name != name or seconds < SHORTEST_WAIT or not self._waits.take(seconds)
        ):
            await io.sleep(timeout)
            return
        wake = queue_keys(self._namespace, name).wake(waiter.token)
        try:
            with self._translated("wait for its turn", name):
                await self._transport.block(wake, milliseconds(seconds) / 1000)
        finally:
            self._waits.give()

