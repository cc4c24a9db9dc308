"""One call per Redlock node, all at once: the flavours' only hand-written difference.

``async_gather`` runs the calls as tasks of the running event loop (``asyncio.gather``);
``gather``, what ``scripts/unasync.py`` turns that name into in the threads flavour, runs the
first call in the caller's thread and the others on a shared thread pool. Both wait for every
call, return results in order with each call's ``Exception`` in place of its result, and
re-raise anything else (cancellation, KeyboardInterrupt). Each node's own socket timeouts
bound how long a call can take, so neither needs a timeout of its own.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import threading
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

__all__ = ["async_gather", "gather"]

T = TypeVar("T")

POOL_THREADS = 32
"""Threads shared by every threads-flavour Redlock client of the process, started lazily."""

_pool: concurrent.futures.ThreadPoolExecutor | None = None
_pool_mutex = threading.Lock()


def _forget_pool_after_fork() -> None:
    # A forked child inherits the pool object but none of its threads (and perhaps a mutex
    # held by one of them): it starts its own at first use.
    global _pool, _pool_mutex
    _pool = None
    _pool_mutex = threading.Lock()


os.register_at_fork(after_in_child=_forget_pool_after_fork)


async def async_gather(calls: Sequence[Callable[[], Awaitable[T]]]) -> list[T | Exception]:
    results = await asyncio.gather(*(call() for call in calls), return_exceptions=True)
    for result in results:
        if isinstance(result, BaseException) and not isinstance(result, Exception):
            raise result
    return list(results)  # type: ignore[arg-type]  # BaseExceptions were raised above


def _shared_pool() -> concurrent.futures.ThreadPoolExecutor:
    global _pool
    with _pool_mutex:
        if _pool is None:
            _pool = concurrent.futures.ThreadPoolExecutor(
                max_workers=POOL_THREADS, thread_name_prefix="tenure-redlock"
            )
        return _pool


def gather(calls: Sequence[Callable[[], T]]) -> list[T | Exception]:
    if not calls:
        return []
    pool = _shared_pool() if len(calls) > 1 else None
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
