"""Redlock URLs and options, parsed once into ``RedlockSettings`` for both flavours.

    redlock://[[user]:password@]host[:port],host[:port],...[/db][?option=value&...]

Every node gets the same credentials, database and options. For per-node settings (TLS on
some, a unix socket, a password each) name the nodes with the keyword form instead:

    tenure.connect("redlock://", nodes=[
        "redis://10.0.0.1:6379/0",
        {"url": "rediss://10.0.0.2:6380/0", "ssl_ca_certs": "/etc/ca.pem"},
        {"url": "unix:///run/redis.sock", "password": "..."},
    ], socket_timeout=0.1)

Each node is parsed by the Redis backend's own parser (``tenure.backends.redis._config``),
so every Redis option is accepted, once for all nodes (query or keyword) and per node (its
URL's query or its dict; the most specific wins). Redlock's own options: ``clock_drift_rate``
(default 0.01) and ``clock_drift_margin`` (seconds, default 0.002), see ``_quorum``, and
``gc_after`` (seconds, default 10 minutes; ``none`` keeps records forever), once for all
nodes: how long each node keeps a name's record past the end of its last lease there (see
``_scripts``: fences never go back when it goes).

Node timeouts are short by default (``socket_timeout`` and ``socket_connect_timeout`` 0.2 s,
not the Redis backend's 3 s): every operation waits for all nodes, so one dead node costs
every operation this long, and a lease's validity is what is left of the ttl afterwards.
On a WAN raise them, and keep them well under the ttl.
"""

from __future__ import annotations

import dataclasses
import urllib.parse
from collections.abc import Mapping
from typing import Any

from tenure._errors import ConfigurationError
from tenure._hosts import split_hosts, split_location
from tenure._options import DEFAULT_GC_AFTER, gc_after_option, number_option
from tenure._urls import redact
from tenure.backends.redis._config import RedisSettings
from tenure.backends.redis._config import parse as parse_redis
from tenure.backends.redlock._quorum import DRIFT_MARGIN, DRIFT_RATE

__all__ = ["DEFAULT_NODE_OPTIONS", "RedlockSettings", "parse"]

DEFAULT_NODE_OPTIONS: dict[str, Any] = {"socket_timeout": 0.2, "socket_connect_timeout": 0.2}
NODE_SCHEMES = ("redis", "rediss", "unix")
MIN_NODES = 3
"""Fewer independent nodes give a quorum no fault tolerance (see ``parse``)."""
IGNORED_REDIS_OPTIONS = ("handoff_window", "wait_connections")
"""Options of the Redis backend that Redlock does not use (its waiting): refused, not
ignored. ``gc_after`` is Redlock's own, for all nodes at once (a per-node one is refused:
every node must keep a name's record alike)."""


@dataclasses.dataclass(frozen=True)
class RedlockSettings:
    nodes: tuple[RedisSettings, ...]
    namespace: str
    drift_rate: float
    drift_margin: float
    display: str
    """The URL (or the nodes' URLs) without passwords."""
    gc_after: float | None = DEFAULT_GC_AFTER
    """Seconds each node keeps a name's record (its fence counter) past the end of its last
    lease there (None: forever); see ``_scripts``."""


def _query(query: str, display: str) -> dict[str, Any]:
    try:
        pairs = urllib.parse.parse_qsl(query, keep_blank_values=True, strict_parsing=bool(query))
    except ValueError:
        raise ConfigurationError(f"malformed query string in {display!r}") from None
    found: dict[str, Any] = {}
    for key, value in pairs:
        if key in found:
            raise ConfigurationError(f"option {key} given twice in {display!r}")
        if key.endswith("password"):
            raise ConfigurationError(
                f"pass {key} as a keyword argument or in the URL's user info, not the query"
            )
        found[key] = value
    return found


def _node_specs(nodes: object) -> list[tuple[str, dict[str, Any]]]:
    if isinstance(nodes, str | bytes) or not hasattr(nodes, "__iter__"):
        raise ConfigurationError(
            "nodes must be a list of Redis URLs or of dicts {'url': ..., option: value}"
        )
    specs: list[tuple[str, dict[str, Any]]] = []
    for node in nodes:
        if isinstance(node, str):
            specs.append((node, {}))
        elif isinstance(node, Mapping) and isinstance(node.get("url"), str):
            specs.append((node["url"], {k: v for k, v in node.items() if k != "url"}))
        else:
            raise ConfigurationError(
                f"each Redlock node is a Redis URL or a dict with a 'url' key, not {node!r}"
            )
    return specs


