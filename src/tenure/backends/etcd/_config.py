"""The etcd URL forms and options.

    etcd://host:port[,host:port...][?namespace=tenure&timeout=5]
    etcds://user:password@host:port,...?ssl_ca=/ca.pem&ssl_cert=/c.pem&ssl_key=/k.pem

``gc_after`` (seconds, default 10 minutes; ``none``: for ever): how long a released name's
fence key, which only lets ``inspect`` show its last fence, is kept after its release.

Every listed member is an endpoint: a request that cannot reach one (refused, timed out)
goes to the next. Credentials, when given, log in through etcd's auth API
(``/v3/auth/authenticate``) and the token travels with every request.
"""

from __future__ import annotations

import dataclasses
import urllib.parse
from typing import Any

from tenure._errors import ConfigurationError
from tenure._hosts import shared_credentials
from tenure._options import (
    DEFAULT_GC_AFTER,
    gc_after_option,
    merged_options,
    namespace_option,
    number_option,
)
from tenure._urls import redact

__all__ = ["EtcdSettings", "parse"]

DEFAULT_PORT = 2379
URL_OPTIONS = ("namespace", "timeout", "ssl_ca", "ssl_cert", "ssl_key", "gc_after")


@dataclasses.dataclass(frozen=True)
class EtcdSettings:
    endpoints: tuple[str, ...]
    """Base URLs of the members, ``http://host:port`` or ``https://host:port``."""
    namespace: str = "tenure"
    """The first segment of every key tenure writes."""
    timeout: float = 5.0
    """Seconds for each request's reply (across all endpoints tried)."""
    username: str | None = None
    password: str | None = dataclasses.field(default=None, repr=False)
    ssl_ca: str | None = None
    ssl_cert: str | None = None
    ssl_key: str | None = None
    display: str = ""
    """The URL without its password, for messages."""
    gc_after: float | None = DEFAULT_GC_AFTER
    """Seconds a released name's fence key (its last fence, for ``inspect``) is kept after
    its last release (None: for ever); see ``_statements``."""


def parse(url: str, options: dict[str, Any]) -> EtcdSettings:
    display = redact(url)
    scheme, _, rest = url.partition("://")
    scheme = scheme.lower()
    if scheme not in ("etcd", "etcds"):
        raise ConfigurationError(f"not an etcd URL: {display!r}")
    # The query first: its values are often paths (ssl_ca=/etc/ssl/ca.pem), whose slashes
    # are not a path of the URL.
    before_query, _, query_text = rest.partition("?")
    netloc, _, path = before_query.partition("/")
    if path:
        raise ConfigurationError(
            f"an etcd URL names members only (etcd://host:port,host:port), not a path: "
            f"{display!r}; the key prefix is the namespace option"
        )
    userinfo, addresses = shared_credentials(netloc, display, "etcd")
    username = password = None
    if userinfo is not None:
        user, colon, secret = userinfo.partition(":")
        username = urllib.parse.unquote(user) or None
        password = urllib.parse.unquote(secret) if colon else None
        if username is None:
            raise ConfigurationError(f"etcd credentials need a user name: {display!r}")
    endpoints = tuple(_endpoint(host, scheme, display) for host in addresses)
    merged = merged_options("etcd", query_text, options, URL_OPTIONS)
    namespace = namespace_option("etcd", merged.get("namespace", "tenure"))
    tls = {key: merged.get(key) for key in ("ssl_ca", "ssl_cert", "ssl_key")}
    if scheme == "etcd" and any(tls.values()):
        raise ConfigurationError("ssl_ca, ssl_cert and ssl_key need an etcds:// URL")
    if bool(tls["ssl_cert"]) != bool(tls["ssl_key"]):
        raise ConfigurationError("etcd options ssl_cert and ssl_key go together")
    return EtcdSettings(
        endpoints=endpoints,
        namespace=namespace,
        timeout=number_option("etcd", "timeout", merged.get("timeout", 5.0), unit=" seconds",
                              above=0, at_most=3600),
        username=username,
        password=password,
        ssl_ca=tls["ssl_ca"],
        ssl_cert=tls["ssl_cert"],
        ssl_key=tls["ssl_key"],
        display=display,
        gc_after=gc_after_option("etcd", merged.get("gc_after", DEFAULT_GC_AFTER)),
    )


def _endpoint(host: str, scheme: str, display: str) -> str:
    try:
        parts = urllib.parse.urlsplit(f"//{host}")
        port = parts.port or DEFAULT_PORT
    except ValueError as exc:
        raise ConfigurationError(f"bad etcd member {host!r} in {display!r}: {exc}") from None
    if not parts.hostname:
        raise ConfigurationError(f"an etcd URL needs host:port for each member: {display!r}")
    hostname = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    return f"{'https' if scheme == 'etcds' else 'http'}://{hostname}:{port}"
