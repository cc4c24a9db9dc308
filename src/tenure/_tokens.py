"""Who this process is, for the leases it takes: a random token per acquisition and the
``Holder`` stored beside each lease. Flavour-free: both flavours' lease logic draw from it.
Renewed in a forked child (a new pid, a token pool of its own)."""

from __future__ import annotations

import collections
import os
import secrets
import socket

from tenure._types import Holder

__all__ = ["HOST", "TOKEN_BATCH", "current"]

HOST = socket.gethostname()

TOKEN_BATCH = 64
"""Tokens drawn per call to the OS's random source (see ``_Process.token``)."""


class _Process:
    """This process's pid, renewed in a forked child: no getpid() system call per acquire
    (a measurable share of the lock logic's own cost on the uncontended SQLite cycle)."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.last: Holder | None = None
        self.tokens: collections.deque[str] = collections.deque()

    def holder(self, thread: str) -> Holder:
        """The Holder of an acquire from ``thread`` (the last one made, kept: one thread or
        task usually acquires again and again, and a frozen dataclass costs ~1 us)."""
        last = self.last
        if last is not None and last.thread == thread:
            return last
        self.last = made = Holder(HOST, self.pid, thread)
        return made

    def token(self) -> str:
        """A random 128-bit token per acquisition: one nobody can guess from another, so a
        token seen once (in a log, in the store) names one lease and nothing else. Drawn
        from the OS's CSPRNG TOKEN_BATCH at a time: one system call per batch, not per
        acquire. ``popleft`` is atomic, so threads never share a token; threads refilling
        at once only draw more."""
        try:
            return self.tokens.popleft()
        except IndexError:
            drawn = secrets.token_hex(16 * TOKEN_BATCH)
            self.tokens.extend(drawn[i:i + 32] for i in range(32, len(drawn), 32))
            return drawn[:32]


current = _Process()
"""This process's: read it as ``_tokens.current`` (a fork replaces it)."""


def _renew_process() -> None:
    global current
    current = _Process()


os.register_at_fork(after_in_child=_renew_process)
