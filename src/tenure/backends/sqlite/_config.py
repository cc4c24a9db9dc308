"""``sqlite:///relative.db`` / ``sqlite:////absolute.db`` and ``connect()``'s options, read
into frozen settings (both flavours)."""

from __future__ import annotations

import dataclasses
import pathlib
import sqlite3
import urllib.parse
from typing import Any

from tenure._errors import ConfigurationError
from tenure._options import DEFAULT_GC_AFTER, gc_after_option, number_option
from tenure._urls import default_sqlite_path, redact

__all__ = [
    "MINIMUM_SQLITE", "SYNCHRONOUS", "Settings", "check_sqlite_library", "display", "settings",
]

MINIMUM_SQLITE = (3, 35, 0)
"""The oldest SQLite library the SQL of this backend runs on. Its statements use, newest
first: ``RETURNING`` (3.35.0; every grant and release reads its answer from one), the
``FILTER`` clause of an aggregate (3.30.0; a semaphore's live weights), ``UPSERT``
(``INSERT ... ON CONFLICT DO UPDATE``, 3.24.0; a lock's acquire). Python's ``sqlite3`` module
is linked with whatever library the platform has (Debian 11's is 3.34.1): an older one
would fail at the first statement with a syntax error that names nothing useful."""

SYNCHRONOUS = ("normal", "full", "extra")


@dataclasses.dataclass(frozen=True, slots=True)
class Settings:
    path: pathlib.Path
    busy_timeout: float = 10.0
    """Seconds to wait for SQLite's write lock."""
    synchronous: str = "normal"
    gc_after: float | None = DEFAULT_GC_AFTER
    """Seconds an idle name's record is kept (None: forever)."""


def display(path: pathlib.Path) -> str:
    """The store's URL, as ``describe()`` and every error of the store begin."""
    return f"sqlite:///{path}"


def settings(url: str, options: dict[str, Any]) -> Settings:
    """The settings of ``url`` and ``options``; ConfigurationError for anything unusable
    (the default file's directory is made here, private to the user)."""
    check_sqlite_library()
    parts = urllib.parse.urlsplit(url)
    if parts.netloc:
        raise ConfigurationError(
            f"sqlite URLs have no host: sqlite:///relative.db or sqlite:////absolute.db, "
            f"not {redact(url)!r}"
        )
    raw_path = urllib.parse.unquote(parts.path[1:] if parts.path.startswith("/") else "")
    if not raw_path:
        raise ConfigurationError(f"sqlite URL names no file: {redact(url)!r}")
    query = dict(urllib.parse.parse_qsl(parts.query))
    given = {**query, **options}
    unknown = set(given) - {"busy_timeout", "synchronous", "gc_after"}
    if unknown:
        raise ConfigurationError(f"unknown sqlite option(s): {sorted(unknown)}")
    busy_timeout = number_option("sqlite", "busy_timeout", given.get("busy_timeout", 10.0),
                                 unit=" seconds", above=0)
    gc_after = gc_after_option("sqlite", given.get("gc_after", DEFAULT_GC_AFTER))
    synchronous = str(given.get("synchronous", "normal")).lower()
    if synchronous not in SYNCHRONOUS:
        raise ConfigurationError(f"sqlite synchronous must be one of {SYNCHRONOUS}")
    path = pathlib.Path(raw_path)
    if path == default_sqlite_path():
        # The per-user default: private to the user, created on first use.
        try:
            path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        except OSError as exc:
            raise ConfigurationError(
                f"cannot create the directory of the default SQLite file {path}: "
                f"{exc.strerror or exc}; set XDG_STATE_HOME to a writable directory, or "
                "TENURE_URL (e.g. sqlite:///path/to/locks.db)"
            ) from exc
    elif not path.parent.is_dir():
        raise ConfigurationError(
            f"{display(path)}: cannot use the database: no such directory {path.parent}"
        )
    return Settings(path, float(busy_timeout), synchronous, gc_after)


def check_sqlite_library() -> None:
    """ConfigurationError when Python's ``sqlite3`` module is linked with a SQLite library
    older than ``MINIMUM_SQLITE``, naming the version found and the minimum."""
    found = sqlite3.sqlite_version
    try:
        version = tuple(int(part) for part in found.split("."))
    except ValueError:
        return  # not a version we can read: let SQLite itself answer
    if version < MINIMUM_SQLITE:
        minimum = ".".join(map(str, MINIMUM_SQLITE))
        raise ConfigurationError(
            f"the 'sqlite' backend needs the SQLite library {minimum} or later (its SQL "
            f"uses RETURNING), but Python's sqlite3 module is linked with SQLite {found}: "
            "use a Python built with a newer SQLite, or another backend"
        )
