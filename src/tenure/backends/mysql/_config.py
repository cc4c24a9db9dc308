"""``mysql://user:pw@host:3306/db`` (or ``mariadb://``) and ``connect()``'s options, read into
the store's settings (both flavours)."""

from __future__ import annotations

import dataclasses
import urllib.parse
from typing import Any

from tenure._errors import ConfigurationError
from tenure._options import DEFAULT_GC_AFTER, gc_after_option
from tenure._urls import redact
from tenure.backends._sql_common import SqlOptions, sql_options
from tenure.backends.mysql import SCHEMES

__all__ = ["Settings", "settings"]

OWN_OPTIONS = ("gc_after",)
"""This backend's own options beside the shared SQL ones."""
URL_OPTIONS = ("unix_socket", "ssl_ca", "ssl_cert", "ssl_key", "ssl_verify_cert",
               "ssl_verify_identity")
"""Query parameters that go to PyMySQL as they are."""
KEYWORD_OPTIONS = ("ssl",)
"""Keyword-only: ``ssl`` takes an ``ssl.SSLContext`` or PyMySQL's dict."""


@dataclasses.dataclass(frozen=True)
class Settings:
    connect_args: dict[str, Any]
    """PyMySQL's ``connect`` arguments (host, port, user, password, database, TLS...)."""
    options: SqlOptions
    display: str
    """The URL without its password."""
    gc_after: float | None = DEFAULT_GC_AFTER


def settings(url: str, options: dict[str, Any]) -> Settings:
    """The settings of ``url`` and ``options``; ConfigurationError for anything unusable."""
    display = redact(url)
    try:
        parts = urllib.parse.urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise ConfigurationError(f"bad MySQL URL {display!r}: {exc}") from None
    if parts.scheme.lower() not in SCHEMES:
        raise ConfigurationError(f"not a MySQL URL: {display!r}")
    database = urllib.parse.unquote(parts.path.lstrip("/"))
    if not database or "/" in database:
        raise ConfigurationError(
            f"a MySQL URL names one database: mysql://user:password@host:3306/db, "
            f"not {display!r}"
        )
    query = dict(urllib.parse.parse_qsl(parts.query, keep_blank_values=True))
    sql, extra = sql_options(
        "mysql", query, options, (*OWN_OPTIONS, *URL_OPTIONS, *KEYWORD_OPTIONS)
    )
    gc_after = gc_after_option("mysql", extra.pop("gc_after", DEFAULT_GC_AFTER))
    keyword_in_url = set(query) & set(KEYWORD_OPTIONS)
    if keyword_in_url:
        raise ConfigurationError(f"{sorted(keyword_in_url)} can only be keyword options")
    connect_args: dict[str, Any] = {
        "host": parts.hostname or "localhost",
        "port": port or 3306,
        "user": urllib.parse.unquote(parts.username) if parts.username else None,
        "password": urllib.parse.unquote(parts.password) if parts.password else "",
        "database": database,
    }
    for key, value in extra.items():
        flag = key in ("ssl_verify_cert", "ssl_verify_identity") and isinstance(value, str)
        connect_args[key] = value.lower() in ("1", "true", "yes", "on") if flag else value
    return Settings(connect_args, sql, display, gc_after)
