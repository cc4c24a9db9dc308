"""The answer of a request sent without waiting for it (a grant at the head of the queue:
``_async/attempt.py``), which any thread may wait for (``io.result_of``: the renewal thread
renews through a twin of the store, on a loop of its own)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

__all__ = ["Answer"]


class Answer:
    """Set once, by the task or thread that sent the request: the request's outcome (here a
    reason the grant is lost, or None)."""

    def __init__(self) -> None:
        self._done = threading.Event()
        self._mutex = threading.Lock()
        self._value: Any = None
        self._callbacks: list[Callable[[Answer], Any]] = []

    def set(self, value: Any) -> None:
        with self._mutex:
            self._value = value
            self._done.set()
            callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            callback(self)

    def ready(self) -> bool:
        return self._done.is_set()

    def rawlink(self, callback: Callable[[Answer], Any]) -> None:
        with self._mutex:
            if not self._done.is_set():
                self._callbacks.append(callback)
                return
        callback(self)

    def wait(self, timeout: float | None = None) -> bool:
        return self._done.wait(timeout)

    def get(self, block: bool = True, timeout: float | None = None) -> Any:
        if block and not self._done.wait(timeout):
            raise TimeoutError(f"no answer within {timeout} s")
        return self._value
