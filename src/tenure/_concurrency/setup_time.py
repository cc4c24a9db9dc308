"""Seconds a client spent setting up connections that the server completed.

An acquire's deadline bounds each server call by the time left plus ``DEADLINE_SLACK``, so
that a server that accepts and never answers cannot hold the caller past it. A first
contact with a healthy server can cost several round trips before the call's own (a
handshake per connection; a Redis Cluster's slot map and a connection to each master), and
on a loaded machine these alone can outlast a short timeout: turning a busy lock into a
``BackendError`` although the server answered every step. Set-up the server completed is
therefore credited to the call: the bound is extended by it. A hung server completes no
set-up, earns no credit, and still ends the call by its deadline plus the slack.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["SetupTime"]


class SetupTime:
    """A running total, shared by a client's connections (thread-safe)."""

    def __init__(self) -> None:
        self._seconds = 0.0
        self._mutex = threading.Lock()

    @property
    def seconds(self) -> float:
        return self._seconds

    @contextmanager
    def measure(self) -> Iterator[None]:
        """Add the block's duration if it completes (the server answered the set-up); a
        set-up that fails or is abandoned earns nothing."""
        began = time.monotonic()
        yield
        with self._mutex:
            self._seconds += time.monotonic() - began
