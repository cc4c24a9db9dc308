"""Read-write locks and fair locks on Redis: each step one Lua script of ``_rwlocks`` (key
layout, grant rule, fences and every script's contract are there), and a waiter's wait on a
wake list of its own, which releases push to when its turn may have come."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tenure._errors import InvalidArgument
from tenure._types import Busy, Grant, Holder, LeaseSpec, LockInfo, Mode, Renewal
from tenure.backends.redis._async.base import AsyncRedisBase
from tenure.backends.redis._errors import digest_collision
from tenure.backends.redis._records import decode_queue
from tenure.backends.redis._rwlocks import (
    ACQUIRE_QUEUED,
    BREAK_QUEUE,
    EXTEND_QUEUED,
    INSPECT_QUEUE,
    QUEUED_OWNED,
    RELEASE_QUEUED,
    is_queue_meta,
    keys_of_meta,
    queue_keys,
    queue_pattern,
)
from tenure.backends.redis._scripts import milliseconds

__all__ = ["AsyncQueueSteps"]


class AsyncQueueSteps(AsyncRedisBase):
    """Queued leases with modes: per name a hash of leases, sorted sets of lease ends, of
    places by arrival (all, and writers') and of place ends, and a wake list per waiter."""

    async def _acquire_queued(
        self, name: str, spec: LeaseSpec, token: str, ttl: float, holder: Holder
    ) -> Grant | Busy:
        mode, queue_ttl = spec.mode, spec.queue_ttl
        if mode not in (Mode.READ, Mode.WRITE) or queue_ttl is None:
            raise InvalidArgument(
                f"a queued lease takes a mode ('read' or 'write', not {mode!r}) and a queue ttl"
            )
        keys = queue_keys(self._namespace, name)
        status, value = await self._transport.script(
            ACQUIRE_QUEUED,
            keys.all,
            (name, token, milliseconds(ttl), str(mode), milliseconds(queue_ttl), holder.host,
             holder.pid, holder.thread, self._gc_after_ms, "1" if spec.fair else "0"),
        )
        if status == 1:
            return Grant(int(value))
        if status == 0:
            left = int(value)
            return Busy(None if left < 0 else left / 1000)
        raise digest_collision("read-write lock", name, value)

    async def _release_queued(self, name: str, token: str) -> bool:
        keys = queue_keys(self._namespace, name)
        released = await self._transport.script(
            RELEASE_QUEUED, keys.all, (token, self._gc_after_ms)
        )
        return bool(released == 1)

    def _queued_renewals(
        self, renewals: Sequence[Renewal]
    ) -> list[tuple[Any, Sequence[str], Renewal]]:
        return [(EXTEND_QUEUED, queue_keys(self._namespace, r.name).all, r) for r in renewals]

    async def _queued_owned(self, name: str, token: str) -> bool:
        keys = queue_keys(self._namespace, name)
        owned = await self._transport.script(QUEUED_OWNED, keys.all, (token,))
        return bool(owned == 1)

    async def _inspect_queue(self, name: str) -> LockInfo | None:
        keys = queue_keys(self._namespace, name)
        return decode_queue(await self._transport.script(INSPECT_QUEUE, keys.all, ()))

    async def _list_queues(self, prefix: str) -> list[LockInfo]:
        return await self._listed(
            queue_pattern(self._namespace),
            lambda meta: (INSPECT_QUEUE, keys_of_meta(meta).all, ()) if is_queue_meta(meta)
            else None,
            decode_queue, prefix,
        )

    async def _break_queue(self, name: str) -> bool:
        keys = queue_keys(self._namespace, name)
        broken = await self._transport.script(BREAK_QUEUE, keys.all, (self._gc_after_ms,))
        return bool(int(broken) > 0)

    async def _wait_for_turn(self, name: str, token: str, seconds: float) -> None:
        """Block on ``token``'s own wake list, which a release (or a break, a waiter leaving,
        a lapse noticed) pushes to when its turn may have come, for ``seconds`` (which
        ``attempt`` bounds)."""
        wake = queue_keys(self._namespace, name).wake(token)
        await self._transport.block(wake, milliseconds(seconds) / 1000)
