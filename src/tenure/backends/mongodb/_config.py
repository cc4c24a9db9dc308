"""``mongodb://`` options: tenure's own, split from the ones PyMongo takes (no I/O); and the
in-process release waiters, one set per collection.

tenure's options may be given in the URL query or as ``connect()`` keywords (keywords win):

- ``database`` (default: the URL's path, else ``tenure``) and ``collection`` (``locks``).
- ``write_concern``: ``majority`` (default), or a positive number of members, or a tag-set
  mode name. On a standalone server ``majority`` is the same as one member. When it is not
  given but the URL sets PyMongo's ``w`` / ``journal`` / ``wTimeoutMS``, the URL's applies.
- ``read_concern``: ``majority`` (default), ``local`` or ``linearizable``; used by the reads
  (``owned``, ``inspect``, ``list``). When not given but the URL sets ``readConcernLevel``, that.
- ``timeout``: seconds (default 5) for each operation as a whole, server selection and
  connecting included: a dead server is a BackendError after at most this long. PyMongo's own
  ``timeoutMS`` / ``serverSelectionTimeoutMS`` / ``connectTimeoutMS``, when set, win. PyMongo
  ignores ``serverSelectionTimeoutMS``, ``socketTimeoutMS`` and ``waitQueueTimeoutMS`` under
  ``timeoutMS``: when the URL sets one of those and not ``timeoutMS``, tenure sets no
  ``timeoutMS`` and gives ``timeout`` to each step (selection, connect, socket) not set.
- ``gc_after``: seconds (default 10 minutes) a document is kept after its lock was last used
  before the TTL index may delete it; ``none`` keeps documents forever.

Every other option is PyMongo's (``replicaSet``, ``tls``, ``maxPoolSize``...), validated by it.
"""

from __future__ import annotations

import dataclasses
import threading
import urllib.parse
from typing import Any

from pymongo import common, uri_parser
from pymongo.errors import PyMongoError
from pymongo.read_concern import ReadConcern
from pymongo.write_concern import WriteConcern

from tenure._errors import ConfigurationError
from tenure._options import DEFAULT_GC_AFTER, gc_after_option, number_option
from tenure._urls import redact
from tenure._waiters import Waiters

__all__ = [
    "DEFAULT_GC_AFTER",
    "DEFAULT_TIMEOUT",
    "MongoSettings",
    "parse_settings",
    "release_waiters",
]

DEFAULT_TIMEOUT = 5.0
OWN_OPTIONS = ("database", "collection", "write_concern", "read_concern", "timeout", "gc_after")
READ_CONCERNS = ("local", "majority", "linearizable")
# PyMongo options (lower case) that, when the user sets them, replace one of our defaults.
_WRITE_CONCERN_KEYS = {"w", "journal", "wtimeoutms"}
_READ_CONCERN_KEYS = {"readconcernlevel"}
_TIMEOUT_KEYS = {
    "timeoutMS": "timeoutms",
    "serverSelectionTimeoutMS": "serverselectiontimeoutms",
    "connectTimeoutMS": "connecttimeoutms",
}
_OVERRIDDEN_BY_TIMEOUT_MS = {"serverselectiontimeoutms", "sockettimeoutms", "waitqueuetimeoutms"}
"""PyMongo's per-step timeouts that its timeoutMS (client-side operation timeout) replaces."""
_LEGACY_TIMEOUT_KEYS = {
    "serverSelectionTimeoutMS": "serverselectiontimeoutms",
    "connectTimeoutMS": "connecttimeoutms",
    "socketTimeoutMS": "sockettimeoutms",
}
"""tenure's ``timeout`` given per step, for a URL that sets one of those and not timeoutMS."""


@dataclasses.dataclass(frozen=True, slots=True)
class MongoSettings:
    url: str
    """The URL as given, for messages (print it through ``redact``)."""
    client_url: str
    """The URL PyMongo gets: tenure's own options removed, everything else verbatim."""
    client_options: dict[str, Any]
    """Keyword arguments for ``MongoClient`` / ``AsyncMongoClient``."""
    database: str
    collection: str
    write_concern: WriteConcern | None
    """None: the concern the URL asked PyMongo for."""
    read_concern: ReadConcern | None
    timeout: float
    gc_after: float | None

    @property
    def gc_after_ms(self) -> int | None:
        return None if self.gc_after is None else round(self.gc_after * 1000)


