"""The Redis store: the narrow verbs (``tenure._async.store``), each dispatching on the
kind to its steps (``locks``, ``semaphores``, ``rwlocks``) over one shared state, and the
attempts (``attempt``) that keep a waiter's state between its tries."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tenure._types import Busy, Grant, Holder, Kind, LeaseSpec, LockInfo, Renewal
from tenure.backends.redis._async.attempt import AsyncRedisAttempt
from tenure.backends.redis._async.locks import AsyncLockSteps
from tenure.backends.redis._async.rwlocks import AsyncQueueSteps
from tenure.backends.redis._async.semaphores import AsyncPermitSteps
from tenure.backends.redis._config import parse

__all__ = ["AsyncRedisBackend"]


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

    async def acquire(
        self, name: str, spec: LeaseSpec, token: str, ttl: float, holder: Holder
    ) -> Grant | Busy:
        if spec.kind is Kind.SEMAPHORE:
            return await self._acquire_permit(name, token, ttl, holder, spec.limit)
        if spec.kind is Kind.RWLOCK:
            return await self._acquire_queued(
                name, token, ttl, holder, spec.mode, spec.queue_ttl, fair=spec.fair
            )
        return await self._acquire_lock(name, token, ttl, holder, spec.value, False)

    async def release(self, kind: Kind, name: str, token: str) -> bool:
        if kind is Kind.SEMAPHORE:
            return await self._release_permit(name, token)
        if kind is Kind.RWLOCK:
            return await self._release_queued(name, token)
        return await self._release_lock(name, token)

    async def extend_many(self, renewals: Sequence[Renewal]) -> list[bool]:
        """Every kind's renewals in one round trip per node (one script call per kind and
        Cluster slot), answers in the order asked."""
        by_kind: dict[Kind, list[int]] = {}
        for index, renewal in enumerate(renewals):
            by_kind.setdefault(Kind(renewal.kind), []).append(index)
        order: list[int] = []
        leases: list[Any] = []
        for kind, indexes in by_kind.items():
            batch = [renewals[i] for i in indexes]
            if kind is Kind.SEMAPHORE:
                leases += self._permit_renewals(batch)
            elif kind is Kind.RWLOCK:
                leases += self._queued_renewals(batch)
            else:
                leases += self._lock_renewals(batch)
            order += indexes
        results = [False] * len(renewals)
        for index, extended in zip(order, await self._renew_by_slot(leases), strict=True):
            results[index] = extended
        return results

    async def owned(self, kind: Kind, name: str, token: str) -> bool:
        if kind is Kind.SEMAPHORE:
            return await self._permit_owned(name, token)
        if kind is Kind.RWLOCK:
            return await self._queued_owned(name, token)
        return await self._lock_owned(name, token)

    async def inspect(self, kind: Kind, name: str) -> LockInfo | None:
        if kind is Kind.SEMAPHORE:
            return await self._inspect_semaphore(name)
        if kind is Kind.RWLOCK:
            return await self._inspect_queue(name)
        return await self._inspect_lock(name)

    async def list_records(self, kind: Kind, prefix: str) -> list[LockInfo]:
        if kind is Kind.SEMAPHORE:
            return await self._list_semaphores(prefix)
        if kind is Kind.RWLOCK:
            return await self._list_queues(prefix)
        return await self._list_locks(prefix)

    async def break_leases(self, kind: Kind, name: str) -> bool:
        if kind is Kind.SEMAPHORE:
            return await self._break_semaphore(name)
        if kind is Kind.RWLOCK:
            return await self._break_queue(name)
        return await self._break_lock(name)
