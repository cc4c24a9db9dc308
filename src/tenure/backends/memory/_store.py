"""The in-process store behind ``memory://``: a dict under a mutex, expiry by the clock given.

Every operation runs under one mutex, so each is atomic as the backend contract requires.

Fences and clean-up (DESIGN rule 10): a grant's fence is ``max(last fence + 1, the host's
wall clock in microseconds)``, so it still increases strictly per name, and a name whose
record was removed (idle for ``gc_after``, or a fresh store after a fork) starts again above
every fence it issued instead of at 1. Clean-up is amortized: every record is on one
min-heap by the earliest time it could be due (now + ``gc_after`` at a write; a record's
item is replaced only when a write makes it due sooner, e.g. a release before the lease's
end); each acquire first pops at most ``SWEEP_LIMIT`` items that are due, removes those
records that are still idle, and puts the others back at their real due time. An acquire
(the only step that creates records) therefore does bounded work, and records go at least as
fast as acquires create them; releases and renewals never sweep.
"""

from __future__ import annotations

import dataclasses
import datetime
import heapq
import itertools
import math
import os
import threading
import time
from collections.abc import Callable
from typing import TypeVar

from tenure._errors import limit_mismatch
from tenure._types import Busy, Grant, Holder, LeaseInfo, LockInfo
from tenure._waiters import Waiters, permit_key, queue_key

__all__ = ["SWEEP_LIMIT", "MemoryStore", "store_named", "wall_clock_us"]

SWEEP_LIMIT = 16
"""Heap items a write may pop to collect idle records: more than the one record a write can
create, so clean-up keeps up with any rate of new names, and small enough that no write pays
for a backlog."""

_LOCK, _SEMAPHORE, _QUEUE = 0, 1, 2
"""Which table a heap item points into."""


def wall_clock_us() -> int:
    """The host's wall clock in whole microseconds since the epoch: the floor of every fence.
    (Not the expiry clock: that one is monotonic and starts anywhere.)"""
    return time.time_ns() // 1000


@dataclasses.dataclass(slots=True)
class _Record:
    """What clean-up needs of every record: when it was last written (the expiry clock), the
    ``gc_after`` of the connection that wrote it, and its current heap item (due time and
    ticket; older items of the record are stale and skipped)."""

    used_at: float = 0.0
    gc_after: float | None = None
    due: float = math.inf
    ticket: int = -1


@dataclasses.dataclass(slots=True)
class _Entry(_Record):
    fence: int = 0
    token: str | None = None
    expires_at: float = 0.0
    holder: Holder | None = None
    acquired_at: datetime.datetime | None = None
    value: str | None = None

    def ends_at(self) -> float:
        """The latest moment anything in the record is or was live (the expiry clock)."""
        return max(self.used_at, self.expires_at)


@dataclasses.dataclass(slots=True)
class _Permit:
    expires_at: float
    holder: Holder
    acquired_at: datetime.datetime
    fence: int


@dataclasses.dataclass(slots=True)
class _Semaphore(_Record):
    fence: int = 0
    limit: int = 0
    leases: dict[str, _Permit] = dataclasses.field(default_factory=dict)
    """Token -> permit, in grant order (dicts keep insertion order)."""

    def drop_expired(self, now: float) -> None:
        for token in [t for t, permit in self.leases.items() if permit.expires_at <= now]:
            del self.leases[token]

    def ends_at(self) -> float:
        return max([self.used_at, *(permit.expires_at for permit in self.leases.values())])


@dataclasses.dataclass(slots=True)
class _Lease:
    mode: str
    expires_at: float
    holder: Holder
    acquired_at: datetime.datetime
    fence: int


@dataclasses.dataclass(slots=True)
class _Place:
    mode: str
    arrival: int
    expires_at: float


