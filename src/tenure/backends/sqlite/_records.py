"""The one converter from SQLite's rows to ``LockInfo``, for every kind (both flavours)."""

from __future__ import annotations

import datetime
from collections.abc import Iterable, Sequence
from typing import Any

from tenure._types import Holder, Kind, LeaseInfo, LockInfo, WaiterInfo, queue_kind

__all__ = ["record"]


def record(
    kind: Kind, name: str, fence: int, leases: Iterable[Sequence[Any]], *,
    limit: int | None = None, queued: int = 0, value: str | None = None,
    places: Iterable[Sequence[Any]] = (),
) -> LockInfo:
    """The record of ``name``: its ``leases``, each row (host, pid, thread, acquired_at,
    ttl_left, fence, mode), oldest first, and a read-write lock's ``fair`` or a semaphore
    permit's weight after them. A
    lock's one lease is its holder (``LockInfo``'s lock fields); a semaphore's and a
    read-write lock's are its ``leases``. A read-write lock's ``places``, each row (host,
    pid, thread, placed_at, mode, fair), in arrival order, are its waiters (a place without a
    host: an older tenure's, its waiter unknown); a semaphore's, each row (host, pid, thread,
    placed_at, weight), its waiters."""
    semaphore = kind is Kind.SEMAPHORE
    held = tuple(
        LeaseInfo(
            Holder(host, int(pid), thread),
            datetime.datetime.fromtimestamp(acquired_at, datetime.UTC),
            float(ttl_left),
            None if lease_fence is None else int(lease_fence),
            mode,
            bool(not semaphore and extra and extra[0]),
            int(extra[0] or 1) if semaphore and extra else 1,
        )
        for host, pid, thread, acquired_at, ttl_left, lease_fence, mode, *extra in leases
    )
    if kind is Kind.LOCK:
        if not held:
            return LockInfo(name, int(fence), None, None, None)
        (lease,) = held
        return LockInfo(
            name, int(fence), lease.holder, lease.acquired_at, lease.ttl_left, value=value
        )
    if kind is Kind.RWLOCK:
        waiters, fair = [], sum(lease.fair for lease in held)
        for host, pid, thread, placed_at, mode, fair_place in places:
            waiters.append(WaiterInfo(
                None if host is None else Holder(host, int(pid or 0), thread or ""),
                None if placed_at is None
                else datetime.datetime.fromtimestamp(placed_at, datetime.UTC),
                mode,
            ))
            fair += bool(fair_place)
        return LockInfo(name, int(fence), None, None, None,
                        kind=queue_kind(len(held) + queued, fair), leases=held, queued=queued,
                        waiters=tuple(waiters))
    permit_waiters = tuple(
        WaiterInfo(
            None if host is None else Holder(host, int(pid or 0), thread or ""),
            None if placed_at is None
            else datetime.datetime.fromtimestamp(placed_at, datetime.UTC),
            weight=int(weight or 1),
        )
        for host, pid, thread, placed_at, weight in places
    )
    return LockInfo(
        name, int(fence), None, None, None, kind=kind.value, limit=limit, leases=held,
        queued=queued, waiters=permit_waiters,
    )
