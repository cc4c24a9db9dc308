"""PyMySQL's failures: the driver-error table the store's base translates (``driver_errors``),
for both flavours, and the server error numbers the store acts on."""

from __future__ import annotations

import pymysql  # type: ignore[import-untyped]

__all__ = ["DRIVER_ERRORS", "ER_BAD_FIELD_ERROR", "ER_DUP_FIELDNAME", "ER_LOCK_DEADLOCK",
           "ER_NO_SUCH_TABLE"]

DRIVER_ERRORS: tuple[type[BaseException], ...] = (pymysql.err.MySQLError, OSError)
"""A PyMySQL error (it wraps the socket's: refused, reset, timed out) or a socket error met
while checking an idle connection: the server failed us, as one ``BackendError``."""

ER_LOCK_DEADLOCK = 1213
ER_NO_SUCH_TABLE = 1146
ER_BAD_FIELD_ERROR = 1054
ER_DUP_FIELDNAME = 1060
