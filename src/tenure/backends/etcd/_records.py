"""The one reading of a name's keys as tenure's records: which keys hold the name (for
``inspect``, ``list_records`` and ``break_leases`` alike) and the ``LockInfo`` they make.
Flavour-free: the store reads the keys and their leases' time left, this module judges."""

from __future__ import annotations

import datetime
from collections.abc import Mapping, Sequence

from tenure._types import Kind, LeaseInfo, LockInfo, WaiterInfo, queue_kind
from tenure.backends.etcd._keys import Record, mode_of, unb64
from tenure.backends.etcd._statements import JSON

__all__ = ["fence_of", "fits", "holding", "lease_of", "lock_info"]


def lease_of(kv: JSON) -> str:
    """The id of the etcd lease a key is on ("0": none)."""
    return str(kv.get("lease", "0"))


def holding(kind: str, keys: list[JSON]) -> list[tuple[JSON, Record]]:
    """The keys (oldest first) that hold the name, if their leases are alive: a read-write
    lock's every key not marked queued (only a grant writes one); a lock's oldest; a
    semaphore's keys that ``fits`` (its ``limit`` oldest when every weight is 1). A queued
    key among them holds nothing yet: its waiter is about to move it onto its own lease (or
    to give up), and showing it would report a leader that may never be."""
    records = [(kv, Record.decode(kv.get("value", ""))) for kv in keys]
    if kind == Kind.SEMAPHORE:
        limit = (records[0][1].limit or 1) if records else 1
        fitting = fits(limit, [record.weight for _, record in records])
        records = [entry for entry, fit in zip(records, fitting, strict=True) if fit]
    elif kind != Kind.RWLOCK:
        records = records[:1]
    return [(kv, record) for kv, record in records if not record.queued]


def fits(limit: int, weights: Sequence[int]) -> list[bool]:
    """The weighted FIFO rule over a semaphore's keys in creation (arrival) order, each
    ``weights`` its own, permits and places alike: a key may hold the name iff the weights of
    every key older than it plus its own are at most ``limit``. As the weights are at least
    1, the keys that may hold are among the ``limit`` oldest, and once a key may, it may
    until it goes: keys older than it only go, a new key is the newest."""
    fitting = []
    ahead = 0
    for weight in weights:
        fitting.append(ahead + weight <= limit)
        ahead += weight
    return fitting


def lock_info(
    kind: str, name: str, keys: list[JSON], fence: int, left: Mapping[str, float]
) -> LockInfo:
    """The record of a name: its ``keys`` oldest first, the last ``fence`` recorded, and
    the seconds ``left`` of each holding key's lease (by lease id; below 0: ended)."""
    leases = []
    values = []
    for kv, record in holding(kind, keys):
        seconds = left.get(lease_of(kv), -1.0)
        if seconds < 0:  # etcd counts whole seconds: 0 is a lease in its last second
            continue
        mode = mode_of(unb64(kv["key"]).decode().rpartition("/")[2]) if (
            kind == Kind.RWLOCK) else None
        leases.append(LeaseInfo(
            record.holder, _utc(record.since), _ttl_left(seconds, record),
            int(kv["create_revision"]), mode=mode, fair=record.fair, weight=record.weight,
        ))
        values.append(record.value)
    if kind == Kind.RWLOCK:
        # The waiters: every key marked queued, in creation (arrival) order, each with the
        # holder and the time (the waiter's clock: etcd has none to read) its record names.
        waiters = []
        fair = sum(lease.fair for lease in leases)
        for kv in keys:
            record = Record.decode(kv.get("value", ""))
            if record.queued:
                entry = unb64(kv["key"]).decode().rpartition("/")[2]
                waiters.append(WaiterInfo(record.holder, _utc(record.since), mode_of(entry)))
                fair += record.fair
        # The fence key is written just after a grant: the newest lease may be ahead of it.
        fence = max([fence, *(lease.fence or 0 for lease in leases)])
        return LockInfo(name, fence, None, None, None,
                        kind=queue_kind(len(leases) + len(waiters), fair),
                        leases=tuple(leases), queued=len(waiters), waiters=tuple(waiters))
    if kind == Kind.SEMAPHORE:
        limit = Record.decode(keys[0].get("value", "")).limit if keys else None
        # The fence key lives on the lease of the permit that recorded it: that permit gone
        # (expired, broken) while others hold, the live permits' fences still show.
        fence = max([fence, *(lease.fence or 0 for lease in leases)])
        # The waiters: every key marked queued, in creation (arrival) order, each with its
        # weight, read in the same range as the permits.
        queued = [
            WaiterInfo(record.holder, _utc(record.since), weight=record.weight)
            for record in (Record.decode(kv.get("value", "")) for kv in keys) if record.queued
        ]
        return LockInfo(name, fence, None, None, None, kind="semaphore", limit=limit,
                        leases=tuple(leases), queued=len(queued), waiters=tuple(queued))
    if not leases:
        return LockInfo(name, fence, None, None, None)
    (lease,) = leases
    # The holder key's own creation revision, read with its holder and value: the name's
    # fence key is written just after a grant, so it may still show the previous term.
    return LockInfo(
        name, max(fence, lease.fence or 0), lease.holder, lease.acquired_at, lease.ttl_left,
        value=values[0],
    )


def fence_of(kv: JSON) -> int:
    """The last fence a fence key records: its value, else (empty) its mod revision."""
    value = kv.get("value", "")
    return int(unb64(value)) if value else int(kv["mod_revision"])


def _ttl_left(left: float, record: Record) -> float:
    """The seconds left that ``inspect`` reports: the lease's (etcd counts whole seconds: 0
    is a lease in its last second), at most the ttl its holder asked for (its lease is up to
    a second longer, ``lease_seconds``, which ``lease_overrun`` accounts for)."""
    left = max(left, 0.5)
    return left if record.ttl is None else min(left, record.ttl)


def _utc(since: float) -> datetime.datetime:
    return datetime.datetime.fromtimestamp(since, datetime.UTC)
