"""The ZooKeeper URL forms and options.

    zookeeper://host:port[,host:port...][/chroot][?namespace=tenure&timeout=5]
    zk://user:password@host:port,...          (digest authentication)

``gc_after`` (seconds, default 10 minutes; ``none``: for ever): how long an idle name's node
(its last fence, for ``inspect``) is kept after its last holder or waiter went.

``/chroot`` is ZooKeeper's own: every path of this client lives under it. ``namespace`` is
the first node tenure writes under the chroot.
"""

from __future__ import annotations

import dataclasses
import urllib.parse
from typing import Any

from tenure._errors import ConfigurationError
from tenure._hosts import shared_credentials, split_location
from tenure._options import (
    DEFAULT_GC_AFTER,
    gc_after_option,
    merged_options,
    namespace_option,
    number_option,
)
from tenure._urls import redact

__all__ = ["ZooKeeperSettings", "parse"]

DEFAULT_PORT = 2181
OPTIONS = ("namespace", "timeout", "session_timeout", "gc_after")


@dataclasses.dataclass(frozen=True)
class ZooKeeperSettings:
    hosts: str
    """kazoo's connection string: ``host:port,host:port/chroot``."""
    namespace: str = "tenure"
    timeout: float = 5.0
    """Seconds for each request's reply, and for connecting."""
    session_timeout: float = 10.0
    """The ZooKeeper session's timeout: a client silent this long loses its session, and
    every node it holds with it (the server may clamp it to its tickTime bounds)."""
    auth: tuple[str, str] | None = dataclasses.field(default=None, repr=False)
    display: str = ""
    gc_after: float | None = DEFAULT_GC_AFTER
    """Seconds an idle name's node (its last fence, for ``inspect``) is kept after its last
    holder or waiter went (None: for ever); see ``_async/sweep``."""


def parse(url: str, options: dict[str, Any]) -> ZooKeeperSettings:
    display = redact(url)
    scheme, _, rest = url.partition("://")
    if scheme.lower() not in ("zookeeper", "zk"):
        raise ConfigurationError(f"not a ZooKeeper URL: {display!r}")
    rest, _, query_text = rest.partition("?")
    netloc, chroot = split_location(rest)
    chroot = chroot.removeprefix("/")
    userinfo, addresses = shared_credentials(netloc, display, "ZooKeeper")
    auth = None
    if userinfo is not None:
        user, colon, secret = userinfo.partition(":")
        if not user or not colon:
            raise ConfigurationError(
                f"ZooKeeper credentials are user:password (digest): {display!r}"
            )
        auth = (urllib.parse.unquote(user), urllib.parse.unquote(secret))
    members = []
    for host in addresses:
        try:
            parts = urllib.parse.urlsplit(f"//{host}")
            port = parts.port or DEFAULT_PORT
        except ValueError as exc:
            raise ConfigurationError(
                f"bad ZooKeeper member {host!r} in {display!r}: {exc}"
            ) from None
        if not parts.hostname:
            raise ConfigurationError(f"a ZooKeeper URL needs host:port members: {display!r}")
        members.append(f"{parts.hostname}:{port}")
    chroot = chroot.rstrip("/")
    merged = merged_options("ZooKeeper", query_text, options, OPTIONS)
    namespace = namespace_option("ZooKeeper", merged.get("namespace", "tenure"))
    return ZooKeeperSettings(
        hosts=",".join(members) + (f"/{chroot}" if chroot else ""),
        namespace=namespace,
        timeout=number_option("zookeeper", "timeout", merged.get("timeout", 5.0),
                              unit=" seconds", above=0, at_most=3600),
        session_timeout=number_option(
            "zookeeper", "session_timeout", merged.get("session_timeout", 10.0),
            unit=" seconds", at_least=1, at_most=3600,
        ),
        auth=auth,
        display=display,
        gc_after=gc_after_option("ZooKeeper", merged.get("gc_after", DEFAULT_GC_AFTER)),
    )
