"""The one reader of inspection rows (for both flavours): a row of the lock, permit or
read-write statements' ``inspect`` and ``list`` answers -> ``LockInfo``."""

from __future__ import annotations

import datetime
from typing import Any

from tenure._types import Holder, Kind, LeaseInfo, LockInfo, WaiterInfo, queue_kind

__all__ = ["record"]


def record(kind: Kind, row: tuple[Any, ...]) -> LockInfo:
    """``row`` as ``LockInfo``: each kind's statements return its own columns (``_sql``,
    ``_semaphore_sql``, ``_rwlock_sql``); its leases are read here, oldest first, and a
    queued kind's waiters in arrival order (a semaphore's each with its weight)."""
    if kind is Kind.SEMAPHORE:
        name, fence, limit, *permits = row
        leases = tuple(
            _lease(host, pid, thread, acquired_at=acquired.astimezone(datetime.UTC),
                   ttl_left=ttl_left, fence=permit, weight=int(weight))
            for host, pid, thread, acquired, ttl_left, permit, weight
            in zip(*permits[:7], strict=True)
        )
        waiters = tuple(
            WaiterInfo(
                None if host is None else Holder(host, int(pid or 0), thread or ""),
                None if placed is None else placed.astimezone(datetime.UTC),
                weight=int(weight),
            )
            for host, pid, thread, placed, weight in zip(*permits[7:], strict=True)
        )
        return LockInfo(name, int(fence), None, None, None, kind=str(kind),
                        limit=None if limit is None else int(limit), leases=leases,
                        queued=len(waiters), waiters=waiters)
    if kind is Kind.RWLOCK:
        name, fence, queued, entries, places = row
        leases = tuple(
            _lease(host, pid, thread,
                   acquired_at=datetime.datetime.fromtimestamp(float(acquired_at), datetime.UTC),
                   ttl_left=ttl_left, fence=lease_fence, mode=mode, fair=fair is True)
            for mode, host, pid, thread, acquired_at, ttl_left, lease_fence, fair
            in entries or ()
        )
        waiters = tuple(
            WaiterInfo(
                None if host is None else Holder(host, int(pid or 0), thread or ""),
                None if since is None
                else datetime.datetime.fromtimestamp(float(since), datetime.UTC),
                mode,
            )
            for mode, host, pid, thread, since, _fair in places or ()
        )
        fair_entries = sum(lease.fair for lease in leases) + sum(
            fair is True for *_, fair in places or ()
        )
        return LockInfo(name, int(fence), None, None, None,
                        kind=queue_kind(len(leases) + int(queued), fair_entries),
                        queued=int(queued), leases=leases, waiters=waiters)
    name, fence, live, host, pid, thread, acquired_at, ttl_left, value = row
    if not live:
        return LockInfo(name, int(fence), None, None, None)
    lease = _lease(host, pid, thread, acquired_at=acquired_at.astimezone(datetime.UTC),
                   ttl_left=ttl_left, fence=fence)
    # A lock's one lease is told by holder, acquired_at and ttl_left (LockInfo.holders).
    return LockInfo(name, int(fence), lease.holder, lease.acquired_at, lease.ttl_left,
                    value=value)


def _lease(host: str, pid: Any, thread: str, *, acquired_at: datetime.datetime,
           ttl_left: Any, fence: Any, mode: str | None = None, fair: bool = False,
           weight: int = 1) -> LeaseInfo:
    return LeaseInfo(Holder(host, int(pid), thread), acquired_at, max(0.0, float(ttl_left)),
                     int(fence), mode, fair, weight)
