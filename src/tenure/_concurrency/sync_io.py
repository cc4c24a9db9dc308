"""Threads flavour of the I/O edge; see ``async_io`` for the contract of each name."""

from __future__ import annotations

import inspect
import logging
import os
import threading
import time
from collections.abc import Callable
from typing import Any, ParamSpec, Protocol, TypeVar

from tenure._errors import InvalidArgumentType

__all__ = [
    "Event",
    "Mutex",
    "ThreadResult",
    "Signal",
    "check_function_kind",
    "complete",
    "current_owner",
    "current_owner_name",
    "drain_cleanups",
    "invoke_callback",
    "run_blocking",
    "result_of",
    "run_cleanup",
    "scope",
    "sleep",
    "start_background",
]

P = ParamSpec("P")
T = TypeVar("T")
logger = logging.getLogger("tenure")

Event = threading.Event
Mutex = threading.Lock


class Signal:
    """A wake-up that any thread may set and one waiter awaits."""

    def __init__(self) -> None:
        self._event = threading.Event()

    def set(self) -> None:
        self._event.set()

    def clear(self) -> None:
        self._event.clear()

    def wait(self, timeout: float | None) -> bool:
        return self._event.wait(timeout)


def sleep(seconds: float) -> None:
    time.sleep(max(0.0, seconds))


def complete(value: T) -> T:
    # Threads are not cancelled mid-call: the call has completed already.
    return value


def run_blocking(function: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    return function(*args, **kwargs)


def run_cleanup(function: Callable[..., Any], *args: Any) -> None:
    def undo() -> None:
        try:
            function(*args)
        except Exception:
            logger.info("tenure: clean-up failed; the lease's TTL will end it", exc_info=True)
        finally:
            with _cleanups_mutex:
                _cleanups.discard(threading.current_thread())

    thread = threading.Thread(target=undo, name="tenure-cleanup", daemon=True)
    with _cleanups_mutex:
        _cleanups.add(thread)
    thread.start()


_cleanups: set[threading.Thread] = set()
_cleanups_mutex = threading.Lock()


def drain_cleanups(timeout: float) -> None:
    deadline = time.monotonic() + timeout
    with _cleanups_mutex:
        pending = list(_cleanups)
    for thread in pending:
        thread.join(max(0.0, deadline - time.monotonic()))


class _Process:
    """Stands for this process in per-scope registries; replaced in a forked child."""


_process = _Process()


def _forget_process_after_fork() -> None:
    global _process
    _process = _Process()


os.register_at_fork(after_in_child=_forget_process_after_fork)


def scope() -> object:
    return _process


def start_background(function: Callable[[], Any], name: str) -> None:
    threading.Thread(target=function, name=name, daemon=True).start()


def current_owner() -> object:
    return threading.current_thread()


def current_owner_name() -> str:
    return threading.current_thread().name


def invoke_callback(callback: Callable[..., Any], *args: Any) -> None:
    try:
        callback(*args)
    except Exception:
        logger.exception("tenure: callback %r raised", callback)


def check_function_kind(function: Callable[..., Any]) -> None:
    if inspect.iscoroutinefunction(function):
        raise InvalidArgumentType(
            f"{function.__qualname__} is a coroutine function: decorate it with a client from "
            "tenure.connect_async()"
        )


class ThreadResult(Protocol[T]):
    """A result another thread completes (kazoo's ``IAsyncResult``)."""

    def rawlink(self, callback: Callable[[ThreadResult[T]], Any]) -> None: ...
    def get(self, block: bool = True, timeout: float | None = None) -> T: ...


def result_of(result: ThreadResult[T], timeout: float) -> T:
    """The value of ``result`` (or its error), waited for in this thread; raises
    TimeoutError after ``timeout`` seconds."""
    done = threading.Event()
    result.rawlink(lambda _: done.set())
    if not done.wait(timeout):
        raise TimeoutError(f"no result within {timeout} s")
    return result.get(block=False)
