"""The host list of a multi-host URL (``redlock://``, ``redis+cluster://``,
``redis+sentinel://``, ``etcd://``, ``zookeeper://``), with the credentials given either once,
before every host (``scheme://user:pw@h1:1,h2:2``), or before each host
(``scheme://user:pw@h1:1,user:pw@h2:2``).

One parser for all of them, because the obvious one is wrong: splitting the location at its
last ``@`` turns ``redlock://:pw@a:1,:pw@b:2,:pw@c:3`` into ONE host (``c:3``) whose password
is ``pw@a:1,:pw@b:2,:pw`` -- a one-node "Redlock" that looks like it works. Anything that
can be read two ways is refused with a ConfigurationError instead.
"""

from __future__ import annotations

import dataclasses

from tenure._errors import ConfigurationError

__all__ = ["HostEntry", "shared_credentials", "split_hosts", "split_location"]


@dataclasses.dataclass(frozen=True)
class HostEntry:
    userinfo: str | None
    """``user:password`` as written (still percent-encoded), or None when not given."""
    address: str
    """``host[:port]`` as written."""


def split_location(location: str) -> tuple[str, str]:
    """``hosts-with-credentials`` and the path after them (``/0``, ``/service``), split at
    the first ``/`` after the last ``@`` (a ``/`` is allowed in a password, not in a host)."""
    credentials, at, rest = location.rpartition("@")
    hosts, slash, path = rest.partition("/")
    return credentials + at + hosts, slash + path


def split_hosts(netloc: str, display: str) -> list[HostEntry]:
    """Every host of ``netloc``, each with the credentials that apply to it."""
    items = netloc.split(",")
    parts = [item.rpartition("@") for item in items]
    with_credentials = [index for index, (_, at, _) in enumerate(parts) if at]
    if not with_credentials:
        return [HostEntry(None, item) for item in items]
    if with_credentials == [0]:  # once, before every host
        shared = parts[0][0]
        return [HostEntry(shared, parts[0][2])] + [HostEntry(shared, item) for item in items[1:]]
    if len(with_credentials) == len(items):  # before each host
        return [HostEntry(userinfo, address) for userinfo, _, address in parts]
    raise ConfigurationError(
        f"cannot tell which credentials go with which host in {display!r}: give them once "
        "before every host (scheme://user:password@host1,host2) or before each host "
        "(scheme://user:password@host1,user:password@host2); a ',' or '@' in a user name or "
        "password must be percent-encoded (%2C, %40)"
    )


def shared_credentials(netloc: str, display: str, backend: str) -> tuple[str | None, list[str]]:
    """For a backend that logs in once for all its hosts: the one ``user:password`` (or
    None) and the addresses. Different credentials per host are refused."""
    entries = split_hosts(netloc, display)
    found = {entry.userinfo for entry in entries}
    if len(found) > 1:
        raise ConfigurationError(
            f"{backend} uses one set of credentials for all its hosts, but {display!r} gives "
            "different ones"
        )
    return found.pop(), [entry.address for entry in entries]
