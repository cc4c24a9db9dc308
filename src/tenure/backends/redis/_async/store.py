"""The Redis store: the narrow verbs (``tenure._async.store``), each handed to its kind's
steps (``locks``, ``semaphores``, ``rwlocks``: one table, ``KindSteps`` per kind) over one
shared state, and the attempts (``attempt``) that keep a waiter's state between its
tries."""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from tenure._types import Busy, Grant, Holder, Kind, LeaseSpec, LockInfo, Renewal
from tenure.backends.redis._async.attempt import AsyncRedisAttempt
from tenure.backends.redis._async.locks import AsyncLockSteps
from tenure.backends.redis._async.rwlocks import AsyncQueueSteps
from tenure.backends.redis._async.semaphores import AsyncPermitSteps
from tenure.backends.redis._config import RedisSettings, parse

__all__ = ["AsyncRedisBackend", "KindSteps"]

Infos = list[LockInfo]
Renewing = list[tuple[Any, Sequence[str], Renewal]]
"""Renewals as ``_renew_by_slot`` takes them: each lease's extend script, keys, renewal."""


@dataclasses.dataclass(frozen=True, slots=True)
class KindSteps:
    """One kind's steps: what each verb does for that kind."""

    acquire: Callable[[str, LeaseSpec, str, float, Holder], Awaitable[Grant | Busy]]
    release: Callable[[str, str], Awaitable[bool]]
    renewals: Callable[[Sequence[Renewal]], Renewing]
    owned: Callable[[str, str], Awaitable[bool]]
    inspect: Callable[[str], Awaitable[LockInfo | None]]
    list_records: Callable[[str], Awaitable[Infos]]
    break_leases: Callable[[str], Awaitable[bool]]


class AsyncRedisBackend(AsyncLockSteps, AsyncPermitSteps, AsyncQueueSteps):
    """Options (URL query or keyword): ``socket_timeout``, ``socket_connect_timeout`` (seconds,
    default 3), ``retries`` (redis-py connection retries, default 0), ``namespace`` (key
    prefix, default ``tenure``), ``db``, ``max_connections``, ``wait_connections`` (default
    64), ``handoff_window`` (accepted and ignored since a release hands the lock straight to
    the longest-blocked waiter), ``gc_after`` (seconds an idle semaphore's or
    read-write lock's record is kept, default 10 minutes; ``none``: forever), ``client_name``,
    ``health_check_interval``;
    keyword only: ``username``, ``password``, ``sentinel_username``, ``sentinel_password``,
    ``ssl_*`` (TLS files, ``ssl_cert_reqs``, ``ssl_check_hostname``, ``ssl_min_version``...)."""
    attempt_class = AsyncRedisAttempt

    @classmethod
    def from_url(cls, url: str, **options: Any) -> AsyncRedisBackend:
        return cls(parse(url, options))

    def __init__(self, settings: RedisSettings) -> None:
        super().__init__(settings)
        self._steps = {
            Kind.LOCK: KindSteps(
                self._acquire_lock_lease, self._release_lock, self._lock_renewals,
                self._lock_owned, self._inspect_lock, self._list_locks, self._break_lock,
            ),
            Kind.SEMAPHORE: KindSteps(
                self._acquire_permit, self._release_permit, self._permit_renewals,
                self._permit_owned, self._inspect_semaphore, self._list_semaphores,
                self._break_semaphore,
            ),
            Kind.RWLOCK: KindSteps(
                self._acquire_queued, self._release_queued, self._queued_renewals,
                self._queued_owned, self._inspect_queue, self._list_queues, self._break_queue,
            ),
        }

    async def acquire(
        self, name: str, spec: LeaseSpec, token: str, ttl: float, holder: Holder
    ) -> Grant | Busy:
        return await self._steps[spec.kind].acquire(name, spec, token, ttl, holder)

    async def release(self, kind: Kind, name: str, token: str) -> bool:
        return await self._steps[kind].release(name, token)

    async def extend_many(self, renewals: Sequence[Renewal]) -> list[bool]:
        """Every kind's renewals in one round trip per node (one script call per kind and
        Cluster slot), answers in the order asked."""
        by_kind: dict[Kind, list[int]] = {}
        for index, renewal in enumerate(renewals):
            by_kind.setdefault(Kind(renewal.kind), []).append(index)
        order: list[int] = []
        leases: Renewing = []
        for kind, indexes in by_kind.items():
            leases += self._steps[kind].renewals([renewals[i] for i in indexes])
            order += indexes
        results = [False] * len(renewals)
        for index, extended in zip(order, await self._renew_by_slot(leases), strict=True):
            results[index] = extended
        return results

    async def owned(self, kind: Kind, name: str, token: str) -> bool:
        return await self._steps[kind].owned(name, token)

    async def inspect(self, kind: Kind, name: str) -> LockInfo | None:
        return await self._steps[kind].inspect(name)

    async def list_records(self, kind: Kind, prefix: str) -> list[LockInfo]:
        return await self._steps[kind].list_records(prefix)

    async def break_leases(self, kind: Kind, name: str) -> bool:
        return await self._steps[kind].break_leases(name)
