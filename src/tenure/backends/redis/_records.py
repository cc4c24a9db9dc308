"""Every INSPECT reply as a ``LockInfo``: the one place a Redis record becomes one, for every
kind (each kind's INSPECT script, in ``_scripts``, ``_semaphores`` and ``_rwlocks``, says
what its reply holds). Shared by both flavours, and by Redlock for each node's lock record.
"""

from __future__ import annotations

import datetime
import json
from typing import Any

from tenure._types import Holder, Kind, LeaseInfo, LockInfo, WaiterInfo, queue_kind

__all__ = ["decode_info", "decode_queue", "decode_record", "decode_semaphore"]


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def _since(units: Any, per_second: int) -> datetime.datetime:
    return datetime.datetime.fromtimestamp(int(units) / per_second, datetime.UTC)


def decode_record(kind: Kind, reply: Any) -> LockInfo | None:
    """The INSPECT reply of a record of ``kind`` as a LockInfo; None: never used."""
    if kind is Kind.SEMAPHORE:
        return decode_semaphore(reply)
    if kind is Kind.RWLOCK:
        return decode_queue(reply)
    return decode_info(reply)


def decode_info(reply: Any) -> LockInfo | None:
    """INSPECT's reply (a lock's record: holder fields and value nil when free; since in
    microseconds) as a LockInfo."""
    if reply is None:
        return None
    name, fence, host, pid, thread, since, ttl_ms, value = reply
    ttl_ms = int(ttl_ms)
    if host is None or ttl_ms == -2:
        return LockInfo(_text(name), int(fence), None, None, None)
    return LockInfo(
        _text(name),
        int(fence),
        Holder(_text(host), int(pid), _text(thread)),
        _since(since, 1_000_000),
        None if ttl_ms < 0 else ttl_ms / 1000,
        value=None if value is None else _text(value),
    )


def _leases(now: Any, records: Any, mode: bool) -> tuple[LeaseInfo, ...]:
    """The live leases of a read-write lock's reply (JSON record, expiry ms, ...; a record
    ``[fence, host, pid, thread, since ms]``, after its mode where ``mode``, then 1 for a
    fair lock's where the record says), oldest first (fences follow grant order)."""
    leases = []
    for index in range(0, len(records), 2):
        fields = json.loads(_text(records[index]))
        lease_mode = str(fields.pop(0)) if mode else None
        fence, host, pid, thread, since, *fair = fields
        expiry = float(_text(records[index + 1]))
        leases.append(LeaseInfo(
            Holder(str(host), int(pid), str(thread)), _since(since, 1000),
            (expiry - int(_text(now))) / 1000, int(fence), lease_mode, fair == [1],
        ))
    leases.sort(key=lambda lease: lease.fence or 0)
    return tuple(leases)


def decode_semaphore(reply: Any) -> LockInfo | None:
    """INSPECT_SEMAPHORE's reply as a LockInfo (``kind="semaphore"``): each permit with its
    weight (1 for a permit an older tenure wrote, without one), the waiters in arrival order
    with theirs (none in the reply of an older tenure's script)."""
    if not reply:
        return None
    name, fence, limit, now, permits, *places = reply
    waiters = tuple(_permit_waiter(place) for place in (places[0] if places else ()))
    return LockInfo(
        _text(name), int(_text(fence)) if fence is not None else 0, None, None, None,
        kind="semaphore", limit=int(limit) if limit is not None else None,
        leases=_permits(now, permits), queued=len(waiters), waiters=waiters,
    )


def _permits(now: Any, records: Any) -> tuple[LeaseInfo, ...]:
    """A semaphore's live permits (JSON record ``[fence, host, pid, thread, since ms,
    weight]``, expiry ms, ...; an older tenure's record has no weight: 1), oldest first."""
    leases = []
    for index in range(0, len(records), 2):
        fence, host, pid, thread, since, *weight = json.loads(_text(records[index]))
        expiry = float(_text(records[index + 1]))
        leases.append(LeaseInfo(
            Holder(str(host), int(pid), str(thread)), _since(since, 1000),
            (expiry - int(_text(now))) / 1000, int(fence),
            weight=int(weight[0]) if weight else 1,
        ))
    leases.sort(key=lambda lease: lease.fence or 0)
    return tuple(leases)


def _permit_waiter(place: Any) -> WaiterInfo:
    """A semaphore's place record ``[weight, host, pid, thread, since ms]``; '' for a place
    without one (its waiter unknown, its weight 1)."""
    text = _text(place)
    if not text:
        return WaiterInfo(None, None, weight=1)
    weight, host, pid, thread, since = json.loads(text)
    return WaiterInfo(Holder(str(host), int(pid), str(thread)), _since(since, 1000),
                      weight=int(weight))


def decode_queue(reply: Any) -> LockInfo | None:
    """INSPECT_QUEUE's reply as a LockInfo (``kind="rwlock"``, or "fair": ``queue_kind``)."""
    if not reply:
        return None
    name, fence, now, queued, records, places, fair_queued = reply
    leases = _leases(now, records, True)
    fair = sum(lease.fair for lease in leases) + int(fair_queued)
    return LockInfo(
        _text(name), int(_text(fence)), None, None, None,
        kind=queue_kind(len(leases) + int(queued), fair), leases=leases, queued=int(queued),
        waiters=tuple(_waiter(place) for place in places),
    )


def _waiter(place: Any) -> WaiterInfo:
    """A place's record ``[mode, host, pid, thread, since ms]``; '' for a place an older
    tenure took (its waiter unknown)."""
    text = _text(place)
    if not text:
        return WaiterInfo(None, None)
    mode, host, pid, thread, since = json.loads(text)
    return WaiterInfo(Holder(str(host), int(pid), str(thread)), _since(since, 1000), str(mode))
