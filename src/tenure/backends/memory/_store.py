"""The in-process store behind ``memory://``: a dict under a mutex, expiry by the clock given.

Every operation runs under one mutex, so each is atomic as the backend contract requires.
"""

from __future__ import annotations

import dataclasses
import datetime
import os
import threading
import time
from collections.abc import Callable

from tenure._errors import limit_mismatch
from tenure._types import Busy, Grant, Holder, LeaseInfo, LockInfo
from tenure._waiters import Waiters, permit_key, queue_key

__all__ = ["MemoryStore", "store_named"]


@dataclasses.dataclass(slots=True)
class _Entry:
    fence: int = 0
    token: str | None = None
    expires_at: float = 0.0
    holder: Holder | None = None
    acquired_at: datetime.datetime | None = None
    value: str | None = None


@dataclasses.dataclass(slots=True)
class _Permit:
    expires_at: float
    holder: Holder
    acquired_at: datetime.datetime
    fence: int


@dataclasses.dataclass(slots=True)
class _Semaphore:
    fence: int = 0
    limit: int = 0
    permits: dict[str, _Permit] = dataclasses.field(default_factory=dict)
    """Token -> permit, in grant order (dicts keep insertion order)."""

    def drop_expired(self, now: float) -> None:
        for token in [t for t, permit in self.permits.items() if permit.expires_at <= now]:
            del self.permits[token]


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
class _Queue:
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


