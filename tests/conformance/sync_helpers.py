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
