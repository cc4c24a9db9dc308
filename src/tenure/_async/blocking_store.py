"""Stores whose atomic steps are blocking calls on a driver object (sqlite3, PyMySQL).

The wing's blocking store does the work, each step one short statement or transaction, and
answers the narrow verbs of ``AsyncStore`` with the kind as data (``BlockingStore``). This
shell runs every call through ``io.run_blocking`` (a worker thread under asyncio, the
caller's own thread otherwise), and its attempts wait for releases announced in this process
(``waiters``, keyed by kind and name). A wing adds its URL parsing, its declared traits and,
where it keeps waiting state between tries, its own attempt.
Written for asyncio; ``scripts/unasync.py`` generates the threads flavour.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Generic, Protocol, TypeVar

from tenure._async.store import AsyncAttempt, AsyncStore
from tenure._async.wakeups import wait_for_notice
from tenure._concurrency import async_io as io
from tenure._types import Busy, Grant, Holder, Kind, LeaseSpec, LockInfo, Renewal
from tenure._waiters import Waiters, permit_key, queue_key

__all__ = ["AsyncBlockingAttempt", "AsyncBlockingShell", "BlockingStore", "notice_key"]


class BlockingStore(Protocol):
    """The store's verbs as blocking calls (see ``AsyncStore`` for each one's contract), and
    the in-process waiters its releases notify (under ``notice_key``)."""

    waiters: Waiters

    def acquire(
        self, name: str, spec: LeaseSpec, token: str, ttl: float, holder: Holder
    ) -> Grant | Busy: ...
    def release(self, kind: Kind, name: str, token: str) -> bool: ...
    def extend_many(self, renewals: Sequence[Renewal]) -> list[bool]: ...
    def owned(self, kind: Kind, name: str, token: str) -> bool: ...
    def inspect(self, kind: Kind, name: str) -> LockInfo | None: ...
    def list_records(self, kind: Kind, prefix: str) -> list[LockInfo]: ...
    def break_leases(self, kind: Kind, name: str) -> bool: ...
    def set_value(self, name: str, token: str, value: str) -> bool: ...
    def close(self) -> None: ...


def notice_key(kind: Kind, name: str) -> str:
    """The key under which a release of ``kind`` on ``name`` notifies this process's
    waiters: each kind's apart from the others' (a lock and a semaphore of one name)."""
    if kind is Kind.SEMAPHORE:
        return permit_key(name)
    if kind is Kind.RWLOCK:
        return queue_key(name)
    return name


StoreT = TypeVar("StoreT", bound=BlockingStore)


class AsyncBlockingAttempt(AsyncAttempt):
    """The polling attempt, woken early by a release in this process."""

    store: AsyncBlockingShell[Any]

    async def wait(self, timeout: float, busy: Busy) -> None:
        await wait_for_notice(
            self.store.store.waiters, notice_key(self.spec.kind, self.name),
            self.before_place_lapses(timeout),
        )


class AsyncBlockingShell(AsyncStore, Generic[StoreT]):
    """``AsyncStore`` over a blocking store: each verb one ``io.run_blocking`` call."""
    attempt_class = AsyncBlockingAttempt

    def __init__(self, store: StoreT) -> None:
        self.store = store

    async def acquire(
        self, name: str, spec: LeaseSpec, token: str, ttl: float, holder: Holder
    ) -> Grant | Busy:
        return await io.run_blocking(self.store.acquire, name, spec, token, ttl, holder)

    async def release(self, kind: Kind, name: str, token: str) -> bool:
        return await io.run_blocking(self.store.release, kind, name, token)

    async def extend_many(self, renewals: Sequence[Renewal]) -> list[bool]:
        return await io.run_blocking(self.store.extend_many, renewals)

    async def owned(self, kind: Kind, name: str, token: str) -> bool:
        return await io.run_blocking(self.store.owned, kind, name, token)

    async def inspect(self, kind: Kind, name: str) -> LockInfo | None:
        return await io.run_blocking(self.store.inspect, kind, name)

    async def list_records(self, kind: Kind, prefix: str) -> list[LockInfo]:
        return await io.run_blocking(self.store.list_records, kind, prefix)

    async def break_leases(self, kind: Kind, name: str) -> bool:
        return await io.run_blocking(self.store.break_leases, kind, name)

    async def set_value(self, name: str, token: str, value: str) -> bool:
        return await io.run_blocking(self.store.set_value, name, token, value)

    async def aclose(self) -> None:
        self.store.close()
