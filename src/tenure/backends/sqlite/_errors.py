"""sqlite3's failures: the driver-error table the store's base translates (``driver_errors``),
for both flavours."""

from __future__ import annotations

import sqlite3

__all__ = ["DRIVER_ERRORS", "busy"]

DRIVER_ERRORS: tuple[type[BaseException], ...] = (sqlite3.Error,)
"""Any sqlite3 error in a verb means the file failed us (locked past ``busy_timeout``, a
disk error, a corrupt or read-only file): it leaves as the one ``BackendError`` form."""


def busy(error: sqlite3.OperationalError) -> bool:
    """Another connection holds the lock the statement needed: it did not start."""
    return error.sqlite_errorcode & 0xFF == sqlite3.SQLITE_BUSY
