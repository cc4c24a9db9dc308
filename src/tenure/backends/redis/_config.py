"""Redis URLs and options, parsed once into ``RedisSettings`` for both flavours.

    redis://[[user]:password@]host[:port][/db][?option=value&...]
    rediss://...                                              the same over TLS
    unix://[[user]:password@]/path/to/redis.sock[?db=N&...]
    redis+cluster://[[user]:password@]host:port[,host:port...][?...]     cluster seeds
    redis+sentinel://[[user]:password@]host:port[,host:port...]/service[/db][?...]

Options come from the URL's query string or from ``connect()``'s keyword arguments (keywords
win); anything a URL can't carry (TLS files and versions, credentials kept out of URLs) is a
keyword. Unknown options are errors, not silently ignored.

Defaults are chosen so that a dead server is an error within seconds, never a hang:
``socket_timeout`` and ``socket_connect_timeout`` 3 s, and ``retries`` 0 (redis-py otherwise
retries a failed connection several times with back-off). The lock logic above decides what
to retry: the watchdog retries renewals until the lease's end, an acquire fails.

``gc_after`` (seconds, default 10 minutes; ``none`` keeps records forever): how long the record
of an idle lock (its name and fence) outlives its last lease, that of an idle semaphore (its
fence and limit) its last permit, and that of an idle read-write or fair lock (its fence) its
last lease or waiting place. Fences never go back when it is removed (see ``_scripts``,
``_semaphores`` and ``_rwlocks``).
"""

from __future__ import annotations

import dataclasses
import re
import urllib.parse
from collections.abc import Callable
from typing import Any

from tenure._errors import ConfigurationError
from tenure._hosts import shared_credentials, split_location
from tenure._options import (
    DEFAULT_GC_AFTER,
    flag_option,
    gc_after_option,
    integer_option,
    number_option,
)
from tenure._urls import is_secret_option, redact
from tenure.backends.redis import SCHEMES

__all__ = ["DEFAULT_GC_AFTER", "DEFAULT_PORT", "DEFAULT_SENTINEL_PORT", "RedisSettings", "parse"]

DEFAULT_PORT = 6379
DEFAULT_SENTINEL_PORT = 26379
NAMESPACE = re.compile(r"[A-Za-z0-9_.:-]{1,64}")


def _float(what: str, minimum: float = 0.0) -> Callable[[object], float]:
    return lambda value: number_option("redis", what, value, at_least=minimum)


def _positive(what: str) -> Callable[[object], float]:
    return lambda value: number_option("redis", what, value, unit=" seconds", above=0)


def _int(what: str, minimum: int = 0) -> Callable[[object], int]:
    return lambda value: integer_option("redis", what, value, at_least=minimum)


def _bool(what: str) -> Callable[[object], bool]:
    return lambda value: flag_option("redis", what, value)


def _text(what: str) -> Callable[[object], str]:
    def parse(value: object) -> str:
        if not isinstance(value, str):
            # A secret's value is never echoed, even a wrong one: it may be the right
            # password in the wrong type (bytes).
            found = type(value).__name__ if is_secret_option(what) else repr(value)
            raise ConfigurationError(f"redis option {what} must be a str, not {found}")
        return value

    return parse


def _namespace(value: object) -> str:
    if not isinstance(value, str) or not NAMESPACE.fullmatch(value):
        raise ConfigurationError(
            f"redis option namespace must be 1-64 characters of A-Z a-z 0-9 _ . : -, "
            f"not {value!r}"
        )
    return value


def _gc_after(value: object) -> float | None:
    return gc_after_option("redis", value)


def _any(value: object) -> object:
    return value


# name -> parser. Options whose value is an object (an SSL version, CA data) are keyword-only
# in practice, but a string in the URL is accepted where redis-py accepts one.
OPTIONS: dict[str, Callable[[object], Any]] = {
    "db": _int("db"),
    "namespace": _namespace,
    "socket_timeout": _positive("socket_timeout"),
    "socket_connect_timeout": _positive("socket_connect_timeout"),
    "retries": _int("retries"),
    "max_connections": _int("max_connections", 1),
    "wait_connections": _int("wait_connections"),
    "handoff_window": _float("handoff_window"),
    "gc_after": _gc_after,
    "health_check_interval": _int("health_check_interval"),
    "client_name": _text("client_name"),
    "username": _text("username"),
    "password": _text("password"),
    "sentinel_username": _text("sentinel_username"),
    "sentinel_password": _text("sentinel_password"),
    "ssl": _bool("ssl"),
    "ssl_ca_certs": _text("ssl_ca_certs"),
    "ssl_ca_path": _text("ssl_ca_path"),
    "ssl_ca_data": _text("ssl_ca_data"),
    "ssl_certfile": _text("ssl_certfile"),
    "ssl_keyfile": _text("ssl_keyfile"),
    "ssl_password": _text("ssl_password"),
    "ssl_cert_reqs": _text("ssl_cert_reqs"),
    "ssl_check_hostname": _bool("ssl_check_hostname"),
    "ssl_min_version": _any,
    "ssl_ciphers": _text("ssl_ciphers"),
}
SSL_OPTIONS = frozenset(name for name in OPTIONS if name.startswith("ssl_"))
SSL_CERT_REQS = ("none", "optional", "required")


