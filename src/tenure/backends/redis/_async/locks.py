"""The lock's steps on Redis: each one Lua script of ``_scripts`` (whose contracts say what
each does), and a waiter's wait, which pipelines its next acquire behind its BLPOP (see
``tenure.backends.redis._waiting.LockWaiter``)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from tenure._concurrency import async_io as io
from tenure._errors import BackendError
from tenure._types import Busy, Grant, Holder, LockInfo, Renewal
from tenure.backends.redis._async.base import AsyncRedisBase
from tenure.backends.redis._scripts import (
    ACQUIRE,
    BREAK,
    EXTEND,
    INSPECT,
    LEAVE,
    RELEASE,
    SET_VALUE,
    LockKeys,
    decode_info,
    lock_keys,
    meta_pattern,
    milliseconds,
)
from tenure.backends.redis._waiting import LockWaiter, waiter_of

__all__ = ["AsyncLockSteps"]


class AsyncLockSteps(AsyncRedisBase):
    """acquire, release, extend, owned, inspect, list, break and wait for the mutex."""

    async def acquire(
        self, name: str, token: str, ttl: float, holder: Holder, waited: Busy | None = None
    ) -> Grant | Busy:
        return await self._acquire(name, token, ttl, holder, waited, None)

    async def acquire_with_value(
        self,
        name: str,
        token: str,
        ttl: float,
        holder: Holder,
        *,
        value: str,
        waited: Busy | None = None,
    ) -> Grant | Busy:
        return await self._acquire(name, token, ttl, holder, waited, value)

    async def set_value(self, name: str, token: str, value: str) -> bool:
        keys = lock_keys(self._namespace, name)
        with self._translated("proclaim", name):
            done = await self._transport.script(SET_VALUE, (keys.lease,), (token, value))
        return bool(done == 1)

    async def _acquire(  # noqa: PLR0917 - the core acquire's arguments, plus the value
        self,
        name: str,
        token: str,
        ttl: float,
        holder: Holder,
        waited: Busy | None,
        value: str | None,
    ) -> Grant | Busy:
        waiter = waiter_of(self, waited, name)
        if waiter is not None and (
            waiter.token != token or waiter.ttl != ttl or waiter.value != value
        ):
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
                (keys.meta, keys.lease, keys.wake, keys.left(token)),
                self._acquire_args(
                    name, token, ttl, holder, value,
                    waited=waiter is not None and waiter.waited,
                ),
            )
        return self._outcome(
            reply, waiter, name, token=token, ttl=ttl, holder=holder, lease_value=value
        )

    async def acquire_or_wait(
        self, name: str, token: str, ttl: float, holder: Holder, wait: float
    ) -> Grant | Busy | None:
        """Try, wait and try again in one round trip (``transport.try_then_wait``), for an
        attempt on a name this client found held within ``CONTENDED_FOR``: under contention
        that try is refused, and its request of its own was one of the three a contended
        acquisition sent (try, wait, release). Elsewhere None: a plain try (a grant then
        costs no extra commands)."""
        wait = min(wait, self._waits.longest)
        if not self._contended.recently(name) or not self._waits.take(wait):
            return None
        keys = lock_keys(self._namespace, name)
        lock_keys_4 = (keys.meta, keys.lease, keys.wake, keys.left(token))
        waiter = LockWaiter(self, name, token, ttl, holder, waited=True)
        try:
            sent_at = time.monotonic()
            with self._translated("acquire", name):
                first, then = await self._transport.try_then_wait(
                    (keys.wake, keys.own(token)), wait,
                    ((*lock_keys_4, keys.own(token)),
                     self._acquire_args(name, token, ttl, holder, None, waited=False, own=True)),
                    (lock_keys_4,
                     self._acquire_args(name, token, ttl, holder, None, waited=True)),
                )
        except BaseException:
            # As a cancelled wait (see wait_for_release): a lease either ACQUIRE may have
            # taken, and a wake-up the BLPOP may have taken, go back.
            await io.run_cleanup(self._leave, keys, token, milliseconds(wait) + 5000)
            raise
        finally:
            self._waits.give()
        if first is None:
            return None  # the server lost its scripts: a plain acquire loads them again
        outcome = self._outcome(first, waiter, name, token=token, ttl=ttl, holder=holder)
        if isinstance(outcome, Busy):
            waiter.outcome_sent_at = sent_at
            waiter.outcome = then
        # A grant from the first try: the BLPOP took the item it pushed to the attempt's own
        # list, and the second try, the same token's, kept the lease and its fence.
        return outcome

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

    def _kept_outcome(self, waiter: LockWaiter, reply: Any) -> Grant | Busy | None:
        """The outcome of the acquire pipelined behind the last wait, if still usable."""
        if reply[0] == 0:
            left = int(reply[1])
            return Busy(None if left < 0 else left / 1000, waiter)
        if reply[0] == 1:
            # Granted at some moment after the wait was sent: the lease counts from then.
            return Grant(int(reply[1]), age=max(0.0, time.monotonic() - waiter.outcome_sent_at))
        return None

    def _outcome(
        self, reply: Any, waiter: LockWaiter | None, name: str, *, token: str, ttl: float,
        holder: Holder, lease_value: str | None = None,
    ) -> Grant | Busy:
        status, value = reply[0], reply[1]
        if status == 1:
            return Grant(int(value))
        if status == 0:
            self._contended.saw(name)
            left = int(value)
            return Busy(
                None if left < 0 else left / 1000,
                waiter or LockWaiter(self, name, token, ttl, holder, lease_value),
            )
        stored = value.decode("utf-8", "replace") if isinstance(value, bytes) else value
        raise BackendError(
            f"Redis {self.settings.display}: the key of lock {name!r} already belongs to "
            f"lock {stored!r} (a SHA-256 digest collision); use another name"
        )

    async def release(self, name: str, token: str) -> bool:
        keys = lock_keys(self._namespace, name)
        with self._translated("release", name):
            released = await self._transport.script(RELEASE, (keys.lease, keys.wake), (token,))
        return bool(released == 1)

    async def extend(self, name: str, token: str, ttl: float) -> bool:
        keys = lock_keys(self._namespace, name)
        with self._translated("extend", name):
            (extended,) = await self._transport.script(
                EXTEND, (keys.meta, keys.lease), (self._gc_after_ms, token, milliseconds(ttl))
            )
        return bool(extended == 1)

    async def extend_many(self, renewals: Sequence[Renewal]) -> list[bool]:
        keys = [lock_keys(self._namespace, r.name) for r in renewals]
        return await self._renew_by_slot(EXTEND, renewals, [(k.meta, k.lease) for k in keys])

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
            broken = await self._transport.script(BREAK, (keys.lease, keys.wake), ())
        return bool(broken == 1)

    # ---- waiting ---------------------------------------------------------------------------

    async def wait_for_release(
        self, name: str, timeout: float, busy: Busy | None = None
    ) -> None:
        """Block on the lock's wake list until a release pushes to it and this waiter is the
        one blocked longest, or for ``timeout`` (at most half the socket timeout: the read
        must not time out first), then try to acquire in the same round trip (see
        ``LockWaiter``)."""
        waiter = waiter_of(self, busy, name)
        seconds = min(timeout, self._waits.longest)
        if waiter is None or not self._waits.take(seconds):
            await io.sleep(timeout)
            return
        keys = lock_keys(self._namespace, name)
        token = waiter.token
        wait_ms = milliseconds(seconds)
        acquire = self._acquire_args(
            name, token, waiter.ttl, waiter.holder, waiter.value, waited=True
        )
        waiter.outcome = None
        waiter.waited = True
        try:
            sent_at = time.monotonic()
            with self._translated("wait", name):
                acquired = await self._transport.wait(
                    keys.wake, wait_ms / 1000,
                    (keys.meta, keys.lease, keys.wake, keys.left(token)), acquire,
                )
        except BaseException:
            # Cancelled or failed mid-wait: the BLPOP may have taken a wake-up, and the
            # pipelined acquire the lock. Give both back.
            await io.run_cleanup(self._leave, keys, token, milliseconds(seconds) + 5000)
            raise
        finally:
            self._waits.give()
        waiter.outcome_sent_at = sent_at
        waiter.outcome = acquired

    async def abandon_wait(self, name: str, busy: Busy) -> None:
        """The attempt gave up after waiting (timed out, or cancelled while its wait ran on
        to its end): the acquire pipelined behind its last BLPOP may have been granted, its
        reply never to be picked up. LEAVE gives such a lease back (and wakes the next
        waiter), and keeps a wait still in flight from taking one."""
        waiter = waiter_of(self, busy, name)
        if waiter is None or not waiter.waited:
            return
        await self._leave(
            lock_keys(self._namespace, name), waiter.token,
            milliseconds(self._waits.longest) + 5000,
        )

    async def _leave(self, keys: LockKeys, token: str, mark_ms: int) -> None:
        with self._translated("leave the queue"):
            await self._transport.script(
                LEAVE, (keys.lease, keys.wake, keys.left(token)), (token, mark_ms)
            )
