"""The threads side of the conformance suite's concurrency edge: the generated sync tests
call these where the async tests use tasks."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any


def gather(*functions: Callable[[], Any]) -> list[Any]:
    """Run each function in its own thread; return results in order; re-raise the first error."""
    results: list[Any] = [None] * len(functions)
    errors: list[BaseException] = []

    def run(index: int, function: Callable[[], Any]) -> None:
        try:
            results[index] = function()
        except BaseException as exc:
            errors.append(exc)

    threads = [
        threading.Thread(target=run, args=(index, function))
        for index, function in enumerate(functions)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]
    return results


def sleep(seconds: float) -> None:
    time.sleep(seconds)


def wait_event(event: threading.Event, timeout: float) -> bool:
    return event.wait(timeout)


def hog_the_holder(seconds: float, contend: Callable[[], bool], every: float) -> list[bool]:
    """Keep the calling thread from returning for ``seconds`` while another thread calls
    ``contend`` every ``every`` seconds; return its answers, in order. The calling thread is
    the holder's: under asyncio its event loop's, so that no task, callback or timer of that
    loop gets a turn meanwhile, as with CPU-bound work. It sleeps rather than spins: the
    suite runs this on every backend, on shared cores (``tests/unit/test_renewal_thread.py``
    spins, holding the GIL, on the memory backend)."""
    answers: list[bool] = []
    errors: list[BaseException] = []
    done = threading.Event()

    def contender() -> None:
        try:
            while not done.wait(every):
                answers.append(contend())
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=contender, name="contender")
    thread.start()
    try:
        time.sleep(seconds)
    finally:
        done.set()
        thread.join()
    if errors:
        raise errors[0]
    return answers
