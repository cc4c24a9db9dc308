"""What ``tenure run`` says while it waits for a lock, at each verbosity.

- quiet (-q): nothing; the exit status speaks.
- default: one line if the wait passes ``QUIET_WAIT`` seconds, so a long ``--timeout`` is
  never silent, yet the common case (the lock is free or soon free) prints nothing.
- verbose (-v), stderr a terminal: one live line rewritten in place a few times a second and
  erased once the lock is ours; stderr not a terminal (a log file): one line when the wait
  starts and one when it ends, so logs stay line-oriented.

The holder is read with ``inspect()`` at most once per ``LOOK_EVERY`` seconds: the line's
countdown moves on every tick, the backend is asked far less often.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TextIO

from tenure._types import LockInfo
from tenure.cli.inspect import describe_holder, semaphore_busy

__all__ = ["LOOK_EVERY", "QUIET", "QUIET_WAIT", "VERBOSE", "WaitReport", "describe_wait"]

QUIET = -1
VERBOSE = 1
QUIET_WAIT = 1.0
"""Seconds of waiting after which the default verbosity says it is waiting."""
LOOK_EVERY = 1.0
"""Seconds between two ``inspect()`` calls of the live line."""
ERASE = "\r\x1b[K"
"""Carriage return, then erase to the end of the line (ANSI, every terminal tenure meets)."""


def describe_wait(info: LockInfo | None) -> str:
    """``held by host:pid, fence F``, or for a full semaphore ``all N held: ...``; empty if
    the holder is unknown (the lease ended between our attempt and the look)."""
    if info is None:
        return ""
    if info.kind == "semaphore" and info.leases:
        return semaphore_busy(info)
    if info.holder is not None:
        return f"held by {describe_holder(info)}, fence {info.fence}"
    return ""


class WaitReport:
    """Called by the wait loop: ``started()`` once, ``tick()`` between acquire attempts,
    then ``acquired()`` or ``gave_up()``."""

    def __init__(
        self,
        name: str,
        *,
        verbosity: int,
        timeout: float | None,
        look: Callable[[], LockInfo | None],
        err: TextIO,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._name = name
        self._verbosity = verbosity
        self._timeout = timeout
        self._look = look
        self._err = err
        self._clock = clock
        self._live = verbosity >= VERBOSE and err.isatty()
        self._start = clock()
        self._looked_at: float | None = None
        self._holder = ""
        self._said = False
        self._drawn = False

    def started(self) -> None:
        self._start = self._clock()
        if self._verbosity >= VERBOSE:
            self._update()

    def tick(self) -> None:
        live = self._verbosity >= VERBOSE and self._live
        overdue = self._verbosity == 0 and self._clock() - self._start >= QUIET_WAIT
        if live or (overdue and not self._said):
            self._update()

    def acquired(self, fence: int | None) -> None:
        self._erase()
        if self._verbosity >= VERBOSE and not self._live:
            self._line(f"acquired {self._name!r} after waiting {self._waited():.1f} s"
                       + ("" if fence is None else f" (fence {fence})"))

    def gave_up(self) -> None:
        """The wait ended without the lock (timeout or signal): the caller says why."""
        self._erase()

    def _update(self) -> None:
        now = self._clock()
        if self._looked_at is None or now - self._looked_at >= LOOK_EVERY:
            self._looked_at = now
            self._holder = describe_wait(self._look())
        text = f"waiting for {self._name!r}"
        if self._holder:
            text += f" {self._holder}"
        if self._timeout is not None:
            text += f", {max(self._timeout - (now - self._start), 0.0):.1f} s left"
        elif self._live:
            text += f", waited {now - self._start:.1f} s"
        if self._live:
            self._err.write(f"{ERASE}tenure: {text}")
            self._err.flush()
            self._drawn = True
        elif not self._said:
            self._line(text)
        self._said = True

    def _erase(self) -> None:
        if self._drawn:
            self._err.write(ERASE)
            self._err.flush()
            self._drawn = False

    def _waited(self) -> float:
        return self._clock() - self._start

    def _line(self, text: str) -> None:
        self._err.write(f"tenure: {text}\n")
        self._err.flush()
