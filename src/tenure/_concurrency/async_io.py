"""asyncio flavour of the I/O edge.

- ``Event``: the type of ``lock.lost``.
- ``Signal``: a wake-up any thread may set (a release seen by another thread) and one waiter
  awaits with a timeout.
- ``Mutex``: guards in-memory state touched from the scheduler and callers. One event loop is
  one thread and no await happens under it, so the asyncio flavour needs no real lock.
- ``run_blocking``: run blocking driver code (sqlite3) without blocking the loop. If the caller
  is cancelled, the call still finishes before the cancellation propagates, so a clean-up that
  follows cannot overtake it (an acquire committed after its own undo would leave a lock).
- ``complete``: await a server call that must not be abandoned half-way by a cancellation.
- ``run_cleanup``: start an undo step in the background and return at once: it completes even
  when the caller is being cancelled, and the caller's error is not delayed by an undo that
  must itself time out against a dead server. Its failure is logged, never raised: the
  lease's TTL is the backstop.
- ``scope``: the key for per-process / per-event-loop singletons (the renewal scheduler).
- ``current_owner``: who counts as one owner for re-entrancy: the thread, or the asyncio task.
- The renewal thread (``RENEWS_ON_OWN_LOOP``): renewals must not wait for the holder's event
  loop, which CPU-bound code may block for longer than a lease (issue 23). They run on one
  daemon thread per process with an event loop of its own (``renewal_loop``, whose
  ``start_renewals``, ``begin_on_renewal_loop`` and ``on_renewal_loop`` are exported here,
  with ``renewal_signal``); what they learn reaches the holder's loop through ``deliver``
  (``call_soon_threadsafe``). ``ThreadMutex`` guards what both threads touch.

The names both flavours export, and what they share (``DeadlineExceeded``, ``ThreadResult``),
are ``edge``'s.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
import logging
import threading
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, ParamSpec, TypeVar

from tenure._concurrency import edge, renewal_loop
from tenure._errors import InvalidArgumentType

__all__ = list(edge.NAMES)

P = ParamSpec("P")
T = TypeVar("T")
logger = logging.getLogger("tenure")

Event = asyncio.Event
DeadlineExceeded = edge.DeadlineExceeded
ThreadResult = edge.ThreadResult


class Mutex:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc_info: object) -> None:
        return None


ThreadMutex = threading.Lock
"""Guards state that another thread touches too (the renewal scheduler's: see the module
docstring)."""


class Signal:
    """A wake-up settable from any thread, awaited in the loop that created it (or ``loop``)."""

    def __init__(self, loop: asyncio.AbstractEventLoop | None = None) -> None:
        self._loop = asyncio.get_running_loop() if loop is None else loop
        self._event = asyncio.Event()

    def set(self) -> None:
        # A closed loop raises RuntimeError: nobody is waiting any more.
        with contextlib.suppress(RuntimeError):
            self._loop.call_soon_threadsafe(self._event.set)

    def clear(self) -> None:
        self._event.clear()

    async def wait(self, timeout: float | None) -> bool:
        try:
            async with asyncio.timeout(timeout):
                await self._event.wait()
        except TimeoutError:
            return False
        return True


async def sleep(seconds: float) -> None:
    await asyncio.sleep(max(0.0, seconds))


async def run_blocking(function: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    loop = asyncio.get_running_loop()
    # A worker thread can't be cancelled: a cancelled caller waits for it (see complete).
    return await complete(loop.run_in_executor(None, functools.partial(function, *args, **kwargs)))


async def bounded(
    call: Callable[[], Awaitable[T]], seconds: float | None,
    credit: Callable[[], float] | None = None, *, finish_if_interrupted: bool = False,
) -> T:
    """``call()``'s result, or DeadlineExceeded after ``seconds`` (None: no bound), leaving
    the call running. ``credit``: a running total of seconds (connection set-up the server
    completed, see ``setup_time``); what it grows by while the call runs is added to the
    bound, for as long as it grows. A cancelled caller behaves as in ``complete`` whatever
    ``finish_if_interrupted`` says (the threads flavour's option)."""
    if seconds is None:
        return await complete(call())
    task = asyncio.ensure_future(call())
    credited = 0.0 if credit is None else credit()
    try:
        await asyncio.wait({task}, timeout=seconds)
        while not task.done() and credit is not None and credit() > credited:
            more = credit() - credited
            credited += more
            seconds += more
            await asyncio.wait({task}, timeout=more)
    except asyncio.CancelledError:
        with contextlib.suppress(Exception):
            await _finish_despite_cancellation(task)
        if not task.cancelled():
            task.exception()
        raise
    if not task.done():
        task.add_done_callback(_retrieve)
        raise DeadlineExceeded(seconds, task)
    return task.result()


def _retrieve(task: asyncio.Future[Any]) -> None:
    if not task.cancelled():
        task.exception()  # a late failure is expected: asyncio must not log it


async def settle(pending: Any, timeout: float) -> None:
    """Wait up to ``timeout`` for the call ``DeadlineExceeded.pending`` stands for."""
    if timeout > 0:
        await asyncio.wait({pending}, timeout=timeout)


async def complete(awaitable: Awaitable[T]) -> T:
    """Await ``awaitable``; if the caller is cancelled meanwhile, let it finish first (its
    result or error dropped), then propagate the cancellation. An acquire's undo must not
    overtake the acquire itself: a driver call cut off after its request was sent may still
    take effect on the server after the undo ran on another connection. Used by the lock
    logic around every acquire, by ``run_blocking``, and by backends around their own calls."""
    task = asyncio.ensure_future(awaitable)
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        with contextlib.suppress(Exception):
            await _finish_despite_cancellation(task)
        if not task.cancelled():
            task.exception()  # retrieved, so asyncio does not log it as never retrieved
        raise


async def _finish_despite_cancellation(awaitable: asyncio.Future[Any]) -> None:
    # Await until done, swallowing further cancellations of the caller meanwhile.
    while not awaitable.done():
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.shield(awaitable)


async def run_cleanup(function: Callable[..., Any], *args: Any) -> None:
    task = asyncio.ensure_future(function(*args))
    _cleanups.add(task)
    task.add_done_callback(_log_cleanup_failure)


async def cleanup_now(function: Callable[..., Any], *args: Any) -> None:
    """Run a clean-up to its end before going on, despite a cancellation meanwhile; a
    failure is logged as ``run_cleanup``'s are. For a local store, whose calls cannot hang:
    the caller's next step then never sees what was undone."""
    task = asyncio.ensure_future(function(*args))
    await _finish_despite_cancellation(task)
    if not task.cancelled() and task.exception() is not None:
        edge.log_cleanup_failure(task.exception())


async def drain_cleanups(timeout: float) -> None:
    """Wait up to ``timeout`` for this loop's pending clean-ups: a client closes its
    connections only after the undo steps that use them."""
    loop = asyncio.get_running_loop()
    pending = [task for task in _cleanups if task.get_loop() is loop and not task.done()]
    if pending:
        await asyncio.wait(pending, timeout=timeout)


def _log_cleanup_failure(task: asyncio.Future[Any]) -> None:
    _cleanups.discard(task)
    if not task.cancelled() and task.exception() is not None:
        edge.log_cleanup_failure(task.exception())


def scope() -> object:
    return asyncio.get_running_loop()


# Strong references: the event loop keeps only weak ones to its tasks.
_background: set[asyncio.Future[Any]] = set()
_cleanups: set[asyncio.Future[Any]] = set()


def start_background(function: Callable[[], Any], name: str) -> None:
    task = asyncio.get_running_loop().create_task(function(), name=name)
    _background.add(task)
    task.add_done_callback(_background.discard)


def current_owner() -> object:
    task = asyncio.current_task()
    return task if task is not None else _no_task_owner()


@functools.cache
def _no_task_owner() -> object:
    return object()


def current_owner_name() -> str:
    task = asyncio.current_task()
    return task.get_name() if task is not None else "asyncio"


def invoke_callback(callback: Callable[..., Any], *args: Any) -> None:
    """Call a user callback; a coroutine it returns runs as a task. Errors are logged."""
    try:
        result = callback(*args)
    except Exception:
        logger.exception("tenure: callback %r raised", callback)
        return
    if inspect.isawaitable(result):
        task = asyncio.ensure_future(result)
        _background.add(task)
        task.add_done_callback(_log_callback_failure)


def _log_callback_failure(task: asyncio.Future[Any]) -> None:
    _background.discard(task)
    if not task.cancelled() and task.exception() is not None:
        logger.error("tenure: async callback raised", exc_info=task.exception())


def check_function_kind(function: Callable[..., Any]) -> None:
    if not inspect.iscoroutinefunction(function):
        raise InvalidArgumentType(
            f"{getattr(function, '__qualname__', function)} is not a coroutine function: "
            "decorate it with a client from tenure.connect()"
        )


async def result_of(result: ThreadResult[T], timeout: float) -> T:
    """The value of ``result`` (or its error), awaited without blocking the loop; raises
    TimeoutError after ``timeout`` seconds. A result already in is read at once, without a
    trip through the loop."""
    if result.ready():
        return result.get(block=False)
    loop = asyncio.get_running_loop()
    done: asyncio.Future[None] = loop.create_future()

    def settle() -> None:
        if not done.done():
            done.set_result(None)

    def finished(_: ThreadResult[T]) -> None:
        with contextlib.suppress(RuntimeError):  # the loop closed: nobody waits any more
            loop.call_soon_threadsafe(settle)

    result.rawlink(finished)
    async with asyncio.timeout(timeout):
        await done
    return result.get(block=False)


async def gather(calls: Sequence[Callable[[], Awaitable[T]]]) -> list[T | Exception]:
    """Run every call at once (tasks of the running loop) and wait for all: results in order,
    each call's ``Exception`` in place of its result; anything else (cancellation,
    KeyboardInterrupt) is raised. Each call must bound its own time (its sockets' timeouts)."""
    results = await asyncio.gather(*(call() for call in calls), return_exceptions=True)
    for result in results:
        if isinstance(result, BaseException) and not isinstance(result, Exception):
            raise result
    return list(results)  # type: ignore[arg-type]  # BaseExceptions were raised above


# ---- the renewal thread ------------------------------------------------------------------

RENEWS_ON_OWN_LOOP = True
"""Renewals run on the renewal thread's event loop, through connections of its own (the
threads flavour renews on a thread of its own already, through the caller's backend)."""


start_renewals = renewal_loop.start_renewals
begin_on_renewal_loop = renewal_loop.begin_on_renewal_loop
on_renewal_loop = renewal_loop.on_renewal_loop


def renewal_scope() -> object:
    """The key of the renewal scheduler: one per process, whatever loop its holders run."""
    return edge.this_process()


def renewal_signal() -> Signal:
    """A wake-up for the renewal scheduler, awaited on the renewal thread's loop."""
    return Signal(renewal_loop.renewal_loop())


def home() -> object:
    """Where a holder's notifications must run: its event loop."""
    return asyncio.get_running_loop()


def gone(where: object) -> bool:
    """Whether the event loop ``where`` (from ``home``) has closed."""
    return isinstance(where, asyncio.AbstractEventLoop) and where.is_closed()


def deliver(where: object, function: Callable[..., Any], *args: Any) -> None:
    """Call ``function(*args)`` on the event loop ``where`` (from ``home``), from any thread.
    A loop that has closed runs nothing any more: then it is called here and now, so that
    what it records (a lease lost) is still there for whoever asks later."""
    assert isinstance(where, asyncio.AbstractEventLoop)
    try:
        where.call_soon_threadsafe(function, *args)
    except RuntimeError:  # the loop is closed
        with contextlib.suppress(Exception):
            function(*args)
