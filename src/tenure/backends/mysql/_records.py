"""The one converter from MySQL's rows to ``LockInfo``, for every kind (both flavours)."""

from __future__ import annotations

import datetime
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from tenure._types import Holder, Kind, LeaseInfo, LockInfo, WaiterInfo

__all__ = ["records"]

Row = tuple[Any, Any, Any, Any, Any, "tuple[Any, ...] | None"]
"""(name bytes, fence, limit, queued, value, lease): a lease is (host, pid, thread,
acquired_at, left_us, fence, mode), a read-write lock's with whether a fair lock's after
them, a semaphore permit's with its weight, or None for a record row without one."""


def records(
    kind: Kind, rows: Iterable[Row],
    places: Mapping[bytes, Sequence[tuple[Any, ...]]] | None = None,
) -> list[LockInfo]:
    """The records of ``rows`` (one or more per name, in order): a lock's one lease is its
    holder (``LockInfo``'s lock fields); a semaphore's and a read-write lock's are its
    ``leases``, oldest first. ``places``: a read-write lock's waiters per name, in arrival
    order, each (host, pid, thread, since, mode); NULLs where an older tenure took it; a
    semaphore's, each (host, pid, thread, since, weight)."""
    semaphore = kind is Kind.SEMAPHORE
    by_name: dict[bytes, tuple[tuple[Any, ...], list[LeaseInfo]]] = {}
    for name, fence, limit, queued, value, lease in rows:
        entry = by_name.setdefault(bytes(name), ((fence, limit, queued, value), []))
        if lease is not None:
            host, pid, thread, acquired_at, left_us, lease_fence, mode, *extra = lease
            entry[1].append(LeaseInfo(
                Holder(host, int(pid), thread), acquired_at.replace(tzinfo=datetime.UTC),
                max(0.0, int(left_us) / 1e6),
                None if lease_fence is None else int(lease_fence),
                None if mode is None else str(mode),
                not semaphore and extra == [True],
                int(extra[0]) if semaphore and extra and extra[0] is not None else 1,
            ))
    found = []
    for raw, ((fence, limit, queued, value), leases) in by_name.items():
        name = raw.decode("utf-8")
        if kind is not Kind.LOCK:
            found.append(LockInfo(
                name, int(fence), None, None, None, kind=kind.value,
                limit=None if limit is None else int(limit), leases=tuple(leases),
                queued=int(queued),
                waiters=_waiters((places or {}).get(raw, ()), semaphore=semaphore),
            ))
        elif not leases:
            found.append(LockInfo(name, int(fence), None, None, None))
        else:
            (lease_info,) = leases
            found.append(LockInfo(
                name, int(fence), lease_info.holder, lease_info.acquired_at,
                lease_info.ttl_left, value=None if value is None else str(value),
            ))
    return found


def _waiters(
    places: Sequence[tuple[Any, ...]], *, semaphore: bool
) -> tuple[WaiterInfo, ...]:
    """The waiters of ``places``: a read-write lock's with their mode (the row's last), a
    semaphore's with their weight."""
    return tuple(
        WaiterInfo(
            None if host is None else Holder(host, int(pid or 0), thread or ""),
            None if since is None else since.replace(tzinfo=datetime.UTC),
            None if semaphore or last is None else str(last),
            int(last or 1) if semaphore else None,
        )
        for host, pid, thread, since, last in places
    )
