"""Threads flavour of the I/O edge; see ``async_io`` for the contract of each name."""

from __future__ import annotations

import concurrent.futures
import inspect
import logging
import queue
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, ParamSpec, TypeVar

from tenure._concurrency import edge
from tenure._errors import InvalidArgumentType

__all__ = list(edge.NAMES)

P = ParamSpec("P")
T = TypeVar("T")
logger = logging.getLogger("tenure")

Event = threading.Event
Mutex = threading.Lock
ThreadMutex = threading.Lock
DeadlineExceeded = edge.DeadlineExceeded
ThreadResult = edge.ThreadResult


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


def bounded(
    call: Callable[[], T], seconds: float | None, credit: Callable[[], float] | None = None,
    *, finish_if_interrupted: bool = False,
) -> T:
    """``call()``'s result, or DeadlineExceeded after ``seconds`` (None: no bound). A thread
    blocked in a socket read cannot be interrupted, so a bounded call runs on the shared
    pool and this thread waits for it at most ``seconds``; the call goes on there.
    ``credit``: as in the asyncio flavour, set-up seconds added to the bound as they grow.
    ``finish_if_interrupted``: when Ctrl-C (KeyboardInterrupt, or any other exception from
    a signal handler) interrupts the wait, wait for the call to end (within ``seconds``)
    before raising, as a cancelled asyncio caller does, so that an undo that follows does
    not overtake it; a second interrupt raises at once."""
    if seconds is None:
        return call()
    future = _runner.get().submit(call)
    credited = 0.0 if credit is None else credit()
    wait = seconds
    began = time.monotonic()
    while True:
        try:
            return future.result(timeout=wait)
        except concurrent.futures.TimeoutError:
            if future.done():  # the call itself raised TimeoutError (Python < 3.11 spelling)
                raise
            more = 0.0 if credit is None else credit() - credited
            if more <= 0:
                raise DeadlineExceeded(seconds, future) from None
            credited += more
            seconds += more
            wait = more
        except BaseException:
            if finish_if_interrupted and not future.done():
                concurrent.futures.wait(
                    [future], timeout=max(0.0, began + seconds - time.monotonic())
                )
            raise


class _DaemonRunner:
    """Daemon threads for bounded calls. A call given up on may hang in a driver until its
    own timeout: on a ThreadPoolExecutor's threads, which are joined at interpreter exit,
    that would keep a failed ``tenure run`` from exiting. A new thread starts only when none
    is idle, so a hung call never delays another."""

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue[tuple[Callable[[], Any], concurrent.futures.Future[Any]]]
        self._jobs = queue.SimpleQueue()
        self._idle = 0
        self._mutex = threading.Lock()

    def submit(self, call: Callable[[], T]) -> concurrent.futures.Future[T]:
        future: concurrent.futures.Future[T] = concurrent.futures.Future()
        with self._mutex:
            start = self._idle == 0
            if not start:
                self._idle -= 1
        if start:
            threading.Thread(target=self._work, name="tenure-bounded", daemon=True).start()
        self._jobs.put((call, future))
        return future

    def _work(self) -> None:
        while True:
            call, future = self._jobs.get()
            if future.set_running_or_notify_cancel():
                try:
                    future.set_result(call())
                except BaseException as exc:
                    future.set_exception(exc)
            del call, future
            with self._mutex:
                self._idle += 1


_runner = edge.PerProcess(_DaemonRunner)
"""A forked child starts its own: the parent's threads did not survive the fork."""


def settle(pending: Any, timeout: float) -> None:
    if timeout > 0:
        concurrent.futures.wait([pending], timeout=timeout)


def cleanup_now(function: Callable[..., Any], *args: Any) -> None:
    """Run a clean-up to its end before going on, a failure logged (see async_io)."""
    try:
        function(*args)
    except Exception as exc:
        edge.log_cleanup_failure(exc)


def run_cleanup(function: Callable[..., Any], *args: Any) -> None:
    def undo() -> None:
        try:
            function(*args)
        except Exception as exc:
            edge.log_cleanup_failure(exc)
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


def scope() -> object:
    return edge.this_process()


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


def result_of(result: ThreadResult[T], timeout: float) -> T:
    """The value of ``result`` (or its error), waited for in this thread; raises
    TimeoutError after ``timeout`` seconds. Waited for on the result itself, which the
    completing thread wakes directly (a ``rawlink`` callback would come through kazoo's
    callback thread: one more thread to schedule per request)."""
    if not result.wait(timeout):
        raise TimeoutError(f"no result within {timeout} s")
    return result.get(block=False)


POOL_THREADS = 32
"""Threads shared by every ``gather`` of the process, started lazily."""



def _new_pool() -> concurrent.futures.ThreadPoolExecutor:
    return concurrent.futures.ThreadPoolExecutor(
        max_workers=POOL_THREADS, thread_name_prefix="tenure-gather"
    )


_pool = edge.PerProcess(_new_pool)


def gather(calls: Sequence[Callable[[], T]]) -> list[T | Exception]:
    """Run the first call in this thread and the others on a shared pool, and wait for all:
    results in order, each call's ``Exception`` in place of its result."""
    if not calls:
        return []
    pool = _pool.get() if len(calls) > 1 else None
    futures = [pool.submit(call) for call in calls[1:]] if pool is not None else []
    results: list[T | Exception] = []
    try:
        results.append(calls[0]())
    except Exception as exc:
        results.append(exc)
    for future in futures:
        try:
            results.append(future.result())
        except Exception as exc:
            results.append(exc)
    return results


# ---- renewals: the scheduler's thread is the renewal thread -------------------------------

RENEWS_ON_OWN_LOOP = False
"""Renewals run on the scheduler's own thread already, through the caller's backend."""


def renewal_scope() -> object:
    return scope()


def start_renewals(function: Callable[[], Any], name: str) -> None:
    start_background(function, name)


def renewal_signal() -> Signal:
    return Signal()


def begin_on_renewal_loop(function: Callable[[], Any]) -> object:
    start_background(function, "tenure-renewer")
    return None


def on_renewal_loop(function: Callable[[], T], after: object = None) -> T:
    return function()


def home() -> object:
    return None


def gone(where: object) -> bool:
    return False


def deliver(where: object, function: Callable[..., Any], *args: Any) -> None:
    # Threads need no hand-over: the holder's state is guarded by mutexes.
    function(*args)
