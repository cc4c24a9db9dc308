"""Which backend a URL names, the default URL, and URLs safe to print."""

from __future__ import annotations

import dataclasses
import importlib
import importlib.metadata
import os
import pathlib
import urllib.parse
from types import ModuleType

from tenure._errors import ConfigurationError, InvalidArgumentType

__all__ = [
    "BackendEntry",
    "default_sqlite_path",
    "load_backend_module",
    "redact",
    "resolve_url",
    "scheme_of",
]


@dataclasses.dataclass(frozen=True, slots=True)
class BackendEntry:
    package: str
    """The backend package; its ``_async`` / ``_sync`` modules define ``BACKEND``."""
    extra: str | None
    """The pip extra that installs its driver (None: standard library only)."""


# Every scheme tenure serves, mapped to the package that serves it. The packages are imported
# only when a URL names them, so `import tenure` needs no driver. Third-party backends register
# under the "tenure.backends" entry-point group with the same shape (scheme = "pkg.module").
BUILTIN_BACKENDS: dict[str, BackendEntry] = {
    "memory": BackendEntry("tenure.backends.memory", None),
    "sqlite": BackendEntry("tenure.backends.sqlite", None),
    "redis": BackendEntry("tenure.backends.redis", "redis"),
    "rediss": BackendEntry("tenure.backends.redis", "redis"),
    "unix": BackendEntry("tenure.backends.redis", "redis"),
    "redis+cluster": BackendEntry("tenure.backends.redis", "redis"),
    "redis+sentinel": BackendEntry("tenure.backends.redis", "redis"),
    "redlock": BackendEntry("tenure.backends.redlock", "redis"),
    "mongodb": BackendEntry("tenure.backends.mongodb", "mongodb"),
    "mongodb+srv": BackendEntry("tenure.backends.mongodb", "mongodb"),
    "mysql": BackendEntry("tenure.backends.mysql", "mysql"),
    "mariadb": BackendEntry("tenure.backends.mysql", "mysql"),
    "postgresql": BackendEntry("tenure.backends.postgresql", "postgresql"),
    "postgres": BackendEntry("tenure.backends.postgresql", "postgresql"),
    "etcd": BackendEntry("tenure.backends.etcd", "etcd"),
    "etcds": BackendEntry("tenure.backends.etcd", "etcd"),
    "zookeeper": BackendEntry("tenure.backends.zookeeper", "zookeeper"),
    "zk": BackendEntry("tenure.backends.zookeeper", "zookeeper"),
}

ENTRY_POINT_GROUP = "tenure.backends"


def default_sqlite_path() -> pathlib.Path:
    """The per-user state file: the same for every process of this user, whatever its cwd."""
    state_home = os.environ.get("XDG_STATE_HOME") or str(pathlib.Path.home() / ".local" / "state")
    return pathlib.Path(state_home) / "tenure" / "locks.db"


def resolve_url(url: str | None) -> str:
    """The URL to use: the argument, else ``$TENURE_URL``, else the per-user SQLite file."""
    if url is None:
        url = os.environ.get("TENURE_URL") or None
    if url is None:
        return f"sqlite:///{default_sqlite_path()}"
    if not isinstance(url, str):
        raise InvalidArgumentType(f"URL must be a str, not {type(url).__name__}")
    return url


def scheme_of(url: str) -> str:
    scheme, separator, _ = url.partition("://")
    if not separator or not scheme:
        raise ConfigurationError(
            f"not a backend URL: {redact(url)!r} (expected scheme://..., e.g. sqlite:///locks.db)"
        )
    return scheme.lower()


def _entry_for(scheme: str) -> BackendEntry:
    if scheme in BUILTIN_BACKENDS:
        return BUILTIN_BACKENDS[scheme]
    for entry_point in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        if entry_point.name == scheme:
            return BackendEntry(entry_point.value, None)
    known = ", ".join(sorted(BUILTIN_BACKENDS))
    raise ConfigurationError(f"unknown URL scheme {scheme!r}; tenure knows: {known}")


def load_backend_module(url: str, flavour: str) -> ModuleType:
    """Import the ``_async`` or ``_sync`` module of the backend serving ``url``."""
    entry = _entry_for(scheme_of(url))
    try:
        return importlib.import_module(f"{entry.package}.{flavour}")
    except ModuleNotFoundError as exc:
        if exc.name and not exc.name.startswith("tenure"):
            install = f"pip install 'tenure[{entry.extra}]'" if entry.extra else "install it"
            raise ConfigurationError(
                f"the {scheme_of(url)!r} backend needs the {exc.name!r} package: {install}"
            ) from exc
        raise


def redact(url: str) -> str:
    """The URL with any password replaced by ``***``: URLs carry credentials."""
    try:
        parts = urllib.parse.urlsplit(url)
    except ValueError:
        return "<unparsable URL>"
    # Multi-host URLs (redlock://a:1,b:2) defeat urlsplit's port parsing but not its netloc.
    userinfo, at, hosts = parts.netloc.rpartition("@")
    if not at or ":" not in userinfo:
        return url
    user = userinfo.split(":", 1)[0]
    return urllib.parse.urlunsplit(parts._replace(netloc=f"{user}:***@{hosts}"))