@dataclasses.dataclass(slots=True)
class _Queue(_Record):
    """A read-write (or fair) lock: its leases, its waiting places, one fence counter."""

    fence: int = 0
    arrivals: int = 0
    leases: dict[str, _Lease] = dataclasses.field(default_factory=dict)
    """Token -> lease, in grant order."""
    places: dict[str, _Place] = dataclasses.field(default_factory=dict)
    """Token -> waiting place, in arrival order (a place keeps its spot when refreshed)."""

    def drop_expired(self, now: float) -> bool:
        """Drop lapsed leases and places; True if any was dropped."""
        leases = [t for t, lease in self.leases.items() if lease.expires_at <= now]
        places = [t for t, place in self.places.items() if place.expires_at <= now]
        for token in leases:
            del self.leases[token]
        for token in places:
            del self.places[token]
        return bool(leases or places)

    def ends_at(self) -> float:
        return max([
            self.used_at,
            *(lease.expires_at for lease in self.leases.values()),
            *(place.expires_at for place in self.places.values()),
        ])

    def grantable(self, token: str, mode: str) -> bool:
        mine = self.places.get(token)
        ahead = [
            place for place in self.places.values() if mine is None or place.arrival < mine.arrival
        ]
        if mode == "write":
            return not self.leases and not ahead
        return all(lease.mode != "write" for lease in self.leases.values()) and all(
            place.mode != "write" for place in ahead
        )


_Leased = TypeVar("_Leased", _Semaphore, _Queue)
"""A record holding a set of leases: a semaphore's permits, a queued lock's leases."""