@dataclasses.dataclass(frozen=True)
class RedisSettings:
    """Everything needed to build either flavour's connections; nothing flavour-specific."""

    scheme: str
    topology: str
    """"single" (redis, rediss, unix), "cluster" or "sentinel"."""
    addresses: tuple[tuple[str, int], ...]
    """The server; the cluster's seed nodes; or the sentinels."""
    unix_path: str | None
    service_name: str | None
    db: int
    username: str | None
    password: str | None = dataclasses.field(repr=False)
    tls: bool
    namespace: str
    socket_timeout: float
    socket_connect_timeout: float
    retries: int
    wait_connections: int
    """Most blocking waits (one connection each) at once; more waiters back off instead."""
    handoff_window: float
    """Seconds a release reserves the lock for the longest waiter (0: no reservation)."""
    display: str
    """The URL without its password."""
    extra: dict[str, Any] = dataclasses.field(default_factory=dict, repr=False)
    """Further redis-py connection arguments: client_name, max_connections, ssl_*..."""
    sentinel_extra: dict[str, Any] = dataclasses.field(default_factory=dict, repr=False)
    gc_after: float | None = DEFAULT_GC_AFTER
    """Seconds an idle semaphore's record outlives its last permit (None: forever)."""

    @property
    def gc_after_ms(self) -> int:
        """``gc_after`` for the scripts: whole milliseconds, 0 for forever."""
        return 0 if self.gc_after is None else max(1, round(self.gc_after * 1000))

    def connection_kwargs(self) -> dict[str, Any]:
        """Arguments for redis-py's connection pools and cluster client (no ``retry``: its
        class differs between the flavours)."""
        kwargs: dict[str, Any] = {
            "socket_timeout": self.socket_timeout,
            "socket_connect_timeout": self.socket_connect_timeout,
            "username": self.username,
            "password": self.password,
            **self.extra,
        }
        return kwargs


