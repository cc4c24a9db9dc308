"""The one converter from SQLite's rows to ``LockInfo``, for every kind (both flavours)."""

from __future__ import annotations

import datetime
from collections.abc import Iterable, Sequence
from typing import Any

from tenure._types import Holder, Kind, LeaseInfo, LockInfo, queue_kind

__all__ = ["record"]


def record(
    kind: Kind, name: str, fence: int, leases: Iterable[Sequence[Any]], *,
    limit: int | None = None, queued: int = 0, value: str | None = None,
    fair_queued: int = 0,
) -> LockInfo:
    """The record of ``name``: its ``leases``, each row (host, pid, thread, acquired_at,
    ttl_left, fence, mode), oldest first, and a read-write lock's ``fair`` after them. A
    lock's one lease is its holder (``LockInfo``'s lock fields); a semaphore's and a
    read-write lock's are its ``leases``; ``fair_queued`` of a read-write lock's ``queued``
    places are fair locks'."""
    held = tuple(
        LeaseInfo(
            Holder(host, int(pid), thread),
            datetime.datetime.fromtimestamp(acquired_at, datetime.UTC),
            float(ttl_left),
            None if lease_fence is None else int(lease_fence),
            mode,
            bool(fair and fair[0]),
        )
        for host, pid, thread, acquired_at, ttl_left, lease_fence, mode, *fair in leases
    )
    if kind is Kind.LOCK:
        if not held:
            return LockInfo(name, int(fence), None, None, None)
        (lease,) = held
        return LockInfo(
            name, int(fence), lease.holder, lease.acquired_at, lease.ttl_left, value=value
        )
    if kind is Kind.RWLOCK:
        fair = sum(lease.fair for lease in held) + fair_queued
        return LockInfo(name, int(fence), None, None, None,
                        kind=queue_kind(len(held) + queued, fair), leases=held, queued=queued)
    return LockInfo(
        name, int(fence), None, None, None, kind=kind.value, limit=limit, leases=held,
        queued=queued,
    )
