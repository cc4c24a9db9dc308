"""Which backend a URL names, the default URL, and URLs safe to print."""

from __future__ import annotations

import importlib
import os
import pathlib
import urllib.parse
from types import ModuleType

from tenure._errors import ConfigurationError, InvalidArgumentType
from tenure._registry import BackendEntry, builtin_backends, entry_for_scheme, extra_requirements

__all__ = [
    "default_sqlite_path",
    "load_backend_module",
    "redact",
    "resolve_url",
    "scheme_of",
]




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
    entry = entry_for_scheme(scheme)
    if entry is None:
        known = ", ".join(sorted(builtin_backends()))
        raise ConfigurationError(f"unknown URL scheme {scheme!r}; tenure knows: {known}")
    return entry


def load_backend_module(url: str, flavour: str) -> ModuleType:
    """Import the ``_async`` or ``_sync`` module of the backend serving ``url``."""
    entry = _entry_for(scheme_of(url))
    try:
        return importlib.import_module(f"{entry.package}.{flavour}")
    except ModuleNotFoundError as exc:
        if exc.name and not exc.name.startswith("tenure"):
            raise ConfigurationError(_missing_driver(scheme_of(url), entry, exc.name)) from exc
        raise


def _missing_driver(scheme: str, entry: BackendEntry, module: str) -> str:
    """Name what to install by the extra and its PyPI projects, never by the module that
    failed to import: that may belong to another project (``bson`` comes with pymongo, and
    the PyPI project called ``bson`` breaks it)."""
    if entry.extra is None:  # a third-party backend: only its module's name is known
        return f"the {scheme!r} backend needs the module {module!r}, which is not installed"
    needs = ", ".join(extra_requirements(entry.extra)) or f"the {entry.extra} driver"
    return (
        f"the {scheme!r} backend needs {needs} (module {module.partition('.')[0]!r} is not "
        f"installed): pip install 'tenure[{entry.extra}]'"
    )


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
