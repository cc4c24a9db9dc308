"""The semaphore's steps on Redis: each one Lua script of ``_semaphores`` (key layout, fences
and every script's contract are there), renewals batched one script per slot, and waiters
woken through the semaphore's wake list."""

from __future__ import annotations

from collections.abc import Sequence

from tenure._async.capabilities import AsyncSemaphoreSupport
from tenure._concurrency import async_io as io
from tenure._errors import BackendError, limit_mismatch
from tenure._types import Busy, Grant, Holder, LockInfo, Renewal
from tenure.backends.redis._async.base import AsyncRedisBase
from tenure.backends.redis._scripts import milliseconds
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

__all__ = ["AsyncPermitSteps"]


class AsyncPermitSteps(AsyncRedisBase, AsyncSemaphoreSupport):
    """Counting semaphores: a zset of permits by server-clock expiry per name."""

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
                 holder.thread, self._gc_after_ms),
            )
        if status == 1:
            return Grant(int(value))
        if status == 0:
            return Busy(max(int(value), 0) / 1000)
        if status == 2:
            raise limit_mismatch(name, int(value), limit)
        stored = value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)
        raise BackendError(
            f"Redis {self.settings.display}: the key of semaphore {name!r} already belongs "
            f"to semaphore {stored!r} (a SHA-256 digest collision); use another name"
        )

    async def release_permit(self, name: str, token: str) -> bool:
        keys = semaphore_keys(self._namespace, name)
        with self._translated("release a permit", name):
            released = await self._transport.script(
                RELEASE_PERMIT,
                (keys.meta, keys.permits, keys.holders, keys.wake),
                (token, self._gc_after_ms),
            )
        return bool(released == 1)

    async def extend_permits(self, renewals: Sequence[Renewal]) -> list[bool]:
        keys = [semaphore_keys(self._namespace, r.name) for r in renewals]
        return await self._renew_by_slot(
            EXTEND_PERMITS, renewals, [(k.meta, k.permits, k.holders) for k in keys]
        )

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
                BREAK_SEMAPHORE,
                (keys.meta, keys.permits, keys.holders, keys.wake),
                (self._gc_after_ms,),
            )
        return bool(int(broken) > 0)

    async def wait_for_permit(
        self, name: str, timeout: float, busy: Busy | None = None
    ) -> None:
        """Block on the semaphore's wake list, which each release pushes one item to (so a
        release wakes one waiter), for at most ``timeout`` (which the lease logic bounds by
        the soonest permit's end and ``max_backoff``) and half the socket timeout. Without a
        free wait connection, a timed pause of ``timeout``. A wake-up lost (taken by a waiter
        that then gave up) costs at most that one bounded pause."""
        seconds = min(timeout, self._waits.longest)
        if not self._waits.take(seconds):
            await io.sleep(timeout)
            return
        keys = semaphore_keys(self._namespace, name)
        try:
            with self._translated("wait for a permit", name):
                await self._transport.block(keys.wake, milliseconds(seconds) / 1000)
        finally:
            self._waits.give()
