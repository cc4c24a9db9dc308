"""The lock's steps on Redis (an election's leadership is a lock lease with a value): each
one Lua script of ``_scripts`` (whose contracts say what each does), and the waits an
attempt makes (``attempt``): a BLPOP with the next acquire pipelined behind it, or a try, a
BLPOP and a try in one round trip."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tenure._types import Busy, Grant, Holder, LeaseSpec, LockInfo, Renewal
from tenure.backends.redis._async.base import AsyncRedisBase
from tenure.backends.redis._errors import digest_collision
from tenure.backends.redis._records import decode_info
from tenure.backends.redis._scripts import (
    ACQUIRE,
    BREAK,
    EXTEND,
    INSPECT,
    LEAVE,
    RELEASE,
    SET_VALUE,
    LockKeys,
    lock_keys,
    meta_pattern,
    milliseconds,
)

__all__ = ["AsyncLockSteps"]


class AsyncLockSteps(AsyncRedisBase):
    """acquire, release, extend, owned, inspect, list, break, set value and wait for the
    lock kind."""

    async def set_value(self, name: str, token: str, value: str) -> bool:
        keys = lock_keys(self._namespace, name)
        done = await self._transport.script(SET_VALUE, (keys.lease,), (token, value))
        return bool(done == 1)

    async def _acquire_lock_lease(
        self, name: str, spec: LeaseSpec, token: str, ttl: float, holder: Holder
    ) -> Grant | Busy:
        """The store's acquire of a lock lease: one ACQUIRE, not after a wait."""
        return await self._acquire_lock(name, token, ttl, holder, spec.value, False)

    async def _acquire_lock(  # noqa: PLR0917 - the store's acquire's arguments, and two
        self, name: str, token: str, ttl: float, holder: Holder, value: str | None,
        waited: bool,
    ) -> Grant | Busy:
        """One ACQUIRE; ``waited``: the attempt has waited (see ACQUIRE's ARGV[7])."""
        keys = lock_keys(self._namespace, name)
        reply = await self._transport.script(
            ACQUIRE,
            (keys.meta, keys.lease, keys.wake, keys.left(token)),
            self._acquire_args(name, token, ttl, holder, value, waited=waited),
        )
        return self._lock_outcome(reply, name)

    def _acquire_args(
        self, name: str, token: str, ttl: float, holder: Holder, value: str | None, *,
        waited: bool, own: bool = False,
    ) -> tuple[Any, ...]:
        """ACQUIRE's ARGV (see its contract in ``_scripts``): ``waited`` when the attempt
        follows a wait; ``own`` to push the attempt's own wake list on a grant."""
        args = (
            token, milliseconds(ttl), name, holder.host, holder.pid, holder.thread,
            "1" if waited else "0", "0" if value is None else "1", value or "",
            self._gc_after_ms, "1",
        )
        return (*args, "1") if own else args

    def _lock_outcome(self, reply: Any, name: str) -> Grant | Busy:
        status, value = reply[0], reply[1]
        if status == 1:
            return Grant(int(value))
        if status == 0:
            self._contended.saw(name)
            left = int(value)
            return Busy(None if left < 0 else left / 1000)
        raise digest_collision("lock", name, value)

    async def _release_lock(self, name: str, token: str) -> bool:
        keys = lock_keys(self._namespace, name)
        released = await self._transport.script(RELEASE, (keys.lease, keys.wake), (token,))
        return bool(released == 1)

    def _lock_renewals(
        self, renewals: Sequence[Renewal]
    ) -> list[tuple[Any, Sequence[str], Renewal]]:
        keys = (lock_keys(self._namespace, r.name) for r in renewals)
        return [(EXTEND, (k.meta, k.lease), r) for k, r in zip(keys, renewals, strict=True)]

    async def _lock_owned(self, name: str, token: str) -> bool:
        keys = lock_keys(self._namespace, name)
        holder = await self._transport.execute("HGET", keys.lease, "token")
        return bool(holder == token.encode())

    async def _inspect_lock(self, name: str) -> LockInfo | None:
        keys = lock_keys(self._namespace, name)
        return decode_info(await self._transport.script(INSPECT, (keys.meta, keys.lease), ()))

    async def _list_locks(self, prefix: str) -> list[LockInfo]:
        return await self._listed(
            meta_pattern(self._namespace),
            lambda meta: (INSPECT, (meta, f"{meta}:lease"), ()), decode_info, prefix,
        )

    async def _break_lock(self, name: str) -> bool:
        keys = lock_keys(self._namespace, name)
        broken = await self._transport.script(BREAK, (keys.lease, keys.wake), ())
        return bool(broken == 1)

    # ---- waiting (``attempt`` drives these) ---------------------------------------------

    async def _wait_then_acquire(  # noqa: PLR0917 - the acquire's arguments, and the wait
        self, name: str, token: str, ttl: float, holder: Holder, value: str | None,
        seconds: float,
    ) -> Any:
        """BLPOP the lock's wake list for ``seconds`` with an ACQUIRE pipelined behind it;
        ACQUIRE's reply (None: the server had lost the script)."""
        keys = lock_keys(self._namespace, name)
        return await self._transport.wait(
            keys.wake, milliseconds(seconds) / 1000,
            (keys.meta, keys.lease, keys.wake, keys.left(token)),
            self._acquire_args(name, token, ttl, holder, value, waited=True),
        )

    async def _try_then_wait(  # noqa: PLR0917 - the acquire's arguments, and the wait
        self, name: str, token: str, ttl: float, holder: Holder, value: str | None,
        seconds: float,
    ) -> tuple[Any, Any]:
        """ACQUIRE, BLPOP and ACQUIRE in one round trip (``transport.try_then_wait``): both
        ACQUIREs' replies (None for one the server could not run for want of its script).
        Both store ``value``: a grant by either is the campaign's."""
        keys = lock_keys(self._namespace, name)
        lock_keys_4 = (keys.meta, keys.lease, keys.wake, keys.left(token))
        return await self._transport.try_then_wait(
            (keys.wake, keys.own(token)), seconds,
            ((*lock_keys_4, keys.own(token)),
             self._acquire_args(name, token, ttl, holder, value, waited=False, own=True)),
            (lock_keys_4, self._acquire_args(name, token, ttl, holder, value, waited=True)),
        )

    async def _leave(self, name: str, token: str) -> None:
        """LEAVE (see its contract): a lease a pipelined ACQUIRE took goes back, a wake-up a
        BLPOP took is passed on, and an ACQUIRE still in flight behind a wait grants nothing."""
        keys: LockKeys = lock_keys(self._namespace, name)
        mark_ms = milliseconds(self._waits.longest) + 5000
        await self._transport.script(
            LEAVE, (keys.lease, keys.wake, keys.left(token)), (token, mark_ms)
        )
