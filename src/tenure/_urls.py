"""Which backend a URL names, the default URL, and URLs safe to print."""

from __future__ import annotations

import importlib
import os
import pathlib
import re
import urllib.parse
from collections.abc import Mapping
from types import ModuleType

from tenure._errors import ConfigurationError, InvalidArgumentType
from tenure._hosts import split_hosts, split_location
from tenure._registry import (
    BackendEntry,
    builtin_backends,
    entry_for_scheme,
    extra_requirements,
    unmet_floors,
    unmet_implementation_floors,
)

__all__ = [
    "default_sqlite_path",
    "is_secret_option",
    "load_backend_module",
    "redact",
    "resolve_url",
    "scheme_of",
    "scrub",
    "scrub_error",
    "url_secrets",
]




def default_sqlite_path() -> pathlib.Path:
    """The per-user state file: the same for every process of this user, whatever its cwd.

    ``$XDG_STATE_HOME/tenure/locks.db``, else ``~/.local/state/tenure/locks.db``. A relative
    ``XDG_STATE_HOME`` is ignored, as the XDG Base Directory specification says: it would
    make the "per-user" file depend on the working directory, and two processes of one user
    would then not coordinate. Written here rather than taken from platformdirs, which uses
    a relative value as it is.
    """
    state_home = os.environ.get("XDG_STATE_HOME", "")
    if not os.path.isabs(state_home):
        try:
            state_home = str(pathlib.Path.home() / ".local" / "state")
        except RuntimeError as exc:  # no $HOME and no password-database entry
            raise ConfigurationError(
                "no place for the default SQLite file: neither XDG_STATE_HOME nor a home "
                "directory is set; set TENURE_URL (e.g. sqlite:///path/to/locks.db)"
            ) from exc
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
    if entry.extra is not None:
        # Before the import: a driver below its floor may import, then fail deep inside
        # the first call with a TypeError or AttributeError that names nothing useful.
        unmet = [(entry.extra, unmet_floors(entry.extra)),
                 *unmet_implementation_floors(entry.extra)]
        for extra, requirements in unmet:
            if requirements:
                raise ConfigurationError(
                    f"the {scheme_of(url)!r} backend needs {', '.join(requirements)}: "
                    f"pip install -U 'tenure[{extra}]'"
                )
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


SECRET_OPTION_WORDS = ("password", "passwd", "pwd", "secret", "token")
"""A query option (or key=value) whose name contains one of these carries a secret: libpq's
``password`` and ``sslpassword``, PyMySQL's ``passwd``, redis-py's ``ssl_password``,
PyMongo's ``tlsCertificateKeyFilePassword``; ``token`` and ``secret`` for what a driver may
add next. Matched case-insensitively."""
SECRET_OPTIONS = ("authmechanismproperties",)
"""Options that carry a secret under another name: PyMongo's ``authMechanismProperties``
holds ``AWS_SESSION_TOKEN:...``."""
_KEY_VALUE_SECRET = re.compile(
    r"(?i)(\b\w*(?:" + "|".join(SECRET_OPTION_WORDS) + r")\w*\s*=\s*)('(?:[^'\\]|\\.)*'|\S*)"
)


def redact(url: str) -> str:
    """The URL with every secret replaced by ``***``: each host's password field (a
    multi-host URL may give credentials per host) and the value of every query option that
    carries one (``SECRET_OPTION_WORDS``, ``SECRET_OPTIONS``); nothing else is changed.

    The one place URLs are made printable: every backend's ``describe()`` and every error
    that quotes a URL go through it. A URL whose credentials cannot be told apart keeps
    its hosts and loses every credential (``_redact_unparsed``); text that is not a URL (no
    ``scheme://``, such as a libpq ``key=value`` string) loses its ``password=`` values and
    anything before an ``@``."""
    scheme, separator, rest = url.partition("://")
    if not separator:
        hidden = _KEY_VALUE_SECRET.sub(r"\1***", url)
        if "@" in hidden:
            hidden = "***@" + hidden.rpartition("@")[2]
        return hidden
    location, query_mark, query = rest.partition("?")
    query = _redact_query(query)
    netloc, path = split_location(location)
    if "@" not in netloc:
        return f"{scheme}://{location}{query_mark}{query}"
    try:
        entries = split_hosts(netloc, "")
    except ConfigurationError:
        return f"{scheme}://{_redact_unparsed(netloc)}{path}{query_mark}{query}"
    hosts = []
    shared = len({entry.userinfo for entry in entries}) == 1 and netloc.count("@") == 1
    for index, entry in enumerate(entries):
        if entry.userinfo is None or (shared and index > 0):
            hosts.append(entry.address)
            continue
        user, colon, _ = entry.userinfo.partition(":")
        hosts.append(f"{user}{':***' if colon else ''}@{entry.address}")
    return f"{scheme}://{','.join(hosts)}{path}{query_mark}{query}"


def is_secret_option(name: str) -> bool:
    """Whether the option ``name`` (of a URL's query, or a ``connect()`` keyword) carries a
    secret: its value is never printed."""
    name = name.lower()
    return name in SECRET_OPTIONS or any(word in name for word in SECRET_OPTION_WORDS)


