"""Where tenure's records live in etcd, and how they are written.

    {ns}/lock/{N}/{client}.{index}  one key per holder or waiter of the lock N: a name
                                    this client reuses acquisition after acquisition
                                    (``_slots``)
    {ns}/semaphore/{N}/{token}      the same for a semaphore, named by the token
    {ns}/rwlock/{N}/{mode}.{token}  the same for a read-write (or fair) lock: mode is
                                    ``read`` or ``write``
    {ns}/{kind}.fence/{N}/          the last fence granted (for ``inspect`` after release):
                                    its value, or its mod revision when the value is empty
                                    (written by the granting transaction: ``backend``)

``{kind}`` is ``lock``, ``semaphore`` or ``rwlock``; ``{N}`` is the name with ``%`` and ``/``
percent-escaped, so that one name's keys never fall inside another's range (``a/b`` is
``a%2Fb``) and a listing by name prefix is one key range. ``{token}`` is the acquisition's
random token; a lock's ``{client}.{index}`` is random per client and process, and the index
the smallest this client does not use for N right now (``_slots``: why, and why safe). The
value is JSON: who holds it (host, pid, thread), since when (the holder's
clock: etcd has no clock to read), the limit it was taken with, the ttl asked for (its lease
is up to a second longer: ``inspect`` reports at most the ttl), an election leader's
``value`` (written in the granting transaction, so it lives and dies with the key and its
lease), and ``queued`` on a waiter's key, which holds nothing even once it is the oldest,
until it moves onto its own lease in the transaction that grants it. A semaphore's key
(a permit's or a waiter's) names its ``weight`` when above 1 (none: 1). A read-write lock's
key (a holder's or a waiter's) made by a fair lock says ``fair``, for ``inspect`` only (no
grant reads it; a key without it, written by a tenure from before it, is a read-write
lock's).

Each key is attached to an etcd lease. The name is granted to its ``limit`` oldest keys by
creation revision; the others are waiting, first in, first out. A key's creation revision is
the fence: it is the cluster's global revision at the write, so it strictly increases per
name, never goes back (it survives restarts and leader changes: Raft log), and grant order is
creation order.

A read-write lock's mode is in its keys' names rather than in their values, so that the write
keys of a name are one key range (``{N}/write.``): a transaction can then compare "no write
key at all" (a reader's first try) or "no key at all" (a writer's) in the same atomic step
that writes the key, which a mode kept in the JSON value would not allow.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import time
from typing import Any

from tenure._types import Holder

__all__ = ["Record", "b64", "entry_name", "mode_of", "name_prefix", "prefix_end", "unb64"]


def b64(data: str | bytes) -> str:
    raw = data.encode() if isinstance(data, str) else data
    return base64.b64encode(raw).decode("ascii")


def unb64(text: str) -> bytes:
    return base64.b64decode(text)


def _escape(name: str) -> str:
    return name.replace("%", "%25").replace("/", "%2F")


def _unescape(escaped: str) -> str:
    return escaped.replace("%2F", "/").replace("%25", "%")


def kind_prefix(namespace: str, kind: str) -> str:
    return f"{namespace}/{kind}/"


def name_prefix(namespace: str, kind: str, name: str) -> str:
    """Every key of one name starts with this (and no key of another name does)."""
    return f"{kind_prefix(namespace, kind)}{_escape(name)}/"


def list_prefix(namespace: str, kind: str, prefix: str) -> str:
    """Every key of every name starting with ``prefix`` starts with this."""
    return kind_prefix(namespace, kind) + _escape(prefix)


def split_key(namespace: str, kind: str, key: str) -> tuple[str, str]:
    """(name, token) of a key under ``kind_prefix``."""
    escaped, _, token = key[len(kind_prefix(namespace, kind)):].rpartition("/")
    return _unescape(escaped), token


def entry_name(mode: str, token: str) -> str:
    """The last segment of a read-write lock's key: its mode, then its token."""
    return f"{mode}.{token}"


def mode_of(entry: str) -> str:
    """The mode of a read-write lock's key, from its last segment (``entry_name``)."""
    return entry.partition(".")[0]


def prefix_end(prefix: str) -> str:
    """The end of the key range of everything starting with ``prefix`` (etcd's rule: the
    prefix with its last byte incremented). Our prefixes end in printable ASCII."""
    return prefix[:-1] + chr(ord(prefix[-1]) + 1)


@dataclasses.dataclass(frozen=True)
class Record:
    holder: Holder
    since: float
    limit: int
    value: str | None = None
    queued: bool = False
    ttl: float | None = None
    """The ttl asked for (None: a waiter's key, or a record written before it was kept): the
    lease lasts up to a second longer (whole seconds), ``inspect`` reports at most this."""
    fair: bool = False
    """Written by a fair lock (a read-write lock's key otherwise)."""
    weight: int = 1
    """The units of a semaphore's limit the permit (or its waiter) takes; written only when
    above 1, and a key without it (1, or written by a tenure from before weights) reads 1."""

    def encode(self) -> str:
        fields: dict[str, Any] = {
            "host": self.holder.host, "pid": self.holder.pid, "thread": self.holder.thread,
            "since": self.since, "limit": self.limit,
        }
        if self.value is not None:
            fields["value"] = self.value
        if self.queued:
            fields["queued"] = True
        if self.ttl is not None:
            fields["ttl"] = self.ttl
        if self.fair:
            fields["fair"] = True
        if self.weight != 1:
            fields["weight"] = self.weight
        return b64(json.dumps(fields, separators=(",", ":")))

    @classmethod
    def new(
        cls, holder: Holder, limit: int, *, value: str | None = None, queued: bool = False,
        ttl: float | None = None, fair: bool = False, weight: int = 1,
    ) -> Record:
        return cls(holder, time.time(), limit, value, queued, ttl, fair, weight)

    @classmethod
    def decode(cls, value: str) -> Record:
        try:
            data: dict[str, Any] = json.loads(unb64(value))
            return cls(
                Holder(str(data["host"]), int(data["pid"]), str(data["thread"])),
                float(data["since"]),
                int(data["limit"]),
                None if data.get("value") is None else str(data["value"]),
                data.get("queued") is True,
                None if data.get("ttl") is None else float(data["ttl"]),
                data.get("fair") is True,
                max(1, int(data.get("weight", 1))),
            )
        except (ValueError, KeyError, TypeError):
            # Not ours (written by hand?): show it, never crash a listing.
            return cls(Holder("?", 0, "?"), 0.0, 0)
