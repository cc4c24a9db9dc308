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

from tenure._types import Busy, Grant, Holder, LockInfo
from tenure.backends._waiters import Waiters

__all__ = ["MemoryStore", "store_named"]


@dataclasses.dataclass(slots=True)
class _Entry:
    fence: int = 0
    token: str | None = None
    expires_at: float = 0.0
    holder: Holder | None = None
    acquired_at: datetime.datetime | None = None


class MemoryStore:
    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.waiters = Waiters()
        self._mutex = threading.Lock()
        self._entries: dict[str, _Entry] = {}

    def _live(self, entry: _Entry, now: float) -> bool:
        return entry.token is not None and entry.expires_at > now

    def acquire(self, name: str, token: str, ttl: float, holder: Holder) -> Grant | Busy:
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
            return Grant(entry.fence)

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

    def _info(self, name: str, entry: _Entry, now: float) -> LockInfo:
        if not self._live(entry, now):
            return LockInfo(name, entry.fence, None, None, None)
        return LockInfo(name, entry.fence, entry.holder, entry.acquired_at, entry.expires_at - now)


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