def parse_settings(url: str, options: dict[str, Any]) -> MongoSettings:
    """Split ``url`` and ``options`` into ours and PyMongo's; ConfigurationError if bad."""
    scheme, _, rest = url.partition("://")
    if scheme.lower() not in ("mongodb", "mongodb+srv") or not rest:
        raise ConfigurationError(f"not a MongoDB URL: {redact(url)!r}")
    parts = urllib.parse.urlsplit(url)
    ours, client_query = _split_query(parts.query)
    client_url = urllib.parse.urlunsplit(parts._replace(query=client_query))
    driver_options = {k: v for k, v in options.items() if k not in OWN_OPTIONS}
    settings = {**ours, **{k: v for k, v in options.items() if k in OWN_OPTIONS}}

    path_database = _validate_url(client_url, scheme.lower(), driver_options)
    given = {key.lower() for key in driver_options}
    given |= {
        urllib.parse.unquote_plus(piece.partition("=")[0]).lower()
        for piece in _pieces(client_query)
    }

    timeout = _seconds(settings.get("timeout", DEFAULT_TIMEOUT), "timeout")
    client_options: dict[str, Any] = {"appname": "tenure"} if "appname" not in given else {}
    # PyMongo ignores these once timeoutMS is set (it bounds each operation as a whole): a
    # URL that sets one and not timeoutMS gets what it asked for, and the others tenure's
    # timeout, without timeoutMS.
    keys = _TIMEOUT_KEYS if "timeoutms" in given or not given & _OVERRIDDEN_BY_TIMEOUT_MS else (
        _LEGACY_TIMEOUT_KEYS
    )
    for key, lower in keys.items():
        if lower not in given:
            client_options[key] = round(timeout * 1000)
    client_options.update(driver_options)

    return MongoSettings(
        url=url,
        client_url=client_url,
        client_options=client_options,
        database=_name(settings.get("database") or path_database or "tenure", "database"),
        collection=_name(settings.get("collection", "locks"), "collection"),
        write_concern=_write_concern(settings.get("write_concern"), given),
        read_concern=_read_concern(settings.get("read_concern"), given),
        timeout=timeout,
        gc_after=_gc_after(settings.get("gc_after", DEFAULT_GC_AFTER)),
    )


def _pieces(query: str) -> list[str]:
    return [piece for piece in query.replace(";", "&").split("&") if piece]


def _split_query(query: str) -> tuple[dict[str, str], str]:
    """tenure's options out of a raw query string; the rest kept byte for byte (PyMongo
    unquotes values itself, and re-encoding could change them)."""
    ours: dict[str, str] = {}
    kept = []
    for piece in _pieces(query):
        key, _, value = piece.partition("=")
        key = urllib.parse.unquote_plus(key)
        if key in OWN_OPTIONS:
            ours[key] = urllib.parse.unquote_plus(value)
        else:
            kept.append(piece)
    return ours, "&".join(kept)


def _validate_url(client_url: str, scheme: str, driver_options: dict[str, Any]) -> str | None:
    """Let PyMongo check the URL and keyword options now, without DNS or network; returns
    the database the URL's path names, if any."""
    try:
        for key, value in driver_options.items():
            # MongoClient's keyword validator: URL options and keyword-only ones (username,
            # password, tz_aware, ...) alike.
            common.validate(key, value)
        if scheme == "mongodb":
            parsed = uri_parser.parse_uri(client_url, warn=False)
            database: str | None = parsed.get("database")
            return database
        # mongodb+srv: the host list comes from DNS at first use; check the rest here.
        parts = urllib.parse.urlsplit(client_url)
        host = parts.netloc.rpartition("@")[2]
        if not host or "," in host or ":" in host:
            raise ValueError("mongodb+srv:// takes exactly one host name, without a port")
        if parts.query:
            uri_parser.split_options(parts.query, validate=True, warn=False)
        path = urllib.parse.unquote(parts.path.lstrip("/"))
        return path or None
    except (PyMongoError, ValueError, TypeError, OSError) as exc:
        shown = redact(client_url)
        raise ConfigurationError(f"bad MongoDB URL or option ({shown}): {exc}") from exc


def _seconds(value: object, what: str) -> float:
    return number_option("mongodb", what, value, unit=" seconds", above=0)


def _name(value: object, what: str) -> str:
    if not isinstance(value, str) or not value:
        raise ConfigurationError(f"mongodb {what} must be a non-empty string, not {value!r}")
    return value


def _write_concern(value: object, given: set[str]) -> WriteConcern | None:
    if value is None:
        return None if given & _WRITE_CONCERN_KEYS else WriteConcern(w="majority")
    w: int | str
    if isinstance(value, int) and not isinstance(value, bool):
        w = value
    elif isinstance(value, str) and value.strip().isdigit():
        w = int(value)
    elif isinstance(value, str) and value.strip():
        w = value.strip()
    else:
        raise ConfigurationError(
            f"mongodb write_concern must be 'majority' or a number, not {value!r}"
        )
    if isinstance(w, int) and w < 1:
        # Unacknowledged writes cannot tell a grant from a refusal.
        raise ConfigurationError("mongodb write_concern must be acknowledged (1 or more)")
    return WriteConcern(w=w)


def _read_concern(value: object, given: set[str]) -> ReadConcern | None:
    if value is None:
        return None if given & _READ_CONCERN_KEYS else ReadConcern("majority")
    if value not in READ_CONCERNS:
        raise ConfigurationError(
            f"mongodb read_concern must be one of {READ_CONCERNS}, not {value!r}"
        )
    return ReadConcern(str(value))


def _gc_after(value: object) -> float | None:
    return gc_after_option("mongodb", value)


_waiters_by_collection: dict[tuple[str, str, str], Waiters] = {}
_waiters_mutex = threading.Lock()


def release_waiters(settings: MongoSettings) -> Waiters:
    """The in-process waiters of one collection, shared by every client of it in this process
    (threads and asyncio alike), so that a release here wakes a waiter here at once."""
    key = (redact(settings.client_url), settings.database, settings.collection)
    with _waiters_mutex:
        return _waiters_by_collection.setdefault(key, Waiters())
