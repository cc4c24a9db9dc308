"""Where tenure's records live in ZooKeeper, and how they are written.

    /{ns}/{kind}/{N}                 persistent; its data: the name's last fence (decimal)
    /{ns}/{kind}/{N}/t-{token}-{seq} ephemeral sequential, one per holder or waiter
    /{ns}/rwlock/{N}/r-{token}-{seq} the same for a read-write (or fair) lock's reader,
    /{ns}/rwlock/{N}/w-{token}-{seq} and for its writer

``{kind}`` is ``lock``, ``semaphore`` or ``rwlock``; ``{N}`` is the name percent-encoded
(every byte but letters, digits, ``-``, ``_`` and ``~``), a valid node name whatever the name
holds. ``{seq}`` is ZooKeeper's sequence number under ``{N}``: the order of arrival. A node's
data is JSON: who holds or waits (host, pid, thread), since when (the holder's clock), the
limit, and the ttl in milliseconds by which others judge it expired: ``mtime + ttl`` against
the server time of their own latest write; an election leader's ``value``, written by the
create or versioned set that grants the node, so it goes with the node; a semaphore
permit's ``weight``, the units of the limit it takes, on its waiter's node as on its grant
(absent: 1, as every node an older tenure wrote reads); and ``queued`` on a waiter's node,
which holds nothing even once it is first, until the versioned set that grants it, unless it
also says ``holds_at_head`` (a lock's waiter with no election value to write and a ttl at
least its place's): such a node holds the lock as soon as it is first, on the place's ttl
until its waiter, told by its watch, rewrites it as the holder's (``_async/attempt.py``,
"Granted at the head, written after"); and ``fence`` on a node a release re-created to keep
the name held a while (``_async/window.py``): the fence it stands for, its own ``czxid``
being newer; and ``fair`` on a read-write lock's node made by a fair lock, for ``inspect``
only (no grant reads it; a node without it, written by a tenure from before it, is a
read-write lock's).

A read-write lock's mode is in its nodes' names (kazoo's ReadLock and WriteLock name their
nodes apart too): a reader waiting finds the newest write node ahead of it from the list of
children alone, without reading every node's data.
"""

from __future__ import annotations

import dataclasses
import json
import time
import urllib.parse
from typing import Any

from tenure._types import Holder

__all__ = [
    "Record", "decode_name", "encode_name", "is_entry", "mode_of", "node_prefix", "sequence_of",
    "token_of", "written_as_holder",
]

_MODE_MARKS = {"read": "r", "write": "w"}
"""The first letter of a read-write lock's node names, by mode ("t" for the other kinds)."""
_MARKED_MODES = {mark: mode for mode, mark in _MODE_MARKS.items()}


def encode_name(name: str) -> str:
    return urllib.parse.quote(name, safe="").replace(".", "%2E")


def decode_name(node: str) -> str:
    return urllib.parse.unquote(node)


def node_prefix(token: str, mode: str | None = None) -> str:
    """The name a node is created with (``mode``: a read-write lock's); ZooKeeper appends
    ten digits of sequence."""
    return f"{'t' if mode is None else _MODE_MARKS[mode]}-{token}-"


def is_entry(node: str) -> bool:
    """Whether ``node`` is a holder's or waiter's node (made by ``node_prefix``)."""
    return node[:2] in ("t-", "r-", "w-")


def mode_of(node: str) -> str | None:
    """A read-write lock node's mode; None for a lock's or a semaphore's."""
    return _MARKED_MODES.get(node[:1])


def sequence_of(node: str) -> int:
    return int(node.rpartition("-")[2])


def token_of(node: str) -> str:
    return node[2:].rpartition("-")[0]


def written_as_holder(data: bytes, stat: Any) -> bool:
    """Whether a lock's node (its ``get`` answer) was written since it was made with a
    record of ours not marked queued: only a grant (or a renewal or election value after
    one) writes that, so its waiter found nothing ahead of it. A node at version 0 may be a
    first try's, refused; one whose data is not ours proves nothing."""
    try:
        fields = json.loads(data)
    except ValueError:
        return False
    return (
        stat.version >= 1 and isinstance(fields, dict) and "ttl_ms" in fields
        and fields.get("queued") is not True
    )


@dataclasses.dataclass(frozen=True)
class Record:
    holder: Holder
    since: float
    limit: int
    ttl_ms: int
    value: str | None = None
    queued: bool = False
    fence: int | None = None
    """The fence this node stands for when it is not its own ``czxid``: a holder's node
    re-created, persistent, by a release inside a ``hold_at_least`` window."""
    fair: bool = False
    """Written by a fair lock (a read-write lock's node otherwise)."""
    weight: int = 1
    """The units of the limit a semaphore permit (or its waiter's place) takes."""
    holds_at_head: bool = False
    """A queued lock waiter's node that holds the lock once it is first: its waiter takes
    the grant without a write first (``_async/attempt.py``, "Granted from the queue")."""

    def encode(self) -> bytes:
        fields: dict[str, Any] = {
            "host": self.holder.host, "pid": self.holder.pid, "thread": self.holder.thread,
            "since": self.since, "limit": self.limit, "ttl_ms": self.ttl_ms,
        }
        if self.value is not None:
            fields["value"] = self.value
        if self.queued:
            fields["queued"] = True
        if self.fence is not None:
            fields["fence"] = self.fence
        if self.fair:
            fields["fair"] = True
        if self.weight != 1:
            fields["weight"] = self.weight
        if self.holds_at_head:
            fields["holds_at_head"] = True
        return json.dumps(fields, separators=(",", ":")).encode()

    @classmethod
    def new(
        cls, holder: Holder, limit: int, ttl: float, *, value: str | None = None,
        queued: bool = False, fair: bool = False, weight: int = 1, holds_at_head: bool = False,
    ) -> Record:
        return cls(holder, time.time(), limit, max(1, round(ttl * 1000)), value, queued,
                   fair=fair, weight=weight, holds_at_head=holds_at_head)

    def with_ttl(self, ttl: float) -> Record:
        return dataclasses.replace(self, ttl_ms=max(1, round(ttl * 1000)))

    def fence_of(self, stat: Any) -> int:
        """The fence of the node this record was read from (``stat``: its stat)."""
        czxid: int = stat.czxid
        return czxid if self.fence is None else self.fence

    @classmethod
    def decode(cls, data: bytes) -> Record:
        try:
            fields: dict[str, Any] = json.loads(data)
            return cls(
                Holder(str(fields["host"]), int(fields["pid"]), str(fields["thread"])),
                float(fields["since"]), int(fields["limit"]), int(fields["ttl_ms"]),
                None if fields.get("value") is None else str(fields["value"]),
                fields.get("queued") is True,
                None if fields.get("fence") is None else int(fields["fence"]),
                fields.get("fair") is True,
                max(1, int(fields.get("weight", 1))),
                fields.get("holds_at_head") is True,
            )
        except (ValueError, KeyError, TypeError):
            # Not ours: never judged expired by us, shown as unknown.
            return cls(Holder("?", 0, "?"), 0.0, 0, 2**62)
