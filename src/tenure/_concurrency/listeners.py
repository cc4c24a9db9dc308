"""Callbacks that any thread may add and call: how a store with sessions tells the renewal
scheduler that a lease may be doubted now (``AsyncStore.add_doubt_listener``)."""

from __future__ import annotations

import contextlib
import threading
import weakref
from collections.abc import Callable
from typing import Any

__all__ = ["Listeners"]


class Listeners:
    """A set of callbacks, each called by ``call_all`` from whichever thread calls it. A
    bound method is held weakly, so a listener whose object is gone drops out; a listener's
    failure is its own and never reaches the caller (a kazoo thread, an etcd grant's task).
    One object shared by its holders (a store and its renewal twin see the same listeners)."""

    def __init__(self) -> None:
        self._entries: list[Callable[[], object] | weakref.WeakMethod[Any]] = []
        self._mutex = threading.Lock()

    def add(self, listener: Callable[[], object]) -> None:
        entry: Callable[[], object] | weakref.WeakMethod[Any] = (
            weakref.WeakMethod(listener) if hasattr(listener, "__self__") else listener
        )
        with self._mutex:
            self._entries = [
                known for known in self._entries
                if not isinstance(known, weakref.WeakMethod) or known() is not None
            ]
            self._entries.append(entry)

    def call_all(self) -> None:
        with self._mutex:
            entries = list(self._entries)
        for entry in entries:
            listener = entry() if isinstance(entry, weakref.WeakMethod) else entry
            if listener is not None:
                with contextlib.suppress(Exception):
                    listener()
