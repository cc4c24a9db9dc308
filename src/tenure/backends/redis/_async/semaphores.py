"""The semaphore's steps on Redis: each one Lua script of ``_semaphores`` (key layout, fences
and every script's contract are there), and a waiter's wait on the semaphore's wake list."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tenure._errors import limit_mismatch
from tenure._types import Busy, Grant, Holder, LeaseSpec, LockInfo, Renewal
from tenure.backends.redis._async.base import AsyncRedisBase
from tenure.backends.redis._errors import digest_collision
from tenure.backends.redis._records import decode_semaphore
from tenure.backends.redis._scripts import milliseconds
from tenure.backends.redis._semaphores import (
    ACQUIRE_PERMIT,
    BREAK_SEMAPHORE,
    EXTEND_PERMITS,
    INSPECT_SEMAPHORE,
    PERMIT_OWNED,
    RELEASE_PERMIT,
    semaphore_keys,
    semaphore_pattern,
)

__all__ = ["AsyncPermitSteps"]


class AsyncPermitSteps(AsyncRedisBase):
    """Counting semaphores: a zset of permits by server-clock expiry per name."""

    async def _acquire_permit(
        self, name: str, spec: LeaseSpec, token: str, ttl: float, holder: Holder
    ) -> Grant | Busy:
        limit = spec.limit
        keys = semaphore_keys(self._namespace, name)
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
        raise digest_collision("semaphore", name, value)

    async def _release_permit(self, name: str, token: str) -> bool:
        keys = semaphore_keys(self._namespace, name)
        released = await self._transport.script(
            RELEASE_PERMIT,
            (keys.meta, keys.permits, keys.holders, keys.wake),
            (token, self._gc_after_ms),
        )
        return bool(released == 1)

    def _permit_renewals(
        self, renewals: Sequence[Renewal]
    ) -> list[tuple[Any, Sequence[str], Renewal]]:
        keys = (semaphore_keys(self._namespace, r.name) for r in renewals)
        return [
            (EXTEND_PERMITS, (k.meta, k.permits, k.holders), r)
            for k, r in zip(keys, renewals, strict=True)
        ]

    async def _permit_owned(self, name: str, token: str) -> bool:
        keys = semaphore_keys(self._namespace, name)
        owned = await self._transport.script(PERMIT_OWNED, (keys.permits,), (token,))
        return bool(owned == 1)

    async def _inspect_semaphore(self, name: str) -> LockInfo | None:
        keys = semaphore_keys(self._namespace, name)
        return decode_semaphore(await self._transport.script(
            INSPECT_SEMAPHORE, (keys.meta, keys.permits, keys.holders), ()
        ))

    async def _list_semaphores(self, prefix: str) -> list[LockInfo]:
        return await self._listed(
            semaphore_pattern(self._namespace),
            lambda meta: (INSPECT_SEMAPHORE, (meta, f"{meta}:permits", f"{meta}:holders"), ()),
            decode_semaphore, prefix,
        )

    async def _break_semaphore(self, name: str) -> bool:
        keys = semaphore_keys(self._namespace, name)
        broken = await self._transport.script(
            BREAK_SEMAPHORE,
            (keys.meta, keys.permits, keys.holders, keys.wake),
            (self._gc_after_ms,),
        )
        return bool(int(broken) > 0)

    async def _wait_for_permit(self, name: str, seconds: float) -> None:
        """Block on the semaphore's wake list, which each release pushes one item to (so a
        release wakes one waiter), for ``seconds`` (which ``attempt`` bounds)."""
        keys = semaphore_keys(self._namespace, name)
        await self._transport.block(keys.wake, milliseconds(seconds) / 1000)