class MemoryStore:
    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.waiters = Waiters()
        self._mutex = threading.Lock()
        self._entries: dict[str, _Entry] = {}
        self._semaphores: dict[str, _Semaphore] = {}
        self._queues: dict[str, _Queue] = {}

    def _live(self, entry: _Entry, now: float) -> bool:
        return entry.token is not None and entry.expires_at > now

    def acquire(
        self, name: str, token: str, ttl: float, holder: Holder, value: str | None = None
    ) -> Grant | Busy:
        with self._mutex:
            now = self.clock()
            entry = self._entries.setdefault(name, _Entry())
            if entry.token == token:
                entry.expires_at = now + ttl
                return Grant(entry.fence)
            if self._live(entry, now):
                return Busy(entry.expires_at - now)
            entry.fence += 1
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

    def release(self, name: str, token: str) -> bool:
        with self._mutex:
            entry = self._entries.get(name)
            if entry is None or entry.token != token:
                return False
            live = self._live(entry, self.clock())
            self._free(entry)
        self.waiters.notify(name)
        return live

    def extend(self, name: str, token: str, ttl: float) -> bool:
        with self._mutex:
            now = self.clock()
            entry = self._entries.get(name)
            if entry is None or entry.token != token or not self._live(entry, now):
                return False
            entry.expires_at = now + ttl
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

    def break_lock(self, name: str) -> bool:
        with self._mutex:
            entry = self._entries.get(name)
            if entry is None or not self._live(entry, self.clock()):
                return False
            self._free(entry)
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
        self, name: str, token: str, ttl: float, holder: Holder, limit: int
    ) -> Grant | Busy:
        with self._mutex:
            now = self.clock()
            entry = self._semaphores.setdefault(name, _Semaphore())
            entry.drop_expired(now)
            mine = entry.permits.get(token)
            if mine is not None:
                mine.expires_at = now + ttl
                return Grant(mine.fence)
            if entry.permits and entry.limit != limit:
                raise limit_mismatch(name, entry.limit, limit)
            entry.limit = limit
            if len(entry.permits) >= limit:
                return Busy(min(p.expires_at for p in entry.permits.values()) - now)
            entry.fence += 1
            entry.permits[token] = _Permit(
                now + ttl, holder, datetime.datetime.now(datetime.UTC), entry.fence
            )
            return Grant(entry.fence)

    def release_permit(self, name: str, token: str) -> bool:
        with self._mutex:
            entry = self._semaphores.get(name)
            permit = None if entry is None else entry.permits.pop(token, None)
            live = permit is not None and permit.expires_at > self.clock()
        if permit is not None:
            self.waiters.notify(permit_key(name))
        return live

    def extend_permit(self, name: str, token: str, ttl: float) -> bool:
        with self._mutex:
            now = self.clock()
            entry = self._semaphores.get(name)
            permit = None if entry is None else entry.permits.get(token)
            if permit is None or permit.expires_at <= now:
                return False
            permit.expires_at = now + ttl
            return True

    def permit_owned(self, name: str, token: str) -> bool:
        with self._mutex:
            entry = self._semaphores.get(name)
            permit = None if entry is None else entry.permits.get(token)
            return permit is not None and permit.expires_at > self.clock()

    def inspect_semaphore(self, name: str) -> LockInfo | None:
        with self._mutex:
            entry = self._semaphores.get(name)
            return None if entry is None else _semaphore_info(name, entry, self.clock())

    def list_semaphores(self, prefix: str) -> list[LockInfo]:
        with self._mutex:
            now = self.clock()
            return [
                _semaphore_info(name, entry, now)
                for name, entry in sorted(self._semaphores.items())
                if name.startswith(prefix)
            ]

    def break_semaphore(self, name: str) -> bool:
        with self._mutex:
            entry = self._semaphores.get(name)
            if entry is None:
                return False
            entry.drop_expired(self.clock())
            broken = bool(entry.permits)
            entry.permits.clear()
        if broken:
            self.waiters.notify(permit_key(name))
        return broken

    # ---- read-write and fair locks: leases with modes and a queue of places per name ----

    def acquire_queued(
        self, name: str, token: str, ttl: float, holder: Holder, *, mode: str, queue_ttl: float
    ) -> Grant | Busy:
        with self._mutex:
            now = self.clock()
            entry = self._queues.setdefault(name, _Queue())
            dropped = entry.drop_expired(now)
            mine = entry.leases.get(token)
            if mine is not None:
                mine.expires_at = now + ttl
                return Grant(mine.fence)
            if entry.grantable(token, mode):
                entry.places.pop(token, None)
                entry.fence += 1
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

    def release_queued(self, name: str, token: str) -> bool:
        with self._mutex:
            entry = self._queues.get(name)
            if entry is None:
                return False
            lease = entry.leases.pop(token, None)
            place = entry.places.pop(token, None)
            live = lease is not None and lease.expires_at > self.clock()
        if lease is not None or place is not None:
            self.waiters.notify(queue_key(name))
        return live

    def extend_queued(self, name: str, token: str, ttl: float) -> bool:
        with self._mutex:
            now = self.clock()
            entry = self._queues.get(name)
            lease = None if entry is None else entry.leases.get(token)
            if lease is None or lease.expires_at <= now:
                return False
            lease.expires_at = now + ttl
            return True

    def queued_owned(self, name: str, token: str) -> bool:
        with self._mutex:
            entry = self._queues.get(name)
            lease = None if entry is None else entry.leases.get(token)
            return lease is not None and lease.expires_at > self.clock()

    def inspect_queue(self, name: str) -> LockInfo | None:
        with self._mutex:
            entry = self._queues.get(name)
            return None if entry is None else _queue_info(name, entry, self.clock())

    def list_queues(self, prefix: str) -> list[LockInfo]:
        with self._mutex:
            now = self.clock()
            return [
                _queue_info(name, entry, now)
                for name, entry in sorted(self._queues.items())
                if name.startswith(prefix)
            ]

    def break_queue(self, name: str) -> bool:
        with self._mutex:
            entry = self._queues.get(name)
            if entry is None:
                return False
            entry.drop_expired(self.clock())
            broken = bool(entry.leases)
            entry.leases.clear()
        if broken:
            self.waiters.notify(queue_key(name))
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
        for p in entry.permits.values()
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
