"""What ``memory://`` keeps per (kind, name): one record of leases, whatever the kind, and the
one converter from a record to the ``LockInfo`` the operator's views return.

A lock is a record whose limit is one (its lease may carry a value: an election's leader
value); a semaphore's limit is the caller's (the stored one rules while permits live), and each
permit takes its weight of it; a queued semaphore (weighted FIFO) also counts the weights of
the waiting places ahead. A read-write (or fair) lock grants by mode and arrival from its
waiting places instead of by a limit. Every kind keeps one fence counter per record. Plain
data: the server holds the mutex.
"""

from __future__ import annotations

import dataclasses
import datetime
import math

from tenure._types import (
    Holder,
    Kind,
    LeaseInfo,
    LeaseSpec,
    LockInfo,
    Mode,
    WaiterInfo,
    queue_kind,
)

__all__ = ["Lease", "Place", "Record", "info"]

_WRITE = Mode.WRITE  # (an enum member read from its class is slow on Python 3.11)


@dataclasses.dataclass(slots=True)
class Lease:
    expires_at: float
    holder: Holder
    acquired_at: datetime.datetime
    fence: int
    mode: Mode | None = None
    fair: bool = False
    """Granted to a fair lock (a read-write lock's write handle's lease is not)."""
    weight: int = 1
    """The units of the limit this lease takes (a weighted permit's)."""


@dataclasses.dataclass(slots=True)
class Place:
    """A refused queued attempt's waiting place: it keeps its spot when refreshed."""

    mode: Mode | None
    """What a read-write lock's waiter waits for; None for a semaphore's."""
    arrival: int
    expires_at: float
    holder: Holder | None = None
    """Who waits there (listed by ``inspect``)."""
    since: datetime.datetime | None = None
    """When the place was taken (UTC)."""
    fair: bool = False
    """Held by a fair lock's waiter."""
    weight: int = 1
    """The units a semaphore's waiter will take."""


@dataclasses.dataclass(slots=True)
class Record:
    """A name's leases of one kind, its waiting places and fence counter, and what clean-up
    needs: when it was last written (the expiry clock), the ``gc_after`` of the connection
    that wrote it, and its current heap item (due time and ticket; older items are stale)."""

    used_at: float = 0.0
    gc_after: float | None = None
    due: float = math.inf
    ticket: int = -1
    fence: int = 0
    limit: int = 0
    """The limit stored with the live leases (a semaphore's; a lock's is one)."""
    value: str | None = None
    """The value stored with a lock's lease at its grant (``set_value`` replaces it)."""
    arrivals: int = 0
    leases: dict[str, Lease] = dataclasses.field(default_factory=dict)
    """Token -> lease, in grant order (dicts keep insertion order)."""
    places: dict[str, Place] = dataclasses.field(default_factory=dict)
    """Token -> waiting place, in arrival order."""

    def drop_expired(self, now: float) -> bool:
        """Drop lapsed leases and places; True if any was dropped."""
        # (Skipping empty tables: this runs in every acquire.)
        leases = [t for t, lease in self.leases.items() if lease.expires_at <= now
                  ] if self.leases else ()
        places = [t for t, place in self.places.items() if place.expires_at <= now
                  ] if self.places else ()
        for token in leases:
            del self.leases[token]
        for token in places:
            del self.places[token]
        return bool(leases or places)

    def ends_at(self) -> float:
        """The latest moment anything in the record is or was live (the expiry clock)."""
        return max([
            self.used_at,
            *(lease.expires_at for lease in self.leases.values()),
            *(place.expires_at for place in self.places.values()),
        ])

    def live(self, token: str, now: float) -> Lease | None:
        lease = self.leases.get(token)
        return lease if lease is not None and lease.expires_at > now else None

    def grantable(self, token: str, spec: LeaseSpec) -> bool:
        """The kind's rule, over live leases and places only: a limit of units (each lease
        takes its weight; a queued semaphore's places ahead count with theirs: an attempt
        without a place stands behind every one), or (queued kinds) a writer excludes
        everybody and waits for every place ahead of it, a reader waits only for writers,
        held or ahead of it."""
        if spec.mode is None:  # not a read-write lock (a test of the enum costs more, per try)
            units = sum(lease.weight for lease in self.leases.values())
            if self.places:
                units += sum(place.weight for place in self._ahead(token))
            return units + spec.weight <= spec.limit
        ahead = self._ahead(token)
        if spec.mode is _WRITE:
            return not self.leases and not ahead
        return all(lease.mode is not _WRITE for lease in self.leases.values()) and all(
            place.mode is not _WRITE for place in ahead
        )


    def _ahead(self, token: str) -> list[Place]:
        """The places ahead of ``token``'s (every place, when it holds none)."""
        mine = self.places.get(token)
        return [p for p in self.places.values() if mine is None or p.arrival < mine.arrival]


def info(kind: Kind, name: str, record: Record, now: float) -> LockInfo:
    """The operator's view of ``record``: its live leases (a lock's as its holder), the
    stored limit of a semaphore, the live places of a queued kind."""
    live = [lease for lease in record.leases.values() if lease.expires_at > now]
    if kind is Kind.LOCK:
        if not live:
            return LockInfo(name, record.fence, None, None, None)
        lease = live[0]
        return LockInfo(name, record.fence, lease.holder, lease.acquired_at,
                         lease.expires_at - now, value=record.value)
    leases = tuple(
        LeaseInfo(lease.holder, lease.acquired_at, lease.expires_at - now, lease.fence,
                  None if lease.mode is None else str(lease.mode), lease.fair, lease.weight)
        for lease in live
    )
    places = sorted(
        (place for place in record.places.values() if place.expires_at > now),
        key=lambda place: place.arrival,
    )
    if kind is Kind.SEMAPHORE:
        waiters = tuple(WaiterInfo(place.holder, place.since, weight=place.weight)
                        for place in places)
        return LockInfo(name, record.fence, None, None, None, kind=str(kind), limit=record.limit,
                        leases=leases, queued=len(waiters), waiters=waiters)
    waiters = tuple(WaiterInfo(place.holder, place.since, str(place.mode)) for place in places)
    fair = sum(lease.fair for lease in live) + sum(place.fair for place in places)
    return LockInfo(name, record.fence, None, None, None,
                    kind=queue_kind(len(live) + len(places), fair), leases=leases,
                    queued=len(waiters), waiters=waiters)
