"""In-process wake-ups: a release wakes the waiters of the same name in this process at once.
Shared by the lock logic's waiting helpers and the backends (the core imports no backend).

Used by backends without server notifications (memory, SQLite): waiters in other processes
fall back to back-off, waiters in this process hand off without delay.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Protocol

__all__ = ["Settable", "Waiters", "permit_key", "queue_key"]


class Settable(Protocol):
    def set(self) -> None: ...


class Waiters:
    def __init__(self) -> None:
        self._mutex = threading.Lock()
        self._by_name: dict[str, set[Settable]] = {}

    @contextlib.contextmanager
    def waiting(self, name: str, signal: Settable) -> Iterator[None]:
        with self._mutex:
            self._by_name.setdefault(name, set()).add(signal)
        try:
            yield
        finally:
            with self._mutex:
                signals = self._by_name.get(name)
                if signals is not None:
                    signals.discard(signal)
                    if not signals:
                        del self._by_name[name]

    def notify(self, name: str) -> None:
        with self._mutex:
            signals = list(self._by_name.get(name, ()))
        for signal in signals:
            signal.set()


def permit_key(name: str) -> str:
    """The key a semaphore's waiters wait under: apart from a lock of the same name."""
    return "semaphore\0" + name


def queue_key(name: str) -> str:
    """The key a read-write (or fair) lock's waiters wait under: apart from the others."""
    return "rwlock\0" + name
