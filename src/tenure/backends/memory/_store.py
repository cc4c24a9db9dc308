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
from tenure._waiters import Waiters, permit_key

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


class MemoryStore:
    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.waiters = Waiters()
        self._mutex = threading.Lock()
        self._entries: dict[str, _Entry] = {}
        self._semaphores: dict[str, _Semaphore] = {}

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