class MemoryStore:
    """``clock``: seconds on a monotonic clock, for expiry and clean-up. ``fence_floor``: the
    least fence a grant may take (default the wall clock in microseconds); a test may pass
    its own to follow the fences exactly."""

    def __init__(
        self,
        clock: Callable[[], float] = time.monotonic,
        fence_floor: Callable[[], int] = wall_clock_us,
    ) -> None:
        self.clock = clock
        self.fence_floor = fence_floor
        self.waiters = Waiters()
        self._mutex = threading.Lock()
        self._entries: dict[str, _Entry] = {}
        self._semaphores: dict[str, _Semaphore] = {}
        self._queues: dict[str, _Queue] = {}
        # (due, sequence, table, name): the earliest a record could be removed; the sequence
        # keeps tuples from ever comparing further.
        self._due: list[tuple[float, int, int, str]] = []
        self._sequence = itertools.count()

    # ---- clean-up ---------------------------------------------------------------------------

    def _used(
        self, table: int, name: str, record: _Record, now: float, gc_after: float | None
    ) -> None:
        """Note a write to ``record``: it may be removed ``gc_after`` after its last lease or
        place ends, and no sooner than ``gc_after`` after now."""
        record.used_at = now
        record.gc_after = gc_after
        if gc_after is not None and now + gc_after < record.due:
            self._schedule(table, name, record, now + gc_after)

    def _schedule(self, table: int, name: str, record: _Record, at: float) -> None:
        record.due = at
        record.ticket = next(self._sequence)
        heapq.heappush(self._due, (at, record.ticket, table, name))

    def _collect(self, now: float) -> None:
        """Remove the records that are due, popping at most SWEEP_LIMIT heap items. A popped
        record that was used since it was scheduled goes back at its real due time, which is
        past every lease and place it holds, so a live one is never removed."""
        due = self._due
        tables: tuple[dict[str, _Entry], dict[str, _Semaphore], dict[str, _Queue]] = (
            self._entries, self._semaphores, self._queues,
        )
        for _ in range(SWEEP_LIMIT):
            if not due or due[0][0] > now:
                return
            _, ticket, table, name = heapq.heappop(due)
            record = tables[table].get(name)
            if record is None or record.ticket != ticket:
                continue  # a stale item: the record was rescheduled sooner, or removed
            if record.gc_after is None:  # last written by a connection that keeps records
                record.due, record.ticket = math.inf, -1
                continue
            at = record.ends_at() + record.gc_after
            if at <= now:
                del tables[table][name]
            else:
                self._schedule(table, name, record, at)

    def _live(self, entry: _Entry, now: float) -> bool:
        return entry.token is not None and entry.expires_at > now

    def acquire(
        self,
        name: str,
        token: str,
        ttl: float,
        holder: Holder,
        value: str | None = None,
        *,
        gc_after: float | None = None,
    ) -> Grant | Busy:
        with self._mutex:
            now = self.clock()
            if self._due and self._due[0][0] <= now:  # (inline: most acquires have none due)
                self._collect(now)
            entry = self._entries.get(name)
            if entry is None:
                entry = self._entries[name] = _Entry()
            if entry.token == token:
                entry.expires_at = now + ttl
                self._used(_LOCK, name, entry, now, gc_after)
                return Grant(entry.fence)
            if self._live(entry, now):
                return Busy(entry.expires_at - now)
            self._used(_LOCK, name, entry, now, gc_after)
            entry.fence = max(entry.fence + 1, self.fence_floor())
            entry.token = token
            entry.expires_at = now + ttl
            entry.holder = holder
            entry.acquired_at = datetime.datetime.now(datetime.UTC)
            entry.value = value
            return Grant(entry.fence)

    def set_value(self, name: str, token: str, value: str) -> bool:
        with self._mutex:
            entry = self._entries.get(name)
            if entry is None or entry.token != token or not self._live(entry, self.clock()):
                return False
            entry.value = value
            return True

    def release(self, name: str, token: str, *, gc_after: float | None = None) -> bool:
        with self._mutex:
            entry = self._entries.get(name)
            if entry is None or entry.token != token:
                return False
            now = self.clock()
            live = self._live(entry, now)
            self._free(entry)
            self._used(_LOCK, name, entry, now, gc_after)
        self.waiters.notify(name)
        return live

    def extend(self, name: str, token: str, ttl: float, *, gc_after: float | None = None
               ) -> bool:
        with self._mutex:
            now = self.clock()
            entry = self._entries.get(name)
            if entry is None or entry.token != token or not self._live(entry, now):
                return False
            entry.expires_at = now + ttl
            self._used(_LOCK, name, entry, now, gc_after)
            return True

    def owned(self, name: str, token: str) -> bool:
        with self._mutex:
            entry = self._entries.get(name)
            return entry is not None and entry.token == token and self._live(entry, self.clock())

    def inspect(self, name: str) -> LockInfo | None:
        with self._mutex:
            entry = self._entries.get(name)
            return None if entry is None else self._info(name, entry, self.clock())

    def list_locks(self, prefix: str) -> list[LockInfo]:
        with self._mutex:
            now = self.clock()
            return [
                self._info(name, entry, now)
                for name, entry in sorted(self._entries.items())
                if name.startswith(prefix)
            ]

    def break_lock(self, name: str, *, gc_after: float | None = None) -> bool:
        with self._mutex:
            now = self.clock()
            entry = self._entries.get(name)
            if entry is None or not self._live(entry, now):
                return False
            self._free(entry)
            self._used(_LOCK, name, entry, now, gc_after)
        self.waiters.notify(name)
        return True

    def _free(self, entry: _Entry) -> None:
        entry.token = None
        entry.holder = None
        entry.acquired_at = None
        entry.expires_at = 0.0
        entry.value = None

    def _info(self, name: str, entry: _Entry, now: float) -> LockInfo:
        if not self._live(entry, now):
            return LockInfo(name, entry.fence, None, None, None)
        return LockInfo(
            name,
            entry.fence,
            entry.holder,
            entry.acquired_at,
            entry.expires_at - now,
            value=entry.value,
        )

    # ---- semaphores: a set of permits per name -------------------------------------------

    def acquire_permit(
        self,
        name: str,
        token: str,
        ttl: float,
        holder: Holder,
        limit: int,
        *,
        gc_after: float | None = None,
    ) -> Grant | Busy:
        with self._mutex:
            now = self.clock()
            if self._due and self._due[0][0] <= now:  # (inline: most acquires have none due)
                self._collect(now)
            entry = self._semaphores.get(name)
            if entry is None:
                entry = self._semaphores[name] = _Semaphore()
            self._used(_SEMAPHORE, name, entry, now, gc_after)
            entry.drop_expired(now)
            mine = entry.leases.get(token)
            if mine is not None:
                mine.expires_at = now + ttl
                return Grant(mine.fence)
            if entry.leases and entry.limit != limit:
                raise limit_mismatch(name, entry.limit, limit)
            entry.limit = limit
            if len(entry.leases) >= limit:
                return Busy(min(p.expires_at for p in entry.leases.values()) - now)
            entry.fence = max(entry.fence + 1, self.fence_floor())
            entry.leases[token] = _Permit(
                now + ttl, holder, datetime.datetime.now(datetime.UTC), entry.fence
            )
            return Grant(entry.fence)

    def release_permit(self, name: str, token: str, *, gc_after: float | None = None) -> bool:
        with self._mutex:
            now = self.clock()
            entry = self._semaphores.get(name)
            permit = None if entry is None else entry.leases.pop(token, None)
            live = permit is not None and permit.expires_at > now
            if entry is not None and permit is not None:
                self._used(_SEMAPHORE, name, entry, now, gc_after)
        if permit is not None:
            self.waiters.notify(permit_key(name))
        return live

    def extend_permit(
        self, name: str, token: str, ttl: float, *, gc_after: float | None = None
    ) -> bool:
        return self._extend_in(
            self._semaphores, _SEMAPHORE, name, token, ttl, gc_after=gc_after)

    def permit_owned(self, name: str, token: str) -> bool:
        return self._owned_in(self._semaphores, name, token)

    def inspect_semaphore(self, name: str) -> LockInfo | None:
        return self._inspect_in(self._semaphores, _semaphore_info, name)

    def list_semaphores(self, prefix: str) -> list[LockInfo]:
        return self._list_in(self._semaphores, _semaphore_info, prefix)

    def break_semaphore(self, name: str, *, gc_after: float | None = None) -> bool:
        return self._break_in(self._semaphores, _SEMAPHORE, permit_key, name, gc_after)

    # ---- read-write and fair locks: leases with modes and a queue of places per name ----

    def acquire_queued(
        self,
        name: str,
        token: str,
        ttl: float,
        holder: Holder,
        *,
        mode: str,
        queue_ttl: float,
        gc_after: float | None = None,
    ) -> Grant | Busy:
        with self._mutex:
            now = self.clock()
            if self._due and self._due[0][0] <= now:  # (inline: most acquires have none due)
                self._collect(now)
            entry = self._queues.get(name)
            if entry is None:
                entry = self._queues[name] = _Queue()
            self._used(_QUEUE, name, entry, now, gc_after)
            dropped = entry.drop_expired(now)
            mine = entry.leases.get(token)
            if mine is not None:
                mine.expires_at = now + ttl
                return Grant(mine.fence)
            if entry.grantable(token, mode):
                entry.places.pop(token, None)
                entry.fence = max(entry.fence + 1, self.fence_floor())
                entry.leases[token] = _Lease(
                    mode, now + ttl, holder, datetime.datetime.now(datetime.UTC), entry.fence
                )
                granted: Grant | Busy = Grant(entry.fence)
            else:
                place = entry.places.get(token)
                if place is None:
                    entry.arrivals += 1
                    entry.places[token] = _Place(mode, entry.arrivals, now + queue_ttl)
                else:
                    place.expires_at = now + queue_ttl
                ends = [lease.expires_at - now for lease in entry.leases.values()]
                granted = Busy(min(ends) if ends else None)
        if dropped:
            # A lapsed lease or place may have been all that held a waiter back.
            self.waiters.notify(queue_key(name))
        return granted

    def release_queued(self, name: str, token: str, *, gc_after: float | None = None) -> bool:
        with self._mutex:
            entry = self._queues.get(name)
            if entry is None:
                return False
            now = self.clock()
            lease = entry.leases.pop(token, None)
            place = entry.places.pop(token, None)
            live = lease is not None and lease.expires_at > now
            if lease is not None or place is not None:
                self._used(_QUEUE, name, entry, now, gc_after)
        if lease is not None or place is not None:
            self.waiters.notify(queue_key(name))
        return live

    def extend_queued(
        self, name: str, token: str, ttl: float, *, gc_after: float | None = None
    ) -> bool:
        return self._extend_in(self._queues, _QUEUE, name, token, ttl, gc_after=gc_after)

    def queued_owned(self, name: str, token: str) -> bool:
        return self._owned_in(self._queues, name, token)

    def inspect_queue(self, name: str) -> LockInfo | None:
        return self._inspect_in(self._queues, _queue_info, name)

    def list_queues(self, prefix: str) -> list[LockInfo]:
        return self._list_in(self._queues, _queue_info, prefix)

    def break_queue(self, name: str, *, gc_after: float | None = None) -> bool:
        return self._break_in(self._queues, _QUEUE, queue_key, name, gc_after)

    # ---- the steps semaphores and queued locks share: a name's set of leases --------------

    def _extend_in(
        self, table: dict[str, _Leased], kind: int, name: str, token: str, ttl: float, *,
        gc_after: float | None,
    ) -> bool:
        with self._mutex:
            now = self.clock()
            entry = table.get(name)
            lease = None if entry is None else entry.leases.get(token)
            if entry is None or lease is None or lease.expires_at <= now:
                return False
            lease.expires_at = now + ttl
            self._used(kind, name, entry, now, gc_after)
            return True

    def _owned_in(self, table: dict[str, _Leased], name: str, token: str) -> bool:
        with self._mutex:
            entry = table.get(name)
            lease = None if entry is None else entry.leases.get(token)
            return lease is not None and lease.expires_at > self.clock()

    def _inspect_in(
        self, table: dict[str, _Leased], info: Callable[[str, _Leased, float], LockInfo],
        name: str,
    ) -> LockInfo | None:
        with self._mutex:
            entry = table.get(name)
            return None if entry is None else info(name, entry, self.clock())

    def _list_in(
        self, table: dict[str, _Leased], info: Callable[[str, _Leased, float], LockInfo],
        prefix: str,
    ) -> list[LockInfo]:
        with self._mutex:
            now = self.clock()
            return [
                info(name, entry, now)
                for name, entry in sorted(table.items())
                if name.startswith(prefix)
            ]

    def _break_in(
        self, table: dict[str, _Leased], kind: int, wake_key: Callable[[str], str], name: str,
        gc_after: float | None,
    ) -> bool:
        with self._mutex:
            entry = table.get(name)
            if entry is None:
                return False
            now = self.clock()
            entry.drop_expired(now)
            broken = bool(entry.leases)
            entry.leases.clear()
            if broken:
                self._used(kind, name, entry, now, gc_after)
        if broken:
            self.waiters.notify(wake_key(name))
        return broken


