"""A client-side deadline for PostgreSQL statements, for both flavours.

libpq has no per-statement client timeout: ``statement_timeout`` is enforced by the server,
so a server that stops answering (paused, partitioned, swapped out) leaves the client
waiting forever on a healthy-looking socket. The watchdog shuts the socket down when a
statement overruns its deadline; the driver's pending read then fails at once with an
OperationalError, and the backend discards the connection and raises BackendError.

One thread per process serves every connection of every backend; a statement costs a heap
push and a pop under one mutex. The socket is shut down only while its statement is still
registered, under the same mutex the statement's end takes, so a socket closed and reused
for another connection is never touched.
"""

from __future__ import annotations

import contextlib
import heapq
import math
import os
import socket
import threading
import time

__all__ = ["Deadline", "guard", "shut_down"]


class Deadline:
    """One guarded block: a context manager that registers the socket on entry and
    unregisters it on exit."""

    __slots__ = ("_watchdog", "active", "due", "fileno", "fired")

    def __init__(self, watchdog: _Watchdog, fileno: int, due: float) -> None:
        self._watchdog = watchdog
        self.fileno = fileno
        self.due = due
        self.active = True
        self.fired = False
        """The deadline passed and the socket was shut down."""

    def __lt__(self, other: Deadline) -> bool:  # heap order
        return self.due < other.due

    def __enter__(self) -> Deadline:
        self._watchdog.register(self)
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._watchdog.unregister(self)


class _Watchdog:
    def __init__(self) -> None:
        self._pid = os.getpid()
        self._condition = threading.Condition(threading.Lock())
        self._heap: list[Deadline] = []
        self._thread: threading.Thread | None = None
        self._sleeping_until = math.inf
        """When the thread wakes up by itself (it holds the mutex whenever it is awake)."""
        self._busy = False
        self._shortest = math.inf

    def register(self, deadline: Deadline) -> None:
        if self._pid != os.getpid():
            # A forked child: the parent's thread and mutex state did not come along.
            self.__init__()  # type: ignore[misc]
        timeout = deadline.due - time.monotonic()
        with self._condition:
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="tenure-postgresql-watchdog", daemon=True
                )
                self._thread.start()
            heapq.heappush(self._heap, deadline)
            self._busy = True
            self._shortest = min(self._shortest, timeout)
            # Wake the thread only if it sleeps past this deadline: rare, because while
            # statements keep coming it wakes once per shortest timeout on its own.
            if deadline.due < self._sleeping_until:
                self._condition.notify()

    def unregister(self, deadline: Deadline) -> None:
        with self._condition:
            deadline.active = False
            self._drop_finished()

    def _drop_finished(self) -> None:
        while self._heap and not self._heap[0].active:
            heapq.heappop(self._heap)

    def _run(self) -> None:
        with self._condition:
            while True:
                self._drop_finished()
                now = time.monotonic()
                if self._heap:
                    deadline = self._heap[0]
                    if deadline.due <= now:
                        heapq.heappop(self._heap)
                        deadline.fired = True
                        shut_down(deadline.fileno)
                        continue
                    wake = deadline.due
                elif self._busy:
                    # Statements come and go: sleep one shortest timeout, so that the next
                    # one's deadline is surely later and needs no wake-up.
                    wake = now + self._shortest
                else:
                    wake = math.inf  # idle for a whole period: sleep until notified
                self._busy = False
                self._sleeping_until = wake
                self._condition.wait(None if wake == math.inf else wake - now)


def shut_down(fileno: int) -> None:
    """Make every pending and future read of socket ``fileno`` fail at once (EOF)."""
    try:
        duplicate = os.dup(fileno)
    except OSError:
        return
    try:
        sock = socket.socket(fileno=duplicate)
    except OSError:
        os.close(duplicate)
        return
    # shutdown() acts on the socket itself, shared by both descriptors; closing the
    # duplicate leaves the driver's descriptor open, to fail its next read.
    with sock, contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)


_watchdog = _Watchdog()


def guard(fileno: int, timeout: float) -> Deadline:
    """``with guard(fileno, timeout):`` shuts the socket ``fileno`` down if the block takes
    longer than ``timeout`` seconds; ``.fired`` then says so."""
    return Deadline(_watchdog, fileno, time.monotonic() + timeout)