def parse(url: str, options: dict[str, Any]) -> RedlockSettings:
    """Parse a ``redlock://`` URL and ``connect()``'s keywords; ConfigurationError names the
    problem."""
    display = redact(url)
    scheme, separator, rest = url.partition("://")
    if not separator or scheme.lower() != "redlock":
        raise ConfigurationError(f"not a Redlock URL: {display!r}")
    location, _, query = rest.partition("?")
    if "#" in rest:
        raise ConfigurationError(f"Redlock URLs take no #fragment: {display!r}")
    common = _query(query, display)
    options = dict(options)
    nodes_option = options.pop("nodes", None)
    common.update(options)
    drift_rate = number_option("redlock", "clock_drift_rate",
                               common.pop("clock_drift_rate", DRIFT_RATE), at_least=0, below=0.5)
    drift_margin = number_option("redlock", "clock_drift_margin",
                                 common.pop("clock_drift_margin", DRIFT_MARGIN),
                                 unit=" seconds", at_least=0, below=60)
    for name in IGNORED_REDIS_OPTIONS:
        if name in common:
            raise ConfigurationError(f"redlock does not use the redis option {name}")
    gc_after = gc_after_option("redlock", common.pop("gc_after", DEFAULT_GC_AFTER))

    hosts, path = split_location(location)
    path = path.removeprefix("/")
    if nodes_option is not None:
        if hosts or path:
            raise ConfigurationError(
                "name the Redlock nodes either in the URL or with nodes=..., not both: "
                f"{display!r}"
            )
        specs = _node_specs(nodes_option)
    else:
        if not hosts:
            raise ConfigurationError(
                f"no nodes in Redlock URL {display!r}: redlock://host1:6379,host2:6379,host3:6379"
            )
        # Each node is an independent server: each may have its own credentials.
        specs = [
            (f"redis://{entry.userinfo + '@' if entry.userinfo is not None else ''}"
             f"{entry.address.strip()}/{path}", {})
            for entry in split_hosts(hosts, display)
        ]
    if len(specs) < MIN_NODES:
        raise ConfigurationError(
            f"a Redlock needs at least {MIN_NODES} independent nodes, not {len(specs)} "
            f"({display!r}): with fewer, one node's failure stops every lock (with 2) or a "
            "lock rests on one server (with 1), and the quorum buys nothing; for one server, "
            "use redis://host:port"
        )

    nodes: list[RedisSettings] = []
    for node_url, node_options in specs:
        node_scheme = node_url.partition("://")[0].lower()
        if node_scheme not in NODE_SCHEMES:
            raise ConfigurationError(
                f"a Redlock node is one independent master (redis://, rediss://, unix://), "
                f"not {redact(node_url)!r}"
            )
        base, _, node_query = node_url.partition("?")
        merged = {
            **DEFAULT_NODE_OPTIONS,
            **common,
            **_query(node_query, redact(node_url)),
            **node_options,
        }
        for name in (*IGNORED_REDIS_OPTIONS, "gc_after"):
            if name in merged:
                scope = "" if name in IGNORED_REDIS_OPTIONS else " per node (give it once)"
                raise ConfigurationError(f"redlock does not use the redis option {name}{scope}")
        nodes.append(parse_redis(base, merged))

    namespaces = {node.namespace for node in nodes}
    if len(namespaces) > 1:
        raise ConfigurationError(f"every Redlock node needs the same namespace, not {namespaces}")
    seen: set[tuple[Any, ...]] = set()
    for node in nodes:
        where = (node.addresses, node.unix_path, node.db)
        if where in seen:
            # One server counted twice would let a minority of real servers make a majority.
            raise ConfigurationError(f"Redlock node {node.display!r} is listed twice")
        seen.add(where)
    if nodes_option is not None:
        display = "redlock://(" + ", ".join(node.display for node in nodes) + ")"
    return RedlockSettings(
        nodes=tuple(nodes),
        namespace=nodes[0].namespace,
        drift_rate=drift_rate,
        drift_margin=drift_margin,
        display=display,
        gc_after=gc_after,
    )
