"""psycopg's errors, in one table for both flavours.

``DRIVER_ERRORS`` leave any store verb as the one ``BackendError`` form (the base store's
translation names the server, the action and the lock). A statement the watchdog cut short
(``_watchdog``) leaves as a ``TimeoutError`` whose cause is the driver's error."""

from __future__ import annotations

import psycopg
import psycopg.errors

__all__ = ["DRIVER_ERRORS", "SCHEMA_GONE", "UPGRADE_REFUSED"]

DRIVER_ERRORS: tuple[type[BaseException], ...] = (psycopg.Error, OSError)
"""The server failed or could not be reached (OSError: a TimeoutError of our watchdog)."""
SCHEMA_GONE = (psycopg.errors.UndefinedTable, psycopg.errors.UndefinedColumn)
"""A table dropped (or made anew by an older tenure) behind our back: create or upgrade it
again on the next statement."""
UPGRADE_REFUSED = psycopg.errors.InsufficientPrivilege
"""This user may not alter a table an older tenure made: a ConfigurationError."""
