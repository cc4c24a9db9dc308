"""Who may write to the CLI's stderr: the CLI owns it, one prefixed line per event.

Python prints a library's WARNING records through its last-resort handler, unprefixed, when
nobody configured logging: a ZooKeeper that is down printed six of kazoo's "Connection
dropped" lines before tenure's one-line error, and a lost lease's WARNING appeared unprefixed
beside the CLI's own report of the same loss. While a command runs, one handler on the root
logger takes every record instead, and lets through, as ``tenure: message`` on one line:

- tenure's own WARNING and worse, except the lease events (``tenure.lease``: a loss), which
  ``tenure run`` reports itself, with what it did about them;
- with ``-v``, also those lease events and the drivers' WARNING and worse (named by their
  logger, e.g. ``tenure: kazoo.client: Connection dropped: ...``).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from typing import TextIO

__all__ = ["REPORTED_BY_THE_CLI", "owned_stderr"]

REPORTED_BY_THE_CLI = ("tenure.lease",)
"""Loggers whose records the CLI reports in its own words (shown as they are with -v)."""


class _OneLine(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        text = record.getMessage()
        if record.exc_info and record.exc_info[1] is not None:
            error = record.exc_info[1]
            text += f" ({type(error).__name__}: {error})"
        if not _is_tenures(record.name):
            text = f"{record.name}: {text}"
        # A message is one line: a driver's multi-line text is squeezed, never a traceback.
        return "tenure: " + " ".join(text.split())


def _is_tenures(name: str) -> bool:
    return name == "tenure" or name.startswith("tenure.")


class _Shown(logging.Filter):
    def __init__(self, verbose: bool) -> None:
        super().__init__()
        self._verbose = verbose

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.WARNING:
            return False
        if self._verbose:
            return True
        return _is_tenures(record.name) and not record.name.startswith(REPORTED_BY_THE_CLI)


@contextlib.contextmanager
def owned_stderr(err: TextIO, *, verbose: bool) -> Iterator[None]:
    """Within: log records reach ``err`` only as the module docstring says."""
    handler = logging.StreamHandler(err)
    handler.setFormatter(_OneLine())
    handler.addFilter(_Shown(verbose))
    root = logging.getLogger()
    root.addHandler(handler)
    try:
        yield
    finally:
        root.removeHandler(handler)