def _queue_info(name: str, entry: _Queue, now: float) -> LockInfo:
    leases = tuple(
        LeaseInfo(lease.holder, lease.acquired_at, lease.expires_at - now, lease.fence, lease.mode)
        for lease in entry.leases.values()
        if lease.expires_at > now
    )
    queued = sum(1 for place in entry.places.values() if place.expires_at > now)
    return LockInfo(
        name, entry.fence, None, None, None, kind="rwlock", leases=leases, queued=queued
    )


def _semaphore_info(name: str, entry: _Semaphore, now: float) -> LockInfo:
    leases = tuple(
        LeaseInfo(p.holder, p.acquired_at, p.expires_at - now, p.fence)
        for p in entry.leases.values()
        if p.expires_at > now
    )
    return LockInfo(
        name, entry.fence, None, None, None, kind="semaphore", limit=entry.limit, leases=leases
    )


_stores: dict[str, MemoryStore] = {}
_stores_mutex = threading.Lock()


def store_named(name: str) -> MemoryStore:
    """The process-wide store called ``name`` (``memory://`` is "", ``memory://x`` is "x")."""
    with _stores_mutex:
        return _stores.setdefault(name, MemoryStore())


def _forget_after_fork() -> None:
    # One store per process: the child starts empty, holding nothing of its parent's.
    global _stores_mutex
    _stores.clear()
    _stores_mutex = threading.Lock()


os.register_at_fork(after_in_child=_forget_after_fork)
