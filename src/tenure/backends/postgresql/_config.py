"""A ``postgresql://`` URL and ``connect()``'s keyword options, read once into frozen
settings (for both flavours). Every query parameter tenure does not own goes to libpq."""

from __future__ import annotations

import dataclasses
import math
import urllib.parse
from typing import Any

import psycopg
import psycopg.conninfo

from tenure._errors import ConfigurationError
from tenure._options import DEFAULT_GC_AFTER, gc_after_option
from tenure._urls import redact, scrub, url_secrets
from tenure.backends._sql_common import SqlOptions, sql_options
from tenure.backends.postgresql import SCHEMES

__all__ = ["OPTIONS", "PostgreSQLSettings", "settings_from_url"]

OPTIONS = ("table", "timeout", "pool_size", "gc_after")


@dataclasses.dataclass(frozen=True)
class PostgreSQLSettings:
    """What a store is built from; a renewal twin is built from the same value."""

    conninfo: str
    """The libpq URL, without tenure's own query parameters."""
    connect_args: dict[str, Any]
    """Keyword arguments for each connect (libpq's timeout, application name)."""
    options: SqlOptions
    display: str
    """The URL without credentials, for messages."""
    gc_after: float | None = DEFAULT_GC_AFTER


def settings_from_url(url: str, **options: Any) -> PostgreSQLSettings:
    """ConfigurationError for a URL libpq cannot read or an unknown option."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme.lower() not in SCHEMES:
        raise ConfigurationError(f"not a PostgreSQL URL: {redact(url)!r}")
    query = urllib.parse.parse_qsl(parts.query, keep_blank_values=True)
    ours = {key: value for key, value in query if key in OPTIONS}
    settings, rest = sql_options("postgresql", ours, options, extra=("gc_after",))
    gc_after = gc_after_option("postgresql", rest.pop("gc_after", DEFAULT_GC_AFTER))
    libpq_query = urllib.parse.urlencode([(k, v) for k, v in query if k not in OPTIONS])
    # Rebuilt by hand, not with urlunsplit: that drops the "//" of an empty host, and
    # libpq's postgresql:///db (the local socket, or $PGHOST) becomes postgresql:/db,
    # which libpq does not read as a URL.
    conninfo = f"{parts.scheme}://{parts.netloc}{parts.path}"
    if libpq_query:
        conninfo += f"?{libpq_query}"
    try:
        params = psycopg.conninfo.conninfo_to_dict(conninfo)
    except psycopg.Error as exc:
        # libpq's words quote what it could not read as written, a password included
        # ('invalid percent-encoded token: "50%zzoff"'): every secret of the URL goes.
        detail = scrub(str(exc).strip(), url_secrets(url))
        raise ConfigurationError(f"bad PostgreSQL URL {redact(url)!r}: {detail}") from None
    connect_args: dict[str, Any] = {}
    if "connect_timeout" not in params:
        connect_args["connect_timeout"] = max(2, math.ceil(settings.timeout))
    if "application_name" not in params:
        connect_args["application_name"] = "tenure"
    return PostgreSQLSettings(conninfo, connect_args, settings, redact(url), gc_after)