def _redact_query(query: str) -> str:
    """The query string with the value of each secret option replaced; the separators
    (``&``, and ``;`` which PyMongo also accepts), names and other values as written."""
    pieces = re.split(r"([&;])", query)
    for index in range(0, len(pieces), 2):
        key, equals, _ = pieces[index].partition("=")
        if equals and is_secret_option(urllib.parse.unquote_plus(key).strip()):
            pieces[index] = f"{key}=***"
    return "".join(pieces)


_HOST = re.compile(r"(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9._-]+)(:[0-9]*)?")


def _redact_unparsed(netloc: str) -> str:
    """The hosts of a location whose credentials ``split_hosts`` refused, for the message
    that says so: the user needs to see which hosts have credentials and which do not.

    Split at each ``,``: an item with an ``@`` shows ``***@`` and its host. An item without
    one is a host, or a piece of a user name or password holding an unencoded ``,`` (that
    is what makes such a URL ambiguous): it is shown only when it has the shape of a host
    and does not directly precede an item whose credentials lack the ``:`` that would end a
    user name (then it may be the ``user:pass`` start of them); otherwise ``***``."""
    items = netloc.split(",")
    suspect = [False] * len(items)
    for index, item in enumerate(items):
        userinfo, at, _ = item.rpartition("@")
        if at and ":" not in userinfo:
            before = index - 1
            while before >= 0 and "@" not in items[before]:
                suspect[before] = True
                before -= 1
    shown = []
    for index, item in enumerate(items):
        _, at, address = item.rpartition("@")
        if at:
            shown.append(f"***@{address}")
        elif not suspect[index] and _HOST.fullmatch(item.strip()):
            shown.append(item)
        else:
            shown.append("***")
    return ",".join(shown)


def url_secrets(url: str, options: Mapping[str, object] | None = None) -> tuple[str, ...]:
    """Every secret ``url`` and ``options`` carry, each as written and as decoded, longest
    first: the password of each host's user info, the value of each secret query option
    (``is_secret_option``) and of each secret keyword option (a ``str``, or ``bytes``).

    For ``scrub``: a driver or parser message may quote any of them (libpq's "invalid
    percent-encoded token" quotes a password as it was written), in a form ``redact`` never
    sees. Also read from a URL whose credentials cannot be told apart: there each
    ``,``-piece of them counts, with the whole."""
    found: set[str] = set()

    def add(value: str) -> None:
        for form in (value, urllib.parse.unquote(value), urllib.parse.unquote_plus(value)):
            if form.strip():
                found.add(form)

    _, separator, rest = url.partition("://")
    location, _, query = (rest if separator else url).partition("?")
    credentials = split_location(location)[0].rpartition("@")[0]
    if credentials:
        try:
            entries = split_hosts(split_location(location)[0], "")
            userinfos = [entry.userinfo for entry in entries if entry.userinfo is not None]
        except ConfigurationError:  # each ','-piece may hold (a part of) a password
            add(credentials)
            userinfos = []
            for item in credentials.split(","):
                userinfo, at, _ = item.rpartition("@")
                piece = userinfo if at else item
                if at or not _HOST.fullmatch(item.strip()):
                    userinfos.append(piece if ":" in piece else f":{piece}")
        for userinfo in userinfos:
            _, colon, password = userinfo.partition(":")
            if colon:
                add(password)
    if not separator:  # libpq's key=value text: its password= values
        for match in _KEY_VALUE_SECRET.finditer(url):
            add(match.group(2).strip("'"))
    for piece in re.split(r"[&;]", query):
        key, equals, value = piece.partition("=")
        if equals and is_secret_option(urllib.parse.unquote_plus(key).strip()):
            add(value)
    for name, value in (options or {}).items():
        if not is_secret_option(name):
            continue
        if isinstance(value, bytes):
            add(value.decode("utf-8", "replace"))
        elif isinstance(value, str):
            add(value)
    return tuple(sorted(found, key=len, reverse=True))


def scrub(text: str, secrets: tuple[str, ...]) -> str:
    """``text`` with every occurrence of each of ``secrets`` replaced by ``***``: for a
    message that quotes a driver's or parser's words about a URL."""
    for secret in secrets:
        text = text.replace(secret, "***")
    return text


def scrub_error(exc: BaseException, secrets: tuple[str, ...]) -> None:
    """Make ``exc`` printable: each of ``secrets`` replaced in its message, and its chain
    (``__cause__``, ``__context__``) cut when a message there still shows one (a driver's
    exception may print more than its ``args``). The one net under every backend's URL
    and option parsing: ``connect`` passes what they raise through it."""
    if not secrets:
        return
    exc.args = tuple(scrub(arg, secrets) if isinstance(arg, str) else arg for arg in exc.args)
    seen: BaseException | None = exc
    while seen is not None:
        if any(secret in str(seen) for secret in secrets):
            exc.__cause__ = exc.__context__ = None
            exc.__suppress_context__ = True
            return
        seen = seen.__cause__ or seen.__context__
