"""The semaphore's steps on Redis: each one Lua script of ``_semaphores`` (key layout, the
weighted FIFO grant rule, fences and every script's contract are there), and a waiter's wait
on a wake list of its own (a waiter with a place) or on the semaphore's shared one."""

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
    keys_of_semaphore,
    semaphore_keys,
    semaphore_pattern,
)

__all__ = ["AsyncPermitSteps"]


class AsyncPermitSteps(AsyncRedisBase):
    """Weighted counting semaphores: per name a zset of permits by server-clock expiry (their
    records and the heavier ones' weights in hashes), and a queue of waiting places by
    arrival (their ends in a zset, their waiters and weights in a hash)."""

    async def _acquire_permit(
        self, name: str, spec: LeaseSpec, token: str, ttl: float, holder: Holder
    ) -> Grant | Busy:
        limit = spec.limit
        keys = semaphore_keys(self._namespace, name)
        place = 0 if spec.queue_ttl is None else milliseconds(spec.queue_ttl)
        status, value = await self._transport.script(
            ACQUIRE_PERMIT,
            keys.all,
            (name, token, milliseconds(ttl), limit, holder.host, holder.pid,
             holder.thread, self._gc_after_ms, spec.weight, place),
        )
        if status == 1:
            return Grant(int(value))
        if status == 0:
            left = int(value)
            return Busy(None if left < 0 else left / 1000)
        if status == 2:
            raise limit_mismatch(name, int(value), limit)
        raise digest_collision("semaphore", name, value)

    async def _release_permit(self, name: str, token: str) -> bool:
        keys = semaphore_keys(self._namespace, name)
        released = await self._transport.script(
            RELEASE_PERMIT, keys.all, (token, self._gc_after_ms)
        )
        return bool(released == 1)

    def _permit_renewals(
        self, renewals: Sequence[Renewal]
    ) -> list[tuple[Any, Sequence[str], Renewal]]:
        return [
            (EXTEND_PERMITS, semaphore_keys(self._namespace, r.name).all, r) for r in renewals
        ]

    async def _permit_owned(self, name: str, token: str) -> bool:
        keys = semaphore_keys(self._namespace, name)
        owned = await self._transport.script(PERMIT_OWNED, (keys.permits,), (token,))
        return bool(owned == 1)

    async def _inspect_semaphore(self, name: str) -> LockInfo | None:
        keys = semaphore_keys(self._namespace, name)
        return decode_semaphore(await self._transport.script(INSPECT_SEMAPHORE, keys.all, ()))

    async def _list_semaphores(self, prefix: str) -> list[LockInfo]:
        return await self._listed(
            semaphore_pattern(self._namespace),
            lambda meta: (INSPECT_SEMAPHORE, keys_of_semaphore(meta).all, ()),
            decode_semaphore, prefix,
        )

    async def _break_semaphore(self, name: str) -> bool:
        keys = semaphore_keys(self._namespace, name)
        broken = await self._transport.script(
            BREAK_SEMAPHORE, keys.all, (self._gc_after_ms,)
        )
        return bool(int(broken) > 0)

    async def _wait_for_permit(self, name: str, seconds: float) -> None:
        """Block on the semaphore's shared wake list, which each release pushes one item to
        (so a release wakes one waiter without a place), for ``seconds`` (which ``attempt``
        bounds)."""
        keys = semaphore_keys(self._namespace, name)
        await self._transport.block(keys.wake, milliseconds(seconds) / 1000)

    async def _wait_for_permit_turn(self, name: str, token: str, seconds: float) -> None:
        """Block on ``token``'s own wake list, which a release (or a break, a waiter leaving,
        a lapse noticed) pushes to when its turn may have come, for ``seconds`` (which
        ``attempt`` bounds)."""
        wake = semaphore_keys(self._namespace, name).wake_of(token)
        await self._transport.block(wake, milliseconds(seconds) / 1000)
