"""What the two flavours of the I/O edge share, flavour-free: the names both export (the lock
logic is written once against them), the error of a call given up on, a result another
thread completes, how a failed clean-up is logged, and values made once per process.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from typing import Any, Generic, Protocol, TypeVar

__all__ = [
    "NAMES",
    "DeadlineExceeded",
    "PerProcess",
    "ThreadResult",
    "log_cleanup_failure",
    "this_process",
]

T = TypeVar("T")
logger = logging.getLogger("tenure")

NAMES = (
    "RENEWS_ON_OWN_LOOP",
    "DeadlineExceeded",
    "ThreadMutex",
    "begin_on_renewal_loop",
    "deliver",
    "gone",
    "home",
    "on_renewal_loop",
    "renewal_scope",
    "renewal_signal",
    "start_renewals",
    "bounded",
    "settle",
    "Event",
    "Mutex",
    "ThreadResult",
    "Signal",
    "check_function_kind",
    "complete",
    "current_owner",
    "current_owner_name",
    "gather",
    "drain_cleanups",
    "invoke_callback",
    "run_blocking",
    "result_of",
    "run_cleanup",
    "scope",
    "sleep",
    "start_background",
)
"""What ``async_io`` and ``sync_io`` both export: ``scripts/unasync.py`` swaps one module for
the other under the generated code, so a name missing from either breaks one flavour."""


class DeadlineExceeded(TimeoutError):
    """A call ``bounded`` gave up on. It may still be running (a request already sent can
    still take effect on the server): ``pending`` finishes with it, for an undo to wait on
    so that it never overtakes the call it undoes."""

    def __init__(self, seconds: float, pending: Any) -> None:
        super().__init__(f"no answer within {seconds:.3f} s")
        self.seconds = seconds
        self.pending = pending


class ThreadResult(Protocol[T]):
    """A result another thread completes (kazoo's ``IAsyncResult``)."""

    def rawlink(self, callback: Callable[[ThreadResult[T]], Any]) -> None: ...
    def get(self, block: bool = True, timeout: float | None = None) -> T: ...
    def wait(self, timeout: float | None = None) -> bool: ...
    def ready(self) -> bool: ...


def log_cleanup_failure(error: BaseException | None) -> None:
    """Report an undo step that failed. One line at INFO (the lease ends by its TTL anyway:
    nothing for the user to do); the traceback only for those debugging."""
    logger.info("tenure: clean-up failed (%s: %s); the lease's TTL will end it",
                type(error).__name__, error)
    logger.debug("tenure: the clean-up's failure", exc_info=error)


class PerProcess(Generic[T]):
    """A value made at its first use in each process (a thread pool, an event loop's thread).
    A forked child inherits the parent's object but none of its threads (and perhaps a mutex
    held by one of them): it makes its own, at its own first use."""

    def __init__(self, make: Callable[[], T]) -> None:
        self._make = make
        self._value: T | None = None
        self._mutex = threading.Lock()
        os.register_at_fork(after_in_child=self._forget)

    def get(self) -> T:
        value = self._value
        if value is not None:  # made already: no mutex on the hot path
            return value
        with self._mutex:
            if self._value is None:
                self._value = self._make()
            return self._value

    def made(self) -> T | None:
        """The value if this process made it already, else None (nothing is made)."""
        return self._value

    def _forget(self) -> None:
        # Dropped, not closed: what it holds (threads, a selector) is the parent's.
        self._value = None
        self._mutex = threading.Lock()


class _Process:
    """Stands for this process in per-process registries; a forked child has another."""


_process = PerProcess(_Process)


def this_process() -> object:
    """The key of per-process registries (the renewal scheduler's), new in a forked child."""
    return _process.get()
