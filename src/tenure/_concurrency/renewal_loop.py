"""The asyncio flavour's renewal thread. Renewals must not wait for the holder's event loop,
which CPU-bound code may block for longer than a lease (issue 23): they run on one daemon
thread per process with an event loop of its own. ``async_io`` exports what runs there; the
threads flavour needs none of it (its renewal scheduler has a thread of its own already).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from tenure._concurrency.edge import PerProcess

__all__ = ["begin_on_renewal_loop", "on_renewal_loop", "renewal_loop", "start_renewals"]

T = TypeVar("T")


class _RenewalLoop:
    """A daemon thread running an event loop, for the renewal scheduler: started at the
    first renewing lease of the process, idle (blocked in its selector) when nothing is
    renewed, never inherited by a forked child. It outlives a closed client on purpose: the
    scheduler serves every client of the process, and the connections the clients opened on
    this loop stay bound to it."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        ready = threading.Event()
        self.thread = threading.Thread(
            target=self._serve, args=(ready,), name="tenure-renewal-loop", daemon=True
        )
        self.thread.start()
        ready.wait()

    def _serve(self, ready: threading.Event) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.call_soon(ready.set)
        self.loop.run_forever()


_the_renewal_loop = PerProcess(_RenewalLoop)
"""In a forked child the thread is gone and the loop is the parent's: a child that renews
starts its own. The parent's loop object is dropped, not closed (its selector and self-pipe
are copies the child has no use for)."""

# Strong references: the event loop keeps only weak ones to its tasks.
_tasks: set[asyncio.Future[Any]] = set()


def renewal_loop() -> asyncio.AbstractEventLoop:
    """The renewal thread's event loop, the thread started if need be."""
    return _the_renewal_loop.get().loop


def renewal_thread() -> threading.Thread | None:
    """The renewal thread of this process; None if none was started."""
    made = _the_renewal_loop.made()
    return None if made is None else made.thread


def start_renewals(function: Callable[[], Coroutine[Any, Any, Any]], name: str) -> None:
    """Run ``function()`` on the renewal thread's loop (started if need be)."""
    loop = renewal_loop()

    def start() -> None:
        task = loop.create_task(function(), name=name)
        _tasks.add(task)
        task.add_done_callback(_tasks.discard)

    loop.call_soon_threadsafe(start)


def begin_on_renewal_loop(function: Callable[[], Coroutine[Any, Any, Any]]) -> object:
    """Start ``function()`` on the renewal thread's loop; a handle for ``on_renewal_loop``'s
    ``after``."""
    return asyncio.run_coroutine_threadsafe(function(), renewal_loop())


async def on_renewal_loop(
    function: Callable[[], Coroutine[Any, Any, T]], after: object = None
) -> T:
    """``function()`` run on the renewal thread's loop (the connections it opened belong to
    that loop), once the call ``after`` stands for (from ``begin_on_renewal_loop``) has
    ended, however; awaited from the caller's loop."""

    async def run() -> T:
        if isinstance(after, concurrent.futures.Future):
            await asyncio.wait([asyncio.wrap_future(after)])
        return await function()

    future = asyncio.run_coroutine_threadsafe(run(), renewal_loop())
    return await asyncio.wrap_future(future)
