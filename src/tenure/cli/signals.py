"""Signals taken synchronously by the main thread of ``tenure run``, on every POSIX Python.

``tenure run`` must never be interrupted half-way (in an acquire, a release, a ``waitpid``):
its main loop alone decides what each signal means. Two ways to get there, one interface
(``SignalInbox.take``):

- Where ``signal.sigtimedwait`` exists (Linux, FreeBSD), the signals are blocked in every
  thread (before any thread exists, so the renewal thread inherits the mask) and taken with
  ``sigtimedwait``, which also tells who raised each one: the kernel (``SI_KERNEL``) for the
  terminal's Ctrl-C, which CMD got already, sharing tenure's process group.
- Elsewhere (macOS has no ``sigtimedwait``), each signal gets a handler that does nothing,
  and ``signal.set_wakeup_fd`` writes its number to a pipe a selector waits on. A signal
  cannot be traced to its sender there: one of the terminal's (SIGINT, SIGQUIT) counts as
  the terminal's while tenure's process group is the terminal's foreground group, since
  CMD got it too then.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import selectors
import signal
from collections.abc import Iterable, Iterator
from types import FrameType
from typing import Protocol

__all__ = ["SI_KERNEL", "TERMINAL_SIGNALS", "Arrival", "SignalInbox", "inbox"]

SI_KERNEL = 0x80
"""Linux ``si_code`` of a signal raised by the kernel (the terminal's Ctrl-C among them)."""
TERMINAL_SIGNALS = frozenset({signal.SIGINT, signal.SIGQUIT})
"""The signals a terminal sends its foreground process group (Ctrl-C, Ctrl-\\)."""


@dataclasses.dataclass(frozen=True)
class Arrival:
    signum: int
    from_terminal: bool
    """Raised by the terminal for the whole foreground process group (CMD included)."""


class SignalInbox(Protocol):
    def take(self, timeout: float) -> list[Arrival]:
        """The signals that arrived, waiting up to ``timeout`` seconds for the first."""


@contextlib.contextmanager
def inbox(watched: Iterable[int]) -> Iterator[SignalInbox]:
    """Take ``watched`` signals from now on; call first thing, before any thread starts.
    On exit, signals still pending are dropped (they arrived too late to matter) and the
    previous dispositions come back."""
    signals = frozenset(watched)
    if hasattr(signal, "sigtimedwait"):
        with _waited(signals) as taken:
            yield taken
    else:
        with _woken(signals) as taken:
            yield taken


class _Waited:
    def __init__(self, signals: frozenset[int]) -> None:
        self._signals = signals

    def take(self, timeout: float) -> list[Arrival]:
        found = []
        info = signal.sigtimedwait(self._signals, timeout)
        while info is not None:
            found.append(Arrival(info.si_signo, info.si_code == SI_KERNEL))
            info = signal.sigtimedwait(self._signals, 0)
        return found


@contextlib.contextmanager
def _waited(signals: frozenset[int]) -> Iterator[SignalInbox]:
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, signals)
    try:
        yield _Waited(signals)
    finally:
        while signal.sigtimedwait(signals, 0) is not None:
            pass
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


class _Woken:
    def __init__(self, pipe: int, selector: selectors.BaseSelector) -> None:
        self._pipe = pipe
        self._selector = selector

    def take(self, timeout: float) -> list[Arrival]:
        if not self._selector.select(max(timeout, 0.0)):
            return []
        numbers = b""
        with contextlib.suppress(BlockingIOError):
            while chunk := os.read(self._pipe, 512):
                numbers += chunk
        terminal = _terminal_is_ours()
        return [Arrival(number, terminal and number in TERMINAL_SIGNALS) for number in numbers]


def _nothing(signum: int, frame: FrameType | None) -> None:
    """The handler: the wake-up byte is the message; nothing is raised mid-call."""


@contextlib.contextmanager
def _woken(signals: frozenset[int]) -> Iterator[SignalInbox]:
    reader, writer = os.pipe()
    os.set_blocking(reader, False)
    os.set_blocking(writer, False)
    selector = selectors.DefaultSelector()
    selector.register(reader, selectors.EVENT_READ)
    # The pipe first: a signal between the two steps then still reaches it.
    previous_fd = signal.set_wakeup_fd(writer, warn_on_full_buffer=False)
    previous = {signum: signal.signal(signum, _nothing) for signum in signals}
    try:
        yield _Woken(reader, selector)
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        signal.set_wakeup_fd(previous_fd)
        selector.close()
        os.close(reader)
        os.close(writer)


def _terminal_is_ours() -> bool:
    """Whether tenure's process group is its controlling terminal's foreground group."""
    try:
        terminal = os.open("/dev/tty", os.O_RDONLY | os.O_NOCTTY)
    except OSError:
        return False  # no controlling terminal: nothing comes from one
    try:
        return os.tcgetpgrp(terminal) == os.getpgrp()
    except OSError:
        return False
    finally:
        os.close(terminal)
