"""The one reading of a MongoDB row as a ``LockInfo``, for every kind (both flavours).

Each kind's info pipeline (``_documents``, ``_semaphores``, ``_rwlocks``) projects the same
shape: ``_id``, ``fence``, ``leases`` (the live ones: holder fields, ``acquired_at``,
``expires_at``, and a permit's or queued lease's own ``fence`` and ``mode``), ``now`` (the
server's ``$$NOW`` of that read), and where the kind has them ``limit``, ``queued``,
``places`` (a read-write lock's or a semaphore's live waiting places: holder fields,
``placed_at``, ``seq``, and ``mode`` or ``weight``) and ``value`` (a read-write lock's also
``fair_queued``, and ``fair`` on its leases and places; a semaphore's permits and places their
``weight``, 1 where an older tenure wrote none).
Time left is each expiry less that ``now``: the server's clock, never ours.
"""

from __future__ import annotations

import datetime
from typing import Any

from tenure._types import Holder, Kind, LeaseInfo, LockInfo, WaiterInfo, queue_kind

__all__ = ["to_info", "utc"]


def utc(value: Any) -> datetime.datetime | None:
    """A date read back as an aware UTC datetime (None if it is not a date)."""
    if not isinstance(value, datetime.datetime):
        return None
    return value if value.tzinfo is not None else value.replace(tzinfo=datetime.UTC)


def _lease(entry: dict[str, Any], now: datetime.datetime | None) -> LeaseInfo:
    expires_at = utc(entry.get("expires_at"))
    left = 0.0 if expires_at is None or now is None else (expires_at - now).total_seconds()
    pid, fence, mode = entry.get("pid"), entry.get("fence"), entry.get("mode")
    weight = entry.get("weight")  # a permit's (none: 1, as an older tenure wrote it)
    return LeaseInfo(
        Holder(str(entry.get("host", "")), int(pid) if pid is not None else 0,
               str(entry.get("thread", ""))),
        utc(entry.get("acquired_at")), max(0.0, left),
        int(fence) if fence is not None else None,
        mode if isinstance(mode, str) else None,
        entry.get("fair") is True,
        int(weight) if weight is not None else 1,
    )


def to_info(kind: Kind, row: dict[str, Any]) -> LockInfo:
    """A ``LockInfo`` of ``kind`` from one row of that kind's info pipeline."""
    now = utc(row.get("now"))
    leases = [_lease(entry, now) for entry in row.get("leases") or []]
    leases.sort(key=lambda lease: lease.fence or 0)  # oldest first: fences follow grants
    name, fence = row["_id"], int(row.get("fence") or 0)
    if kind is Kind.LOCK:  # at most one lease, described by the record itself
        if not leases:
            return LockInfo(name, fence, None, None, None)
        value = row.get("value")
        only = leases[0]
        return LockInfo(name, fence, only.holder, only.acquired_at, only.ttl_left,
                        value=value if isinstance(value, str) else None)
    limit, queued = row.get("limit"), int(row.get("queued") or 0)
    shown = kind.value
    if kind is Kind.RWLOCK:
        fair = sum(lease.fair for lease in leases) + int(row.get("fair_queued") or 0)
        shown = queue_kind(len(leases) + queued, fair)
    places = sorted(row.get("places") or [], key=lambda place: int(place.get("seq") or 0))
    return LockInfo(
        name, fence, None, None, None, kind=shown,
        limit=None if limit is None else int(limit), leases=tuple(leases), queued=queued,
        waiters=tuple(_waiter(kind, place) for place in places),
    )


def _waiter(kind: Kind, place: dict[str, Any]) -> WaiterInfo:
    """A live place's waiter (unknown on a place an older tenure wrote: no host), with its
    mode (a read-write lock's) or its weight (a semaphore's)."""
    host, pid, mode = place.get("host"), place.get("pid"), place.get("mode")
    holder = None if host is None else Holder(
        str(host), int(pid) if pid is not None else 0, str(place.get("thread", ""))
    )
    weight = None
    if kind is Kind.SEMAPHORE:
        stored = place.get("weight")
        weight = int(stored) if stored is not None else 1
    return WaiterInfo(holder, utc(place.get("placed_at")),
                      mode if isinstance(mode, str) else None, weight)
