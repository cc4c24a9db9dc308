"""The ``tenure`` command: run a command under a lock, look at locks, break one, and a demo.

    tenure run NAME [--ttl S] [-w S | -n] [-E N] [-q | -v] -- CMD ARGS...
    tenure ls [PREFIX] [--all] [--json]
    tenure show NAME [--json]
    tenure break NAME
    tenure demo [--workers N] [--stock N]
    tenure completion bash|zsh|fish

Every command takes ``--url U`` (default: ``$TENURE_URL``, else the per-user SQLite file, as
``tenure.connect()``). The entry point is ``tenure.cli.main:main``; ``python -m tenure`` runs
the same. Standard library only. docs/cli.md is the user's manual; the exit statuses below are
part of the interface, scripts rely on them.
"""

from __future__ import annotations

__all__ = [
    "EXIT_BUSY",
    "EXIT_CANNOT_EXECUTE",
    "EXIT_LOST",
    "EXIT_NOT_FOUND",
    "EXIT_NOTHING",
    "EXIT_OK",
    "EXIT_SIGNAL_BASE",
    "EXIT_SOFTWARE",
    "EXIT_UNAVAILABLE",
    "EXIT_USAGE",
    "CommandError",
]

EXIT_OK = 0
EXIT_NOTHING = 1
"""``break``: no live lease to break; ``show``: no such lock; ``demo``: the locked run was off."""
EXIT_USAGE = 2
"""Bad input: arguments, lock name, ttl, URL or backend option."""
EXIT_UNAVAILABLE = 69
"""The backend is unreachable or failing (sysexits EX_UNAVAILABLE)."""
EXIT_SOFTWARE = 70
"""An unexpected error inside tenure, i.e. a bug (sysexits EX_SOFTWARE)."""
EXIT_BUSY = 75
"""``run``: the lock was not obtained, nothing was run (sysexits EX_TEMPFAIL); --busy-exit-code."""
EXIT_LOST = 76
"""``run``: the lease was lost while CMD ran, and CMD was terminated; --lost-exit-code."""
EXIT_CANNOT_EXECUTE = 126
EXIT_NOT_FOUND = 127
EXIT_SIGNAL_BASE = 128
"""CMD killed by signal N, or tenure interrupted by it before CMD started: 128 + N."""


class CommandError(Exception):
    """A failure the CLI reports on one line of stderr, exiting with ``status``."""

    def __init__(self, message: str, status: int = EXIT_USAGE) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