def parse(url: str, options: dict[str, Any]) -> RedisSettings:
    """Parse a Redis URL and keyword options; raise ConfigurationError naming the problem."""
    display = redact(url)
    scheme, separator, rest = url.partition("://")
    scheme = scheme.lower()
    if not separator or scheme not in SCHEMES:
        raise ConfigurationError(f"not a Redis URL: {display!r}")
    location, _, query = rest.partition("?")
    if "#" in query or "#" in location:
        raise ConfigurationError(f"Redis URLs take no #fragment: {display!r}")
    settings = _query(query, display)
    for key, value in options.items():
        settings[key] = value
    unknown = set(settings) - set(OPTIONS)
    if unknown:
        raise ConfigurationError(
            f"unknown redis option(s) {sorted(unknown)}; known: {', '.join(sorted(OPTIONS))}"
        )
    values = {key: OPTIONS[key](value) for key, value in settings.items()}

    netloc, hosts_and_path = split_location(location)
    userinfo, hosts_only = shared_credentials(netloc, display, f"{scheme}://")
    hosts_and_path = ",".join(hosts_only) + hosts_and_path
    username, password = _credentials(userinfo) if userinfo is not None else (None, None)
    username = values.pop("username", username)
    password = values.pop("password", password)

    unix_path = None
    service_name = None
    db = 0
    if scheme == "unix":
        if not hosts_and_path.startswith("/"):
            raise ConfigurationError(
                f"unix:// URLs name an absolute socket path: unix:///path/to/redis.sock, "
                f"not {display!r}"
            )
        unix_path = urllib.parse.unquote(hosts_and_path)
        addresses: tuple[tuple[str, int], ...] = ()
        topology = "single"
    else:
        hosts, slash, path = hosts_and_path.partition("/")
        default_port = DEFAULT_SENTINEL_PORT if scheme == "redis+sentinel" else DEFAULT_PORT
        several = scheme not in ("redis", "rediss")
        addresses = _addresses(hosts, default_port, display, several=several)
        segments = [urllib.parse.unquote(part) for part in path.split("/")] if slash else []
        while segments and segments[-1] == "":
            segments.pop()
        if scheme == "redis+sentinel":
            topology = "sentinel"
            if not segments or not segments[0]:
                raise ConfigurationError(
                    f"redis+sentinel URLs name the master's service: "
                    f"redis+sentinel://host:26379/mymaster, not {display!r}"
                )
            service_name = segments[0]
            db_segments = segments[1:]
        elif scheme == "redis+cluster":
            topology = "cluster"
            db_segments = segments
        else:
            topology = "single"
            db_segments = segments
        if len(db_segments) > 1:
            raise ConfigurationError(f"unexpected path in Redis URL {display!r}")
        if db_segments:
            db = _int("db (URL path)")(db_segments[0])
    if "db" in values:
        db = values.pop("db")
    if topology == "cluster" and db != 0:
        raise ConfigurationError("Redis Cluster has only database 0")

    tls = scheme == "rediss" or values.pop("ssl", False)
    if scheme == "unix" and tls:
        raise ConfigurationError("unix:// sockets do not take TLS options")
    if scheme == "rediss" and "ssl" in values:
        values.pop("ssl")
    ssl_given = SSL_OPTIONS & set(values)
    if ssl_given and not tls:
        raise ConfigurationError(
            f"TLS option(s) {sorted(ssl_given)} need a rediss:// URL (or ssl=true)"
        )
    if "ssl_cert_reqs" in values and values["ssl_cert_reqs"] not in SSL_CERT_REQS:
        raise ConfigurationError(f"ssl_cert_reqs must be one of {SSL_CERT_REQS}")

    sentinel_extra = {
        key.removeprefix("sentinel_"): values.pop(key)
        for key in ("sentinel_username", "sentinel_password")
        if key in values
    }
    if sentinel_extra and topology != "sentinel":
        raise ConfigurationError("sentinel_* options need a redis+sentinel:// URL")

    extra = {
        key: values.pop(key)
        for key in ("client_name", "max_connections", "health_check_interval", *ssl_given)
        if key in values
    }
    if tls:
        extra["ssl"] = True
    return RedisSettings(
        scheme=scheme,
        topology=topology,
        addresses=addresses,
        unix_path=unix_path,
        service_name=service_name,
        db=db,
        username=username,
        password=password,
        tls=tls,
        namespace=values.pop("namespace", "tenure"),
        socket_timeout=values.pop("socket_timeout", 3.0),
        socket_connect_timeout=values.pop("socket_connect_timeout", 3.0),
        retries=values.pop("retries", 0),
        wait_connections=values.pop("wait_connections", 64),
        handoff_window=values.pop("handoff_window", 0.05),
        gc_after=values.pop("gc_after", DEFAULT_GC_AFTER),
        display=display,
        extra=extra,
        sentinel_extra=sentinel_extra,
    )


def _query(query: str, display: str) -> dict[str, Any]:
    settings: dict[str, Any] = {}
    try:
        pairs = urllib.parse.parse_qsl(query, keep_blank_values=True, strict_parsing=bool(query))
    except ValueError:
        raise ConfigurationError(f"malformed query string in {display!r}") from None
    for key, value in pairs:
        if key in settings:
            raise ConfigurationError(f"redis option {key} given twice in {display!r}")
        if key in ("password", "sentinel_password", "ssl_password"):
            raise ConfigurationError(
                f"pass {key} as a keyword argument or in the URL's user info, not the query"
            )
        settings[key] = value
    return settings


def _credentials(userinfo: str) -> tuple[str | None, str | None]:
    user, colon, password = userinfo.partition(":")
    username = urllib.parse.unquote(user) or None
    return username, (urllib.parse.unquote(password) if colon else None)


def _addresses(
    hosts: str, default_port: int, display: str, *, several: bool
) -> tuple[tuple[str, int], ...]:
    if not hosts:
        if several:
            raise ConfigurationError(f"no host in Redis URL {display!r}")
        return (("localhost", default_port),)
    found = []
    for item in hosts.split(","):
        found.append(_address(item.strip(), default_port, display))
    if len(found) > 1 and not several:
        raise ConfigurationError(
            f"one host per redis:// URL; use redis+cluster:// or redis+sentinel:// for several: "
            f"{display!r}"
        )
    return tuple(found)


def _address(item: str, default_port: int, display: str) -> tuple[str, int]:
    if item.startswith("["):  # [IPv6]:port
        host, bracket, rest = item[1:].partition("]")
        if not bracket or (rest and not rest.startswith(":")):
            raise ConfigurationError(f"bad IPv6 address {item!r} in {display!r}")
        port_text = rest[1:]
    else:
        host, _, port_text = item.partition(":")
    if not host:
        raise ConfigurationError(f"empty host in Redis URL {display!r}")
    if not port_text:
        return urllib.parse.unquote(host), default_port
    if not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise ConfigurationError(f"bad port {port_text!r} in Redis URL {display!r}")
    return urllib.parse.unquote(host), int(port_text)
