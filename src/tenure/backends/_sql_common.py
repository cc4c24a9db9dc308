"""What the PostgreSQL and MySQL/MariaDB backends share: option parsing, the table name check,
the schema version mark and the idle-connection health probe.

Nothing here imports a driver.
"""

from __future__ import annotations

import re
import select
import threading
from collections.abc import Iterable, Mapping
from typing import Any, TypeVar

from tenure._errors import ConfigurationError
from tenure._options import integer_option, number_option

__all__ = [
    "DEFAULT_POOL_SIZE",
    "DEFAULT_TABLE",
    "DEFAULT_TIMEOUT",
    "SCHEMA_VERSION",
    "SqlOptions",
    "abandon",
    "clip",
    "has_pending_input",
    "parse_schema_mark",
    "schema_mark",
    "sql_options",
    "validate_table_name",
]

T = TypeVar("T")

DEFAULT_TABLE = "tenure_locks"
DEFAULT_TIMEOUT = 5.0
"""Seconds: connecting, and each statement, fail with BackendError after this long."""
DEFAULT_POOL_SIZE = 10
"""Idle connections kept per backend instance (more may be open while many threads work)."""

SCHEMA_VERSION = 1
"""The lock table's layout. Stored in the table's comment, so that an older tenure refuses a
table a newer one has migrated, and a newer one knows what to migrate."""

_TABLE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}")
_SCHEMA_MARK = re.compile(r"tenure lock table, schema (\d+)")


def validate_table_name(table: object) -> str:
    """A plain identifier: a letter or underscore, then letters, digits, underscores; at most
    63 characters (PostgreSQL's limit; MySQL allows 64). It is spliced into SQL text, quoted,
    so nothing else may pass."""
    if not isinstance(table, str) or not _TABLE_NAME.fullmatch(table):
        raise ConfigurationError(
            f"table must be a plain identifier (letters, digits, _; not starting with a "
            f"digit; at most 63 characters), not {table!r}"
        )
    return table


def schema_mark(version: int = SCHEMA_VERSION) -> str:
    return f"tenure lock table, schema {version}"


def parse_schema_mark(comment: str | None) -> int | None:
    """The schema version a table comment records; None if it is not a tenure table."""
    match = _SCHEMA_MARK.fullmatch(comment or "")
    return int(match.group(1)) if match else None


class SqlOptions:
    """tenure's own options of a SQL URL (query string or ``connect()`` keywords)."""

    def __init__(self, table: str, timeout: float, pool_size: int) -> None:
        self.table = table
        self.timeout = timeout
        self.pool_size = pool_size


def sql_options(
    backend: str, query: Mapping[str, Any], keywords: Mapping[str, Any],
    extra: Iterable[str] = (),
) -> tuple[SqlOptions, dict[str, Any]]:
    """Split tenure's options (``table``, ``timeout``, ``pool_size``) from the rest.

    Keywords win over the URL's query. Returns the options and the remaining settings, of
    which only names in ``extra`` are allowed (others raise ConfigurationError)."""
    settings = {**query, **keywords}
    unknown = set(settings) - {"table", "timeout", "pool_size", *extra}
    if unknown:
        raise ConfigurationError(f"unknown option(s): {sorted(unknown)}")
    table = validate_table_name(settings.pop("table", DEFAULT_TABLE))
    timeout = number_option(backend, "timeout", settings.pop("timeout", DEFAULT_TIMEOUT),
                            unit=" seconds", above=0, at_most=3600)
    pool_size = integer_option(backend, "pool_size",
                               settings.pop("pool_size", DEFAULT_POOL_SIZE),
                               at_least=0, at_most=1000)
    return SqlOptions(table, timeout, pool_size), settings


def clip(text: str, limit: int = 255) -> str:
    """Holder metadata as storable text: at most ``limit`` characters, valid UTF-8 (a thread
    name may hold lone surrogates, which no driver can encode)."""
    return text[:limit].encode("utf-8", "replace").decode("utf-8")


def has_pending_input(fileno: int) -> bool:
    """Whether an idle connection's socket has something to read (or is closed / broken).

    An idle connection should have nothing to say. Data or EOF means the server closed it (a
    restart, an admin's kill, an idle timeout), so it is discarded before use instead of
    failing the caller's next operation.
    """
    poller = select.poll()
    poller.register(fileno, select.POLLIN | select.POLLPRI)
    try:
        return bool(poller.poll(0))
    except OSError:
        return True


_abandoned: list[object] = []
_abandoned_mutex = threading.Lock()


def abandon(connections: Iterable[object]) -> None:
    """Keep connections inherited from a parent process alive and untouched, forever.

    Closing them, or letting the garbage collector finalise them, would send a goodbye on
    sockets the parent still uses (libpq's PQfinish, for one), killing the parent's sessions.
    A forked child only ever opens connections of its own.
    """
    with _abandoned_mutex:
        _abandoned.extend(connections)
